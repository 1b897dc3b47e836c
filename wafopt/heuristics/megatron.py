"""Megatron-style baseline plan (WATOS section V-A, "MG-wafer").

Given (tp, pp, dp): every tile shape h x w = tp that fits, stages placed on the usable aligned
tiles in serpentine order (WATOS Fig. 11a), no recomputation unless memory forces full
recomputation of every layer, no offloading. The best tile shape by the evaluator wins.
"""

from __future__ import annotations

import time

from wafopt.core.budget import SolveOptions
from wafopt.core.result import MethodResult
from wafopt.costmodel.scenario import Scenario
from wafopt.problems import evaluate
from wafopt.problems.plan.layouts import serpentine_plans


def solve_megatron(scenario: Scenario, options: SolveOptions) -> MethodResult:
    if scenario.parallel is None:
        return MethodResult(None, "unknown", message="megatron needs a fixed layout: add parallel: {tp, pp, dp}")
    work = scenario.workload()
    fits_plain = all(s.memory_bytes(None) <= scenario.wafer.dram_capacity for s in work.stages)
    recompute = None if fits_plain or not scenario.training.recompute else [s.full_recompute() for s in work.stages]
    best, best_time, tried, longest = None, None, [], 0.0
    for (h, w), plan in serpentine_plans(scenario):
        # Ctrl-C or the time limit: keep the best so far, and start no evaluation that would end
        # past the deadline (the run evaluates the chosen plan once more)
        left = options.remaining()
        if best is not None and (options.stopped() or (left is not None and left < 2 * longest)):
            tried.append(f"{h}x{w} and later shapes: not tried (stopped)")
            break
        if plan is None:
            tried.append(f"{h}x{w}: fewer than pp*dp = {scenario.parallel.pp * scenario.parallel.dp} "
                         "aligned healthy tiles")
            continue
        if recompute is not None:
            plan["recompute"] = recompute
        started = time.monotonic()
        ev = evaluate("plan", scenario, plan)
        longest = max(longest, time.monotonic() - started)
        tried.append(f"{h}x{w}: {'%.4g s' % ev.objective if ev.feasible else 'infeasible'}")
        if ev.feasible and (best_time is None or ev.objective < best_time):
            best, best_time = plan, ev.objective
            options.incumbent(plan)
    if best is None:
        reason = ("even full recomputation does not fit every die" if recompute is not None
                  else "no tile shape fits")
        # a baseline that finds no plan proves nothing: unknown, not infeasible
        return MethodResult(None, "unknown", message=f"megatron baseline found no plan: {reason} ({'; '.join(tried)})")
    note = "full recomputation (memory forces it)" if recompute is not None else "no recomputation"
    return MethodResult(best, "feasible", None, "heuristic",
                        f"{note}; tile shapes tried: {'; '.join(tried)}")
