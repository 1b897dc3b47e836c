"""Certified lower bounds of TATP group mappings.

ring-floor: a ring's cost is its longest hop, so every ring costs at least 1; for an odd group
size N >= 3 at least 2, because the healthy mesh is a subgraph of a grid, which is bipartite and
has no cycle of odd length (N unit hops cannot close an odd ring). Bound: G x that floor
(`TatpInstance.lower_bound`), re-derived from the instance alone; the certificate has no data.
"""

from __future__ import annotations

from wafopt.core.result import CERTIFICATE, Bound
from wafopt.problems.certificates import DEFAULT_CHECK, CheckOptions, dispatch


def ring_floor(instance) -> Bound:
    return Bound(float(instance.lower_bound), CERTIFICATE, "ring-floor")


def check_ring_floor(instance, data: dict) -> float:
    return float(instance.groups * instance.ring_lower_bound)


CHECKS = {"ring-floor": check_ring_floor}


def check(instance, kind: str, data, options: CheckOptions = DEFAULT_CHECK) -> float:
    return dispatch(CHECKS, instance, kind, data)


def bound(instance) -> Bound:
    return ring_floor(instance)
