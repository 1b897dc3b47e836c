"""Routing plans: `{"routes": [[[r, c], ...] per flow]}` (read back by
wafopt.problems.routing.evaluate.read_routes), and the canonical routing every method can start
from: each flow on its dimension-order (XY) route.
"""

from __future__ import annotations

from wafopt.hardware.mesh import Die


def routes_plan(routes: list[list[Die]]) -> dict:
    return {"routes": [[list(d) for d in path] for path in routes]}


def xy_routes(instance) -> list[list[Die]]:
    return [instance.mesh.xy_route(f.src, f.dst) for f in instance.flows]
