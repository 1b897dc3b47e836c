"""TATP group mapping heuristics: `snake` (sequential baseline), `tiles` (Hamiltonian blocks with
repair around faults) and `ga` (pymoo permutation GA), plus the ring-ordering helper they share,
and `untangle`, which reshapes rings so that their traffic shares the fewest links (the planner's
tensor-parallel rings).

Every method reports the trivial bound G * (1 or 2) (see TatpInstance.ring_lower_bound), so a
heuristic that reaches it is proven optimal.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from functools import lru_cache
from typing import Sequence

import numpy as np

from wafopt.core.budget import SolveOptions, never
from wafopt.core.registry import PYMOO, loads
from wafopt.core.result import MethodResult
from wafopt.hardware.mesh import Die, Mesh
from wafopt.problems.tatp.certificate import ring_floor
from wafopt.problems.tatp.plans import groups_plan, snake_groups, total_cost

RING_SEARCH_NODES = 20_000   # DFS nodes per threshold when ordering one ring
PACKING_NODES = 200_000      # DFS nodes per mesh orientation when packing blocks
REGION_RINGS = 3             # rings re-partitioned exactly at once by the region search
REGION_SETS = 5_000          # most N-die subsets of one region the exact re-partition may cost
GENERATIONS = 200            # GA generation cap
UNTANGLE_MOVES = 30_000      # annealing moves of `untangle` (a count, not a time: one seed, one answer)
HEAT = 100.0                 # `untangle` cools from HEAT to COLD (price units: 100 per unit of overload)
COLD = 1.0


# --- ring ordering ---------------------------------------------------------------------------------
def _hamiltonian_cycle(adj: list[list[int]], budget: int) -> list[int] | None:
    """A Hamiltonian cycle of the graph (adjacency lists) by DFS, fewest-onward-moves first."""
    n = len(adj)
    adjset = [set(a) for a in adj]
    start = min(range(n), key=lambda i: len(adj[i]))
    path, on = [start], [False] * n
    on[start] = True
    nodes = [budget]

    def dead_end(u: int) -> bool:
        # every unvisited die still needs two free ends (or one if it may be last next to start)
        for w in range(n):
            if not on[w]:
                free = sum(1 for x in adj[w] if not on[x] or x == u or x == start)
                if free < 2:
                    return True
        return False

    def extend(u: int) -> bool:
        if len(path) == n:
            return start in adjset[u]
        nodes[0] -= 1
        if nodes[0] < 0 or dead_end(u):
            return False
        cands = [v for v in adj[u] if not on[v]]
        cands.sort(key=lambda v: sum(1 for x in adj[v] if not on[x]))
        for v in cands:
            path.append(v)
            on[v] = True
            if extend(v):
                return True
            path.pop()
            on[v] = False
        return False

    return path if extend(start) else None


def order_ring(mesh: Mesh, dies: Sequence[Die], floor: int = 1,
               budget: int = RING_SEARCH_NODES) -> tuple[list[Die], int]:
    """A cyclic order of `dies` with a small longest hop (bottleneck TSP by threshold search).

    Thresholds t = floor, floor+1, ... : the first t for which the DFS finds a Hamiltonian cycle
    over hops <= t wins. The DFS is budgeted, so the result is a heuristic (exact when it never
    runs out of budget below the returned threshold).
    """
    dies = [tuple(d) for d in dies]
    n = len(dies)
    if n <= 2:
        return dies, mesh.ring_cost(dies)
    idx = np.array([mesh.index(d) for d in dies])
    dist = mesh.distance_matrix[idx[:, None], idx]
    if n <= 6:   # every cyclic order at once (at most 60): exact and faster than the DFS
        orders, following = _cycle_orders(n)
        cost = dist[orders, following].max(axis=1)
        best = int(np.argmin(cost))
        return [dies[i] for i in orders[best]], int(cost[best])
    for t in sorted({int(v) for v in dist.flat if v >= floor}):
        adj = [[j for j in range(n) if j != i and dist[i, j] <= t] for i in range(n)]
        if any(len(a) < 2 for a in adj):
            continue
        cycle = _hamiltonian_cycle(adj, budget)
        if cycle is not None:
            return [dies[i] for i in cycle], t
    return dies, mesh.ring_cost(dies)


def best_order(mesh: Mesh, ring: Sequence[Die], floor: int) -> tuple[list[Die], int]:
    """The better of `ring` as given and order_ring's order of its dies."""
    ring = [tuple(d) for d in ring]
    mine = mesh.ring_cost(ring)
    other, cost = order_ring(mesh, ring, floor)
    return (other, cost) if cost < mine else (ring, mine)


# --- shared result helpers -------------------------------------------------------------------------
def _result(instance, groups: list[list[Die]], options: SolveOptions, message: str = "",
            stats: dict | None = None, solver: str = "heuristic") -> MethodResult:
    plan = groups_plan(groups)
    bound = ring_floor(instance)   # a certificate: certify re-derives it from the instance
    options.incumbent(plan, bound)
    return MethodResult(plan, "feasible", bound, solver, message, stats or {})


def _deadline(options: SolveOptions) -> float:
    return time.monotonic() + max(0.05, options.search_seconds())


# --- snake: TEMP's sequential mapping (SMap) ----------------------------------------------------------
def snake(instance, options: SolveOptions) -> MethodResult:
    """Cut the serpentine order of healthy dies into consecutive chunks of N, kept in that order."""
    groups = snake_groups(instance.mesh, instance.group_size, instance.groups)
    return _result(instance, groups, options, "serpentine chunks (sequential mapping baseline)")


# --- tiles: pack Hamiltonian blocks, then repair ----------------------------------------------------
def _may_have_ring(cells: list[Die], floor: int) -> bool:
    """Necessary conditions for a 1-hop ring: two neighbours per die, as many black as white dies."""
    if floor > 1:
        return True
    cellset = set(cells)
    if any(sum((r + dr, c + dc) in cellset for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0))) < 2
           for r, c in cells):
        return False
    return 2 * sum((r + c) % 2 for r, c in cells) == len(cells)


@lru_cache(maxsize=None)
def block_shapes(N: int, floor: int) -> list[list[Die]]:
    """Blocks of N dies whose best cyclic order reaches the ring lower bound `floor`.

    Candidates: h x w rectangles of N dies, and h x w rectangles of N + k dies with k cells cut
    from one corner along one side (k smaller than that side), e.g. 3 x 3 minus a corner for
    N = 8. Each block is its ring in relative coordinates; rectangles and squarer blocks first.
    """
    blocks: dict[frozenset, tuple] = {}
    for h in range(1, N + 1):
        for w in range(1, N + 1):
            k = h * w - N
            if k < 0 or (k > 0 and k >= max(h, w)):
                continue
            full = [(r, c) for r in range(h) for c in range(w)]
            cuts = [set()] if k == 0 else []
            for corner_r, step_r in ((0, 1), (h - 1, -1)):
                for corner_c, step_c in ((0, 1), (w - 1, -1)):
                    if k < w:
                        cuts.append({(corner_r, corner_c + step_c * j) for j in range(k)})
                    if k < h:
                        cuts.append({(corner_r + step_r * j, corner_c) for j in range(k)})
            for cut in cuts:
                cells = [d for d in full if d not in cut]
                key = frozenset(cells)
                if key in blocks or not _may_have_ring(cells, floor):
                    continue
                ring, cost = order_ring(Mesh(h, w), cells, floor, budget=5000)
                if cost == floor:
                    blocks[key] = (k, abs(h - w), ring)
    return [ring for _, _, ring in sorted(blocks.values(), key=lambda b: (b[0], b[1]))]


def _pack(mesh: Mesh, N: int, G: int, floor: int, shapes, deadline: float, stop=never) -> list[list[Die]]:
    """DFS over healthy dies in row-major order: anchor a block at the first free die or leave it
    unused (at most healthy - G*N dies may stay unused). Returns the largest packing found."""
    cells = mesh.healthy_dies
    spare = len(cells) - G * N
    used: set[Die] = set()
    placed: list[list[Die]] = []
    best: list[list[list[Die]]] = [[]]
    nodes = [PACKING_NODES]

    anchors = [min(ring) for ring in shapes]  # first die of each block in row-major order

    def fits(anchor: Die, ring, first: Die) -> list[Die] | None:
        r0, c0 = anchor[0] - first[0], anchor[1] - first[1]
        block = [(r0 + r, c0 + c) for r, c in ring]
        if any(not mesh.is_healthy(d) or d in used for d in block):
            return None
        return block if mesh.ring_cost(block) == floor else None

    def extend(pos: int, spare_left: int) -> bool:
        while pos < len(cells) and cells[pos] in used:
            pos += 1
        if len(placed) > len(best[0]):
            best[0] = list(placed)
        if len(placed) == G:
            return True
        nodes[0] -= 1
        if pos == len(cells) or nodes[0] < 0 or time.monotonic() > deadline or stop():
            return False
        for ring, first in zip(shapes, anchors):
            block = fits(cells[pos], ring, first)
            if block is None:
                continue
            placed.append(block)
            used.update(block)
            if extend(pos + 1, spare_left):
                return True
            placed.pop()
            used.difference_update(block)
        if spare_left > 0:
            return extend(pos + 1, spare_left - 1)
        return False

    extend(0, spare)
    return best[0]


def _symmetries(mesh: Mesh):
    """The 8 symmetries of the rectangle (4 for non-square kept as all 8 with transposes):
    yields (transformed mesh, map back from transformed die to original die)."""
    R, C = mesh.rows, mesh.cols
    for transpose in (False, True):
        for flip_r in (False, True):
            for flip_c in (False, True):
                def fwd(d, t=transpose, fr=flip_r, fc=flip_c):
                    r, c = d
                    r, c = (R - 1 - r if fr else r), (C - 1 - c if fc else c)
                    return (c, r) if t else (r, c)

                def back(d, t=transpose, fr=flip_r, fc=flip_c):
                    r, c = (d[1], d[0]) if t else d
                    return (R - 1 - r if fr else r), (C - 1 - c if fc else c)

                rows, cols = (C, R) if transpose else (R, C)
                m = Mesh.build(rows, cols, [list(fwd(d)) for d in mesh.faulty_dies],
                               [[list(fwd(a)) for a in link] for link in mesh.faulty_links])
                yield m, back


def _grow_groups(mesh: Mesh, free: set[Die], count: int, N: int, floor: int) -> list[list[Die]]:
    """Fill `count` more groups from free dies: seed at the most cornered die, grow compactly."""
    groups = []
    for _ in range(count):
        def free_degree(d):
            return sum(1 for x in mesh.neighbours(d) if x in free)
        seed = min(sorted(free), key=free_degree)
        cluster = [seed]
        free.discard(seed)
        while len(cluster) < N:
            def score(d):
                near = min(mesh.distance(d, x) for x in cluster)
                touching = sum(1 for x in mesh.neighbours(d) if x in cluster)
                return (near, -touching, free_degree(d), d)
            nxt = min(free, key=score)
            cluster.append(nxt)
            free.discard(nxt)
        groups.append(order_ring(mesh, cluster, floor)[0])
    return groups


def improve(mesh: Mesh, groups: list[list[Die]], floor: int, deadline: float, stop=never) -> list[list[Die]]:
    """Local search: swap a die of an expensive ring with a free die or a die of another ring
    within 2 hops while the total cost drops; rings re-ordered with order_ring."""
    groups = [list(g) for g in groups]
    costs = [mesh.ring_cost(g) for g in groups]
    owner = {d: i for i, g in enumerate(groups) for d in g}
    improved = True
    while improved and time.monotonic() < deadline and not stop():
        improved = False
        for gi in sorted(range(len(groups)), key=lambda i: -costs[i]):
            if costs[gi] <= floor:
                break
            ring = groups[gi]
            near = {x for d in ring for x in mesh.healthy_dies if mesh.distance(d, x) <= 2} - set(ring)
            for a in list(ring):
                for b in sorted(near):
                    if time.monotonic() > deadline or stop():
                        return groups
                    gj = owner.get(b)
                    new_i, cost_i = order_ring(mesh, [b if d == a else d for d in ring], floor, 2000)
                    if gj is None:
                        if cost_i < costs[gi]:
                            groups[gi], costs[gi] = new_i, cost_i
                            del owner[a]
                            owner[b] = gi
                            improved = True
                            break
                        continue
                    new_j, cost_j = order_ring(mesh, [a if d == b else d for d in groups[gj]], floor, 2000)
                    if cost_i + cost_j < costs[gi] + costs[gj]:
                        groups[gi], costs[gi], groups[gj], costs[gj] = new_i, cost_i, new_j, cost_j
                        owner[a], owner[b] = gj, gi
                        improved = True
                        break
                if improved:
                    break
            if improved:
                break
    return groups


def _set_cost(dist: np.ndarray, members: tuple[int, ...], floor: int, mesh: Mesh, cells) -> int:
    """Exact best ring cost of a die set: all cyclic orders for N <= 6, else order_ring."""
    N = len(members)
    if N > 6:
        return order_ring(mesh, [cells[k] for k in members], floor)[1]
    head, best = members[0], None
    for rest in itertools.permutations(members[1:]):
        if N > 2 and rest[0] > rest[-1]:
            continue  # the same cycle in the other direction
        cyc = (head,) + rest
        cost = max(dist[cyc[k], cyc[(k + 1) % N]] for k in range(N))
        best = cost if best is None else min(best, cost)
    return int(best)


@lru_cache(maxsize=None)
@lru_cache(maxsize=None)
def _cycle_orders(N: int) -> tuple[np.ndarray, np.ndarray]:
    """Every cyclic order of N positions once (first fixed, one direction), and each order's
    successors: two (orders, N) arrays, read-only (shared by every call)."""
    rest = [r for r in itertools.permutations(range(1, N)) if N <= 2 or r[0] < r[-1]]
    orders = np.array([(0,) + r for r in rest], dtype=int)
    following = np.roll(orders, -1, axis=1)
    orders.flags.writeable = following.flags.writeable = False
    return orders, following


def _set_costs(dist: np.ndarray, sets: list[tuple[int, ...]], floor: int, mesh: Mesh, cells) -> list[int]:
    """_set_cost of many sets: all cyclic orders at once in numpy for N <= 6."""
    N = len(sets[0])
    if N > 6:
        return [_set_cost(dist, c, floor, mesh, cells) for c in sets]
    members = np.array(sets, dtype=int)[:, _cycle_orders(N)[0]]                   # (sets, orders, N)
    hops = dist[members, np.roll(members, -1, axis=2)]
    return [int(v) for v in hops.max(axis=2).min(axis=1)]


def best_partition(mesh: Mesh, cells: list[Die], k: int, N: int, floor: int):
    """Exact: k disjoint rings of N dies from `cells` (the others stay unused) with the least total
    ring cost, by DP over subsets anchored at the lowest undecided die. Returns (cost, rings), or
    None when the region has more than REGION_SETS subsets of N dies."""
    m = len(cells)
    if math.comb(m, N) > REGION_SETS:
        return None
    idx = [mesh.index(d) for d in cells]
    dist = mesh.distance_matrix[np.ix_(idx, idx)]
    sets = list(itertools.combinations(range(m), N))
    costs = _set_costs(dist, sets, floor, mesh, cells)
    # the N-sets by their lowest die, cheapest first, each as (bit mask, cost, members)
    anchored: list[list[tuple[int, int, tuple]]] = [[] for _ in range(m)]
    masks = ((np.int64(1) << np.array(sets, dtype=np.int64)).sum(axis=1).tolist() if m < 63
             else [sum(1 << j for j in c) for c in sets])
    for c, cost, mask in zip(sets, costs, masks):
        anchored[c[0]].append((mask, cost, c))
    for options in anchored:
        options.sort(key=lambda o: o[1])
    spare = m - k * N

    @lru_cache(maxsize=None)
    def solve(decided: int, left: int, skipped: int) -> tuple[float, tuple]:
        if left == 0:
            return 0, ()
        i = next((j for j in range(m) if not decided >> j & 1), None)
        if i is None:
            return math.inf, ()
        best: tuple[float, tuple] = (math.inf, ())
        if skipped < spare:  # leave die i unused
            best = solve(decided | 1 << i, left, skipped + 1)
        for mask, cost, members in anchored[i]:
            if cost + (left - 1) * floor >= best[0]:
                break   # cheapest first: no later set can do better
            if mask & decided:
                continue
            sub, rings = solve(decided | mask, left - 1, skipped)
            if cost + sub < best[0]:
                best = (cost + sub, (members,) + rings)
        return best

    total, rings = solve(0, k, 0)
    if total == math.inf:
        return None
    return int(total), [order_ring(mesh, [cells[j] for j in ring], floor)[0] for ring in rings]


def region_search(mesh: Mesh, groups: list[list[Die]], N: int, floor: int,
                  deadline: float, stop=never) -> list[list[Die]]:
    """Large-neighbourhood search: for an expensive ring, re-partition it together with up to
    REGION_RINGS - 1 of its nearest rings and the unused dies next to them exactly
    (best_partition); keep the first strict improvement, repeat until none or the deadline."""
    groups = [list(g) for g in groups]
    healthy = mesh.healthy_dies
    solved: dict = {}      # best_partition of a region, for regions seen in an earlier pass
    improved = True
    while improved and time.monotonic() < deadline and not stop():
        improved = False
        costs = [mesh.ring_cost(g) for g in groups]
        used = {d for g in groups for d in g}
        for gi in sorted(range(len(groups)), key=lambda i: -costs[i]):
            if costs[gi] <= floor or improved:
                break
            gap = {j: min(mesh.distance(a, b) for a in groups[gi] for b in groups[j])
                   for j in range(len(groups)) if j != gi}
            nearest = sorted(gap, key=lambda j: (gap[j], -costs[j]))[:4]
            for size in range(1, REGION_RINGS):
                for others in itertools.combinations(nearest, size):
                    if time.monotonic() > deadline or stop():
                        return groups
                    members = [gi, *others]
                    dies = {d for j in members for d in groups[j]}
                    spare = {d for d in healthy if d not in used and min(mesh.distance(d, x) for x in dies) <= 1}
                    region = (tuple(sorted(dies | spare)), len(members))
                    if region not in solved:
                        solved[region] = best_partition(mesh, list(region[0]), region[1], N, floor)
                    found = solved[region]
                    if found is not None and found[0] < sum(costs[j] for j in members):
                        for j, ring in zip(members, found[1]):
                            groups[j] = ring
                        improved = True
                        break
                if improved:
                    break
    return groups


def complete_groups(mesh: Mesh, rings: list[list[Die]], G: int, N: int, floor: int,
                    deadline: float, stop=never) -> list[list[Die]]:
    """Grow G - len(rings) more rings from the free dies, then local search and region search."""
    free = set(mesh.healthy_dies) - {d for ring in rings for d in ring}
    groups = [list(r) for r in rings] + _grow_groups(mesh, free, G - len(rings), N, floor)
    if total_cost(mesh, groups) > G * floor:
        groups = improve(mesh, groups, floor, deadline, stop)
        groups = region_search(mesh, groups, N, floor, deadline, stop)
    return groups


def tile_groups(instance, deadline: float, stop=never) -> tuple[list[list[Die]], dict]:
    """Pack Hamiltonian blocks under the 8 mesh symmetries; repair the rest; local search."""
    mesh, N, G, floor = instance.mesh, instance.group_size, instance.groups, instance.ring_lower_bound
    shapes = block_shapes(N, floor)
    best: list[list[Die]] = []
    tried = 0
    for sym_mesh, back in _symmetries(mesh):
        if not shapes or time.monotonic() > deadline or stop():
            break
        tried += 1
        packed = [[back(d) for d in ring] for ring in _pack(sym_mesh, N, G, floor, shapes, deadline, stop)]
        if len(packed) > len(best):
            best = packed
        if len(best) == G:
            break
    groups = complete_groups(mesh, best, G, N, floor, deadline, stop)
    stats = {"blocks": len(best), "grown": G - len(best), "orientations_tried": tried}
    return groups, stats


def tiles(instance, options: SolveOptions) -> MethodResult:
    groups, stats = tile_groups(instance, _deadline(options), options.stopped)
    return _result(instance, groups, options,
                   f"{stats['blocks']} Hamiltonian blocks + {stats['grown']} grown rings", stats)


# --- ga: pymoo permutation GA --------------------------------------------------------------------------
def _encode(mesh: Mesh, groups: list[list[Die]]) -> np.ndarray:
    """Permutation of healthy-die positions: the rings in order, then the unused dies."""
    pos = {d: k for k, d in enumerate(mesh.healthy_dies)}
    seq = [pos[tuple(d)] for ring in groups for d in ring]
    rest = [k for k in range(len(pos)) if k not in set(seq)]
    return np.array(seq + rest, dtype=int)


@loads(*PYMOO)
def ga(instance, options: SolveOptions) -> MethodResult:
    """Permutation GA (order crossover, inversion mutation): the first G*N dies of a permutation,
    cut into G chunks, are the rings in chunk order. Seeded with the snake and tiles mappings;
    the best individual's rings are re-ordered and improved by local search."""
    from importlib.metadata import version

    from pymoo.algorithms.soo.nonconvex.ga import (
        GA,  # lazy: slow import (docs/architecture.md)
    )
    from pymoo.core.problem import Problem
    from pymoo.operators.crossover.ox import OrderCrossover
    from pymoo.operators.mutation.inversion import InversionMutation

    mesh, N, G, floor = instance.mesh, instance.group_size, instance.groups, instance.ring_lower_bound
    started = time.monotonic()
    deadline = _deadline(options)
    total_s = deadline - started
    cells = mesh.healthy_dies
    idx = np.array([mesh.index(d) for d in cells])
    dist = mesh.distance_matrix[np.ix_(idx, idx)]

    def fitness(X: np.ndarray) -> np.ndarray:
        rings = X[:, :G * N].reshape(len(X), G, N)
        hops = dist[rings, np.roll(rings, -1, axis=2)]
        return hops.max(axis=2).sum(axis=1).astype(float)

    class Mapping(Problem):
        def __init__(self):
            super().__init__(n_var=len(cells), n_obj=1, xl=0, xu=len(cells) - 1, vtype=int)

        def _evaluate(self, X, out, *args, **kwargs):
            out["F"] = fitness(np.asarray(X, dtype=int))

    tiled, _ = tile_groups(instance, started + 0.3 * total_s, options.stopped)
    seeds = np.array([_encode(mesh, tiled), _encode(mesh, snake_groups(mesh, N, G))])
    rng = np.random.default_rng(options.seed)
    pop = 60
    randoms = np.array([rng.permutation(len(cells)) for _ in range(pop - len(seeds))])
    algorithm = GA(pop_size=pop, sampling=np.vstack([seeds, randoms]), crossover=OrderCrossover(),
                   mutation=InversionMutation(), eliminate_duplicates=True)
    best = tiled
    if fitness(seeds[:1])[0] > instance.lower_bound:
        remaining = max(0.05, 0.6 * (deadline - time.monotonic()))
        # stop at the generation cap (deterministic for a seed) or the time budget, whichever first
        algorithm.setup(Mapping(), termination=("n_gen", GENERATIONS), seed=options.seed, verbose=False)
        stop = time.monotonic() + remaining
        generations = 0
        while algorithm.has_next() and time.monotonic() < stop and not options.stopped():
            algorithm.next()
            generations += 1
        if generations:   # stopped before the first generation: the tiled seed stands
            x = np.asarray(algorithm.result().X, dtype=int)
            rings = [[cells[k] for k in x[g * N:(g + 1) * N]] for g in range(G)]
            rings = [best_order(mesh, ring, floor)[0] for ring in rings]
            rings = improve(mesh, rings, floor, deadline, options.stopped)
            if total_cost(mesh, rings) < total_cost(mesh, best):
                best = rings
    return _result(instance, best, options, "pymoo GA seeded with tiles and snake",
                   solver=f"pymoo {version('pymoo')}")


# --- untangle: rings whose traffic shares the fewest links -------------------------------------------
class _LinkLoad:
    """Flows per directed link of a set of rings, each step carrying one flow each way on the
    mesh's routes, and the price of the set: 100 per unit of squared overload (a link carrying c > 1
    flows costs (c - 1)^2) plus one per hop beyond the first of every step."""

    def __init__(self, mesh: Mesh):
        self.mesh, self.load, self.price, self._links = mesh, {}, 0, {}

    def _route(self, a: Die, b: Die) -> list:
        if (a, b) not in self._links:
            self._links[a, b] = Mesh.route_links(self.mesh.xy_route(a, b))
        return self._links[a, b]

    def change(self, steps, sign: int) -> None:
        """Add (sign +1) or remove (-1) the flows of ring steps (die pairs)."""
        for a, b in steps:
            for src, dst in ((a, b), (b, a)):
                links = self._route(src, dst)
                self.price += sign * (len(links) - 1)
                for link in links:
                    before = self.load.get(link, 0)
                    self.load[link] = after = before + sign
                    self.price += 100 * (max(0, after - 1) ** 2 - max(0, before - 1) ** 2)


def _ring_steps(ring: Sequence[Die]) -> list[tuple[Die, Die]]:
    return [(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))]


def _swap(rings, rng, n):
    """Exchange a die of one ring with a die of another: (saved rings, steps out, steps in)."""
    g, h = rng.sample(range(len(rings)), 2)
    i, j = rng.randrange(n), rng.randrange(n)
    rg, rh = rings[g], rings[h]
    saved = {g: list(rg), h: list(rh)}
    x, y = rg[i], rh[j]
    out = [(rg[i - 1], x), (x, rg[(i + 1) % n]), (rh[j - 1], y), (y, rh[(j + 1) % n])]
    rg[i], rh[j] = y, x
    return saved, out, [(rg[i - 1], y), (y, rg[(i + 1) % n]), (rh[j - 1], x), (x, rh[(j + 1) % n])]


def _reverse(rings, rng, n):
    """Reverse a segment of one ring (2-opt): only its two boundary steps change."""
    g = rng.randrange(len(rings))
    i, j = sorted(rng.sample(range(n), 2))
    r = rings[g]
    saved = {g: list(r)}
    if i == 0 and j == n - 1:
        return saved, [], []
    before, after = r[i - 1], r[(j + 1) % n]
    out = [(before, r[i]), (r[j], after)]
    r[i:j + 1] = r[i:j + 1][::-1]
    return saved, out, [(before, r[i]), (r[j], after)]


def _move(rings, rng, n):
    """Move one die of a ring to another place in the same ring."""
    g = rng.randrange(len(rings))
    r = rings[g]
    saved = {g: list(r)}
    i, j = rng.sample(range(n), 2)
    x, before, after = r[i], r[i - 1], r[(i + 1) % n]
    r.insert(j, r.pop(i))
    a, b = r[j - 1], r[(j + 1) % n]   # neighbours in the new place, adjacent once x left
    return saved, [(before, x), (x, after), (a, b)], [(before, after), (a, x), (x, b)]


MOVES = ((0.35, _swap), (0.7, _reverse), (1.0, _move))   # (cumulative share, move)


def untangle(mesh: Mesh, groups: list[list[Die]], seed: int = 0, moves: int = UNTANGLE_MOVES,
             stop=never) -> list[list[Die]]:
    """Simulated annealing over the rings' orders and members (swap two dies of different rings,
    reverse a segment of a ring, move a die within its ring) on the `_LinkLoad` price; the best
    rings seen. Deterministic for a seed unless `stop` cuts it short."""
    rings = [[tuple(d) for d in g] for g in groups]
    n = len(rings[0]) if rings else 0
    if n < 3:
        return rings
    rng = random.Random(seed)
    load = _LinkLoad(mesh)
    for ring in rings:
        load.change(_ring_steps(ring), +1)
    best, best_price = [list(r) for r in rings], load.price
    for k in range(moves):
        if best_price == 0 or k % 1000 == 0 and stop():   # 0: one-hop steps, no link shared
            break
        pick = rng.random()
        move = next(m for share, m in MOVES if pick < share)
        if move is _swap and len(rings) == 1:
            move = _reverse
        saved, out, into = move(rings, rng, n)
        before = load.price
        load.change(out, -1)
        load.change(into, +1)
        delta = load.price - before
        heat = HEAT * (COLD / HEAT) ** (k / moves)
        if delta <= 0 or rng.random() < math.exp(-delta / heat):
            if load.price < best_price:
                best, best_price = [list(r) for r in rings], load.price
            continue
        load.change(into, -1)   # rejected: undo
        load.change(out, +1)
        for g, ring in saved.items():
            rings[g] = ring
    return best
