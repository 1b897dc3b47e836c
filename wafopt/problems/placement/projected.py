"""Eigenvalue bounds of stage placement: the projected eigenvalue bound (PB; Hadley, Rendl and
Wolkowicz, "A new lower bound via projection for the quadratic assignment problem", 1992) and the
convex quadratic programming bound (QPB; Anstreicher and Brixius, "A new bound for the quadratic
assignment problem based on convex quadratic programming", 2001), with their rigorous checks.

The quadratic assignment problem on one tile shape, in trace form: m usable slots, the stages
padded to m with dummy stages of zero flow (so free slots are assignments to dummies),
A = C padded (m x m), B = D (m x m), a linear cost L (m x m; zero at the root, the cost of
talking to fixed stages inside branch and bound), and a permutation matrix X:

    trace objective  t(X) = tr(A X B X^T) + <L, X>,   base objective = t(X) / 2 (+ fixed part).

Projection: with P = ee^T/m and Q = I - P, every permutation has X = P + Z, Z = QXQ, and
Z Z^T = Z^T Z = Q. Hence, for ANY symmetric S and T,

    t(X) = h(Z) + tr(SQ) + tr(TQ) + <L + (2/m) r s^T, X> - (e^T A e)(e^T B e)/m^2,
    h(Z) = <Z, AZB - SZ - ZT>,   r = Ae, s = Be.

If h + mu ||.||_F^2 is convex on the subspace {QZQ} (checked, see `convexity_margin`), then for any
point X0 (Z0 = QX0Q) the linearization of h + mu||.||^2 at Z0 is below it, and ||Z||^2 = m - 1 on
permutations, so every permutation satisfies

    t(X) >= -h(Z0) - mu (||Z0||^2 + m - 1) + tr(SQ) + tr(TQ) - (e^T A e)(e^T B e)/m^2
            + LAP(Q (2 (A Z0 B - S Z0 - Z0 T) + 2 mu Z0) Q + L + (2/m) r s^T).

S and T are built from the eigenvectors of the projected matrices and an optimal dual (s_i + t_j
<= alpha_i beta_j) of the minimal scalar product of their eigenvalues, so h is convex (up to
rounding) and with Z0 = 0 the right-hand side is PB. QPB is the same inequality at the point X0
where Frank-Wolfe on the convex relaxation min_{X doubly stochastic} [h(X - P) + ...] got its best
lower bound; the Frank-Wolfe lower bound at X0 is exactly this right-hand side (mu = 0).

What the checker proves, from the instance and the stored point alone: S and T are recomputed
from the instance (any symmetric matrices are valid); mu is proven by a floating-point Cholesky
factorization of h + mu||.||^2 in the rational basis V = [I; -e^T] of the subspace, with the
backward error bound of Cholesky and an entrywise bound on the error of forming the matrix; the
constant and the LAP are evaluated exactly (floats are integers over powers of two), the LAP by
weak duality of float potentials. Every stored number is checked: the stored value of each tile
must agree with the re-derived one.

Branch-and-bound nodes use QPB proven in floats instead (qpb_nodes; nothing is stored, the checker
re-runs the same Frank-Wolfe steps): the same inequality evaluated in midpoint-radius arithmetic,
with mu bounded by how far the quadratic form is from its diagonal model in the computed
eigenbases (_model_error).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields
from fractions import Fraction

import numpy as np

from wafopt.core.errors import CertificateError
from wafopt.core.numeric import close
from wafopt.problems.placement.assignment import (
    assignment_columns,
    column_potentials,
    hungarian,
)

MAX_SLOTS = 64          # beyond this (the convexity check is an (m-1)^2 Cholesky) a tile keeps its GL bound
THETA_INERT = 1e-6      # a theta entry whose step weight is below this share of the largest is inert
POINT_DIGITS = 12       # significant digits of a stored Frank-Wolfe point
UNIT = 2.0 ** -53       # unit roundoff of binary64


def gamma(k: int) -> float:
    """Higham's gamma_k = k u / (1 - k u), slightly inflated for its own rounding."""
    return k * UNIT / (1 - k * UNIT) * (1 + 1e-6)


def padded(C: np.ndarray, m: int) -> np.ndarray:
    A = np.zeros((m, m))
    A[:C.shape[0], :C.shape[0]] = C
    return A


# --- S and T from the projected eigen-decompositions -----------------------------------------------

def projection_basis(m: int) -> np.ndarray:
    """An orthonormal basis (m x m-1) of the vectors orthogonal to e."""
    q, _ = np.linalg.qr(np.concatenate([np.ones((m, 1)), np.eye(m)[:, :m - 1]], axis=1))
    return q[:, 1:]


@dataclass
class Spectral:
    """Eigen-data of one (A, B) and the S, T they give (floats, not proven: the checker proves
    whatever S, T come out). theta (m - 2 numbers in [0, 1]) picks the optimal dual of the
    minimal scalar product (`scalar_product_duals`); it does not change PB but shapes QPB."""

    alpha: np.ndarray      # eigenvalues of the projected A (ascending)
    beta: np.ndarray       # of the projected B, paired with alpha (descending)
    WA: np.ndarray         # their eigenvectors in R^m (orthogonal to e)
    WB: np.ndarray
    theta: np.ndarray
    S: np.ndarray = None
    T: np.ndarray = None

    def __post_init__(self):
        s, t = scalar_product_duals(self.alpha, self.beta, self.theta)
        S, T = (self.WA * s) @ self.WA.T, (self.WB * t) @ self.WB.T
        self.S, self.T = (S + S.T) / 2, (T + T.T) / 2

    @property
    def step_weight(self) -> np.ndarray:
        """How much each theta_k moves S and T: (beta_k - beta_{k+1}) (alpha_{k+1} - alpha_k)."""
        return (self.beta[:-1] - self.beta[1:]) * np.diff(self.alpha)

    @property
    def inert(self) -> np.ndarray:
        """The theta_k that change S and T by no more than rounding: canonically 1."""
        weight = self.step_weight
        return weight <= THETA_INERT * max(float(weight.max(initial=0.0)), 1e-300)

    def canonical(self, theta: np.ndarray) -> np.ndarray:
        return np.where(self.inert, 1.0, theta)

    def check_theta(self) -> None:
        """A stored theta is 0 or 1 everywhere and 1 where it is inert, so that every change of it
        changes the bound it proves (and is caught by the value check)."""
        if not np.all((self.theta == 0) | (self.theta == 1)):
            raise CertificateError("theta entries must be 0 or 1")
        if not np.all(self.theta[self.inert] == 1):
            raise CertificateError("theta is not canonical: an entry that does not move S and T must be 1")

    def with_theta(self, theta: np.ndarray) -> Spectral:
        return Spectral(self.alpha, self.beta, self.WA, self.WB, np.asarray(theta, dtype=float))

    def better_theta(self, X: np.ndarray) -> np.ndarray:
        """The theta that maximizes the relaxation's objective at X (it is linear in theta): in the
        eigenbases h(Z) = sum_ij (alpha_i beta_j - s_i - t_j) Yhat_ij^2, and raising step k of s
        moves weight from the rows after k to the columns after k."""
        Y2 = np.square(self.WA.T @ X @ self.WB)
        rows = np.cumsum(Y2.sum(axis=1)[::-1])[::-1][1:]
        cols = np.cumsum(Y2.sum(axis=0)[::-1])[::-1][1:]
        return self.canonical((rows > cols).astype(float))


def projected_eigen(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Eigen-data of the projected A and B (one pair or stacks): alpha ascending, beta descending,
    and their eigenvectors in R^m (orthogonal to e), WA and WB."""
    V = projection_basis(A.shape[-1])
    alpha, UA = np.linalg.eigh(V.T @ A @ V)
    beta, UB = np.linalg.eigh(V.T @ B @ V)
    return alpha, beta[..., ::-1], V @ UA, V @ UB[..., ::-1]


def spectral(A: np.ndarray, B: np.ndarray, theta=None) -> Spectral:
    m = A.shape[0]
    theta = np.ones(max(m - 2, 0)) if theta is None else np.asarray(theta, dtype=float)
    if theta.shape != (max(m - 2, 0),):
        raise CertificateError(f"theta must hold {max(m - 2, 0)} numbers")
    return Spectral(*projected_eigen(A, B), theta)


def scalar_product_duals(alpha: np.ndarray, beta: np.ndarray, theta) -> tuple[np.ndarray, np.ndarray]:
    """An optimal dual of the assignment LP on c_ij = alpha_i beta_j (alpha ascending, beta
    descending: c is Monge and the identity is optimal), for one pair or stacks. Tight on the
    diagonal, t_j = c_jj - s_j; feasible when each step s_{i+1} - s_i lies in [beta_{i+1}, beta_i]
    (alpha_{i+1} - alpha_i): the point theta_i of the way. t is then lowered where rounding left a
    violated pair."""
    step = (theta * beta[..., 1:] + (1 - theta) * beta[..., :-1]) * np.diff(alpha, axis=-1)
    s = np.concatenate([np.zeros(alpha.shape[:-1] + (1,)), np.cumsum(step, axis=-1)], axis=-1)
    c = alpha[..., :, None] * beta[..., None, :]
    t = np.minimum(np.diagonal(c, axis1=-2, axis2=-1) - s, (c - s[..., :, None]).min(axis=-2))
    return s, t


# --- the convexity margin mu (proven) -------------------------------------------------------------

def _in_basis(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """V^T M V for V = [I; -e^T] (entries M_ij - M_ik - M_kj + M_kk, k the last index), with an
    entrywise bound on its rounding error."""
    a, col, row, corner = M[:-1, :-1], M[:-1, -1:], M[-1:, :-1], M[-1, -1]
    out = ((a - col) - row) + corner
    err = gamma(3) * (np.abs(a) + np.abs(col) + np.abs(row) + abs(corner))
    return out, err


def convexity_margin(A: np.ndarray, B: np.ndarray, S: np.ndarray, T: np.ndarray) -> float:
    """A proven mu >= 0 with h + mu ||.||_F^2 convex on {QZQ}: the quadratic form in the basis V,
    K = Bv (x) Av - G (x) Sv - Tv (x) G with G = V^T V = I + ee^T, plus mu G (x) G (the norm),
    has a floating-point Cholesky factor R. Then fl(K + mu G(x)G) + E = R^T R with
    |E| <= gamma_{2N} |R^T||R| (Cholesky backward error; Demmel 1989, Higham 2002 Thm 10.3, the
    constant doubled for blocked codes), so lambda_min >= -gamma_{2N} ||R||_F^2 - ||F||_F, F the
    entrywise-bounded error of forming fl(K); and G (x) G >= I absorbs that into mu."""
    m = A.shape[0]
    if m < 2:
        return 0.0
    Av, eA = _in_basis(A)
    Bv, eB = _in_basis(B)
    Sv, eS = _in_basis(S)
    Tv, eT = _in_basis(T)
    G = np.eye(m - 1) + 1.0
    K = np.kron(Bv, Av) - np.kron(G, Sv) - np.kron(Tv, G)
    F = (gamma(5) * (np.kron(np.abs(Bv), np.abs(Av)) + np.kron(G, np.abs(Sv)) + np.kron(np.abs(Tv), G))
         + np.kron(np.abs(Bv) + eB, eA) + np.kron(eB, np.abs(Av)) + np.kron(G, eS) + np.kron(eT, G))
    GG = np.kron(G, G)
    scale = max(float(np.abs(K).max()), 1e-300)
    N = (m - 1) ** 2
    mu = 0.0
    for attempt in range(40):
        try:
            R = np.linalg.cholesky(K + mu * GG)
            break
        except np.linalg.LinAlgError:
            mu = 2.0 ** math.ceil(math.log2(scale * 1e-12)) if mu == 0 else mu * 16
    else:   # not even nearly convex (cannot happen with spectral S, T): no certificate
        raise CertificateError("the projected quadratic form is not convex")
    # forming mu G(x)G is exact (mu a power of two, G entries 1 and 2); K + mu GG adds one rounding
    F = F + gamma(1) * np.abs(K + mu * GG)
    chol = gamma(2 * N + 2) * float(np.square(R).sum())
    error = (chol + math.sqrt(float(np.square(F).sum()))) * (1 + 1e-6) + 1e-300
    return mu + error


# --- exact arithmetic on float matrices -----------------------------------------------------------

@dataclass
class Exact:
    """A rational matrix: integer numerators (object array) over one positive integer denominator."""

    num: np.ndarray
    den: int

    @staticmethod
    def of(M) -> Exact:
        """Floats exactly: each is an integer times a power of two."""
        M = np.asarray(M, dtype=float)
        mant, exp = np.frexp(M)
        ints = (mant * 2.0 ** 53).astype(np.int64)
        nonzero = ints != 0
        low = int((exp - 53)[nonzero].min()) if nonzero.any() else 0
        shift = np.where(nonzero, exp - 53 - low, 0)
        num = np.array([int(i) << int(k) for i, k in zip(ints.ravel(), shift.ravel())], dtype=object)
        num = num.reshape(M.shape)
        return Exact(num, 1 << -low) if low < 0 else Exact(num * (1 << low), 1)

    @staticmethod
    def ints(M) -> Exact:
        return Exact(np.array([[int(x) for x in row] for row in np.asarray(M)], dtype=object), 1)

    def __matmul__(self, other: Exact) -> Exact:
        return Exact(self.num.dot(other.num), self.den * other.den)

    def __add__(self, other: Exact) -> Exact:
        if self.den == other.den:
            return Exact(self.num + other.num, self.den)
        return Exact(self.num * other.den + other.num * self.den, self.den * other.den)

    def __sub__(self, other: Exact) -> Exact:
        return self + Exact(-other.num, other.den)

    def scaled(self, factor: Fraction) -> Exact:
        factor = Fraction(factor)
        return Exact(self.num * factor.numerator, self.den * factor.denominator)

    def inner(self, other: Exact) -> Fraction:
        return Fraction(int((self.num * other.num).sum()), self.den * other.den)

    def trace(self) -> Fraction:
        return Fraction(int(np.trace(self.num)), self.den)

    def total(self) -> Fraction:
        return Fraction(int(self.num.sum()), self.den)

    def floats(self) -> np.ndarray:
        return np.array([float(Fraction(int(x), self.den)) for x in self.num.ravel()]).reshape(self.num.shape)


def assignment_lower(cost: Exact) -> Fraction:
    """A lower bound of min over permutations of <cost, X>, exactly: the Lagrangian value
    sum u + sum v + sum min(0, cost - u_i - v_k) of float potentials u, v (valid for any u, v;
    near-optimal ones from the LP dual of the float problem)."""
    approx = cost.floats()
    _, u, v = hungarian(approx)   # the Hungarian method's optimal potentials
    prices = Exact.of(np.concatenate([u, v]))
    m = len(u)
    pu, pv = prices.num[:m], prices.num[m:]
    reduced = cost.num * prices.den - cost.den * (pu[:, None] + pv[None, :])
    negative = int(np.where(reduced < 0, reduced, 0).sum())
    return Fraction(int(pu.sum() + pv.sum()), prices.den) + Fraction(negative, cost.den * prices.den)


# --- the bound of one point ------------------------------------------------------------------------

def trace_bound(A: np.ndarray, B: np.ndarray, L: np.ndarray | None, spec: Spectral,
                point: np.ndarray | None) -> Fraction:
    """The proven lower bound (module doc) of min t(X) at `point` (None: PB, Z0 = 0)."""
    m = A.shape[0]
    if m < 2:
        return Fraction(0) if L is None or m == 0 else Fraction(float(L[0, 0]))
    mu = Fraction(convexity_margin(A, B, spec.S, spec.T))
    Ae, Be, Se, Te = Exact.of(A), Exact.of(B), Exact.of(spec.S), Exact.of(spec.T)
    e = np.ones((m, 1), dtype=object)
    r, s = Exact(Ae.num.dot(e), Ae.den), Exact(Be.num.dot(e), Be.den)
    linear = (r @ Exact(s.num.T, s.den)).scaled(Fraction(2, m))
    if L is not None:
        linear = linear + Exact.of(L)
    trQ = lambda M: M.trace() - M.total() / m                   # noqa: E731  tr(MQ)
    constant = trQ(Se) + trQ(Te) - Ae.total() * Be.total() / (m * m) - mu * (m - 1)
    if point is None:
        return constant + assignment_lower(linear)
    Q = Exact(np.eye(m, dtype=int).astype(object) * m - 1, m)
    Z = Q @ Exact.of(point) @ Q
    W = Ae @ Z @ Be - Se @ Z - Z @ Te
    h, norm = Z.inner(W), Z.inner(Z)
    gradient = Q @ (W.scaled(2) + Z.scaled(2 * mu)) @ Q
    return constant - h - mu * norm + assignment_lower(gradient + linear)


def stored_point(X: np.ndarray, digits: int = POINT_DIGITS) -> list[float]:
    return [float(f"{x:.{digits}g}") for x in np.asarray(X, dtype=float).ravel()]


# --- fast float PB (search), not proven -------------------------------------------------------------

def pb_float(A: np.ndarray, B: np.ndarray, L: np.ndarray | None = None) -> float:
    """PB of the trace objective in floats: <alpha, beta>_- + LAP(L + 2/m r s^T) - constant."""
    m = A.shape[0]
    if m < 2:
        return 0.0 if L is None else float(L.min())
    V = projection_basis(m)
    alpha = np.linalg.eigvalsh(V.T @ A @ V)
    beta = np.linalg.eigvalsh(V.T @ B @ V)[::-1]
    cost = (2.0 / m) * np.outer(A.sum(axis=1), B.sum(axis=1))
    if L is not None:
        cost = cost + L
    col = assignment_columns(cost[None])[0]
    return float(alpha @ beta + cost[np.arange(m), col].sum() - A.sum() * B.sum() / m ** 2)


def tile_matrices(C: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) of one tile shape: C padded with dummy stages to the m slots, and D."""
    if not np.array_equal(D, D.T):
        raise CertificateError("the eigenvalue bounds need symmetric distances")
    return padded(C, D.shape[0]), D


def nodes_problems(C: np.ndarray, D: np.ndarray, fixed: np.ndarray, places: np.ndarray):
    """The trace-form problems of the assignments below S branch-and-bound nodes, node s putting
    stages fixed[s] in slots places[s] (S x d): t(X) = t'(X') + K for every completion, where A'
    is A on the free and dummy stages, B' is B on the free slots, L' the cost of talking to the
    fixed stages, L'[i, k] = sum_j (A[i, j] + A[j, i]) B[k, slot_j], and K the fixed stages' own
    trace cost. Returns the distinct A' (one per set of fixed stages, G x r x r), the index of
    each node's (S,), and B', L', K stacked per node. With integer C and D (below 2^53 in every
    sum) every number is exact."""
    A, B = tile_matrices(C, D)
    m = B.shape[0]
    S = len(fixed)
    sets, which = np.unique(np.sort(fixed, axis=1), axis=0, return_inverse=True)
    which = which.reshape(-1)
    taken = np.zeros((len(sets), m), dtype=bool)
    taken[np.arange(len(sets))[:, None], sets] = True
    set_rows = np.nonzero(~taken)[1].reshape(len(sets), -1)          # free stages, then the dummy ones
    rows = set_rows[which]
    used = np.zeros((S, m), dtype=bool)
    used[np.arange(S)[:, None], places] = True
    free = np.nonzero(~used)[1].reshape(S, -1)                       # each node's free slots, ascending
    talk = A[rows[:, :, None], fixed[:, None, :]] + np.swapaxes(A[fixed[:, :, None], rows[:, None, :]], 1, 2)
    L = talk @ B[places[:, :, None], free[:, None, :]]
    K = (A[fixed[:, :, None], fixed[:, None, :]] * B[places[:, :, None], places[:, None, :]]).sum(axis=(1, 2))
    return A[set_rows[:, :, None], set_rows[:, None, :]], which, B[free[:, :, None], free[:, None, :]], L, K


def _entry_bound(A: np.ndarray, B: np.ndarray, L: np.ndarray | None, K: float, entry, quadratic: bool,
                 where: str) -> Fraction:
    """(the t-bound at the entry's point, or PB without one, + K) / 2, re-derived; the entry's
    stored `value` must agree."""
    from wafopt.problems.certificates import finite_numbers

    if not isinstance(entry, dict):
        raise CertificateError(f"{where} must be a mapping with value")
    m = B.shape[0]
    point, theta = None, None
    if "point" in entry or "theta" in entry:
        if not quadratic:
            raise CertificateError(f"{where}: a projected-eigenvalue bound has no point")
        point = np.array(finite_numbers(entry, "point", m * m, f"{where}.")).reshape(m, m)
        if point.size and not (point.min() >= 0.0 and point.max() <= 1.0):   # a Frank-Wolfe iterate: a
            raise CertificateError(f"{where}.point entries must lie in [0, 1]")   # mix of permutations
        theta = finite_numbers(entry, "theta", max(m - 2, 0), f"{where}.")
    spec = spectral(A, B, theta)
    if theta is not None:
        spec.check_theta()
    value = (trace_bound(A, B, L, spec, point) + Fraction(K)) / 2
    check_close(entry.get("value"), float(value), f"{where}.value")
    return value


def bound_at_point(A: np.ndarray, B: np.ndarray, L: np.ndarray | None, point: np.ndarray | None,
                   spec: Spectral, digits: int = POINT_DIGITS) -> tuple[Fraction, dict, np.ndarray | None]:
    """What a certificate entry proves for Frank-Wolfe's `point` (qpb_search): the exact t-bound at
    the point as stored, its entry {theta, point} and the stored point; without a point, PB with
    the default dual (as the checker takes it) and an empty entry."""
    if point is None:
        return trace_bound(A, B, L, spectral(A, B), None), {}, None
    entry = {"theta": spec.theta.tolist(), "point": stored_point(point, digits)}
    point = np.array(entry["point"]).reshape(A.shape)
    return trace_bound(A, B, L, spec, point), entry, point


def check_close(stored, derived: float, where: str) -> None:
    if not isinstance(stored, (int, float)) or isinstance(stored, bool) or not math.isfinite(stored):
        raise CertificateError(f"{where} must be a finite number")
    if not close(float(stored), derived):
        raise CertificateError(f"{where} is {stored!r}, but re-derives as {derived!r}")


def entry_value(C: np.ndarray, D: np.ndarray, entry, quadratic: bool, where: str) -> Fraction:
    """The bound (base objective) one tile's certificate entry proves, re-derived; its stored
    `value` must agree. PB: {value}; QPB: {value, theta, point} or {value} (then PB)."""
    A, B = tile_matrices(C, D)
    return _entry_bound(A, B, None, 0.0, entry, quadratic, where)


# --- QPB of branch-and-bound nodes, proven in floats ----------------------------------------------
#
# A node's QPB is Frank-Wolfe's best point after NODE_FW_STEPS pairwise steps from P with theta
# refitted on the way (node_points, the same deterministic steps in the search and in the
# checker), and the module doc's inequality at that point evaluated in midpoint-radius arithmetic
# (qpb_nodes): every float result carries a proven radius (Higham 2002, Sec. 3.5:
# |fl(a b) - a b| <= gamma_k |a||b| for products of length k).
# mu is proven without a Cholesky factorization: in the computed eigenbases the quadratic form is
# congruent to the diagonal alpha_i beta_j - s_i - t_j >= 0 (model_error bounds how far the true
# form is from that model).

NODE_FW_STEPS = 40     # pairwise Frank-Wolfe steps of a node's QPB (nug20 at 120 s: 30 steps 2518, 40 2517, 60 2515)
THETA_STEPS = 10       # ... of them before its theta is refitted at the iterate (about +5 at 20 steps)
TINY = 1e-300          # against underflow in the radii
FW_CHUNK = 64          # Frank-Wolfe steps between two checks of the deadline


def norm_up(M: np.ndarray):
    """An upper bound of the Frobenius norm of M (of each matrix of a stack) computed in floats."""
    return np.sqrt(np.square(M).sum(axis=(-2, -1))) * (1 + gamma(M.shape[-1] * M.shape[-2] + 2)) + 1e-300


def _r(radius, like):
    return np.zeros_like(like) if radius is None else radius


def _ball_matmul(a, ra, b, rb):
    """The product of two matrix balls (value, radius or None for exact), stacked."""
    k = a.shape[-1]
    value = a @ b
    absa, absb = np.abs(a), np.abs(b)
    radius = gamma(k) * (absa @ absb)
    if ra is not None:
        radius = radius + ra @ (absb + _r(rb, b))
    if rb is not None:
        radius = radius + absa @ rb
    return value, radius * (1 + 2 * gamma(k + 2)) + TINY


def _ball_add(a, ra, b, rb, sign: float = 1.0):
    value = a + sign * b
    radius = _r(ra, value) + _r(rb, value) + UNIT * np.abs(value)
    return value, radius * (1 + 2 * gamma(3)) + TINY


def _ball_scale(a, ra, factor):
    """A matrix ball times a factor (a number, or one per matrix of a stack, broadcast)."""
    value = a * factor
    radius = _r(ra, value) * np.abs(factor) * (1 + 2 * UNIT) + UNIT * np.abs(value)
    return value, radius + TINY


def _ball_inner(a, ra, b, rb):
    """<a, b> over the last two axes of two matrix balls."""
    n = a.shape[-1] * a.shape[-2]
    absa, absb = np.abs(a), np.abs(b)
    value = (a * b).sum(axis=(-2, -1))
    radius = gamma(n + 1) * (absa * absb).sum(axis=(-2, -1)) + (ra * (absb + rb) + absa * rb).sum(axis=(-2, -1))
    return value, radius * (1 + 2 * gamma(n + 2)) + TINY


def _ball_norm(value, radius) -> np.ndarray:
    """An upper bound of the Frobenius norm of every matrix in the ball."""
    return norm_up(np.abs(value) + radius) * (1 + 4 * UNIT)


@dataclass
class NodeSpectra:
    """Eigen-data of node problems (stacked, floats, not proven: qpb_nodes proves what comes out):
    the projected A's and B's eigenvalues (alpha ascending, beta descending) with eigenvectors in
    R^m (WA, WB), the scalar product's dual (s, t) that theta (k x m - 2) picks, and S, T."""

    alpha: np.ndarray
    beta: np.ndarray
    WA: np.ndarray
    WB: np.ndarray
    theta: np.ndarray
    s: np.ndarray
    t: np.ndarray
    S: np.ndarray
    T: np.ndarray


def node_spectra(A: np.ndarray, B: np.ndarray, theta: np.ndarray | None = None) -> NodeSpectra:
    """NodeSpectra of stacks A (symmetric), B (k x m x m); theta all ones unless given."""
    alpha, beta, WA, WB = projected_eigen(A, B)
    if theta is None:
        theta = np.ones(alpha.shape[:-1] + (max(alpha.shape[-1] - 1, 0),))
    return _with_theta(alpha, beta, WA, WB, theta)


def _with_theta(alpha, beta, WA, WB, theta) -> NodeSpectra:
    s, t = scalar_product_duals(alpha, beta, theta)
    S = (WA * s[..., None, :]) @ np.swapaxes(WA, -1, -2)
    T = (WB * t[..., None, :]) @ np.swapaxes(WB, -1, -2)
    return NodeSpectra(alpha, beta, WA, WB, theta, s, t,
                       (S + np.swapaxes(S, -1, -2)) / 2, (T + np.swapaxes(T, -1, -2)) / 2)


def refitted(spec: NodeSpectra, X: np.ndarray) -> NodeSpectra:
    """The spectra with each problem's theta maximizing its relaxation at X (Spectral.better_theta,
    computed in the compiled kernel so that the search and the checker agree)."""
    from wafopt.problems.placement.compiled import theta_steps  # lazy: numba

    theta = np.empty_like(spec.theta)
    if theta.shape[-1]:
        theta_steps(np.ascontiguousarray(spec.WA), np.ascontiguousarray(spec.WB), np.ascontiguousarray(X), theta)
    return _with_theta(spec.alpha, spec.beta, spec.WA, spec.WB, theta)


def frank_wolfe(A: np.ndarray, B: np.ndarray, L: np.ndarray | None, S: np.ndarray, T: np.ndarray, steps: int,
                start: np.ndarray | None = None, deadline: float | None = None, stopped=lambda: False,
                pairwise: bool = False):
    """Frank-Wolfe on the convex relaxation min h(X - P) + <L + (2/m) r s^T, X> + constant over the
    doubly stochastic X, for a stack of problems (k x m x m; A symmetric), from P or `start`: each
    step solves one assignment problem on the gradient (its vertex; warm-started from the previous
    step's column potentials), steps to it by the exact line search of a quadratic, and evaluates
    the Frank-Wolfe lower bound f(X) + min_vertex <grad f(X), vertex - X>, valid at every X by
    convexity; a problem stops where its slope is no longer negative, all of them at `steps`,
    `deadline` or `stopped()` (checked every FW_CHUNK steps). `pairwise` steps from the atom
    (start point or earlier vertex) with the largest gradient product instead of from X, all in
    one call (for short runs). The steps are compiled (compiled.steps_batch), one problem at a time.
    Returns (each problem's best lower bound in floats, the iterate that gave it, the step that
    gave it, the last iterates, the steps run)."""
    from wafopt.problems.placement.compiled import steps_batch  # lazy: numba

    k, m = B.shape[0], B.shape[-1]
    A, B, S, T = (np.ascontiguousarray(M, dtype=float) for M in (A, B, S, T))
    L = np.zeros((k, m, m)) if L is None else L
    linear = np.ascontiguousarray((2.0 / m) * A.sum(axis=-1)[:, :, None] * B.sum(axis=-1)[:, None, :] + L)
    constant = np.ascontiguousarray(np.trace(S, axis1=1, axis2=2) - S.sum(axis=(1, 2)) / m
                                    + np.trace(T, axis1=1, axis2=2) - T.sum(axis=(1, 2)) / m
                                    - A.sum(axis=(1, 2)) * B.sum(axis=(1, 2)) / m ** 2)
    P = np.full((k, m, m), 1.0 / m)
    WP = A @ P @ B - S @ P - P @ T          # W(X) = AXB - SX - XT; h's gradient is 2 W(X - P)
    X = P.copy() if start is None else np.array(start, dtype=float)
    WX = A @ X @ B - S @ X - X @ T
    h = ((X - 1.0 / m) * (WX - WP)).sum(axis=(1, 2))
    best, best_X, best_step = np.full(k, -np.inf), X.copy(), np.zeros(k, dtype=np.int64)
    going = np.ones(k, dtype=bool)
    potentials = np.zeros((k, m + 1))
    done = 0
    while done < steps and going.any() and not stopped() and not (deadline is not None and time.monotonic() >= deadline):
        count = steps - done if pairwise else min(FW_CHUNK, steps - done)
        steps_batch(A, B, linear, constant, S, T, X, WX, WP, h, best, best_X, best_step, going, potentials,
                    done, count, pairwise)
        done += count
    return best, best_X, best_step, X, done


def node_points(A: np.ndarray, B: np.ndarray, L: np.ndarray, spec: NodeSpectra,
                steps: int = NODE_FW_STEPS) -> tuple[np.ndarray, NodeSpectra]:
    """Each node problem's point and spectra for its QPB: THETA_STEPS pairwise Frank-Wolfe steps
    from P with `spec`, theta refitted at the last iterate (refitted), the other steps from there
    with it; the point of the best Frank-Wolfe lower bound of either run, with its spectra (the
    first run starts at P, so the bound is at least PB). Deterministic: the checker gets the
    search's points."""
    first = min(steps, THETA_STEPS)
    best, X, _, last, _ = frank_wolfe(A, B, L, spec.S, spec.T, first, pairwise=True)
    refit = refitted(spec, last)
    best_refit, X_refit = frank_wolfe(A, B, L, refit.S, refit.T, steps - first, start=last, pairwise=True)[:2]
    better = best_refit > best
    chosen = NodeSpectra(**{f.name: np.where(better.reshape((-1,) + (1,) * (getattr(spec, f.name).ndim - 1)),
                                             getattr(refit, f.name), getattr(spec, f.name))
                            for f in fields(NodeSpectra)})
    return np.where(better[:, None, None], X_refit, X), chosen


def _model_error(A, B, spec: NodeSpectra, N: np.ndarray) -> np.ndarray:
    """mu (module comment above): an upper bound of ||H - H~||_2 plus what a negative model entry
    can take, for each node. H = B_Q (x) A_Q - Q (x) S_Q - T_Q (x) Q is h's form on {QZQ}
    (M_Q = QMQ), H~ = the same with A_Q, B_Q, S_Q, T_Q, Q replaced by WA alpha WA^T, WB beta WB^T,
    WA s WA^T, WB t WB^T and WA WA^T or WB WB^T; H~ = (WB (x) WA) diag(alpha_i beta_j - s_i - t_j)
    (WB (x) WA)^T. Kronecker differences by ||X (x) Y - X' (x) Y'||_F <= ||X - X'|| ||Y|| + ||X'|| ||Y - Y'||."""
    m = A.shape[-1]
    m2 = float(m * m)

    def projected(M):          # N M N = m^2 M_Q
        return _ball_matmul(*_ball_matmul(N, None, M, None), N, None)

    def model(W, w):           # m^2 W diag(w) W^T
        scaled = _ball_scale(W, None, w[..., None, :])
        return _ball_scale(*_ball_matmul(*scaled, np.swapaxes(W, -1, -2), None), m2)

    def gap(M, W, w):          # (||M_Q||, ||M_Q - W w W^T||), both upper bounds
        PM = projected(M)
        diff = _ball_add(*PM, *model(W, w), -1.0)
        return _ball_norm(*PM) / m2 * (1 + 2 * UNIT), _ball_norm(*diff) / m2 * (1 + 2 * UNIT)

    def basis_gap(W):          # ||Q - W W^T|| = ||N - m W W^T|| / m
        WW = _ball_scale(*_ball_matmul(W, None, np.swapaxes(W, -1, -2), None), float(m))
        return _ball_norm(*_ball_add(N, None, *WW, -1.0)) / m * (1 + 2 * UNIT)

    nA, dA = gap(A, spec.WA, spec.alpha)
    nB, dB = gap(B, spec.WB, spec.beta)
    nS, dS = gap(spec.S, spec.WA, spec.s)
    nT, dT = gap(spec.T, spec.WB, spec.t)
    uA, uB = basis_gap(spec.WA), basis_gap(spec.WB)
    nQ = math.sqrt(m - 1) * (1 + 2 * UNIT)
    c = spec.alpha[..., :, None] * spec.beta[..., None, :]
    D = c - spec.s[..., :, None] - spec.t[..., None, :]
    err = gamma(3) * (np.abs(c) + np.abs(spec.s)[..., :, None] + np.abs(spec.t)[..., None, :])
    negative = np.maximum(0.0, (err - D).max(axis=(-2, -1)))
    scale = np.square(norm_up(spec.WA)) * np.square(norm_up(spec.WB))
    mu = (dB * nA + (nB + dB) * dA + uB * nS + (nQ + uB) * dS + dT * nQ + (nT + dT) * uA + negative * scale)
    return mu * (1 + 1e-12) + TINY


def _assignment_lower_float(low: np.ndarray, fixing: bool = False):
    """A proven lower bound of min over permutations of <M, X> for every M >= low (entrywise; a
    stack k x m x m): the Lagrangian value sum_i min_j (low_ij - v_j) + sum_j v_j, valid for any v,
    with v the column potentials of an optimal assignment (column_potentials), less the float error
    of the sum. With `fixing`, also what the bound rises by (k x m x m, proven lower) over the
    permutations with X_ij = 1: row i's minimum becomes low_ij - v_j."""
    m = low.shape[-1]
    v = column_potentials(low)
    mins = (low - v[:, None, :]).min(axis=2)
    value = mins.sum(axis=1) + v.sum(axis=1)
    lower = value - gamma(2 * m + 2) * (np.abs(mins).sum(axis=1) + np.abs(v).sum(axis=1)) - TINY
    if not fixing:
        return lower
    rise = low - v[:, None, :] - mins[:, :, None]          # >= 0 in exact arithmetic
    error = gamma(3) * (np.abs(low) + np.abs(v)[:, None, :] + np.abs(mins)[:, :, None])
    return lower, np.maximum(0.0, rise - error)


def qpb_nodes(A: np.ndarray, B: np.ndarray, L: np.ndarray, spec: NodeSpectra, X: np.ndarray,
              fixing: bool = False):
    """Proven lower bounds of min t(X) over permutations for stacks of node problems (A symmetric,
    B, L; k x m x m, m >= 2), by the module doc's inequality at the points X, evaluated in midpoint-radius
    arithmetic with mu from _model_error. Every matrix is a float matrix taken as exact; the
    bound is valid for any S, T, X (the FW point only makes it strong). With `fixing`, also
    (k x m x m) proven lower bounds over the permutations with X_ij = 1: the same inequality,
    whose assignment problem then fixes i to j (Anstreicher, Brixius, Goux and Linderoth, "Solving
    large quadratic assignment problems on computational grids", 2002, Sec. 2: the reduced costs
    of the final assignment bound the children)."""
    m = B.shape[-1]
    N = m * np.eye(m) - 1.0
    m2, m4 = float(m * m), float(m) ** 4
    mu = _model_error(A, B, spec, N)
    # Z' = N X N = m^2 Z0;  W' = A Z' B - S Z' - Z' T = m^2 W(Z0)
    Z = _ball_matmul(*_ball_matmul(N, None, X, None), N, None)
    AZB = _ball_matmul(*_ball_matmul(A, None, *Z), B, None)
    SZ = _ball_matmul(spec.S, None, *Z)
    ZT = _ball_matmul(*Z, spec.T, None)
    W = _ball_add(*_ball_add(*AZB, *SZ, -1.0), *ZT, -1.0)
    h4, rh4 = _ball_inner(*Z, *W)                 # m^4 h(Z0)
    n4, rn4 = _ball_inner(*Z, *Z)                 # m^4 ||Z0||^2
    # m^4 gradient part: N (2 W' + 2 mu Z') N, plus m^3 (m L + 2 r s^T)
    inner = _ball_add(2 * W[0], 2 * W[1], *_ball_scale(*Z, 2 * mu[:, None, None]))
    grad = _ball_matmul(*_ball_matmul(N, None, *inner), N, None)
    r, s = A.sum(axis=-1), B.sum(axis=-1)          # exact (integers, or halves of integers)
    linear = m ** 3 * (m * L + 2 * r[:, :, None] * s[:, None, :])
    G, rG = _ball_add(*grad, linear, UNIT * np.abs(linear))
    low = G - rG
    low = low - (2 * UNIT * np.abs(low) + TINY)
    lap4, rise4 = _assignment_lower_float(low, True) if fixing else (_assignment_lower_float(low), None)
    trace_S = np.trace(spec.S, axis1=-2, axis2=-1) - spec.S.sum(axis=(-2, -1)) / m
    trace_T = np.trace(spec.T, axis1=-2, axis2=-1) - spec.T.sum(axis=(-2, -1)) / m
    flows = A.sum(axis=(-2, -1)) * B.sum(axis=(-2, -1)) / m2
    constant = trace_S + trace_T - flows
    r_constant = gamma(m * m + 4) * (np.abs(spec.S).sum(axis=(-2, -1)) * 2 + np.abs(spec.T).sum(axis=(-2, -1)) * 2
                                     + np.abs(flows))
    terms = [constant, -mu * (m - 1), -h4 / m4, -mu * n4 / m4, lap4 / m4]
    radii = [r_constant, mu * (m - 1) * 1e-12, rh4 / m4 * (1 + 1e-12), mu * rn4 / m4 * (1 + 1e-12)]
    total = sum(terms)
    error = sum(radii) + gamma(16) * sum(np.abs(t) for t in terms)
    bound = total - error - TINY
    if not fixing:
        return bound
    fixed = bound[:, None, None] + rise4 / m4 * (1 - 2 * UNIT)
    return bound, fixed - 2 * UNIT * np.abs(fixed) - TINY


def node_qpbs(A: np.ndarray, B: np.ndarray, L: np.ndarray, steps: int = NODE_FW_STEPS, fixing: bool = False):
    """Each node problem's QPB (stacks A symmetric, B, L): Frank-Wolfe's point (node_points), proven
    there (qpb_nodes, also its bounds with one assignment fixed when `fixing`); a problem of one
    slot is its linear cost."""
    m = B.shape[-1]
    if m < 2:
        bound = L[:, 0, 0].astype(float) if m == 1 else np.zeros(len(B))
        return (bound, L.astype(float)) if fixing else bound
    X, spec = node_points(A, B, L, node_spectra(A, B), steps)
    return qpb_nodes(A, B, L, spec, X, fixing)
