"""Max-min fair sharing of link bandwidth among flows (progressive filling, flow level).

Every flow crosses a set of directed links; all unfrozen flows grow at the same rate until some
link is full, whose flows are then frozen at that rate; repeat until every flow is frozen
(max-min fair flow control: Bertsekas and Gallager, "Data Networks", Ch. 6). Vectorized over the link x flow incidence.
"""

from __future__ import annotations

import numpy as np

SATURATED = 1e-12   # a link whose spare capacity is below this share of its capacity is full


def max_min_rates(incidence: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Rates of the flows (columns of `incidence`, links x flows, bool) under link `capacity`.

    A flow that crosses no link is not limited by the network: its rate is inf.
    """
    n_links, n_flows = incidence.shape
    rates = np.zeros(n_flows)
    routed = incidence.any(axis=0)
    rates[~routed] = np.inf
    active = routed.copy()
    spare = capacity.astype(float).copy()
    weights = incidence.astype(float)
    while active.any():
        counts = weights @ active                         # unfrozen flows per link
        used = counts > 0
        delta = np.min(spare[used] / counts[used])        # equal growth until the first link fills
        rates[active] += delta
        spare -= delta * counts
        full = used & (spare <= SATURATED * capacity)
        frozen = incidence[full].any(axis=0)
        if not (frozen & active).any():                   # float noise: freeze the tightest link
            full = used & (spare <= spare[used].min())
            frozen = incidence[full].any(axis=0)
        active &= ~frozen
    return rates
