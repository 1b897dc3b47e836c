"""The full Eq. 2 objective of placements on one tile shape, vectorized (WATOS, Sec. IV-C.1, Eq. 2).

An assignment is encoded as a permutation `perm` of the m usable slot indices of one Layout:
stage i sits in slot perm[i] (i < n); perm[n:] are the free slots. `Fitness` scores a whole
population of such assignments in numpy; its value equals the evaluator's
(wafopt.problems.placement.evaluate). Exact models and heuristics share it.
"""

from __future__ import annotations

import time
from itertools import combinations

import numpy as np

from wafopt.core.numeric import tolerance
from wafopt.problems.placement.instance import Layout, PlacementInstance

CHUNK = 128   # rows scored at once: their (rows x edges) index blocks stay in L2 (512 was 3x slower on nug30)


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
        self._index = np.int32 if self.m * self.m < 2 ** 31 else np.int64
        # swap deltas: C padded to m x m (a free slot holds a stage without flows); int64 when every
        # sum stays below 2^62 (exact, no noise), else float64
        whole = bool(np.all(self.C == np.round(self.C))) and integers
        exact64 = whole and float(self.C.sum()) * max(1.0, float(self.D.max())) < 2.0 ** 62
        self.exact_deltas = exact64
        kind = np.int64 if exact64 else np.float64
        self._Cm = np.zeros((self.m, self.m), dtype=kind)
        self._Cm[:self.n, :self.n] = self.C
        self._Dk = self.D.astype(kind)
        if self.pairs:
            self._routes()

    def _routes(self) -> None:
        lay = self.layout
        self.R = self.inst.mesh.xy_link_table([lay.representative(s) for s in lay.slots])  # R[k, l]: links of XY route k -> l
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
            # stages as rows (n x chunk, int32): gathering whole rows per edge is a memcpy, about
            # twice as fast as gathering single entries of P's columns
            slots = np.ascontiguousarray(P[start:start + CHUNK, :self.n].T, dtype=self._index)
            flat = np.take(slots * self._index(self.m), self.edge_i, axis=0)      # (edges x chunk)
            flat += np.take(slots, self.edge_j, axis=0)
            out[start:start + CHUNK] = self._weights @ np.take(self._table, flat)
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
    def swap_delta(self, perm: np.ndarray, r: int, s: int):
        """Exact change of the base objective when positions r < n and s != r (s < m; s >= n: stage r
        moves to a free slot) exchange their slots, in O(n) (the classic QAP swap delta):
        sum_k (C[r,k] - C[s,k]) (D[p_s,p_k] - D[p_r,p_k]) + 2 C[r,s] D[p_r,p_s], k over all stages
        (the k = r, s terms of the sum are -C[r,s] D[p_r,p_s] each, hence the correction)."""
        n, a, b = self.n, perm[r], perm[s]
        p = perm[:n]
        return ((self._Cm[r, :n] - self._Cm[s, :n]) @ (self._Dk[b, p] - self._Dk[a, p])
                + 2 * self._Cm[r, s] * self._Dk[a, b])

    def swaps(self, perm: np.ndarray) -> "SwapDeltas":
        """The deltas of every swap of perm, kept current as swaps are applied."""
        return SwapDeltas(self, perm)

    def base_descent(self, perm: np.ndarray, deadline: float | None = None, stop=None) -> np.ndarray:
        """Best-improvement swaps/relocations by exact base-objective deltas, all kept current
        (SwapDeltas: O(m^2) a step), until none improves, the deadline passes or stop() holds."""
        table = self.swaps(perm)
        noise = 0 if self.exact_deltas else tolerance(self.one(perm))   # float deltas this small are noise
        while (deadline is None or time.monotonic() < deadline) and not (stop and stop()):
            delta, r, s = table.best()
            if delta >= -noise:
                break
            table.apply(r, s)
        return table.perm

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


class SwapDeltas:
    """The exact base-objective change of every swap (r, s), r < n, r < s < m, of one assignment,
    updated in O(m^2) per applied swap instead of rebuilt in O(n m^2).

    With Cm (C padded to m x m), Dp = D[perm][:, perm] and M = Cm @ Dp:
    delta[r, s] = M[r,s] + M[s,r] - M[r,r] - M[s,s] + 2 Cm[r,s] Dp[r,s] (the swap delta of
    Fitness.swap_delta summed for all pairs at once). Swapping positions u, v permutes Dp's rows and
    columns by t = (u v) and changes M by a rank-one term: M' = M[:, t] + (Cm[:, v] - Cm[:, u]) x
    (Dp[t, u] - Dp[t, v]). Integer data stay in int64 (exact); float data are rebuilt every
    REFRESH swaps so rounding does not accumulate.
    """

    REFRESH = 64

    def __init__(self, fit: Fitness, perm: np.ndarray):
        self.fit, self.perm = fit, np.array(perm)
        n, m = fit.n, fit.m
        # +inf where (r, s) is not a move: s <= r among stages
        self._blocked = np.where(np.arange(m)[None, :] <= np.arange(n)[:, None], np.inf, 0.0)
        self._rebuild()

    def _rebuild(self) -> None:
        fit, p = self.fit, self.perm
        self.Dp = fit._Dk[np.ix_(p, p)]
        self.M = fit._Cm @ self.Dp
        self._since = 0

    def deltas(self) -> np.ndarray:
        """(n, m) array: delta of swap (r, s) at [r, s], +inf where (r, s) is not a move."""
        n, M = self.fit.n, self.M
        d = np.diagonal(M)
        out = M[:n] + M[:, :n].T - d[:n, None] - d[None, :] + 2 * self.fit._Cm[:n] * self.Dp[:n]
        return out + self._blocked

    def best(self) -> tuple[float, int, int]:
        """(delta, r, s) of the best swap."""
        delta = self.deltas()
        r, s = np.unravel_index(np.argmin(delta), delta.shape)
        return float(delta[r, s]), int(r), int(s)

    def apply(self, u: int, v: int) -> None:
        """Swap the slots of positions u and v and bring every delta up to date."""
        t = np.arange(self.fit.m)
        t[u], t[v] = v, u
        Cm = self.fit._Cm
        self.M = self.M[:, t] + np.outer(Cm[:, v] - Cm[:, u], self.Dp[t, u] - self.Dp[t, v])
        self.Dp = self.Dp[np.ix_(t, t)]
        self.perm[u], self.perm[v] = self.perm[v], self.perm[u]
        self._since += 1
        if not self.fit.exact_deltas and self._since >= self.REFRESH:
            self._rebuild()
