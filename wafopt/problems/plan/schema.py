"""Schema of a scenario instance file (problem: plan).

`wafer` and `model` are a preset name or a mapping ({preset: NAME, <overrides>} or every field
inline) and `training` a mapping: the catalog (wafopt.hardware.catalog) and the cost model
(wafopt.costmodel.model) define and check their fields, since presets merge with overrides
there; the reader's limits (finite numbers, depth, size) apply to them like to every value.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from wafopt.core import schema


class ParallelSpec(schema.Spec):
    """tp and pp given fix the layout (dp default 1); a partial one fixes what it gives."""

    tp: schema.DieCount | None = None
    pp: schema.DieCount | None = None
    dp: schema.DieCount | None = None


class Document(schema.Document):
    """A wafer, an LLM, a training setup and optionally the (tp, pp, dp) layout (WATOS)."""

    problem: Literal["plan"]
    wafer: schema.Name | dict[str, Any] = Field(
        description="a wafer preset name, {preset: NAME, <overrides>}, or every field inline: rows, cols, "
                    "die_tflops, dram_gb, dram_bw_tbps, link_bw_tbps, link_latency_us, faulty_dies, ...")
    model: schema.Name | dict[str, Any] = Field(
        description="an LLM preset name, {preset: NAME, <overrides>}, or every field inline: layers, hidden, "
                    "heads, kv_heads, ffn_hidden, vocab, mlp, experts, top_k, moe_every, ...")
    training: dict[str, Any] = Field(description="seq, micro_batch (a size, or the list of sizes a plan may "
                                                 "choose from, at most 16), global_batch and the optional "
                                                 "training settings of the cost model")
    parallel: ParallelSpec | None = None
