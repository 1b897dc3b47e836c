"""GCMR on a scenario (WATOS Alg. 2 + Alg. 3): pooled recomputation, Sender/Helper split, Mem_pair.

For a scenario with fixed (tp, pp, dp), the kernels chained in this order:
1. placement: the warm start's, else the canonical serpentine placement (problems.plan.layouts);
2. recomputation: the pooled recompute kernel of that placement (problems.recompute), solved by
   the MILP warm-started from the GCMR DP (the DP alone if the MILP finds nothing in its time);
3. Sender/Helper split and the Mem_pair kernel of that recomputation (problems.mem_pair);
4. Mem_pair allocation on the real die positions (MILP, greedy Alg. 3 as fallback);
5. the full training plan, re-evaluated by the plan evaluator.
Every nested solve draws on the run's one budget (deadline and Ctrl-C).
"""

from __future__ import annotations

from dataclasses import replace

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.core.registry import PYOMO_HIGHS, loads
from wafopt.core.result import MethodResult
from wafopt.heuristics.mem_pair import greedy_chunks
from wafopt.heuristics.recompute import dp_plan
from wafopt.heuristics.recompute import solve_uniform as uniform_kernel
from wafopt.models import mem_pair as mem_pair_model
from wafopt.models import recompute as recompute_model
from wafopt.problems import evaluate
from wafopt.problems.mem_pair.instance import MemPairInstance
from wafopt.problems.mem_pair.instance import from_scenario as mem_pair_kernel
from wafopt.problems.mem_pair.plans import chunks_of
from wafopt.problems.plan.layouts import default_placement
from wafopt.problems.recompute.instance import RecomputeInstance, plan_recompute
from wafopt.problems.recompute.instance import from_scenario as recompute_kernel

DEFAULT_BUDGET_S = 30.0  # gcmr's own budget without --time-limit
RECOMPUTE_SHARE = 0.6    # of the budget, for the recompute MILP; Mem_pair gets the rest
DP_BUDGET_S = 0.8        # the GCMR DP that starts the recompute MILP (less when less is left)


def placement_of(scenario, options: SolveOptions) -> dict:
    """The warm start's placement, else the canonical serpentine one."""
    ws = options.warm_start
    if ws and ws.get("pipelines"):
        return {k: ws[k] for k in ("tp", "pp", "dp", "tile", "pipelines", "tp_scheme", "routes") if k in ws}
    return default_placement(scenario)


def solve_recompute(kernel: RecomputeInstance, options: SolveOptions) -> tuple[dict, str]:
    start = dp_plan(kernel, budget_s=options.search_seconds(DP_BUDGET_S))
    if start is None:
        raise InstanceError(kernel.shortfall() or "no pooled recomputation fits the wafer DRAM")
    if options.stopped():   # Ctrl-C or no time left: the DP's plan, no model built
        return start, "dp (stopped before the MILP)"
    res = recompute_model.solve_milp(kernel, replace(options, warm_start=start))
    if res.plan is not None:
        return res.plan, f"milp {res.status}"
    return start, "dp"


def solve_offload(inst: MemPairInstance, options: SolveOptions) -> tuple[list[dict], str]:
    """Offload records {sender, helper, bytes}: each sender moves exactly its overflow."""
    if not inst.senders:
        return [], "no senders"
    why = inst.infeasibility()
    if why:
        raise InstanceError(f"Mem_pair: {why}")
    res = None if options.stopped() else mem_pair_model.solve_milp(inst, options)   # stopped: Alg. 3 alone
    plan = res.plan if res is not None else None
    chunks = chunks_of(inst, plan) if plan is not None else greedy_chunks(inst)
    if chunks is None:
        raise InstanceError("Mem_pair: no allocation found")
    how = f"milp {res.status}" if plan is not None else "greedy"
    out = []
    left = [s.overflow for s in inst.senders]
    for (s, h), c in sorted(chunks.items(), key=lambda kv: (kv[0][0], inst.hops[kv[0][0]][kv[0][1]])):
        moved = min(c * inst.chunk, left[s])  # the last chunk carries only what is left
        left[s] -= moved
        if moved > 0:
            out.append({"sender": list(inst.senders[s].die), "helper": list(inst.helpers[h].die),
                        "bytes": moved})
    return out, how


@loads(*PYOMO_HIGHS)
def solve_gcmr(scenario, options: SolveOptions) -> MethodResult:
    scenario.parallel_of(needed_by="gcmr")   # bad input (exit 2), not a failed search
    budget = options.search_seconds(DEFAULT_BUDGET_S)
    try:
        placement = placement_of(scenario, options)
        kernel = recompute_kernel(scenario, placement)
        if scenario.training.recompute:
            x, how_x = solve_recompute(kernel, options.sub(RECOMPUTE_SHARE * budget))
        else:   # forbidden: every activation is kept, Mem_pair offloads the overflow
            x, how_x = {"x": [[0] * len(kernel.units) for _ in kernel.stages]}, "none (forbidden)"
        recompute = plan_recompute(scenario, x["x"])
        pairing = mem_pair_kernel(scenario, placement, recompute)
        offload, how_o = solve_offload(pairing, options.sub((1 - RECOMPUTE_SHARE) * budget))
    except InstanceError as exc:
        return MethodResult(None, "unknown", None, "gcmr", f"gcmr failed: {exc}")
    plan = dict(placement, recompute=recompute, offload=offload)
    options.incumbent(plan)
    moved = sum(o["bytes"] for o in offload)
    return MethodResult(plan, "feasible", None, "gcmr",
                        f"pooled recomputation by {how_x}; {len(pairing.senders)} sender dies offload "
                        f"{moved / 1e9:.3f} GB to helpers by {how_o}",
                        {"senders": len(pairing.senders), "helpers": len(pairing.helpers), "offload_bytes": moved,
                         "recompute_method": how_x, "mem_pair_method": how_o,
                         "kernel_iteration_time_s": evaluate("recompute", kernel, x).objective})


def solve_uniform(scenario, options: SolveOptions) -> MethodResult:
    """Megatron-style baseline with selective recomputation: the best unit set recomputed in every
    layer of every stage that fits each die's own DRAM, no offloading, serpentine placement."""
    scenario.parallel_of(needed_by="uniform")
    try:
        placement = placement_of(scenario, options)
    except InstanceError as exc:
        return MethodResult(None, "unknown", None, "uniform", f"uniform failed: {exc}")
    kernel = replace(recompute_kernel(scenario, placement), mode="local")
    res = uniform_kernel(kernel, options.sub())
    if res.plan is None:  # local mode: even recomputing every unit overflows some die
        return MethodResult(None, "unknown", None, "uniform",
                            f"no uniform recomputation fits every die without offloading ({res.message})")
    plan = dict(placement, recompute=plan_recompute(scenario, res.plan["x"]))
    options.incumbent(plan)
    return MethodResult(plan, "feasible", None, "uniform", res.message)
