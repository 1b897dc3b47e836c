"""Pictures of instances and plans, one drawing function per problem (used by `wafopt show --png`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wafopt.present.draw import draw_mesh

if TYPE_CHECKING:
    from wafopt.problems.mem_pair.instance import MemPairInstance
    from wafopt.problems.placement.instance import PlacementInstance
    from wafopt.problems.plan.instance import Scenario
    from wafopt.problems.routing.instance import RoutingInstance
    from wafopt.problems.tatp.instance import TatpInstance


def draw_plan(scenario: Scenario, plan: dict | None, ax) -> None:
    mesh = scenario.mesh()
    if not plan:
        draw_mesh(ax, mesh, title=f"{scenario.wafer.name}: {mesh.rows} x {mesh.cols} dies")
        return
    from wafopt.problems import evaluate

    groups, labels = {}, {}
    for r, pipeline in enumerate(plan.get("pipelines", [])):
        for i, dies in enumerate(pipeline):
            for d in dies:
                groups[tuple(d)] = i
                labels[tuple(d)] = f"S{i}" if len(plan["pipelines"]) == 1 else f"{r}.{i}"
    ev = evaluate("plan", scenario, plan)
    loads = {(tuple(a), tuple(b)): v for a, b, v in ev.details.get("link_loads", [])}
    arrows = [(tuple(o["sender"]), tuple(o["helper"]), "black") for o in plan.get("offload", [])]
    t = ev.details.get("iteration_time_s")
    draw_mesh(ax, mesh, groups, labels, loads, arrows,
              title=f"{scenario.llm.name} on {scenario.wafer.name}: tp={plan.get('tp')} pp={plan.get('pp')}"
                    + (f", iteration {t:.3g} s" if t else ""))


def draw_placement(inst: PlacementInstance, plan: dict | None, ax) -> None:
    if not plan:
        draw_mesh(ax, inst.mesh, title=f"{inst.stages} stages, tiles {inst.tiles}")
        return
    tile = tuple(plan["tile"])
    lay = layout(inst.mesh, tile)
    groups, labels, arrows = {}, {}, []
    for i, slot in enumerate(plan["assignment"]):
        for die in lay.dies(tuple(slot)):
            groups[die] = i
        labels[lay.representative(tuple(slot))] = f"S{i}"
    for s, h, _ in inst.pairs:
        arrows.append((lay.representative(tuple(plan["assignment"][s])),
                       lay.representative(tuple(plan["assignment"][h])), "black"))
    from wafopt.problems.placement.evaluate import evaluate

    ev = evaluate(inst, plan)
    loads = {tuple(map(tuple, k)): v for k, v in ev.details.get("link_loads", [])} if ev.feasible else None
    draw_mesh(ax, inst.mesh, groups=groups, labels=labels, link_loads=loads, arrows=arrows,
              load_label="link load (flow volume units)", arrow_label="Mem_pair flow (sender -> helper)",
              title=f"tile {tile[0]}x{tile[1]}, objective {ev.objective:.6g}" if ev.feasible else "infeasible plan")


def draw_mem_pair(inst: MemPairInstance, plan: dict | None, ax) -> None:
    groups = {s.die: 0 for s in inst.senders}
    groups.update({h.die: 1 for h in inst.helpers})
    labels = {s.die: f"S{s.overflow:g}" for s in inst.senders}
    labels.update({h.die: f"H{h.spare:g}" for h in inst.helpers})
    arrows = []
    for a in (plan or {}).get("allocations", []) or []:
        try:
            arrows.append((tuple(a["sender"]), tuple(a["helper"]), "black"))
        except (KeyError, TypeError):
            continue
    draw_mesh(ax, inst.mesh, groups=groups, labels=labels, arrows=arrows, arrow_label="allocation (sender -> helper)",
              title=f"Mem_pair: {len(inst.senders)} senders (S<overflow>), "
                    f"{len(inst.helpers)} helpers (H<spare>)")


def draw_tatp(instance: TatpInstance, plan: dict | None, ax) -> None:
    groups, labels, arrows, title = {}, {}, [], f"TATP N={instance.group_size}, G={instance.groups}"
    if plan:
        from wafopt.problems.tatp.evaluate import evaluate

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


def draw_routing(instance: RoutingInstance, plan: dict | None, ax) -> None:
    loads, title = None, f"routing: {len(instance.flows)} flows"
    labels = {}
    for fl in instance.flows:
        labels[fl.src] = "s"
        labels.setdefault(fl.dst, "d")
    if plan:
        from wafopt.problems.routing.evaluate import evaluate

        ev = evaluate(instance, plan)
        if ev.feasible:
            loads = instance.mesh.link_loads(zip(plan["routes"], (f.volume for f in instance.flows)))
            title += f", peak load / bandwidth {ev.objective:.4g}"
    draw_mesh(ax, instance.mesh, labels=labels, link_loads=loads, title=title + " (s: source, d: destination)",
              load_label="link load (flow volume units)")


DRAW = {
    "plan": draw_plan,
    "placement": draw_placement,
    "mem_pair": draw_mem_pair,
    "tatp": draw_tatp,
    "routing": draw_routing,
}
