"""The ablation of WATOS Fig. 18 in our model: what each part of the planner adds over the baselines.

Steps, each on top of the previous one, each plan evaluated by the shared evaluator:
- MG-wafer: WATOS's Megatron on the wafer (WATOS Sec. V-A) on the baseline layout (the scenario's
  `parallel:`, else tp 8 over all healthy dies, dp 1, or the largest Megatron-legal tp below 8): serpentine tiles, no sequence parallelism,
  full recomputation when memory forces it;
- Megatron: Megatron-LM as practised today on the same layout (sequence parallelism, selective
  recomputation, interleaving when it helps; wafopt.heuristics.megatron);
- +R: the recompute scheduler (GCMR, WATOS Alg. 2) with Alg. 3 offloading between the stage dies;
- +M: the memory scheduler as the planner composes it on the same layout, Megatron TP only: DRAM
  pooled over all healthy dies, the exact Mem_pair allocation, placement with Eq. 2, ring routing;
- +TATP: the same with TEMP's TATP allowed per stage;
- +GA: the planner's global improvement phase on the same layout;
- +search: the whole planner with tp and pp searched, dp 1 (as WATOS);
- +DP: data parallelism searched too.
Every step keeps what the scenario fixes beyond the layout (`parallel.interleave`, `tp_scheme`).
The ratios are the MG-wafer and the Megatron iteration times over the step's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from wafopt.compose.gcmr import solve_gcmr
from wafopt.core.budget import SolveOptions
from wafopt.costmodel.rules import tp_violation
from wafopt.costmodel.scenario import Fixed, Parallel, Scenario
from wafopt.heuristics.megatron import solve_megatron, solve_mg_wafer
from wafopt.planner.search import solve_planner
from wafopt.problems import evaluate

BASELINE_TP = 8   # WATOS's MG-wafer runs tp 8 (config 3: tp 8, pp 7) where the heads allow it
STEPS = ("MG-wafer", "Megatron", "+R", "+M", "+TATP", "+GA", "+search", "+DP")


@dataclass
class Row:
    step: str
    layout: str
    objective: float | None
    ratio: float | None           # MG-wafer time over this step's
    bound: float | None
    note: str
    ratio_megatron: float | None = None   # Megatron time over this step's


def baseline_layout(scenario: Scenario) -> Parallel:
    """The scenario's layout, else the largest Megatron-legal tp up to 8 over all healthy dies, dp 1."""
    if scenario.parallel is not None:
        return scenario.parallel
    healthy = len(scenario.mesh().healthy_dies)
    tp = max(t for t in range(1, BASELINE_TP + 1)
             if tp_violation(scenario.llm, t, scenario.wafer.parallel_rules) is None)
    return Parallel(tp, max(1, min(scenario.llm.layers, healthy // tp)), 1)


def ablation(scenario: Scenario, options: SolveOptions) -> list[Row]:
    """One row per step (an `options.sub` budget of a share of the time limit each)."""
    par = baseline_layout(scenario)
    # every step keeps what the scenario fixes beyond the layout (WATOS's plain 1F1B: interleave 1)
    kept = Fixed(interleave=scenario.fixed.interleave, tp_scheme=scenario.fixed.tp_scheme)
    if kept.interleave is not None:
        par = replace(par, interleave=kept.interleave)
    fixed = replace(scenario, parallel=par, fixed=replace(kept, tp=par.tp, pp=par.pp, dp=par.dp))
    megatron_tp = replace(fixed, fixed=replace(fixed.fixed, tp_scheme="megatron"))
    no_dp = replace(scenario, parallel=None, fixed=replace(kept, dp=1))
    free = replace(scenario, parallel=None, fixed=kept)
    share = None if options.time_limit is None else options.time_limit / len(STEPS)
    runs = {
        "MG-wafer": lambda o: solve_mg_wafer(fixed, o),
        "Megatron": lambda o: solve_megatron(fixed, o),
        "+R": lambda o: solve_gcmr(fixed, o),
        "+M": lambda o: solve_planner(megatron_tp, o, improve_globally=False),
        "+TATP": lambda o: solve_planner(fixed, o, improve_globally=False),
        "+GA": lambda o: solve_planner(fixed, o),
        "+search": lambda o: solve_planner(no_dp, o),
        "+DP": lambda o: solve_planner(free, o),
    }
    rows, base, modern, best = [], None, None, None
    for step in STEPS:
        res = runs[step](options.sub(share))
        objective = None
        if res.plan is not None:
            ev = evaluate("plan", free, res.plan)
            objective = ev.objective if ev.feasible else None
        # each step keeps what the steps before it found (they are part of it)
        if best is not None and (objective is None or best[0] < objective):
            objective, plan = best
        elif objective is not None:
            best = (objective, res.plan)
        plan = best[1] if best else None
        if step == "MG-wafer":
            base = objective
        if step == "Megatron":
            modern = objective
        layout = f"tp{plan['tp']} pp{plan['pp']} dp{plan['dp']}" if plan else "-"
        ratio = base / objective if base and objective else None
        bound = res.bound.value if res.bound is not None else None
        rows.append(Row(step, layout, objective, ratio, bound, res.message[:120],
                        modern / objective if modern and objective else None))
    return rows
