"""The discrete-event simulator: 1F1B by hand, max-min fair sharing by hand, DRAM over time,
equality with the analytic model when contention is off, and the per-die compute bound."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wafopt.cli import main
from wafopt.costmodel.plan import plan_tasks
from wafopt.costmodel.tasks import (
    Block,
    Comm,
    Compute,
    Offload,
    PlanTasks,
    RoutedFlow,
    StageTasks,
    compute_seconds,
)
from wafopt.problems import load
from wafopt.problems.plan.evaluate import evaluate
from wafopt.simulate.calibrate import random_plans, shipped_scenarios
from wafopt.simulate.engine import MemoryOverflow, simulate
from wafopt.simulate.flows import max_min_rates

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [p for p in sorted((ROOT / "solutions").glob("*.json"))
           if json.loads(p.read_text()).get("problem") == "plan" and json.loads(p.read_text()).get("plan")]
BW = 100.0   # bytes/s of every link in the hand-built cases


def _stage(index, dies, fwd=1.0, bwd=2.0, replica=0, forward_comm=None, send_forward=None, send_backward=None,
           state=0.0, activation=0.0, transient=0.0, optimizer=0.0):
    forward = [Block((Compute("f", fwd),))]
    if forward_comm is not None:
        forward.append(Block((forward_comm,)))
    return StageTasks(index, replica, tuple(dies), tuple(forward), (), (Block((Compute("b", bwd),)),),
                      send_forward, send_backward, optimizer, state, activation, transient)


def _tasks(pipelines, microbatches, capacity=1e18, dp_allreduce=None, offloads=()):
    pipelines = tuple(tuple(p) for p in pipelines)
    return PlanTasks(microbatches, pipelines, dp_allreduce or (None,) * len(pipelines[0]), tuple(offloads),
                     capacity, BW, 1.0)


def _comm(*flows, latency=0.0):
    """A communication whose analytic duration is its time alone on the network (equal flows on
    disjoint links)."""
    made = tuple(RoutedFlow(src, dst, b, tuple(route)) for src, dst, b, route in flows)
    return Comm("c", made, latency, latency + max(f.bytes for f in made) / BW)


A, B, C, D = (0, 0), (0, 1), (0, 2), (1, 0)


# --------------------------------------------------------------------------------------------
# 1F1B by hand
# --------------------------------------------------------------------------------------------
def test_1f1b_two_stages_three_microbatches_by_hand():
    # F = 1 s, B = 2 s on both stages, free sends. Stage 0 warms up with one forward, stage 1 with none:
    # S0: F0 [0,1] F1 [1,2] B0 [4,6] F2 [6,7] B1 [7,9] B2 [10,12]
    # S1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7] F2 [7,8] B2 [8,10]
    tasks = _tasks([[_stage(0, [A], activation=10.0, state=5.0), _stage(1, [B], activation=10.0, state=5.0)]], 3)
    sim = simulate(tasks, contention=True)
    got = {(iv.stage, iv.kind[0].upper(), iv.microbatch): (iv.start, iv.end) for iv in sim.intervals
           if iv.kind != "optimizer"}
    expected = {
        (0, "F", 0): (0, 1), (0, "F", 1): (1, 2), (0, "B", 0): (4, 6), (0, "F", 2): (6, 7), (0, "B", 1): (7, 9),
        (0, "B", 2): (10, 12),
        (1, "F", 0): (1, 2), (1, "B", 0): (2, 4), (1, "F", 1): (4, 5), (1, "B", 1): (5, 7), (1, "F", 2): (7, 8),
        (1, "B", 2): (8, 10)}
    assert got == expected
    assert sim.iteration_s == 12   # = sum T_i + (m - 1) max T_i = 6 + 2 * 3
    # in-flight micro-batches at the peak: min(p - i, m) = 2 on stage 0, 1 on stage 1
    assert sim.peak_memory == {A: 5.0 + 2 * 10.0, B: 5.0 + 10.0}
    assert simulate(tasks, contention=False).iteration_s == 12


def test_sends_are_edges_not_stage_time():
    # a 0.5 s send between the stages delays stage 1 but does not occupy stage 0
    send = _comm((A, B, 50.0, [(A, B)]))
    back = _comm((B, A, 50.0, [(B, A)]))
    tasks = _tasks([[_stage(0, [A], send_forward=send), _stage(1, [B], send_backward=back)]], 1)
    sim = simulate(tasks)
    spans = {(iv.stage, iv.kind): (iv.start, iv.end) for iv in sim.intervals}
    assert spans[(1, "forward")] == (1.5, 2.5)
    assert spans[(1, "backward")] == (2.5, 4.5)
    assert spans[(0, "backward")] == (5.0, 7.0)
    assert sim.iteration_s == 7.0


# --------------------------------------------------------------------------------------------
# max-min fair sharing by hand
# --------------------------------------------------------------------------------------------
def test_two_flows_on_one_link_get_half_each():
    rates = max_min_rates(np.array([[True, True]]), np.array([10.0]))
    assert rates.tolist() == [5.0, 5.0]


def test_a_flow_limited_elsewhere_frees_bandwidth():
    # link 0 (capacity 1): flows 0 and 1; link 1 (capacity 1): flows 1, 2, 3.
    # Flow 1 is held to 1/3 by link 1, so flow 0 gets the remaining 2/3 of link 0.
    incidence = np.array([[1, 1, 0, 0], [0, 1, 1, 1]], dtype=bool)
    rates = max_min_rates(incidence, np.array([1.0, 1.0]))
    assert rates == pytest.approx([2 / 3, 1 / 3, 1 / 3, 1 / 3])


def test_a_flow_on_no_link_is_not_limited():
    assert max_min_rates(np.zeros((1, 1), dtype=bool), np.array([1.0]))[0] == np.inf


def test_two_transfers_sharing_a_link_take_twice_as_long():
    # two replicas each send 100 B over the same link at t = 1 s: alone 1 s each, shared 2 s each
    shared = ((A, B),)
    r0 = _stage(0, [A], replica=0, forward_comm=_comm((A, B, 100.0, shared)))
    r1 = _stage(0, [C], replica=1, forward_comm=_comm((C, B, 100.0, ((C, A),) + shared)))
    tasks = _tasks([[r0], [r1]], 1)
    forward = {iv.replica: iv.end for iv in simulate(tasks).intervals if iv.kind == "forward"}
    assert forward == {0: pytest.approx(3.0), 1: pytest.approx(3.0)}
    forward_free = {iv.replica: iv.end for iv in simulate(tasks, contention=False).intervals
                    if iv.kind == "forward"}
    assert forward_free == {0: 2.0, 1: 2.0}


def test_a_finished_flow_returns_its_share():
    # 50 B and 150 B on one link from t = 1: both at 50 B/s until the first ends at t = 2,
    # then the second alone at 100 B/s for its last 100 B: it ends at t = 3
    r0 = _stage(0, [A], replica=0, forward_comm=_comm((A, B, 50.0, ((A, B),))))
    r1 = _stage(0, [C], replica=1, forward_comm=_comm((C, B, 150.0, ((C, A), (A, B)))))
    forward = {iv.replica: iv.end for iv in simulate(_tasks([[r0], [r1]], 1)).intervals if iv.kind == "forward"}
    assert forward == {0: pytest.approx(2.0), 1: pytest.approx(3.0)}


# --------------------------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------------------------
def test_memory_overflow_is_an_error():
    stage = [_stage(0, [A], state=50.0, activation=30.0), _stage(1, [B], state=50.0, activation=30.0)]
    # stage 0 holds 2 micro-batches at its peak: 50 + 60 = 110 bytes
    assert simulate(_tasks([stage], 4, capacity=110.0)).peak_memory[A] == 110.0
    with pytest.raises(MemoryOverflow, match=r"die \[0, 0\] needs"):
        simulate(_tasks([stage], 4, capacity=109.0))


def test_offloaded_share_lives_on_the_helper():
    stage = _stage(0, [A], state=10.0, activation=30.0, transient=5.0)
    sim = simulate(_tasks([[stage]], 2, offloads=[Offload(A, D, 12.0)]))
    # one micro-batch in flight: 10 + (30 - 12) + transient 5 on the sender, 12 on the helper
    assert sim.peak_memory == {A: 33.0, D: 12.0}


def test_interleaved_chunks_park_their_share_of_the_offload():
    # two stages, two chunks each, two micro-batches: stage 0 holds all 4 chunk-micro-batches at
    # its peak; a chunk's activations are 15 (30 per micro-batch) and it parks 12 / 2 = 6 on D
    stages = [_stage(0, [A], state=10.0, activation=15.0, transient=5.0), _stage(1, [B], state=10.0, activation=15.0)]
    tasks = PlanTasks(2, (tuple(stages),), (None, None), (Offload(A, D, 12.0),), 1e18, BW, 1.0, 2)
    sim = simulate(tasks)
    assert sim.peak_memory[A] == 10.0 + 4 * (15.0 - 6.0) + 5.0
    assert sim.peak_memory[D] == 4 * 6.0   # = the evaluator's 2 in-flight micro-batches x 12


def test_shipped_plan_overflows_a_smaller_die():
    path = ROOT / "solutions" / "gpt3-6.7b-config3-dp.mg-wafer.json"
    data = json.loads(path.read_text())
    tasks = plan_tasks(load(ROOT / data["instance"]).instance, data["plan"])
    peak = simulate(tasks, contention=False).peak_memory_bytes
    with pytest.raises(MemoryOverflow):
        simulate(dataclasses.replace(tasks, die_capacity=0.99 * peak), contention=False)


# --------------------------------------------------------------------------------------------
# the analytic model and the compute bound
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_uncontended_simulation_equals_the_analytic_model(path):
    data = json.loads(path.read_text())
    scenario = load(ROOT / data["instance"]).instance
    ev = evaluate(scenario, data["plan"])
    sim = simulate(plan_tasks(scenario, data["plan"]), contention=False)
    assert sim.iteration_s == pytest.approx(ev.objective, rel=1e-3)
    assert sim.peak_memory_bytes <= max(row["bytes"] for row in ev.details["memory"]) * (1 + 1e-9)


def _compute_bound(tasks: PlanTasks) -> float:
    """Seconds the busiest die computes in one iteration: no schedule can be shorter."""
    busy: dict = {}
    for pipe in tasks.pipelines:
        for s in pipe:
            work = tasks.microbatches * sum(compute_seconds(p) for p in (s.forward, s.recompute, s.backward))
            for d in s.dies:
                busy[d] = busy.get(d, 0.0) + work + s.optimizer_s
    return max(busy.values())


def test_shipped_plan_is_never_faster_than_its_compute_bound():
    path = ROOT / "solutions" / "gpt3-6.7b-config3-dp.gcmr.json"
    data = json.loads(path.read_text())
    tasks = plan_tasks(load(ROOT / data["instance"]).instance, data["plan"])
    bound = _compute_bound(tasks)
    for contention in (True, False):
        assert simulate(tasks, contention=contention).iteration_s >= bound * (1 - 1e-12)


def _random_tasks(draw) -> PlanTasks:
    """A small random task graph: 1-2 replicas of 1-4 stages on a 3 x 3 mesh, random compute
    times, and random flows between random dies (routes along the first row, then the column)."""
    pp, dp, m = draw(st.integers(1, 4)), draw(st.integers(1, 2)), draw(st.integers(1, 4))
    dies = [(r, c) for r in range(3) for c in range(3)]

    def route(a, b):
        path = [a]
        while path[-1][1] != b[1]:
            path.append((path[-1][0], path[-1][1] + (1 if b[1] > path[-1][1] else -1)))
        while path[-1][0] != b[0]:
            path.append((path[-1][0] + (1 if b[0] > path[-1][0] else -1), path[-1][1]))
        return tuple(zip(path, path[1:]))

    def comm():
        flows = []
        for _ in range(draw(st.integers(1, 3))):
            a, b = draw(st.sampled_from(dies)), draw(st.sampled_from(dies))
            if a != b:
                flows.append(RoutedFlow(a, b, draw(st.floats(1.0, 500.0)), route(a, b)))
        if not flows:
            return None
        return Comm("c", tuple(flows), 0.0, max(f.bytes for f in flows) / BW)

    def phase():
        steps = [Compute("x", draw(st.floats(0.0, 3.0)))]
        c = comm()
        if c is not None:
            steps.append(c)
        return (Block(tuple(steps), draw(st.integers(1, 3))),)

    pipelines = []
    for r in range(dp):
        stages = []
        for i in range(pp):
            die = dies[(r * pp + i) % len(dies)]
            stages.append(StageTasks(i, r, (die,), phase(), phase() if draw(st.booleans()) else (), phase(),
                                     comm() if i + 1 < pp else None, comm() if i > 0 else None,
                                     draw(st.floats(0.0, 1.0)), 0.0, 1.0, 0.0))
        pipelines.append(tuple(stages))
    return PlanTasks(m, tuple(pipelines), tuple(comm() if dp > 1 else None for _ in range(pp)), (), 1e18, BW, 1.0)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_never_faster_than_the_compute_bound(data):
    tasks = _random_tasks(data.draw)
    bound = _compute_bound(tasks)
    for contention in (True, False):
        assert simulate(tasks, contention=contention).iteration_s >= bound * (1 - 1e-12)


# --------------------------------------------------------------------------------------------
# random plans of the calibration, and the command line
# --------------------------------------------------------------------------------------------
def test_random_calibration_plans_are_feasible_and_seeded():
    bases = shipped_scenarios()
    first = list(random_plans(4, 7, bases))
    again = list(random_plans(4, 7, bases))
    assert [(label, plan) for label, _, plan in first] == [(label, plan) for label, _, plan in again]
    for _, scenario, plan in first:
        assert evaluate(scenario, plan).feasible


def test_cli_simulate_json_and_plot(tmp_path, capsys):
    png = tmp_path / "sim.png"
    path = ROOT / "solutions" / "gpt3-6.7b-config3-dp.mg-wafer.json"
    assert main(["simulate", str(path), "--json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iteration_s"] > 0 and out["peak_memory_bytes"] == max(d["peak_memory_bytes"] for d in out["dies"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["simulate", str(path), "--no-contention", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iteration_s"] == pytest.approx(out["analytic_iteration_s"], rel=1e-3)


def test_calibrate_with_out_leaves_the_shipped_epsilon_alone(tmp_path, capsys):
    shipped = ROOT / "wafopt" / "data" / "calibration.json"
    before = shipped.read_bytes()
    table = tmp_path / "cal.md"
    # the seed only picks the one random plan: seed 6's (tp 8, pp 3, dp 2, three offloads) simulates
    # in 0.2 s, seed 3's in 6 s
    assert main(["calibrate", "--plans", "1", "--seed", "6", "--out", str(table), "--quiet"]) == 0
    assert "wafopt calibrate --plans 1 --seed 6" in table.read_text()
    written = json.loads(table.with_suffix(".json").read_text())
    assert written["plans"] >= 1 and written["epsilon"] == max(abs(e) for e in written["errors"])
    assert shipped.read_bytes() == before


@pytest.mark.parametrize("argv", [["simulate", "solutions/nug12.milp.json"], ["simulate", "no/such.json"],
                                  ["calibrate", "--plans", "-1"]])
def test_cli_bad_input_exits_2(argv, capsys):
    assert main([a if not a.startswith("solutions/") else str(ROOT / a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wafopt: error:") and len(err) < 500


# --------------------------------------------------------------------------------------------
# benchmarks (pytest -m slow -n 0 -s): times are printed, not asserted
# --------------------------------------------------------------------------------------------
def _llama405_plan():
    from wafopt.costmodel.scenario import Fixed, Parallel
    from wafopt.problems.plan.layouts import place_serpentine

    base = load(ROOT / "instances" / "plan" / "llama3-405b-16x16.yaml").instance
    par = Parallel(8, 32, 1)
    scenario = dataclasses.replace(base, parallel=par, fixed=Fixed(8, 32, 1))
    pipes = place_serpentine(scenario.mesh(), par, 2, 4)
    plan = {"tp": 8, "pp": 32, "dp": 1, "pipelines": [[[list(d) for d in s] for s in p] for p in pipes],
            "recompute": [s.policy_row("full") for s in scenario.workload().stages]}
    return scenario, plan


@pytest.mark.slow
def test_benchmark_simulate():
    import time

    data = json.loads((ROOT / "solutions" / "gpt3-175b-config3.gcmr.json").read_text())
    cases = [("gpt3-175b config3 gcmr", load(ROOT / data["instance"]).instance, data["plan"]),
             ("llama3-405b 16x16 tp8 pp32", *_llama405_plan())]
    for name, scenario, plan in cases:
        assert evaluate(scenario, plan).feasible
        for contention in (True, False):
            start = time.perf_counter()
            sim = simulate(plan_tasks(scenario, plan), contention=contention)
            print(f"\n{name} contention={contention}: {time.perf_counter() - start:.2f} s "
                  f"(iteration {sim.iteration_s:.4f} s)")
            assert sim.iteration_s > 0


def test_cli_trace_is_a_chrome_trace_whose_phases_sum_to_the_busy_time(tmp_path, capsys):
    trace, again = tmp_path / "trace.json", tmp_path / "again.json"
    path = ROOT / "solutions" / "gpt3-6.7b-config3-dp.mg-wafer.json"
    assert main(["simulate", str(path), "--json", "--trace", str(trace)]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert main(["simulate", str(path), "--trace", str(again)]) == 0
    assert trace.read_bytes() == again.read_bytes()   # deterministic
    events = json.loads(trace.read_text())["traceEvents"]
    required = {"X": {"name", "ph", "ts", "dur", "pid", "tid"}, "C": {"name", "ph", "ts", "pid", "args"},
                "M": {"name", "ph", "pid", "args"}}
    for e in events:
        assert required[e["ph"]] <= set(e), e
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    dies_of = {e["pid"]: e["args"]["labels"] for e in events if e["name"] == "process_labels"}
    assert len(names) == 12 and all(n.startswith("stage ") for n in names.values())   # one process per die group (stage x replica)
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {f"DRAM die [{d['die'][0]},{d['die'][1]}]" for d in sim["dies"]}   # a counter per die
    by_die = {tuple(d["die"]): d for d in sim["dies"]}
    for pid, labels in dies_of.items():
        phases = sum(e["dur"] for e in events if e["ph"] == "X" and e["pid"] == pid and e["tid"] == 1) / 1e6
        waits = sum(e["dur"] for e in events if e["ph"] == "X" and e["pid"] == pid and e["tid"] == 2) / 1e6
        first = tuple(int(x) for x in labels.split()[1].strip("[]").split(","))
        die = by_die[first]
        assert phases == pytest.approx(die["compute_s"] + die["comm_s"], rel=1e-6)   # the busy time
        assert waits == pytest.approx(die["comm_s"], rel=1e-5, abs=1e-9)
    assert {e["name"] for e in events if e["ph"] == "X" and e["tid"] == 1} == {"forward", "backward", "optimizer"}
    assert any(e["name"] == "send_forward" for e in events if e["ph"] == "X")
