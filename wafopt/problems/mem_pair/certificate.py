"""Certified lower bounds of Mem_pair allocations (chunk x hops).

transport-lp: the transportation LP without the K-helpers limit (a relaxation):
    min sum_sh d_sh y_sh  s.t.  sum_h y_sh = n_s,  sum_s y_sh <= c_h,  0 <= y_sh <= min(n_s, c_h)
over the reachable (sender, helper) pairs, in chunks. The certificate is a dual vector: a price
u_s per sender and v_h >= 0 per helper. By weak duality, for ANY such prices (optimal or not)
    OPT >= sum_s n_s u_s - sum_h c_h v_h + sum_sh min(0, d_sh - u_s + v_h) min(n_s, c_h),
evaluated here in exact rational arithmetic; the objective is a whole number of chunk-hops, so the
value is rounded up to an integer, then multiplied by the chunk size (rounded down).
`transport_lp` takes the prices from HiGHS' dual simplex; the check never trusts them.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from wafopt.core.errors import CertificateError
from wafopt.core.result import CERTIFICATE, Bound
from wafopt.problems.certificates import (
    DEFAULT_CHECK,
    CheckOptions,
    dispatch,
    finite_numbers,
    float_down,
)
from wafopt.problems.mem_pair.instance import MemPairInstance


def _hop_matrix(inst: MemPairInstance) -> np.ndarray:
    """hops[s][h] as a float matrix, NaN where the dies are not connected."""
    return np.array([[np.nan if d is None else d for d in row] for row in inst.hops], dtype=float).reshape(
        len(inst.senders), len(inst.helpers))


def dual_value(inst: MemPairInstance, u: list, v: list) -> float:
    """The bound the prices (u per sender, v >= 0 per helper) prove, in objective units. The pair
    terms min(0, d - u + v) min(n, c) are summed exactly where they may be negative; a pair whose
    float reduced cost exceeds its rounding error contributes 0 exactly."""
    if any(x < 0 for x in v):
        raise CertificateError("helper prices v must be >= 0 (the helper rows are <= constraints)")
    n, c = inst.need, inst.room
    U, V = [Fraction(x) for x in u], [Fraction(x) for x in v]
    total = sum(n[s] * U[s] for s in range(len(n))) - sum(c[h] * V[h] for h in range(len(c)))
    hops = _hop_matrix(inst)
    uf, vf = np.asarray(u, dtype=float), np.asarray(v, dtype=float)
    reduced = hops - uf[:, None] + vf[None, :]
    whole = all(abs(x) < 2 ** 50 and float(x).is_integer() for x in itertools.chain(u, v))
    # integral prices: hops - u + v is exact in floats; otherwise allow for its rounding
    margin = 0.0 if whole else 8 * np.finfo(float).eps * (np.abs(hops) + np.abs(uf)[:, None] + np.abs(vf)[None, :])
    unsure = ~np.isnan(hops) & (reduced < margin) if whole else ~np.isnan(hops) & ~(reduced > margin)
    for s, h in zip(*np.nonzero(unsure)):
        term = int(hops[s, h]) - U[s] + V[h]
        if term < 0:
            total += term * min(n[s], c[h])
    return float_down(Fraction(inst.chunk) * math.ceil(total))   # whole chunk-hops


def transport_duals(inst: MemPairInstance) -> tuple[list[int], list[int]] | None:
    """Prices of the transportation LP from HiGHS' dual simplex (integral for this totally
    unimodular LP, so rounding only removes float noise), or None when it is infeasible. Any
    prices give a valid bound; `dual_value` checks them exactly."""
    import highspy  # lazy: slow import (docs/architecture.md)

    hops = _hop_matrix(inst)
    S, H = hops.shape
    sender, helper = np.nonzero(~np.isnan(hops))
    n, c = np.asarray(inst.need, dtype=float), np.asarray(inst.room, dtype=float)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(sender), S + H
    lp.col_cost_ = hops[sender, helper]
    lp.col_lower_, lp.col_upper_ = np.zeros(len(sender)), np.minimum(n[sender], c[helper])
    lp.row_lower_ = np.concatenate([n, np.full(H, -highspy.kHighsInf)])   # place all; helper room
    lp.row_upper_ = np.concatenate([n, c])
    matrix = lp.a_matrix_
    matrix.format_, matrix.num_col_, matrix.num_row_ = highspy.MatrixFormat.kColwise, len(sender), S + H
    matrix.start_ = np.arange(0, 2 * len(sender) + 1, 2, dtype=np.int32)
    matrix.index_ = np.column_stack([sender, S + helper]).ravel().astype(np.int32)
    matrix.value_ = np.ones(2 * len(sender))
    lp.a_matrix_ = matrix
    solver = highspy.Highs()
    solver.setOptionValue("output_flag", False)
    solver.passModel(lp)
    solver.run()
    if solver.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    dual = np.asarray(solver.getSolution().row_dual)
    return [int(round(x)) for x in dual[:S]], [max(0, int(round(-x))) for x in dual[S:]]


def transport_lp(inst: MemPairInstance) -> Bound | None:
    """The transportation LP's value with HiGHS' prices as the certificate (None if infeasible)."""
    duals = transport_duals(inst)
    return None if duals is None else _bound(inst, *duals)


def nearest_helper(inst: MemPairInstance) -> Bound:
    """A cheaper instance of the same certificate: each sender's chunks travel at least to its
    nearest helper with room (u_s = those hops, v = 0)."""
    hops = _hop_matrix(inst)
    usable = ~np.isnan(hops) & (np.asarray(inst.room) > 0)[None, :]
    u = [int(np.min(hops[s][usable[s]])) if usable[s].any() else 0 for s in range(hops.shape[0])]
    return _bound(inst, u, [0] * len(inst.helpers))


def _bound(inst: MemPairInstance, u: list[int], v: list[int]) -> Bound:
    return Bound(dual_value(inst, u, v), CERTIFICATE, "transport-lp", {"u": u, "v": v})


def check_transport_lp(inst: MemPairInstance, data: dict) -> float:
    u = finite_numbers(data, "u", len(inst.senders))
    v = finite_numbers(data, "v", len(inst.helpers))
    return dual_value(inst, u, v)


CHECKS = {"transport-lp": check_transport_lp}


def check(instance, kind: str, data, options: CheckOptions = DEFAULT_CHECK) -> float:
    return dispatch(CHECKS, instance, kind, data)


CHEAP_BOUND_PAIRS = 5_000   # sender x helper pairs up to which certify solves the transportation LP itself


def bound(instance) -> Bound | None:
    """The transport-LP bound: optimal prices up to CHEAP_BOUND_PAIRS, nearest-helper prices beyond."""
    if len(instance.senders) * len(instance.helpers) > CHEAP_BOUND_PAIRS:
        return nearest_helper(instance)
    return transport_lp(instance) or nearest_helper(instance)
