"""Legal layouts (wafopt.costmodel.rules): what scenario validation, the evaluator, the planner's
space and its bounds accept."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from wafopt.core.numeric import at_most
from wafopt.costmodel.operators import build_layer
from wafopt.costmodel.rules import legal_schemes, padded_vocab, tp_violation
from wafopt.costmodel.training import Training
from wafopt.hardware.catalog import resolve_llm
from wafopt.planner.space import layout_choices
from wafopt.problems import evaluate, parse_instance

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("model,tp,rules,scheme,message", [
    ("gpt3-175b", 28, "megatron", "megatron", "tp 28 does not divide 96 attention heads"),
    ("llama3-70b", 12, "megatron", "megatron", "tp 12 does not divide 64 attention heads"),
    ("gpt3-175b", 3, "watos", "megatron", "tp 3 is odd"),
    ("gpt3-175b", 3, "watos", "tatp", "tp 3 is odd"),
])
def test_rule_messages_name_the_rule_and_the_numbers(model, tp, rules, scheme, message):
    assert message in tp_violation(resolve_llm(model), tp, rules, scheme)


def test_gqa_needs_tp_to_divide_or_be_a_multiple_of_the_kv_heads():
    llm = resolve_llm({"layers": 2, "hidden": 96, "heads": 12, "kv_heads": 4, "ffn_hidden": 384, "vocab": 100})
    assert tp_violation(llm, 6) == "tp 6 neither divides nor is a multiple of 4 KV heads"
    assert tp_violation(llm, 2) is None and tp_violation(llm, 4) is None and tp_violation(llm, 12) is None
    assert legal_schemes(llm, 6) == ("tatp",)   # TEMP's sequence split needs no head split


def test_the_vocabulary_is_padded_as_megatron_pads_it():
    assert padded_vocab(50257, 1) == 50304 and padded_vocab(50257, 8) == 51200 and padded_vocab(51200, 8) == 51200


def test_gqa_kv_heads_are_replicated_in_weights_flops_and_activations():
    # hidden 64, 8 query heads of 8, 2 KV heads; tp 4 > 2 KV heads: each die keeps one whole KV head
    llm = resolve_llm({"layers": 1, "hidden": 64, "heads": 8, "kv_heads": 2, "ffn_hidden": 256, "vocab": 128})
    s, b, E = 16, 1, 2
    table = build_layer(llm, Training(s, b, 1), 4, False)
    qkv = table.op("qkv")
    q, kv = 64 / 4, 8                   # Q: 2 heads of 8 per die; K and V: 1 replicated head each
    assert qkv.weights == 64 * (q + 2 * kv) == 2048          # not 64 x (16 + 2 x 4) = 1536
    assert qkv.fwd.flops == 2 * s * b * 64 * (q + 2 * kv)
    units = {u.name: u.bytes for u in table.units}
    assert units["qk"] == E * s * b * (q + kv) and units["v"] == E * s * b * kv
    # two dies per KV head: the four dies hold 4 KV heads' weights for 2 distinct ones
    assert 4 * 2 * 64 * kv == 2 * (2 * 64 * 16)


def scenario_with(parallel: dict, model="gpt3-175b", wafer="watos-config3") -> str:
    return (f"problem: plan\nwafer: {wafer}\nmodel: {model}\n"
            f"training: {{seq: 2048, micro_batch: 1, global_batch: 64}}\nparallel: {parallel}\n")


@pytest.mark.parametrize("parallel,message", [
    ("{tp: 28, pp: 2}", "parallel.tp: tp 28 does not divide 96 attention heads"),
    ("{tp: 3, pp: 8}", "parallel.tp: tp 3 is odd"),
    ("{tp: 8, pp: 7, interleave: 2}", "parallel.interleave: interleave 2 with pp 7 needs the 96 layers"),
])
def test_a_fixed_illegal_layout_exits_2_naming_the_rule(tmp_path, parallel, message):
    path = tmp_path / "bad.yaml"
    path.write_text(scenario_with(parallel))
    done = subprocess.run([sys.executable, "-m", "wafopt", "solve", str(path), "--method", "megatron", "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_tatp_at_any_degree_only_when_the_scenario_says_so(tmp_path):
    path = tmp_path / "tatp.yaml"
    path.write_text(scenario_with("{tp: 28, pp: 2, tp_scheme: tatp}"))
    done = subprocess.run([sys.executable, "-m", "wafopt", "validate", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# 6 dies; a global batch of 4 leaves dp 1, 2 or 4: the brute force below evaluates 1700 tile plans
# (a batch of 6 adds dp 3 and 6: 1200 more, nearly all of tp 1, which every rule allows)
TINY = {"problem": "plan", "wafer": {"rows": 2, "cols": 3, "die_tflops": 100, "dram_gb": 0.2, "dram_bw_tbps": 1,
                                     "link_bw_tbps": 0.5},
        "model": {"layers": 3, "hidden": 0, "heads": 0, "kv_heads": 0, "ffn_hidden": 0, "vocab": 500},
        "training": {"seq": 64, "micro_batch": 1, "global_batch": 4}}


# each head count, GQA group and rule set at least once: 3 heads sharing one KV head, 5 (prime),
# 6 without and with GQA (2 KV heads)
@pytest.mark.parametrize("heads, group, rules", [(3, 3, "watos"), (5, 1, "megatron"), (6, 1, "watos"),
                                                 (6, 3, "megatron")])
def test_the_planner_never_uses_or_bounds_with_an_illegal_layout(heads, group, rules):
    """Awkward head counts and GQA on a 6-die wafer: every choice of the space is legal, and the
    certified bound lies below every legal plan of a brute force over tiles and schemes."""
    from test_planner import tile_plans

    from wafopt.api import solve

    data = copy.deepcopy(TINY)
    kv = heads // group if heads % group == 0 else heads
    data["model"].update(hidden=heads * 16, heads=heads, kv_heads=kv, ffn_hidden=heads * 64)
    data["wafer"]["parallel_rules"] = rules
    loaded = parse_instance(data)
    scenario = loaded.instance
    for choice in layout_choices(scenario):
        tp = choice.parallel.tp
        assert scenario.tp_schemes(tp), tp
        assert all(tp_violation(scenario.llm, tp, rules, s) is None for s in scenario.tp_schemes(tp))
    result = solve(loaded, "plan", seed=0, time_limit=60)
    legal = []
    for choice in layout_choices(scenario):
        for plan in tile_plans(scenario, choice.parallel):
            ev = evaluate("plan", scenario, plan)
            if ev.feasible:
                legal.append(ev.objective)
    if result.plan is not None:
        schemes = result.plan.get("tp_scheme") or "megatron"
        for s in ([schemes] if isinstance(schemes, str) else schemes):
            assert tp_violation(scenario.llm, result.plan["tp"], rules, s) is None
        assert evaluate("plan", scenario, result.plan).feasible
    if legal and result.bound is not None:
        assert at_most(result.bound.value, min(legal))


def test_the_evaluator_rejects_an_illegal_plan():
    def loaded(rules):
        return parse_instance({"problem": "plan", "wafer": {"preset": "watos-config3", "parallel_rules": rules},
                               "model": "gpt3-175b", "training": {"seq": 2048, "micro_batch": 1, "global_batch": 64}})

    plan = {"tp": 5, "pp": 1, "dp": 1, "pipelines": [[[[0, c] for c in range(5)]]], "tp_scheme": "megatron"}
    ev = evaluate("plan", loaded("megatron").instance, plan)
    assert not ev.feasible and any("tp 5 does not divide 96 attention heads" in v for v in ev.violations)
    ev = evaluate("plan", loaded("watos").instance, dict(plan, tp_scheme="tatp"))
    assert not ev.feasible and any("tp 5 is odd" in v for v in ev.violations)


def test_the_planner_keeps_a_scenarios_fixed_tp_scheme():
    from wafopt.api import solve
    from wafopt.problems import load

    loaded = load(ROOT / "instances/tatp/tatp-temp-6x9-llama2-7b.yaml")   # tp 6, 32 heads: TATP only
    result = solve(loaded, "plan", seed=0, time_limit=60)
    assert result.plan is not None and result.plan.get("tp_scheme") in ("tatp", ["tatp"])
    assert evaluate("plan", loaded.instance, result.plan).feasible


def test_sequence_parallelism_needs_a_sequence_that_splits_over_tp(tmp_path):
    # Korthikanti et al. 2022, Sec. 4.2.2: the sequence dimension is split over the tp group
    base = {"problem": "plan", "cluster": {"preset": "dgx-a100-80g", "nodes": 1},
            "model": {"layers": 4, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 32000},
            "training": {"seq": 2047, "micro_batch": 1, "global_batch": 8}, "parallel": {"tp": 8, "pp": 1}}
    forced = copy.deepcopy(base)
    forced["training"]["sequence_parallel"] = True
    with pytest.raises(Exception, match="training.sequence_parallel: sequence parallelism splits the 2047-token"):
        parse_instance(forced)
    from wafopt.api import solve
    loaded = parse_instance(base)
    scenario = loaded.instance
    result = solve(loaded, "megatron")             # Megatron-LM leaves it off where it cannot split
    assert result.plan["sequence_parallel"] is False and result.status in ("feasible", "optimal")
    assert result.bound.value <= result.objective
    ev = evaluate("plan", scenario, dict(result.plan, sequence_parallel=True))
    assert not ev.feasible and any("multiple of tp" in v for v in ev.violations)
    divisible = copy.deepcopy(base)
    divisible["training"]["seq"] = 2048
    assert solve(parse_instance(divisible), "megatron").plan["sequence_parallel"] is True


def test_the_planner_never_picks_a_tp_that_forced_sequence_parallelism_cannot_split():
    scenario = parse_instance({**TINY, "model": {"layers": 3, "hidden": 48, "heads": 6, "ffn_hidden": 96,
                                                 "vocab": 500},
                               "training": {"seq": 63, "micro_batch": 1, "global_batch": 6,
                                            "sequence_parallel": True}}).instance
    tps = {choice.parallel.tp for choice in layout_choices(scenario)}
    assert tps and all(63 % tp == 0 for tp in tps)


def test_workload_applies_the_sequence_parallel_rule(tmp_path, capsys):
    from wafopt.cli import main

    path = tmp_path / "sp.yaml"
    path.write_text("problem: plan\ncluster: {preset: dgx-a100-80g, nodes: 1}\n"
                    "model: {layers: 4, hidden: 1024, heads: 16, ffn_hidden: 4096, vocab: 32000}\n"
                    "training: {seq: 2047, micro_batch: 1, global_batch: 8}\nparallel: {tp: 8, pp: 1}\n")
    assert main(["workload", str(path)]) == 0
    capsys.readouterr()
    assert main(["workload", str(path), "--sequence-parallel"]) == 2
    assert "--sequence-parallel: sequence parallelism splits the 2047-token sequence" in capsys.readouterr().err


def test_a_fixed_pp_above_the_layer_count_is_refused_at_validation():
    partial = {**TINY, "model": {"layers": 3, "hidden": 48, "heads": 6, "ffn_hidden": 96, "vocab": 500},
               "parallel": {"pp": 4}}
    with pytest.raises(Exception, match="parallel.pp: must be <= the 3 layers"):
        parse_instance(partial)
