"""The picture of a simulated iteration (`wafopt simulate --plot`): a Gantt chart of every stage of
every replica above a heat map of DRAM in use over time, one row per die group (the fullest die
of each stage) and one for the dies that only host offloaded checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wafopt.present.draw import write_figure
from wafopt.simulate.engine import Simulation

PHASE_COLOURS = {"forward": "#4C72B0", "recompute": "#DD8452", "backward": "#55A868", "optimizer": "#222222"}
# an optimizer step lasts a fraction of a percent of the iteration: drawn at least this share wide
OPTIMIZER_MIN_SHARE = 0.004
TIME_BINS = 600   # columns of the memory heat map; each shows the most DRAM in use within it
HELPERS = "helpers"


def _groups(sim: Simulation) -> list:
    return sorted({(iv.replica, iv.stage) for iv in sim.intervals} | set(sim.stage_of.values()))


def _group_name(group, replicas: int) -> str:
    if group == HELPERS:
        return "helper dies"
    r, i = group
    return f"r{r} s{i}" if replicas > 1 else f"stage {i}"


def memory_rows(sim: Simulation, bins: int = TIME_BINS) -> tuple[list, np.ndarray, np.ndarray]:
    """(row keys, bin edges in s, GB in use per row and time bin): per die group the most any of
    its dies holds within each bin; the dies outside every stage (offload helpers) as one row."""
    edges = np.linspace(0.0, sim.iteration_s, bins + 1)
    rows: dict = {}
    for die, (times, used) in sorted(sim.memory_timeline.items()):
        key = sim.stage_of.get(die, HELPERS)
        # the value at each bin's start, then every change inside the bin: their maximum
        first = np.clip(np.searchsorted(times, edges[:-1], side="right") - 1, 0, len(used) - 1)
        last = np.searchsorted(times, edges[1:], side="left")
        most = np.array([used[a:max(a + 1, b)].max() for a, b in zip(first, last)]) / 1e9
        rows[key] = most if key not in rows else np.maximum(rows[key], most)
    keys = [g for g in _groups(sim) if g in rows] + ([HELPERS] if HELPERS in rows else [])
    return keys, edges, np.array([rows[k] for k in keys]) if keys else np.zeros((0, bins))


def simulation_figure(sim: Simulation, title: str = ""):
    import matplotlib  # lazy: matplotlib costs the CLI's start-up

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    groups = _groups(sim)
    replicas = len({r for r, _ in groups})
    keys, edges, gb = memory_rows(sim)
    gantt_h, memory_h = max(2.0, 0.28 * len(groups)), max(1.6, 0.22 * len(keys))
    fig, (gantt, memory) = plt.subplots(2, 1, figsize=(12, gantt_h + memory_h + 2.2), sharex=True,
                                        gridspec_kw={"height_ratios": [gantt_h, memory_h]})
    row = {g: n for n, g in enumerate(groups)}
    least = OPTIMIZER_MIN_SHARE * sim.iteration_s
    for kind, colour in PHASE_COLOURS.items():
        for g in groups:
            bars = [(iv.start, max(iv.end - iv.start, least) if kind == "optimizer" else iv.end - iv.start)
                    for iv in sim.intervals if iv.kind == kind and (iv.replica, iv.stage) == g]
            if bars:
                gantt.broken_barh(bars, (row[g] - 0.4, 0.8), facecolors=colour, linewidth=0, label=kind)
    gantt.set_yticks(range(len(groups)), [_group_name(g, replicas) for g in groups], fontsize=7)
    gantt.set_ylim(len(groups) - 0.5, -0.5)
    gantt.set_xlim(0, sim.iteration_s)
    gantt.set_ylabel("die group (pipeline stage)", fontsize=8)
    gantt.set_title(title or f"1F1B schedule, iteration {sim.iteration_s:.4g} s "
                             f"(contention {'on' if sim.contention else 'off'})", loc="left")
    kinds = {iv.kind for iv in sim.intervals}
    gantt.legend(handles=[Patch(color=c, label=f"{k} step (drawn at least {OPTIMIZER_MIN_SHARE:.1%} of the "
                                                f"iteration wide)" if k == "optimizer" else k)
                          for k, c in PHASE_COLOURS.items() if k in kinds],
                 loc="upper center", bbox_to_anchor=(0.5, -0.02), fontsize=8, ncols=4, frameon=False)
    if len(keys):
        low = float(gb.min())
        image = memory.pcolormesh(edges, np.arange(len(keys) + 1) - 0.5, gb, cmap="viridis", vmin=low,
                                  vmax=max(sim.die_capacity / 1e9, float(gb.max())), shading="flat")
        fig.colorbar(image, ax=[gantt, memory], shrink=0.9, pad=0.01, fraction=0.03,
                     label=f"DRAM in use (GB; top: capacity {sim.die_capacity / 1e9:.4g} GB)")
        memory.set_yticks(range(len(keys)), [_group_name(k, replicas) for k in keys], fontsize=7)
        memory.set_ylim(len(keys) - 0.5, -0.5)
    memory.set_xlabel("time (s)")
    memory.set_ylabel("die group", fontsize=8)
    memory.set_title("DRAM over time: the fullest die of each group (most within each time bin)", fontsize=9,
                     loc="left")
    return fig


def plot_simulation(sim: Simulation, path: str | Path, title: str = "") -> None:
    """The Gantt chart and the DRAM heat map of a simulation run with its timeline, as a PNG."""
    write_figure(simulation_figure(sim, title), path, dpi=110, bbox_inches="tight")
