"""WATOS's GA operators (Sec. IV-D, Fig. 12) on whole plans, and their evaluation and repair;
ga.py runs them in pymoo.

- Op0 layout change: take the composed plan of another good layout (another tp, pp, dp);
- Op1 R variation: recompute a unit in more or fewer layers of one stage;
- Op2 R crossover: a stage takes the other parent's recomputation beyond a chosen operator unit;
- Op3 placement variation: swap the die groups of two stages;
- Op4 A variation: move part of a Sender's offload to its lowest-cost Helper with spare DRAM;
- Op5 A crossover: two Senders exchange their Helpers;
- Op6 layer move (WATOS's Op2): one layer moves from a stage to a neighbouring stage (the split
  stays contiguous; recompute rows are clamped to the new layer counts).
Repair: after Op1-Op3 and Op6 the offloads are re-derived (Sender/Helper split and the Mem_pair
transportation optimum); after Op4-Op5 a plan that does not fit gets them re-derived too; a plan
that still does not fit is replaced by its parent. Survival keeps the omega share of elites and
fills the rest by binary tournament (WATOS omega). Every operator draws only from the rng it is
given, so equal seeds give equal plans.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np

from wafopt.core.errors import InstanceError
from wafopt.costmodel.scenario import Choice, Parallel
from wafopt.planner.compose import fixed_scenario, mem_pair
from wafopt.problems import evaluate

INFEASIBLE = math.inf
OPERATORS = 7   # Op0 .. Op6


class Plans:
    """Evaluation and repair of whole plans, memoized by their JSON form."""

    def __init__(self, scenario):
        self.scenario = scenario
        self.fixed: dict = {}   # plan's choice -> the kernels' scenario
        self.cache: dict[str, float] = {}

    def fs(self, plan: dict):
        """The plan's layout, micro-batch size and layer split as the kernels' scenario."""
        v = plan.get("interleave", self.scenario.fixed.interleave or 1)
        choice = Choice(Parallel(plan["tp"], plan["pp"], plan["dp"], v), micro_batch=plan.get("micro_batch"),
                        layers=plan.get("layers") or None)
        if choice not in self.fixed:
            self.fixed[choice] = fixed_scenario(self.scenario, choice)
        return self.fixed[choice]

    def objective(self, plan: dict) -> float:
        key = json.dumps(plan, sort_keys=True)
        if key not in self.cache:
            ev = evaluate("plan", self.scenario, plan)
            self.cache[key] = ev.objective if ev.feasible else INFEASIBLE
        return self.cache[key]

    def explicit(self, plan: dict) -> dict:
        """A copy whose recompute is one list of counts per stage (none -> zeros; "full" -> every
        recomputable unit in every layer), so the operators can edit it."""
        work = self.fs(plan).workload(Choice(schemes=plan.get("tp_scheme")))
        rows = plan.get("recompute") or [None] * plan["pp"]
        out = []
        for st, row in zip(work.stages, rows):
            if row is None:
                row = [0] * len(st.units)
            elif isinstance(row, str):
                row = [st.layers if u.recomputable else 0 for u in st.units]
            out.append([int(v) for v in row])
        return dict(copy.deepcopy(plan), recompute=out)

    def reoffload(self, plan: dict) -> dict | None:
        """The plan with its offloads re-derived for its placement and recomputation."""
        placement = {k: v for k, v in plan.items() if k not in ("recompute", "offload")}
        try:
            offload, _ = mem_pair(self.fs(plan), placement, plan["recompute"])
        except InstanceError:
            return None
        return dict(plan, offload=offload)


# --- the operators (rng: a numpy Generator, pymoo's random_state) -----------------------------------

def op0_layout_change(layouts: list, rng) -> dict:
    """Op0: a copy of the composed plan of one of the seed layouts."""
    return copy.deepcopy(layouts[int(rng.integers(len(layouts)))])


def op1_recompute(plans: Plans, plan: dict, rng) -> dict | None:
    """Op1: one recomputable unit of one stage recomputed in a few more or fewer layers."""
    if not plans.scenario.training.recompute:
        return None
    work = plans.fs(plan).workload()
    child = copy.deepcopy(plan)
    i = int(rng.integers(plan["pp"]))
    units = [j for j, u in enumerate(work.stages[i].units) if u.recomputable]
    j = units[int(rng.integers(len(units)))]
    layers = work.stages[i].layers
    step = int(rng.integers(1, max(2, layers // 4 + 1)))
    x = child["recompute"][i][j] + (step if rng.random() < 0.5 else -step)
    child["recompute"][i][j] = int(min(layers, max(0, x)))
    return plans.reoffload(child)


def op2_recompute_crossover(plans: Plans, a: dict, b: dict, rng) -> dict | None:
    """Op2: a copy of `a` whose stage i takes b's recomputation from unit j on (same layout only;
    clamped to a's layers)."""
    if (a["tp"], a["pp"], a["dp"]) != (b["tp"], b["pp"], b["dp"]):
        return None
    layers = [s.layers for s in plans.fs(a).workload().stages]
    child = copy.deepcopy(a)
    i = int(rng.integers(a["pp"]))
    j = int(rng.integers(len(a["recompute"][i])))
    child["recompute"][i][j:] = [min(v, layers[i]) for v in b["recompute"][i][j:]]
    return plans.reoffload(child)


def op6_move_layer(plans: Plans, plan: dict, rng) -> dict | None:
    """Op6: one layer moves from a stage to a neighbouring stage."""
    p = plan["pp"]
    if p < 2 or (plans.scenario.fixed.interleave or 1) > 1:   # interleaved stages stay equal
        return None
    layers = list(plan.get("layers") or [s.layers for s in plans.fs(plan).workload().stages])
    i = int(rng.integers(p))
    k = i + 1 if i == 0 or (i < p - 1 and rng.random() < 0.5) else i - 1
    if layers[i] <= 1:
        return None
    layers[i] -= 1
    layers[k] += 1
    child = dict(copy.deepcopy(plan), layers=layers)
    child["recompute"] = [[min(v, n) for v in row] for row, n in zip(child["recompute"], layers)]
    return plans.reoffload(child)


def op3_placement(plans: Plans, plan: dict, rng) -> dict | None:
    """Op3: two stages swap their die groups."""
    slots = [(r, i) for r in range(plan["dp"]) for i in range(plan["pp"])]
    if len(slots) < 2:
        return None
    a, b = rng.choice(len(slots), 2, replace=False)
    (ra, ia), (rb, ib) = slots[int(a)], slots[int(b)]
    child = copy.deepcopy(plan)
    pipes = child["pipelines"]
    pipes[ra][ia], pipes[rb][ib] = pipes[rb][ib], pipes[ra][ia]
    return plans.reoffload(child)


def helpers_spare(plans: Plans, plan: dict) -> dict:
    """Spare DRAM of every healthy die under the plan (capacity - memory after offloads)."""
    ev = evaluate("plan", plans.scenario, plan)
    if not ev.details:
        return {}
    spare = {tuple(d): plans.scenario.wafer.dram_capacity for d in plans.scenario.mesh().healthy_dies}
    for row in ev.details.get("memory", []):
        spare[tuple(row["die"])] = row["capacity"] - row["bytes"]
    return spare


def op4_mem_pair(plans: Plans, plan: dict, rng) -> dict | None:
    """Op4: part of one offload record moves to the sender's nearest die with spare DRAM that is
    not yet its helper."""
    offload = plan.get("offload") or []
    if not offload:
        return None
    mesh = plans.scenario.mesh()
    child = copy.deepcopy(plan)
    k = int(rng.integers(len(offload)))
    record = child["offload"][k]
    spare = helpers_spare(plans, plan)
    sender = tuple(record["sender"])
    used = {tuple(o["helper"]) for o in offload if tuple(o["sender"]) == sender}
    options = sorted((mesh.distance(sender, d), d) for d, s in spare.items()
                     if s > 0 and d != sender and d not in used)
    if not options:
        return None
    target = options[0][1]
    part = min(record["bytes"] * float(rng.uniform(0.1, 1.0)), spare[target])
    if part <= 0:
        return None
    record["bytes"] -= part
    child["offload"].append({"sender": list(sender), "helper": list(target), "bytes": part})
    child["offload"] = [o for o in child["offload"] if o["bytes"] > 0]
    return child


def op5_mem_pair_crossover(plans: Plans, plan: dict, rng) -> dict | None:
    """Op5: two senders exchange their helpers (bytes scaled to each sender's total)."""
    offload = plan.get("offload") or []
    senders = sorted({tuple(o["sender"]) for o in offload})
    if len(senders) < 2:
        return None
    a, b = (senders[int(k)] for k in rng.choice(len(senders), 2, replace=False))
    child = copy.deepcopy(plan)
    total = {s: sum(o["bytes"] for o in offload if tuple(o["sender"]) == s) for s in (a, b)}
    out = []
    for o in child["offload"]:
        s = tuple(o["sender"])
        if s in (a, b):   # the other sender's helpers, in proportion to this sender's need
            other = b if s == a else a
            o = dict(o, sender=list(other), bytes=o["bytes"] * total[other] / total[s])
        out.append(o)
    child["offload"] = [o for o in out if tuple(o["sender"]) != tuple(o["helper"])]
    return child


def mutate(plans: Plans, parent: dict, layouts: list, rng, counts: dict, stopped=lambda: False) -> dict:
    """One of Op0-Op6 at random on the parent, repaired; the parent itself when the child does not
    fit (or when stopped). `counts` tallies the operators, repairs and drops."""
    op = int(rng.integers(OPERATORS))
    if stopped():
        return parent   # the parent stands in for its child
    counts[f"op{op}"] += 1
    if op == 0:
        child = op0_layout_change(layouts, rng)
    elif op == 1:
        child = op1_recompute(plans, parent, rng)
    elif op == 2:   # Op2 within one plan: two stages trade their tail of units
        child = op2_recompute_crossover(plans, parent, shifted(parent, rng), rng)
    elif op == 3:
        child = op3_placement(plans, parent, rng)
    elif op == 4:
        child = op4_mem_pair(plans, parent, rng)
    elif op == 5:
        child = op5_mem_pair_crossover(plans, parent, rng)
    else:
        child = op6_move_layer(plans, parent, rng)
    if child is not None and plans.objective(child) == INFEASIBLE and op in (4, 5):
        child = plans.reoffload(child)
        counts["repaired"] += 1
    if child is None or plans.objective(child) == INFEASIBLE:
        counts["dropped"] += 1
        child = parent
    return child


def recombine(plans: Plans, a: dict, b: dict, rng, stopped=lambda: False) -> dict:
    """The crossover: Op2 between the parents (same layout), else a copy of the first parent."""
    child = None if stopped() else op2_recompute_crossover(plans, a, b, rng)
    return copy.deepcopy(a) if child is None else child


def omega_survivors(F, n_survive: int, omega: float, rng) -> list:
    """Indices of the survivors: the omega share of the best (at least one), then binary
    tournaments among the rest."""
    order = list(np.argsort(F, kind="stable"))
    elites = max(1, int(round(omega * n_survive)))
    keep, rest = order[:elites], order[elites:]
    while len(keep) < n_survive and rest:
        if len(rest) == 1:
            keep.append(rest.pop())
            break
        a, b = rng.choice(len(rest), 2, replace=False)
        win = rest[a] if F[rest[a]] <= F[rest[b]] else rest[b]
        keep.append(win)
        rest.remove(win)
    return keep


def shifted(plan: dict, rng) -> dict:
    """The plan with the recompute rows of two random stages swapped, so Op2 within one plan
    trades a stage's tail of units with another stage's (clamped to its layers)."""
    rows = plan["recompute"]
    child = copy.deepcopy(plan)
    n = len(rows)
    if n < 2:
        return child
    i, k = (int(v) for v in rng.choice(n, 2, replace=False))
    child["recompute"][i], child["recompute"][k] = list(rows[k]), list(rows[i])
    return child
