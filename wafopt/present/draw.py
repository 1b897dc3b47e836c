"""Pictures of the mesh: dies coloured by stage or group, faulty dies marked, link loads as widths."""

from __future__ import annotations

from typing import Mapping

from wafopt.hardware.mesh import Die, Link, Mesh


def draw_mesh(ax, mesh: Mesh, groups: Mapping[Die, int] | None = None,
              labels: Mapping[Die, str] | None = None,
              link_loads: Mapping[Link, float] | None = None,
              arrows: list[tuple[Die, Die, str]] | None = None, title: str = "",
              load_label: str = "link load (bytes per iteration)",
              arrow_label: str = "checkpoint offload (sender -> helper)") -> None:
    """Draw `mesh` on a matplotlib axis.

    groups: die -> group index (stage, TATP group, ...), coloured from a qualitative map.
    labels: die -> short text drawn on the die. link_loads: directed link -> load; each direction
    is drawn slightly offset, width and shade growing with load / peak; a colour bar labelled
    `load_label` gives the scale.
    arrows: (src, dst, colour) drawn as curved arrows between die centres (Mem_pair or offload
    flows); `arrow_label` names them in a legend.
    Die (r, c) is drawn at x = c, y = -r, so row 0 is on top as in the papers' figures.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    groups = groups or {}
    labels = labels or {}
    cmap = plt.get_cmap("tab20")
    # physical links (faulty ones dashed red)
    for r in range(mesh.rows):
        for c in range(mesh.cols):
            for d in ((r, c + 1), (r + 1, c)):
                if not mesh.contains(d):
                    continue
                ok = mesh.link_ok((r, c), d)
                ax.plot([c, d[1]], [-r, -d[0]], color="#bbbbbb" if ok else "red",
                        linestyle="-" if ok else "--", linewidth=0.8, zorder=1)
    if link_loads:
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import LinearSegmentedColormap, Normalize

        peak = max(link_loads.values()) or 1.0
        # pale for light loads, dark red for the peak
        shades = LinearSegmentedColormap.from_list(
            "load", [plt.get_cmap("YlOrRd")(0.1 + 0.9 * k / 10) for k in range(11)])
        ax.figure.colorbar(ScalarMappable(Normalize(0.0, peak), shades), ax=ax, shrink=0.6, pad=0.02,
                           label=load_label)
        for (a, b), load in link_loads.items():
            if load <= 0:
                continue
            # offset the two directions of a link to either side of its centre line
            dx, dy = b[1] - a[1], -(b[0] - a[0])
            ox, oy = -dy * 0.08, dx * 0.08
            share = load / peak
            ax.plot([a[1] + ox, b[1] + ox], [-a[0] + oy, -b[0] + oy], color=shades(share),
                    linewidth=0.6 + 5.0 * share, solid_capstyle="butt", zorder=2)
    for r in range(mesh.rows):
        for c in range(mesh.cols):
            die = (r, c)
            if die in mesh.faulty_dies:
                face, edge = "#444444", "red"
            elif die in groups:
                face, edge = cmap(groups[die] % 20), "black"
            else:
                face, edge = "white", "#888888"
            ax.add_patch(Rectangle((c - 0.32, -r - 0.32), 0.64, 0.64, facecolor=face, edgecolor=edge,
                                   linewidth=1.0, zorder=3))
            if die in mesh.faulty_dies:
                ax.plot([c - 0.3, c + 0.3], [-r - 0.3, -r + 0.3], color="red", zorder=4)
                ax.plot([c - 0.3, c + 0.3], [-r + 0.3, -r - 0.3], color="red", zorder=4)
            elif die in labels:
                ax.text(c, -r, labels[die], ha="center", va="center", fontsize=7, zorder=5)
    for src, dst, colour in arrows or []:
        ax.annotate("", xy=(dst[1], -dst[0]), xytext=(src[1], -src[0]), zorder=6,
                    arrowprops=dict(arrowstyle="->", color=colour, linewidth=1.2,
                                    connectionstyle="arc3,rad=0.2"))
    if arrows:
        ax.plot([], [], color=arrows[0][2], linewidth=1.2, label=arrow_label)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.02), fontsize=7, frameon=False)
    ax.set_xlim(-0.7, mesh.cols - 0.3)
    ax.set_ylim(-mesh.rows + 0.3, 0.7)
    ax.set_aspect("equal")
    ax.set_xticks(range(mesh.cols))
    ax.set_yticks([-r for r in range(mesh.rows)], [str(r) for r in range(mesh.rows)])
    ax.tick_params(length=0, labelsize=7)
    for side in ax.spines.values():
        side.set_visible(False)
    if title:
        ax.set_title(title, fontsize=9)


def save_figure(draw_fn, path: str, size: tuple[float, float] = (6.0, 5.0)) -> None:
    """Call draw_fn(ax) on a fresh figure and save it as PNG (headless backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wafopt.core.errors import InstanceError

    fig, ax = plt.subplots(figsize=size)
    try:
        draw_fn(ax)
        fig.tight_layout()
        fig.savefig(path, dpi=130)
    except OSError as exc:
        raise InstanceError(f"cannot write the picture: {exc.strerror or exc}", str(path)) from None
    finally:
        plt.close(fig)
