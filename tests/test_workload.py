"""The workload model: Korthikanti activation sizes, stage split, 1F1B, FLOPs, traffic."""

import dataclasses

import pytest

from wafopt.core.errors import InstanceError
from wafopt.costmodel.layout import split_layers
from wafopt.costmodel.model import LayoutWorkload, build_workload
from wafopt.costmodel.stage import FULL, StageWorkload
from wafopt.costmodel.training import STATE_PRESETS, Training, parse_training
from wafopt.hardware.catalog import resolve_llm, resolve_wafer

S, B, H, A, L, V = 2048, 1, 12288, 96, 96, 50257   # GPT-3 175B (Korthikanti et al. Table 3)
PADDED = {1: 50304, 8: 51200}   # V padded to a multiple of 128 x tp (Megatron-LM's default)
SBH = S * B * H

GPT3 = resolve_llm("gpt3-175b")
CONFIG3 = resolve_wafer("watos-config3")


def gpt3(tp=1, pp=1, dp=1, global_batch=8, **flags) -> LayoutWorkload:
    training = Training(seq=S, micro_batch=B, global_batch=global_batch, **flags)
    return build_workload(GPT3, training, CONFIG3, tp, pp, dp)


def units(stage: StageWorkload) -> dict[str, float]:
    return {u.name: u.bytes for u in stage.units}


# --- activation memory (Korthikanti et al. 2022, section 4) -------------------------------------
def test_gpt3_activation_bytes_no_parallelism():
    assert 5 * A * S / H == 80
    stage = gpt3().stages[0]
    assert stage.activation_bytes == SBH * (10 + 24 + 80) == 2_868_903_936


def test_gpt3_activation_bytes_tensor_parallel():
    t = 8
    stage = gpt3(tp=t).stages[0]
    assert stage.activation_bytes == pytest.approx(SBH * (10 + 24 / t + 5 * A * S / (H * t)),
                                                   rel=1e-12)


def test_gpt3_activation_bytes_sequence_parallel():
    t = 8
    stage = gpt3(tp=t, sequence_parallel=True).stages[0]
    assert stage.activation_bytes == pytest.approx(SBH / t * (34 + 5 * A * S / H), rel=1e-12)
    assert stage.boundary_bytes == pytest.approx(2 * SBH / t)


def test_korthikanti_unit_sizes():
    t = 4
    u = units(gpt3(tp=t).stages[0])
    assert u["ln1_input"] == u["ln2_input"] == u["qkv_input"] == u["fc1_input"] == 2 * SBH
    assert u["attn_residual_dropout_mask"] == u["mlp_dropout_mask"] == SBH
    assert u["qk"] == 4 * SBH / t and u["v"] == 2 * SBH / t and u["proj_input"] == 2 * SBH / t
    assert u["gelu_input"] == u["fc2_input"] == 8 * SBH / t
    assert u["softmax_output"] == u["attn_dropout_output"] == 2 * A * S * S * B / t
    assert u["attn_dropout_mask"] == A * S * S * B / t


def test_flash_attention_removes_the_s2_terms():
    t = 8
    plain = units(gpt3(tp=t).stages[0])
    flash_stage = gpt3(tp=t, attention="flash").stages[0]
    flash = units(flash_stage)
    for name in ("softmax_output", "attn_dropout_mask", "attn_dropout_output"):
        assert name in plain and name not in flash
    # what remains: the linear terms plus FlashAttention's fp32 row statistics
    stats = 4 * A * S * B / t
    assert flash["softmax_stats"] == stats
    assert flash_stage.activation_bytes == pytest.approx(SBH * (10 + 24 / t) + stats, rel=1e-12)
    # linear in the sequence length once the s^2 terms are gone
    longer = build_workload(GPT3, Training(seq=2 * S, micro_batch=B, global_batch=8,
                                           attention="flash"), CONFIG3, t, 1)
    assert longer.stages[0].activation_bytes == pytest.approx(2 * flash_stage.activation_bytes)


@pytest.mark.parametrize("model", ["gpt3-175b", "llama3-70b", "gshard-137b", "deepseek-v3"])
@pytest.mark.parametrize("flash, sp", [(False, False), (True, False), (False, True), (True, True)])
def test_units_sum_to_the_stage_total(model, flash, sp):
    llm = resolve_llm(model)
    training = Training(seq=4096, micro_batch=2, global_batch=16, attention="flash" if flash else "standard",
                        sequence_parallel=sp)
    work = build_workload(llm, training, resolve_wafer("watos-config1"), 8, 8)
    for stage in work.stages:
        assert stage.activation_bytes == pytest.approx(sum(u.bytes for u in stage.units))
        assert len({u.name for u in stage.units}) == len(stage.units)
        assert all(u.bytes > 0 and u.recompute_flops > 0 and u.recompute_s > 0
                   for u in stage.units)


# --- memory: state, 1F1B, recomputation ---------------------------------------------------------
def test_llama3_405b_model_state_matches_watos():
    llm = resolve_llm("llama3-405b")
    assert llm.total_params * 14 == pytest.approx(5670e9, rel=0.01)   # WATOS section V-F
    training = Training(seq=4096, micro_batch=1, global_batch=8, states=STATE_PRESETS["watos14"])
    work = build_workload(llm, training, resolve_wafer("watos-config1"), 8, 8)
    # untied embeddings: the per-die shares add up to the whole model, but for the norms every
    # TP rank keeps whole (126 layers x 4h + the final 2h, 7 extra copies: 1.4e-4 of the model)
    total = sum(s.state_bytes for s in work.stages) * work.tp
    padding = (129024 - 128256) * 16384 * 2   # embedding and LM head rows of the padded vocabulary
    assert total == pytest.approx((llm.total_params + padding) * 14 + (126 * 4 + 2) * 16384 * 7 * 14, rel=1e-12)


def test_tied_embedding_copy_on_the_last_stage():
    work = gpt3(pp=4)
    total = sum(s.params for s in work.stages)
    padding = (PADDED[1] - V) * H
    assert total == pytest.approx(GPT3.total_params + PADDED[1] * H + padding)   # last stage keeps the copy
    assert gpt3(pp=1).stages[0].params == pytest.approx(GPT3.total_params + padding)


@pytest.mark.parametrize("pp, m, expected", [(4, 8, [4, 3, 2, 1]), (4, 2, [2, 2, 2, 1]),
                                             (1, 5, [1]), (7, 7, [7, 6, 5, 4, 3, 2, 1])])
def test_1f1b_inflight(pp, m, expected):
    work = gpt3(pp=pp, global_batch=m)
    assert work.microbatches == m
    assert [s.inflight for s in work.stages] == expected


@pytest.mark.parametrize("layers, pp", [(96, 7), (96, 8), (80, 3), (61, 16), (5, 5), (126, 1)])
def test_layer_split(layers, pp):
    split = split_layers(layers, pp)
    assert sum(split) == layers and len(split) == pp
    assert max(split) - min(split) <= 1
    assert split == sorted(split, reverse=True)   # earlier stages take the extra layers


def test_stage_layers_and_first_layer():
    work = gpt3(pp=7, global_batch=7)
    assert [s.layers for s in work.stages] == [14, 14, 14, 14, 14, 13, 13]
    assert [s.first_layer for s in work.stages] == [0, 14, 28, 42, 56, 70, 83]


def test_memory_bytes_and_recomputation():
    work = gpt3(tp=8, pp=4, global_batch=8)
    stage = work.stages[0]
    # the embedding's dropout mask (1 byte per element of the layer input) is kept besides the layers
    assert stage.extra_activation_bytes == SBH
    kept = stage.state_bytes + stage.inflight * (stage.layers * stage.activation_bytes + SBH)
    assert stage.memory_bytes() == pytest.approx(kept + stage.transient_bytes())
    assert stage.full_recompute_bytes() == pytest.approx(
        stage.state_bytes + stage.inflight * (stage.layers * 2 * SBH + SBH) + stage.transient_bytes(FULL))
    # dropping every unit but the layer input in every layer keeps what full recomputation keeps
    all_but_input = {u.name: stage.layers for u in stage.units if u.name != "ln1_input"}
    assert stage.memory_bytes(all_but_input) == pytest.approx(stage.full_recompute_bytes())
    # a sequence aligned with the units works too; the regenerated unit is transient memory
    xs = [3 if u.name == "softmax_output" else 0 for u in stage.units]
    saved = stage.inflight * 3 * units(stage)["softmax_output"]
    assert stage.transient_bytes(xs) == pytest.approx(stage.transient_bytes() + units(stage)["softmax_output"])
    assert stage.memory_bytes(xs) == pytest.approx(kept - saved + stage.transient_bytes(xs))
    assert stage.recompute_seconds(xs) == pytest.approx(
        3 * next(u.recompute_s for u in stage.units if u.name == "softmax_output"))
    with pytest.raises(ValueError):
        stage.memory_bytes({"no_such_unit": 1})
    with pytest.raises(ValueError):
        stage.memory_bytes({"qk": stage.layers + 1})


def test_recompute_costs():
    t = 8
    stage = gpt3(tp=t).stages[0]
    cost = {u.name: u for u in stage.units}
    assert cost["gelu_input"].recompute_flops == 2 * B * S * H * 4 * H / t   # FC1 GEMM
    assert cost["softmax_output"].recompute_flops >= 2 * B * S * S * H / t  # QK^T GEMM
    assert cost["proj_input"].recompute_flops == 2 * B * S * S * H / t      # scores x V
    # one producer: its roofline; the FC1 GEMM is compute-bound on this die
    assert cost["gelu_input"].recompute_s == pytest.approx(2 * B * S * H * 4 * H / t / CONFIG3.die_flops)
    for name in ("qkv_input", "fc2_input", "proj_input"):   # memory-bound elementwise / small GEMMs
        u = cost[name]
        assert u.recompute_s == pytest.approx(max(u.recompute_flops / CONFIG3.die_flops,
                                                  u.recompute_bytes / CONFIG3.dram_bandwidth))
    # the layer input comes from the preceding layer's FC2 GEMM (+ dropout, residual add)
    assert cost["ln1_input"].recompute_flops == 2 * B * S * 4 * H * H / t + 3 * SBH
    # every operator of a layer regenerates a unit: all of them cost one layer forward (the
    # residuals' RNG replay is counted twice, a third of two elementwise operators)
    table, _ = stage.tables[0]
    total = sum(u.recompute_flops for u in stage.units)
    assert table.fwd_flops < total < 1.0001 * table.fwd_flops


# --- FLOPs, times, traffic ----------------------------------------------------------------------
def test_forward_flops_narayanan():
    t, pp = 8, 4
    work = gpt3(tp=t, pp=pp)
    per_layer = 24 * B * S * H * H * (1 + S / (6 * H)) / t     # matrix multiplies only
    first, last = work.stages[0], work.stages[-1]
    table, count = first.tables[0]
    assert table.model_flops == pytest.approx(per_layer, rel=1e-12)
    # the elementwise operators per layer: norms 2 x 5 sbh, residuals 2 x 3 sbh, softmax 5 a s^2/t,
    # dropout 2 a s^2/t, GeLU 8 x 4 sbh/t
    elementwise = (10 + 6) * SBH + 7 * A * S * S * B / t + 32 * SBH / t
    assert table.fwd_flops == pytest.approx(per_layer + elementwise, rel=1e-12)
    assert first.fwd_flops == pytest.approx(count * table.fwd_flops + SBH)   # + position add
    VP = PADDED[t]
    head = 2 * B * S * H * VP / t + 5 * SBH + 5 * S * B * VP / t          # final norm, LM head, softmax
    assert last.fwd_flops == pytest.approx(last.layers * table.fwd_flops + head)
    assert first.bwd_flops == pytest.approx(2 * first.fwd_flops)
    assert first.fwd_s >= first.fwd_flops / CONFIG3.die_flops
    assert first.compute_s() == first.fwd_s + first.bwd_s


def test_model_flops_per_iteration():
    gb = 64
    work = gpt3(global_batch=gb)
    expected = 72 * gb * S * L * H * H * (1 + S / (6 * H) + V / (12 * L * H))
    assert work.model_flops_per_iteration == pytest.approx(expected, rel=1e-12)


def test_tp_and_p2p_traffic():
    work = gpt3(tp=8, pp=4)
    middle = work.stages[1]
    # four ring all-reduces per layer (two forward, two backward), each sending 2(t-1)/t of it
    assert middle.tp_bytes_per_layer() == pytest.approx(4 * 2 * 7 / 8 * 2 * SBH)
    # full recomputation repeats the two forward ones
    assert middle.tp_bytes_per_layer(FULL) == pytest.approx(6 * 2 * 7 / 8 * 2 * SBH)
    sp = gpt3(tp=8, pp=4, sequence_parallel=True).stages[1]
    assert sp.tp_bytes_per_layer() == pytest.approx(10 * 7 / 8 * 2 * SBH)   # + the backward re-gathers
    assert work.p2p_bytes == 2 * SBH   # the whole boundary tensor; t die pairs share it
    assert gpt3(tp=1, pp=4).stages[1].tp_bytes_per_layer() == 0
    assert gpt3(tp=8, sequence_parallel=True).p2p_bytes == 2 * SBH


def test_data_parallel_microbatches():
    work = gpt3(tp=2, pp=4, dp=2, global_batch=16)
    assert work.microbatches == 8 and work.dies == 16


# --- validation ---------------------------------------------------------------------------------
def test_global_batch_not_divisible_raises():
    with pytest.raises(InstanceError) as info:
        gpt3(dp=4, global_batch=10)
    assert "global_batch" in str(info.value) and "10" in str(info.value)
    with pytest.raises(InstanceError) as info:
        parse_training({"seq": 2048, "micro_batch": 4, "global_batch": 10})
    assert "training.global_batch" in str(info.value) and "10" in str(info.value)


def test_parse_training():
    training = parse_training({"seq": 2048, "micro_batch": 2, "global_batch": 64,
                               "flash_attention": True, "state_bytes_per_param": 14})
    assert training == Training(2048, 2, 64, attention="flash", states=STATE_PRESETS["watos14"])
    assert parse_training({"seq": 2048, "micro_batch": 2, "global_batch": 64, "attention": "flash",
                           "states": "watos14"}) == training
    with pytest.raises(InstanceError, match=r"training\.flash_attention"):
        parse_training({"seq": 1, "micro_batch": 1, "global_batch": 1, "attention": "flash",
                        "flash_attention": True})
    with pytest.raises(InstanceError, match=r"training\.attention"):
        parse_training({"seq": 1, "micro_batch": 1, "global_batch": 1, "attention": "sparse"})
    assert dataclasses.replace(training, seq=1).seq == 1
    with pytest.raises(InstanceError, match=r"training\.seq.*-1"):
        parse_training({"seq": -1, "micro_batch": 1, "global_batch": 1})
    with pytest.raises(InstanceError, match=r"training\.batch"):
        parse_training({"seq": 1, "micro_batch": 1, "global_batch": 1, "batch": 3})


def test_micro_batch_may_list_the_allowed_sizes():
    training = parse_training({"seq": 8, "micro_batch": [4, 1, 2], "global_batch": 64})
    assert training.micro_batches == (1, 2, 4) and training.micro_batch == 1
    assert Training(8, 2, 64).micro_batches == (2,)
    assert dataclasses.replace(training, micro_batch=8).micro_batches == (8,)   # a size it does not list
    for bad, match in [([], r"training\.micro_batch.*1 to 16"), (list(range(1, 18)), r"1 to 16 entries, got 17"),
                       ([1, 0], r"training\.micro_batch\[1\].*positive"), ([1, True], r"micro_batch\[1\]"),
                       ([1, 2.0], r"micro_batch\[1\]"), ([2, 2], r"twice"), ([1, 10**40], r"micro_batch\[1\]"),
                       ([1, 3], r"training\.global_batch.*multiple of micro_batch 3")]:
        with pytest.raises(InstanceError, match=match):
            parse_training({"seq": 8, "micro_batch": bad, "global_batch": 64})


def test_a_split_moves_layers_and_is_checked():
    llm = resolve_llm("gpt3-175b")
    wafer = resolve_wafer("watos-config3")
    even = build_workload(llm, Training(2048, 1, 8), wafer, 8, 3)
    assert [s.layers for s in even.stages] == split_layers(96, 3) == [32, 32, 32]
    moved = build_workload(llm, Training(2048, 1, 8), wafer, 8, 3, layers=[30, 34, 32])
    assert [(s.layers, s.first_layer) for s in moved.stages] == [(30, 0), (34, 30), (32, 64)]
    # a layer's compute and parameters follow it (the middle stage has neither embedding nor head)
    assert moved.stages[1].fwd_s == pytest.approx(even.stages[1].fwd_s * 34 / 32, rel=1e-12)
    assert moved.stages[1].params == pytest.approx(even.stages[1].params * 34 / 32, rel=1e-12)
    assert moved.stages[2].fwd_s == even.stages[2].fwd_s
    for bad in ([32, 64], [0, 64, 32], [31, 32, 32], [32.0, 32, 32]):
        with pytest.raises(InstanceError, match="layers"):
            build_workload(llm, Training(2048, 1, 8), wafer, 8, 3, layers=bad)


def test_layout_validation():
    with pytest.raises(InstanceError, match="tp"):
        gpt3(tp=0)
    with pytest.raises(InstanceError, match=r"pp.*97"):
        build_workload(GPT3, Training(S, B, 8), resolve_wafer({"preset": "watos-config1",
                                                               "rows": 16, "cols": 16}), 1, 97)
    with pytest.raises(InstanceError, match=r"tp\*pp\*dp"):
        gpt3(tp=8, pp=8)   # 64 dies on the 56-die Config 3


def test_moe_stage_units_average_dense_and_moe_layers():
    llm = resolve_llm("gshard-137b")
    training = Training(seq=4096, micro_batch=1, global_batch=8)
    one = build_workload(llm, training, CONFIG3, 1, 1).stages[0]
    # a stage holding the dense first layer stores less MLP activation per layer on average
    two = build_workload(llm, training, CONFIG3, 1, 2)
    first, second = two.stages
    assert units(first)["gelu_input"] < units(second)["gelu_input"]
    total = first.layers * first.activation_bytes + second.layers * second.activation_bytes
    assert total == pytest.approx(one.layers * one.activation_bytes)


def test_workload_uses_the_scenarios_tp_scheme_and_sequences_fit_the_learned_positions(tmp_path):
    import json

    from wafopt.api import workload
    from wafopt.problems import parse_instance

    scenario = {"problem": "plan", "wafer": "watos-config3", "model": "gpt3-175b",
                "training": {"seq": 2048, "micro_batch": 1, "global_batch": 64},
                "parallel": {"tp": 14, "pp": 4, "tp_scheme": "tatp"}}
    path = tmp_path / "tatp.yaml"
    path.write_text(json.dumps(scenario))
    assert workload(path)["layout"]["tp_scheme"] == "tatp"            # tp 14 cannot run Megatron TP
    with pytest.raises(InstanceError, match="does not divide 96 attention heads"):
        workload(path, tp_scheme="megatron")                          # the flag overrides it
    too_long = dict(scenario, training={"seq": 4096, "micro_batch": 1, "global_batch": 64})
    with pytest.raises(InstanceError, match="2048 learned positions"):
        parse_instance(too_long)


def test_workload_follows_the_scenarios_interleave_as_the_evaluator_does(tmp_path):
    import json

    import wafopt
    from wafopt.api import workload

    scenario = {"problem": "plan", "cluster": {"preset": "dgx-a100-80g", "nodes": 8}, "model": "llama3-70b",
                "training": {"seq": 8192, "micro_batch": 1, "global_batch": 128, "flash_attention": True,
                             "recompute": "selective", "sequence_parallel": True},
                "parallel": {"tp": 8, "pp": 4, "dp": 2, "interleave": 5}}
    path = tmp_path / "interleaved.yaml"
    path.write_text(json.dumps(scenario))
    report = workload(path)
    assert report["layout"]["interleave"] == 5
    # 1F1B interleaved keeps 1 + (p - 1) / (p v) times as many micro-batches in flight on stage 0
    assert report["per_stage"][0]["inflight"] == pytest.approx(4 * (1 + 3 / 20))
    evaluated = wafopt.solve(wafopt.load(path), "megatron").solution.evaluation["details"]["memory"]
    assert report["per_stage"][0]["memory_bytes"] == pytest.approx(evaluated[0]["bytes"], rel=1e-9)   # GPU [0, 0]: stage 0
    assert workload(path, pp=2, dp=4)["layout"]["interleave"] == 1     # another pipeline: no virtual stages
    for flag in ("tp", "pp", "dp"):
        with pytest.raises(InstanceError, match=f"--{flag}"):
            workload(path, **{flag: 0})
