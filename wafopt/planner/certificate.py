"""Certified lower bounds of training plans (1F1B iteration time), for scenarios with a fixed
layout `parallel: {tp, pp, dp}` (without one a plan chooses its layout and no bound is given).

compute-floor: the evaluator's objective (docs/evaluator.md) is the longest path of the plan's
1F1B task graph (wafopt.costmodel.schedule.one_f_one_b_finish) plus each stage's DP all-reduce and
optimizer step; a forward task lasts at least its compute, a backward task at least its compute
(recomputation, communication and exposed offloading are never negative), sends take no less
than nothing, and the longest path grows with every duration. A plan may choose its layer split
and, where the scenario allows several, its micro-batch size, so the floor is the least over
them of the schedule bound of the layout bound (wafopt.planner.bound, its quick tier
and its Lagrangian without memory, mu = 0, at the split that makes it least). Re-derived from the
scenario alone; the certificate has no data.
"""

from __future__ import annotations

from wafopt.core.errors import CertificateError, InstanceError
from wafopt.core.result import CERTIFICATE, Bound
from wafopt.problems.certificates import dispatch


def compute_floor_value(scenario) -> float | None:
    from wafopt.planner.bound import cheap_weights, lagrangian, layout_data, quick_bound

    par = scenario.parallel
    if par is None or par.dies > len(scenario.mesh().healthy_dies):
        return None
    sizes = scenario.training.micro_batches
    least = None
    for size in sizes:
        size = None if len(sizes) == 1 else size
        try:
            d = layout_data(scenario, par, size)
        except InstanceError:   # the layout cannot be modelled: no plan is feasible
            continue
        if isinstance(d, str):
            continue
        value = max([quick_bound(scenario, par, size).value] + [lagrangian(d, w, 0.0) for w in cheap_weights(d)])
        least = value if least is None else min(least, value)
    return least


def compute_floor(scenario) -> Bound | None:
    value = compute_floor_value(scenario)
    return None if value is None else Bound(value, CERTIFICATE, "compute-floor")


def check_compute_floor(scenario, data: dict) -> float:
    value = compute_floor_value(scenario)
    if value is None:
        raise CertificateError("a compute-floor bound needs a scenario with a fixed layout that can be modelled")
    return value


def check_planner_layouts(scenario, data: dict) -> float:
    """The joint planner's bound: the least certified bound over every layout of the scenario's
    space, re-derived layout by layout (wafopt.planner.bound)."""
    from wafopt.planner.bound import check_certificate

    return check_certificate(scenario, data)


CHECKS = {"compute-floor": check_compute_floor, "planner-layouts": check_planner_layouts}


def check(instance, kind: str, data) -> float:
    return dispatch(CHECKS, instance, kind, data)


def bound(instance) -> Bound | None:
    return compute_floor(instance)
