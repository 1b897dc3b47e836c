"""Per-stage workload of one TP x PP (x DP) layout: memory, FLOPs, roofline times, traffic.

Everything is per die and per micro-batch unless a name says otherwise. The activation model
is Korthikanti et al. 2022 (section 4), split into checkpointable operator units (WATOS
section IV-B, Fig. 10) with the cost of regenerating each. Formulas and sources:
docs/workload.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from wafopt.hardware.catalog import LLM, Wafer
from wafopt.core.errors import InstanceError
from wafopt.core.fields import Fields

# Element sizes and per-element FLOP counts of the non-GEMM operators. The elementwise ops
# are memory-bound on any realistic die, so these only need to be plausible.
MASK_BYTES = 1          # dropout masks are stored as bytes (Korthikanti et al. 2022, 4.1)
STATS_BYTES = 4         # FlashAttention keeps one fp32 log-sum-exp per row and head
LAYERNORM_FLOPS = 5     # mean, variance, normalize, scale, shift
SOFTMAX_FLOPS = 5       # scale + mask, max, exp, sum, divide
ACTIVATION_FLOPS = {"gelu": 8, "swiglu": 6}   # tanh-GeLU; SiLU and the gating product
RNG_FLOPS = 1           # regenerating a dropout mask from the saved RNG state
DROPOUT_FLOPS = 1
TP_ALLREDUCES_PER_LAYER = 4   # attention + MLP block, forward and backward (Megatron TP)


# --------------------------------------------------------------------------------------------
# training hyper-parameters
# --------------------------------------------------------------------------------------------
# Units a recomputation plan must keep: the layer input is the checkpoint that full
# recomputation restarts each layer from (Korthikanti et al. 2022, section 5).
CHECKPOINT_UNITS = frozenset({"ln1_input"})

@dataclass(frozen=True)
class Training:
    seq: int
    micro_batch: int
    global_batch: int
    flash_attention: bool = False
    sequence_parallel: bool = False
    state_bytes_per_param: float = 16.0   # fp16 w + fp16 g + fp32 master + Adam m, v; WATOS: 14
    activation_bytes: int = 2             # element size of activations and weights (fp16)


def parse_training(fields_or_mapping: Fields | Mapping, where: str = "training") -> Training:
    """Parse the `training:` mapping (or a Fields over it; finish() is called here)."""
    f = fields_or_mapping if isinstance(fields_or_mapping, Fields) else Fields(fields_or_mapping,
                                                                               where)
    training = Training(
        seq=f.integer("seq", positive=True),
        micro_batch=f.integer("micro_batch", positive=True),
        global_batch=f.integer("global_batch", positive=True),
        flash_attention=f.boolean("flash_attention", False),
        sequence_parallel=f.boolean("sequence_parallel", False),
        state_bytes_per_param=f.number("state_bytes_per_param", 16.0, positive=True),
        activation_bytes=f.integer("activation_bytes", 2, positive=True),
    )
    f.finish()
    if training.global_batch % training.micro_batch:
        raise InstanceError(f"must be a multiple of micro_batch {training.micro_batch}, got "
                            f"{training.global_batch}", f.path("global_batch"))
    return training


# --------------------------------------------------------------------------------------------
# result types
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OperatorUnit:
    """A checkpointable activation of one transformer layer."""

    name: str
    bytes: float               # per die, per layer, per micro-batch, if kept
    recompute_flops: float     # per die, to regenerate it from its producer's inputs
    recompute_s: float         # seconds on the die: max(flops / die_flops, traffic / dram_bw)
    recompute_bytes: float = 0.0   # DRAM traffic of the regeneration (inputs, weights, output)
    recomputable: bool = True      # False for the layer input: full recomputation restarts from it


@dataclass(frozen=True)
class StageWorkload:
    index: int
    layers: int
    inflight: int              # micro-batches whose activations a stage holds (1F1B)
    params: float              # per die
    state_bytes: float         # per die: params * state_bytes_per_param
    units: tuple[OperatorUnit, ...]
    activation_bytes: float    # per die per layer per micro-batch = sum of unit bytes
    boundary_bytes: float      # per die per layer per micro-batch kept under full recomputation
    fwd_flops: float           # per die per micro-batch, all layers of the stage
    bwd_flops: float
    fwd_s: float               # roofline seconds per micro-batch
    bwd_s: float
    first_layer: int = 0       # global index of the stage's first layer

    def _recomputed(self, recomputed_layers_per_unit) -> list[float]:
        """Normalize {unit name: layers} or a sequence aligned with `units` to a list."""
        if recomputed_layers_per_unit is None:
            return [0.0] * len(self.units)
        if isinstance(recomputed_layers_per_unit, Mapping):
            names = {u.name for u in self.units}
            unknown = [k for k in recomputed_layers_per_unit if k not in names]
            if unknown:
                raise ValueError(f"unknown unit {unknown[0]!r} (units: {', '.join(sorted(names))})")
            xs = [float(recomputed_layers_per_unit.get(u.name, 0)) for u in self.units]
        else:
            xs = [float(x) for x in recomputed_layers_per_unit]
            if len(xs) != len(self.units):
                raise ValueError(f"expected {len(self.units)} recompute counts, got {len(xs)}")
        for unit, x in zip(self.units, xs):
            if not 0 <= x <= self.layers:
                raise ValueError(f"unit {unit.name!r}: recomputed layers must lie in "
                                 f"[0, {self.layers}], got {x}")
        return xs

    def memory_bytes(self, recomputed_layers_per_unit=None) -> float:
        """Peak per-die bytes: state + inflight * sum_j bytes_j * (layers - x_j).

        x_j = layers of this stage in which unit j is dropped and recomputed (None: keep all).
        """
        xs = self._recomputed(recomputed_layers_per_unit)
        kept = sum(u.bytes * (self.layers - x) for u, x in zip(self.units, xs))
        return self.state_bytes + self.inflight * kept

    def recompute_seconds(self, recomputed_layers_per_unit=None) -> float:
        """Extra seconds per micro-batch spent regenerating the dropped units: sum_j x_j * t_j."""
        xs = self._recomputed(recomputed_layers_per_unit)
        return sum(u.recompute_s * x for u, x in zip(self.units, xs))

    def full_recompute(self) -> list[int]:
        """x of Korthikanti's full recomputation: every unit but the kept layer input, in every layer."""
        return [self.layers if u.recomputable else 0 for u in self.units]

    def full_recompute_bytes(self) -> float:
        """Per-die bytes when only each layer's input is kept (Korthikanti's full recompute)."""
        return self.state_bytes + self.inflight * self.layers * self.boundary_bytes

    def compute_s(self) -> float:
        return self.fwd_s + self.bwd_s


@dataclass(frozen=True)
class Workload:
    llm: LLM
    wafer: Wafer
    training: Training
    tp: int
    pp: int
    dp: int
    microbatches: int              # m = global_batch / (micro_batch * dp)
    stages: tuple[StageWorkload, ...]
    p2p_bytes: float               # b*s*h*bytes: the stage boundary tensor, per micro-batch, each way
    tp_allreduce_bytes: float      # per die, one ring all-reduce: 2(t-1)/t * b*s*h*bytes
    tp_allreduces_per_layer: int   # per micro-batch: 2 forward + 2 backward
    model_flops_per_iteration: float   # 3 * forward FLOPs of the global batch (no recompute)

    @property
    def dies(self) -> int:
        return self.tp * self.pp * self.dp


# --------------------------------------------------------------------------------------------
# per-layer model
# --------------------------------------------------------------------------------------------
class _Layer:
    """Sizes of one layer kind (dense or MoE) on one die of a t-way TP group."""

    def __init__(self, llm: LLM, training: Training, tp: int, moe: bool, *, b: int | None = None):
        self.llm, self.training, self.tp, self.moe = llm, training, tp, moe
        self.E = training.activation_bytes
        self.s = training.seq
        self.b = training.micro_batch if b is None else b
        self.h = llm.hidden
        self.r = 1 / tp if training.sequence_parallel else 1   # share of the non-TP regions
        self.hq = llm.hidden / tp                               # Q / attention-output width
        # K (and V) width per die; with more TP ranks than KV heads each rank keeps one head.
        self.kv = llm.head_dim * max(llm.kv_heads / tp, 1)
        self.a = llm.heads / tp
        self.k = llm.top_k if moe else 1                        # MLP copies per token
        self.w = (llm.expert_ffn if moe else llm.ffn_hidden) / tp
        self.g = 2 if llm.mlp == "swiglu" else 1                # gate + up are both stored

    def fwd_flops(self) -> float:
        """GEMM FLOPs of one forward pass (Narayanan et al. 2021: 24bsh^2(1 + s/6h) for GPT)."""
        sb, h, s, b = self.s * self.b, self.h, self.s, self.b
        attention = 2 * sb * h * (self.hq + 2 * self.kv) + 2 * sb * self.hq * h
        scores = 4 * b * s * s * self.hq                     # QK^T and attention over V
        mlp = self.k * 2 * sb * h * self.w * self.llm.mlp_matrices
        router = 2 * sb * h * self.llm.experts * self.r if self.moe else 0
        return attention + scores + mlp + router

    def units(self) -> list[tuple[str, float, float, float]]:
        """(name, bytes, recompute FLOPs, recompute DRAM traffic) of each stored activation."""
        E, s, b, h, r = self.E, self.s, self.b, self.h, self.r
        sb, sbh = s * b, s * b * h
        hq, kv, a, k, w, g = self.hq, self.kv, self.a, self.k, self.w, self.g
        ss = a * s * s * b                                   # elements of one score tensor
        expert_weights = self.llm.experts if self.moe else 1
        out = [
            # The layer input is the output of the preceding layer's FC2 GEMM (+ its all-reduce,
            # dropout and residual add); this layer's MLP shape stands in for that layer's.
            ("ln1_input", E * sbh * r, k * 2 * sb * w * h + 2 * sbh * r,
             k * E * sb * w + expert_weights * E * w * h + E * sbh * r),
            ("qkv_input", E * sbh * r, LAYERNORM_FLOPS * sbh * r, 2 * E * sbh * r),
            ("qk", E * sb * (hq + kv), 2 * sb * h * (hq + kv),
             E * sbh + E * h * (hq + kv) + E * sb * (hq + kv)),
            ("v", E * sb * kv, 2 * sb * h * kv, E * sbh + E * h * kv + E * sb * kv),
        ]
        if self.training.flash_attention:
            # No s^2 tensor is stored; the kernel keeps its output and the row statistics.
            # Both are regenerated by re-running the fused forward kernel.
            kernel_flops = 4 * b * s * s * hq + SOFTMAX_FLOPS * ss
            kernel_bytes = E * sb * (hq + 2 * kv) + E * sb * hq + STATS_BYTES * a * sb
            out += [("softmax_stats", STATS_BYTES * a * sb, kernel_flops, kernel_bytes),
                    ("proj_input", E * sb * hq, kernel_flops, kernel_bytes)]
        else:
            out += [
                ("softmax_output", E * ss, 2 * b * s * s * hq + SOFTMAX_FLOPS * ss,
                 E * sb * (hq + kv) + E * ss),
                ("attn_dropout_mask", MASK_BYTES * ss, RNG_FLOPS * ss, MASK_BYTES * ss),
                ("attn_dropout_output", E * ss, DROPOUT_FLOPS * ss, (2 * E + MASK_BYTES) * ss),
                ("proj_input", E * sb * hq, 2 * b * s * s * hq, E * ss + E * sb * (kv + hq)),
            ]
        router = 2 * sbh * self.llm.experts * r if self.moe else 0
        out += [
            ("attn_residual_dropout_mask", MASK_BYTES * sbh * r, RNG_FLOPS * sbh * r,
             MASK_BYTES * sbh * r),
            # output projection (its all-reduce is communication, not counted here) + residual
            ("ln2_input", E * sbh * r, 2 * sb * hq * h + 2 * sbh * r,
             E * sb * hq + E * hq * h + E * sbh * r),
            # a MoE layer stores the dispatched tokens: top_k copies of the LN output
            ("fc1_input", k * E * sbh * r, LAYERNORM_FLOPS * sbh * r + router,
             E * sbh * r + k * E * sbh * r),
            ("gelu_input", k * g * E * sb * w, k * 2 * sb * h * w * g,
             k * E * sbh + expert_weights * E * h * w * g + k * g * E * sb * w),
            ("fc2_input", k * E * sb * w, ACTIVATION_FLOPS[self.llm.mlp] * k * sb * w,
             k * g * E * sb * w + k * E * sb * w),
            ("mlp_dropout_mask", MASK_BYTES * sbh * r, RNG_FLOPS * sbh * r,
             MASK_BYTES * sbh * r),
        ]
        return out


def _roofline(flops: float, traffic: float, wafer: Wafer) -> float:
    return max(flops / wafer.die_flops, traffic / wafer.dram_bandwidth)


def split_layers(layers: int, pp: int) -> list[int]:
    """Layers per stage, as even as possible; the first `layers % pp` stages get one more."""
    base, extra = divmod(layers, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def _check_degree(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InstanceError(f"must be a positive integer, got {value!r}", name)
    return value


# --------------------------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------------------------
def build_workload(llm: LLM, training: Training, wafer: Wafer, tp: int, pp: int,
                   dp: int = 1) -> Workload:
    """The workload of every pipeline stage for a TP x PP x DP layout of `llm` on `wafer`."""
    tp, pp, dp = _check_degree(tp, "tp"), _check_degree(pp, "pp"), _check_degree(dp, "dp")
    if pp > llm.layers:
        raise InstanceError(f"must be <= the {llm.layers} layers of {llm.name}, got {pp}", "pp")
    if tp * pp * dp > wafer.healthy_die_count:
        raise InstanceError(f"needs {tp * pp * dp} dies, wafer {wafer.name} has "
                            f"{wafer.healthy_die_count} healthy dies", "tp*pp*dp")
    per_step = training.micro_batch * dp
    if training.global_batch % per_step:
        raise InstanceError(f"must be a multiple of micro_batch * dp = {per_step}, got "
                            f"{training.global_batch}", "training.global_batch")
    m = training.global_batch // per_step
    E, s, b, h = training.activation_bytes, training.seq, training.micro_batch, llm.hidden

    kinds = {moe: _Layer(llm, training, tp, moe) for moe in {llm.is_moe_layer(i)
                                                              for i in range(llm.layers)}}
    stages = []
    first = 0
    for index, n in enumerate(split_layers(llm.layers, pp)):
        layer_ids = range(first, first + n)
        last = index == pp - 1

        params = sum(llm.layer_params(i) for i in layer_ids)
        if index == 0:
            params += llm.input_embedding_params
        if last:
            params += llm.head_params
            if llm.tied_embeddings and pp > 1:
                params += llm.vocab * h   # the last stage keeps its own copy of the tied matrix
        params /= tp   # vocab-parallel embeddings and TP-split layers; norms are negligible

        # Units of the stage: per-layer mean over its layers (exact for dense models).
        units, fwd_flops = _stage_units(llm, wafer, kinds, layer_ids)
        if last:
            fwd_flops += 2 * s * b * h * llm.vocab / tp   # LM head (logits)
        activation = sum(u.bytes for u in units)
        weight_bytes = E * params
        stored = n * activation
        bwd_flops = 2 * fwd_flops
        stages.append(StageWorkload(
            index=index, layers=n, inflight=min(pp - index, m), params=params,
            state_bytes=params * training.state_bytes_per_param, units=tuple(units),
            activation_bytes=activation,
            boundary_bytes=E * s * b * h * (1 / tp if training.sequence_parallel else 1),
            fwd_flops=fwd_flops, bwd_flops=bwd_flops,
            # forward: read weights, write stored activations; backward: read weights, write
            # weight gradients, read stored activations
            fwd_s=_roofline(fwd_flops, weight_bytes + stored, wafer),
            bwd_s=_roofline(bwd_flops, 2 * weight_bytes + stored, wafer),
            first_layer=first))
        first += n

    boundary = E * b * s * h
    return Workload(
        llm=llm, wafer=wafer, training=training, tp=tp, pp=pp, dp=dp, microbatches=m,
        stages=tuple(stages),
        p2p_bytes=boundary,
        tp_allreduce_bytes=2 * (tp - 1) / tp * boundary,
        tp_allreduces_per_layer=TP_ALLREDUCES_PER_LAYER,
        model_flops_per_iteration=model_flops_per_iteration(llm, training))


def _stage_units(llm: LLM, wafer: Wafer, kinds: dict[bool, _Layer],
                 layer_ids: range) -> tuple[list[OperatorUnit], float]:
    """Mean units over the stage's layers and the stage's total forward GEMM FLOPs."""
    n = len(layer_ids)
    sums: dict[str, list[float]] = {}
    fwd_flops = 0.0
    for i in layer_ids:
        layer = kinds[llm.is_moe_layer(i)]
        fwd_flops += layer.fwd_flops()
        for name, nbytes, flops, traffic in layer.units():
            acc = sums.setdefault(name, [0.0, 0.0, 0.0, 0.0])
            acc[0] += nbytes
            acc[1] += flops
            acc[2] += traffic
            acc[3] += _roofline(flops, traffic, wafer)
    units = [OperatorUnit(name, acc[0] / n, acc[1] / n, acc[3] / n, acc[2] / n,
                          recomputable=name not in CHECKPOINT_UNITS)
             for name, acc in sums.items()]
    return units, fwd_flops


def model_flops_per_iteration(llm: LLM, training: Training) -> float:
    """Model FLOPs of one iteration: 3 x forward (fwd + 2x bwd), no recomputation counted.

    For GPT (ffn = 4h, MHA) this is 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) (Korthikanti et al.
    2022 section 6; Narayanan et al. 2021 Eq. 3 without its recomputation pass).
    """
    per_sequence = sum(_Layer(llm, training, 1, llm.is_moe_layer(i), b=1).fwd_flops()
                       for i in range(llm.layers))
    per_sequence += 2 * training.seq * llm.hidden * llm.vocab   # LM head
    return 3 * training.global_batch * per_sequence

