"""Certified lower bounds of training plans (1F1B iteration time), for scenarios with a fixed
layout `parallel: {tp, pp, dp}` (without one a plan chooses its layout and no bound is given).

compute-floor: the evaluator's objective (docs/evaluator.md) is the longest path of the plan's
1F1B task graph (wafopt.costmodel.schedule.one_f_one_b_finish) plus each stage's DP all-reduce and
optimizer step; a forward task lasts at least its compute, a backward task at least its compute
(recomputation, communication and exposed offloading are never negative), sends take no less
than nothing, and the longest path grows with every duration. A plan may choose its layer split
and, where the scenario allows several, its micro-batch size and interleave (virtual stages per
device), so the floor is the least over them of the schedule bound of the layout bound (its
quick tier, wafopt.planner.quick_bound, its Lagrangian without memory, mu = 0, at the split that
makes it least, and the schedule bound: the split's worst inequality and the task graph's
longest path at the least task times, wafopt.planner.full_bound).
Re-derived from the scenario alone; the certificate has no data.

planner-layouts: the joint planner's bound. The certificate lists every choice of the space
(wafopt.planner.space) with its bound (null: infeasible) and, where the LP refined it, the
weights and multiplier that prove it; the check re-derives each from the scenario and the value is
the least over the feasible choices.
"""

from __future__ import annotations

import math
from dataclasses import replace

from wafopt.core.errors import CertificateError, InstanceError
from wafopt.core.numeric import at_most
from wafopt.core.result import CERTIFICATE, Bound
from wafopt.costmodel.rules import legal_interleaves
from wafopt.costmodel.scenario import Choice, Scenario
from wafopt.planner.full_bound import (
    cheap_weights,
    lagrangian,
    layout_bound,
    schedule_bound,
)
from wafopt.planner.layout_data import LayoutBound, layout_data
from wafopt.planner.quick_bound import quick_bound
from wafopt.planner.space import choice_key, key_name, layout_choices
from wafopt.problems.certificates import DEFAULT_CHECK, CheckOptions, dispatch

KIND = "planner-layouts"


def compute_floor_value(scenario) -> float | None:
    par = scenario.parallel
    if par is None or par.dies > len(scenario.mesh().healthy_dies):
        return None
    sizes = scenario.training.micro_batches
    least = None
    for size in sizes:
        microbatches = scenario.training.global_batch // size // par.dp
        for v in legal_interleaves(scenario.llm, par.pp, microbatches, scenario.fixed.interleave):
            choice = Choice(replace(par, interleave=v), micro_batch=None if len(sizes) == 1 else size)
            try:
                d = layout_data(scenario, choice)
            except InstanceError:   # the layout cannot be modelled: no plan is feasible
                continue
            if isinstance(d, str):
                continue
            value = max([quick_bound(scenario, choice).value, schedule_bound(d)]
                        + [lagrangian(d, w, 0.0) for w in cheap_weights(d)])
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


def certified_value(scenario: Scenario, choice: Choice, tier: str, w=None, mu: float | None = None
                    ) -> tuple[float | None, str]:
    """What certify re-derives for one choice at the certificate's tier: the quick bound, or the
    full one, and LB(w, mu) where the certificate gives weights."""
    bound = quick_bound(scenario, choice) if tier == "quick" else layout_bound(scenario, choice)
    if not bound.feasible:
        return None, bound.reason
    value = bound.value
    if w is not None:
        value = max(value, lagrangian(bound.data, w, mu or 0.0))
    return value, ""


def certificate_data(bounds: list[LayoutBound]) -> dict:
    """Every layout of the space with its bound (null: infeasible) and, where the LP refined it,
    the weights and multiplier that prove it."""
    rows = []
    for b in bounds:
        row = list(b.key()) + [b.value]   # [tp, pp, dp, interleave, (micro-batch,) bound]
        if b.tier == "full":   # seven items: the full tier, with the LP's weights where refined
            row += [b.w, b.mu] if b.feasible and b.refined else [None, None]
        rows.append(row)
    return {"layouts": rows}


def check_certificate(scenario: Scenario, data: dict) -> float:
    """Re-derive the planner's bound from the scenario: every layout of the space must be listed,
    each listed bound must be one the scenario proves, and the value is the least bound over the
    feasible layouts (raises CertificateError otherwise)."""
    rows = data.get("layouts")
    if not isinstance(rows, list):
        raise CertificateError("the planner-layouts certificate needs a list `layouts`")
    multi = len(scenario.training.micro_batches) > 1
    head = 5 if multi else 4   # [tp, pp, dp, interleave, (micro-batch,) bound, (w, mu)]
    listed: dict[tuple, list] = {}
    for k, row in enumerate(rows):
        if (not isinstance(row, list) or len(row) not in (head + 1, head + 3)
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in row[:head])):
            what = "tp, pp, dp, interleave, micro_batch" if multi else "tp, pp, dp, interleave"
            raise CertificateError(f"layouts[{k}] must be [{what}, bound] or [{what}, bound, w, mu]")
        listed[tuple(row[:head])] = row[:4] + row[head:]   # [tp, pp, dp, interleave, bound, (w, mu)]
    space = layout_choices(scenario)
    keys = {choice_key(c) for c in space}
    if set(listed) != keys:
        missing = sorted(keys - set(listed))[:3]
        extra = sorted(set(listed) - keys)[:3]
        raise CertificateError(f"the certificate lists {len(listed)} layouts, the space has {len(keys)}"
                               + (f"; missing {missing}" if missing else "") + (f"; not in the space {extra}" if extra else ""))
    least = None
    for choice in space:
        name = key_name(choice_key(choice))
        row = listed[choice_key(choice)]
        w, mu = (row[5], row[6]) if len(row) == 7 else (None, None)
        if w is not None and (not isinstance(w, list) or not isinstance(mu, (int, float)) or isinstance(mu, bool)):
            raise CertificateError(f"layout {name}: weights must be a list and mu a number")
        try:
            value, reason = certified_value(scenario, choice, "full" if len(row) == 7 else "quick", w, mu)
        except ValueError as exc:
            raise CertificateError(f"layout {name}: {exc}") from None
        stated = row[4]
        if value is None:
            continue   # infeasible whatever the certificate says: it bounds no plan
        if stated is None:
            raise CertificateError(f"layout {name} is listed as infeasible, but it fits")
        if not isinstance(stated, (int, float)) or isinstance(stated, bool) or not math.isfinite(stated):
            raise CertificateError(f"layout {name}: bound {stated!r:.40} is not a number")
        if not at_most(stated, value):
            raise CertificateError(f"layout {name}: stated bound {stated:.10g}, the scenario "
                                   f"proves {value:.10g}")
        least = value if least is None else min(least, value)
    if least is None:
        raise CertificateError("no layout of the space fits the wafer: there is no plan to bound")
    return least


CHECKS = {"compute-floor": check_compute_floor, KIND: check_certificate}


def check(instance, kind: str, data, options: CheckOptions = DEFAULT_CHECK) -> float:
    return dispatch(CHECKS, instance, kind, data)


def bound(instance) -> Bound | None:
    return compute_floor(instance)
