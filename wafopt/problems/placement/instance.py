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


def orbit_representatives(symmetries: list[np.ndarray], m: int) -> list[int]:
    """One slot per orbit of the symmetry group (the smallest index)."""
    return sorted({min(int(g[k]) for g in symmetries) for k in range(m)})


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
    # the plan problem's (a scenario's): only a derived kernel needs it
    from wafopt.problems.plan.layouts import tile_shapes

    if scenario.parallel is None:
        raise InstanceError("the scenario has no parallel: {tp, pp, dp}; placement needs tp and pp", "parallel")
    workload = scenario.workload()
    mesh = scenario.wafer.mesh()
    pp, dp = int(workload.pp), int(workload.dp)
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
