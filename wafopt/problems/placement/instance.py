"""Stage placement (WATOS section IV-C.1, Eq. 2): pipeline stages onto aligned tiles of the mesh.

Instance file (problem: placement)::

    mesh: {rows: 3, cols: 4, faulty_dies: [[0, 1]], faulty_links: []}
    tile: [1, 1]                 # or a list of candidate shapes [[1, 4], [2, 2], [4, 1]]
    stages: 3                    # optional; default: inferred from flows / flow_matrix
    flows: [[0, 1, 5.0], [1, 2, 3.0], [0, 2, 1.0]]   # [i, j, volume], directed i -> j
    flow_matrix: [[...], ...]    # alternative to flows: dense n x n (QAPLIB style)
    pairs: [[0, 2, 2.0]]         # optional Mem_pair flows [sender, helper, volume]

Slots: for a tile shape (h, w), slot (a, b) covers rows a*h .. a*h+h-1 and columns
b*w .. b*w+w-1; a slot that holds a faulty die is unusable. Its representative die is
(a*h + (h-1)//2, b*w + (w-1)//2) and D(k, l) is the hop distance between representative dies in
the healthy mesh. Plan: ``{"tile": [h, w], "assignment": [[a, b] per stage]}``.

Objective (minimized, evaluated by wafopt.problems.placement.evaluate):
  base = sum over unordered stage pairs {i, j} of (V[i][j] + V[j][i]) * D(slot i, slot j), where
         V = flows + Mem_pair volumes;
  full = base + sum over pairs (s, h) of volume_sh * D(s, h) * gamma_sh, gamma_sh = number of
         directed links the XY route s -> h shares with the XY routes of the flows (Eq. 2).
The exact models minimize `base`, a valid lower bound of `full` since gamma >= 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from wafopt.core.errors import InstanceError
from wafopt.core.fields import Fields
from wafopt.core.numeric import exact
from wafopt.hardware.mesh import Die, Mesh

OBJECTIVE = "WATOS Eq. 2 cost: sum of volume x hops, Mem_pair flows x (1 + gamma) (flow volume units x hops)"

Tile = tuple[int, int]
Slot = tuple[int, int]


@dataclass(frozen=True)
class Layout:
    """The usable slots of one tile shape and the distances between their representative dies."""

    mesh: Mesh
    tile: Tile
    slots: tuple[Slot, ...]  # usable slots, row-major over the slot grid

    @property
    def slot_rows(self) -> int:
        return self.mesh.rows // self.tile[0]

    @property
    def slot_cols(self) -> int:
        return self.mesh.cols // self.tile[1]

    def representative(self, slot: Slot) -> Die:
        h, w = self.tile
        return (slot[0] * h + (h - 1) // 2, slot[1] * w + (w - 1) // 2)

    def dies(self, slot: Slot) -> list[Die]:
        h, w = self.tile
        return [(slot[0] * h + dr, slot[1] * w + dc) for dr in range(h) for dc in range(w)]

    @cached_property
    def index(self) -> dict[Slot, int]:
        return {s: k for k, s in enumerate(self.slots)}

    @cached_property
    def distance(self) -> np.ndarray:
        """D[k, l]: hops between the representative dies of usable slots k and l."""
        reps = [self.mesh.index(self.representative(s)) for s in self.slots]
        return self.mesh.distance_matrix[np.ix_(reps, reps)].astype(float)

    @cached_property
    def coordinates(self) -> np.ndarray:
        """(m, 2) die coordinates (row, col) of the representative dies."""
        return np.array([self.representative(s) for s in self.slots], dtype=float).reshape(-1, 2)

    @cached_property
    def is_manhattan(self) -> bool:
        """True when D equals the Manhattan distance of the representative dies (no detours)."""
        xy = self.coordinates
        manhattan = np.abs(xy[:, None, :] - xy[None, :, :]).sum(axis=2)
        return bool(np.array_equal(manhattan, self.distance))

    def order(self, serpentine: bool) -> list[int]:
        """Usable slot indices in boustrophedon (serpentine) or row-major order of the slot grid."""
        out = []
        for a in range(self.slot_rows):
            cols = range(self.slot_cols)
            if serpentine and a % 2 == 1:
                cols = reversed(cols)
            out += [self.index[(a, b)] for b in cols if (a, b) in self.index]
        return out

    @cached_property
    def symmetries(self) -> list[np.ndarray]:
        """Permutations g of the slot indices with D[g(k), g(l)] = D[k, l] (grid reflections and,
        for a square slot grid, transpositions) that map usable slots onto usable slots."""
        R, C = self.slot_rows, self.slot_cols
        maps = [lambda a, b: (a, b), lambda a, b: (R - 1 - a, b), lambda a, b: (a, C - 1 - b),
                lambda a, b: (R - 1 - a, C - 1 - b)]
        if R == C:
            maps += [lambda a, b: (b, a), lambda a, b: (C - 1 - b, a), lambda a, b: (b, R - 1 - a),
                     lambda a, b: (C - 1 - b, R - 1 - a)]
        out = []
        D = self.distance
        for g in maps:
            images = [g(*s) for s in self.slots]
            if not all(img in self.index for img in images):
                continue
            perm = np.array([self.index[img] for img in images])
            if np.array_equal(D[np.ix_(perm, perm)], D):
                out.append(perm)
        return out

    def plan(self, slot_of_stage) -> dict:
        return {"tile": list(self.tile), "assignment": [list(self.slots[int(k)]) for k in slot_of_stage]}


def layout(mesh: Mesh, tile: Tile) -> Layout:
    h, w = tile
    slots = []
    for a in range(mesh.rows // h):
        for b in range(mesh.cols // w):
            if all(mesh.is_healthy((a * h + dr, b * w + dc)) for dr in range(h) for dc in range(w)):
                slots.append((a, b))
    return Layout(mesh, tile, tuple(slots))


@dataclass
class PlacementInstance:
    mesh: Mesh
    tiles: list[Tile]                 # candidate tile shapes; a plan uses one of them
    flow: np.ndarray                  # (n, n) directed pipeline/communication volumes V[i][j]
    pairs: list[tuple[int, int, float]] = field(default_factory=list)  # Mem_pair (sender, helper, volume)

    @property
    def stages(self) -> int:
        return int(self.flow.shape[0])

    @cached_property
    def weights(self) -> np.ndarray:
        """Symmetric C[i][j] = V[i][j] + V[j][i] including Mem_pair volumes (zero diagonal): the
        weight of unordered pair {i, j} in the base objective sum_{i<j} C[i][j] * D."""
        V = self.flow.copy()
        for s, h, vol in self.pairs:
            V[s, h] += vol
        C = V + V.T
        np.fill_diagonal(C, 0.0)
        return C

    @cached_property
    def layouts(self) -> list[Layout]:
        """Layouts of the candidate tile shapes that have at least `stages` usable slots."""
        return [lay for lay in (layout(self.mesh, t) for t in self.tiles) if len(lay.slots) >= self.stages]


# --- parsing -----------------------------------------------------------------------------------

def _tile(value, where: str) -> Tile:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise InstanceError(f"expected a tile shape [h, w] of two positive integers, got {value!r}", where)
    return (int(value[0]), int(value[1]))


def _triples(items: list, where: str, what: str) -> list[tuple[int, int, float]]:
    out = []
    for k, item in enumerate(items):
        w = f"{where}[{k}]"
        if (not isinstance(item, (list, tuple)) or len(item) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in item[:2])
                or not isinstance(item[2], (int, float)) or isinstance(item[2], bool)):
            raise InstanceError(f"expected [{what}, volume] (two stage indices and a number), "
                                f"got {item!r}", w)
        i, j, vol = int(item[0]), int(item[1]), float(item[2])
        if i < 0 or j < 0:
            raise InstanceError(f"stage indices must be >= 0, got {item!r}", w)
        if i == j:
            raise InstanceError(f"a flow needs two different stages, got {item!r}", w)
        if not np.isfinite(vol) or vol < 0:
            raise InstanceError(f"volume must be a finite number >= 0, got {item[2]!r}", w)
        out.append((i, j, vol))
    return out


def parse(f: Fields) -> PlacementInstance:
    mesh = Mesh.from_spec(f.raw("mesh"), f.path("mesh"))
    mesh.require_connected(f.path("mesh"))
    raw_tile = f.raw("tile", default=[1, 1])
    if isinstance(raw_tile, list) and raw_tile and all(isinstance(t, list) for t in raw_tile):
        tiles = [_tile(t, f"{f.path('tile')}[{k}]") for k, t in enumerate(raw_tile)]
    else:
        tiles = [_tile(raw_tile, f.path("tile"))]
    if len(set(tiles)) != len(tiles):
        raise InstanceError(f"repeated tile shape in {raw_tile!r}", f.path("tile"))
    stages = f.integer("stages", default=None, positive=True)
    if f.has("flows") and f.has("flow_matrix"):
        raise InstanceError("give either flows or flow_matrix, not both", f.path("flow_matrix"))
    pairs = _triples(f.list("pairs", default=[]), f.path("pairs"), "sender, helper")
    if f.has("flow_matrix"):
        rows = f.list("flow_matrix")  # entries checked by the schema: finite numbers in [0, 2^53]
        n = len(rows)
        for i, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != n:
                raise InstanceError(f"expected a row of {n} numbers (the matrix is {n} x {n}), got {row!r:.60}",
                                    f"{f.path('flow_matrix')}[{i}]")
        flow = np.array(rows, dtype=float).reshape(n, n)
        if stages is not None and stages != n:
            raise InstanceError(f"stages is {stages} but flow_matrix is {n} x {n}", f.path("stages"))
    else:
        flows = _triples(f.list("flows", default=[]), f.path("flows"), "i, j")
        n = stages if stages is not None else 1 + max([max(i, j) for i, j, _ in flows + pairs], default=-1)
        if n == 0:
            raise InstanceError("no stages: give flows, flow_matrix or stages", f.path("flows"))
        flow = np.zeros((n, n))
        for k, (i, j, vol) in enumerate(flows):
            if max(i, j) >= n:
                raise InstanceError(f"stage index {max(i, j)} out of range (stages: {n})", f"{f.path('flows')}[{k}]")
            flow[i, j] = float(exact(flow[i, j]) + exact(vol))  # repeated flows: the exact decimal sum
    for k, (s, h, _) in enumerate(pairs):
        if max(s, h) >= n:
            raise InstanceError(f"stage index {max(s, h)} out of range (stages: {n})", f"{f.path('pairs')}[{k}]")
    inst = PlacementInstance(mesh, tiles, flow, pairs)
    if not inst.layouts:
        counts = ", ".join(f"{h}x{w}: {len(layout(mesh, (h, w)).slots)}" for h, w in tiles)
        raise InstanceError(f"{n} stages do not fit: usable slots per tile shape {counts}", f.path("tile"))
    return inst


def to_mapping(inst: PlacementInstance) -> dict:
    """The instance as a YAML-ready mapping (without the common keys)."""
    n = inst.stages
    out = {"mesh": inst.mesh.to_spec(),
           "tile": list(inst.tiles[0]) if len(inst.tiles) == 1 else [list(t) for t in inst.tiles],
           "stages": n,
           "flows": [[i, j, float(inst.flow[i, j])] for i in range(n) for j in range(n) if inst.flow[i, j] > 0]}
    if inst.pairs:
        out["pairs"] = [[s, h, v] for s, h, v in inst.pairs]
    return out


def sparse_pipeline(stages: int, rows: int, cols: int, mem_pairs: int, seed: int) -> dict:
    """A seeded synthetic pipeline instance: chain volumes 1..10 each way, `mem_pairs` Mem_pair flows
    from a stage of the first half (Sender) to one of the second half (Helper), volume 1..5."""
    rng = np.random.default_rng(seed)
    flows = []
    for i in range(stages - 1):
        v = int(rng.integers(1, 11))
        flows += [[i, i + 1, v], [i + 1, i, v]]
    senders = rng.choice(stages // 2, size=mem_pairs, replace=False)
    helpers = stages // 2 + rng.choice(stages - stages // 2, size=mem_pairs, replace=False)
    pairs = [[int(s), int(h), int(rng.integers(1, 6))] for s, h in zip(senders, helpers)]
    return {"problem": "placement", "name": f"pl-sparse-{stages}",
            "description": f"synthetic {stages}-stage pipeline with {mem_pairs} Mem_pair flows on a {rows} x {cols} "
                           f"mesh (wafopt.problems.placement.instance.sparse_pipeline seed {seed})",
            "mesh": {"rows": rows, "cols": cols}, "tile": [1, 1], "stages": stages, "flows": flows, "pairs": pairs}


# --- scenario coupling -------------------------------------------------------------------------

def from_scenario(scenario) -> PlacementInstance:
    """Stages: dp pipelines of pp stages (replica r holds stages r*pp .. r*pp+pp-1), each a tile of tp
    dies in every shape h * w = tp that fits; flows: microbatches * p2p_bytes each way between stages
    i, i+1 of a pipeline per iteration (activations forward, gradients backward: 2 m p2p in total).
    Mem_pair flows are not derived (add `pairs:` to a kernel instance)."""
    if scenario.parallel is None:
        raise InstanceError("the scenario has no parallel: {tp, pp, dp}; placement needs tp and pp", "parallel")
    workload = scenario.workload()
    mesh = scenario.wafer.mesh()
    pp, dp = int(workload.pp), int(workload.dp)
    from wafopt.problems.plan.layouts import tile_shapes

    tiles = tile_shapes(int(workload.tp), mesh)
    flow = np.zeros((pp * dp, pp * dp))
    volume = float(workload.microbatches) * float(workload.p2p_bytes)  # each way, per iteration
    for r in range(dp):
        for i in range(r * pp, r * pp + pp - 1):
            flow[i, i + 1] = flow[i + 1, i] = volume
    inst = PlacementInstance(mesh, tiles, flow, [])
    if not inst.layouts:
        raise InstanceError(f"dp * pp = {dp * pp} stages of tp = {workload.tp} dies do not fit on the "
                            f"{mesh.rows} x {mesh.cols} wafer in any tile shape", "parallel")
    return inst


# --- show ----------------------------------------------------------------------------------------

def summary(inst: PlacementInstance) -> dict:
    n = inst.stages
    nonzero = int(np.count_nonzero(np.triu(inst.weights, 1)))
    return {"mesh": f"{inst.mesh.rows} x {inst.mesh.cols}", "faulty_dies": len(inst.mesh.faulty_dies),
            "faulty_links": len(inst.mesh.faulty_links), "stages": n,
            "tiles": {f"{lay.tile[0]}x{lay.tile[1]}": len(lay.slots)
                      for lay in (layout(inst.mesh, t) for t in inst.tiles)},
            "flow_edges": nonzero, "density": round(nonzero / max(1, n * (n - 1) / 2), 3),
            "total_volume": float(inst.flow.sum()), "mem_pairs": len(inst.pairs)}
