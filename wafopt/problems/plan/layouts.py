"""Canonical layouts of a scenario: aligned tiles, ring order inside a tile, the serpentine stage
order (WATOS Fig. 11a), and the default placement kernels are derived on.

Pure constructions, no search: kernel derivation (`from_scenario`) and the Megatron baseline
both use them, so a derived kernel never depends on a solver or on machine speed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wafopt.core.errors import InstanceError
from wafopt.hardware.mesh import Die, Mesh

if TYPE_CHECKING:
    from wafopt.costmodel.scenario import Parallel, Scenario


def tile_shapes(tp: int, mesh: Mesh) -> list[tuple[int, int]]:
    """Every factorization h * w = tp with h <= rows and w <= cols."""
    return [(h, tp // h) for h in range(1, tp + 1) if tp % h == 0 and h <= mesh.rows and tp // h <= mesh.cols]


def serpentine_slots(mesh: Mesh, h: int, w: int) -> list[tuple[int, int]]:
    """Aligned h x w tiles without a faulty die, in boustrophedon order over the tile grid."""
    slots = []
    for a in range(mesh.rows // h):
        cols = range(mesh.cols // w)
        for b in (cols if a % 2 == 0 else reversed(cols)):
            dies = tile_dies((a, b), h, w)
            if all(mesh.is_healthy(d) for d in dies):
                slots.append((a, b))
    return slots


def tile_dies(slot: tuple[int, int], h: int, w: int) -> list[Die]:
    """Dies of a tile in ring order: a cycle through the tile when it has one, else a line
    interleaved so no ring step exceeds 2 hops (WaferLLM's INTERLEAVE, section 5.2)."""
    r0, c0 = slot[0] * h, slot[1] * w
    if h == 1 or w == 1:
        line = [(r0 + i, c0) for i in range(h)] if w == 1 else [(r0, c0 + j) for j in range(w)]
        return line[0::2] + line[1::2][::-1]
    if h % 2 == 0:  # down column c0, then snake the remaining columns back up
        ring = [(r0 + i, c0) for i in range(h)]
        for i in range(h - 1, -1, -1):
            cols = range(c0 + 1, c0 + w) if (h - 1 - i) % 2 == 0 else range(c0 + w - 1, c0, -1)
            ring += [(r0 + i, c) for c in cols]
        return ring
    return _ring_along_first_row(r0, c0, h, w)  # h odd, so w is even


def _ring_along_first_row(r0: int, c0: int, h: int, w: int) -> list[Die]:
    ring = [(r0, c0 + j) for j in range(w)]
    for j in range(w - 1, -1, -1):
        rows = range(r0 + 1, r0 + h) if (w - 1 - j) % 2 == 0 else range(r0 + h - 1, r0, -1)
        ring += [(r, c0 + j) for r in rows]
    return ring


def place_serpentine(mesh: Mesh, par: Parallel, h: int, w: int) -> list[list[list[Die]]] | None:
    slots = serpentine_slots(mesh, h, w)
    if len(slots) < par.pp * par.dp:
        return None
    it = iter(slots)
    return [[tile_dies(next(it), h, w) for _ in range(par.pp)] for _ in range(par.dp)]


def serpentine_plans(scenario: Scenario):
    """(tile shape, plan or None) for every tile shape of tp: serpentine placement, nothing else."""
    par = scenario.parallel
    mesh = scenario.mesh()
    for h, w in tile_shapes(par.tp, mesh):
        pipelines = place_serpentine(mesh, par, h, w)
        yield (h, w), None if pipelines is None else {
            "tp": par.tp, "pp": par.pp, "dp": par.dp, "tile": [h, w],
            "pipelines": [[[list(d) for d in stage] for stage in pipe] for pipe in pipelines],
            **scenario.plan_fields()}


def default_placement(scenario: Scenario) -> dict:
    """The placement kernels are derived on: the serpentine plan of the tile shape with the
    shortest iteration time without recomputation (ties: first shape in tile_shapes order)."""
    # heavy (the cost model): tile_shapes serves placement instances, which never need it
    from wafopt.problems.plan.evaluate import evaluate

    par = scenario.parallel
    if par is None:
        raise InstanceError("this needs a fixed layout: add parallel: {tp, pp, dp}", "parallel")
    best = None
    for _, plan in serpentine_plans(scenario):
        if plan is None:
            continue
        ev = evaluate(scenario, plan)  # time without recomputation (memory may not fit)
        if ev.objective is not None and (best is None or ev.objective < best[0]):
            best = (ev.objective, plan)
    if best is None:
        raise InstanceError(f"no {par.tp}-die tile shape leaves {par.pp * par.dp} healthy tiles", "parallel")
    return best[1]
