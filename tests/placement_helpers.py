"""Placement test helpers shared by the placement and branch-and-bound tests: tiny instances (a
hypothesis strategy among them), and brute force written from the problem statement (not from
the solver code)."""

from __future__ import annotations

from itertools import permutations

import numpy as np
from hypothesis import strategies as st

from wafopt.core.errors import InstanceError
from wafopt.problems import evaluate, parse_instance

TOL = 1e-6


def loaded(**fields):
    return parse_instance({"problem": "placement", **fields}, "test.yaml")


def chain(n, volumes=None):
    volumes = volumes or [float(k + 2) for k in range(n - 1)]
    return [[i, i + 1, v] for i, v in enumerate(volumes)] + [[i + 1, i, v] for i, v in enumerate(volumes)]


def usable_slots(mesh, tile):
    h, w = tile
    return [(a, b) for a in range(mesh.rows // h) for b in range(mesh.cols // w)
            if all(mesh.is_healthy((a * h + i, b * w + j)) for i in range(h) for j in range(w))]


def plans(inst):
    """Every plan of the instance (all tile shapes, all injective assignments to usable slots)."""
    for tile in inst.tiles:
        for assign in permutations(usable_slots(inst.mesh, tile), inst.stages):
            yield {"tile": list(tile), "assignment": [list(s) for s in assign]}


def brute_force(inst, full: bool | None = None) -> float:
    """Optimum over all plans. full=True: every plan through the evaluator (Eq. 2 with routing
    conflicts); full=False: the base objective (flows and Mem_pair volumes x hops between
    representative dies) in numpy; None: full exactly when the instance has Mem_pairs."""
    if full is None:
        full = bool(inst.pairs)
    if full:
        return min((evaluate("placement", inst, plan).objective for plan in plans(inst)), default=np.inf)
    n, best = inst.stages, np.inf
    V = inst.flow.copy()
    for s, h, v in inst.pairs:
        V[s, h] += v
    i, j = np.nonzero(V)
    for tile in inst.tiles:
        slots = usable_slots(inst.mesh, tile)
        if len(slots) < n:
            continue
        reps = [(a * tile[0] + (tile[0] - 1) // 2, b * tile[1] + (tile[1] - 1) // 2) for a, b in slots]
        D = np.array([[inst.mesh.distance(p, q) for q in reps] for p in reps], dtype=float)
        P = np.array(list(permutations(range(len(slots)), n)))
        best = min(best, float((D[P[:, i], P[:, j]] @ V[i, j]).min()))
    return best


@st.composite
def integer_instances(draw):
    """3-5 stages with integer flows (and Mem_pair volumes) on a small mesh, a faulty die or none,
    one or two tile shapes."""
    rows, cols = draw(st.sampled_from([(2, 3), (3, 3), (2, 4), (3, 4)]))
    tiles = draw(st.sampled_from([[[1, 1]], [[1, 1], [1, 2]], [[1, 2], [2, 1]]]))
    mesh = {"rows": rows, "cols": cols}
    if draw(st.booleans()):
        mesh["faulty_dies"] = [[draw(st.integers(0, rows - 1)), draw(st.integers(0, cols - 1))]]
    n = draw(st.integers(3, 5))
    flows = [[i, j, float(draw(st.integers(0, 9)))] for i in range(n) for j in range(n) if i != j]
    flows = [f for f in flows if f[2] > 0] or [[0, 1, 1.0]]
    pairs = [[0, n - 1, float(draw(st.integers(1, 4)))]] if draw(st.booleans()) else []
    try:
        return loaded(mesh=mesh, tile=tiles, stages=n, flows=flows, pairs=pairs).instance
    except InstanceError:      # the stages do not fit the shapes: the whole healthy mesh then
        return loaded(mesh={"rows": rows, "cols": cols}, tile=[1, 1], stages=n, flows=flows, pairs=pairs).instance


def best_completion(space, stages: list[int], slots: list[int]) -> float:
    """The least base objective over the assignments of a TileSpace that keep stages -> slots
    (brute force)."""
    free_stages = [i for i in range(space.n) if i not in stages]
    free_slots = [k for k in range(space.m) if k not in slots]
    rows = []
    for chosen in permutations(free_slots, len(free_stages)):
        row = np.empty(space.n, dtype=int)
        row[stages], row[free_stages] = slots, chosen
        rows.append(row)
    return float(space.fit.base(np.array(rows)).min())
