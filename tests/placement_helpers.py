"""Placement test helpers shared by test_placement.py and test_bnb.py: tiny instances, and brute
force written from the problem statement (not from the solver code)."""

from __future__ import annotations

from itertools import permutations

import numpy as np

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
