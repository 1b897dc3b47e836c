"""Minimum-cost assignment with its dual potentials: what the placement certificates check
their assignment-problem bounds with (weak duality holds for any potentials)."""

from __future__ import annotations

import numpy as np


def hungarian(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimum-cost assignment of rows to distinct columns (rows <= columns): shortest augmenting
    paths with potentials (Hungarian method, O(n^2 m)). Returns (column of each row, row
    potentials u, column potentials v <= 0) with u_i + v_k <= cost[i, k] up to rounding."""
    n, m = cost.shape
    INF = np.inf
    u, v = np.zeros(n + 1), np.zeros(m + 1)
    row_of = np.zeros(m + 1, dtype=int)          # row_of[col] (1-based rows, 0 = free)
    way = np.zeros(m + 1, dtype=int)
    for i in range(1, n + 1):
        row_of[0] = i
        j0 = 0
        minv = np.full(m + 1, INF)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = row_of[j0]
            free = ~used[1:]
            reduced = cost[i0 - 1] - u[i0] - v[1:]
            better = free & (reduced < minv[1:])
            minv[1:][better] = reduced[better]
            way[1:][better] = j0
            cand = np.where(free, minv[1:], INF)
            j1 = int(np.argmin(cand)) + 1
            delta = cand[j1 - 1]
            u[row_of[used]] += delta
            v[used] -= delta
            minv[1:][free] -= delta
            j0 = j1
            if row_of[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            row_of[j0] = row_of[j1]
            j0 = j1
    col = np.zeros(n, dtype=int)
    for j in range(1, m + 1):
        if row_of[j]:
            col[row_of[j] - 1] = j - 1
    return col, u[1:], v[1:]
