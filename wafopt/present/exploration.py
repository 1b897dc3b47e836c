"""The pictures of an exploration (`wafopt explore --plot DIR`), drawn from its result mapping:

- funnel.png: designs left after each enumeration step, then the designs each fidelity level was
  needed for, with how many of those evaluations ran now and how many came from the store;
- pareto.png: simulated value against wafer DRAM capacity, the Pareto set labelled;
- s-curve.png: how many designs could still be the optimum for an assumed model error, counted
  with the one-sided rule the pruning uses, so at the calibrated epsilon a proven run shows 1.
"""

from __future__ import annotations

from pathlib import Path

from wafopt.present.draw import write_figure

LEVELS = {"F1": "planned (F1)", "F2": "joint planner (F2)", "F3": "simulated (F3)"}
PARETO_COLOUR, BEST_COLOUR, OTHER_COLOUR = "#c44e52", "#dd8452", "#999999"


def _pyplot():
    import matplotlib  # lazy: matplotlib costs the CLI's start-up

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _reached(out: dict, level: str) -> int:
    """Designs whose evaluation reached `level` (F1 < F2 < F3)."""
    order = ["F0", *LEVELS]
    return sum(order.index(r["fidelity"]) >= order.index(level) for r in out["table"] if r["fidelity"] in order)


def _work_note(out: dict, level: str) -> str:
    """'k evaluations: r run now, s from the store' (per design and workload)."""
    run = out["evaluations"].get(level, 0)
    needed = out.get("needed", out["evaluations"]).get(level, run)
    if not needed:
        return ""
    stored = needed - run
    if not stored:
        return f"{needed} evaluations, all run now"
    return f"{needed} evaluations: {run} run now, {stored} from the store"


def funnel_figure(out: dict):
    plt = _pyplot()
    steps = [(name, value, "") for name, value in out["counts"].items()]
    steps += [(label, _reached(out, level), _work_note(out, level)) for level, label in LEVELS.items()]
    fig, ax = plt.subplots(figsize=(8.5, 0.32 * len(steps) + 1.6))
    ax.barh(range(len(steps)), [max(v, 1) for _, v, _ in steps],
            color=["#4c72b0"] * (len(steps) - len(LEVELS)) + ["#55a868"] * len(LEVELS))
    ax.set_yticks(range(len(steps)), [name for name, _, _ in steps], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    for i, (_, value, note) in enumerate(steps):
        ax.text(max(value, 1), i, f" {value}" + (f"  ({note})" if note else ""), va="center", fontsize=7)
    ax.set_xlim(right=ax.get_xlim()[1] * 30)   # room for the notes
    ax.set_xlabel("designs (log scale)")
    ax.set_title("Design-space funnel: designs after each step, and designs each fidelity was needed for",
                 fontsize=9)
    fig.tight_layout()
    return fig


def _capacity_tb(row: dict) -> float:
    return row["rows"] * row["cols"] * row["dram_gb"] / 1000


def pareto_figure(out: dict):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    simulated = [r for r in out["table"] if r["value"] is not None]
    on_front = set(out["pareto"])
    others = [r for r in simulated if r["design"] not in on_front]
    if others:
        ax.scatter([_capacity_tb(r) for r in others], [r["value"] for r in others], s=14, color=OTHER_COLOUR,
                   label="other simulated designs", zorder=2)
    front = sorted((r for r in simulated if r["design"] in on_front), key=_capacity_tb)
    if front:
        ax.plot([_capacity_tb(r) for r in front], [r["value"] for r in front], "o-", color=PARETO_COLOUR,
                markersize=6, label=f"Pareto set ({len(front)})", zorder=3)
        for r in front:
            ax.annotate(r["design"], (_capacity_tb(r), r["value"]), xytext=(10, 6), textcoords="offset points",
                        fontsize=7, color=PARETO_COLOUR)
    if out["best"]:
        best = next((r for r in simulated if r["design"] == out["best"]["design"]), None)
        if best is not None:   # a hollow star around the point, so the point under it stays visible
            ax.scatter([_capacity_tb(best)], [best["value"]], marker="*", s=420, facecolors="none",
                       edgecolors=BEST_COLOUR, linewidths=1.6, zorder=4, label=f"best: {best['design']}")
    ax.set_xlabel("wafer DRAM capacity (TB)  ->  more is better")
    ax.set_ylabel(out["objective"].split(";")[0].split(" (")[0] + "  (lower is better)")
    ax.set_title("Pareto front: simulated value against DRAM capacity", fontsize=9)
    if simulated:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def s_curve_figure(out: dict):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    curve = out["s_curve"]
    epsilon = out["epsilon"]
    ax.step([100 * p["error"] for p in curve], [p["potentially_optimal"] for p in curve], where="post",
            color="#4c72b0", label="designs that could beat the best simulated value")
    at_epsilon = next((p["potentially_optimal"] for p in curve if abs(p["error"] - epsilon) < 1e-9), None)
    ax.axvline(100 * epsilon, color=PARETO_COLOUR, linestyle="--",
               label=f"calibrated epsilon {epsilon:.1%}" + ("" if at_epsilon is None else
                                                            f": {at_epsilon} design{'s' * (at_epsilon != 1)}"))
    err = out.get("model_error") or {}
    if err.get("count"):
        faster = max(0.0, -err["largest_under"])
        ax.axvline(100 * faster, color="#55a868", linestyle=":",
                   label=f"measured: the simulator at most {faster:.2%} faster ({err['count']} plans)")
    if out.get("proven"):
        verdict = "proven: no other design can be better while the simulator is at most epsilon faster"
    else:
        verdict = "not proven: designs remain, or the simulator was more than epsilon faster"
    ax.set_xlabel("assumed model error: the simulator faster than the model by up to (%)")
    ax.set_ylabel("designs that could be the optimum")
    ax.set_title(f"Accuracy-confidence S-curve (one-sided, as the pruning)\n{verdict}", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


FIGURES = {"funnel.png": funnel_figure, "pareto.png": pareto_figure, "s-curve.png": s_curve_figure}


def plot_exploration(out: dict, directory: str | Path) -> list[Path]:
    """funnel.png, pareto.png and s-curve.png in `directory`."""
    paths = [Path(directory) / name for name in FIGURES]
    for figure, path in zip(FIGURES.values(), paths):
        write_figure(figure(out), path, dpi=120)
    return paths
