"""Simulating a solution file, and showing the result: text, JSON, Gantt chart and memory timeline."""

from __future__ import annotations

from pathlib import Path

from wafopt.core.errors import InstanceError, PlanError
from wafopt.core.files import read_mapping
from wafopt.costmodel.plan import plan_tasks
from wafopt.problems import evaluate, load
from wafopt.simulate.engine import Simulation, simulate

PHASE_COLOURS = {"forward": "#4C72B0", "recompute": "#DD8452", "backward": "#55A868", "optimizer": "#8C8C8C"}
MEMORY_CURVES = 8   # dies drawn in the memory timeline: the ones with the highest peaks


def simulate_solution(solution: str, instance: str | None = None, contention: bool = True,
                      timeline: bool = False):
    """(Simulation, analytic Evaluation) of a plan solution file; InstanceError for bad input."""
    data, _ = read_mapping(solution)
    if data.get("problem") != "plan":
        raise InstanceError(f"simulate needs a solution of a plan scenario, got problem: {data.get('problem')!r}",
                            solution)
    if not isinstance(data.get("plan"), dict):
        raise InstanceError("has no plan to simulate", solution)
    where = instance or data.get("instance")
    if not isinstance(where, str):
        raise InstanceError("names no instance: pass --instance SCENARIO.yaml", solution)
    loaded = load(where)
    if loaded.problem != "plan":
        raise InstanceError(f"is a {loaded.problem} instance, simulate needs a plan scenario", where)
    evaluation = evaluate("plan", loaded.instance, data["plan"])
    if evaluation.objective is None:
        raise InstanceError(f"plan cannot be evaluated: {'; '.join(evaluation.violations)[:300]}", solution)
    try:
        tasks = plan_tasks(loaded.instance, data["plan"])
    except (PlanError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise InstanceError(f"malformed plan: {str(exc)[:300]}", solution) from None
    return simulate(tasks, contention=contention, timeline=timeline), evaluation


def plot(sim: Simulation, path: str | Path, title: str = "") -> None:
    """Gantt chart of every stage (one row per replica and stage) above a memory timeline."""
    import matplotlib  # here, not at the top: it costs the CLI's start-up

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    groups = sorted({(iv.replica, iv.stage) for iv in sim.intervals})
    row = {g: n for n, g in enumerate(groups)}
    fig, (gantt, memory) = plt.subplots(2, 1, figsize=(12, 3 + 0.28 * len(groups) + 3.5),
                                        gridspec_kw={"height_ratios": [max(2, 0.28 * len(groups)), 3.5]})
    by_kind: dict[str, list] = {}
    for iv in sim.intervals:
        by_kind.setdefault(iv.kind, []).append(iv)
    for kind, ivs in by_kind.items():
        for g in groups:
            bars = [(iv.start, iv.end - iv.start) for iv in ivs if (iv.replica, iv.stage) == g]
            if bars:
                gantt.broken_barh(bars, (row[g] - 0.4, 0.8), facecolors=PHASE_COLOURS[kind], linewidth=0)
    gantt.set_yticks(range(len(groups)))
    gantt.set_yticklabels([f"r{r} s{i}" if sim_dp(groups) > 1 else f"stage {i}" for r, i in groups], fontsize=7)
    gantt.invert_yaxis()
    gantt.set_xlim(0, sim.iteration_s)
    gantt.set_xlabel("time (s)")
    gantt.set_title(title or f"1F1B schedule, iteration {sim.iteration_s:.4g} s "
                             f"(contention {'on' if sim.contention else 'off'})", loc="left")
    gantt.legend(handles=[Patch(color=c, label=k) for k, c in PHASE_COLOURS.items() if k in by_kind],
                 loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, ncols=4, frameon=False)
    shown = _memory_dies(sim)
    for d in shown:
        times, used = sim.memory_timeline[d]
        memory.step(list(times) + [sim.iteration_s], list(used / 1e9) + [used[-1] / 1e9], where="post",
                    label=f"die {list(d)}", linewidth=1)
    memory.axhline(sim.die_capacity / 1e9, color="black", linestyle="--", linewidth=1, label="capacity")
    memory.set_xlim(0, sim.iteration_s)
    memory.set_xlabel("time (s)")
    memory.set_ylabel("DRAM in use (GB)")
    memory.set_title(f"DRAM over time: the fullest die of each stage ({len(shown)} highest shown)")
    memory.legend(loc="best", fontsize=7, ncols=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _memory_dies(sim: Simulation) -> list:
    """The dies whose memory is drawn: the highest peak of each stage, then dies that only host
    offloaded checkpoints, highest peaks first."""
    best: dict = {}
    for d in sim.memory_timeline:
        key = sim.stage_of.get(d, ("helper", d))
        if key not in best or sim.peak_memory[d] > sim.peak_memory[best[key]]:
            best[key] = d
    return sorted(best.values(), key=lambda d: -sim.peak_memory[d])[:MEMORY_CURVES]


def sim_dp(groups) -> int:
    return len({r for r, _ in groups})
