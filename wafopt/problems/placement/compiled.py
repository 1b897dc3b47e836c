"""numba-compiled kernels of the placement bounds: the assignment problem (every assignment problem
of the package, one or a stack of them), the Frank-Wolfe steps of the convex QAP relaxation (projected.frank_wolfe's inner
loop), the choice of a node's theta at a Frank-Wolfe point (projected.refitted) and the
routing-conflict penalties of branch-and-bound children (branch_bound.TileSpace._penalty). Imported
lazily: numba takes 0.1 s and about 100 MB.

Each problem of a stack runs its own steps (a problem's result never depends on the others in
the batch). Matrix products are explicit loops in a fixed order, so the search's processes and
the checker get the same points (no BLAS, whose blocking may depend on sizes and threads).
Nothing here is proven: bounds are proven afterwards from the points and potentials returned
(projected.qpb_nodes, the certificates' weak duality), and a non-optimal result only weakens them.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def compiled(function):
    """numba's compiled function, cached on disk where numba finds a writable place (beside this
    module, else the user's cache directory), compiled anew in each process where it finds none."""
    try:
        return njit(cache=True)(function)
    except RuntimeError:         # no writable cache location
        return njit(function)


@compiled
def assignment(cost, cols, v, warm, u, row_of, way, dist, used):
    """cols[i] = the column of row i in a minimum-cost assignment of the rows of `cost` (n x m,
    n <= m) to distinct columns, by shortest augmenting paths (Dijkstra on reduced costs) with
    row potentials u and column potentials v (Hungarian method, O(n^2 m)). With `warm`, v (length
    m + 1, index 0 the virtual column every path starts from) is a previous problem's and every
    row first takes its cheapest column if it is free; otherwise v starts at zero. On return u
    (length >= n) and v hold this problem's potentials: u_i + v_k <= cost[i, k] up to rounding,
    with equality on the assignment, and v <= 0 after a cold start. row_of, way, dist, used:
    scratch of length m + 1. False (cols undefined) where `cost` is not finite."""
    n, m = cost.shape[0], cost.shape[1]
    for j in range(m + 1):
        row_of[j] = -1
        if not warm:
            v[j] = 0.0
    for i in range(n):                       # u feasible for every row: reduced costs >= 0
        low = np.inf
        arg = 0
        for j in range(1, m + 1):
            reduced = cost[i, j - 1] - v[j]
            if reduced < low:
                low = reduced
                arg = j
        u[i] = low
        if warm and row_of[arg] < 0:
            row_of[arg] = i
    free_row = np.ones(n, dtype=np.bool_)
    for j in range(1, m + 1):
        if row_of[j] >= 0:
            free_row[row_of[j]] = False
    for i in range(n):
        if not free_row[i]:
            continue
        row_of[0] = i
        col = 0
        for j in range(m + 1):
            dist[j] = np.inf
            used[j] = False
            way[j] = 0
        while True:
            used[col] = True
            r = row_of[col]
            delta = np.inf
            nxt = 0
            for j in range(1, m + 1):
                if not used[j]:
                    reduced = cost[r, j - 1] - u[r] - v[j]
                    if reduced < dist[j]:
                        dist[j] = reduced
                        way[j] = col
                    if dist[j] < delta:
                        delta = dist[j]
                        nxt = j
            for j in range(m + 1):
                if used[j]:
                    u[row_of[j]] += delta
                    v[j] -= delta
                else:
                    dist[j] -= delta
            if nxt == 0:             # no finite reduced cost (NaN or inf in `cost`)
                return False
            col = nxt
            if row_of[col] < 0:
                break
        while col != 0:              # flip the path back to the virtual column
            prev = way[col]
            row_of[col] = row_of[prev]
            col = prev
    for j in range(1, m + 1):
        if row_of[j] >= 0:
            cols[row_of[j]] = j - 1
    return True


@compiled
def steps_batch(A, B, linear, constant, S, T, X, WX, WP, h, best, best_X, best_step, going,
                potentials, first, count, pairwise):
    """Frank-Wolfe steps first .. first + count - 1 of every going problem of the stack, in place
    (X, WX, h, best, best_X, best_step, going, and each problem's column potentials of its last
    assignment, k x (m + 1), which warm-start its next one after step 0): the assignment on the
    gradient 2 W(X - P) + linear (the Frank-Wolfe vertex), the lower bound there, and the exact
    line search of the quadratic along a direction: toward the vertex, or, `pairwise`, from the
    atom with the largest gradient product to the vertex (pairwise Frank-Wolfe, Lacoste-Julien
    and Jaggi, "On the global linear convergence of Frank-Wolfe optimization variants", 2015,
    Alg. 2; the atoms are the call's start point and the vertices it stepped to, so a pairwise
    run takes its steps in one call). Steps are numbered from the start of the run, so chunking
    classic steps changes nothing."""
    k, m = X.shape[0], X.shape[1]
    cols = np.empty(m, dtype=np.int64)
    inverse = np.empty(m, dtype=np.int64)
    u = np.empty(m + 1)
    row_of = np.empty(m + 1, dtype=np.int64)
    way = np.empty(m + 1, dtype=np.int64)
    dist = np.empty(m + 1)
    used = np.empty(m + 1, dtype=np.bool_)
    W = np.empty((m, m))
    grad = np.empty((m, m))
    Wd = np.empty((m, m))
    d = np.empty((m, m))
    atoms = count + 1 if pairwise else 1     # atom 0: the start point; then vertices
    perm = np.empty((atoms, m), dtype=np.int64)
    W_atom = np.empty((atoms, m, m))
    weight = np.zeros(atoms)
    start = np.empty((m, m))
    for p in range(k):
        n_atoms = 1
        weight[0] = 1.0
        if pairwise:
            for i in range(m):
                for j in range(m):
                    start[i, j] = X[p, i, j]
                    W_atom[0, i, j] = WX[p, i, j]
        for step in range(first, first + count):
            if not going[p]:
                break
            # one pass for the gradient and its products with X and the start point (separate
            # passes would each wait on one sum's additions; the sums' order is unchanged)
            at_X = 0.0
            lin_X = 0.0
            at_start = 0.0
            with_start = pairwise and weight[0] > 0.0
            for i in range(m):
                for j in range(m):
                    w = WX[p, i, j] - WP[p, i, j]
                    g = 2.0 * w + linear[p, i, j]
                    W[i, j] = w
                    grad[i, j] = g
                    at_X += g * X[p, i, j]
                    lin_X += linear[p, i, j] * X[p, i, j]
                    if with_start:
                        at_start += g * start[i, j]
            if not assignment(grad, cols, potentials[p], step > 0, u, row_of, way, dist, used):
                going[p] = False
                break
            slope_to = 0.0
            for i in range(m):
                slope_to += grad[i, cols[i]]
                inverse[cols[i]] = i
            lower = h[p] + lin_X + constant[p] + slope_to - at_X
            if lower > best[p]:
                best[p] = lower
                best_X[p] = X[p]
                best_step[p] = step
            slope = slope_to - at_X
            if not slope < 0:
                going[p] = False
                break
            away = -1                # classic: away from X itself
            if pairwise:
                most = -np.inf
                for a in range(n_atoms):
                    if weight[a] <= 0.0:
                        continue
                    product = at_start
                    if a > 0:
                        product = 0.0
                        for i in range(m):
                            product += grad[i, perm[a, i]]
                    if product > most:
                        most = product
                        away = a
                slope = slope_to - most
            # row by row: Wd = W(vertex) - W(X) (classic) or W(vertex) - W(atom) (pairwise),
            # W(vertex) = A B[cols] - S[:, inverse] - T[cols]; d = vertex - X or vertex - atom;
            # the line search's sums over the finished row
            largest = weight[away] if pairwise else 1.0
            curvature = 0.0
            along = 0.0
            for i in range(m):
                for j in range(m):
                    Wd[i, j] = -S[p, i, inverse[j]] - T[p, cols[i], j] - (0.0 if pairwise else WX[p, i, j])
                    d[i, j] = -X[p, i, j] if away < 0 else (-start[i, j] if away == 0 else 0.0)
                d[i, cols[i]] += 1.0
                if away > 0:
                    d[i, perm[away, i]] -= 1.0
                for q in range(m):
                    a = A[p, i, q]
                    if a != 0.0:
                        row = cols[q]
                        for j in range(m):
                            Wd[i, j] += a * B[p, row, j]
                if pairwise:
                    for j in range(m):
                        W_atom[n_atoms, i, j] = Wd[i, j]     # the vertex's W, kept if it is a new atom
                        Wd[i, j] -= W_atom[away, i, j]
                for j in range(m):
                    curvature += d[i, j] * Wd[i, j]
                    along += W[i, j] * d[i, j]
            size = largest
            if curvature > 0:
                size = min(largest, -slope / (2.0 * curvature))
            h[p] += size * 2.0 * along + size * size * curvature
            for i in range(m):
                for j in range(m):
                    X[p, i, j] += size * d[i, j]
                    WX[p, i, j] += size * Wd[i, j]
            if pairwise:
                weight[away] = 0.0 if size >= largest else weight[away] - size
                known = 0
                for a in range(1, n_atoms):
                    same = True
                    for i in range(m):
                        if perm[a, i] != cols[i]:
                            same = False
                            break
                    if same:
                        known = a
                        break
                if known:
                    weight[known] += size
                else:
                    perm[n_atoms] = cols
                    weight[n_atoms] = size
                    n_atoms += 1
            if step % 64 == 63:      # against drift
                acc = 0.0
                for i in range(m):
                    for j in range(m):
                        acc += (X[p, i, j] - 1.0 / m) * (WX[p, i, j] - WP[p, i, j])
                h[p] = acc


@compiled
def theta_steps(WA, WB, X, theta):
    """theta[p, k] = 1 where, in problem p's eigenbases (Y = WA^T X WB), the squared weight of Y's
    rows after k exceeds that of its columns after k, else 0 (Spectral.better_theta; computed here
    so that the search and the checker get the same 0s and 1s)."""
    k, m, r = X.shape[0], X.shape[1], WA.shape[2]
    XW = np.empty((m, r))
    rows = np.empty(r)
    cols = np.empty(r)
    for p in range(k):
        for i in range(m):
            for j in range(r):
                acc = 0.0
                for q in range(m):
                    acc += X[p, i, q] * WB[p, q, j]
                XW[i, j] = acc
        for j in range(r):
            rows[j] = 0.0
            cols[j] = 0.0
        for i in range(r):
            for j in range(r):
                y = 0.0
                for q in range(m):
                    y += WA[p, q, i] * XW[q, j]
                rows[i] += y * y
                cols[j] += y * y
        after_rows = 0.0
        after_cols = 0.0
        for step in range(r - 2, -1, -1):     # theta[step] weighs the rows and columns after `step`
            after_rows += rows[step + 1]
            after_cols += cols[step + 1]
            theta[p, step] = 1.0 if after_rows > after_cols else 0.0


@compiled
def assignments(costs, cols, potentials):
    """cols[s] = the columns of a minimum-cost assignment of problem s (costs: (S, n, m), n <= m),
    each from a cold start (`assignment`), potentials[s] its column potentials (`assignment`'s v:
    (S, m + 1), index 0 the virtual column); False where one has no finite assignment."""
    m = costs.shape[2]
    u, v = np.empty(max(costs.shape[1], 1)), np.empty(m + 1)
    row_of, way = np.empty(m + 1, dtype=np.int64), np.empty(m + 1, dtype=np.int64)
    dist, used = np.empty(m + 1), np.empty(m + 1, dtype=np.bool_)
    for s in range(costs.shape[0]):
        if not assignment(costs[s], cols[s], v, False, u, row_of, way, dist, used):
            return False
        potentials[s] = v
    return True


@compiled
def sibling_assignments(costs, groups, cols):
    """cols[s] = the columns of a minimum-cost assignment of problem s (costs: (S, n, m), n <= m),
    problem s warm-started from the column potentials of problem s - 1 where groups[s] ==
    groups[s - 1] (siblings in a search tree: the same columns, most costs alike). Each problem is
    made square by m - n rows of zeros, on which any start potentials end in an optimal
    assignment (a perfect matching on tight edges under feasible potentials). False where one has
    no finite assignment."""
    S, n, m = costs.shape
    square = np.zeros((m, m))
    square_cols = np.empty(m, dtype=np.int64)
    u, v = np.empty(m), np.zeros(m + 1)
    row_of, way = np.empty(m + 1, dtype=np.int64), np.empty(m + 1, dtype=np.int64)
    dist, used = np.empty(m + 1), np.empty(m + 1, dtype=np.bool_)
    for s in range(S):
        square[:n] = costs[s]
        warm = s > 0 and groups[s] == groups[s - 1]
        if not assignment(square, square_cols, v, warm, u, row_of, way, dist, used):
            return False
        cols[s] = square_cols[:n]
    return True


@compiled
def _ones(x):
    """The number of 1 bits of a uint64 (SWAR popcount)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return int((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@compiled
def pair_penalties(routes, flow_i, flow_j, pair_s, pair_h, pair_v, D, slot_of, branch, node, kid, out):
    """out[s] = the routing-conflict penalty among the fixed stages of child s: its parent's
    slot_of[node[s]] (-1 where free) with stage branch[node[s]] at slot kid[s] (TileSpace._penalty).
    Routes are bit sets (m, m, words); a Mem_pair counts the links its route shares with the union
    of the routes of the flows whose ends are both fixed."""
    words = routes.shape[2]
    union = np.empty(words, dtype=np.uint64)
    for s in range(node.shape[0]):
        b, stage, k = node[s], branch[node[s]], kid[s]
        union[:] = 0
        for f in range(flow_i.shape[0]):
            a = k if flow_i[f] == stage else slot_of[b, flow_i[f]]
            c = k if flow_j[f] == stage else slot_of[b, flow_j[f]]
            if a >= 0 and c >= 0:
                for w in range(words):
                    union[w] |= routes[a, c, w]
        total = 0.0
        for p in range(pair_s.shape[0]):
            a = k if pair_s[p] == stage else slot_of[b, pair_s[p]]
            c = k if pair_h[p] == stage else slot_of[b, pair_h[p]]
            if a >= 0 and c >= 0:
                shared = 0
                for w in range(words):
                    shared += _ones(routes[a, c, w] & union[w])
                total += D[a, c] * shared * pair_v[p]
        out[s] = total


# numba's first call in a process sets up its compiler and loads the cache (0.15-0.4 s): made here,
# on import, which the runner does before a method's clock starts (wafopt.problems.placement.kernels)
assignments(np.zeros((1, 1, 1)), np.zeros((1, 1), dtype=np.int64), np.zeros((1, 2)))
