"""The per-operator cost model (hand-computed on a tiny layer), model state presets, transient
memory, replicated parameters, recomputation and link contention."""

import json
import random

import pytest

from wafopt.cli import main
from wafopt.core.errors import InstanceError
from wafopt.costmodel.model import build_workload
from wafopt.costmodel.network import send_share
from wafopt.costmodel.operators import build_layer
from wafopt.costmodel.stage import FULL, recompute_row
from wafopt.costmodel.training import STATE_PRESETS, Training, parse_training
from wafopt.hardware.catalog import resolve_llm, resolve_wafer
from wafopt.problems import evaluate, parse_instance
from wafopt.problems.plan.layouts import tile_dies

# A layer small enough to cost by hand: s = 4, b = 1, h = 8, a = 2 heads, ffn 32, t = 2, fp16.
# Per die: s*b = 4 tokens, s*b*h = 32, h/t = 4 (Q width), K/V width 4, one head, s^2 scores = 16,
# MLP width 16; a tensor of s*b*h elements is 64 bytes.
TINY = {"name": "tiny", "layers": 2, "hidden": 8, "heads": 2, "ffn_hidden": 32, "vocab": 16}


def layer(sp=False, attention="standard", tp=2, scheme="megatron", fused=False):
    training = Training(4, 1, 2, attention=attention, sequence_parallel=sp, fused_elementwise=fused)
    return build_layer(resolve_llm(TINY), training, tp, False, scheme)


def ops(table):
    return {o.name: o for o in table.ops}


# --- one layer by hand ------------------------------------------------------------------------
def test_standard_attention_operators_by_hand():
    o = ops(layer())
    # (fwd FLOPs, fwd DRAM bytes): GEMM flops 2*m*n*k; bytes = inputs + weights + outputs (2 B each)
    expected = {
        "ln1": (5 * 32, 64 + 64),
        "qkv": (2 * 4 * 8 * (4 + 4 + 4), 2 * 8 * 12 + 64 + 2 * 4 * 12),      # weights 8 x 12
        "attn_scores": (2 * 16 * 4, 2 * 4 * 8 + 2 * 16),                        # Q K^T over 16 scores
        "softmax": (5 * 16, 32 + 32),
        "attn_dropout": (2 * 16, 32 + 32 + 16),                                 # + 1-byte mask
        "attn_over_values": (2 * 16 * 4, 32 + 2 * 4 * 4 + 2 * 4 * 4),
        "out_proj": (2 * 4 * 4 * 8, 2 * 4 * 8 + 2 * 4 * 4 + 64),
        "attn_residual": (3 * 32, 2 * 64 + 64 + 32),
        "ln2": (5 * 32, 64 + 64),
        "fc1": (2 * 4 * 8 * 16, 2 * 8 * 16 + 64 + 2 * 4 * 16),
        "activation": (8 * 4 * 16, 2 * 4 * 16 * 2),
        "fc2": (2 * 4 * 16 * 8, 2 * 16 * 8 + 2 * 4 * 16 + 64),
        "mlp_residual": (3 * 32, 2 * 64 + 64 + 32),
    }
    assert set(o) == set(expected)
    for name, (flops, nbytes) in expected.items():
        assert (o[name].fwd.flops, o[name].fwd.bytes) == (flops, nbytes), name
        assert o[name].bwd.flops == 2 * flops, name
    # a GEMM's backward: both gradients read and write activations twice, reads the weights once
    # and accumulates their gradient in fp32 (read + write, 4 B each)
    assert o["qkv"].bwd.bytes == 2 * (64 + 96) + 2 * 96 + 2 * 4 * 96
    # Korthikanti's tensor-parallel total, s*b*h*(10 + 24/t + 5*a*s/(h*t)) = 32 * 24.5
    assert layer().activation_bytes == 784


def test_fused_elementwise_chains_skip_the_dram_read_of_their_inputs():
    plain, fused = ops(layer()), ops(layer(fused=True))
    # element-wise after element-wise: ln1 (after the previous layer's residual), ln2 (after the
    # attention residual), attention dropout (after softmax): 64 + 64 + 2 x 16 = 160 bytes less
    skipped = {"ln1": 64, "ln2": 64, "attn_dropout": 32}
    for name, op in plain.items():
        saved = skipped.get(name, 0)
        assert op.fwd.bytes - fused[name].fwd.bytes == saved, name
        assert op.bwd.bytes - fused[name].bwd.bytes == 2 * saved, name
        assert op.fwd.flops == fused[name].fwd.flops and op.stores == fused[name].stores
    assert parse_training({"seq": 4, "micro_batch": 1, "global_batch": 2, "fused_elementwise": True}).fused_elementwise


def test_flash_attention_by_hand():
    table = layer(attention="flash")
    o = ops(table)
    assert "softmax" not in o and "attn_scores" not in o
    flash = o["flash_attention"]
    assert flash.fwd.flops == 2 * 16 * 4 * 2 + 7 * 16       # both GEMMs + softmax and dropout
    assert flash.fwd.bytes == 2 * 4 * 12 + 2 * 4 * 4 + 4 * 1 * 4  # reads Q, K, V; writes O and fp32 stats
    assert flash.bwd.flops == 2.5 * 256 + 2 * 112           # the backward recomputes Q K^T
    # no score matrix stored: 784 - (32 + 16 + 32) + 16 bytes of row statistics
    assert table.activation_bytes == 720
    assert table.fwd_flops == layer().fwd_flops


def test_collectives_with_and_without_sequence_parallelism():
    plain, sp = layer(), layer(sp=True)
    kinds = lambda t, phase: [(c.kind, c.op) for c in t.collectives(phase)]
    assert kinds(plain, "forward") == [("all_reduce", "out_proj"), ("all_reduce", "fc2")]
    assert kinds(plain, "backward") == [("all_reduce", "fc1"), ("all_reduce", "qkv")]
    assert kinds(sp, "forward") == [("all_gather", "qkv"), ("reduce_scatter", "out_proj"),
                                    ("all_gather", "fc1"), ("reduce_scatter", "fc2")]
    # backward: the output gradients are gathered, the inputs re-gathered for the weight gradients
    assert kinds(sp, "backward") == [("all_gather", "fc2"), ("all_gather", "fc1"), ("reduce_scatter", "fc1"),
                                     ("all_gather", "out_proj"), ("all_gather", "qkv"), ("reduce_scatter", "qkv")]
    sent = lambda t: sum(c.bytes_sent for c in t.collectives("forward") + t.collectives("backward"))
    # a ring all-reduce of 64 bytes on 2 dies sends 2 (t-1)/t * 64 = 64; all-gather/reduce-scatter 32
    assert sent(plain) == 4 * 64
    assert sent(sp) == 10 * 32          # 25 % more: the backward re-gather
    # SP shards the norms, dropouts and residuals: s*b*h/t * (34 + 5*a*s/h) = 16 * 39
    assert sp.activation_bytes == 624
    assert ops(sp)["ln1"].fwd.flops == 5 * 16 and ops(sp)["attn_residual"].fwd.bytes == (2 * 32 + 32 + 16)


def test_tatp_streams_replace_the_collectives():
    t = layer(scheme="tatp")
    fwd = t.collectives("forward")
    assert [c.kind for c in fwd] == ["stream"] * 5
    gemms = [c for c in fwd if c.op != "attn_scores"]
    # each GEMM streams the smaller of its sub-weight and a token block (TEMP's selective transfer):
    # qkv weights 96 params / 2 dies = 96 B vs tokens 64 / 2 = 32 B
    assert len(gemms) == 4 and all(c.tensor_bytes == 32 for c in gemms)
    # attention over the sequence split: the other die's K and V blocks, half from each side
    # (K and V of one token block: 2 x 2 bytes x s b x h / t = 64 bytes, 32 per direction)
    (kv,) = [c for c in fwd if c.op == "attn_scores"]
    assert kv.tensor_bytes == 32
    assert len(t.collectives("backward")) == 10       # input and weight gradient streams, K/V and their gradients
    assert t.activation_bytes == layer(sp=True).activation_bytes   # nothing replicated


def test_tatp_prices_the_busiest_die_in_whole_tokens_and_rows():
    # t = 3 on 4 tokens and 8 rows: the busiest die holds 2 tokens, 3 rows of h, 11 rows of the MLP
    # width 32 (not 4/3 tokens and 8/3 rows)
    t3 = layer(tp=3, scheme="tatp")
    o = ops(t3)
    assert o["qkv"].fwd.flops == 2 * 2 * 8 * (8 + 2 * 8)            # its 2 tokens x all of QKV
    assert o["qkv"].weights == 3 * (8 + 2 * 8)                       # 3 rows of the 8 x 24 weight
    assert o["out_proj"].weights == 3 * 8 and o["fc1"].weights == 3 * 32 and o["fc2"].weights == 11 * 8
    assert o["attn_scores"].fwd.flops == 2 * 2 * 4 * 8               # 2 query tokens x 4 keys x h
    # every stored tensor is a 2-token block, the same as on two dies
    assert t3.activation_bytes == layer(tp=2, scheme="tatp").activation_bytes
    # streams: a 2-token block (2 x 2 x 8 B) is smaller than any sub-weight; K/V blocks of 2 tokens
    fwd = t3.collectives("forward")
    assert all(c.tensor_bytes == 32 for c in fwd if c.op != "attn_scores")
    assert [c.tensor_bytes for c in fwd if c.op == "attn_scores"] == [2 * 2 * 8]
    # where t divides evenly the busiest die is every die: a quarter of the tokens on 4 dies
    assert ops(layer(tp=4, scheme="tatp"))["qkv"].fwd.flops == 2 * 1 * 8 * 24


def test_tatp_pipeline_send_is_the_busiest_dies_tokens():
    assert send_share(64.0, 3, tokens=4) == 32.0       # 2 of 4 tokens
    assert send_share(64.0, 3) == pytest.approx(64 / 3)   # Megatron: an even element split
    assert send_share(64.0, 4, tokens=4) == 16.0


def test_full_recompute_flops_equal_forward_flops():
    llm, wafer = resolve_llm("gpt3-175b"), resolve_wafer("watos-config3")
    for training in (Training(2048, 1, 8), Training(2048, 1, 8, attention="flash", sequence_parallel=True)):
        stage = build_workload(llm, training, wafer, 8, 7).stages[3]   # a middle stage: layers only
        assert stage.full_recompute_flops == pytest.approx(stage.fwd_flops, rel=1e-12)
        assert stage.recompute_seconds(FULL) == stage.full_recompute_s
        # unit-by-unit regeneration re-runs only what the backward needs: not FC2's output
        units = stage.recompute_seconds([stage.layers if u.recomputable else 0 for u in stage.units])
        assert units < stage.full_recompute_s


def test_selective_recompute_is_the_attention_core():
    stage = build_workload(resolve_llm("gpt3-175b"), Training(2048, 1, 8), resolve_wafer("watos-config3"), 8, 7).stages[0]
    row = recompute_row(stage, "selective")
    dropped = {u.name for u, x in zip(stage.units, row) if x}
    assert dropped == {"softmax_output", "attn_dropout_mask", "attn_dropout_output"}
    # Korthikanti Sec. 5: the 5as/h term disappears, 10 + 24/t remains (s b h per layer, t = 8)
    kept = sum(u.bytes for u, x in zip(stage.units, row) if not x)
    assert kept == pytest.approx(2048 * 12288 * (10 + 24 / 8), rel=1e-12)


# --- model state ------------------------------------------------------------------------------
def test_state_byte_presets():
    assert Training(1, 1, 1).states.total == 18
    assert {k: v.total for k, v in STATE_PRESETS.items()} == {"megatron": 18, "mixed16": 16, "watos14": 14}
    assert parse_training({"seq": 1, "micro_batch": 1, "global_batch": 1}).states == STATE_PRESETS["megatron"]
    assert parse_training({"seq": 1, "micro_batch": 1, "global_batch": 1, "states": "watos14"}).states.total == 14
    custom = parse_training({"seq": 1, "micro_batch": 1, "global_batch": 1,
                             "states": {"weights": 2, "master": 4, "moments": 4, "grads": 2}})
    assert custom.states.total == 12
    # the older total-per-parameter key reads as the preset with that total
    assert parse_training({"seq": 1, "micro_batch": 1, "global_batch": 1,
                           "state_bytes_per_param": 16}).states == STATE_PRESETS["mixed16"]
    with pytest.raises(InstanceError, match=r"training\.state_bytes_per_param"):
        parse_training({"seq": 1, "micro_batch": 1, "global_batch": 1, "state_bytes_per_param": 15})
    with pytest.raises(InstanceError, match=r"training\.states"):
        parse_training({"seq": 1, "micro_batch": 1, "global_batch": 1, "states": "fp8"})


def test_megatron_gpt3_state_45_5625_gib():
    """Megatron-LM's GPT-3 175B at t = 8, p = 8: 12 layers of 12 h^2 / 8 parameters, 18 B each."""
    work = build_workload(resolve_llm("gpt3-175b"), Training(2048, 1, 8), resolve_wafer("watos-config1"), 8, 8)
    middle = work.stages[3]
    matrices = sum(c * sum(o.weights for o in t.ops if o.name in ("qkv", "out_proj", "fc1", "fc2"))
                   for t, c in middle.tables)
    assert matrices == 12 * 12 * 12288 ** 2 / 8
    assert matrices * 18 / 2 ** 30 == 45.5625
    assert middle.state_bytes / 2 ** 30 == pytest.approx(45.5625, rel=3e-4)   # + replicated norms


def test_llama3_405b_watos14_state_is_5670_gb():
    llm = resolve_llm("llama3-405b")
    training = Training(4096, 1, 8, states=STATE_PRESETS["watos14"])
    work = build_workload(llm, training, resolve_wafer({"preset": "watos-config1", "rows": 16, "cols": 16}), 8, 16)
    assert sum(s.state_bytes for s in work.stages) * work.tp / 1e9 == pytest.approx(5670, rel=0.01)


def test_distributed_optimizer_shards_master_and_moments():
    llm, wafer = resolve_llm("gpt3-6.7b"), resolve_wafer("watos-config3")
    plain = build_workload(llm, Training(2048, 1, 16), wafer, 4, 4, 2).stages[1]
    sharded = build_workload(llm, Training(2048, 1, 16, distributed_optimizer=True), wafer, 4, 4, 2).stages[1]
    assert plain.state_bytes == pytest.approx(plain.params * 18)
    assert sharded.state_bytes == pytest.approx(plain.params * (2 + 4 + 12 / 2))
    assert sharded.optimizer_s < plain.optimizer_s


def test_replicated_parameters_are_not_divided_by_t():
    llm = resolve_llm("gpt3-175b")   # learned positions 2048 x h, two norms per layer, a final norm
    h, V, t = 12288, 51200, 8   # GPT-3's 50257 padded to a multiple of 128 x 8 (Megatron-LM)
    training = Training(2048, 1, 8)
    work = build_workload(llm, training, resolve_wafer("watos-config1"), t, 8)
    first, middle, last = work.stages[0], work.stages[3], work.stages[-1]
    per_layer = 12 * h * h / t + 4 * h          # matrices split, gains and biases of two norms whole
    assert middle.params == pytest.approx(12 * per_layer, rel=1e-12)
    assert first.params == pytest.approx(12 * per_layer + V * h / t + 2048 * h, rel=1e-12)
    assert last.params == pytest.approx(12 * per_layer + 2 * h + V * h / t, rel=1e-12)  # tied copy


# --- transient memory ---------------------------------------------------------------------------
def test_transient_memory_is_counted_and_reported():
    llm, wafer = resolve_llm("gpt3-175b"), resolve_wafer("watos-config3")
    stage = build_workload(llm, Training(2048, 1, 8), wafer, 8, 7).stages[2]
    none = stage.transient_bytes()
    full = stage.transient_bytes(FULL)
    assert none > 0                        # activation gradients of the softmax: 2 x 2 a s^2 / t bytes
    assert none >= 2 * 2 * 96 * 2048 ** 2 / 8
    # full recomputation regenerates one layer's activations on top
    assert full == pytest.approx(none + stage.activation_bytes - stage.boundary_bytes)
    assert stage.memory_bytes(FULL) == pytest.approx(
        stage.state_bytes + stage.inflight * stage.kept_bytes(FULL) + full)
    workspace = build_workload(llm, Training(2048, 1, 8, workspace_bytes=1e9), wafer, 8, 7).stages[2]
    assert workspace.transient_bytes() == pytest.approx(none + 1e9)


SCENARIO = {"problem": "plan",
            "wafer": {"name": "w", "rows": 1, "cols": 2, "die_tflops": 100, "dram_gb": 1.0, "dram_bw_tbps": 1.0,
                      "link_bw_tbps": 1.0},
            "model": {"name": "m", "layers": 2, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 1000},
            "training": {"seq": 512, "micro_batch": 1, "global_batch": 2},
            "parallel": {"tp": 1, "pp": 2}}


def test_transient_memory_decides_the_fit_test():
    """A DRAM that holds state + checkpoints but not the transient memory is rejected at load."""
    stages = parse_instance(SCENARIO).instance.workload().stages
    without = [s.state_bytes + s.inflight * s.kept_bytes(FULL) for s in stages]
    needed = [s.full_recompute_bytes() for s in stages]
    assert all(n > w for n, w in zip(needed, without))
    tight = max(max(without), sum(without) / 2) * (1 + 1e-6)   # enough per die and pooled, without transients
    assert tight < min(max(needed), sum(needed) / 2)
    with pytest.raises(InstanceError, match="even with full recomputation"):
        parse_instance({**SCENARIO, "wafer": {**SCENARIO["wafer"], "dram_gb": tight / 1e9}})
    roomy = {**SCENARIO, "wafer": {**SCENARIO["wafer"], "dram_gb": max(needed) * 1.01 / 1e9}}
    sc = parse_instance(roomy).instance
    plan = {"tp": 1, "pp": 2, "pipelines": [[[[0, 0]], [[0, 1]]]], "recompute": [FULL, FULL]}
    ev = evaluate("plan", sc, plan)
    assert ev.feasible, ev.violations
    assert ev.details["transient_bytes"] == pytest.approx(max(s.transient_bytes(FULL) for s in stages))


# --- link contention --------------------------------------------------------------------------
def test_scattered_plan_is_slower_by_its_busiest_link():
    """Same layout, recomputation and work; only the dies of the TP groups differ. The scattered
    plan's extra time is at least its extra busiest-link load on the compact plan's TP comm."""
    data = {"problem": "plan", "wafer": "watos-config3", "model": "gpt3-175b",
            "training": {"seq": 2048, "micro_batch": 1, "global_batch": 64, "states": "watos14"},
            "parallel": {"tp": 8, "pp": 7, "dp": 1}}
    sc = parse_instance(data).instance
    dies = [(r, c) for r in range(8) for c in range(7)]
    compact = [[list(d) for d in tile_dies((0, c), 8, 1)] for c in range(7)]   # a column per stage, 2-hop ring
    perm = dies[:]
    random.Random(0).shuffle(perm)
    scattered = [[list(d) for d in perm[8 * i:8 * i + 8]] for i in range(7)]
    results = {}
    for name, stages in (("compact", compact), ("scattered", scattered)):
        ev = evaluate("plan", sc, {"tp": 8, "pp": 7, "pipelines": [stages], "recompute": [FULL] * 7})
        assert ev.feasible, ev.violations
        results[name] = ev
    c, s = results["compact"], results["scattered"]
    ratio = s.details["peak_link_load_bytes"] / c.details["peak_link_load_bytes"]
    assert ratio > 2
    comm_share = c.details["tp_comm_share"]
    assert comm_share > 0
    assert s.objective / c.objective >= 1 + (ratio - 1) * comm_share
    assert s.details["busiest_link"] is not None
    assert max(r["tp_kappa"] for r in s.details["stages"]) > 1 == max(r["tp_kappa"] for r in c.details["stages"])


# --- the workload command -----------------------------------------------------------------------
def test_workload_command_json(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({**SCENARIO, "parallel": {"tp": 1, "pp": 2}}))
    assert main(["workload", str(path), "--recompute", "full", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    per = rep["per_layer"]
    assert per["recompute_flops"] == pytest.approx(per["fwd_flops"])
    assert per["tp_bytes"] == 0                                    # tp = 1
    assert {"fwd_s", "bwd_s", "recompute_s", "fwd_flops", "activation_bytes"} <= set(per)
    assert len(rep["per_stage"]) == 2
    assert all(s["transient_bytes"] > 0 and s["state_bytes"] > 0 and s["activation_bytes"] > 0
               for s in rep["per_stage"])
    big = tmp_path / "big.yaml"
    big.write_text(json.dumps({**SCENARIO, "wafer": {**SCENARIO["wafer"], "cols": 4},
                               "training": {"seq": 512, "micro_batch": 1, "global_batch": 4}}))
    assert main(["workload", str(big), "--tp", "2", "--pp", "2", "--sequence-parallel", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    # t = 2 with SP: 10 all-gathers / reduce-scatters of s*b*h*2 bytes, each sending half of it
    assert rep["per_layer"]["tp_bytes"] == pytest.approx(10 * 512 * 256 * 2 / 2)
    assert main(["workload", str(path), "--micro-batch", "3"]) == 2   # global batch 2 is not a multiple


def test_full_recomputation_with_sequence_parallelism_gathers_each_input_once():
    # the recomputed forward all-gathers the qkv and fc1 inputs; the backward then skips its
    # re-gathers (else the TP bytes of a layer would count them twice)
    llm, wafer = resolve_llm("gpt3-175b"), resolve_wafer("watos-config3")
    stage = build_workload(llm, Training(2048, 1, 8, sequence_parallel=True), wafer, 8, 7).stages[3]
    table = stage.tables[0][0]
    forward = sum(c.bytes_sent for c in table.collectives("forward"))
    regathers = sum(c.bytes_sent for c in table.collectives("backward") if c.purpose.startswith("re-gather"))
    assert regathers > 0
    assert stage.tp_bytes_per_layer(FULL) == pytest.approx(stage.tp_bytes_per_layer() + forward - regathers)
    steps = [st for steps, _ in stage.backward_after_full for st in steps]
    assert not any(getattr(st, "collective", None) and st.collective.purpose.startswith("re-gather") for st in steps)
