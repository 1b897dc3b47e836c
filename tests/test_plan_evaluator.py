"""The full-plan evaluator on hand-computed plans (tiny model, 1 x 3 wafer, no link latency)."""

import pytest

from wafopt.core.errors import InstanceError
from wafopt.problems import evaluate
from wafopt.problems import parse_instance
from wafopt.compose.runner import run
from wafopt.core.budget import SolveOptions

TINY = {
    "problem": "plan",
    # link 1 TB/s is slower than DRAM 2 TB/s, so offloading is exposed
    "wafer": {"name": "tiny", "rows": 1, "cols": 3, "die_tflops": 100, "dram_gb": 1.0, "dram_bw_tbps": 2.0,
              "link_bw_tbps": 1.0, "link_latency_us": 0.0},
    "model": {"name": "tiny", "layers": 4, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 1000},
    "training": {"seq": 128, "micro_batch": 1, "global_batch": 3},
    "parallel": {"tp": 1, "pp": 2, "dp": 1},
}


@pytest.fixture
def scenario():
    return parse_instance(TINY).instance


def plan(**extra):
    return {"tp": 1, "pp": 2, "dp": 1, "tile": [1, 1], "pipelines": [[[[0, 0]], [[0, 2]]]], **extra}


def test_iteration_time_by_hand(scenario):
    w = scenario.workload()
    s0, s1 = w.stages
    assert w.microbatches == 3 and (s0.inflight, s1.inflight) == (2, 1) and s0.layers == s1.layers == 2
    p2p = w.p2p_bytes / 1e12                                  # one hop... here two hops, alpha = 0
    t0 = s0.fwd_s + s0.bwd_s + p2p
    t1 = s1.fwd_s + s1.bwd_s + p2p
    ev = evaluate("plan", scenario, plan())
    assert ev.feasible, ev.violations
    assert ev.objective == pytest.approx(t0 + t1 + 2 * max(t0, t1), rel=1e-12)
    mem = {tuple(m["die"]): m["bytes"] for m in ev.details["memory"]}
    assert mem[(0, 0)] == pytest.approx(s0.state_bytes + 2 * 2 * s0.activation_bytes)
    assert mem[(0, 2)] == pytest.approx(s1.state_bytes + 1 * 2 * s1.activation_bytes)
    # P2P crosses both links of the 1 x 3 row, 3 micro-batches each way
    loads = {(tuple(a), tuple(b)): v for a, b, v in ev.details["link_loads"]}
    assert loads[((0, 0), (0, 1))] == pytest.approx(3 * w.p2p_bytes)
    assert loads[((0, 2), (0, 1))] == pytest.approx(3 * w.p2p_bytes)


def test_recompute_and_offload_by_hand(scenario):
    w = scenario.workload()
    s0, s1 = w.stages
    units = [u.name for u in s0.units]
    j = units.index("gelu_input")
    x = [[0] * len(units), [0] * len(units)]
    x[0][j] = 2
    moved = 1e6
    p = plan(recompute=x, offload=[{"sender": [0, 0], "helper": [0, 1], "bytes": moved}])
    ev = evaluate("plan", scenario, p)
    assert ev.feasible, ev.violations
    per_mb = moved / s0.inflight
    exposed = 2 * (per_mb / 1e12 - per_mb / 2e12)   # link 1 TB/s vs DRAM 2 TB/s, one hop
    p2p = w.p2p_bytes / 1e12
    t0 = s0.fwd_s + s0.bwd_s + 2 * s0.units[j].recompute_s + p2p + exposed
    t1 = s1.fwd_s + s1.bwd_s + p2p
    assert ev.details["stages"][0]["offload_s"] == pytest.approx(exposed)
    assert ev.objective == pytest.approx(t0 + t1 + 2 * max(t0, t1), rel=1e-12)
    mem = {tuple(m["die"]): m["bytes"] for m in ev.details["memory"]}
    assert mem[(0, 0)] == pytest.approx(s0.state_bytes + 2 * (2 * s0.activation_bytes - 2 * s0.units[j].bytes)
                                        - moved)
    assert mem[(0, 1)] == pytest.approx(moved)


@pytest.mark.parametrize("bad, message", [
    (dict(pipelines=[[[[0, 0]], [[0, 0]]]]), "die [0, 0] is used twice"),
    (dict(pipelines=[[[[0, 0]], [[0, 3]]]]), "outside the mesh"),
    (dict(recompute=[[9] * 14, [0] * 14]), "must be an integer in 0..2"),
    (dict(recompute=[[1] + [0] * 13, [0] * 14]), "layer input checkpoint and cannot be recomputed"),
    (dict(offload=[{"sender": [0, 1], "helper": [0, 0], "bytes": 1.0}]), "sender [0, 1] runs no stage"),
    (dict(offload=[{"sender": [0, 0], "helper": [0, 1], "bytes": 1e12}]), "offloads"),
    (dict(tp=2), "must list tp = 2 dies"),
])
def test_violations_are_named(scenario, bad, message):
    ev = evaluate("plan", scenario, {**plan(), **bad})
    assert not ev.feasible
    assert any(message in v for v in ev.violations), ev.violations


def test_memory_overflow_is_a_violation():
    small = {**TINY, "wafer": {**TINY["wafer"], "dram_gb": 0.001}}
    with pytest.raises(InstanceError, match="even with full recomputation"):
        parse_instance(small)  # rejected at load
    tight = {**TINY, "training": {**TINY["training"], "seq": 2048}}
    sc = parse_instance({**tight, "wafer": {**TINY["wafer"], "dram_gb": 0.15}}).instance
    ev = evaluate("plan", sc, plan())
    assert not ev.feasible and any("GB, capacity" in v for v in ev.violations)


def test_megatron_baseline_is_evaluated(scenario):
    from wafopt.problems import Loaded

    loaded = Loaded(None, "plan", scenario, TINY, None, "tiny")
    sol = run(loaded, "megatron", SolveOptions(quiet=True))
    assert sol.status == "feasible" and sol.bound is None
    assert sol.objective == pytest.approx(evaluate("plan", scenario, sol.plan).objective)
    assert sol.plan["pipelines"] == [[[[0, 0]], [[0, 1]]]]   # serpentine: neighbours


def test_nan_offload_is_malformed_not_feasible(scenario):
    p = plan(offload=[{"sender": [0, 0], "helper": [0, 1], "bytes": float("nan")}])
    ev = evaluate("plan", scenario, p)
    assert not ev.feasible and any("bytes must be a number >= 0" in v for v in ev.violations)


def test_uniform_baseline_sits_between_megatron_and_gcmr(at_root):
    from wafopt.problems import load

    loaded = load("instances/plan/gpt3-175b-config3.yaml")
    opts = SolveOptions(quiet=True, time_limit=20)
    times = {m: run(loaded, m, opts) for m in ("megatron", "uniform", "gcmr")}
    assert all(s.status == "feasible" for s in times.values())
    assert times["gcmr"].objective <= times["uniform"].objective <= times["megatron"].objective
    assert not times["uniform"].plan.get("offload")
    # uniform: the same units recomputed in every layer of every stage
    rows = times["uniform"].plan["recompute"]
    layers = [s.layers for s in loaded.instance.workload().stages]
    assert all(v in (0, L) for row, L in zip(rows, layers) for v in row)
    assert len({tuple(v > 0 for v in row) for row in rows}) == 1
