"""The tightening policy of the layout bounds: every choice of the space starts at the quick tier;
the least bound is upgraded (quick -> full -> LP-refined) until it is LP-refined, so the
plan-level bound (the least over the feasible choices) can only rise.
"""

from __future__ import annotations

from wafopt.costmodel.scenario import Scenario
from wafopt.planner.full_bound import layout_bound
from wafopt.planner.layout_data import LayoutBound
from wafopt.planner.lp_bound import refine
from wafopt.planner.quick_bound import quick_bound
from wafopt.planner.space import layout_choices


def space_bounds(scenario: Scenario, stopped=lambda: False) -> list[LayoutBound]:
    """The quick bound of every choice of the space (stops early, returning what it has, when
    `stopped()` turns true); tighten() upgrades the ones that matter."""
    out = []
    for choice in layout_choices(scenario):
        if stopped():
            break
        out.append(quick_bound(scenario, choice))
    return out


def upgrade(scenario: Scenario, bounds: list[LayoutBound], k: int) -> None:
    """One tier up for bounds[k]: quick -> full -> LP-refined."""
    b = bounds[k]
    if b.tier == "quick":
        bounds[k] = layout_bound(scenario, b.choice)
    elif not b.refined:
        refine(b)


def tighten(scenario: Scenario, bounds: list[LayoutBound], stopped=lambda: False) -> int:
    """Upgrade the least bound until the least one is LP-refined (or stopped): the plan-level bound
    can only rise. Returns how many upgrades were made."""
    done = 0
    while not stopped():
        feasible = [k for k, b in enumerate(bounds) if b.feasible]
        if not feasible:
            break
        k = min(feasible, key=lambda i: (bounds[i].value, bounds[i].key()))
        if bounds[k].tier == "full" and bounds[k].refined:
            break
        upgrade(scenario, bounds, k)
        done += 1
    return done


def plan_bound(bounds: list[LayoutBound]) -> LayoutBound | None:
    """The choice with the least bound among the feasible ones (the plan-level bound), or None."""
    feasible = [b for b in bounds if b.feasible]
    return min(feasible, key=lambda b: (b.value, b.key())) if feasible else None


def quick_plan_bound(scenario: Scenario) -> LayoutBound | None:
    """The plan-level bound from the quick tier alone (the cheapest rung of the bound ladder)."""
    return plan_bound(space_bounds(scenario))


def tightened_bounds(scenario: Scenario, stopped=lambda: False) -> list[LayoutBound]:
    """The space's bounds, tightened where they are least (the ladder's next rung)."""
    bounds = space_bounds(scenario)
    tighten(scenario, bounds, stopped)
    return bounds
