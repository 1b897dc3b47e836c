"""The full Eq. 2 objective of placements on one tile shape, vectorized (WATOS, Sec. IV-C.1, Eq. 2).

An assignment is encoded as a permutation `perm` of the m usable slot indices of one Layout:
stage i sits in slot perm[i] (i < n); perm[n:] are the free slots. `Fitness` scores a whole
population of such assignments in numpy; its value equals the evaluator's
(wafopt.problems.placement.evaluate). Exact models and heuristics share it.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from wafopt.problems.placement.instance import Layout, PlacementInstance


CHUNK = 512   # rows scored at once: their gathered (rows x edges) block stays in cache


class Fitness:
    """Vectorized full objective of assignments on one layout.

    base(P) = sum_e C_e * D[P[:, i_e], P[:, j_e]] over unordered stage pairs e with weight C_e > 0;
    penalty(P) = sum over Mem_pairs of vol * D * gamma, gamma = |route(pair) & union of flow routes|,
    routes as boolean link vectors of the XY route between representative dies.
    """

    def __init__(self, inst: PlacementInstance, lay: Layout):
        self.inst, self.layout = inst, lay
        self.n, self.m = inst.stages, len(lay.slots)
        self.D = lay.distance
        self.C = inst.weights
        iu, ju = np.triu_indices(self.n, 1)
        keep = self.C[iu, ju] > 0
        self.edge_i, self.edge_j, self.edge_w = iu[keep], ju[keep], self.C[iu, ju][keep]
        self.pairs = inst.pairs
        # scoring tables: D flat (D[k, l] at k*m + l) and the edge weights, in float32 when every
        # product and sum is an integer below 2^24 (then exact), else float64
        integers = bool(np.all(self.edge_w == np.round(self.edge_w)) and np.all(self.D == np.round(self.D)))
        exact32 = integers and float(self.edge_w.sum()) * max(1.0, float(self.D.max())) < 2.0 ** 24
        dtype = np.float32 if exact32 else np.float64
        self._table, self._weights = self.D.astype(dtype).ravel(), self.edge_w.astype(dtype)
        if self.pairs:
            self._routes()

    def _routes(self) -> None:
        mesh, lay = self.inst.mesh, self.layout
        links = {link: k for k, link in enumerate(mesh.directed_links)}
        reps = [lay.representative(s) for s in lay.slots]
        self.R = np.zeros((self.m, self.m, len(links)), dtype=bool)  # R[k, l]: links of XY route k -> l
        for k in range(self.m):
            for l in range(self.m):
                if k != l:
                    for link in mesh.route_links(mesh.xy_route(reps[k], reps[l])):
                        self.R[k, l, links[link]] = True
        V = self.inst.flow
        self.flow_i, self.flow_j = np.nonzero(V > 0)
        self.pair_s = np.array([s for s, _, _ in self.pairs])
        self.pair_h = np.array([h for _, h, _ in self.pairs])
        self.pair_v = np.array([v for _, _, v in self.pairs])
        # the same routes as bit sets (64 links a word): unions and intersections a word at a time
        words = -(-self.R.shape[2] // 64)
        packed = np.packbits(self.R, axis=2, bitorder="little")
        padded = np.zeros((self.m, self.m, 8 * words), dtype=np.uint8)
        padded[:, :, :packed.shape[2]] = packed
        self.route_bits = padded.view(np.uint64)                                    # (m, m, words)

    def base(self, P: np.ndarray) -> np.ndarray:
        P = np.asarray(P)
        out = np.empty(len(P))
        for start in range(0, len(P), CHUNK):
            rows = P[start:start + CHUNK]
            out[start:start + CHUNK] = self._table[rows[:, self.edge_i] * self.m + rows[:, self.edge_j]] @ self._weights
        return out

    def penalty(self, P: np.ndarray) -> np.ndarray:
        """sum over Mem_pairs of vol * D * gamma for each row of P (0 without Mem_pairs)."""
        P = np.asarray(P)
        out = np.zeros(len(P))
        if not self.pairs:
            return out
        routes = self.route_bits.reshape(self.m * self.m, -1)
        for start in range(0, len(P), CHUNK):
            rows = P[start:start + CHUNK]
            by_stage = rows.T
            union = np.bitwise_or.reduce(routes[by_stage[self.flow_i] * self.m + by_stage[self.flow_j]], axis=0)
            pair = rows[:, self.pair_s] * self.m + rows[:, self.pair_h]                     # (rows, pairs)
            gamma = np.bitwise_count(routes[pair] & union[:, None, :]).sum(axis=2)
            out[start:start + CHUNK] = (self._table[pair] * gamma) @ self.pair_v
        return out

    def __call__(self, P: np.ndarray) -> np.ndarray:
        """Full objective of each row of P (pop, >= n) of slot indices."""
        P = np.asarray(P)[:, :self.n]
        return self.base(P) + self.penalty(P) if self.pairs else self.base(P)

    def one(self, perm) -> float:
        return float(self(np.asarray(perm)[None, :])[0])

    # --- moves ----------------------------------------------------------------------------------
    def best_base_swap(self, perm: np.ndarray) -> tuple[float, int, int]:
        """Best swap of positions (r, s), r < n, r < s < m, by the exact change of the base objective.

        Stage-stage swaps: delta = A[r,s] + A[s,r] - a[r] - a[s] + 2 C[r,s] D[p_r,p_s] with
        A = C @ D[p][:, p], a = diag(A); stage r to free slot f: delta = (D[f, p] @ C)[r] - a[r].
        """
        n = self.n
        p = perm[:n]
        Dp = self.D[np.ix_(p, p)]
        A = self.C @ Dp
        a = np.diag(A).copy()
        swap = A + A.T - a[:, None] - a[None, :] + 2 * self.C * Dp
        swap[np.tril_indices(n)] = np.inf
        r, s = np.unravel_index(np.argmin(swap), swap.shape)
        best = (float(swap[r, s]), int(r), int(s))
        if self.m > n:
            move = self.D[np.ix_(perm[n:], p)] @ self.C - a[None, :]          # (free, n)
            f, r2 = np.unravel_index(np.argmin(move), move.shape)
            if move[f, r2] < best[0]:
                best = (float(move[f, r2]), int(r2), int(n + f))
        return best

    def neighbours(self, perm: np.ndarray, kind: str) -> np.ndarray:
        """All neighbours of perm by one move: "swap" (positions r < n, r < s < m), "reverse" (the
        slots of stages a..b in reverse order: 2-opt of the pipeline path) or "cycle" (3-cycles of
        stage positions)."""
        if kind == "cycle":
            trip = np.array(list(combinations(range(self.n), 3)), dtype=int).reshape(-1, 3)
            trip = np.concatenate([trip, trip[:, [0, 2, 1]]])
            out = np.repeat(perm[None, :], len(trip), axis=0)
            rows = np.arange(len(trip))[:, None]
            out[rows, trip] = perm[np.roll(trip, 1, axis=1)]
            return out
        if kind == "reverse":
            segs = [(a, b) for a in range(self.n) for b in range(a + 2, self.n)]
            out = np.repeat(perm[None, :], len(segs), axis=0)
            for row, (a, b) in zip(out, segs):
                row[a:b + 1] = perm[a:b + 1][::-1]
            return out
        r, s = np.array([(r, s) for r in range(self.n) for s in range(r + 1, self.m)], dtype=int).reshape(-1, 2).T
        out = np.repeat(perm[None, :], len(r), axis=0)
        idx = np.arange(len(r))
        out[idx, r], out[idx, s] = perm[s], perm[r]
        return out
