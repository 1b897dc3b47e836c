"""Certified lower bounds of routings (peak directed-link load / bandwidth).

endpoint: every flow crosses at least one link, so some link carries at least the largest flow;
all traffic a die sends leaves over its healthy outgoing links (and all it receives enters over
its incoming ones), so one of them carries at least that volume / their number. The peak is at
least the largest of these, divided by the link bandwidth. Re-derived from the instance alone in
exact arithmetic and rounded down; the certificate has no data.
"""

from __future__ import annotations

from fractions import Fraction

from wafopt.core.result import CERTIFICATE, Bound
from wafopt.problems.certificates import (
    DEFAULT_CHECK,
    CheckOptions,
    dispatch,
    float_down,
)


def endpoint_bound(instance) -> float:
    """The per-die endpoint traffic bound of the peak link load / bandwidth."""
    mesh = instance.mesh
    sent: dict = {}
    received: dict = {}
    for f in instance.flows:
        sent[f.src] = sent.get(f.src, 0) + Fraction(f.volume)
        received[f.dst] = received.get(f.dst, 0) + Fraction(f.volume)
    per_link = [volume / len(mesh.neighbours(die)) for side in (sent, received) for die, volume in side.items()]
    peak = max(per_link + [Fraction(f.volume) for f in instance.flows])
    return float_down(peak / Fraction(mesh.link_bandwidth))


def endpoint(instance) -> Bound:
    return Bound(endpoint_bound(instance), CERTIFICATE, "endpoint")


def check_endpoint(instance, data: dict) -> float:
    return endpoint_bound(instance)


CHECKS = {"endpoint": check_endpoint}


def check(instance, kind: str, data, options: CheckOptions = DEFAULT_CHECK) -> float:
    return dispatch(CHECKS, instance, kind, data)


def bound(instance) -> Bound:
    return endpoint(instance)
