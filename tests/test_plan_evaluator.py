"""The full-plan evaluator on hand-computed plans (tiny model, 1 x 3 wafer, no link latency)."""

import pytest

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.costmodel.scenario import Choice
from wafopt.problems import evaluate, parse_instance
from wafopt.run.runner import run

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


def one_f_one_b_two_stages(a, b, c, d, x, m=3):
    """The 1F1B timeline of 2 stages and 3 micro-batches, step by step: stage 0 (forward a,
    backward b) runs F0 F1 B0 F2 B1 B2, stage 1 (c, d) runs F0 B0 F1 B1 F2 B2; a send takes x."""
    assert m == 3
    s0_f0 = a
    s0_f1 = s0_f0 + a
    s1_b0 = max(0, s0_f0 + x) + c + d                    # its F0 waits for stage 0's F0 and the send
    s0_b0 = max(s0_f1, s1_b0 + x) + b
    s0_f2 = s0_b0 + a
    s1_b1 = max(s1_b0, s0_f1 + x) + c + d
    s0_b1 = max(s0_f2, s1_b1 + x) + b
    s1_b2 = max(s1_b1, s0_f2 + x) + c + d
    s0_b2 = max(s0_b1, s1_b2 + x) + b
    return s0_b2, s1_b2


def test_iteration_time_by_hand(scenario):
    w = scenario.workload()
    s0, s1 = w.stages
    assert w.microbatches == 3 and (s0.inflight, s1.inflight) == (2, 1) and s0.layers == s1.layers == 2
    send = w.p2p_bytes / 1e12                       # 2 hops, alpha = 0, one flow per link: no contention
    end0, end1 = one_f_one_b_two_stages(s0.fwd_s, s0.bwd_s, s1.fwd_s, s1.bwd_s, send)
    ev = evaluate("plan", scenario, plan())
    assert ev.feasible, ev.violations
    # the optimizer step of each stage follows its last backward
    assert ev.objective == pytest.approx(max(end0 + s0.optimizer_s, end1 + s1.optimizer_s), rel=1e-12)
    mem = {tuple(m["die"]): m["bytes"] for m in ev.details["memory"]}
    assert mem[(0, 0)] == pytest.approx(s0.state_bytes + 2 * (2 * s0.activation_bytes + s0.extra_activation_bytes)
                                        + s0.transient_bytes())
    assert mem[(0, 2)] == pytest.approx(s1.state_bytes + 1 * (2 * s1.activation_bytes + s1.extra_activation_bytes)
                                        + s1.transient_bytes())
    # P2P crosses both links of the 1 x 3 row, 3 micro-batches each way
    loads = {(tuple(a), tuple(b)): v for a, b, v in ev.details["link_loads"]}
    assert loads[((0, 0), (0, 1))] == pytest.approx(3 * w.p2p_bytes)
    assert loads[((0, 2), (0, 1))] == pytest.approx(3 * w.p2p_bytes)
    assert ev.details["peak_link_load_bytes"] == pytest.approx(3 * w.p2p_bytes)


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
    exposed = per_mb / 1e12 - per_mb / 2e12          # link 1 TB/s vs DRAM 2 TB/s, one hop, each way
    send = w.p2p_bytes / 1e12
    forward0 = s0.fwd_s + exposed                    # the store follows the forward
    backward0 = exposed + 2 * s0.units[j].recompute_s + s0.bwd_s   # load, recompute, backward
    end0, end1 = one_f_one_b_two_stages(forward0, backward0, s1.fwd_s, s1.bwd_s, send)
    assert ev.details["stages"][0]["offload_s"] == pytest.approx(2 * exposed)
    assert ev.objective == pytest.approx(max(end0 + s0.optimizer_s, end1 + s1.optimizer_s), rel=1e-12)
    mem = {tuple(m["die"]): m["bytes"] for m in ev.details["memory"]}
    kept = 2 * s0.activation_bytes - 2 * s0.units[j].bytes + s0.extra_activation_bytes
    transient = s0.transient_bytes() + s0.units[j].bytes    # the regenerated unit of one layer
    assert mem[(0, 0)] == pytest.approx(s0.state_bytes + 2 * kept + transient - moved)
    assert mem[(0, 1)] == pytest.approx(moved)


def test_full_recomputation_rows(scenario):
    s0, s1 = scenario.workload().stages
    base = evaluate("plan", scenario, plan())
    full = evaluate("plan", scenario, plan(recompute=["full", [0] * len(s1.units)]))
    assert full.feasible, full.violations
    # the whole forward again in each backward of stage 0 (tp = 1: no collectives to repeat)
    assert full.details["stages"][0]["recompute_s"] == pytest.approx(s0.fwd_s - _embedding_s(s0), rel=1e-12)
    assert full.objective > base.objective
    mem = {tuple(m["die"]): m["bytes"] for m in full.details["memory"]}
    assert mem[(0, 0)] == pytest.approx(s0.state_bytes + 2 * (2 * s0.boundary_bytes + s0.extra_activation_bytes)
                                        + s0.transient_bytes("full"))


def _embedding_s(stage):
    steps, repeat = stage.forward[0]
    assert steps[0].name == "embedding" and repeat == 1
    return steps[0].seconds


def test_tp_scheme_per_stage():
    two = {**TINY, "wafer": {**TINY["wafer"], "rows": 2}, "parallel": {"tp": 2, "pp": 2, "dp": 1}}
    sc = parse_instance(two).instance
    pipes = [[[[0, 0], [1, 0]], [[0, 1], [1, 1]]]]
    base = {"tp": 2, "pp": 2, "dp": 1, "pipelines": pipes}
    megatron = evaluate("plan", sc, base)
    mixed = evaluate("plan", sc, {**base, "tp_scheme": ["tatp", "megatron"]})
    assert megatron.feasible and mixed.feasible, mixed.violations
    assert mixed.details["tp_scheme"] == ["tatp", "megatron"]
    assert mixed.details["stages"][1] == {**megatron.details["stages"][1], "send_backward_s":
                                          mixed.details["stages"][1]["send_backward_s"],
                                          "p2p_s": mixed.details["stages"][1]["p2p_s"]}
    assert mixed.details["stages"][0]["fwd_s"] != megatron.details["stages"][0]["fwd_s"]
    bad = evaluate("plan", sc, {**base, "tp_scheme": ["tatp"]})
    assert not bad.feasible and any("tp_scheme" in v for v in bad.violations)


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
    sc = parse_instance({**tight, "wafer": {**TINY["wafer"], "dram_gb": 0.25}}).instance
    ev = evaluate("plan", sc, plan())
    assert not ev.feasible and any("GB, capacity" in v for v in ev.violations)


def test_megatron_baseline_is_evaluated(scenario):
    from wafopt.problems import Loaded

    loaded = Loaded(None, "plan", scenario, TINY, None, "tiny")
    sol = run(loaded, "megatron", SolveOptions(quiet=True))
    # a fixed layout: the compute floor `certify` derives is the bound at solve time too
    assert sol.bound_kind == "compute-floor" and sol.bound <= sol.objective
    # nothing to recompute here: the plan meets its compute floor, which proves it optimal
    assert sol.status == ("optimal" if sol.bound == pytest.approx(sol.objective, rel=1e-9) else "feasible")
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


# --- layer split and micro-batch size -----------------------------------------------------------------

def test_a_non_uniform_split_is_timed_by_hand(scenario):
    """layers [3, 1]: stage 0 runs the embedding and 3 layers, stage 1 one layer and the LM head."""
    even = evaluate("plan", scenario, plan(layers=[2, 2]))
    assert even.objective == evaluate("plan", scenario, plan()).objective   # the default is the even split
    w = scenario.workload(Choice(layers=[3, 1]))
    s0, s1 = w.stages
    assert (s0.layers, s1.layers, s1.first_layer) == (3, 1, 3)
    two = scenario.workload()   # [2, 2]: one layer moved adds one layer's compute to stage 0, takes it from 1
    assert s0.fwd_s - two.stages[0].fwd_s == pytest.approx(two.stages[1].fwd_s - s1.fwd_s, rel=1e-9)
    send = w.p2p_bytes / 1e12
    end0, end1 = one_f_one_b_two_stages(s0.fwd_s, s0.bwd_s, s1.fwd_s, s1.bwd_s, send)
    ev = evaluate("plan", scenario, plan(layers=[3, 1]))
    assert ev.feasible, ev.violations
    assert ev.objective == pytest.approx(max(end0 + s0.optimizer_s, end1 + s1.optimizer_s), rel=1e-12)
    assert ev.details["layers"] == [3, 1] and [r["layers"] for r in ev.details["stages"]] == [3, 1]
    mem = {tuple(m["die"]): m["bytes"] for m in ev.details["memory"]}
    assert mem[(0, 0)] == pytest.approx(s0.state_bytes + 2 * (3 * s0.activation_bytes + s0.extra_activation_bytes)
                                        + s0.transient_bytes())
    # recompute rows are bounded by each stage's own layers
    units = len(s0.units)
    row = [0] * units
    row[1] = 3
    assert evaluate("plan", scenario, plan(layers=[3, 1], recompute=[row, [0] * units])).feasible
    bad = evaluate("plan", scenario, plan(layers=[3, 1], recompute=[[0] * units, row]))
    assert not bad.feasible and any("recompute[1][1] = 3 must be an integer in 0..1" in v for v in bad.violations)


@pytest.mark.parametrize("layers, why", [([4, 0], "positive integers"), ([1, 2, 1], "pp = 2"), ([2, 3], "sum to 5"),
                                         ([True, 3], "positive integers"), ("2,2", "positive integers")])
def test_a_bad_split_is_rejected_with_the_field_named(scenario, layers, why):
    ev = evaluate("plan", scenario, plan(layers=layers))
    assert not ev.feasible and any(why in v for v in ev.violations), ev.violations


def test_the_micro_batch_size_must_be_one_the_scenario_allows():
    data = dict(TINY, training={"seq": 128, "micro_batch": [1, 3], "global_batch": 3})
    sc = parse_instance(data).instance
    assert sc.training.micro_batches == (1, 3) and sc.training.micro_batch == 1
    ev = evaluate("plan", sc, plan())
    assert not ev.feasible and any("must give micro_batch" in v for v in ev.violations)
    ev = evaluate("plan", sc, plan(micro_batch=2))
    assert not ev.feasible and any("not one of the scenario's sizes 1, 3" in v for v in ev.violations)
    one, three = evaluate("plan", sc, plan(micro_batch=1)), evaluate("plan", sc, plan(micro_batch=3))
    assert one.feasible and three.feasible
    assert (one.details["microbatches"], three.details["microbatches"]) == (3, 1)
    w = sc.workload(Choice(micro_batch=3))
    s0, s1 = w.stages
    send = w.p2p_bytes / 1e12   # m = 1: F0 on stage 0, the send, F0 B0 on stage 1, the send back, B0
    end = s0.fwd_s + send + s1.fwd_s + s1.bwd_s + send + s0.bwd_s
    assert three.objective == pytest.approx(max(end + s0.optimizer_s, s0.fwd_s + send + s1.fwd_s + s1.bwd_s
                                                + s1.optimizer_s), rel=1e-12)
    # a scenario with one size: a plan may name it, and only it
    assert evaluate("plan", parse_instance(TINY).instance, plan(micro_batch=1)).objective == \
        evaluate("plan", parse_instance(TINY).instance, plan()).objective
    assert not evaluate("plan", parse_instance(TINY).instance, plan(micro_batch=3)).feasible
