"""The planner on one design of the exploration (wafopt.explore.fidelity's rungs F0-F2): the bound
ladder and the planner or its composition, each a pure function of the scenario and seed.
"""

from __future__ import annotations

from dataclasses import dataclass

from wafopt.core.budget import SolveOptions
from wafopt.costmodel.scenario import Scenario
from wafopt.planner.compose import compose_layout
from wafopt.planner.full_bound import layout_bound
from wafopt.planner.search import solve_planner
from wafopt.planner.tighten import plan_bound, quick_plan_bound, tightened_bounds
from wafopt.problems import evaluate

COMPOSED_LAYOUTS = 1   # composition: on this many feasible layouts of least bound
COMPOSE_TRIES = 4      # ... looking at no more layouts than this (a layout that composes nothing is skipped)
COMPOSE_S = 30.0       # ... a safety cap per layout only: the composition is bounded by its work (about a
#                        CPU second), not by a clock, so its plan does not depend on how loaded the machine is


@dataclass
class DesignPlan:
    """What the planner says about a design: whether a plan can fit, the certified bound, and the
    best plan found with its evaluated iteration time (None: none found; `note` says why)."""
    feasible: bool
    bound: float | None = None
    value: float | None = None
    plan: dict | None = None
    note: str = ""


def bound_only(scenario: Scenario) -> DesignPlan:
    """The quick tier's plan-level bound (no plan)."""
    best = quick_plan_bound(scenario)
    if best is None:
        return DesignPlan(False, note="no layout fits this wafer")
    return DesignPlan(True, best.value)


def compose_least_bound(scenario: Scenario, seed: int) -> DesignPlan:
    """The certified bound tightened where it is least, and the joint planner's composition
    (placement, recomputation, offloading; no layout search, no GA) on the layouts of least bound:
    a feasible plan in about a second, evaluated analytically. (The Megatron baseline alone finds
    no plan on most wafers of small dies: it neither offloads nor tiles odd tensor-parallel sizes.)"""
    options = SolveOptions(time_limit=COMPOSE_TRIES * COMPOSE_S, seed=seed, quiet=True).start()
    bounds = tightened_bounds(scenario, options.stopped)
    least = plan_bound(bounds)
    if least is None:
        return DesignPlan(False, note="no layout fits this wafer")
    best, plans, tries = None, 0, 0
    for b in sorted((b for b in bounds if b.feasible), key=lambda b: (b.value, b.key())):
        if plans >= COMPOSED_LAYOUTS or tries >= COMPOSE_TRIES or options.stopped():
            break
        tries += 1
        if b.tier == "quick" and not layout_bound(scenario, b.choice).feasible:
            continue
        out = compose_layout(scenario, b.choice, options.sub(COMPOSE_S))
        if out.plan is None:
            continue
        plans += 1
        ev = evaluate("plan", scenario, out.plan)   # the shared evaluator has the last word
        if ev.feasible and (best is None or ev.objective < best[0]):
            best = (ev.objective, out.plan)
    if best is None:
        return DesignPlan(True, least.value, note=f"no plan composed on the {tries} layouts of least bound")
    return DesignPlan(True, least.value, best[0], best[1])


def plan_design(scenario: Scenario, seconds: float, seed: int) -> DesignPlan:
    """The joint planner on the scenario within `seconds`: its certified bound and its plan,
    evaluated analytically."""
    options = SolveOptions(time_limit=seconds, seed=seed, quiet=True).start()
    result = solve_planner(scenario, options)
    bound = result.bound.value if result.bound is not None else None
    if result.plan is None:
        return DesignPlan(bound is not None, bound, note=result.message[:200])
    ev = evaluate("plan", scenario, result.plan)
    if not ev.feasible:
        return DesignPlan(bound is not None, bound, note="; ".join(ev.violations[:2])[:200])
    return DesignPlan(True, bound, ev.objective, result.plan)
