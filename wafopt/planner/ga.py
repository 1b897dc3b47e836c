"""The global improvement phase: a pymoo GA over whole plans with WATOS's operators (Sec. IV-D,
Fig. 12), seeded from the best composed plans of the best layouts.

Operators (each child is repaired into a feasible plan, or dropped in favour of its parent):
- Op0 layout change: take the composed plan of another good layout (another tp, pp, dp);
- Op1 R variation: recompute a unit in more or fewer layers of one stage;
- Op2 R crossover: a stage takes the other parent's recomputation beyond a chosen operator unit;
- Op3 placement variation: swap the die groups of two stages;
- Op4 A variation: move part of a Sender's offload to its lowest-cost Helper with spare DRAM;
- Op5 A crossover: two Senders exchange their Helpers;
- Op6 layer move (WATOS's Op2): one layer moves from a stage to a neighbouring stage (the split
  stays contiguous; recompute rows are clamped to the new layer counts).
Repair: after Op1-Op3 and Op6 the offloads are re-derived (Sender/Helper split and the Mem_pair
transportation optimum); a plan that still does not fit is replaced by its parent.
Survival keeps the omega share of elites and fills the rest by binary tournament (WATOS omega).
Fitness is the shared evaluator's iteration time. Seeded through pymoo's random_state; the run
ends after a fixed number of generations (or the deadline), so equal seeds give equal plans.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from wafopt.core.errors import InstanceError
from wafopt.core.numeric import close
from wafopt.costmodel.scenario import Choice, Parallel
from wafopt.problems import evaluate

POP_SIZE = 12
GENERATIONS = 25
STALL_GENERATIONS = 8
SEED_LAYOUTS = 4     # layouts whose composed plans seed the population (Op0 draws from them)
INFEASIBLE = math.inf


class Plans:
    """Evaluation and repair of whole plans, memoized by their JSON form."""

    def __init__(self, scenario):
        from wafopt.planner.compose import fixed_scenario

        self.scenario = scenario
        self.fixed = {}
        self.fixed_scenario = fixed_scenario
        self.cache: dict[str, float] = {}

    def fs(self, plan: dict):
        """The plan's layout, micro-batch size and layer split as the kernels' scenario."""
        layers = tuple(plan["layers"]) if plan.get("layers") else None
        key = (plan["tp"], plan["pp"], plan["dp"], plan.get("micro_batch"), layers)
        if key not in self.fixed:
            self.fixed[key] = self.fixed_scenario(self.scenario, Parallel(*key[:3]), key[3], layers)
        return self.fixed[key]

    def objective(self, plan: dict) -> float:
        import json

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
        from wafopt.planner.compose import mem_pair

        placement = {k: v for k, v in plan.items() if k not in ("recompute", "offload")}
        try:
            offload, _ = mem_pair(self.fs(plan), placement, plan["recompute"])
        except InstanceError:
            return None
        return dict(plan, offload=offload)


# --- the operators (rng: numpy Generator from pymoo's random_state) ---------------------------------

def op1_recompute(plans: Plans, plan: dict, rng) -> dict | None:
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
    if (a["tp"], a["pp"], a["dp"]) != (b["tp"], b["pp"], b["dp"]):
        return None
    layers = [s.layers for s in plans.fs(a).workload().stages]
    child = copy.deepcopy(a)
    i = int(rng.integers(a["pp"]))
    j = int(rng.integers(len(a["recompute"][i])))
    child["recompute"][i][j:] = [min(v, layers[i]) for v in b["recompute"][i][j:]]
    return plans.reoffload(child)


def op6_move_layer(plans: Plans, plan: dict, rng) -> dict | None:
    p = plan["pp"]
    if p < 2:
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
    slots = [(r, i) for r in range(plan["dp"]) for i in range(plan["pp"])]
    if len(slots) < 2:
        return None
    a, b = rng.choice(len(slots), 2, replace=False)
    (ra, ia), (rb, ib) = slots[int(a)], slots[int(b)]
    child = copy.deepcopy(plan)
    pipes = child["pipelines"]
    pipes[ra][ia], pipes[rb][ib] = pipes[rb][ib], pipes[ra][ia]
    return plans.reoffload(child)


def _helpers_spare(plans: Plans, plan: dict) -> dict:
    """Spare DRAM of every healthy die under the plan (capacity - memory after offloads)."""
    ev = evaluate("plan", plans.scenario, plan)
    if not ev.details:
        return {}
    spare = {tuple(d): plans.scenario.wafer.dram_capacity for d in plans.scenario.mesh().healthy_dies}
    for row in ev.details.get("memory", []):
        spare[tuple(row["die"])] = row["capacity"] - row["bytes"]
    return spare


def op4_mem_pair(plans: Plans, plan: dict, rng) -> dict | None:
    offload = plan.get("offload") or []
    if not offload:
        return None
    mesh = plans.scenario.mesh()
    child = copy.deepcopy(plan)
    k = int(rng.integers(len(offload)))
    record = child["offload"][k]
    spare = _helpers_spare(plans, plan)
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


def improve(scenario, search, run, omega: float) -> dict:
    """Run the GA from the best composed plans; offers every improvement to `search`."""
    from pymoo.algorithms.soo.nonconvex.ga import GA
    from pymoo.core.callback import Callback
    from pymoo.core.crossover import Crossover
    from pymoo.core.mutation import Mutation
    from pymoo.core.problem import Problem
    from pymoo.core.sampling import Sampling
    from pymoo.core.survival import Survival
    from pymoo.core.termination import Termination
    from pymoo.optimize import minimize

    from wafopt.planner import plan_key

    plans = Plans(scenario)
    seeds = sorted((o for o in search.outcomes.values() if o.plan is not None),
                   key=lambda o: (o.objective, o.layout))[:SEED_LAYOUTS]
    seeds = [o.plan for o in seeds]
    if search.plan is not None:
        seeds = [search.plan] + seeds
    if not seeds:
        return {}
    layouts = [plans.explicit(p) for p in seeds]
    counts = {"op0": 0, "op1": 0, "op2": 0, "op3": 0, "op4": 0, "op5": 0, "op6": 0, "repaired": 0, "dropped": 0}

    class WholePlans(Problem):
        def __init__(self):
            super().__init__(n_var=1, n_obj=1, vtype=object)

        def _evaluate(self, X, out, *args, **kwargs):   # past the deadline a plan is not evaluated
            out["F"] = np.array([[INFEASIBLE if run.stopped() else plans.objective(x[0])] for x in X])

    class Seeded(Sampling):
        def _do(self, problem, n_samples, random_state=None, **kwargs):
            X = np.empty((n_samples, 1), dtype=object)
            for k in range(n_samples):
                X[k, 0] = copy.deepcopy(layouts[k % len(layouts)])
            return X

    class RecomputeCrossover(Crossover):   # Op2 (same layout) or Op0 (the other parent's layout)
        def __init__(self):
            super().__init__(2, 1)

        def _do(self, problem, X, random_state=None, **kwargs):
            _, n_matings, _ = X.shape
            Y = np.empty((1, n_matings, 1), dtype=object)
            for k in range(n_matings):
                a, b = X[0, k, 0], X[1, k, 0]
                child = None if run.stopped() else op2_recompute_crossover(plans, a, b, random_state)
                counts["op2"] += 1
                if child is None:
                    child = copy.deepcopy(a)
                Y[0, k, 0] = child
            return Y

    class WatosMutation(Mutation):
        def _do(self, problem, X, random_state=None, **kwargs):
            for k in range(len(X)):
                parent = X[k, 0]
                op = int(random_state.integers(7))
                if run.stopped():
                    continue   # the parent stands in for its child
                counts[f"op{op}"] += 1
                if op == 0:
                    child = copy.deepcopy(layouts[int(random_state.integers(len(layouts)))])
                elif op == 1:
                    child = op1_recompute(plans, parent, random_state)
                elif op == 2:   # Op2 within one plan: two stages trade their tail of units
                    child = op2_recompute_crossover(plans, parent, _shifted(parent, random_state), random_state)
                elif op == 3:
                    child = op3_placement(plans, parent, random_state)
                elif op == 4:
                    child = op4_mem_pair(plans, parent, random_state)
                elif op == 5:
                    child = op5_mem_pair_crossover(plans, parent, random_state)
                else:
                    child = op6_move_layer(plans, parent, random_state)
                if child is not None and plans.objective(child) == INFEASIBLE and op in (4, 5):
                    child = plans.reoffload(child)
                    counts["repaired"] += 1
                if child is None or plans.objective(child) == INFEASIBLE:
                    counts["dropped"] += 1
                    child = parent
                X[k, 0] = child
            return X

    class OmegaSurvival(Survival):
        """The omega share of the best survive; binary tournaments fill the rest (WATOS omega)."""

        def __init__(self):
            super().__init__(filter_infeasible=False)

        def _do(self, problem, pop, *args, n_survive=None, random_state=None, **kwargs):
            F = pop.get("F")[:, 0]
            order = list(np.argsort(F, kind="stable"))
            elites = max(1, int(round(omega * n_survive)))
            keep, rest = order[:elites], order[elites:]
            while len(keep) < n_survive and rest:
                if len(rest) == 1:
                    keep.append(rest.pop())
                    break
                a, b = random_state.choice(len(rest), 2, replace=False)
                win = rest[a] if F[rest[a]] <= F[rest[b]] else rest[b]
                keep.append(win)
                rest.remove(win)
            return pop[keep]

    class Stop(Termination):
        def _update(self, algorithm):
            return 1.0 if run.stopped() else 0.0

    class Track(Callback):
        def __init__(self):
            super().__init__()
            self.stall, self.generations = 0, 0

        def notify(self, algorithm):
            self.generations += 1
            best = algorithm.opt[0]
            plan, value = best.X[0], float(best.F[0])
            before = search.objective
            offered = value < INFEASIBLE and search.offer(plan, value, plan_key(scenario, plan), "GA")
            if offered and (before is None or not close(value, before)):
                self.stall = 0   # a real improvement (float noise does not reset the stall count)
            else:
                self.stall += 1
            if self.stall >= STALL_GENERATIONS or self.generations >= GENERATIONS:
                algorithm.termination.force_termination = True

    track = Track()
    algorithm = GA(pop_size=POP_SIZE, sampling=Seeded(), crossover=RecomputeCrossover(), mutation=WatosMutation(),
                   survival=OmegaSurvival(), eliminate_duplicates=False)
    minimize(WholePlans(), algorithm, Stop(), seed=int(search.options.seed) % (2 ** 32), callback=track,
             verbose=False)
    return {"generations": track.generations, "evaluations": len(plans.cache), "omega": omega,
            "operators": counts}


def _shifted(plan: dict, rng) -> dict:
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
