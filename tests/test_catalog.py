"""The LLM and wafer catalog: presets, units, overrides and validation errors."""

import pytest

from wafopt.core.errors import InstanceError
from wafopt.hardware.catalog import (
    GB,
    LLM,
    TB_PER_S,
    TFLOPS,
    Wafer,
    llm_presets,
    resolve_llm,
    resolve_wafer,
    wafer_presets,
)
from wafopt.hardware.mesh import Mesh

LLM_NAMES = {"gpt3-6.7b", "gpt3-76b", "gpt3-175b", "llama2-7b", "llama-30b", "llama3-70b",
             "opt-175b", "llama3-405b", "gshard-137b", "deepseek-v3"}
WAFER_NAMES = {"watos-config1", "watos-config2", "watos-config3", "watos-config4", "temp-wafer"}


def test_preset_lists():
    assert LLM_NAMES <= set(llm_presets())
    assert WAFER_NAMES <= set(wafer_presets())


@pytest.mark.parametrize("name", sorted(LLM_NAMES))
def test_every_llm_preset_resolves(name):
    llm = resolve_llm(name)
    assert isinstance(llm, LLM) and llm.name == name
    assert llm.source  # every preset says where its numbers come from
    assert llm.total_params > llm.layers * llm.attention_params
    assert resolve_llm(llm.to_spec()) == llm


@pytest.mark.parametrize("name", sorted(WAFER_NAMES))
def test_every_wafer_preset_resolves(name):
    wafer = resolve_wafer(name)
    assert isinstance(wafer, Wafer) and wafer.name == name and wafer.source
    mesh = wafer.mesh()
    assert isinstance(mesh, Mesh)
    assert (mesh.rows, mesh.cols) == (wafer.rows, wafer.cols)
    assert mesh.link_bandwidth == wafer.link_bandwidth
    assert mesh.link_latency == wafer.link_latency
    again = resolve_wafer(wafer.to_spec())
    assert again.rows == wafer.rows and again.cols == wafer.cols
    for attr in ("die_flops", "dram_capacity", "dram_bandwidth", "link_bandwidth",
                 "link_latency"):
        assert getattr(again, attr) == pytest.approx(getattr(wafer, attr), rel=1e-12)


# Published totals (billions): GPT-3 Table 2.1, Narayanan et al. 2021 Table 1, Llama papers,
# OPT Table 1, DeepSeekMoE Table 6 (GShard 137B), DeepSeek-V3 report (671B main model).
@pytest.mark.parametrize("name, billions, tolerance", [
    ("gpt3-6.7b", 6.7, 0.02), ("gpt3-76b", 76.1, 0.01), ("gpt3-175b", 175.0, 0.01),
    ("llama2-7b", 6.74, 0.01), ("llama-30b", 32.5, 0.01), ("llama3-70b", 70.6, 0.01),
    ("opt-175b", 175.0, 0.01), ("llama3-405b", 405.0, 0.01), ("gshard-137b", 136.5, 0.01),
    ("deepseek-v3", 671.0, 0.01),
])
def test_total_params_match_published(name, billions, tolerance):
    assert resolve_llm(name).total_params == pytest.approx(billions * 1e9, rel=tolerance)


def test_moe_active_params():
    assert resolve_llm("gshard-137b").active_params == pytest.approx(21.6e9, rel=0.02)
    # MLA is approximated by standard attention, so the active count is a little high.
    assert resolve_llm("deepseek-v3").active_params == pytest.approx(37e9, rel=0.06)


def test_parameter_formulas():
    gpt = resolve_llm("gpt3-175b")
    h = 12288
    assert gpt.attention_params == 4 * h * h
    assert gpt.params_per_layer == 12 * h * h + 4 * h          # + two LayerNorms
    assert gpt.embedding_params == (50257 + 2048) * h + 2 * h  # tied head, final norm
    llama = resolve_llm("llama3-70b")
    h = 8192
    assert llama.attention_params == 2 * h * h + 2 * h * (h * 8 / 64)   # GQA, 8 KV heads
    assert llama.mlp_params(28672) == 3 * h * 28672                    # SwiGLU
    assert llama.embedding_params == 2 * 128256 * h + 2 * h           # untied head


def test_moe_layer_pattern():
    gshard = resolve_llm("gshard-137b")
    assert not gshard.is_moe_layer(0) and gshard.is_moe_layer(1)
    assert gshard.moe_layer_count == 61
    every_other = resolve_llm({"preset": "gshard-137b", "moe_every": 2, "dense_layers": 0})
    assert [every_other.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert resolve_llm("deepseek-v3").moe_layer_count == 58
    assert not resolve_llm("gpt3-175b").is_moe


def test_watos_table_ii_units_and_orientation():
    c3 = resolve_wafer("watos-config3")
    assert (c3.rows, c3.cols) == (8, 7)   # (X, Y) = (7, 8): cols = X, rows = Y
    assert c3.die_flops == 708 * TFLOPS
    assert c3.dram_capacity == 70 * GB
    assert c3.dram_bandwidth == 2 * TB_PER_S
    assert c3.link_bandwidth == 4 * TB_PER_S
    assert c3.link_latency == pytest.approx(0.2e-6)
    # WATOS section V-C: the Config 3 wafer totals 39,648 TFLOPS and 3920 GB of DRAM.
    assert c3.dies * c3.die_flops == pytest.approx(39648 * TFLOPS)
    assert c3.dies * c3.dram_capacity == pytest.approx(3920 * GB)
    dims = {n: (resolve_wafer(n).rows, resolve_wafer(n).cols) for n in WAFER_NAMES}
    assert dims == {"watos-config1": (8, 8), "watos-config2": (8, 7), "watos-config3": (8, 7),
                    "watos-config4": (8, 6), "temp-wafer": (6, 8)}


def test_wafer_override_with_faults():
    wafer = resolve_wafer({"preset": "watos-config3", "faulty_dies": [[0, 0]],
                           "faulty_links": [[[1, 1], [1, 2]]]})
    base = resolve_wafer("watos-config3")
    assert wafer.faulty_dies == frozenset({(0, 0)})
    assert wafer.faulty_links == frozenset({frozenset({(1, 1), (1, 2)})})
    assert wafer.die_flops == base.die_flops and wafer.rows == base.rows
    assert wafer.name != base.name   # a modified preset is labelled as such
    mesh = wafer.mesh()
    assert len(mesh.healthy_dies) == 55 and not mesh.link_ok((1, 1), (1, 2))
    assert wafer.healthy_die_count == 55


def test_override_in_human_units():
    wafer = resolve_wafer({"preset": "watos-config1", "dram_gb": 80, "link_latency_us": 1})
    assert wafer.dram_capacity == 80e9 and wafer.link_latency == pytest.approx(1e-6)
    llm = resolve_llm({"preset": "gpt3-175b", "layers": 48, "name": "half-gpt"})
    assert llm.layers == 48 and llm.name == "half-gpt" and llm.hidden == 12288


def test_inline_specs():
    llm = resolve_llm({"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 100})
    assert llm.kv_heads == 4 and llm.mlp == "gelu" and llm.name == "custom"
    wafer = resolve_wafer({"rows": 2, "cols": 3, "die_tflops": 100, "dram_gb": 10,
                           "dram_bw_tbps": 1, "link_bw_tbps": 2})
    assert wafer.dies == 6 and wafer.link_latency == pytest.approx(0.2e-6)


def test_default_mlp_width_is_megatrons():
    # Megatron-LM's --ffn-hidden-size default: 4h; SwiGLU 8h/3 rounded down to a multiple of 64
    assert resolve_llm({"layers": 2, "hidden": 6144, "heads": 64, "vocab": 100}).ffn_hidden == 24576
    swiglu = resolve_llm({"layers": 2, "hidden": 4096, "heads": 32, "vocab": 100, "mlp": "swiglu"})
    assert swiglu.ffn_hidden == 10880   # 8 * 4096 / 3 = 10922.7 -> 170 * 64
    assert resolve_llm({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "ffn_hidden": 100}).ffn_hidden == 100


def _error(resolver, spec, where=None):
    with pytest.raises(InstanceError) as info:
        resolver(spec) if where is None else resolver(spec, where)
    return str(info.value)


def test_unknown_preset_names_field_value_and_known_presets():
    msg = _error(resolve_wafer, "watos-config9")
    assert msg.startswith("wafer") and "watos-config9" in msg and "watos-config3" in msg
    msg = _error(resolve_llm, {"preset": "gpt5"})
    assert "model.preset" in msg and "gpt5" in msg and "gpt3-175b" in msg
    msg = _error(resolve_llm, "nope", "scenario.model")
    assert "scenario.model" in msg and "nope" in msg


def test_unknown_key():
    msg = _error(resolve_wafer, {"preset": "watos-config3", "dram_tb": 1})
    assert "wafer.dram_tb" in msg and "dram_tb" in msg
    msg = _error(resolve_llm, {"preset": "gpt3-175b", "hiden": 1})
    assert "model.hiden" in msg


@pytest.mark.parametrize("resolver, spec, field, value", [
    (resolve_wafer, {"preset": "watos-config3", "rows": 0}, "wafer.rows", "0"),
    (resolve_wafer, {"preset": "watos-config3", "die_tflops": -5}, "wafer.die_tflops", "-5"),
    (resolve_wafer, {"preset": "watos-config3", "dram_gb": 0}, "wafer.dram_gb", "0"),
    (resolve_wafer, {"preset": "watos-config3", "link_latency_us": -1},
     "wafer.link_latency_us", "-1"),
    (resolve_llm, {"preset": "gpt3-175b", "hidden": -12288}, "model.hidden", "-12288"),
    (resolve_llm, {"preset": "gpt3-175b", "layers": 0}, "model.layers", "0"),
    (resolve_llm, {"preset": "gpt3-175b", "layers": 2.5}, "model.layers", "2.5"),
    (resolve_llm, {"preset": "gpt3-175b", "mlp": "relu"}, "model.mlp", "relu"),
    (resolve_llm, {"preset": "gpt3-175b", "kv_heads": 7}, "model.kv_heads", "7"),
    (resolve_llm, {"preset": "gshard-137b", "top_k": 17}, "model.top_k", "17"),
])
def test_bad_sizes_name_field_and_value(resolver, spec, field, value):
    msg = _error(resolver, spec)
    assert field in msg and value in msg


def test_missing_field_inline():
    msg = _error(resolve_wafer, {"rows": 2, "cols": 2, "die_tflops": 1, "dram_gb": 1,
                                 "dram_bw_tbps": 1})
    assert "wafer.link_bw_tbps" in msg and "missing" in msg


def test_faults_outside_the_mesh():
    msg = _error(resolve_wafer, {"preset": "watos-config3", "faulty_dies": [[9, 9]]})
    assert "wafer.faulty_dies[0]" in msg and "[9, 9]" in msg
    msg = _error(resolve_wafer, {"preset": "watos-config3", "faulty_dies": [[0, 0], [0, 7]]})
    assert "wafer.faulty_dies[1]" in msg and "[0, 7]" in msg   # 7 columns: 0..6
    msg = _error(resolve_wafer, {"preset": "watos-config3", "faulty_links": [[[0, 0], [8, 0]]]})
    assert "wafer.faulty_links[0]" in msg and "[8, 0]" in msg
    msg = _error(resolve_wafer, {"preset": "watos-config3", "faulty_links": [[[0, 0], [1, 1]]]})
    assert "wafer.faulty_links[0]" in msg and "not mesh neighbours" in msg


def test_spec_of_wrong_type():
    msg = _error(resolve_wafer, 42)
    assert "wafer" in msg and "42" in msg


def test_a_multi_head_preset_keeps_multi_head_attention_when_its_heads_change():
    llm = resolve_llm({"preset": "gpt3-6.7b", "heads": 52, "hidden": 6656})
    assert llm.heads == llm.kv_heads == 52
    assert resolve_llm("llama3-70b").kv_heads == 8      # a GQA preset names its KV heads
