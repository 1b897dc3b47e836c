"""Certified lower bounds of training plans (1F1B iteration time), for scenarios with a fixed
layout `parallel: {tp, pp, dp}` (without one a plan chooses its layout and no bound is given).

compute-floor: the evaluator's objective (docs/evaluator.md) is the longest path of the plan's
1F1B task graph (wafopt.workload.schedule.one_f_one_b_finish) plus each stage's DP all-reduce and
optimizer step; a forward task lasts at least its compute, a backward task at least its compute
(recomputation, communication and exposed offloading are never negative), sends take no less
than nothing, and the longest path grows with every duration. So the longest path of the compute
times (the cheaper tensor-parallel scheme per stage) plus the optimizer step bounds every plan of
the layout. Re-derived from the scenario alone; the certificate has no data.
"""

from __future__ import annotations

from wafopt.core.errors import CertificateError, InstanceError
from wafopt.core.result import CERTIFICATE, Bound
from wafopt.problems.certificates import dispatch
from wafopt.workload.operators import SCHEMES
from wafopt.workload.schedule import one_f_one_b_finish


def compute_floor_value(scenario) -> float | None:
    if scenario.parallel is None or scenario.parallel.dies > len(scenario.mesh().healthy_dies):
        return None
    try:   # every stage may use either tensor-parallel scheme: the cheaper one bounds it
        works = [scenario.workload(None, scheme) for scheme in SCHEMES]
    except InstanceError:   # the layout cannot be modelled: no plan is feasible
        return None
    stages = range(scenario.parallel.pp)
    forward = [min(w.stages[i].fwd_s for w in works) for i in stages]
    backward = [min(w.stages[i].bwd_s for w in works) for i in stages]
    free = [0.0] * len(forward)
    ends = one_f_one_b_finish(forward, backward, free, free, works[0].microbatches)
    return max(e + min(w.stages[i].optimizer_s for w in works) for i, e in zip(stages, ends))


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
    space, re-derived layout by layout (wafopt.problems.plan.layout_bound)."""
    from wafopt.problems.plan.layout_bound import check_certificate

    return check_certificate(scenario, data)


CHECKS = {"compute-floor": check_compute_floor, "planner-layouts": check_planner_layouts}


def check(instance, kind: str, data) -> float:
    return dispatch(CHECKS, instance, kind, data)


def bound(instance) -> Bound | None:
    return compute_floor(instance)
