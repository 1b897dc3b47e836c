"""Catalog of LLMs and wafers: presets in package YAML, validated resolution of user specs.

The YAML files (wafopt/data/llms.yaml, wafopt/data/wafers.yaml) hold human units (GB, TB/s,
TFLOPS, microseconds); the dataclasses hold SI units (bytes, bytes/s, FLOP/s, seconds) with
1 GB = 1e9 bytes and 1 TB/s = 1e12 bytes/s. Formulas and sources: docs/workload.md.

A spec is a preset name, a mapping `{preset: NAME, <field overrides>}`, or a mapping with
every field inline; LLMSpec and WaferSpec describe the merged mapping. Bad specs raise
InstanceError naming the field path and the value.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from importlib import resources
from typing import Any, ClassVar

import yaml

from wafopt.core.errors import InstanceError
from wafopt.core.limits import (
    MAX_AMOUNT,
    MAX_DIES,
    MAX_GPUS,
    MAX_LAYERS,
    MAX_MESH_SIDE,
    MIN_RATE,
)
from wafopt.core.schema import (
    Entries,
    Flag,
    Record,
    count,
    field_at,
    quantity,
    text,
    validate,
)
from wafopt.hardware.efficiency import (
    IDEAL,
    Efficiency,
    EfficiencySpec,
    parse_efficiency,
)
from wafopt.hardware.mesh import Die, Mesh

GB = 1e9          # bytes
TB_PER_S = 1e12   # bytes per second
TFLOPS = 1e12     # FLOP per second
US = 1e-6         # seconds

# Used when an inline wafer gives no link latency: TEMP Table I's 200 ns D2D latency.
DEFAULT_LINK_LATENCY_US = 0.2

MLP_KINDS = ("gelu", "swiglu")
PARALLEL_RULES = ("megatron", "watos")   # layout rules of a system: wafopt.costmodel.rules
NORM_PARAMS_PER_LAYER = 4  # x hidden: two LayerNorms, gain and bias each (RMSNorm has half)


# --------------------------------------------------------------------------------------------
# LLM
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LLM:
    """A decoder-only transformer. Sizes are counts; all layers share the attention shape."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int                 # MLP width of a dense layer
    vocab: int
    mlp: str = "gelu"               # gelu: 2 matrices (fc1, fc2); swiglu: 3 (gate, up, down)
    experts: int = 1
    top_k: int = 1
    moe_every: int = 0              # 0 dense; k: every k-th layer (after dense_layers) is MoE
    dense_layers: int = 0           # leading layers kept dense in a MoE model (DeepSeek style)
    expert_ffn_hidden: int | None = None   # width of one expert; None = ffn_hidden
    tied_embeddings: bool = False   # LM head shares the input embedding matrix
    max_positions: int = 0          # rows of a learned position table (0: rotary, no table)
    source: str = ""

    # --- shape -----------------------------------------------------------------------------
    @property
    def head_dim(self) -> float:
        return self.hidden / self.heads

    @property
    def kv_hidden(self) -> float:
        """Width of K (and of V): hidden * kv_heads / heads (GQA; = hidden for MHA)."""
        return self.hidden * self.kv_heads / self.heads

    @property
    def expert_ffn(self) -> int:
        return self.expert_ffn_hidden if self.expert_ffn_hidden is not None else self.ffn_hidden

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    @property
    def is_moe(self) -> bool:
        return self.moe_every > 0 and self.experts > 1

    def is_moe_layer(self, layer: int) -> bool:
        """Layer `layer` (0-based) is MoE: past dense_layers, every moe_every-th layer.

        moe_every = 2 makes layers dense_layers+1, dense_layers+3, ... MoE (GShard/Megatron
        convention: every other FFN is replaced, starting with the second).
        """
        if not self.is_moe or layer < self.dense_layers:
            return False
        return (layer - self.dense_layers) % self.moe_every == self.moe_every - 1

    @property
    def moe_layer_count(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.layers))

    # --- parameters ----------------------------------------------------------------------
    @property
    def attention_params(self) -> float:
        """Q (h*h) + K, V (h*kv_hidden each) + output projection (h*h); biases ignored."""
        h = self.hidden
        return 2 * h * h + 2 * h * self.kv_hidden

    def mlp_params(self, width: int) -> float:
        """One MLP of the given width: 2*h*ffn (GeLU) or 3*h*ffn (SwiGLU); biases ignored."""
        return self.mlp_matrices * self.hidden * width

    def layer_params(self, layer: int) -> float:
        """Parameters of layer `layer`: attention + MLP (or experts + router) + norms."""
        h = self.hidden
        if self.is_moe_layer(layer):
            mlp = self.experts * self.mlp_params(self.expert_ffn) + h * self.experts  # + router
        else:
            mlp = self.mlp_params(self.ffn_hidden)
        return self.attention_params + mlp + NORM_PARAMS_PER_LAYER * h

    @cached_property   # a sum over every layer, asked for by every layout bound
    def params_per_layer(self) -> float:
        """Mean parameters per transformer layer (exact for dense models)."""
        return sum(self.layer_params(i) for i in range(self.layers)) / self.layers

    @property
    def input_embedding_params(self) -> float:
        """Word embedding (vocab*h) + learned positions (max_positions*h)."""
        return (self.vocab + self.max_positions) * self.hidden

    @property
    def head_params(self) -> float:
        """Final norm + LM head (vocab*h unless tied to the input embedding)."""
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        return head + 2 * self.hidden

    @property
    def embedding_params(self) -> float:
        """Everything outside the transformer layers: input embedding + final norm + LM head."""
        return self.input_embedding_params + self.head_params

    @property
    def total_params(self) -> float:
        return self.layers * self.params_per_layer + self.embedding_params

    @property
    def active_params(self) -> float:
        """Parameters one token touches: a MoE layer counts top_k experts instead of all."""
        total = self.embedding_params
        for i in range(self.layers):
            if self.is_moe_layer(i):
                total += (self.attention_params + self.top_k * self.mlp_params(self.expert_ffn)
                          + self.hidden * self.experts + NORM_PARAMS_PER_LAYER * self.hidden)
            else:
                total += self.layer_params(i)
        return total

    def to_spec(self) -> dict:
        """Inline mapping that resolve_llm turns back into an equal LLM."""
        return LLMSpec.of(self).dump()


# --------------------------------------------------------------------------------------------
# Wafer
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Wafer:
    """A 2D mesh of dies, each with compute and its own DRAM. SI units throughout."""

    name: str
    rows: int
    cols: int
    die_flops: float          # FLOP/s per die (peak FP16)
    dram_capacity: float      # bytes per die
    dram_bandwidth: float     # bytes/s per die
    link_bandwidth: float     # bytes/s per link per direction
    link_latency: float       # seconds per hop (alpha of WATOS Eq. 1)
    faulty_dies: frozenset[Die] = field(default_factory=frozenset)
    faulty_links: frozenset[frozenset[Die]] = field(default_factory=frozenset)
    source: str = ""
    compute_efficiency: float = 1.0   # share of die_flops a kernel reaches (per-operator rooflines)
    parallel_rules: str = "megatron"  # megatron | watos (also even tp): wafopt.costmodel.rules
    efficiency: Efficiency = IDEAL    # shares of peak kernels and transfers reach (hardware.efficiency)
    system: str = "wafer"             # wafer (a die mesh) | cluster (nodes of GPUs: rows x cols = nodes x GPUs)
    node_bandwidth: float = 0.0       # cluster: inter-node bytes/s per GPU per direction
    node_latency: float = 0.0         # cluster: inter-node latency per transfer step, seconds

    @property
    def dies(self) -> int:
        return self.rows * self.cols

    @property
    def healthy_die_count(self) -> int:
        return self.dies - len(self.faulty_dies)

    @property
    def device(self) -> str:
        """What messages call one compute device of this system: a die, or a cluster's GPU."""
        return "GPU" if self.system == "cluster" else "die"

    @property
    def healthy_devices(self) -> str:
        """'N healthy dies' on a wafer, 'N GPUs' on a cluster."""
        n = self.healthy_die_count
        return f"{n} GPU{'s' * (n != 1)}" if self.system == "cluster" else f"{n} healthy die{'s' * (n != 1)}"

    def mesh(self) -> Mesh:
        return _mesh_of(self)  # one Mesh per wafer: its distances and routes are computed once

    def to_spec(self) -> dict:
        """Inline mapping in human units that resolve_wafer turns back into an equal Wafer."""
        return WaferSpec.of(self).dump()


@lru_cache(maxsize=256)
def _mesh_of(wafer: Wafer) -> Mesh:
    links = [tuple(sorted(link)) for link in wafer.faulty_links]
    return Mesh.build(wafer.rows, wafer.cols, sorted(wafer.faulty_dies), sorted(links),
                      wafer.link_bandwidth, wafer.link_latency, where=f"wafer {wafer.name}",
                      max_side=MAX_GPUS if wafer.system == "cluster" else MAX_MESH_SIDE,
                      max_dies=MAX_GPUS if wafer.system == "cluster" else MAX_DIES)


# --------------------------------------------------------------------------------------------
# presets (package data)
# --------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _load(filename: str) -> dict:
    text = resources.files("wafopt").joinpath("data", filename).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise RuntimeError(f"wafopt/data/{filename} must map preset names to mappings")
    return data


def llm_presets() -> list[str]:
    return list(_load("llms.yaml"))


def wafer_presets() -> list[str]:
    return list(_load("wafers.yaml"))


def _merged_spec(spec: Any, presets: dict, where: str, sizing: tuple[str, ...] = ()) -> tuple[dict, str]:
    """Turn a spec into (full inline mapping, where-path of its fields).

    A preset entry is copied and overridden by the other keys of the spec, so one record
    (LLMSpec, WaferSpec) validates presets, overrides and inline specs alike; a mapping (an
    efficiency table) is overridden key by key. Overriding a key of `sizing` (how many of the
    machine: a cluster's nodes) keeps the preset's name.
    """
    known = ", ".join(presets)
    if isinstance(spec, str):
        if spec not in presets:
            raise InstanceError(f"unknown preset {spec!r} (known: {known})", where)
        return {"name": spec, **copy.deepcopy(presets[spec])}, where
    if not isinstance(spec, dict):
        raise InstanceError(f"expected a preset name or a mapping, got {spec!r:.60}", where)
    if "preset" not in spec:
        return dict(spec), where
    name = spec["preset"]
    if not isinstance(name, str) or name not in presets:
        raise InstanceError(f"unknown preset {name!r} (known: {known})", f"{where}.preset")
    overrides = {k: v for k, v in spec.items() if k != "preset"}
    base = {"name": name, **copy.deepcopy(presets[name])}
    if set(overrides) - set(sizing) and "name" not in overrides:
        base["name"] = f"{name} (modified)"  # a changed preset must not pass for the original
    for key, value in overrides.items():
        base[key] = {**base[key], **value} if isinstance(base.get(key), dict) and isinstance(value, dict) else value
    return base, where


def default_ffn_hidden(hidden: int, mlp: str) -> int:
    """Megatron-LM's MLP width when none is given: 4h, or for SwiGLU 2/3 of it rounded down to a
    multiple of 64 (megatron/training/arguments.py, `--ffn-hidden-size`)."""
    return 4 * hidden if mlp == "gelu" else max(64, (8 * hidden // 3) // 64 * 64)


class LLMSpec(Record):
    """An LLM mapping (human-readable counts), presets merged with overrides."""

    null_is_missing: ClassVar[bool] = True
    keys_after_fields: ClassVar[bool] = True

    name: text() = "custom"
    layers: count(positive=True, maximum=MAX_LAYERS)
    hidden: count(positive=True)
    heads: count(positive=True)
    kv_heads: count(positive=True) = None   # default: heads (MHA)
    ffn_hidden: count(positive=True) = None   # default: Megatron-LM's (default_ffn_hidden)
    vocab: count(positive=True)
    mlp: text(*MLP_KINDS) = "gelu"
    experts: count(positive=True) = 1
    top_k: count(positive=True) = 1
    moe_every: count(nonnegative=True) = 0
    dense_layers: count(nonnegative=True) = 0
    expert_ffn_hidden: count(positive=True) = None
    tied_embeddings: Flag = False
    max_positions: count(nonnegative=True) = 0
    source: text() = "user-defined"

    def build(self, where: str) -> LLM:
        at = lambda key: field_at(where, key)  # noqa: E731
        heads = self.heads
        kv_heads = self.kv_heads if self.kv_heads is not None else heads
        if self.hidden % heads:
            raise InstanceError(f"hidden {self.hidden} is not a multiple of heads {heads}", at("heads"))
        if kv_heads > heads or heads % kv_heads:
            raise InstanceError(f"must divide heads {heads}, got {kv_heads!r}", at("kv_heads"))
        if self.top_k > self.experts:
            raise InstanceError(f"must be <= experts {self.experts}, got {self.top_k!r}", at("top_k"))
        if self.moe_every > 0 and self.experts < 2:
            raise InstanceError(f"a MoE model (moe_every {self.moe_every}) needs >= 2 experts, got "
                                f"{self.experts!r}", at("experts"))
        if self.experts > 1 and self.moe_every == 0:
            raise InstanceError(f"{self.experts} experts need moe_every >= 1, got 0", at("moe_every"))
        if self.dense_layers > self.layers:
            raise InstanceError(f"must be <= layers {self.layers}, got {self.dense_layers!r}", at("dense_layers"))
        ffn_hidden = self.ffn_hidden if self.ffn_hidden is not None else default_ffn_hidden(self.hidden, self.mlp)
        return LLM(self.name, self.layers, self.hidden, heads, kv_heads, ffn_hidden, self.vocab, self.mlp,
                   self.experts, self.top_k, self.moe_every, self.dense_layers, self.expert_ffn_hidden,
                   self.tied_embeddings, self.max_positions, self.source)

    @classmethod
    def of(cls, llm: LLM) -> "LLMSpec":
        keys = {name: getattr(llm, name) for name in cls.model_fields}
        if llm.expert_ffn_hidden is None:
            del keys["expert_ffn_hidden"]
        return cls.model_construct(**keys)


class WaferSpec(Record):
    """A wafer mapping in human units (TFLOPS, GB, TB/s, microseconds), presets merged with overrides."""

    null_is_missing: ClassVar[bool] = True
    keys_after_fields: ClassVar[bool] = True

    name: text() = "custom"
    rows: count(positive=True)
    cols: count(positive=True)
    die_tflops: quantity(minimum=MIN_RATE)
    dram_gb: quantity(positive=True, maximum=MAX_AMOUNT / GB)
    dram_bw_tbps: quantity(minimum=MIN_RATE)
    link_bw_tbps: quantity(minimum=MIN_RATE)
    link_latency_us: quantity(nonnegative=True) = DEFAULT_LINK_LATENCY_US
    faulty_dies: Entries = []
    faulty_links: Entries = []
    source: text() = "user-defined"
    compute_efficiency: quantity(minimum=MIN_RATE) = 1.0
    parallel_rules: text(*PARALLEL_RULES) = "megatron"
    efficiency: dict[str, Any] | None = None

    def build(self, where: str) -> Wafer:
        if self.compute_efficiency > 1:
            raise InstanceError(f"must lie in (0, 1], got {self.compute_efficiency!r}",
                                field_at(where, "compute_efficiency"))
        # Mesh.build checks that faults lie inside the grid and faulty links join neighbours.
        mesh = Mesh.build(self.rows, self.cols, self.faulty_dies, self.faulty_links, self.link_bw_tbps * TB_PER_S,
                          self.link_latency_us * US, where)
        if not mesh.healthy_dies:
            raise InstanceError(f"every die of the {self.rows} x {self.cols} mesh is faulty",
                                field_at(where, "faulty_dies"))
        return Wafer(self.name, self.rows, self.cols, self.die_tflops * TFLOPS, self.dram_gb * GB,
                     self.dram_bw_tbps * TB_PER_S, mesh.link_bandwidth, mesh.link_latency, mesh.faulty_dies,
                     mesh.faulty_links, self.source, self.compute_efficiency, self.parallel_rules,
                     parse_efficiency(self.efficiency, field_at(where, "efficiency")))

    @classmethod
    def of(cls, wafer: Wafer) -> "WaferSpec":
        return cls.model_construct(
            name=wafer.name, rows=wafer.rows, cols=wafer.cols, die_tflops=wafer.die_flops / TFLOPS,
            dram_gb=wafer.dram_capacity / GB, dram_bw_tbps=wafer.dram_bandwidth / TB_PER_S,
            link_bw_tbps=wafer.link_bandwidth / TB_PER_S, link_latency_us=wafer.link_latency / US,
            faulty_dies=sorted([list(d) for d in wafer.faulty_dies]),
            faulty_links=sorted([sorted([list(d) for d in link]) for link in wafer.faulty_links]),
            source=wafer.source, compute_efficiency=wafer.compute_efficiency, parallel_rules=wafer.parallel_rules,
            efficiency=None if wafer.efficiency == IDEAL else EfficiencySpec.of(wafer.efficiency).dump())


def resolve_llm(spec: Any, where: str = "model") -> LLM:
    """Preset name, {preset: NAME, overrides...} or an inline mapping -> validated LLM."""
    data, where = _merged_spec(spec, _load("llms.yaml"), where)
    return validate(LLMSpec, data, where).value


def resolve_wafer(spec: Any, where: str = "wafer") -> Wafer:
    """Preset name, {preset: NAME, overrides...} or an inline mapping (human units) -> Wafer."""
    data, where = _merged_spec(spec, _load("wafers.yaml"), where)
    return validate(WaferSpec, data, where).value
