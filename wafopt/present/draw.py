"""Drawing helpers: the mesh with groups of dies, link loads and arrows; bar and line panels.

Die (r, c) is drawn at x = c, y = -r, so row 0 is on top as in the papers' figures. Sizes of
text and lines shrink with the mesh, so a 16 x 16 wafer stays as readable as an 8 x 8 one: a group
of dies (a pipeline stage's tile, a TATP ring) is one coloured region with one label, not a label
on every die.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Mapping, Sequence

import numpy as np

from wafopt.core.errors import InstanceError
from wafopt.core.files import can_create
from wafopt.hardware.mesh import Die, Link, Mesh

DIE = 0.72              # side of a die square (the mesh pitch is 1)
LIGHT_LOAD = 0.02       # loads below this share of the peak are drawn as unloaded links
# Groups (stages, rings) take the qualitative tab20 colours without its two greys; link loads a
# sequential grey-to-black scale, so no load shade can be mistaken for a group's colour.
GROUP_COLOURS = [c for k, c in enumerate(
    ["#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd", "#c5b0d5",
     "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5"])
    if k not in (14, 15)]
LOAD_SHADES = ("#b0b0b0", "#000000")   # lightest and heaviest loaded link
HELPER_FACE, HELPER_HATCH = "#eeeeee", "////"   # a die outside every group that holds offloaded checkpoints


def text_scale(mesh: Mesh) -> float:
    """1 up to 8 x 8 dies, then smaller in proportion to the longer side (at least 0.45)."""
    return max(0.45, min(1.0, 8.0 / max(mesh.rows, mesh.cols)))


def mesh_figure_size(mesh: Mesh, extra: float = 0.0) -> tuple[float, float]:
    """Inches for a mesh drawing (plus `extra` inches of width for a colour bar or a panel)."""
    side = 0.62 if max(mesh.rows, mesh.cols) <= 10 else 0.5
    return (max(5.0, mesh.cols * side + 2.2 + extra), max(4.0, mesh.rows * side + 1.8))


def si(value: float) -> str:
    """A compact number: 3 significant digits with k, M, G, T or m, u, n."""
    if value == 0:
        return "0"
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"),
                           (1e-6, "u"), (1e-9, "n")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.2g}"


@dataclass
class Arrow:
    src: Die
    dst: Die
    colour: str = "black"
    width: float = 1.0       # relative width (1 = the thinnest)


def group_colour(g: int) -> str:
    return GROUP_COLOURS[g % len(GROUP_COLOURS)]


def draw_mesh(ax, mesh: Mesh, groups: Mapping[Die, int] | None = None,
              group_labels: Mapping[int, str] | None = None,
              labels: Mapping[Die, str] | None = None,
              link_loads: Mapping[Link, float] | None = None,
              arrows: Sequence[Arrow] = (), title: str = "",
              load_label: str = "link load", arrow_label: str = "",
              annotate_loads: Callable[[float], str] | None = None, regions: bool = True,
              helpers: Collection[Die] = (), die_legend: bool = False) -> None:
    """Draw `mesh` on a matplotlib axis.

    groups: die -> group index, coloured from a qualitative palette (GROUP_COLOURS); the dies of a group share a pale
    region behind them (unless not `regions`) and, from group_labels, one label at its centre. labels: die -> short text on
    one die (for small meshes). link_loads: directed link -> load; the two directions of a link
    are drawn side by side, width and shade growing with load / peak, with a colour bar labelled
    `load_label`; annotate_loads(load) -> text labels each loaded link with its heavier direction.
    arrows: curved arrows between die centres, width in proportion; `arrow_label` names them.
    helpers: dies outside every group that hold offloaded data, hatched; die_legend: the legend
    also says which dies are idle and which are such helpers.
    """
    from matplotlib.lines import (
        Line2D,  # matplotlib loads only when a picture is drawn (start-up time)
    )
    from matplotlib.patches import Patch, Rectangle

    groups = groups or {}
    scale = text_scale(mesh)
    # physical links (faulty ones dashed red)
    for r in range(mesh.rows):
        for c in range(mesh.cols):
            for d in ((r, c + 1), (r + 1, c)):
                if mesh.contains(d):
                    ok = mesh.link_ok((r, c), d)
                    ax.plot([c, d[1]], [-r, -d[0]], color="#cccccc" if ok else "red",
                            linestyle="-" if ok else "--", linewidth=0.8 * scale, zorder=1)
    if link_loads:
        _draw_loads(ax, mesh, link_loads, load_label, annotate_loads, scale)
    # groups: a pale region behind their dies (cells of one group merge), one label at the centre
    members: dict[int, list[Die]] = {}
    for die, g in groups.items():
        members.setdefault(g, []).append(die)
        if regions:
            ax.add_patch(Rectangle((die[1] - 0.5, -die[0] - 0.5), 1.0, 1.0, facecolor=group_colour(g),
                                   edgecolor="none", alpha=0.3, zorder=0.5))
    helpers = set(helpers) - set(groups)
    idle = 0
    for r in range(mesh.rows):
        for c in range(mesh.cols):
            die = (r, c)
            hatch = None
            if die in mesh.faulty_dies:
                face, edge = "#444444", "red"
            elif die in groups:
                face, edge = group_colour(groups[die]), "#555555"
            elif die in helpers:
                face, edge, hatch = HELPER_FACE, "#555555", HELPER_HATCH
            else:
                face, edge = "white", "#999999"
                idle += 1
            ax.add_patch(Rectangle((c - DIE / 2, -r - DIE / 2), DIE, DIE, facecolor=face, edgecolor=edge,
                                   hatch=hatch, linewidth=0.6 * scale, zorder=3))
            if die in mesh.faulty_dies:
                h = DIE / 2 * 0.9
                ax.plot([c - h, c + h], [-r - h, -r + h], color="red", linewidth=scale, zorder=4)
                ax.plot([c - h, c + h], [-r + h, -r - h], color="red", linewidth=scale, zorder=4)
            elif labels and die in labels:
                ax.text(c, -r, labels[die], ha="center", va="center", fontsize=7 * scale, zorder=5)
    for g, text in (group_labels or {}).items():
        dies = members.get(g)
        if dies:
            x = sum(c for _, c in dies) / len(dies)
            y = -sum(r for r, _ in dies) / len(dies)
            ax.text(x, y, text, ha="center", va="center", fontsize=8 * scale, fontweight="bold", zorder=7,
                    bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.8))
    handles = []
    if arrows:
        heaviest = max(a.width for a in arrows) or 1.0
        for a in arrows:
            # below the group labels, and shortened at both ends so a label at a group's centre stays readable
            ax.annotate("", xy=(a.dst[1], -a.dst[0]), xytext=(a.src[1], -a.src[0]), zorder=6,
                        arrowprops=dict(arrowstyle="-|>", color=a.colour, alpha=0.6,
                                        linewidth=scale * (0.7 + 2.3 * a.width / heaviest),
                                        mutation_scale=8 * scale, shrinkA=14 * scale, shrinkB=9 * scale,
                                        connectionstyle="arc3,rad=0.18"))
        if arrow_label:
            handles.append(Line2D([], [], color=arrows[0].colour, linewidth=1.2, label=arrow_label))
    if die_legend:
        if idle:
            handles.append(Patch(facecolor="white", edgecolor="#999999", label="idle die (no stage)"))
        if helpers:
            handles.append(Patch(facecolor=HELPER_FACE, edgecolor="#555555", hatch=HELPER_HATCH,
                                 label="offload helper die (no stage; holds checkpoints)"))
    if handles:
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.06), fontsize=7, frameon=False,
                  ncols=min(len(handles), 2))
    ax.set_xlim(-0.7, mesh.cols - 0.3)
    ax.set_ylim(-mesh.rows + 0.3, 0.7)
    ax.set_aspect("equal")
    step = 1 if max(mesh.rows, mesh.cols) <= 16 else 2
    ax.set_xticks(range(0, mesh.cols, step))
    ax.set_yticks([-r for r in range(0, mesh.rows, step)], [str(r) for r in range(0, mesh.rows, step)])
    ax.tick_params(length=0, labelsize=7 * max(scale, 0.7))
    ax.set_xlabel("column", fontsize=8)
    ax.set_ylabel("row", fontsize=8)
    for side in ax.spines.values():
        side.set_visible(False)
    if title:
        ax.set_title(title, fontsize=9)


def _draw_loads(ax, mesh: Mesh, link_loads: Mapping[Link, float], load_label: str,
                annotate: Callable[[float], str] | None, scale: float) -> None:
    from matplotlib.cm import ScalarMappable  # matplotlib: start-up time, as above
    from matplotlib.colors import LinearSegmentedColormap, Normalize

    peak = max(link_loads.values(), default=0.0) or 1.0
    shades = LinearSegmentedColormap.from_list("load", LOAD_SHADES)
    ax.figure.colorbar(ScalarMappable(Normalize(0.0, peak), shades), ax=ax, shrink=0.6, pad=0.02,
                       label=load_label)
    heavier: dict[frozenset, tuple[float, Link]] = {}
    for (a, b), load in link_loads.items():
        if load <= LIGHT_LOAD * peak:
            continue
        dx, dy = b[1] - a[1], -(b[0] - a[0])
        ox, oy = -dy * 0.09, dx * 0.09            # the two directions either side of the link
        share = load / peak
        ax.plot([a[1] + ox, b[1] + ox], [-a[0] + oy, -b[0] + oy], color=shades(share),
                linewidth=scale * (0.6 + 4.0 * share), solid_capstyle="butt", zorder=2)
        key = frozenset((a, b))
        if load > heavier.get(key, (0.0, None))[0]:
            heavier[key] = (load, (a, b))
    if annotate is not None:
        for load, (a, b) in heavier.values():
            x, y = (a[1] + b[1]) / 2, -(a[0] + b[0]) / 2
            vertical = a[1] == b[1]
            ax.text(x, y, annotate(load), ha="center", va="center", fontsize=6 * scale, zorder=8,
                    rotation=90 if vertical else 0,
                    bbox=dict(boxstyle="round,pad=0.1", facecolor="white", edgecolor="none", alpha=0.85))


def draw_bars(ax, names: Sequence[str], stacks: Sequence[tuple[str, Sequence[float], str, str]],
              capacity: Sequence[float] | None = None, capacity_label: str = "capacity",
              ylabel: str = "", title: str = "") -> None:
    """Stacked bars, one per name. stacks: (label, values, colour, hatch) bottom to top; capacity:
    one marker line per bar."""

    x = np.arange(len(names))
    bottom = np.zeros(len(names))
    width = 0.7
    for label, values, colour, hatch in stacks:
        values = np.asarray(values, dtype=float)
        if np.any(values > 0):
            ax.bar(x, values, width, bottom=bottom, color=colour, hatch=hatch, edgecolor="#333333",
                   linewidth=0.4, label=label)
        bottom = bottom + values
    if capacity is not None:
        for k, cap in enumerate(capacity):
            ax.plot([k - width / 2 - 0.08, k + width / 2 + 0.08], [cap, cap], color="black", linewidth=1.6,
                    label=capacity_label if k == 0 else None, zorder=5)
    ax.set_xticks(x, names, fontsize=7 if len(names) <= 24 else 5, rotation=0 if len(names) <= 24 else 90)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, frameon=False, loc="upper right", ncol=2)
    ax.set_ylim(0, max(float(bottom.max(initial=0.0)), max(capacity or [0.0])) * 1.25 or 1.0)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title, fontsize=9)


def draw_lines(ax, series: Sequence[tuple[str, Sequence[float], str, str]], xlabel: str, ylabel: str,
               title: str = "") -> None:
    """Lines over their index (e.g. best and mean objective per generation): (label, values,
    colour, line style)."""
    for label, values, colour, style in series:
        ax.plot(range(len(values)), values, color=colour, linestyle=style, linewidth=1.2, label=label)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, frameon=False)
    ax.grid(alpha=0.3)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title, fontsize=9)


def check_picture_path(path: str) -> None:
    """Refuse, before any work, a picture path that `write_figure` could not write."""
    if not can_create(path):
        raise InstanceError("cannot write the picture there (a directory, a file in the way, or not writable); "
                            "checked before any work", str(path))


def write_figure(fig, path, **savefig) -> None:
    """Save a matplotlib figure as PNG at `path`, creating missing parent directories (as the
    solution writer does), and close it; a path that cannot be written is an InstanceError."""
    import matplotlib.pyplot as plt

    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png", **savefig)   # at `path` as given: no ".png" appended
    except OSError as exc:
        raise InstanceError(f"cannot write the picture: {exc.strerror or exc}", str(path)) from None
    finally:
        plt.close(fig)


def save_figure(draw_fn, path: str, size: tuple[float, float] = (6.0, 5.0), panels: int = 1,
                widths: Sequence[float] | None = None, caption: str = "") -> None:
    """Call draw_fn(ax) (or draw_fn(axes) for several panels side by side) on a fresh figure and
    save it as PNG (headless backend), with `caption` above the panels (what was solved, and how)."""
    import matplotlib  # start-up time, as above

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=size, gridspec_kw={"width_ratios": widths} if widths else None)
    try:
        draw_fn(axes)
        if caption:
            fig.suptitle(caption, fontsize="medium")
        fig.tight_layout()
    except BaseException:
        plt.close(fig)
        raise
    write_figure(fig, path, dpi=130)
