"""GCMR on a scenario (WATOS Alg. 2 + Alg. 3): pooled recomputation, Sender/Helper split, Mem_pair.

For a scenario with fixed (tp, pp, dp):
1. placement: the serpentine stage placement of the Megatron baseline (best tile shape by the
   plan evaluator), unless the warm start gives one;
2. recomputation: the pooled recompute kernel per die (units = the workload's operator units,
   T0_i = the stage's compute + TP + pipeline communication time of that placement), solved by the
   MILP warm-started from the GCMR dp (dp alone if the MILP finds nothing in its time);
3. Sender/Helper split per die: dies over the DRAM capacity are Senders (overflow), the other
   dies of the wafer, including idle ones, are Helpers (spare);
4. Mem_pair allocation on the real die positions (MILP, greedy Alg. 3 as fallback);
5. the full training plan, re-evaluated by the plan evaluator (memory after offloading, offload
   traffic on the links and in stage time where the D2D transfer exceeds the DRAM access it hides).
"""

from __future__ import annotations

import math
import time

from wafopt.errors import InstanceError
from wafopt.evaluate import evaluate
from wafopt.instance.mem_pair import Helper, MemPairInstance, Sender
from wafopt.instance.recompute import RecomputeInstance, Stage, Unit
from wafopt.solve import MethodResult, SolveOptions

CHUNKS_PER_SENDER = 64  # Mem_pair granularity: the largest overflow split into this many chunks


def base_plan(scenario, options: SolveOptions | None = None) -> dict:
    """The placement: the warm start's, else the Megatron baseline's serpentine one."""
    if options is not None and options.warm_start and options.warm_start.get("pipelines"):
        ws = options.warm_start
        return {k: ws[k] for k in ("tp", "pp", "dp", "tile", "pipelines") if k in ws}
    from wafopt.heuristics.megatron import serpentine_plans

    par = scenario.parallel
    if par is None:
        raise InstanceError("gcmr needs a fixed layout: add parallel: {tp, pp, dp}", "parallel")
    best = None
    for _, plan in serpentine_plans(scenario):
        if plan is None:
            continue
        ev = evaluate("plan", scenario, plan)  # time without recomputation (memory may not fit)
        if ev.objective is not None and (best is None or ev.objective < best[0]):
            best = (ev.objective, plan)
    if best is None:
        raise InstanceError(f"no {par.tp}-die tile shape leaves {par.pp * par.dp} healthy tiles", "parallel")
    return best[1]


def recompute_kernel(scenario, placement: dict) -> RecomputeInstance:
    """The pooled recompute kernel of the placement, per die (every die of a stage is alike).

    Only recomputable units become kernel units; the layer-input checkpoint that full
    recomputation keeps is fixed memory, added to the stage's state.
    Bytes rounded to whole bytes and seconds to whole nanoseconds, so the exact models scale exactly.
    """
    work = scenario.workload()
    rows = evaluate("plan", scenario, placement).details["stages"]
    units = tuple(Unit(u.name, float(round(u.bytes)), round(u.recompute_s, 9))
                  for u in work.stages[0].units if u.recomputable)
    cap = float(round(scenario.wafer.dram_capacity))
    stages = tuple(Stage(s.layers, s.inflight, float(round(s.full_recompute_bytes())), cap,
                         round(r["compute_s"] + r["tp_comm_s"] + r["p2p_s"], 9))
                   for s, r in zip(work.stages, rows))
    return RecomputeInstance("pooled", work.microbatches, units, stages)


def full_x(scenario, kernel_x: list[list[int]]) -> list[list[int]]:
    """Kernel x (recomputable units only) -> plan x over all workload units (0 for checkpoints)."""
    units = scenario.workload().stages[0].units
    out = []
    for row in kernel_x:
        it = iter(row)
        out.append([next(it) if u.recomputable else 0 for u in units])
    return out


def solve_recompute(kernel: RecomputeInstance, options: SolveOptions, limit: float) -> tuple[dict, str]:
    from wafopt.heuristics.recompute import dp_plan
    from wafopt.models.recompute import solve_milp

    start = dp_plan(kernel)
    if start is None:
        raise InstanceError(kernel.shortfall() or "no pooled recomputation fits the wafer DRAM")
    res = solve_milp(kernel, SolveOptions(time_limit=limit, seed=options.seed, quiet=True, warm_start=start))
    if res.plan is not None:
        return res.plan, f"milp {res.status}"
    return start, "dp"


def sender_helper_split(scenario, placement: dict, x) -> tuple[list, list]:
    """(die, overflow) of every Sender and (die, spare) of every Helper, in bytes."""
    work = scenario.workload()
    cap = scenario.wafer.dram_capacity
    used = {}
    for pipe in placement["pipelines"]:
        for i, dies in enumerate(pipe):
            mem = work.stages[i].memory_bytes(x[i])
            for d in dies:
                used[tuple(d)] = mem
    senders = [(d, m - cap) for d, m in used.items() if m > cap]
    helpers = [(d, cap - used.get(d, 0.0)) for d in scenario.mesh().healthy_dies if used.get(d, 0.0) < cap]
    return senders, helpers


def mem_pair_kernel(scenario, senders, helpers) -> MemPairInstance:
    """Chunks small enough that rounding (up per sender, down per helper) keeps a fit that the
    pooled recomputation left with little slack, and at most 1/CHUNKS_PER_SENDER of an overflow."""
    mesh = scenario.mesh()
    biggest = max((o for _, o in senders), default=1.0)
    slack = sum(sp for _, sp in helpers) - sum(o for _, o in senders)
    chunk = min(biggest / CHUNKS_PER_SENDER, max(slack, 0.0) / (len(senders) + len(helpers) + 1))
    chunk = float(max(1, math.floor(chunk)))
    return MemPairInstance(mesh, tuple(Sender(d, float(o)) for d, o in senders),
                           tuple(Helper(d, float(sp)) for d, sp in helpers), chunk)


def mem_pair_instance(scenario) -> MemPairInstance:
    """The Mem_pair kernel of the scenario (used by `solve SCENARIO --problem mem_pair`)."""
    placement = base_plan(scenario)
    x, _ = solve_recompute(recompute_kernel(scenario, placement), SolveOptions(quiet=True), 10.0)
    senders, helpers = sender_helper_split(scenario, placement, full_x(scenario, x["x"]))
    return mem_pair_kernel(scenario, senders, helpers)


def solve_offload(inst: MemPairInstance, options: SolveOptions, limit: float) -> tuple[list[dict], str]:
    """Offload records {sender, helper, bytes}: each sender moves exactly its overflow."""
    from wafopt.heuristics.mem_pair import greedy_chunks
    from wafopt.models.mem_pair import chunks_of, solve_milp

    if not inst.senders:
        return [], "no senders"
    why = inst.infeasibility()
    if why:
        raise InstanceError(f"Mem_pair: {why}")
    res = solve_milp(inst, SolveOptions(time_limit=limit, seed=options.seed, quiet=True))
    how = f"milp {res.status}"
    chunks = chunks_of(inst, res.plan) if res.plan is not None else greedy_chunks(inst)
    if chunks is None:
        raise InstanceError("Mem_pair: no allocation found")
    if res.plan is None:
        how = "greedy"
    out = []
    left = [s.overflow for s in inst.senders]
    for (s, h), c in sorted(chunks.items(), key=lambda kv: (kv[0][0], inst.hops[kv[0][0]][kv[0][1]])):
        moved = min(c * inst.chunk, left[s])  # the last chunk carries only what is left
        left[s] -= moved
        if moved > 0:
            out.append({"sender": list(inst.senders[s].die), "helper": list(inst.helpers[h].die),
                        "bytes": moved})
    return out, how


def solve_gcmr(scenario, options: SolveOptions) -> MethodResult:
    started = time.monotonic()
    limit = options.time_limit if options.time_limit is not None else 30.0
    try:
        placement = base_plan(scenario, options)
        kernel = recompute_kernel(scenario, placement)
        x, how_x = solve_recompute(kernel, options, 0.6 * limit)
        recompute = full_x(scenario, x["x"])
        senders, helpers = sender_helper_split(scenario, placement, recompute)
        pairing = mem_pair_kernel(scenario, senders, helpers)
        offload, how_o = solve_offload(pairing, options, max(1.0, limit - (time.monotonic() - started)))
    except InstanceError as exc:
        return MethodResult(None, "unknown", None, "gcmr", f"gcmr failed: {exc}")
    plan = dict(placement, recompute=recompute, offload=offload)
    options.incumbent(plan)
    moved = sum(o["bytes"] for o in offload)
    return MethodResult(plan, "feasible", None, "gcmr",
                        f"pooled recomputation by {how_x}; {len(senders)} sender dies offload "
                        f"{moved / 1e9:.3f} GB to helpers by {how_o}",
                        {"senders": len(senders), "helpers": len(helpers), "offload_bytes": moved,
                         "recompute_method": how_x, "mem_pair_method": how_o,
                         "kernel_iteration_time_s": evaluate("recompute", kernel, x).objective})


def solve_uniform(scenario, options: SolveOptions) -> MethodResult:
    """Megatron-style baseline with selective recomputation: the best unit set recomputed in every
    layer of every stage that fits each die's own DRAM, no offloading, serpentine placement."""
    from dataclasses import replace

    from wafopt.heuristics.recompute import solve_uniform as uniform_kernel

    try:
        placement = base_plan(scenario, options)
    except InstanceError as exc:
        return MethodResult(None, "unknown", None, "uniform", f"uniform failed: {exc}")
    kernel = replace(recompute_kernel(scenario, placement), mode="local")
    res = uniform_kernel(kernel, SolveOptions(quiet=True))
    if res.plan is None:  # local mode: even recomputing every unit overflows some die
        return MethodResult(None, "unknown", None, "uniform",
                            f"no uniform recomputation fits every die without offloading ({res.message})")
    plan = dict(placement, recompute=full_x(scenario, res.plan["x"]))
    options.incumbent(plan)
    return MethodResult(plan, "feasible", None, "uniform", res.message)
