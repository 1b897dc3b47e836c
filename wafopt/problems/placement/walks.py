"""Pipeline walks: the cheapest placements that put consecutive stages on neighbouring slots.

A pipeline's heaviest flows join stage i to stage i + 1, so good placements are walks on the slot
grid: stage 0 somewhere, each next stage on a free slot beside the last (a snake folded to keep the
Mem_pair partners close). `best_walk` searches these walks depth first with the base objective
(Eq. 2 without the routing-conflict penalty) and a lower bound on the part not yet placed, stage 0
on one slot of each orbit of the grid symmetries, and returns the walk of least full objective
among the best it met and their symmetric images. It is a construction heuristic (the local
search starts from it): the search is over walks only, within a fixed number of nodes (so the
answer does not depend on the machine), and may stop before it has seen them all.

The bound of a partial walk (stages 0..p placed, p at slot k), every term a distance the rest of
the walk cannot undercut:
    exact base cost among the placed stages
  + for each unplaced j and placed i: C[i][j] * max(dmin, D(slot i, k) - (j - p) * hop)
    (j is at most j - p hops of at most `hop` from k; triangle inequality of mesh distances)
  + for each pair of unplaced stages: C[i][j] * dmin,
with dmin the least distance between two slots and hop the largest between neighbouring slots.
"""

from __future__ import annotations

import time
from functools import cache

import numpy as np

from wafopt.core.budget import never
from wafopt.problems.placement.fitness import Fitness
from wafopt.problems.placement.instance import orbit_representatives

NODES = 1_000_000      # search nodes (about 0.05 s; pl-sparse-24's optimum 278 comes after 300 000, its
                       # whole walk search takes 3.7 million)
KEEP = 16              # walks of least base objective kept for the full objective
CHUNK_NODES = 100_000  # nodes between two looks at the deadline and Ctrl-C (about 0.005 s)
DENSITY = 0.25         # a pipeline's stage pairs with flow besides its chain, at most this share of them


def is_pipeline(C: np.ndarray) -> bool:
    """Whether every stage talks to the next one (walks then keep every pipeline flow one hop long)
    and few other pairs talk (at most DENSITY of them: on dense QAPs walks are no guide)."""
    n = C.shape[0]
    if n < 2 or not np.all(C[np.arange(n - 1), np.arange(1, n)] > 0):
        return False
    chain = np.abs(np.subtract.outer(np.arange(n), np.arange(n))) == 1
    return np.count_nonzero(C[~chain & ~np.eye(n, dtype=bool)]) <= DENSITY * (n - 1) * (n - 2)


def slot_neighbours(fit: Fitness) -> np.ndarray:
    """(m, 4) usable slots beside each slot on the slot grid, -1 padded."""
    lay = fit.layout
    out = np.full((fit.m, 4), -1, dtype=np.int64)
    for k, (a, b) in enumerate(lay.slots):
        near = [lay.index[s] for s in ((a - 1, b), (a + 1, b), (a, b - 1), (a, b + 1)) if s in lay.index]
        out[k, :len(near)] = near
    return out


class WalkSearch:
    """The depth-first search's state, kept between chunks of nodes."""

    def __init__(self, fit: Fitness, starts: np.ndarray):
        n, m = fit.n, fit.m
        W = np.triu(fit.C, 1)
        self.W = W + W.T                                    # base weight of each unordered pair
        self.D = np.ascontiguousarray(fit.D, dtype=float)
        self.near = slot_neighbours(fit)
        off = self.D[~np.eye(m, dtype=bool)]
        self.dmin = float(off.min()) if len(off) else 0.0
        beside = self.D[np.repeat(np.arange(m), 4), self.near.ravel()][self.near.ravel() >= 0]
        self.hop = float(beside.max()) if len(beside) else 0.0
        # the unplaced pairs' share of the bound: rest[p] = dmin * weight among stages p..n-1
        self.rest = np.zeros(n + 1)
        for p in range(n - 1, -1, -1):
            self.rest[p] = self.rest[p + 1] + self.dmin * self.W[p, p + 1:].sum()
        # the nonzero weights the bound reads, in its order: stage p's partners i < p, and at depth p
        # the pairs (j, i), j > p >= i, by j then i (sparse: a pipeline's stage has 2-4 partners)
        self.earlier = _padded([[i for i in range(p) if self.W[p, i] > 0] for p in range(n)])
        self.crossing = _padded([[(j, i) for j in range(p + 1, n) for i in range(p + 1) if self.W[j, i] > 0]
                                 for p in range(n)], pair=True)
        self.slot = np.full(n, -1, dtype=np.int64)         # stage -> slot on the current walk
        self.used = np.zeros(m, dtype=np.bool_)
        self.options = np.full((n, max(m, 4)), -1, dtype=np.int64)   # per depth: slots to try, best first
        self.count = np.zeros(n, dtype=np.int64)
        self.next = np.zeros(n, dtype=np.int64)
        self.cost = np.zeros(n + 1)                         # base cost of stages 0..p-1
        self.depth = np.zeros(1, dtype=np.int64)            # -1: every walk seen
        self.best_slots = np.full((KEEP, n), -1, dtype=np.int64)
        self.best_values = np.full(KEEP, np.inf)
        self.options[0, :len(starts)] = starts
        self.count[0] = len(starts)
        self.nodes = 0

    def run(self, nodes: int) -> None:
        self.nodes += compiled_walk_steps()(self.W, self.D, self.near, self.earlier, self.crossing, self.dmin,
                                            self.hop, self.rest, self.slot, self.used, self.options, self.count,
                                            self.next, self.cost, self.depth, self.best_slots, self.best_values, nodes)

    @property
    def finished(self) -> bool:
        return int(self.depth[0]) < 0


def _padded(rows: list, pair: bool = False) -> np.ndarray:
    """Ragged rows of stages (or of (j, i) pairs) as one array padded with -1."""
    width = max(1, max(len(row) for row in rows))
    out = np.full((len(rows), width, 2) if pair else (len(rows), width), -1, dtype=np.int64)
    for p, row in enumerate(rows):
        if row:
            out[p, :len(row)] = row
    return out


@cache
def compiled_walk_steps():
    """walk_steps compiled (numba is imported on first use: 0.1-0.8 s and about 100 MB)."""
    from wafopt.problems.placement.compiled import compiled

    return compiled(walk_steps)


def walk_steps(W, D, near, earlier, crossing, dmin, hop, rest, slot, used, options, count, nxt, cost, depth,
               best_slots, best_values, budget):
    """Up to `budget` nodes of the depth-first walk search from the state (WalkSearch); returns
    the nodes visited. Leaves enter best_slots/best_values (ascending) while below the last kept."""
    n = W.shape[0]
    keep = best_values.shape[0]
    p = depth[0]
    visited = 0
    while p >= 0 and visited < budget:
        if nxt[p] >= count[p]:                 # depth p exhausted: back to p - 1
            p -= 1
            if p >= 0:
                used[slot[p]] = False
            continue
        k = options[p, nxt[p]]
        nxt[p] += 1
        visited += 1
        c = cost[p]
        for e in range(earlier.shape[1]):
            i = earlier[p, e]
            if i < 0:
                break
            c += W[p, i] * D[k, slot[i]]
        bound = c + rest[p + 1]
        for e in range(crossing.shape[1]):
            j = crossing[p, e, 0]
            if j < 0:
                break
            i = crossing[p, e, 1]
            reach = D[slot[i], k] if i < p else 0.0
            bound += W[j, i] * max(dmin, reach - (j - p) * hop)
        if bound >= best_values[keep - 1]:
            continue
        slot[p] = k
        if p == n - 1:                          # a whole walk: into the kept list
            q = keep - 1
            while q > 0 and best_values[q - 1] > c:
                best_values[q] = best_values[q - 1]
                best_slots[q] = best_slots[q - 1]
                q -= 1
            best_values[q] = c
            best_slots[q] = slot
            continue
        used[k] = True
        cost[p + 1] = c
        p += 1
        # the free neighbours of k, cheapest first (insertion sort: at most 4)
        m = 0
        keys = np.empty(4)
        for a in range(near.shape[1]):
            l = near[k, a]
            if l < 0 or used[l]:
                continue
            key = 0.0
            for e in range(earlier.shape[1]):
                i = earlier[p, e]
                if i < 0:
                    break
                key += W[p, i] * D[l, slot[i]]
            q = m
            while q > 0 and keys[q - 1] > key:
                keys[q] = keys[q - 1]
                options[p, q] = options[p, q - 1]
                q -= 1
            keys[q] = key
            options[p, q] = l
            m += 1
        count[p] = m
        nxt[p] = 0
    depth[0] = p
    return visited


def best_walk(fit: Fitness, nodes: int = NODES, deadline: float | None = None, stop=never,
              starts: np.ndarray | None = None) -> tuple[np.ndarray, float, int] | None:
    """The walk of least full objective among the KEEP of least base objective that the search
    meets within `nodes` nodes and their images under the layout's symmetries (stage 0 on each of
    `starts` in turn, by default one slot per orbit of the layout's symmetries, which preserve D and
    so the base objective), as a permutation of the slots (stage i on perm[i],
    the free slots after), its full objective and the nodes visited; None for a layout without a
    walk of n stages or an instance that is no pipeline."""
    if not is_pipeline(fit.C):
        return None
    if starts is None:
        starts = orbit_representatives(fit.layout.symmetries, fit.m)
    starts = np.asarray(starts, dtype=np.int64)
    search = WalkSearch(fit, starts)
    while not search.finished and search.nodes < nodes:
        if stop() or (deadline is not None and time.monotonic() >= deadline):
            break
        search.run(min(CHUNK_NODES, nodes - search.nodes))
    found = np.isfinite(search.best_values)
    if not found.any():
        return None
    group = np.array(fit.layout.symmetries).reshape(-1, fit.m)
    walks = search.best_slots[found]
    walks = np.concatenate([walks] + [g[walks] for g in group])     # a symmetry may change the penalty
    values = fit(walks)
    best = walks[int(np.argmin(values))]
    used = set(best.tolist())
    perm = np.array(best.tolist() + [k for k in range(fit.m) if k not in used], dtype=np.int64)
    return perm, float(values.min()), search.nodes
