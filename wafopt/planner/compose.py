"""One layout (tp, pp, dp, and micro-batch size) composed into full training plans by the kernels,
in this order:

0. the layer split: the contiguous split that makes the busiest stage's compute least (the bound's
   DP over splits, embedding on the first stage and LM head on the last), the even split on ties;
1. placements: serpentine over every aligned tile shape (WATOS Fig. 11a), every assignment of
   stages to tiles where there are few, and free contiguous rings from the tatp kernel where
   tiles do not fit (odd or large tp, faulty dies), each also reshaped by simulated annealing so
   that the rings' traffic shares the fewest links (`untangle`); rings are chained stage after
   stage, each ring turned to face the previous one; both tensor-parallel schemes, Megatron with
   and without sequence parallelism where the scenario leaves it open; ranked by the evaluator
   without recomputation, the best four go on;
2. recomputation with DRAM pooled over all healthy dies (GCMR, WATOS Alg. 2, with idle dies as
   memory): the recompute kernel of the placement with the wafer's DRAM as its pooled capacity,
   the GCMR DP as the start of the MILP (exact where it closes in the budget);
3. Sender/Helper split and Mem_pair allocation (WATOS Alg. 3 made exact: the transportation
   optimum of the Mem_pair kernel, helpers being any healthy die with spare DRAM);
4. ring routing: TCME (the routing kernel) where a ring has steps over 1 hop or shared links;
   placement with Eq. 2 including those Mem_pair flows (the placement kernel with the pairs,
   exact where it closes in the budget, warm-started from the current placement), then 2-3 again
   on the new placement;
5. on the scenario's own fixed layout (or when nothing else was composed), the baselines of the
   layout (Megatron on the wafer, GCMR with stage-only pooling), so the planner's plan is never
   worse than theirs.
Every plan is evaluated by the shared evaluator; the best feasible one is the layout's result.
Everything here is deterministic for a given scenario, layout and seed unless a time limit cuts
a nested solve.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace

from wafopt.compose import methods as kernels
from wafopt.compose.gcmr import solve_gcmr
from wafopt.compose.placement import placement_cpsat
from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.costmodel.layout import split_layers
from wafopt.costmodel.plan_layout import placement_choice
from wafopt.costmodel.scenario import Choice, Parallel, Scenario
from wafopt.costmodel.stage_numbers import scheme_settings
from wafopt.heuristics import placement as placement_heuristics
from wafopt.heuristics import recompute as recompute_heuristics
from wafopt.heuristics import routing as routing_heuristics
from wafopt.heuristics import tatp as tatp_heuristics
from wafopt.heuristics.megatron import solve_megatron, solve_mg_wafer
from wafopt.planner.layout_data import layout_data
from wafopt.planner.space import choice_key
from wafopt.problems import evaluate
from wafopt.problems.mem_pair.instance import from_scenario as mem_pair_kernel
from wafopt.problems.mem_pair.plans import transport_chunks
from wafopt.problems.placement.instance import from_scenario as placement_kernel
from wafopt.problems.plan.layouts import (
    place_serpentine,
    serpentine_slots,
    tile_dies,
    tile_shapes,
)
from wafopt.problems.recompute.instance import from_scenario as recompute_kernel
from wafopt.problems.recompute.instance import plan_recompute
from wafopt.problems.routing.instance import from_scenario as routing_kernel
from wafopt.problems.tatp.instance import from_scenario as tatp_kernel

ENUMERATE_ASSIGNMENTS = 720   # every stage-to-tile assignment is tried (at no recomputation) up to this many
RANK_SHARE = 0.3              # of a layout's budget for ranking placements; the rest composes the best ones
COMPOSED = 4                  # ranked placements (with their schemes) composed per layout: the ranking is
#                               without recomputation, and on faulty wafers the 3rd or 4th often wins after it
RECOMPUTE_MILP_S = 4.0     # the recompute MILP per placement (after the DP start)
PLACEMENT_S = 3.0          # the Eq. 2 placement kernel per layout
RINGS_S = 3.0              # the tatp kernel's free rings per layout
ROUTING_S = 2.0            # TCME routing of the TP rings per composed plan
RING_METHODS = {"snake": tatp_heuristics.snake,   # tatp kernels for free rings: the fast baseline,
                "tiles": tatp_heuristics.tiles}   # then Hamiltonian blocks
TILES_MAX_TP = 16          # tatp `tiles` only up to this ring size (TEMP's sweet spot is 8-16; larger
#                            odd rings can keep it far beyond its time limit)
POOL_FACTORS = (1.0, 0.999, 0.99, 0.95)   # pooled capacity tried when chunk rounding breaks a fit


@dataclass
class Composition:
    """What composing one layout gave: its best plan (if any) and how it was found."""
    layout: tuple   # (tp, pp, dp) and the micro-batch size where the scenario allows several
    objective: float | None = None
    plan: dict | None = None
    how: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    evaluated: int = 0


def tp_schemes(scenario: Scenario, par: Parallel) -> tuple[str, ...]:
    """The tensor-parallel schemes that can split the model over tp dies (one is enough without TP)."""
    return scenario.tp_schemes(par.tp)


def fixed_scenario(scenario: Scenario, choice: Choice) -> Scenario:
    """The scenario with its layout fixed to the choice's (what the kernels derive from), and with
    the choice's micro-batch size and layer split as what its plans use by default."""
    par = choice.parallel
    fs = replace(scenario, parallel=par, fixed=replace(scenario.fixed, tp=par.tp, pp=par.pp, dp=par.dp,
                                                       interleave=par.interleave))
    if choice.micro_batch is None and choice.layers is None:
        return fs
    return fs.with_choice(choice)


def balanced_split(scenario: Scenario, choice: Choice) -> list[int] | None:
    """The contiguous split whose busiest stage computes least (None: the even split is that one,
    or the layout has no feasible split)."""
    d = layout_data(scenario, choice)
    if isinstance(d, str) or not d.balanced or d.balanced == split_layers(scenario.llm.layers, choice.parallel.pp):
        return None
    return d.balanced


def _as_lists(pipelines) -> list:
    return [[[list(d) for d in stage] for stage in pipe] for pipe in pipelines]


def _orient(mesh, previous: list, ring: list) -> list:
    """The rotation or reflection of `ring` (cyclic order kept) whose k-th die is closest to the
    k-th die of the previous stage: the Megatron scatter/gather pairs die k with die k."""
    n = len(ring)
    best, best_key = ring, None
    for seq in (ring, ring[::-1]):
        for r in range(n):
            cand = seq[r:] + seq[:r]
            dists = [mesh.distance(a, b) for a, b in zip(previous, cand)]
            key = (max(dists), sum(dists))
            if best_key is None or key < best_key:
                best, best_key = cand, key
    return best


def chain_rings(mesh, rings: list[list], pp: int, dp: int) -> list:
    """Rings into dp pipelines of pp stages: a nearest-neighbour chain by ring centre, starting at
    the ring nearest the origin; each ring oriented towards the previous one."""
    centre = [(sum(d[0] for d in r) / len(r), sum(d[1] for d in r) / len(r)) for r in rings]
    left = set(range(len(rings)))
    k = min(left, key=lambda i: (centre[i][0] + centre[i][1], centre[i]))
    order = [k]
    left.remove(k)
    while left:
        c = centre[order[-1]]
        k = min(left, key=lambda i: (abs(centre[i][0] - c[0]) + abs(centre[i][1] - c[1]), centre[i]))
        order.append(k)
        left.remove(k)
    pipes, it = [], iter(order)
    for _ in range(dp):
        stages = []
        for _ in range(pp):
            ring = [tuple(d) for d in rings[next(it)]]
            stages.append(_orient(mesh, stages[-1], ring) if stages else ring)
        pipes.append(stages)
    return pipes


def placements(fs: Scenario, options: SolveOptions, notes: list[str]) -> list[tuple[str, dict]]:
    """(label, placement plan) candidates of the layout: serpentine per tile shape, free rings."""
    par, mesh = fs.parallel, fs.mesh()
    out = []
    for h, w in tile_shapes(par.tp, mesh):
        pipes = place_serpentine(mesh, par, h, w)
        if pipes is not None:
            out.append((f"serpentine {h}x{w}", {"tp": par.tp, "pp": par.pp, "dp": par.dp, "tile": [h, w],
                                                 "pipelines": _as_lists(pipes)}))
        slots = serpentine_slots(mesh, h, w)
        n = par.pp * par.dp
        if len(slots) >= n and math.perm(len(slots), n) <= ENUMERATE_ASSIGNMENTS:
            for k, chosen in enumerate(itertools.permutations(slots, n)):   # every assignment: exact
                it = iter(chosen)
                pipes = [[tile_dies(next(it), h, w) for _ in range(par.pp)] for _ in range(par.dp)]
                out.append((f"tiles {h}x{w} #{k}", {"tp": par.tp, "pp": par.pp, "dp": par.dp, "tile": [h, w],
                                                     "pipelines": _as_lists(pipes)}))
    if par.tp > 1 and (not out or mesh.faulty_dies or mesh.faulty_links):
        for method, mapper in RING_METHODS.items():
            if options.stopped() or (method == "tiles" and par.tp > TILES_MAX_TP):
                continue
            try:
                inst = tatp_kernel(fs)
                res = mapper(inst, options.sub(RINGS_S))
            except InstanceError as exc:
                notes.append(f"no free rings: {exc}")
                break
            if res.plan is not None and len(res.plan["groups"]) == par.pp * par.dp:
                groups = [[tuple(d) for d in g] for g in res.plan["groups"]]
                calm = tatp_heuristics.untangle(mesh, groups, options.seed, stop=options.stopped)
                variants = [(method, groups)] + ([(f"{method}, untangled", calm)] if calm != groups else [])
                for label, rings in variants:
                    pipes = chain_rings(mesh, rings, par.pp, par.dp)
                    out.append((f"free rings ({label})", {"tp": par.tp, "pp": par.pp, "dp": par.dp,
                                                          "pipelines": _as_lists(pipes)}))
    elif par.tp == 1 and not out:
        notes.append("no healthy die order")
    return out


def offload_records(inst, chunks: dict) -> list[dict]:
    """Mem_pair chunks -> the plan's offload records; each sender moves exactly its overflow
    (its last chunk carries only what is left)."""
    out = []
    left = [s.overflow for s in inst.senders]
    for (s, h), c in sorted(chunks.items(), key=lambda kv: (kv[0][0], inst.hops[kv[0][0]][kv[0][1]], kv[0][1])):
        moved = min(c * inst.chunk, left[s])
        left[s] -= moved
        if moved > 0:
            out.append({"sender": list(inst.senders[s].die), "helper": list(inst.helpers[h].die),
                        "bytes": moved})
    return out


def forced_recompute(fs: Scenario, placement: dict) -> list | None:
    """The recompute rows of every stage when the scenario forces a policy (training.recompute:
    selective | full), else None."""
    policy = fs.training.recompute_policy
    return None if policy is None else fs.workload(placement_choice(placement)).policy_rows(policy)


def pooled_recompute(fs: Scenario, placement: dict, factor: float, options: SolveOptions) -> tuple[list, str]:
    """x over the workload's units with DRAM pooled over every healthy die (x `factor`)."""
    par = fs.parallel
    kernel = recompute_kernel(fs, placement)
    share = factor * len(fs.mesh().healthy_dies) * fs.wafer.dram_capacity / (par.tp * par.dp * par.pp)
    kernel = replace(kernel, stages=tuple(replace(s, capacity=float(math.floor(share))) for s in kernel.stages))
    why = kernel.shortfall()
    if why:
        raise InstanceError(why)
    if not fs.training.recompute:   # forbidden: every activation is kept, Mem_pair offloads the overflow
        return plan_recompute(fs, [[0] * len(kernel.units) for _ in kernel.stages]), "none (forbidden)"
    rows = forced_recompute(fs, placement)
    if rows is not None:            # forced: exactly that policy, Mem_pair offloads what still overflows
        return rows, f"{fs.training.recompute_policy} (forced)"
    start = recompute_heuristics.solve_dp(kernel, options.sub())
    if start.plan is None:
        raise InstanceError(f"recompute DP: {start.message}")
    x, how = start.plan, "dp"
    if not options.stopped():
        exact = kernels.recompute_milp(kernel, options.sub(RECOMPUTE_MILP_S, warm_start=start.plan))
        if exact.plan is not None and exact.status in ("optimal", "feasible") and \
                evaluate("recompute", kernel, exact.plan).objective <= evaluate("recompute", kernel, start.plan).objective:
            x, how = exact.plan, f"milp {exact.status}"
    return plan_recompute(fs, x["x"]), how


def mem_pair(fs: Scenario, placement: dict, recompute: list):
    """(offload records, Mem_pair kernel) of a placement and recomputation; InstanceError if none."""
    inst = mem_pair_kernel(fs, placement, recompute)
    if not inst.senders:
        return [], inst
    why = inst.infeasibility()
    if why:
        raise InstanceError(f"Mem_pair: {why}")
    chunks = transport_chunks(inst)
    if chunks is None:
        raise InstanceError("Mem_pair: no allocation")
    return offload_records(inst, chunks), inst


def chain(fs: Scenario, placement: dict, options: SolveOptions) -> tuple[dict, float, str]:
    """Recompute + Mem_pair on a placement: the best evaluated plan over the pooling factors."""
    last = "no pooling factor gave a feasible plan"
    for factor in POOL_FACTORS:
        if options.stopped():
            break
        try:
            recompute, how = pooled_recompute(fs, placement, factor, options)
            offload, _ = mem_pair(fs, placement, recompute)
        except InstanceError as exc:
            last = str(exc)
            continue
        plan = dict(placement, recompute=recompute, offload=offload)
        ev = evaluate("plan", fs, plan)
        if ev.feasible:
            return plan, ev.objective, f"recompute {how} (pool x{factor:g}), {len(offload)} offloads"
        last = "; ".join(ev.violations[:2])
    raise InstanceError(last)


def stage_pairs(fs: Scenario, plan: dict) -> list[tuple[int, int, float]]:
    """Eq. 2 Mem_pair flows between stages (index r * pp + i) from the plan's offloads: bytes per
    iteration both ways; helpers on idle dies have no stage and no term."""
    par = fs.parallel
    work = fs.workload()
    where = {}
    for r, pipe in enumerate(plan["pipelines"]):
        for i, stage in enumerate(pipe):
            for d in stage:
                where[tuple(d)] = (r * par.pp + i, i)
    volume: dict[tuple[int, int], float] = {}
    for o in plan.get("offload") or []:
        s, h = where.get(tuple(o["sender"])), where.get(tuple(o["helper"]))
        if s is None or h is None or s[0] == h[0]:
            continue
        per_iteration = 2 * o["bytes"] / work.stages[s[1]].inflight * work.microbatches
        volume[(s[0], h[0])] = volume.get((s[0], h[0]), 0.0) + per_iteration
    return [(s, h, v) for (s, h), v in sorted(volume.items())]


def eq2_placement(fs: Scenario, plan: dict, options: SolveOptions) -> dict | None:
    """The placement kernel with the plan's Mem_pair flows on the plan's tile shape, warm-started
    from the plan's own slots; None when the plan is not on aligned tiles or nothing changes."""

    tile = plan.get("tile")
    if not tile:
        return None
    h, w = tile
    try:
        inst = placement_kernel(fs)
    except InstanceError:
        return None
    pairs = stage_pairs(fs, plan)
    if not pairs:   # the pipeline chain alone: serpentine already keeps neighbours adjacent
        return None
    inst = replace(inst, tiles=[(h, w)], pairs=pairs)
    slots = [[stage[0][0] // h, stage[0][1] // w] for pipe in plan["pipelines"] for stage in pipe]
    warm = {"tile": [h, w], "assignment": slots}
    method = placement_cpsat if inst.stages <= 16 else placement_heuristics.ga
    res = method(inst, options.sub(PLACEMENT_S, warm_start=warm))
    if res.plan is None or res.plan["assignment"] == slots:
        return None
    it = iter(res.plan["assignment"])
    par = fs.parallel
    pipes = [[tile_dies(tuple(next(it)), h, w) for _ in range(par.pp)] for _ in range(par.dp)]
    return {"tp": par.tp, "pp": par.pp, "dp": par.dp, "tile": [h, w], "pipelines": _as_lists(pipes),
            "tp_scheme": plan.get("tp_scheme", "megatron")}


def routed(fs: Scenario, plan: dict, options: SolveOptions) -> dict | None:
    """The plan with its TP rings routed by TCME (TEMP's traffic-conscious routing) when some ring
    has a step over 1 hop or shares links (XY otherwise leaves nothing to gain); None if not."""
    ev = evaluate("plan", fs, plan)
    if not ev.feasible or all(r["ring_hops"] <= 1 and r["tp_kappa"] <= 1 for r in ev.details["stages"]):
        return None
    groups = [stage for pipe in plan["pipelines"] for stage in pipe]
    try:
        inst = routing_kernel(fs, groups)
    except InstanceError:
        return None
    res = routing_heuristics.tcme(inst, options.sub(ROUTING_S))
    if res.plan is None:
        return None
    routes, seen = [], set()
    for flow, path in zip(inst.flows, res.plan["routes"]):
        key = (tuple(flow.src), tuple(flow.dst))
        if key not in seen and len(path) > 1:
            seen.add(key)
            routes.append({"src": list(flow.src), "dst": list(flow.dst), "path": [list(d) for d in path]})
    return dict(plan, routes=routes) if routes else None


def baselines(fs: Scenario, options: SolveOptions) -> list[tuple[str, dict]]:
    out = []
    for name, method in (("mg-wafer", solve_mg_wafer), ("megatron", solve_megatron), ("gcmr", solve_gcmr)):
        if options.stopped():
            break
        res = method(fs, options.sub())
        if res.plan is not None:
            out.append((name, res.plan))
    return out


def compose_layout(scenario: Scenario, choice: Choice, options: SolveOptions) -> Composition:
    """The best plan the kernels compose for the choice's layout and, where the scenario allows
    several, micro-batch size (see the module docstring; the choice's schemes and split are the
    composition's to choose)."""
    started = time.monotonic()
    par, micro_batch = choice.parallel, choice.micro_batch
    choice = Choice(par, micro_batch=micro_batch)
    split = balanced_split(scenario, choice)
    fs = fixed_scenario(scenario, replace(choice, layers=split))
    out = Composition(choice_key(choice))
    extra = {}   # what the plans of fs leave to fs and the scenario's plans must say
    if micro_batch is not None:
        extra["micro_batch"] = micro_batch
    if split is not None:
        extra["layers"] = list(split)
        out.notes.append(f"layers {'/'.join(map(str, split))}")
    if par.interleave > 1:   # the layout's, said in the plan too
        extra["interleave"] = par.interleave

    def consider(plan: dict, how: str, objective: float | None = None) -> None:
        plan = dict(extra, **plan)   # a plan's own `layers` (the even-split baselines) stays
        if objective is None:
            ev = evaluate("plan", fs, plan)
            out.evaluated += 1
            if not ev.feasible:
                out.notes.append(f"{how}: rejected ({'; '.join(ev.violations[:1])})")
                return
            objective = ev.objective
        else:
            out.evaluated += 1
        if out.objective is None or objective < out.objective:
            out.objective, out.plan, out.how = objective, plan, how

    schemes = tp_schemes(scenario, par)

    def seed_with_baselines() -> None:
        runs = [(fs, {})]
        if split is not None:   # also on the even split, as the baselines run on the scenario itself
            runs.append((fixed_scenario(scenario, choice),
                         {"layers": split_layers(scenario.llm.layers, par.pp)}))
        for base, fields in runs:
            for label, plan in baselines(base, options):
                for scheme in schemes:   # the baselines' plans under either tensor-parallel scheme
                    consider(dict(plan, tp_scheme=scheme, **fields), f"{label} ({scheme})")

    if scenario.parallel is not None:   # the scenario's own layout: never worse than its baselines
        seed_with_baselines()
    ranked = []
    left = options.remaining()
    rank_until = None if left is None else time.monotonic() + RANK_SHARE * left
    settings = scheme_settings(fs, par.tp)
    for label, placement in placements(fs, options, out.notes):
        for scheme, sp in settings:
            if options.stopped() or (len(ranked) >= 2 and rank_until is not None and time.monotonic() > rank_until):
                break   # ranking may not eat the budget the best placements need
            candidate = dict(placement, tp_scheme=scheme, **({} if sp is None else {"sequence_parallel": sp}))
            rows = forced_recompute(fs, candidate)
            if rows is not None:
                candidate["recompute"] = rows
            ev = evaluate("plan", fs, candidate)   # time without recomputation (or the forced one) ranks placements
            if ev.objective is not None:
                ranked.append((ev.objective, f"{label} ({scheme}{', sequence-parallel' if sp else ''})", candidate))
    ranked.sort(key=lambda t: t[0])
    for _, label, placement in ranked[:COMPOSED]:
        if options.stopped():
            break
        try:
            plan, objective, how = chain(fs, placement, options)
        except InstanceError as exc:
            out.notes.append(f"{label}: {exc}")
            continue
        consider(plan, f"{label}; {how}", objective)
        if options.stopped():
            break
        with_routes = routed(fs, plan, options)
        if with_routes is not None:
            consider(with_routes, f"{label}; {how}; TCME routes")
        try:
            moved = eq2_placement(fs, plan, options)
        except Exception as exc:  # an optional improvement: a kernel failure must not lose the plan
            out.notes.append(f"{label}: Eq. 2 placement kernel failed ({type(exc).__name__}: {exc})")
            moved = None
        if moved is not None:
            try:
                plan2, objective2, how2 = chain(fs, moved, options)
                consider(plan2, f"{label} + Eq. 2 placement; {how2}", objective2)
            except InstanceError as exc:
                out.notes.append(f"{label} + Eq. 2: {exc}")
    if scenario.parallel is None and out.plan is None:
        seed_with_baselines()
    out.seconds = time.monotonic() - started
    return out
