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

Branch-and-bound nodes use PB proven in floats instead (pb_node; nothing is stored, the checker
recomputes it): proven radii of the eigenvalues (eigen_enclosure: Weyl's and Ostrowski's theorems
on the float residuals) bound the minimal scalar product, and the assignment part is exact on
integer costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.optimize import linear_sum_assignment

from wafopt.core.errors import CertificateError
from wafopt.core.numeric import MAX_EXACT, close
from wafopt.problems.placement.assignment import hungarian

MAX_SLOTS = 64          # beyond this (the convexity check is an (m-1)^2 Cholesky) a tile keeps its GL bound
THETA_INERT = 1e-6      # a theta entry whose step weight is below this share of the largest is inert
POINT_DIGITS = 12       # significant digits of a stored Frank-Wolfe point
NODE_POINT_DIGITS = 6   # ... of a branch-and-bound node's (its bound moves by about 1e-8 relative)
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


def spectral(A: np.ndarray, B: np.ndarray, theta=None) -> Spectral:
    m = A.shape[0]
    V = projection_basis(m)
    alpha, UA = np.linalg.eigh(V.T @ A @ V)
    beta, UB = np.linalg.eigh(V.T @ B @ V)
    theta = np.ones(max(m - 2, 0)) if theta is None else np.asarray(theta, dtype=float)
    if theta.shape != (max(m - 2, 0),):
        raise CertificateError(f"theta must hold {max(m - 2, 0)} numbers")
    return Spectral(alpha, beta[::-1], V @ UA, V @ UB[:, ::-1], theta)


def scalar_product_duals(alpha: np.ndarray, beta: np.ndarray, theta) -> tuple[np.ndarray, np.ndarray]:
    """An optimal dual of the assignment LP on c_ij = alpha_i beta_j (alpha ascending, beta
    descending: c is Monge and the identity is optimal). Tight on the diagonal, t_j = c_jj - s_j;
    feasible when each step s_{i+1} - s_i lies in [beta_{i+1}, beta_i] (alpha_{i+1} - alpha_i): the
    point theta_i of the way. t is then lowered where rounding left a violated pair."""
    step = (theta * beta[1:] + (1 - theta) * beta[:-1]) * np.diff(alpha)
    s = np.concatenate([[0.0], np.cumsum(step)])
    c = np.outer(alpha, beta)
    t = np.minimum(np.diag(c) - s, (c - s[:, None]).min(axis=0))
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
    u, v = lap_potentials(approx)
    prices = Exact.of(np.concatenate([u, v]))
    m = len(u)
    pu, pv = prices.num[:m], prices.num[m:]
    reduced = cost.num * prices.den - cost.den * (pu[:, None] + pv[None, :])
    negative = int(np.where(reduced < 0, reduced, 0).sum())
    return Fraction(int(pu.sum() + pv.sum()), prices.den) + Fraction(negative, cost.den * prices.den)


def lap_potentials(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Optimal dual potentials of a square assignment problem (the Hungarian method's)."""
    _, u, v = hungarian(cost)
    return u, v


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
    row, col = linear_sum_assignment(cost)
    return float(alpha @ beta + cost[row, col].sum() - A.sum() * B.sum() / m ** 2)


# --- PB of a branch-and-bound node, proven in floats ----------------------------------------------

def eigen_enclosure(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eigenvalues of symmetric matrices M (m x m, or a stack of them) held exactly in floats,
    ascending, each with a proven radius: the k-th computed value lies within radius_k of the k-th
    true one. From the computed U, L (numpy's eigh): Weyl's theorem bounds
    |lambda_k(M) - lambda_k(U L U^T)| by ||M - U L U^T||_2, and Ostrowski's theorem puts
    lambda_k(U L U^T) = theta_k L_k with |theta_k - 1| <= ||U^T U - I||_2; both norms are bounded
    above by Frobenius norms of the float residuals plus their entrywise rounding bounds (Higham
    2002, Sec. 3.5)."""
    m = M.shape[-1]
    values, U = np.linalg.eigh(M)
    absU, Ut = np.abs(U), np.swapaxes(U, -1, -2)
    scaled = U * values[..., None, :]
    residual = norm_up(M - scaled @ Ut) + norm_up(
        gamma(m + 2) * ((absU * np.abs(values)[..., None, :]) @ np.swapaxes(absU, -1, -2) + np.abs(M)))
    gram = Ut @ U - np.eye(m)
    drift = norm_up(gram) + norm_up(gamma(m + 2) * (np.swapaxes(absU, -1, -2) @ absU + 1.0))
    return values, (residual[..., None] + drift[..., None] * np.abs(values)) * (1 + 1e-9)


def norm_up(M: np.ndarray):
    """An upper bound of the Frobenius norm of M (of each matrix of a stack) computed in floats."""
    return np.sqrt(np.square(M).sum(axis=(-2, -1))) * (1 + gamma(M.shape[-1] * M.shape[-2] + 2)) + 1e-300


def _without_zero(values: np.ndarray, radius: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The spectrum of Q M Q is that of the projected matrix plus an exact 0 (eigenvector e): for
    enclosures (k x m) the rows with one entry removed, one for each entry that may be that 0, and
    the matrix each row comes from."""
    owner, drop = np.nonzero(np.abs(values) <= radius)
    keep = np.ones((len(owner), values.shape[1]), dtype=bool)
    keep[np.arange(len(owner)), drop] = False
    shape = (len(owner), values.shape[1] - 1)
    return values[owner][keep].reshape(shape), radius[owner][keep].reshape(shape), owner


def _least_scalar_products(a: np.ndarray, ra: np.ndarray, b: np.ndarray, rb: np.ndarray,
                           owner: np.ndarray, count: int) -> np.ndarray:
    """Lower bounds of min over orthogonal Y of <diag(alpha), Y diag(beta) Y^T> = sum of alpha
    ascending times beta descending, for every alpha_k within ra_k of a_k and beta_k within rb_k
    of b_k (rows of candidates, each ascending), less the float error of the sum: for each of
    `count` matrices the least over the rows of a and its own rows of b (`owner`)."""
    a, ra = a[:, None, :], ra[:, None, :]
    b, rb = b[None, :, ::-1], rb[None, :, ::-1]
    corners = np.stack([(a - ra) * (b - rb), (a - ra) * (b + rb), (a + ra) * (b - rb), (a + ra) * (b + rb)])
    sums = corners.min(axis=0).sum(axis=2) - gamma(a.shape[2] + 2) * np.abs(corners).max(axis=0).sum(axis=2)
    out = np.full(count, np.inf)
    np.minimum.at(out, owner, sums.min(axis=0))
    out[np.isinf(out)] = -np.inf    # no entry may be the 0 (cannot happen): no bound
    return out


def _assignment_lower_int(cost: np.ndarray) -> np.ndarray:
    """min over permutations of <cost_k, X> for integer costs (k x m x m, exact in floats):
    scipy's assignments, their column potentials v by Bellman-Ford on the reduced costs, and the
    Lagrangian value sum_i min_j (cost_ij - v_j) + sum_j v_j, a lower bound for any v (exact here)."""
    k, m, _ = cost.shape
    cols = np.array([linear_sum_assignment(c)[1] for c in cost])
    on = np.take_along_axis(cost, cols[:, :, None], axis=2)          # cost of each row's own column
    step = cost - on                                                  # arc from column cols[i] to column j
    v = np.zeros((k, m))
    for _ in range(m):
        better = np.minimum(v, (np.take_along_axis(v, cols, axis=1)[:, :, None] + step).min(axis=1))
        if np.array_equal(better, v):
            break
        v = better
    return (cost - v[:, None, :]).min(axis=2).sum(axis=1) + v.sum(axis=1)


def distance_enclosures(B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """eigen_enclosure of N B N (N = mI - ee^T) for a stack of B: what pb_node needs of each B."""
    m = B.shape[-1]
    N = m * np.eye(m) - 1.0
    return eigen_enclosure(N @ B @ N)


def pb_node(A: np.ndarray, B: np.ndarray, L: np.ndarray, which: np.ndarray | None = None,
            enclosures: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Proven lower bounds of min t(X) = tr(A X B X^T) + <L, X> over permutations (PB, module doc),
    one per (B, L) of a stack (k x m x m) with A[which] (A: m x m shared, or a stack g x m x m and
    `which` the index of each child's), for integer A, B (symmetric), L whose products below stay
    under 2^53 (pb_node_exact_sizes): with As = A + A^T and N = mI - ee^T, the integer matrices
    N As N and N B N have the spectra of the projected matrices times 2m^2 and m^2 plus an exact 0;
    their enclosures (eigen_enclosure) bound the least scalar product, and the assignment part is
    exact on m L + (As e)(B e)^T. `enclosures`: distance_enclosures(B), if known."""
    A = A[None] if A.ndim == 2 else A
    which = np.zeros(len(B), dtype=int) if which is None else np.asarray(which, dtype=int)
    m = A.shape[1]
    if m < 2:
        return L[:, 0, 0].astype(float) if m == 1 else np.zeros(len(L))
    N = m * np.eye(m) - 1.0
    As = A + np.swapaxes(A, 1, 2)
    a, ra, a_owner = _without_zero(*eigen_enclosure(N @ As @ N))
    b, rb, b_owner = _without_zero(*(distance_enclosures(B) if enclosures is None else enclosures))
    product = np.full(len(B), -np.inf)
    for g in np.unique(which):     # each A with the children that share it
        mine = np.flatnonzero(which == g)
        rows = np.isin(b_owner, mine)
        local = np.searchsorted(mine, b_owner[rows])
        product[mine] = _least_scalar_products(a[a_owner == g], ra[a_owner == g], b[rows], rb[rows], local, len(mine))
    assign = _assignment_lower_int(m * L + As.sum(axis=2)[which][:, :, None] * B.sum(axis=2)[:, None, :])
    constant = A.sum(axis=(1, 2))[which] * B.sum(axis=(1, 2))
    scale = 2.0 * m ** 4
    value = product / scale + assign / m - constant / m ** 2
    return value - 8 * UNIT * (np.abs(product) / scale + np.abs(assign) / m + np.abs(constant) / m ** 2) - 1e-300


def pb_node_exact_sizes(A: np.ndarray, B: np.ndarray, L: np.ndarray) -> bool:
    """Whether pb_node's integer matrices stay exact in floats (every entry and row sum < 2^53)."""
    m = A.shape[0]
    top = max(1.0, float(np.abs(A).max(initial=0))) * 2 * max(1.0, float(np.abs(B).max(initial=0))) * (2 * m) ** 4
    return top < MAX_EXACT and float(np.abs(L).max(initial=0)) * m * m + top < MAX_EXACT


def tile_matrices(C: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) of one tile shape: C padded with dummy stages to the m slots, and D."""
    if not np.array_equal(D, D.T):
        raise CertificateError("the eigenvalue bounds need symmetric distances")
    return padded(C, D.shape[0]), D


def node_problem(C: np.ndarray, D: np.ndarray, stages: list[int], slots: list[int]):
    """The trace-form problem of the assignments below a branch-and-bound node that puts
    stages[i] in slots[i]: (A', B', L', K) with t(X) = t'(X') + K for every completion, where A'
    is A on the free and dummy stages, B' is B on the free slots, L' the cost of talking to the
    fixed stages, L'[i, k] = sum_j (A[i, j] + A[j, i]) B[k, slots_j], and K the fixed stages'
    own trace cost. With integer C and D (below 2^53 in every sum) every number is exact."""
    A, _, B, L, K = nodes_problems(C, D, np.array([stages], dtype=int), np.array([slots], dtype=int))
    return A[0], B[0], L[0], float(K[0])


def nodes_problems(C: np.ndarray, D: np.ndarray, fixed: np.ndarray, places: np.ndarray):
    """node_problem of S nodes at once, node s putting stages fixed[s] in slots places[s] (S x d):
    the distinct A' (one per set of fixed stages, G x r x r), the index of each node's (S,), and
    B', L', K stacked per node."""
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


def node_entry_value(C: np.ndarray, D: np.ndarray, stages: list[int], slots: list[int], entry,
                     where: str) -> Fraction:
    """The bound (base objective) a node's QPB entry {value, theta, point} (or PB: {value}) proves
    for every assignment below the node, re-derived (integer data only: L' and K are then exact);
    the stored `value` must agree."""
    if not (np.all(C == np.round(C)) and np.all(D == np.round(D))
            and 2 * np.abs(C).sum() * max(1.0, float(np.abs(D).max())) < MAX_EXACT):
        raise CertificateError(f"{where}: a node's QPB is checked for integer flows and distances only")
    return _entry_bound(*node_problem(C, D, stages, slots), entry, True, where)


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
