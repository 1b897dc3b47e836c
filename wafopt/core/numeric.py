"""The one numeric policy: when two numbers agree, how a status follows from objective and bound,
and how decimal data becomes exact integers for CP-SAT.

One rule for the whole package: `a` and `b` agree when |a - b| <= REL_TOL * max(|a|, |b|) + ABS_FLOOR.
The floor only matters for objectives at or near zero; it is far below any objective a plan has
(the smallest, a routing peak in seconds, is around 1e-6), so a relative tamper of 1e-3 on such
an objective is still caught.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Iterable

REL_TOL = 1e-6      # relative agreement of objectives, bounds and evaluated values
ABS_FLOOR = 1e-12   # absolute floor of the rule, for values at zero
MAX_EXACT = 2 ** 53  # largest integer a float holds exactly; also the cap on scaled CP-SAT sums


def tolerance(*values: float) -> float:
    """The allowed difference between values of this size."""
    return REL_TOL * max((abs(v) for v in values), default=0.0) + ABS_FLOOR


def close(a: float, b: float) -> bool:
    return abs(a - b) <= tolerance(a, b)


def at_most(a: float, b: float) -> bool:
    """a <= b under the rule (a bound at most an objective, a load at most a capacity)."""
    return a <= b + tolerance(a, b)


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """(objective - bound) / |objective|; 0 when the two agree under the rule; None without a bound
    or when the objective is 0 and the bound below it."""
    if objective is None or bound is None:
        return None
    if close(objective, bound):
        return 0.0
    if objective == 0:
        return None
    return (objective - bound) / abs(objective)


def integral_bound(bound: float, scale: int | Fraction = 1) -> float:
    """A proven bound on an objective whose values are whole multiples of 1/scale (integers by
    default), rounded up to that grid: the nearest grid point when the bound agrees with it under
    the rule (solver noise: 577.9999999 and 578.0000001 give 578), else the next one up (577.01
    gives 578). Never weaker than the noise: 18574776 stays 18574776."""
    units = bound * scale
    nearest = round(units)
    return float(Fraction(nearest if close(units, nearest) else math.ceil(units)) / scale)


def integral_floor(value: float) -> int:
    """Floor of a value that should be integral, under the same rule: the nearest integer when
    the value agrees with it, else the next one down."""
    nearest = round(value)
    return int(nearest if close(value, nearest) else math.floor(value))


# ---- status -------------------------------------------------------------------------------

def settle_status(claimed: str, objective: float | None, bound: float | None,
                  feasible: bool) -> tuple[str, float | None, str]:
    """The one place where a status is decided: (status, bound kept, note).

    - infeasible stays infeasible (no objective, no bound);
    - no feasible plan: unknown (a bound is kept: it still bounds every plan);
    - a bound above the evaluated objective (beyond the rule) proves nothing: discarded;
    - optimal only when a bound agrees with the objective (a method's claim without one is
      downgraded), and a bound that agrees makes any plan optimal;
    - otherwise feasible.
    """
    if claimed == "infeasible":
        return "infeasible", None, ""
    if bound is not None and not finite(bound):
        bound = None
    if not feasible or objective is None or not finite(objective):
        return "unknown", bound, ""
    if bound is not None and not at_most(bound, objective):
        return "feasible", None, f"the reported bound {bound:.10g} exceeds the evaluated objective " \
                                 f"{objective:.10g}: discarded"
    if bound is not None and close(bound, objective):
        note = "" if claimed == "optimal" else "optimal: the proven bound equals the objective"
        return "optimal", min(bound, objective), note  # never report float noise above the objective
    if claimed == "optimal":
        return "feasible", bound, "claimed optimal but the evaluated objective exceeds the proven bound"
    return "feasible", bound, ""


# ---- exact decimals -----------------------------------------------------------------------

def exact(value) -> Fraction:
    """The exact rational a number stands for: an int as it is, a float by its shortest decimal
    form (6.87 is 687/100, not the binary fraction nearest to it), a Decimal or str exactly."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value}")
        return Fraction(Decimal(repr(float(value))))   # float(): numpy floats repr as np.float64(...)
    try:
        return Fraction(Decimal(str(value)))
    except (InvalidOperation, ValueError):
        raise ValueError(f"not a number: {value!r}") from None


def decimal_places(value) -> int:
    """Digits after the decimal point in the shortest exact form (0 for integers); a value that
    has no finite decimal form (a fraction like 1/3) raises ValueError."""
    q = exact(value)
    d, den = 0, q.denominator
    while den % 10 == 0:
        den //= 10
        d += 1
    while den % 2 == 0 or den % 5 == 0:  # 1/2 = 0.5, 1/8 = 0.125: still finite decimals
        den //= 2 if den % 2 == 0 else 5
        d += 1
    if den != 1:
        raise ValueError(f"{value!r} has no finite decimal form")
    return d


def decimal_scale(values: Iterable, max_digits: int = 9, limit: float = 2.0 ** 50,
                  total: bool = False) -> int | None:
    """The smallest 10^d (d <= max_digits) that makes every value an integer, or None.

    Decided on each value's exact decimal form, never on float sums: data given as 6.87 and 3.51
    scale by 100 to 687 and 351 exactly. None when a value needs more digits, or when the scaled
    values (summed, if `total`) would exceed `limit`, so CP-SAT's 64-bit sums stay exact.
    """
    values = list(values)
    digits = 0
    for v in values:
        try:
            digits = max(digits, decimal_places(v))
        except ValueError:
            return None
        if digits > max_digits:
            return None
    scale = 10 ** digits
    size = sum(abs(exact(v)) for v in values) if total else max((abs(exact(v)) for v in values), default=0)
    if size * scale > limit:
        return None
    return scale


def scaled(value, scale: int) -> int:
    """value x scale as an exact integer (raises ValueError when it is not one)."""
    q = exact(value) * scale
    if q.denominator != 1:
        raise ValueError(f"{value!r} x {scale} is not an integer")
    return int(q)
