"""Certified lower bounds of recomputation plans (1F1B iteration time).

memory-relaxation: the least recomputation time that frees the memory a plan must free, with
layers recomputed fractionally (the LP relaxation of the knapsack in docs/recompute.md, solved
exactly by taking the units with the least recompute time per byte first):
- local: stage i must free M_i(0) - Cap_i, so T_i >= T0_i + R_i, its fractional-knapsack cost;
  the bound is sum_i T_i + (m - 1) max_i T_i at those T_i;
- pooled: the stages together must free sum_i M_i(0) - sum_i Cap_i, at a total recompute time
  of at least R; then sum_i T_i >= sum_i T0_i + R, and max_i T_i is at least max_i T0_i and at
  least the water level lam with sum_i max(0, lam - T0_i) = R.
Where memory is not binding the bound is the iteration time without recomputation. The memory to
free allows the evaluator's slack on capacities (wafopt.problems.recompute.evaluate.fits).
Re-derived from the instance alone in exact arithmetic and rounded down; no data.
"""

from __future__ import annotations

from fractions import Fraction

from wafopt.core.result import CERTIFICATE, Bound
from wafopt.costmodel.schedule import one_f_one_b
from wafopt.problems.certificates import (
    DEFAULT_CHECK,
    CheckOptions,
    dispatch,
    float_down,
)
from wafopt.problems.recompute.evaluate import MEMORY_TOLERANCE
from wafopt.problems.recompute.instance import RecomputeInstance


def _slack(capacity: float) -> Fraction:
    # twice the evaluator's slack: it also covers the rounding of the evaluator's float sums
    return 2 * Fraction(MEMORY_TOLERANCE) * max(1, abs(Fraction(capacity)))


def _least_time(need: Fraction, items: list[tuple[Fraction, Fraction, int]]) -> Fraction:
    """Fractional knapsack: least recompute time to free `need` bytes from items
    (bytes freed per layer, time per layer, layers), cheapest time per byte first."""
    time = Fraction(0)
    for freed, cost, layers in sorted((i for i in items if i[0] > 0), key=lambda i: i[1] / i[0]):
        if need <= 0:
            break
        take = min(Fraction(layers), need / freed)
        time += take * cost
        need -= take * freed
    return time


def _stage_items(inst: RecomputeInstance, i: int) -> list[tuple[Fraction, Fraction, int]]:
    s = inst.stages[i]
    return [(s.inflight * Fraction(u.mem), Fraction(u.recompute), s.layers) for u in inst.units]


def _memory_without_recompute(inst: RecomputeInstance, i: int) -> Fraction:
    s = inst.stages[i]
    return Fraction(s.state) + s.inflight * sum(Fraction(u.mem) * s.layers for u in inst.units)


def _water_level(base: list[Fraction], extra: Fraction) -> Fraction:
    """lam with sum_i max(0, lam - base_i) = extra (extra >= 0)."""
    level = max(base)
    below = sorted(base)
    for k in range(len(below), 0, -1):   # raise the level over the k lowest stages
        lam = (extra + sum(below[:k])) / k
        if lam >= below[k - 1] and (k == len(below) or lam <= below[k]):
            level = max(level, lam)
            break
    return level


def relaxation_value(inst: RecomputeInstance) -> float:
    m = inst.microbatches
    base = [Fraction(s.compute) for s in inst.stages]
    if inst.mode == "local":
        times = []
        for i, s in enumerate(inst.stages):
            need = _memory_without_recompute(inst, i) - Fraction(s.capacity) - _slack(s.capacity)
            times.append(base[i] + _least_time(need, _stage_items(inst, i)))
        return float_down(one_f_one_b(times, m))   # exact: Fractions in, a Fraction out
    capacity = sum(Fraction(s.capacity) for s in inst.stages)
    need = sum(_memory_without_recompute(inst, i) for i in range(len(inst.stages))) - capacity \
        - _slack(float(capacity))
    items = [item for i in range(len(inst.stages)) for item in _stage_items(inst, i)]
    extra = _least_time(need, items)
    return float_down(sum(base) + extra + (m - 1) * _water_level(base, extra))


def memory_relaxation(inst: RecomputeInstance) -> Bound:
    return Bound(relaxation_value(inst), CERTIFICATE, "memory-relaxation")


def check_memory_relaxation(inst: RecomputeInstance, data: dict) -> float:
    return relaxation_value(inst)


CHECKS = {"memory-relaxation": check_memory_relaxation}


def check(instance, kind: str, data, options: CheckOptions = DEFAULT_CHECK) -> float:
    return dispatch(CHECKS, instance, kind, data)


CHEAP_BOUND_ITEMS = 20_000   # stage x unit items of the largest instance bounded without being asked


def bound(instance) -> Bound | None:
    """The memory relaxation, skipped beyond CHEAP_BOUND_ITEMS (it is exact rational arithmetic)."""
    if len(instance.stages) * len(instance.units) > CHEAP_BOUND_ITEMS:
        return None
    return memory_relaxation(instance)
