"""Design-space exploration: enumeration, deduplication, pruning that keeps the optimum, the store."""

import itertools
import math
import shutil
import sqlite3

import pytest

from wafopt.explore import synthetic
from wafopt.explore.enumerate import (
    EdgeConfig,
    _canonical,
    edge_config,
    edge_sequences,
    enumerate_designs,
)
from wafopt.explore.run import Explorer
from wafopt.explore.space import LoadedWorkload, parse_space
from wafopt.explore.store import SCHEMA, Store

UNITS = [
    {"name": "hbm", "kind": "dram", "width_mm": 7.0, "depth_mm": 1.5, "capacity_gb": 16, "bandwidth_tbps": 0.5},
    {"name": "hbm-l", "kind": "dram", "width_mm": 7.0, "depth_mm": 3.0, "capacity_gb": 24, "bandwidth_tbps": 0.5},
    {"name": "hbm-f", "kind": "dram", "width_mm": 8.0, "depth_mm": 2.0, "capacity_gb": 12, "bandwidth_tbps": 1.0},
    {"name": "d2d", "kind": "d2d", "width_mm": 4.0, "depth_mm": 0.0, "bandwidth_tbps": 1.0},
    {"name": "d2d-w", "kind": "d2d", "width_mm": 6.0, "depth_mm": 0.5, "bandwidth_tbps": 1.75},
]
DIES = [{"name": "c16", "cores": [16, 16], "size_mm": [21.92, 22.81], "core_tflops": 2.0},
        {"name": "c18", "cores": [18, 18], "size_mm": [25.5, 25.2]},
        {"name": "c14", "cores": [14, 14], "size_mm": [19.2, 19.9]},
        {"name": "c20", "cores": [20, 20], "size_mm": [28.0, 28.5]}]


def space(units=UNITS, max_units=3, dies=DIES, **extra):
    data = {"problem": "explore", "compute_dies": dies,
            "edge": {"budget_tbps": 12, "max_units": max_units, "units": units},
            "workloads": [{"name": "small", "scenario": "s.yaml"}, {"name": "large", "scenario": "l.yaml"}],
            **extra}
    return parse_space(data)


WORKLOADS = [LoadedWorkload("small", {"size": 1.0}, "s", 1.0), LoadedWorkload("large", {"size": 3.0}, "l", 1.0)]


def test_edge_dedup_removes_only_reorderings():
    sp = space().space
    seqs = list(edge_sequences(sp.edge.units, 3, 21.92))
    configs = {}
    for seq in seqs:
        configs.setdefault(edge_config(seq).units, set()).add(edge_config(seq))
    # every group of orders has one set of metrics: the order never matters
    assert all(len(v) == 1 for v in configs.values())
    assert len(configs) < len(seqs)


def test_dedup_keeps_every_distinct_design_brute_force():
    """Brute force over ordered arrangements on all four sides of a small space: the distinct
    wafer metrics equal those the enumerator reaches before its dominance pruning."""
    units = UNITS[:1] + UNITS[3:4]
    sp = space(units=units, max_units=2, dies=DIES[:1]).space
    w, h = sp.compute_dies[0].size_mm
    ns = list(edge_sequences(sp.edge.units, 2, w))
    ew = list(edge_sequences(sp.edge.units, 2, h))
    brute = set()
    for n, e, s, wst in itertools.product(ns, ew, ns, ew):
        cfg = [edge_config(x) for x in (n, e, s, wst)]
        if sum(c.budget_tbps for c in cfg) > sp.edge.budget_tbps + 1e-9:
            continue
        link = min(min(cfg[1].d2d_tbps, cfg[3].d2d_tbps), min(cfg[0].d2d_tbps, cfg[2].d2d_tbps))
        die_w = round(w + cfg[1].depth_mm + cfg[3].depth_mm, 9)
        die_h = round(h + cfg[0].depth_mm + cfg[2].depth_mm, 9)
        rows, cols = int(sp.wafer.height_mm // die_h), int(sp.wafer.width_mm // die_w)
        if link <= 0 or rows * cols < 1:
            continue
        brute.add((*sorted((rows, cols)), 512.0, round(sum(c.dram_gb for c in cfg), 9),
                   round(sum(c.dram_tbps for c in cfg), 9), round(link, 9)))
    designs, _ = enumerate_designs(sp)
    kept = {_canonical(d, True) for d in designs}
    assert len(kept) == len(designs)   # no two kept designs are equivalent
    assert kept <= brute
    # every brute-force design is dominated by (or equal to) one the enumerator kept
    for b in brute:
        assert any(all(k >= v for k, v in zip(keep, b)) for keep in kept), b


def test_enumeration_counts_and_table_ii_style_points():
    designs, counts = enumerate_designs(space().space)
    assert counts["N/S after dedup"] <= counts["N/S edge arrangements"]
    assert counts["wafers after wafer pruning"] == len(designs) <= counts["wafers after dedup"]
    assert all(d.link_tbps > 0 and d.rows * d.cols >= 1 for d in designs)


def explorer(sp, error=0.1, epsilon=0.1, store=None, workers=0, time_limit=None):
    return Explorer(sp, WORKLOADS, synthetic.WithError(error), epsilon, store=store, workers=workers,
                    time_limit=time_limit)


def big_space():
    sp = space(max_units=4, min_dies=1)
    designs, _ = enumerate_designs(sp.space)
    assert len(designs) >= 200, len(designs)
    return sp


@pytest.mark.parametrize("error", [0.0, 0.05, 0.1])
def test_pruned_run_finds_the_exhaustive_optimum_with_far_fewer_fine_evaluations(error):
    sp = big_space()
    full = explorer(sp, error=error).run(exhaustive=True)
    pruned = explorer(sp, error=error).run()
    assert pruned["best"]["design"] == full["best"]["design"]
    assert pruned["best"]["value"] == pytest.approx(full["best"]["value"])
    assert pruned["proven"]
    assert full["evaluations"]["F3"] >= 10 * pruned["evaluations"]["F3"]
    assert {"best", "counts", "evaluations", "remaining"} <= set(pruned)   # what --json promises
    assert set(pruned["evaluations"]) == {"F0", "F1", "F2", "F3"} and pruned["remaining"] == []


def test_resume_after_a_kill_repeats_no_work(tmp_path):
    sp = big_space()
    path = tmp_path / "store.sqlite"
    calls = {"n": 0}

    class Dies(synthetic.WithError):
        def __call__(self, task):
            calls["n"] += task["fidelity"] == "F2"
            if calls["n"] > 20:
                raise KeyboardInterrupt  # the run is killed mid-way
            return super().__call__(task)

    with pytest.raises(KeyboardInterrupt):
        Explorer(sp, WORKLOADS, Dies(0.1), 0.1, store=Store(path)).run()
    done = Store(path).count()
    assert done > 0
    again = explorer(sp, store=Store(path)).run()
    fresh = explorer(sp).run()
    assert again["best"] == fresh["best"] and again["table"] == fresh["table"]
    total = sum(fresh["evaluations"].values())
    assert sum(again["evaluations"].values()) == total - done  # nothing done twice
    third = explorer(sp, store=Store(path)).run()
    assert sum(third["evaluations"].values()) == 0


def test_the_sqlite_file_alone_holds_every_stored_batch(tmp_path):
    # copying the .sqlite without a journal beside it, while the run still holds the store open
    # (or after it was killed), keeps every batch it committed
    path = tmp_path / "store.sqlite"
    store = Store(path)
    store.put_many([(f"k{i}", f"d{i}", "w", "F1", {"value": i}) for i in range(500)])
    copy = tmp_path / "copied" / "store.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(path, copy)
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["store.sqlite"]
    with Store(copy) as copied:
        assert copied.count() == 500 and copied.get("k499") == {"value": 499}
    store.close()


def test_a_store_left_in_wal_mode_is_folded_back_into_one_file(tmp_path):
    path = tmp_path / "store.sqlite"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(SCHEMA)
    db.execute("INSERT INTO evaluations VALUES ('k', 'd', 'w', 'F1', '{\"value\": 1}')")
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.get("k") == {"value": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["store.sqlite"]


def test_s_curve_grows_with_the_assumed_error_and_confidence_when_stopped():
    sp = big_space()
    out = explorer(sp).run()
    counts = [p["potentially_optimal"] for p in out["s_curve"]]
    assert counts[0] >= 1 and counts == sorted(counts) and counts[-1] > counts[0]
    stopped = explorer(sp, time_limit=0.0).run()
    assert not stopped["proven"] and stopped["remaining"]
    assert 0.0 <= stopped.get("confidence", {"probability_best_is_optimal": 0.0})[
        "probability_best_is_optimal"] <= 1.0


def test_the_time_limit_stops_a_level_between_its_tasks():
    import time

    evaluate = synthetic.WithError(0.1)
    started = {}

    def slow(task):   # each fine evaluation takes 0.2 s: one batch of F1-F3 takes seconds
        if task["fidelity"] != "F0":
            time.sleep(0.2)
            started[task["fidelity"]] = started.get(task["fidelity"], 0) + 1
        return evaluate(task)

    sp = big_space()
    t0 = time.monotonic()
    out = Explorer(sp, WORKLOADS, slow, 0.1, workers=0, time_limit=1.0).run()
    elapsed = time.monotonic() - t0
    assert not out["proven"] and out["remaining"] and out["evaluations"]["F3"] == 0
    # one task past the limit at most, not the batch's 20 (on a busy machine the coarse level may
    # use the whole second, and no F1 task starts)
    assert started.get("F1", 0) <= 6 and elapsed < 10


def test_one_and_two_dask_workers_give_the_same_table():
    sp = space(max_units=2)
    one = explorer(sp, workers=1).run()
    two = explorer(sp, workers=2).run()
    assert one["table"] == two["table"] and one["best"] == two["best"]
    serial = explorer(sp).run()
    assert serial["table"] == one["table"]


def test_space_file_errors_name_the_field():
    from wafopt.core.errors import InstanceError

    with pytest.raises(InstanceError, match="edge.units.0.bandwidth_tbps"):
        space(units=[dict(UNITS[0], bandwidth_tbps=-1)])
    with pytest.raises(InstanceError, match="compute_dies"):
        space(dies=[])
    assert math.isfinite(EdgeConfig((), 0, 0, 0, 0, 0).budget_tbps)


# WATOS Table II configs 1-4 as points of the shipped example space: (compute die, units per side)
# and the metrics the paper gives (rows = Y, cols = X, TFLOPS, DRAM GB, DRAM TB/s, D2D TB/s).
D15, D2 = "d2d-1.5", "d2d-2"
TABLE_II = {
    1: ("c16", {"E": ["hbm-24", "hbm-24", D15, D15, D15], "W": [D15] * 3, "N": [D15] * 3, "S": [D15] * 3},
        (8, 8, 512, 48, 1.0, 4.5)),
    2: ("c708", {"E": ["hbm-24", "hbm-24", "hbm-16", D15, D15, D15], "W": [D15] * 3, "N": [D15] * 3,
                 "S": [D15] * 3}, (8, 7, 708, 64, 1.5, 4.5)),
    3: ("c708", {"E": ["hbm-24", "hbm-24", "hbm-16", "hbm-6", D2, D2], "W": [D2] * 2, "N": [D2] * 2,
                 "S": [D2] * 2}, (8, 7, 708, 70, 2.0, 4.0)),
    4: ("c708", {"E": ["hbm-24", "hbm-24", "hbm-16", D15, D2], "W": ["hbm-16", "hbm-16", D15, D2],
                 "N": [D15, D2], "S": [D15, D2]}, (8, 6, 708, 96, 2.5, 3.5)),
}


@pytest.fixture(scope="module")
def table_ii_space():
    from pathlib import Path

    from wafopt.explore.space import load_space

    sp = load_space(Path(__file__).resolve().parents[1] / "spaces" / "watos-table2.yaml").space
    return sp, enumerate_designs(sp)[0]


@pytest.mark.parametrize("config", sorted(TABLE_II))
def test_table_ii_configs_are_points_of_the_example_space(config, table_ii_space, capsys):
    """Each config is a design of the space with Table II's metrics; it survives the dominance
    pruning or a kept design dominates it (the report names which)."""
    from wafopt.explore.enumerate import design_of, dominates

    sp, kept = table_ii_space
    compute, edges, metrics = TABLE_II[config]
    design = design_of(sp, compute, edges)
    assert design.metrics() == pytest.approx(metrics)
    square = math.isclose(sp.wafer.width_mm, sp.wafer.height_mm)
    same = [d for d in kept if _canonical(d, square) == _canonical(design, square)]
    dominators = [d for d in kept if dominates(d, design, square)]
    assert same or dominators, f"config {config} is neither kept nor dominated by a kept design"
    with capsys.disabled():
        print(f"\nTable II config {config}: " + (f"kept as {same[0].id}" if same else
              f"pruned; kept design {dominators[0].id} {dominators[0].metrics()} dominates it "
              f"({len(dominators)} do)"))


def test_shipped_spaces_validate_and_name_real_scenarios():
    from pathlib import Path

    from wafopt.explore.fidelity import load_workloads
    from wafopt.explore.space import load_space

    paths = sorted((Path(__file__).resolve().parents[1] / "spaces").glob("*.yaml"))
    assert paths
    for path in paths:
        loaded = load_space(path)
        assert [w.name for w in load_workloads(loaded)] == [w.name for w in loaded.space.workloads], path


def test_progress_reports_every_level_with_pruned_remaining_and_best():
    seen = {}
    sp = space(max_units=2)
    Explorer(sp, WORKLOADS, synthetic.WithError(0.1), 0.1,
             progress=lambda level, info: seen.setdefault(level, []).append(info)).run()
    assert {"enumerate", "F0", "F1", "F2", "F3"} <= set(seen)
    last = seen["F3"][-1]
    assert {"done", "total", "pruned", "remaining", "best", "best_value", "bound"} <= set(last)
    assert last["best"] is not None and last["done"] <= last["total"]
    assert all(a["done"] <= b["done"] for a, b in zip(seen["F0"], seen["F0"][1:]))


def test_explore_progress_names_each_level_and_the_bound_less_the_model_error():
    """A least bound above the best is still in play while (1 - epsilon) x it is below: the line
    shows both numbers, so it does not read as if the run should have stopped."""
    from wafopt.present.progress import explore_progress

    seen = []

    class Bars:
        def note(self, text):
            seen.append(("note", text))

        def update(self, level, done, total, info=""):
            seen.append((level, info))

    report = explore_progress(Bars())
    report("F3", {"done": 3, "total": 8, "pruned": 2, "remaining": 5, "best": "d1", "best_value": 3.782,
                  "bound": 3.992, "epsilon": 0.06})
    level, info = seen[-1]
    assert level == "F3 simulations" and "best d1 3.782" in info
    assert "least bound 3.992 (3.752 less the 6% model error)" in info


def test_level_progress_is_rich_bars_on_a_terminal_and_plain_lines_elsewhere():
    import io

    from rich.console import Console

    from wafopt.present.progress import LevelProgress

    plain = io.StringIO()
    with LevelProgress(Console(file=plain, force_terminal=False), every_s=3600) as bars:
        bars.note("enumerated: 5")
        for k in range(5):
            bars.update("F0", k + 1, 5, "pruned 0")
    lines = plain.getvalue().splitlines()
    assert lines == ["enumerated: 5", "F0: 1/5 pruned 0", "F0: 5/5 pruned 0"]   # start and end only
    tty = io.StringIO()
    with LevelProgress(Console(file=tty, force_terminal=True, width=100)) as bars:
        bars.update("F1", 3, 4, "best d1 1.5")
    assert "F1" in tty.getvalue() and "3/4" in tty.getvalue() and "\x1b[" in tty.getvalue()


def test_explore_command_json_and_quiet(tmp_path, capsys):
    """The command end to end on a tiny space with the real ladder, stopped at once by its time
    limit: the JSON has its keys, nothing is proven, every feasible design remains."""
    import json
    from pathlib import Path

    from wafopt.cli import main

    scenario = Path(__file__).resolve().parents[1] / "instances" / "plan" / "llama-30b-config3-search.yaml"
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps({"problem": "explore", "compute_dies": DIES[:1], "min_dies": 16,
                                "edge": {"budget_tbps": 12, "max_units": 2, "units": [UNITS[0], UNITS[3]]},
                                "workloads": [{"name": "llama", "scenario": str(scenario),
                                               "training": {"global_batch": 16}}]}))
    code = main(["explore", str(path), "--workers", "0", "--time-limit", "1e-6", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {"best", "counts", "evaluations", "remaining", "proven"} <= set(out)
    assert out["best"] is None and not out["proven"] and out["remaining"]
    assert out["evaluations"]["F3"] == 0   # the limit holds from the first level on
    assert len(out["remaining"]) == out["counts"]["wafers after wafer pruning"]


@pytest.mark.slow
def test_real_ladder_pruned_run_finds_the_exhaustive_optimum(tmp_path):
    """The planner and the simulator on a small space: the pruned run, reading the exhaustive run's
    results (F2 runs against the clock, so both must see the same plans), picks the same design
    and needs fewer simulations."""
    import json
    from pathlib import Path

    from wafopt.explore.run import explore
    from wafopt.explore.space import load_space

    scenario = Path(__file__).resolve().parents[1] / "instances" / "plan" / "llama-30b-config3-search.yaml"
    path = tmp_path / "small.yaml"
    path.write_text(json.dumps({"problem": "explore", "compute_dies": DIES[:1], "min_dies": 16,
                                "edge": {"budget_tbps": 12, "max_units": 2, "units": [UNITS[0], UNITS[2], UNITS[3]]},
                                "workloads": [{"name": "llama", "scenario": str(scenario),
                                               "training": {"global_batch": 8}}]}))
    loaded = load_space(path)
    store = tmp_path / "store.sqlite"
    full = explore(loaded, exhaustive=True, store=Store(store), budget_s=2.0)
    pruned = explore(loaded, store=Store(store), budget_s=2.0)
    assert full["best"] is not None
    assert pruned["best"]["design"] == full["best"]["design"]
    assert pruned["best"]["value"] == full["best"]["value"]
    assert sum(pruned["evaluations"].values()) == 0            # all read from the store
    assert pruned["needed"]["F3"] < full["needed"]["F3"]


def test_s_curve_is_one_sided_as_the_pruning_so_a_proven_run_shows_one_design_at_epsilon():
    out = explorer(big_space(), error=0.05, epsilon=0.1).run()
    assert out["proven"]
    at = {p["error"]: p["potentially_optimal"] for p in out["s_curve"]}
    assert at[0.1] == 1                          # the grid holds epsilon; only the best is left there
    assert at[0.5] > 1 and at[0.0] == 1


def test_pictures_say_what_was_needed_and_what_was_proven(tmp_path):
    from wafopt.present.exploration import (
        funnel_figure,
        pareto_figure,
        plot_exploration,
        s_curve_figure,
    )

    sp = space(max_units=2)
    store = tmp_path / "store.sqlite"
    explorer(sp, store=Store(store)).run()
    again = explorer(sp, store=Store(store)).run()   # everything from the store
    assert again["evaluations"]["F3"] == 0 and again["needed"]["F3"] > 0
    fig = funnel_figure(again)
    notes = {t.get_text() for t in fig.axes[0].texts}
    simulated = sum(r["fidelity"] == "F3" for r in again["table"])
    assert simulated > 0
    assert any(n.startswith(f" {simulated} ") and "0 run now" in n and "from the store" in n for n in notes), notes
    fig = pareto_figure(again)
    ax = fig.axes[0]
    assert "better" in ax.get_xlabel() and "lower is better" in ax.get_ylabel()
    labels = {t.get_text() for t in ax.texts}
    assert set(again["pareto"]) <= labels                                   # every Pareto point named
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(text.startswith("best:") for text in legend)
    star = next(c for c in ax.collections if c.get_label().startswith("best:"))
    assert len(star.get_facecolors()) == 0 or star.get_facecolors()[0][3] == 0   # hollow: the point shows
    fig = s_curve_figure(again)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("calibrated epsilon" in text and ": 1 design" in text for text in legend), legend
    assert "proven" in fig.axes[0].get_title()
    paths = plot_exploration(again, tmp_path / "plots")
    assert [p.name for p in paths] == ["funnel.png", "pareto.png", "s-curve.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_a_workloads_fixed_interleave_and_scheme_hold_on_every_design():
    # the layout is each design's to choose; what else the scenario fixes (WATOS's plain 1F1B) stays
    from pathlib import Path

    from wafopt.core.files import read_mapping
    from wafopt.explore.fidelity import scenario_for

    data, _ = read_mapping(Path(__file__).resolve().parents[1] / "instances/findings/gpt3-175b-config3-search.yaml")
    data = dict(data, parallel={"tp": 8, "pp": 7, "interleave": 1, "tp_scheme": "tatp"})
    design = {"id": "d", "rows": 7, "cols": 8, "die_tflops": 708, "dram_gb": 70, "dram_tbps": 2,
              "link_tbps": 2, "link_latency_us": 0.2}
    scenario = scenario_for(design, {"name": "gpt3", "data": data})
    assert scenario.parallel is None and scenario.fixed.tp is None
    assert scenario.fixed.interleave == 1 and scenario.fixed.tp_scheme == "tatp"
