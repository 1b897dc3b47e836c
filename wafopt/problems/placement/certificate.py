"""Certified lower bounds of stage placements (WATOS Eq. 2) and the data the exact models share.

Every bound here bounds the base objective sum_{i<j} C[i][j] D(slot i, slot j), which is at most
the full Eq. 2 objective (the conflict penalty is >= 0), on each candidate tile shape; the bound
of the instance is the least over the tile shapes a plan may use.

gilmore-lawler: L[i][k] = the cheapest way stage i in slot k can talk to all other stages (sorted
flows against sorted distances); base >= 1/2 sum_i L[i][slot i] >= 1/2 LAP(L). Re-derived from the
instance alone: L is rounded down by an a-priori bound on the float error of its dot products
(n terms, all >= 0), and the assignment bound is the weak-duality value of the Hungarian method's
potentials evaluated in exact rational arithmetic (valid even where they are slightly off).

rlt1: the LP relaxation of the Adams-Johnson RLT-1 model (docs/placement.md). The certificate is
the LP's row dual vector per tile shape, and the bound is its Lagrangian (weak-duality) value
    min_{r in [row_lower, row_upper]} pi.r + min_{z in [col_lower, col_upper]} (c - A^T pi).z,
valid for ANY prices pi, computed exactly with integers (every float is an integer over a power of
two), with c rebuilt exactly from the instance (pair weight x hops). The dual vector is stored
rather than the LP re-solved by the checker: the largest shipped RLT-1 LP (nug20) has about 15,000
rows, a few hundred kilobytes of JSON, and the exact check takes well under a second, while a
re-solve takes a solver and seconds to minutes. With integral weights and distances the base
objective is an integer and the bound is rounded up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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
from wafopt.problems.placement import projected
from wafopt.problems.placement.assignment import hungarian
from wafopt.problems.placement.branch_bound import check_bnb_frontier
from wafopt.problems.placement.instance import (
    Layout,
    PlacementInstance,
    orbit_representatives,
)

DUAL_DIGITS = 10   # significant digits of stored RLT-1 duals (the bound is computed from the stored ones)


def tile_name(tile) -> str:
    return f"{tile[0]}x{tile[1]}"


def integral(inst: PlacementInstance, lay: Layout) -> bool:
    """Integer weights and distances: every base objective value is an integer."""
    return bool(np.all(inst.weights == np.round(inst.weights)) and np.all(lay.distance == np.round(lay.distance)))


# --- Gilmore-Lawler ----------------------------------------------------------------------------

def gilmore_lawler(C: np.ndarray, D: np.ndarray) -> np.ndarray:
    """L[i][k] = min over placements of the other stages in slots other than k of sum_j C[i][j] D[k][l_j]
    = sorted(C[i, j != i], descending) . sorted(D[k, l != k], ascending)[:n-1]  (rearrangement)."""
    n, m = C.shape[0], D.shape[0]
    flows = np.sort(np.where(np.eye(n, dtype=bool), -np.inf, C), axis=1)[:, ::-1][:, :n - 1]   # (n, n-1)
    dists = np.sort(np.where(np.eye(m, dtype=bool), np.inf, D), axis=1)[:, :n - 1]             # (m, n-1)
    return flows @ dists.T


def linear_assignment(cost: np.ndarray) -> tuple[float, np.ndarray]:
    """(cost, column of each row) of a minimum-cost assignment (Hungarian method)."""
    col = hungarian(cost)[0]
    return float(cost[np.arange(cost.shape[0]), col].sum()), col


def assignment_bound(cost: np.ndarray, shrink: Fraction, u: np.ndarray, v: np.ndarray) -> Fraction:
    """Weak duality of the assignment LP (each row once, each column at most once) for row prices u
    and column prices v <= 0 on the costs cost * shrink: sum u + sum v + sum_ik min(0, cost_ik shrink
    - u_i - v_k), exactly. Terms whose float value is positive by more than its rounding error plus
    the shrink are exactly positive and skipped; the others are summed in rational arithmetic."""
    v = np.minimum(v, 0.0)
    slack = cost - u[:, None] - v[None, :]
    size = np.abs(cost) + np.abs(u)[:, None] + np.abs(v)[None, :]
    unsure = slack <= 8 * np.finfo(float).eps * size + float(1 - shrink) * 2 * np.abs(cost)
    total = sum(Fraction(float(x)) for x in u) + sum(Fraction(float(x)) for x in v)
    for i, k in zip(*np.nonzero(unsure)):
        term = Fraction(float(cost[i, k])) * shrink - Fraction(float(u[i])) - Fraction(float(v[k]))
        if term < 0:
            total += term
    return total


def gilmore_lawler_tile(inst: PlacementInstance, lay: Layout) -> Fraction:
    """The Gilmore-Lawler bound of the base objective on one tile shape, exactly proven."""
    n = inst.stages
    if n < 2:
        return Fraction(0)
    L = gilmore_lawler(inst.weights, lay.distance)
    # a dot product of n - 1 terms >= 0 is within gamma_{n-1} < (n + 1) 2^-52 of its float value
    shrink = 1 - Fraction(n + 1, 2 ** 52)
    _, u, v = hungarian(L)
    value = assignment_bound(L, shrink, u, v) / 2
    return Fraction(math.ceil(value)) if integral(inst, lay) else value


def gilmore_lawler_tiles(inst: PlacementInstance) -> dict[str, Fraction]:
    return {tile_name(lay.tile): gilmore_lawler_tile(inst, lay) for lay in inst.layouts}


def gilmore_lawler_bound(inst: PlacementInstance) -> Bound:
    tiles = gilmore_lawler_tiles(inst)
    return Bound(float_down(min(tiles.values())), CERTIFICATE, "gilmore-lawler",
                 {"tiles": {t: float_down(v) for t, v in tiles.items()}})


def check_gilmore_lawler(inst: PlacementInstance, data: dict) -> float:
    """The bound re-derived from the instance alone; the per-tile values a certificate lists (it
    need list none) must be exactly the re-derived ones."""
    tiles = {t: float_down(v) for t, v in gilmore_lawler_tiles(inst).items()}
    if "tiles" in data:
        stored = data["tiles"]
        if not isinstance(stored, dict) or set(stored) != set(tiles):
            raise CertificateError(f"gilmore-lawler certificate tiles must list exactly the instance's tile shapes "
                                   f"({', '.join(tiles)})")
        for name, value in tiles.items():
            if stored[name] != value or isinstance(stored[name], bool):
                raise CertificateError(f"gilmore-lawler tiles.{name} states {stored[name]!r:.40}, "
                                       f"it re-derives as {value!r}")
    return min(tiles.values())


# --- symmetry breaking (shared with the exact models) -----------------------------------------

def anchor(C: np.ndarray) -> int:
    """The stage symmetry breaking fixes: the one with the largest total weight."""
    return int(np.argmax(C.sum(axis=1)))


# --- RLT-1 --------------------------------------------------------------------------------------

@dataclass
class Rlt1Lp:
    """The RLT-1 LP of one tile shape as arrays: min cost . z subject to row_lower <= A z <= row_upper
    and col_lower <= z <= col_upper, A column-wise (CSC: start, index, value). Columns: x[i,k]
    (i*m + k), then y[p,q] (nx + p*Q + q) with cost weight[p] * hops[q] exactly."""

    cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray
    start: np.ndarray
    index: np.ndarray
    value: np.ndarray
    pairs: int            # stage pairs with product variables
    integral: bool        # integer C and D: every base objective value is an integer
    weight: np.ndarray    # (P,) C[i_p][j_p]
    hops: np.ndarray      # (Q,) D[k_q][l_q]

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.row_lower), len(self.cost)


def rlt1_pairs(C: np.ndarray, all_pairs: bool) -> tuple[np.ndarray, np.ndarray]:
    """Stage pairs i < j that get product variables: all of them, or only those with C[i][j] > 0."""
    iu, ju = np.triu_indices(C.shape[0], 1)
    if all_pairs:
        return iu, ju
    keep = C[iu, ju] > 0
    return iu[keep], ju[keep]


def build_rlt1(inst: PlacementInstance, lay: Layout, all_pairs: bool = False) -> Rlt1Lp:
    """LP relaxation of the Adams-Johnson RLT-1 model of the base objective (docs/placement.md)."""
    # data
    C, D = inst.weights, lay.distance
    n, m = inst.stages, len(lay.slots)
    pi, pj = rlt1_pairs(C, all_pairs)
    P = len(pi)
    qk, ql = np.nonzero(~np.eye(m, dtype=bool))       # ordered slot pairs q = (k, l), k != l, row-major
    Q = len(qk)
    q_reverse = ql * (m - 1) + qk - (qk > ql)         # index of (l, k)
    degree = np.bincount(np.concatenate([pi, pj]), minlength=n)

    # variables
    nx = n * m                                        # x[i,k] (column i*m + k): stage i in slot k
    yp, yq = np.divmod(np.arange(P * Q), Q)           # y[p,q] (column nx + p*Q + q) = x[i_p, k_q] x[j_p, l_q]
    ncol = nx + P * Q
    weight, hops = C[pi, pj], D[qk, ql]
    cost = np.concatenate([np.zeros(nx), weight[yp] * hops[yq]])
    col_lower, col_upper = np.zeros(ncol), np.ones(ncol)
    a = anchor(C)
    reps = orbit_representatives(lay.symmetries, m)
    col_upper[a * m + np.setdiff1d(np.arange(m), reps)] = 0.0   # symmetry breaking

    # constraints: (first row, count, lower, upper) per family, then the entries (row, column, coefficient)
    one_slot, one_stage = 0, n                        # sum_k x[i,k] = 1;  sum_i x[i,k] <= 1 (= 1 if m == n)
    from_i = n + m                                    # sum_l y[p,(k,l)] = x[i_p, k]
    to_j = from_i + P * m                             # sum_k y[p,(k,l)] = x[j_p, l]
    stage_sum = to_j + P * m                          # sum_{j != i} y(i at k, j at l) <= x[i,k] (= if complete)
    complete = (degree == n - 1) & (m == n)           # every partner of stage i has a y and every slot is used
    row_lower = np.concatenate([np.ones(n), np.ones(m) if m == n else np.full(m, -np.inf),
                                np.zeros(2 * P * m), np.where(np.repeat(complete, Q), 0.0, -np.inf)])
    row_upper = np.concatenate([np.ones(n + m), np.zeros(2 * P * m + n * Q)])

    xi, xk = np.divmod(np.arange(nx), m)
    pm, km = np.divmod(np.arange(P * m), m)
    iq, qq = np.divmod(np.arange(n * Q), Q)
    ycol = nx + np.arange(P * Q)
    rows = [one_slot + xi, one_stage + xk, from_i + pm * m + km, to_j + pm * m + km, stage_sum + iq * Q + qq,
            from_i + yp * m + qk[yq], to_j + yp * m + ql[yq],
            stage_sum + pi[yp] * Q + yq, stage_sum + pj[yp] * Q + q_reverse[yq]]
    cols = [np.arange(nx), np.arange(nx), pi[pm] * m + km, pj[pm] * m + km, iq * m + qk[qq],
            ycol, ycol, ycol, ycol]
    vals = [1.0, 1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0]
    row = np.concatenate(rows)
    col = np.concatenate(cols)
    val = np.concatenate([np.full(len(r), v) for r, v in zip(rows, vals)])
    order = np.argsort(col, kind="stable")
    start = np.concatenate([[0], np.cumsum(np.bincount(col, minlength=ncol))])
    return Rlt1Lp(cost, col_lower, col_upper, row_lower, row_upper, start.astype(np.int32),
                  row[order].astype(np.int32), val[order], P, integral(inst, lay), weight, hops)


def _dyadic(values) -> tuple[list[int], int]:
    """Floats as integers over one power of two: (numerators, e) with value = numerator / 2^e."""
    ratios = [float(x).as_integer_ratio() for x in values]
    e = max((den.bit_length() - 1 for _, den in ratios), default=0)
    return [num << (e - (den.bit_length() - 1)) for num, den in ratios], e


def lagrangian_value(lp: Rlt1Lp, row_dual) -> Fraction:
    """The weak-duality bound of ANY row prices, exactly: prices that would need an infinite row
    bound count as 0 (that is still a valid Lagrangian bound)."""
    nrow, ncol = lp.shape
    pi = np.array(row_dual, dtype=float)
    if pi.shape != (nrow,) or not np.all(np.isfinite(pi)):
        raise CertificateError(f"RLT-1 duals must be {nrow} finite numbers")
    pi[(pi > 0) & ~np.isfinite(lp.row_lower)] = 0.0
    pi[(pi < 0) & ~np.isfinite(lp.row_upper)] = 0.0
    numbers, e = _dyadic(np.concatenate([pi, lp.weight]))
    prices, weights = numbers[:nrow], numbers[nrow:]
    # rows: pi.r at the cheaper row bound (bounds are 0, 1 or infinite with price 0)
    total = 0
    for p, lo, up in zip(prices, lp.row_lower, lp.row_upper):
        if p > 0:
            total += p * int(lo)
        elif p < 0:
            total += p * int(up)
    # columns: (c - A^T pi) at the cheaper column bound; A has entries +-1, bounds are 0 or 1
    nx = ncol - len(lp.weight) * len(lp.hops)
    Q = len(lp.hops)
    hops = [int(h) for h in lp.hops]
    coef = [int(a) for a in lp.value]
    index = lp.index.tolist()
    start = lp.start.tolist()
    lower, upper = lp.col_lower.tolist(), lp.col_upper.tolist()
    for j in range(ncol):
        reduced = 0 if j < nx else weights[(j - nx) // Q] * hops[(j - nx) % Q]
        for t in range(start[j], start[j + 1]):
            reduced -= coef[t] * prices[index[t]]
        total += reduced * int(lower[j] if reduced > 0 else upper[j])
    return Fraction(total, 1 << e)


def lagrangian_bound(lp: Rlt1Lp, row_dual) -> float:
    """The Lagrangian bound of the prices as a float rounded down (up to an integer when the
    base objective is integral)."""
    value = lagrangian_value(lp, row_dual)
    return float(math.ceil(value)) if lp.integral else float_down(value)


def stored_duals(row_dual) -> list[float]:
    """The duals as stored in a certificate (rounded to DUAL_DIGITS significant digits)."""
    return [float(f"{x:.{DUAL_DIGITS}g}") for x in np.asarray(row_dual, dtype=float)]


def _tiles_of(inst: PlacementInstance, data: dict, kind: str, needs: str) -> tuple[dict, dict]:
    """A per-tile certificate's `tiles` mapping and the instance's tile shapes by name; every listed
    shape must be one the instance uses."""
    tiles = data.get("tiles")
    if not isinstance(tiles, dict):
        raise CertificateError(needs)
    known = {tile_name(lay.tile): lay for lay in inst.layouts}
    unknown = sorted(set(tiles) - set(known))
    if unknown:
        raise CertificateError(f"{kind} certificate for tile shape {unknown[0]}, which the instance does not use")
    return tiles, known


def check_rlt1(inst: PlacementInstance, data: dict) -> float:
    """min over the tile shapes of max(Gilmore-Lawler, the Lagrangian bound of the stored duals)."""
    tiles, known = _tiles_of(inst, data, "rlt1", "an rlt1 certificate needs tiles: {shape: {duals: [...]}}")
    values = []
    for name, lay in known.items():
        value = gilmore_lawler_tile(inst, lay)
        if name in tiles:
            entry = tiles[name]
            if not isinstance(entry, dict):
                raise CertificateError(f"rlt1 certificate tiles.{name} must be a mapping with duals")
            lp = build_rlt1(inst, lay)
            duals = finite_numbers(entry, "duals", lp.shape[0], f"tiles.{name}.")
            rlt = lagrangian_value(lp, duals)
            value = max(value, Fraction(math.ceil(rlt)) if lp.integral else rlt)
        values.append(value)
    return float_down(min(values))


def rlt1_certificate(inst: PlacementInstance, duals_by_tile: dict[str, list[float]]) -> Bound:
    """The rlt1 bound of stored duals per tile shape (`stored_duals`), with its certificate."""
    data = {"tiles": {name: {"duals": duals} for name, duals in duals_by_tile.items()}}
    return Bound(check_rlt1(inst, data), CERTIFICATE, "rlt1", data)


# --- projected eigenvalue (PB) and convex quadratic programming (QPB) bounds ----------------------

def check_projected(inst: PlacementInstance, data: dict, quadratic: bool) -> float:
    """min over the tile shapes of the bound each tile's entry proves (projected.py): PB, or with
    a stored Frank-Wolfe point (qpb only) the linearization at that point; a tile beyond
    MAX_SLOTS, or one a stopped run left unproven (`from: gilmore-lawler`), holds its
    Gilmore-Lawler bound. Each entry's `value` must re-derive."""
    kind = "qpb" if quadratic else "projected-eigenvalue"
    tiles, known = _tiles_of(inst, data, kind, f"a {kind} certificate needs tiles: {{shape: {{value, point}}}}")
    values = []
    for name, lay in known.items():
        entry = tiles.get(name)
        where = f"{kind} tiles.{name}"
        if not isinstance(entry, dict):
            raise CertificateError(f"{where} is missing (a mapping with value)")
        if len(lay.slots) > projected.MAX_SLOTS or inst.stages < 2 or entry.get("from") == "gilmore-lawler":
            value = gilmore_lawler_tile(inst, lay)   # re-derived: valid for any tile
            projected.check_close(entry.get("value"), float(value), f"{where}.value")
        else:
            value = projected.entry_value(inst.weights, lay.distance, entry, quadratic, where)
        values.append(Fraction(math.ceil(value)) if integral(inst, lay) else value)
    return float_down(min(values))


CHECKS = {"gilmore-lawler": check_gilmore_lawler, "rlt1": check_rlt1, "bnb-frontier": check_bnb_frontier,
          "projected-eigenvalue": lambda inst, data: check_projected(inst, data, False),
          "qpb": lambda inst, data: check_projected(inst, data, True)}


def check(instance, kind: str, data, options: CheckOptions = DEFAULT_CHECK) -> float:
    """The bound a certificate proves (a branch-and-bound tree walked as `options` say)."""
    checks = {**CHECKS, "bnb-frontier": lambda inst, data: check_bnb_frontier(inst, data, options)}
    return dispatch(checks, instance, kind, data)


CHEAP_BOUND_WORK = 4e6   # n^2 m of the largest instance whose Gilmore-Lawler bound certify computes itself


def bound(instance) -> Bound | None:
    """The Gilmore-Lawler bound, skipped beyond CHEAP_BOUND_WORK (the Hungarian method is O(n^2 m))."""
    if max(instance.stages ** 2 * len(lay.slots) for lay in instance.layouts) > CHEAP_BOUND_WORK:
        return None
    return gilmore_lawler_bound(instance)
