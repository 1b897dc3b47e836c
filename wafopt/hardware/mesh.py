"""The die mesh: healthy graph, hop distances, XY routes, link loads, alpha-beta time.

Dies are (row, col) tuples; die (r, c) has index r * cols + c. Links are full-duplex, so
every physical link is two directed links ((r, c), (r', c')) with independent load.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator, Sequence

import numpy as np

from wafopt.core.errors import InstanceError
from wafopt.core.limits import MAX_DIES, MAX_MESH_SIDE

Die = tuple[int, int]
Link = tuple[Die, Die]

UNREACHABLE = -1  # entry of the distance matrix for dies the healthy graph does not connect


def as_die(value, where: str) -> Die:
    """Parse [r, c] into a die tuple, or raise InstanceError naming `where`."""
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise InstanceError(f"expected a die [row, col] of two integers, got {value!r}", where)
    return (int(value[0]), int(value[1]))


@dataclass(frozen=True)
class Mesh:
    rows: int
    cols: int
    faulty_dies: frozenset[Die] = field(default_factory=frozenset)
    faulty_links: frozenset[frozenset[Die]] = field(default_factory=frozenset)  # undirected
    link_bandwidth: float = 1.0  # bytes per second per direction (kernel instances: any unit)
    link_latency: float = 0.0    # alpha of WATOS Eq. 1, seconds per hop

    # --- construction -------------------------------------------------------------------
    @classmethod
    def build(cls, rows: int, cols: int, faulty_dies: Iterable = (), faulty_links: Iterable = (),
              link_bandwidth: float = 1.0, link_latency: float = 0.0, where: str = "mesh",
              max_side: int = MAX_MESH_SIDE, max_dies: int = MAX_DIES) -> "Mesh":
        """Validated constructor: faults must lie in the mesh, faulty links join neighbours
        (`max_side`, `max_dies`: a GPU cluster's nodes are rows, and its size may exceed a wafer's)."""
        for name, value in (("rows", rows), ("cols", cols)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InstanceError(f"must be a positive integer, got {value!r}", f"{where}.{name}")
            if value > max_side:
                raise InstanceError(f"must be <= {max_side} (limit), got {value!r}", f"{where}.{name}")
        if rows * cols > max_dies:
            raise InstanceError(f"{rows} x {cols} = {rows * cols:,} dies, more than the limit of {max_dies:,}",
                                where)
        if not link_bandwidth > 0:
            raise InstanceError(f"must be positive, got {link_bandwidth!r}", f"{where}.link_bandwidth")
        if link_latency < 0:
            raise InstanceError(f"must be >= 0, got {link_latency!r}", f"{where}.link_latency")
        dies = set()
        for k, d in enumerate(faulty_dies):
            die = as_die(d, f"{where}.faulty_dies[{k}]")
            if not (0 <= die[0] < rows and 0 <= die[1] < cols):
                raise InstanceError(f"die {list(die)} lies outside the {rows} x {cols} mesh",
                                    f"{where}.faulty_dies[{k}]")
            dies.add(die)
        links = set()
        for k, pair in enumerate(faulty_links):
            w = f"{where}.faulty_links[{k}]"
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise InstanceError(f"expected [[r, c], [r, c]], got {pair!r}", w)
            a, b = as_die(pair[0], w), as_die(pair[1], w)
            for die in (a, b):
                if not (0 <= die[0] < rows and 0 <= die[1] < cols):
                    raise InstanceError(f"die {list(die)} lies outside the {rows} x {cols} mesh", w)
            if abs(a[0] - b[0]) + abs(a[1] - b[1]) != 1:
                raise InstanceError(f"dies {list(a)} and {list(b)} are not mesh neighbours", w)
            links.add(frozenset((a, b)))
        return cls(rows, cols, frozenset(dies), frozenset(links), float(link_bandwidth),
                   float(link_latency))

    # --- dies and links -------------------------------------------------------------------
    def index(self, die: Die) -> int:
        return die[0] * self.cols + die[1]

    def die(self, index: int) -> Die:
        return divmod(int(index), self.cols)

    def contains(self, die: Die) -> bool:
        return 0 <= die[0] < self.rows and 0 <= die[1] < self.cols

    def is_healthy(self, die: Die) -> bool:
        return self.contains(die) and die not in self.faulty_dies

    @cached_property
    def healthy_dies(self) -> list[Die]:
        """Healthy dies in row-major order."""
        return [(r, c) for r in range(self.rows) for c in range(self.cols)
                if (r, c) not in self.faulty_dies]

    def link_ok(self, a: Die, b: Die) -> bool:
        return (self.is_healthy(a) and self.is_healthy(b)
                and abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1
                and frozenset((a, b)) not in self.faulty_links)

    def neighbours(self, die: Die) -> list[Die]:
        """Healthy neighbours over healthy links, in the fixed order E, W, S, N (deterministic)."""
        r, c = die
        cand = [(r, c + 1), (r, c - 1), (r + 1, c), (r - 1, c)]
        return [d for d in cand if self.link_ok(die, d)]

    @cached_property
    def directed_links(self) -> list[Link]:
        return [(a, b) for a in self.healthy_dies for b in self.neighbours(a)]

    # --- distances --------------------------------------------------------------------------
    @cached_property
    def distance_matrix(self) -> np.ndarray:
        """Hop distances between all die indices in the healthy graph (UNREACHABLE if none)."""
        n = self.rows * self.cols
        if not self.faulty_dies and not self.faulty_links:
            rr, cc = np.divmod(np.arange(n), self.cols)
            return np.abs(rr[:, None] - rr[None, :]) + np.abs(cc[:, None] - cc[None, :])
        # breadth-first search from every die at once, one level a step over (source, die) pairs
        # in numpy (a Python BFS takes minutes on 4,096 dies; this about as long as scipy's)
        dist = np.full((n, n), UNREACHABLE, dtype=np.int64)
        flat_dist = dist.ravel()
        neighbours = self._neighbour_table()
        healthy = np.array([self.index(d) for d in self.healthy_dies], dtype=np.int64)
        dist[healthy, healthy] = 0
        source, at, hops = healthy, healthy, 0
        while len(source):
            hops += 1
            step = neighbours[at]                                              # (pairs, 4), -1: none
            flat = np.repeat(source, step.shape[1]) * n + step.ravel()
            flat = flat[(step.ravel() >= 0) & (flat_dist[flat] == UNREACHABLE)]
            # one copy of each pair reached twice: each writes its own mark, the survivor keeps it
            mark = -2 - np.arange(len(flat))
            flat_dist[flat] = mark
            flat = flat[flat_dist[flat] == mark]
            flat_dist[flat] = hops
            source, at = np.divmod(flat, n)
        faulty = [self.index(d) for d in self.faulty_dies]
        dist[faulty, :] = UNREACHABLE  # a faulty die reaches nothing, not even itself
        dist[:, faulty] = UNREACHABLE
        return dist

    def _neighbour_table(self) -> np.ndarray:
        """(dies, 4): the index of each die's neighbours over healthy links, -1 padded."""
        table = np.full((self.rows * self.cols, 4), -1, dtype=np.int64)
        for die in self.healthy_dies:
            near = [self.index(d) for d in self.neighbours(die)]
            table[self.index(die), :len(near)] = near
        return table

    def _bfs(self, src: Die) -> dict[Die, int]:
        seen = {src: 0}
        queue = deque([src])
        while queue:
            u = queue.popleft()
            for v in self.neighbours(u):
                if v not in seen:
                    seen[v] = seen[u] + 1
                    queue.append(v)
        return seen

    def distance(self, a: Die, b: Die) -> int:
        """Hop distance in the healthy graph; raises if the dies are not connected."""
        d = int(self.distance_matrix[self.index(a), self.index(b)])
        if d == UNREACHABLE or not (self.is_healthy(a) and self.is_healthy(b)):
            raise InstanceError(f"dies {list(a)} and {list(b)} are not connected in the healthy mesh")
        return d

    def ring_cost(self, ring: Sequence[Die]) -> int:
        """Longest hop between cyclically consecutive dies of `ring` (0 for fewer than two): a TP
        or TATP ring step lasts as long as its longest hop (TEMP Sec. V, WaferLLM Sec. 5.2)."""
        n = len(ring)
        if n < 2:
            return 0
        return max(self.distance(tuple(ring[k]), tuple(ring[(k + 1) % n])) for k in range(n))

    def is_connected(self) -> bool:
        dies = self.healthy_dies
        return not dies or len(self._bfs(dies[0])) == len(dies)

    def require_connected(self, where: str = "mesh") -> None:
        if not self.is_connected():
            raise InstanceError("the healthy dies do not form one connected mesh "
                                f"(faulty dies {sorted(map(list, self.faulty_dies))}, "
                                f"faulty links {len(self.faulty_links)})", where)

    # --- routes ---------------------------------------------------------------------------------
    @cached_property
    def _routes(self) -> dict:
        return {}  # (src, dst) -> XY route: evaluators route the same pairs again and again

    def __getstate__(self) -> dict:
        # the fields only: cached distances and routes are recomputed, never part of what a
        # pickled mesh says (a shared mesh would otherwise pickle differently with its history)
        return {f: self.__dict__[f] for f in self.__dataclass_fields__}

    def xy_route(self, src: Die, dst: Die) -> list[Die]:
        """Dimension-order route: along the row (X, columns) first, then the column (Y, rows).

        If that route crosses a faulty die or link, fall back to the deterministic shortest path
        of `shortest_route`.
        """
        key = (tuple(src), tuple(dst))
        if key not in self._routes:
            self._routes[key] = tuple(self._xy_route(*key))
        return list(self._routes[key])

    def _xy_route(self, src: Die, dst: Die) -> list[Die]:
        path = [src]
        r, c = src
        while c != dst[1]:
            c += 1 if dst[1] > c else -1
            path.append((r, c))
        while r != dst[0]:
            r += 1 if dst[0] > r else -1
            path.append((r, c))
        if all(self.link_ok(a, b) for a, b in zip(path, path[1:])) and self.is_healthy(src):
            return path
        return self.shortest_route(src, dst)

    def shortest_route(self, src: Die, dst: Die) -> list[Die]:
        """A shortest healthy path, deterministic: BFS parents taken in E, W, S, N order."""
        if src == dst:
            return [src]
        parent = {src: src}
        queue = deque([src])
        while queue:
            u = queue.popleft()
            for v in self.neighbours(u):
                if v not in parent:
                    parent[v] = u
                    if v == dst:
                        path = [v]
                        while path[-1] != src:
                            path.append(parent[path[-1]])
                        return path[::-1]
                    queue.append(v)
        raise InstanceError(f"dies {list(src)} and {list(dst)} are not connected in the healthy mesh")

    def paths(self, src: Die, dst: Die, detour: int = 0, limit: int | None = None) -> list[list[Die]]:
        """All simple healthy paths from src to dst at most `detour` hops longer than the shortest.

        Deterministic order; `limit` caps how many are returned (shortest found first is not
        guaranteed, so callers that cap should sort by length).
        """
        bound = self.distance(src, dst) + detour
        dist_to_dst = self.distance_matrix[:, self.index(dst)]
        out: list[list[Die]] = []

        def extend(path: list[Die], on_path: set[Die]) -> bool:
            u = path[-1]
            if u == dst:
                out.append(list(path))
                return limit is not None and len(out) >= limit
            for v in self.neighbours(u):
                dv = dist_to_dst[self.index(v)]
                if v in on_path or dv == UNREACHABLE or len(path) + dv > bound:
                    continue
                path.append(v)
                on_path.add(v)
                stop = extend(path, on_path)
                path.pop()
                on_path.discard(v)
                if stop:
                    return True
            return False

        extend([src], {src})
        return sorted(out, key=len)

    def xy_link_table(self, dies: Sequence[Die]) -> np.ndarray:
        """(k, k, directed links) booleans: entry [a, b, link] says whether xy_route(dies[a], dies[b])
        uses directed link `link` (numbered as in directed_links); no links on the diagonal. The
        dimension-order routes are laid down in numpy a column and a row at a time (one route at a
        time took seconds on a few hundred dies); a route meeting a fault is taken from xy_route."""
        index = {link: k for k, link in enumerate(self.directed_links)}
        missing = len(index)                                   # a link the route needs but lacks
        step = {(0, 1): 0, (0, -1): 1, (1, 0): 2, (-1, 0): 3}   # E, W, S, N
        out_link = np.full((4, self.rows, self.cols), missing)  # the directed link leaving each die
        for (a, b), k in index.items():
            out_link[step[(b[0] - a[0], b[1] - a[1])], a[0], a[1]] = k
        r = np.array([d[0] for d in dies], dtype=np.int64)
        c = np.array([d[1] for d in dies], dtype=np.int64)
        table = np.zeros((len(dies), len(dies), missing + 1), dtype=bool)
        src, dst = np.arange(len(dies))[:, None], np.arange(len(dies))[None, :]
        for col in range(self.cols):        # the row leg: in the source's row, from its column to the target's
            for direction, on_leg in ((0, (c[:, None] <= col) & (col < c[None, :])),
                                      (1, (c[None, :] < col) & (col <= c[:, None]))):
                a, b = np.nonzero(on_leg)
                table[a, b, out_link[direction, r[a], col]] = True
        for row in range(self.rows):        # the column leg: in the target's column, from the source's row
            for direction, on_leg in ((2, (r[:, None] <= row) & (row < r[None, :])),
                                      (3, (r[None, :] < row) & (row <= r[:, None]))):
                a, b = np.nonzero(on_leg)
                table[a, b, out_link[direction, row, c[b]]] = True
        healthy = np.array([self.is_healthy(d) for d in dies], dtype=bool)
        detours = table[:, :, missing] | ~healthy[:, None] & (src != dst)
        for a, b in zip(*np.nonzero(detours)):
            table[a, b] = False
            for link in self.route_links(self.xy_route(tuple(dies[a]), tuple(dies[b]))):
                table[a, b, index[link]] = True
        return table[:, :, :missing]

    @staticmethod
    def route_links(path: Sequence[Die]) -> list[Link]:
        return [(a, b) for a, b in zip(path, path[1:])]

    def check_route(self, path: Sequence[Die], src: Die, dst: Die) -> str | None:
        """None if `path` is a healthy walk from src to dst, else what is wrong with it."""
        if not path or tuple(path[0]) != src or tuple(path[-1]) != dst:
            return f"route must start at {list(src)} and end at {list(dst)}"
        for a, b in zip(path, path[1:]):
            if not self.link_ok(tuple(a), tuple(b)):
                return f"route uses {list(a)}->{list(b)}, which is not a healthy link"
        return None

    def link_loads(self, routed: Iterable[tuple[Sequence[Die], float]]) -> dict[Link, float]:
        """Sum of volumes per directed link over (route, volume) pairs."""
        load: dict[Link, float] = {}
        for path, volume in routed:
            for link in self.route_links([tuple(d) for d in path]):
                load[link] = load.get(link, 0.0) + float(volume)
        return load

    # --- time -------------------------------------------------------------------------------------
    def transfer_time(self, nbytes: float, hops: int = 1, bandwidth: float | None = None) -> float:
        """Alpha-beta time of one transfer (WATOS Eq. 1), alpha paid per hop: hops*alpha + bytes/BW."""
        if nbytes <= 0:
            return 0.0
        return hops * self.link_latency + nbytes / (bandwidth or self.link_bandwidth)

    def boustrophedon(self) -> Iterator[Die]:
        """Serpentine order: row 0 left to right, row 1 right to left, ... (WATOS Fig. 11a)."""
        for r in range(self.rows):
            cols = range(self.cols) if r % 2 == 0 else range(self.cols - 1, -1, -1)
            for c in cols:
                yield (r, c)
