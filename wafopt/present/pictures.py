"""Pictures of instances and plans (`wafopt show --png`): one function per problem.

- plan: the wafer with one coloured tile and one label per pipeline stage, link loads in GB per
  iteration, the checkpoint offloads summed per (sender stage, helper stage) as one arrow each,
  and a legend telling idle dies from offload helpers outside every stage;
- placement: the same map for a placement, with the Mem_pair flows;
- recompute: per-stage bars of model state, kept activations, offloaded activations (pooled
  DRAM: the part above the stage's own capacity, held by helpers) and, hatched, the activations
  recomputation frees, against each stage's capacity;
- mem_pair: senders, helpers and allocations (arrows as wide as the amount);
- tatp: the rings, and the ring steps longer than one hop;
- routing: link loads, every loaded link labelled with its load as a share of the peak.
A solution whose method recorded its search (the GA: best and mean objective per generation) gets
a second panel with that convergence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wafopt.present.draw import (
    Arrow,
    draw_bars,
    draw_lines,
    draw_mesh,
    mesh_figure_size,
    save_figure,
    si,
)
from wafopt.present.planner import convergence_png
from wafopt.problems import EVALUATORS, evaluate
from wafopt.problems.placement.instance import Layout

MAX_ARROWS = 24   # offload arrows of a plan picture beyond which only the largest are drawn

if TYPE_CHECKING:
    from wafopt.costmodel.scenario import Scenario
    from wafopt.problems.mem_pair.instance import MemPairInstance
    from wafopt.problems.placement.instance import PlacementInstance
    from wafopt.problems.recompute.instance import RecomputeInstance
    from wafopt.problems.routing.instance import RoutingInstance
    from wafopt.problems.tatp.instance import TatpInstance


def draw_plan(scenario: Scenario, plan: dict | None, ax) -> None:
    mesh = scenario.mesh()
    if not plan:
        draw_mesh(ax, mesh, title=f"{scenario.wafer.name}: {mesh.rows} x {mesh.cols} dies")
        return
    pipelines = plan.get("pipelines", [])
    replicas = len(pipelines)
    groups, names, stage_of, dies_of = {}, {}, {}, {}
    for r, pipeline in enumerate(pipelines):
        for i, dies in enumerate(pipeline):
            g = r * len(pipeline) + i
            names[g] = f"S{i}" if replicas == 1 else f"{r}.{i}"
            dies_of[g] = [tuple(d) for d in dies]
            for d in dies_of[g]:
                groups[d] = g if replicas == 1 else i
                stage_of[d] = g
    labels = {groups[dies_of[g][0]]: names[g] for g in dies_of} if replicas == 1 else {}
    ev = evaluate("plan", scenario, plan)
    loads = {(tuple(a), tuple(b)): v / 1e9 for a, b, v in ev.details.get("link_loads", [])}   # bytes -> GB
    if scenario.wafer.system == "cluster":   # switch ports, not mesh links: the picture shows the GPUs
        loads = {}

    def centre(stage: int, fallback):
        dies = dies_of.get(stage)
        if not dies:
            return fallback
        return (sum(r for r, _ in dies) / len(dies), sum(c for _, c in dies) / len(dies))

    offload: dict[tuple[int, int], tuple[float, tuple, tuple]] = {}
    helpers = set()
    for o in plan.get("offload", []):
        src, dst = tuple(o["sender"]), tuple(o["helper"])
        helpers.add(dst)
        key = (stage_of.get(src, -1), stage_of.get(dst, -1))
        volume = float(o.get("bytes", 1.0))
        old = offload.get(key, (0.0, src, dst))
        offload[key] = (old[0] + volume, src, dst)
    arrows = [Arrow(centre(a, src), centre(b, dst), "black", volume) for (a, b), (volume, src, dst) in offload.items()]
    what = "checkpoint offload, summed per stage pair (width: bytes)"
    if len(arrows) > MAX_ARROWS:
        what = f"the {MAX_ARROWS} largest of {len(arrows)} checkpoint offloads between stages (width: bytes)"
        arrows = sorted(arrows, key=lambda a: -a.width)[:MAX_ARROWS]
    t = ev.details.get("iteration_time_s")
    draw_mesh(ax, mesh, groups, labels, None, loads, arrows,
              title=f"{scenario.llm.name} on {scenario.wafer.name}: tp={plan.get('tp')} pp={plan.get('pp')}"
                    f" dp={plan.get('dp', 1)}" + (f", iteration {t:.3g} s" if t else ""),
              load_label="link load (GB per iteration)",
              arrow_label=what if arrows else "", helpers=helpers, die_legend=True)
    if replicas > 1:   # replicas share their stage colours; one label per tile says replica.stage
        for g, dies in dies_of.items():
            r, c = centre(g, dies[0])
            ax.text(c, -r, names[g], ha="center", va="center", fontsize=6, zorder=7,
                    bbox=dict(boxstyle="round,pad=0.1", facecolor="white", edgecolor="none", alpha=0.8))


def draw_placement(inst: PlacementInstance, plan: dict | None, ax) -> None:
    if not plan:
        draw_mesh(ax, inst.mesh, title=f"{inst.stages} stages, tiles {[list(t) for t in inst.tiles]}")
        return
    ev = EVALUATORS["placement"](inst, plan)
    if not ev.feasible:
        draw_mesh(ax, inst.mesh, title="infeasible plan: " + "; ".join(ev.violations[:1])[:80])
        return
    tile = tuple(ev.details["tile"])
    lay = Layout(inst.mesh, tile, ())
    groups, names = {}, {}
    for i, slot in enumerate(plan["assignment"]):
        for die in lay.dies(tuple(slot)):
            groups[die] = i
        names[i] = f"S{i}"
    reps = [tuple(d) for d in ev.details["representative_dies"]]
    arrows = [Arrow(reps[s], reps[h], "black", vol) for s, h, vol in inst.pairs]
    loads = {tuple(map(tuple, k)): v for k, v in ev.details.get("link_loads", [])}
    draw_mesh(ax, inst.mesh, groups=groups, group_labels=names, link_loads=loads, arrows=arrows,
              load_label="link load (flow volume units)", arrow_label="Mem_pair flow (sender -> helper)",
              title=f"tile {tile[0]}x{tile[1]}, objective {ev.objective:.6g}")


def draw_recompute(inst: RecomputeInstance, plan: dict | None, ax) -> None:
    """Per stage: state, kept activations (on the stage's DRAM, and offloaded above it in pooled
    mode), hatched the activations recomputation frees; the capacity as a line."""
    x = (plan or {}).get("x") or [[0] * len(inst.units) for _ in inst.stages]
    state, kept, offloaded, freed, caps = [], [], [], [], []
    for i, s in enumerate(inst.stages):
        row = x[i]
        keep = s.inflight * sum(u.mem * (s.layers - v) for u, v in zip(inst.units, row))
        free = s.inflight * sum(u.mem * v for u, v in zip(inst.units, row))
        over = max(0.0, s.state + keep - s.capacity) if inst.mode == "pooled" else 0.0
        state.append(s.state)
        kept.append(keep - over)
        offloaded.append(over)
        freed.append(free)
        caps.append(s.capacity)
    names = [f"S{i}" for i in range(len(inst.stages))]
    what = "plan" if plan else "no recomputation"
    draw_bars(ax, names, [("model state", state, "#7f7f7f", ""), ("activations kept", kept, "#1f77b4", ""),
                          ("activations offloaded (pooled DRAM)", offloaded, "#ff7f0e", ""),
                          ("recomputed (not kept)", freed, "white", "///")],
              capacity=caps, capacity_label="DRAM capacity", ylabel="memory (instance units)",
              title=f"recompute ({inst.mode} DRAM, {inst.microbatches} micro-batches): memory per stage, {what}")


def draw_mem_pair(inst: MemPairInstance, plan: dict | None, ax) -> None:
    groups = {s.die: 0 for s in inst.senders}
    groups.update({h.die: 1 for h in inst.helpers})
    small = max(inst.mesh.rows, inst.mesh.cols) <= 12
    labels = {}
    if small:
        labels = {s.die: f"S{s.overflow:g}" for s in inst.senders}
        labels.update({h.die: f"H{h.spare:g}" for h in inst.helpers})
    arrows = []
    for a in (plan or {}).get("allocations", []) or []:
        try:
            arrows.append(Arrow(tuple(a["sender"]), tuple(a["helper"]), "black", float(a.get("amount", 1.0))))
        except (KeyError, TypeError, ValueError):
            continue
    draw_mesh(ax, inst.mesh, groups=groups, labels=labels, arrows=arrows, regions=False,
              arrow_label="allocation (sender -> helper; width: amount)" if arrows else "",
              title=f"Mem_pair: {len(inst.senders)} senders (dark" + (", S<overflow>" if small else "")
                    + f"), {len(inst.helpers)} helpers (light" + (", H<spare>" if small else "") + ")")


def draw_tatp(instance: TatpInstance, plan: dict | None, ax) -> None:
    groups, names, arrows, title = {}, {}, [], f"TATP N={instance.group_size}, G={instance.groups}"
    if plan:
        ev = EVALUATORS["tatp"](instance, plan)
        for g, ring in enumerate(plan.get("groups", [])):
            ring = [tuple(d) for d in ring]
            names[g] = str(g)
            for k, die in enumerate(ring):
                groups[die] = g
                nxt = ring[(k + 1) % len(ring)]
                if abs(die[0] - nxt[0]) + abs(die[1] - nxt[1]) > 1:
                    arrows.append(Arrow(die, nxt, "red"))
        if ev.feasible:
            title += (f": cost {ev.objective:g}, {ev.details['physical_rings']} physical rings, "
                      f"tail {ev.details['tail_hops']} hops")
    draw_mesh(ax, instance.mesh, groups=groups, group_labels=names, arrows=arrows, title=title,
              arrow_label="ring step longer than one hop" if arrows else "")


def draw_routing(instance: RoutingInstance, plan: dict | None, ax) -> None:
    mesh = instance.mesh
    title = f"routing: {len(instance.flows)} flows"
    loads = None
    if plan:
        ev = EVALUATORS["routing"](instance, plan)
        if ev.feasible:
            loads = mesh.link_loads(zip(plan["routes"], (f.volume for f in instance.flows)))
            peak = max(loads.values(), default=0.0) or 1.0
            title += (f", peak link load {si(peak)} (objective {ev.objective:.4g})\nlabels: % of the peak "
                      f"(heavier direction)")
            annotate = (lambda load: f"{100 * load / peak:.0f}") if max(mesh.rows, mesh.cols) <= 12 else None
            draw_mesh(ax, mesh, link_loads=loads, title=title, load_label="link load (flow volume units)",
                      annotate_loads=annotate)
            return
        title += " (infeasible plan)"
    ends = {}
    for fl in instance.flows:          # without a plan: where traffic starts and ends
        ends[fl.src] = 0 if ends.get(fl.src, 0) == 0 else 2
        ends[fl.dst] = 1 if ends.get(fl.dst, 1) == 1 else 2
    draw_mesh(ax, mesh, groups=ends, regions=False,
              title=title + "\n(blue: sources, light blue: destinations, orange: both)")


DRAW = {
    "plan": draw_plan,
    "placement": draw_placement,
    "recompute": draw_recompute,
    "mem_pair": draw_mem_pair,
    "tatp": draw_tatp,
    "routing": draw_routing,
}


def generations(stats: dict | None) -> list[tuple[str, dict]]:
    """The (label, {"best": [...], "mean": [...]}) a method recorded per generation, per tile
    shape or for the whole run."""
    stats = stats or {}
    found = []
    if isinstance(stats.get("per_generation"), dict):
        found.append(("", stats["per_generation"]))
    for tile, layout_stats in (stats.get("layouts") or {}).items():
        if isinstance(layout_stats, dict) and isinstance(layout_stats.get("per_generation"), dict):
            found.append((f"tile {tile}", layout_stats["per_generation"]))
    return [(label, g) for label, g in found if g.get("best")]


def save_picture(problem: str, instance, plan: dict | None, stats: dict | None, path: str,
                 caption: str = "") -> None:
    """The picture of an instance (plan None) or a plan; with a GA's record, its convergence too.
    `caption` (the instance's name, and the method for a plan) heads the figure."""
    draw = DRAW[problem]
    runs = generations(stats)
    if problem == "recompute":
        size = (max(6.0, 0.45 * len(instance.stages) + 3.0), 4.2)
    else:
        size = mesh_figure_size(instance.mesh() if problem == "plan" else instance.mesh)
    if not runs:
        save_figure(lambda ax: draw(instance, plan, ax), path, size, caption=caption)
        return

    def both(axes):
        draw(instance, plan, axes[0])
        colours = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
        series = []
        for k, (label, g) in enumerate(runs):
            prefix = f"{label}: " if label and len(runs) > 1 else ""
            series.append((f"{prefix}best", g["best"], colours[k % 4], "-"))
            if g.get("mean"):
                series.append((f"{prefix}population mean", g["mean"], colours[k % 4], "--"))
        draw_lines(axes[1], series, "generation", "objective", "GA convergence")

    save_figure(both, path, (size[0] + 5.0, max(size[1], 4.0)), panels=2, widths=[size[0], 4.5], caption=caption)


def draw_solution(problem: str, instance, plan: dict | None, stats: dict | None, path: str, title: str = "") -> None:
    """A solved plan scenario: the convergence of its plan and bound; any other solution: its picture."""
    if problem == "plan" and (stats or {}).get("convergence"):
        convergence_png(stats, path, title)
    else:
        save_picture(problem, instance, plan, stats, path, title)
