"""`wafopt presets`: the model, wafer and cluster presets a scenario can name, with their key
numbers in the units of the preset files (wafopt/data/*.yaml) and their sources."""

from __future__ import annotations

from wafopt.hardware.catalog import (
    GB,
    TB_PER_S,
    TFLOPS,
    llm_presets,
    resolve_llm,
    resolve_wafer,
    wafer_presets,
)
from wafopt.hardware.cluster import GB_PER_S, cluster_presets, resolve_cluster


def presets() -> dict[str, list[dict]]:
    """{"models": [...], "wafers": [...], "clusters": [...]}: one mapping per preset, in file order.
    Numbers come from the resolved presets, so they are the ones a scenario gets."""
    return {"models": [_model(name) for name in llm_presets()],
            "wafers": [_wafer(name) for name in wafer_presets()],
            "clusters": [_cluster(name) for name in cluster_presets()]}


def _human(value: float) -> float:
    """A number converted back from SI to the preset file's unit, without float noise (2.039, not 2.0389999...)."""
    return float(f"{value:.12g}")


def _model(name: str) -> dict:
    llm = resolve_llm(name)
    return {"name": name, "layers": llm.layers, "hidden": llm.hidden, "heads": llm.heads,
            "kv_heads": llm.kv_heads, "ffn_hidden": llm.ffn_hidden, "vocab": llm.vocab, "mlp": llm.mlp,
            "params": round(llm.total_params), "active_params": round(llm.active_params), "experts": llm.experts,
            "top_k": llm.top_k, "source": llm.source}


def _wafer(name: str) -> dict:
    wafer = resolve_wafer(name)
    return {"name": name, "rows": wafer.rows, "cols": wafer.cols, "dies": wafer.healthy_die_count,
            "die_tflops": _human(wafer.die_flops / TFLOPS), "dram_gb": _human(wafer.dram_capacity / GB),
            "dram_tbps": _human(wafer.dram_bandwidth / TB_PER_S),
            "link_tbps": _human(wafer.link_bandwidth / TB_PER_S),
            "parallel_rules": wafer.parallel_rules, "source": wafer.source}


def _cluster(name: str) -> dict:
    system = resolve_cluster(name)
    return {"name": name, "nodes": system.rows, "gpus_per_node": system.cols,
            "gpu_tflops": _human(system.die_flops / TFLOPS), "hbm_gb": _human(system.dram_capacity / GB),
            "hbm_tbps": _human(system.dram_bandwidth / TB_PER_S),
            "nvlink_gbps": _human(system.link_bandwidth / GB_PER_S),
            "network_gbps": _human(system.node_bandwidth / GB_PER_S), "source": system.source}
