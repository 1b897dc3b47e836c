"""The LP tier of the layout bound: (w, mu) from Kelley's cutting planes on the concave Lagrangian
LB(w, mu) of full_bound, the LP over the cuts solved by scipy's linprog (HiGHS).

The LP only proposes points: the certified value is always LB(w, mu) itself, re-derived by
`wafopt certify` from the weights and multiplier the certificate stores.
"""

from __future__ import annotations

import numpy as np

from wafopt.planner.full_bound import (
    best_mu,
    cheap_weights,
    coefficients,
    lagrangian,
    mu_high,
    normalized_weights,
)
from wafopt.planner.layout_data import (
    LayoutBound,
    LayoutData,
    at_split,
    forward_counts,
    send_crossings,
)

KELLEY_ROUNDS = 60   # cutting-plane rounds of the refinement


def supergradient(d: LayoutData, w: np.ndarray, mu: float, split: list[int]) -> tuple[np.ndarray, float]:
    """At the split, schemes and recomputation that make LB(w, mu) least: the 2p schedule
    inequalities' right-hand sides (g_k, h_k with O) and the pooled memory's excess over H * C.
    LB(w, mu) = w . G + mu * excess there, a supergradient of the concave LB (Kelley's cuts)."""
    p, m = d.layout.pp, d.m
    v = d.layout.interleave
    aF, aB = coefficients(w, p, m, v)
    s = at_split(d, split)
    F, B, M = np.zeros(p), np.zeros(p), 0.0
    for j in range(p):
        freed = s.L[j] * s.a[j] - s.ub[j]      # (S, U): dropping a unit in every layer, one regenerated
        gain = s.L[j] * aB[j] * s.r[j] - mu * d.copies * freed
        drop = gain < 0 if d.forced is None else np.broadcast_to(d.forced > 0, s.r[j].shape)
        per = aF[j] * s.Fc[j] + aB[j] * s.Bc[j] + mu * d.copies * s.M0[j] + np.where(drop, gain, 0.0).sum(axis=1)
        k = int(np.argmin(per))
        F[j] = s.Fc[j, k]
        B[j] = s.Bc[j, k] + s.L[j] * (s.r[j, k] * drop[k]).sum()
        M += s.M0[j, k] - (freed[k] * drop[k]).sum()
    T = F + B
    g_sends, h_sends = send_crossings(p, v)
    g = s.optimizer + np.concatenate([[0.0], np.cumsum(T)[:-1]]) / v + m * T + d.send_s * g_sends
    h = (s.optimizer + T.sum() - T + m * B + forward_counts(p, m) * F + d.send_s * h_sends) if v == 1 else np.zeros(p)
    return np.concatenate([g, h]), d.copies * M - d.cap


def cutting_planes(d: LayoutData, starts: list, rounds: int = KELLEY_ROUNDS) -> tuple[np.ndarray, float] | None:
    """(w, mu) maximising LB over the weights and the multiplier by Kelley's cutting planes: every
    evaluation's supergradient is a cut of the concave LB; the LP over the cuts (HiGHS) proposes the
    next point. The LP is only a guide: the certified value is LB(w, mu) itself."""
    from scipy.optimize import linprog  # scipy: heavy, only when a bound is refined

    p2 = 2 * d.layout.pp
    hi = mu_high(d, np.full(d.layout.pp, 2.0 * d.m + 2.0))   # aB_j <= 2 m + 2 for any weights
    if hi <= 0:
        hi = 1e-30   # nothing can be recomputed: memory has no price worth paying
    cuts, best = [], None
    points = list(starts)
    for _ in range(rounds):
        if not points:
            break
        w, mu = points.pop(0)
        w = normalized_weights(d, w)
        value, split = lagrangian(d, w, mu, with_split=True)
        if best is None or value > best[0]:
            best = (value, w, mu)
        G, excess = supergradient(d, w, mu, split)
        cuts.append(np.concatenate([G, [excess * hi]]))   # mu = hi * nu, nu in [0, 1]
        if not points:
            n = p2 + 2   # w, nu, t; maximise t <= cut . (w, nu)
            A = np.array([np.concatenate([-c, [1.0]]) for c in cuts])
            scale = np.abs(A).max(axis=1, keepdims=True)
            res = linprog(np.concatenate([np.zeros(n - 1), [-1.0]]), A_ub=A / scale, b_ub=np.zeros(len(cuts)),
                          A_eq=np.concatenate([np.ones(p2), [0.0, 0.0]])[None, :], b_eq=[1.0],
                          bounds=[(0, None)] * p2 + [(0, 1), (None, None)], method="highs")
            if res.status != 0 or not res.x[-1] > best[0] * (1 + 1e-7):
                break   # the cuts promise no more than is proven
            points.append((np.maximum(res.x[:p2], 0.0), float(res.x[p2]) * hi))
    return None if best is None else (best[1], best[2])


def refine(bound: LayoutBound) -> LayoutBound:
    """Raise `bound` in place (the search keeps one bound per layout and tightens it where it
    matters) with (w, mu) from cutting planes over the weights and the multiplier (the dual of the
    LP relaxation over every split), when that proves more; returns it."""
    if not bound.feasible or bound.refined or bound.data is None:
        return bound
    d = bound.data
    starts = [(w, best_mu(d, w)[1]) for w in cheap_weights(d)]
    if bound.w is not None:
        starts.insert(0, (np.asarray(bound.w), bound.mu))
    found = cutting_planes(d, starts)
    if found is not None:
        value, mu = best_mu(d, found[0])    # the multiplier polished for the certified value
        if lagrangian(d, found[0], found[1]) > value:
            value, mu = lagrangian(d, found[0], found[1]), found[1]
        if value > bound.value:
            bound.value = value
            bound.w, bound.mu = [float(v) for v in found[0]], mu
    bound.refined = True
    return bound
