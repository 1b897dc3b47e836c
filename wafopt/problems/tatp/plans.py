"""TATP plans: `{"groups": [[[r, c] x N in cyclic order] x G]}` (read back by
wafopt.problems.tatp.evaluate.read_groups), and the canonical mapping every method can start from.
"""

from __future__ import annotations

from wafopt.hardware.mesh import Die, Mesh


def groups_plan(groups: list[list[Die]]) -> dict:
    return {"groups": [[list(d) for d in ring] for ring in groups]}


def total_cost(mesh: Mesh, groups: list[list[Die]]) -> int:
    """The objective: the sum of the rings' costs (`Mesh.ring_cost`)."""
    return sum(mesh.ring_cost(ring) for ring in groups)


def snake_groups(mesh: Mesh, N: int, G: int) -> list[list[Die]]:
    """TEMP's sequential mapping (SMap): the serpentine order of the healthy dies cut into G
    consecutive chunks of N, each kept in that order."""
    order = [d for d in mesh.boustrophedon() if mesh.is_healthy(d)]
    return [order[g * N:(g + 1) * N] for g in range(G)]
