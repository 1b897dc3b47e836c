"""Shared pieces of the certificate checkers (`wafopt.problems.<problem>.certificate`).

Every problem's certificate module has
- `CHECKS`: kind -> `check_<kind>(instance, data) -> float`, the value the data proves, re-derived
  from the instance (raises CertificateError when the data does not prove a bound);
- `check(instance, kind, data, options)`: that dispatch (CheckOptions: how to check, never what
  is proven);
- `bound(instance) -> Bound | None`: the cheap bound `certify` computes itself from the instance
  alone, so a solution without a certificate still gets a certified gap.

Certified values are computed in exact rational arithmetic on the instance's numbers as stored
(binary floating point, so `Fraction(x)` is exact) and rounded down to a float at the end, so a
certified bound is never above what the data proves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from wafopt.core.errors import CertificateError


@dataclass(frozen=True)
class CheckOptions:
    """How a certificate is checked, never what it proves: the worker processes a check that splits
    its work may use (branch-and-bound trees), and where a long check reports its progress."""
    workers: int = 1
    progress: Callable[[str], None] | None = None


DEFAULT_CHECK = CheckOptions()   # one process, silent


def float_down(value: Fraction | int) -> float:
    """The largest float not above `value` (directed rounding of an exact result)."""
    f = float(value)
    if Fraction(f) > value:
        f = math.nextafter(f, -math.inf)
    return f


def dispatch(checks: dict[str, Callable], instance, kind: str, data) -> float:
    if kind not in checks:
        raise CertificateError(f"unknown certificate kind {kind!r} (known: {', '.join(checks)})")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise CertificateError(f"certificate data must be a mapping, got {type(data).__name__}")
    value = checks[kind](instance, data)
    if not math.isfinite(value):
        raise CertificateError(f"the {kind} certificate re-derives a non-finite value {value}")
    return value


def finite_numbers(data: dict, key: str, length: int | None = None, where: str = "") -> list[float]:
    """data[key] as a list of finite numbers (of `length` items when given)."""
    values = data.get(key)
    name = f"{where}{key}"
    if not isinstance(values, list):
        raise CertificateError(f"certificate {name} must be a list of numbers, got {type(values).__name__}")
    if length is not None and len(values) != length:
        raise CertificateError(f"certificate {name} has {len(values)} numbers, the instance needs {length}")
    for k, v in enumerate(values):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise CertificateError(f"certificate {name}[{k}] must be a finite number, got {v!r:.40}")
    return [float(v) for v in values]
