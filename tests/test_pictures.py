"""Pictures: every shipped instance and a solution of every problem render to a non-empty PNG, and
the pictures carry what they are for (readable link loads, per-stage memory bars, GA convergence)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from wafopt.core.budget import SolveOptions  # noqa: E402
from wafopt.present.pictures import DRAW, draw_recompute, draw_routing, save_picture  # noqa: E402
from wafopt.present.show import show  # noqa: E402
from wafopt.problems import load  # noqa: E402
from wafopt.run.runner import run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INSTANCES = [p for p in sorted((ROOT / "instances").rglob("*.yaml"))     # the problems with a picture
             if any(line.strip() == f"problem: {name}" for name in DRAW for line in p.read_text().splitlines())]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("path", INSTANCES, ids=[p.stem for p in INSTANCES])
def test_every_shipped_instance_renders(path, tmp_path):
    out = tmp_path / "picture.png"
    info = show(str(path), None, str(out))
    assert info["png"] == str(out) and is_png(out)
    plt.close("all")


# one solution per problem, made here so the test does not depend on saved files
SOLVED = [("instances/routing/rt-temp-6x9-snake.yaml", "tcme"),
          ("instances/recompute/rc-g4s16l4u-local.yaml", "dp"),
          ("instances/recompute/rc-g8s48l8u-pooled.yaml", "dp"),
          ("instances/mem_pair/mp-g8x8-16s20h-faults.yaml", "greedy"),
          ("instances/tatp/tatp-8x8-f3-n4.yaml", "tiles"),
          ("instances/placement/pl-llama3-70b-config3-faulty.yaml", "local"),
          ("instances/plan/llama3-70b-config3.yaml", "uniform")]


@pytest.mark.parametrize("instance, method", SOLVED, ids=[m + "-" + Path(i).stem for i, m in SOLVED])
def test_every_problem_renders_a_plan(instance, method, tmp_path):
    lo = load(ROOT / instance)
    sol = run(lo, method, SolveOptions(time_limit=5, quiet=True))
    assert sol.plan is not None
    out = tmp_path / "plan.png"
    save_picture(lo.problem, lo.instance, sol.plan, sol.stats, str(out))
    assert is_png(out)
    assert set(DRAW) >= {"plan", "placement", "recompute", "mem_pair", "tatp", "routing"}


def test_routing_labels_are_link_loads_not_sources():
    lo = load(ROOT / "instances/routing/rt-temp-6x9-snake.yaml")
    sol = run(lo, "tcme", SolveOptions(time_limit=5, quiet=True))
    fig, ax = plt.subplots()
    draw_routing(lo.instance, sol.plan, ax)
    texts = [t.get_text() for t in ax.texts]
    plt.close(fig)
    assert texts and "s" not in texts
    shares = [int(t) for t in texts]
    assert max(shares) == 100 and min(shares) >= 0    # percent of the peak, the peak labelled 100


def test_recompute_bars_per_stage_against_capacity():
    lo = load(ROOT / "instances/recompute/rc-g4s16l4u-local.yaml")
    inst = lo.instance
    full = {"x": [[s.layers] * len(inst.units) for s in inst.stages]}
    fig, ax = plt.subplots()
    draw_recompute(inst, full, ax)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    capacity_lines = [line for line in ax.get_lines() if line.get_label() == "DRAM capacity" or
                      line.get_ydata()[0] in [s.capacity for s in inst.stages]]
    bars = [p for p in ax.patches if p.get_height() > 0]
    plt.close(fig)
    assert "model state" in labels and "recomputed (not kept)" in labels and "DRAM capacity" in labels
    assert "activations kept" not in labels                   # full recomputation keeps none
    assert len(capacity_lines) == len(inst.stages)
    assert len(bars) == 2 * len(inst.stages)                   # state and recomputed per stage


def test_ga_solution_adds_its_convergence(tmp_path):
    lo = load(ROOT / "instances/placement/qaplib/nug12.yaml")
    sol = run(lo, "ga", SolveOptions(time_limit=2, quiet=True))
    per_generation = sol.stats["layouts"]["1x1"]["per_generation"]
    assert len(per_generation["best"]) == len(per_generation["mean"]) >= 1
    assert all(m >= b for b, m in zip(per_generation["best"], per_generation["mean"]))
    assert all(b2 <= b1 for b1, b2 in zip(per_generation["best"], per_generation["best"][1:]))
    out = tmp_path / "ga.png"
    save_picture("placement", lo.instance, sol.plan, sol.stats, str(out))
    assert is_png(out)


def test_sixteen_by_sixteen_plan_labels_each_stage_once(tmp_path):
    """On a 16 x 16 wafer every pipeline stage's tile carries one label (not one per die)."""
    scenario = tmp_path / "big.yaml"
    scenario.write_text("problem: plan\nwafer: {preset: watos-config1, rows: 16, cols: 16}\nmodel: gpt3-175b\n"
                        "training: {seq: 2048, micro_batch: 1, global_batch: 256, states: watos14}\n"
                        "parallel: {tp: 4, pp: 16, dp: 4}\n")
    lo = load(scenario)
    sol = run(lo, "uniform", SolveOptions(quiet=True))
    fig, ax = plt.subplots()
    DRAW["plan"](lo.instance, sol.plan, ax)
    labels = [t.get_text() for t in ax.texts]
    plt.close(fig)
    assert len(labels) == 64 and len(set(labels)) == 64        # 4 replicas x 16 stages, once each
    out = tmp_path / "big.png"
    save_picture("plan", lo.instance, sol.plan, sol.stats, str(out))
    assert is_png(out)


@pytest.mark.parametrize("instance, method", [("instances/tatp/tatp-8x8-f3-n16.yaml", "tiles"),
                                              ("instances/placement/pl-sparse-12.yaml", "ga"),
                                              ("instances/recompute/rc-example-pooled.yaml", "dp"),
                                              ("instances/findings/dgx4-gpt3-6.7b-megatron.yaml", "megatron")])
def test_solve_and_show_write_the_picture_with_plot(instance, method, tmp_path, monkeypatch):
    from wafopt.cli import main
    from wafopt.present import pictures

    captions = []
    original = pictures.save_figure
    monkeypatch.setattr(pictures, "save_figure", lambda *a, caption="", **k: (captions.append(caption),
                                                                           original(*a, caption=caption, **k)))
    solved, shown = tmp_path / "solved.png", tmp_path / "shown.png"
    out = tmp_path / "s.json"
    assert main(["solve", str(ROOT / instance), "--method", method, "--time-limit", "2", "--quiet",
                 "--out", str(out), "--plot", str(solved)]) == 0
    assert main(["show", str(out), "--plot", str(shown)]) == 0
    assert is_png(solved) and is_png(shown)
    plt.close("all")
    # each picture says what was solved and by which method (a scenario's plan: its convergence's title)
    name = load(ROOT / instance).name
    assert captions and all(name in caption and method in caption for caption in captions), captions


def test_plan_picture_names_its_axes_units_and_the_dies_outside_every_stage():
    import json

    solution = json.loads((ROOT / "solutions" / "llama3-70b-config3-faulty.gcmr.json").read_text())
    scenario = load(ROOT / solution["instance"]).instance
    fig, ax = plt.subplots()
    DRAW["plan"](scenario, solution["plan"], ax)
    try:
        assert ax.get_xlabel() == "column" and ax.get_ylabel() == "row"
        fig.canvas.draw()   # tick labels and their offset exist once drawn
        colourbar = fig.axes[-1]
        assert "GB" in colourbar.get_ylabel() and "bytes" not in colourbar.get_ylabel()
        assert colourbar.yaxis.get_offset_text().get_text() == ""   # no x1e11 multiplier
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any("helper" in text for text in legend) and any("idle" in text for text in legend)
        # no stage colour is a shade of the grey link-load scale
        stage_faces = {p.get_facecolor()[:3] for p in ax.patches if p.get_zorder() == 3 and not p.get_hatch()}
        assert all(len(set(face)) > 1 for face in stage_faces if face != (1.0, 1.0, 1.0)
                   and face != matplotlib.colors.to_rgb("#444444"))
    finally:
        plt.close(fig)


def test_simulation_picture_shows_the_optimizer_and_dram_per_die_group():
    from wafopt.present.simulation import OPTIMIZER_MIN_SHARE, simulation_figure
    from wafopt.simulate.report import simulate_solution

    sim, _ = simulate_solution(str(ROOT / "solutions" / "gpt3-175b-config3-tp4.gcmr.json"), timeline=True)
    fig = simulation_figure(sim)
    try:
        gantt, memory, colourbar = fig.axes
        optimizer = [c for c in gantt.collections if c.get_label() == "optimizer"]
        assert optimizer and all(path.get_extents().width >= 0.99 * OPTIMIZER_MIN_SHARE * sim.iteration_s
                                 for c in optimizer for path in c.get_paths())
        stages = len(set(sim.stage_of.values()))
        rows = [t.get_text() for t in memory.get_yticklabels()]
        assert len(rows) == stages + 1 and rows[-1] == "helper dies"    # one row per die group, not 8 lines
        assert len(memory.collections) == 1 and not memory.get_lines()  # a heat map
        assert "GB" in colourbar.get_ylabel()
    finally:
        plt.close(fig)
