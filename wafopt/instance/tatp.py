"""TATP group mapping (issue 5): partition healthy dies into G rings of N dies.

Instance fields: `mesh` (see wafopt.mesh.Mesh.from_spec), `group_size` N >= 2, `groups` G >= 1.
A plan is `{"groups": [[[r, c] x N in cyclic order] x G]}`; the evaluator is wafopt.evaluate.tatp.
"""

from __future__ import annotations

from dataclasses import dataclass

from wafopt.errors import InstanceError
from wafopt.instance.fields import Fields
from wafopt.mesh import Mesh

METHODS = {
    "cpsat": "wafopt.models.tatp:solve_cpsat",
    "milp": "wafopt.models.tatp:solve_milp",
    "tiles": "wafopt.heuristics.tatp:tiles",
    "snake": "wafopt.heuristics.tatp:snake",
    "ga": "wafopt.heuristics.tatp:ga",
}
DEFAULT_METHODS = ["snake", "tiles", "ga", "cpsat", "milp"]
OBJECTIVE = "sum of ring costs (hops)"


@dataclass(frozen=True)
class TatpInstance:
    mesh: Mesh
    group_size: int   # N, dies per TATP ring
    groups: int       # G, number of rings

    @property
    def ring_lower_bound(self) -> int:
        """Cheapest possible ring: 1 hop, or 2 for odd N >= 3 (a grid graph has no odd cycle)."""
        return 2 if self.group_size % 2 == 1 and self.group_size >= 3 else 1

    @property
    def lower_bound(self) -> int:
        return self.groups * self.ring_lower_bound


def make(mesh: Mesh, group_size: int, groups: int, where: str = "") -> TatpInstance:
    """Validated constructor shared by parse and from_scenario."""
    prefix = f"{where}." if where else ""
    if group_size < 2:
        raise InstanceError(f"must be at least 2 (a ring needs two dies), got {group_size}",
                            f"{prefix}group_size")
    healthy = len(mesh.healthy_dies)
    if groups * group_size > healthy:
        raise InstanceError(f"{groups} groups x {group_size} dies = {groups * group_size} dies, but the "
                            f"mesh has only {healthy} healthy dies", f"{prefix}groups")
    mesh.require_connected(f"{prefix}mesh")
    return TatpInstance(mesh, group_size, groups)


def parse(f: Fields) -> TatpInstance:
    mesh = Mesh.from_spec(f.raw("mesh"), f.path("mesh"))
    return make(mesh, f.integer("group_size", positive=True), f.integer("groups", positive=True), f.where)


def from_scenario(scenario) -> TatpInstance:
    """TATP degree N = tp; one ring per TP group of every stage and replica (G = pp * dp)."""
    par = scenario.parallel
    if par is None:
        raise InstanceError("the scenario has no `parallel: {tp, pp, dp}`; the TATP mapping needs the "
                            "TATP degree tp and the number of groups", "parallel")
    return make(scenario.wafer.mesh(), par.tp, par.pp * par.dp, "parallel")


def summary(instance: TatpInstance) -> dict:
    m = instance.mesh
    return {"mesh": f"{m.rows} x {m.cols}", "faulty_dies": sorted(map(list, m.faulty_dies)),
            "faulty_links": len(m.faulty_links), "healthy_dies": len(m.healthy_dies),
            "group_size": instance.group_size, "groups": instance.groups,
            "unused_dies": len(m.healthy_dies) - instance.group_size * instance.groups,
            "lower_bound": instance.lower_bound}


def draw(instance: TatpInstance, plan: dict | None, ax) -> None:
    from wafopt.draw import draw_mesh

    groups, labels, arrows, title = {}, {}, [], f"TATP N={instance.group_size}, G={instance.groups}"
    if plan:
        from wafopt.evaluate.tatp import evaluate

        ev = evaluate(instance, plan)
        for g, ring in enumerate(plan.get("groups", [])):
            ring = [tuple(d) for d in ring]
            for k, die in enumerate(ring):
                groups[die], labels[die] = g, f"{g}.{k}"
                nxt = ring[(k + 1) % len(ring)]
                if abs(die[0] - nxt[0]) + abs(die[1] - nxt[1]) > 1:
                    arrows.append((die, nxt, "red"))
        if ev.feasible:
            title += (f": cost {ev.objective:g}, {ev.details['physical_rings']} physical rings, "
                      f"tail {ev.details['tail_hops']} hops")
    draw_mesh(ax, instance.mesh, groups=groups, labels=labels, arrows=arrows, title=title,
              arrow_label="ring step longer than one hop")
