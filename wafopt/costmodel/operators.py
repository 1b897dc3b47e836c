"""The per-operator cost table of one transformer layer on one die of a tensor-parallel group.

One table per layer kind (dense or MoE), tensor-parallel scheme (Megatron or TATP), attention
kind (standard or flash) and sequence parallelism. Every stage figure of the workload model
(forward, backward and recomputation time, FLOPs, DRAM traffic, stored activations, the
recomputable units, transient memory, tensor-parallel traffic) is a sum over this table; nothing
else computes them. Everything is per die and per micro-batch. Formulas and sources:
docs/workload.md.

- FLOPs: Narayanan et al. 2021, Sec. 3 (a multiply-add is 2 FLOPs; backward = 2 x forward).
- Backward traffic: a GEMM's two gradient products move twice its forward bytes; an element-wise
  operator's backward is one kernel that reads the output gradient and what its forward saved
  (input, output or dropout mask) and writes the input gradient.
- Stored activations: Korthikanti et al. 2022, Sec. 4 (sizes) and Sec. 5 (recomputation).
- Tensor-parallel collectives: Megatron's f / g operators (Korthikanti Sec. 4.2.2, Fig. 5) and,
  with sequence parallelism, all-gather / reduce-scatter plus the backward re-gather of the
  layer input for the weight gradient; TATP streams of TEMP Sec. V.
- Time of an operator: max(FLOPs / (peak x efficiency), bytes / DRAM bandwidth).
- Fused element-wise chains (`training.fused_elementwise`; Narayanan et al. 2021, Sec. 4.2: bias +
  GeLU, bias + dropout + add, scale + mask + softmax as single kernels): an element-wise operator
  that directly follows another one takes its input from the kernel, not from DRAM.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from wafopt.costmodel.rules import busiest_share, kv_heads_per_die

# Per-element costs of the non-GEMM operators (plausible values; they are memory-bound anyway).
MASK_BYTES = 1          # dropout masks are stored as bytes (Korthikanti Sec. 4.1)
STATS_BYTES = 4         # FlashAttention keeps one fp32 log-sum-exp per row and head
LAYERNORM_FLOPS = 5     # mean, variance, normalize, scale, shift
SOFTMAX_FLOPS = 5       # scale + mask, max, exp, sum, divide
DROPOUT_FLOPS = 2       # draw the mask (or replay it from the RNG state) and apply it
RESIDUAL_FLOPS = 3      # dropout (2) + the residual add
ACTIVATION_FLOPS = {"gelu": 8, "swiglu": 6}   # tanh-GeLU; SiLU and the gating product
BACKWARD_FACTOR = 2.0   # backward FLOPs (and a GEMM's traffic) = 2 x forward: input and weight gradient
BACKWARD_GEMM_HALF = 1 / BACKWARD_FACTOR   # the input- or the weight-gradient GEMM alone
FLASH_BACKWARD_GEMMS = 2.5  # FlashAttention's backward recomputes Q K^T: 5 GEMMs for 2 forward

SCHEMES = ("megatron", "tatp")
# The sequence-parallel backward re-gathers a GEMM's input for its weight gradient; after full
# recomputation the recomputed forward has just gathered it, so that backward skips it.
REGATHER = "re-gather the input for the weight gradient"
ATTENTIONS = ("standard", "flash")
SELECTIVE_UNITS = ("softmax_output", "attn_dropout_mask", "attn_dropout_output")  # Korthikanti Sec. 5
CHECKPOINT_UNIT = "ln1_input"   # the layer input: full recomputation restarts from it


@dataclass(frozen=True)
class Collective:
    """One tensor-parallel communication of a layer on a ring of `group` dies.

    all_reduce / all_gather / reduce_scatter: `tensor_bytes` is the whole tensor; a ring
    algorithm runs 2(t-1) (all-reduce) or t-1 steps, each sending tensor_bytes / t to the ring
    successor. stream (TATP, TEMP Sec. V): t-1 rounds, each sending one sub-tensor of
    `tensor_bytes` to both ring neighbours (bidirectional relay), overlapped with the operator's
    compute.
    """

    kind: str
    tensor_bytes: float
    group: int
    op: str          # the operator it belongs to
    purpose: str
    overlap: float = 0.0   # share of its operator's compute (same pass) it can run under
    asynchronous: bool = False   # launched beside a GEMM (Megatron-LM), hides as far as the system allows

    @property
    def steps(self) -> int:
        return 2 * (self.group - 1) if self.kind == "all_reduce" else self.group - 1

    @property
    def directions(self) -> int:
        return 2 if self.kind == "stream" else 1

    @property
    def flow_bytes(self) -> float:
        """Bytes one die sends to one ring neighbour over the whole collective."""
        per_step = self.tensor_bytes if self.kind == "stream" else self.tensor_bytes / self.group
        return self.steps * per_step

    @property
    def bytes_sent(self) -> float:
        """Bytes one die sends (a ring all-reduce sends 2(t-1)/t of the tensor)."""
        return self.directions * self.flow_bytes


@dataclass(frozen=True)
class Cost:
    flops: float = 0.0
    bytes: float = 0.0
    matrix: bool = False   # runs on the matrix units (GEMMs, attention products), else vector units


@dataclass(frozen=True)
class Op:
    """One operator of the layer: costs, activation sizes and what it stores for the backward."""

    name: str
    fwd: Cost
    bwd: Cost
    weights: float = 0.0            # parameters of this die
    in_bytes: float = 0.0           # its input activation (= size of the input gradient)
    out_bytes: float = 0.0          # its output activation (= size of the output gradient)
    stores: tuple[str, ...] = ()    # units it saves for its backward
    gathered_bytes: float = 0.0     # a re-gathered full input held during its backward (SP)
    model_flops: float = 0.0        # its matrix-multiply FLOPs (model FLOPs, Narayanan Sec. 3)


@dataclass(frozen=True)
class LayerUnit:
    """A stored activation tensor of the layer and how to regenerate it."""

    name: str
    bytes: float
    producers: tuple[tuple[str, float], ...]   # (op, share of its forward) re-run to regenerate it
    comm: tuple[Collective, ...] = ()          # collectives that regeneration repeats
    recomputable: bool = True


class Roofline:
    """Operator rooflines on one die: max(FLOPs / effective FLOP rate, bytes / effective bandwidth),
    where the rates are the peaks scaled by the system's efficiency tables
    (wafopt.hardware.efficiency: matrix efficiency by the operator's FLOPs, vector efficiency,
    memory efficiency by its bytes) and the flat `compute_efficiency`."""

    def __init__(self, wafer):
        self.flops = wafer.die_flops * wafer.compute_efficiency
        self.bandwidth = wafer.dram_bandwidth
        self.efficiency = wafer.efficiency

    def hidden_s(self, collective: Collective, cost: Cost) -> float:
        """Seconds of its operator's compute (`cost`, same pass) a collective runs under: TATP
        streams hide under their share of it; an asynchronous collective's window hides it only
        as far as the system's `async_overlap` says (its kernels share the GPU with the GEMM)."""
        share = collective.overlap * (self.efficiency.async_overlap if collective.asynchronous else 1.0)
        return share * self(cost) if share else 0.0

    def __call__(self, cost: Cost) -> float:
        eff = self.efficiency
        rate = self.flops * (eff.matrix_at(cost.flops) if cost.matrix else eff.vector)
        return max(cost.flops / rate, cost.bytes / (self.bandwidth * eff.memory_at(cost.bytes)))


@dataclass(frozen=True)
class LayerTable:
    """The operators of one layer, their forward/backward order with the collectives, and units."""

    ops: tuple[Op, ...]
    forward: tuple[str | Collective, ...]    # op names and collectives in execution order
    backward: tuple[str | Collective, ...]
    units: tuple[LayerUnit, ...]
    stream_buffer_bytes: float = 0.0         # TATP receive buffers (transient)
    residual_grad_bytes: float = 0.0         # the residual-stream gradient, live through the backward

    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def collectives(self, phase: str) -> list[Collective]:
        seq = self.forward if phase == "forward" else self.backward
        return [c for c in seq if isinstance(c, Collective)]

    @property
    def fwd_flops(self) -> float:
        return sum(o.fwd.flops for o in self.ops)

    @property
    def bwd_flops(self) -> float:
        return sum(o.bwd.flops for o in self.ops)

    @property
    def model_flops(self) -> float:
        return sum(o.model_flops for o in self.ops)

    @property
    def weights(self) -> float:
        return sum(o.weights for o in self.ops)

    @property
    def activation_bytes(self) -> float:
        return sum(u.bytes for u in self.units)

    def unit_regen(self, unit: LayerUnit) -> Cost:
        return Cost(sum(share * self.op(name).fwd.flops for name, share in unit.producers),
                    sum(share * self.op(name).fwd.bytes for name, share in unit.producers))

    def unit_seconds(self, unit: LayerUnit, roofline: Roofline) -> float:
        """Compute seconds of regenerating a unit: its producers' rooflines, shared."""
        return sum(share * roofline(self.op(name).fwd) for name, share in unit.producers)

    def gradient_peak_bytes(self) -> float:
        """Largest activation-gradient footprint of one backward operator: its output and input
        gradients, a re-gathered input (sequence parallelism), plus the residual-stream gradient."""
        return self.residual_grad_bytes + max(o.in_bytes + o.out_bytes + o.gathered_bytes for o in self.ops)


def _fuse_elementwise(ops: list[Op]) -> list[Op]:
    """Drop the DRAM read of the input of every element-wise operator whose producer is an
    element-wise operator too (the layer's first one follows the previous layer's last); in the
    backward the gradient between the two is neither written nor read. Stored tensors are still
    written, so memory is unchanged."""
    fused = []
    for k, op in enumerate(ops):
        before = ops[k - 1]   # k = 0: the previous layer's last operator (same shape)
        if op.fwd.matrix or before.fwd.matrix:
            fused.append(op)
            continue
        fused.append(replace(op, fwd=replace(op.fwd, bytes=op.fwd.bytes - op.in_bytes),
                             bwd=replace(op.bwd, bytes=op.bwd.bytes - 2 * min(op.in_bytes, op.out_bytes))))
    return fused


def build_layer(llm, training, tp: int, moe: bool, scheme: str = "megatron") -> LayerTable:
    """The cost table of one layer of `llm` (MoE layer if `moe`) on one die of a tp-die group."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tensor-parallel scheme {scheme!r}")
    t = tp
    tatp = scheme == "tatp" and t > 1
    sp = (training.sequence_parallel or tatp) and t > 1
    E, s, b, h = training.activation_bytes, training.seq, training.micro_batch, llm.hidden
    sb = s * b
    sbh = sb * h
    ffn = llm.expert_ffn if moe else llm.ffn_hidden
    if tatp:
        # Sequence and reduction split (TEMP Sec. V): a die computes its whole tokens over every
        # head and width, and holds whole rows of every weight. Where t divides neither evenly the
        # busiest die has one more token (row) than the others; it is the one priced.
        r = busiest_share(sb, t)                 # the die's token share, everywhere in the layer
        hq, kv, a, w = h * r, llm.kv_hidden * r, llm.heads * r, ffn * r   # widths x token share
        rows_h, rows_ffn = busiest_share(h, t), busiest_share(ffn, t)    # weight-row shares
    else:
        r = 1 / t if sp else 1.0                 # share of the tokens of the non-TP regions
        hq = h / t                               # Q / attention-output width per die (whole heads)
        kv = llm.head_dim * kv_heads_per_die(llm, t)   # KV heads replicated beyond kv_heads dies
        a = llm.heads / t                        # heads of the score tensor per die
        w = ffn / t
    kv_streamed = (t - 1) * E * sb * kv if tatp else 0.0   # the other dies' K (or V) blocks read
    k = llm.top_k if moe else 1                  # MLP copies per token
    g = 2 if llm.mlp == "swiglu" else 1          # gate and up projections
    n_experts = llm.experts if moe else 1        # expert weights a die reads
    grad_bytes = training.states.grads           # weight-gradient accumulation buffer, per parameter
    ss = a * s * s * b                           # elements of one score tensor per die
    gemm_in = E * sbh * (r if tatp else 1)       # a GEMM's token-side input (gathered unless TATP)

    def gemm(name, flops, weights, in_bytes, out_bytes, stores=(), streamed=0.0):
        fwd = Cost(flops, E * weights + in_bytes + out_bytes + streamed, True)
        bwd = Cost(BACKWARD_FACTOR * flops,
                   2 * (in_bytes + out_bytes) + E * weights + 2 * grad_bytes * weights + 2 * streamed, True)
        gathered = E * sbh if sp and not tatp and name in ("qkv", "fc1") else 0.0
        return Op(name, fwd, bwd, weights, in_bytes, out_bytes, stores, gathered, flops)

    def elementwise(name, flops, in_bytes, out_bytes, stores=(), extra_bytes=0.0, weights=0.0, matmul=False,
                    saved_bytes=None, grad_bytes=None):
        """saved_bytes: what the backward kernel reads besides the output gradient (default: the
        input); grad_bytes: the input gradient it writes (default: the input's size)."""
        fwd = Cost(flops, in_bytes + out_bytes + extra_bytes, matmul)
        if matmul:   # batched GEMMs: an input- and a weight-side product, each the forward's size
            bwd = Cost(BACKWARD_FACTOR * flops, BACKWARD_FACTOR * fwd.bytes, True)
        else:        # one kernel: read the output gradient and what was saved, write the input gradient
            bwd = Cost(BACKWARD_FACTOR * flops, out_bytes + (in_bytes if saved_bytes is None else saved_bytes)
                       + (in_bytes if grad_bytes is None else grad_bytes), False)
        return Op(name, fwd, bwd, weights, in_bytes, out_bytes, stores, model_flops=flops if matmul else 0.0)

    def stream_bytes(weights, copies=1):
        """TEMP's selective transfer: stream the smaller of a sub-weight and a token block."""
        return min(E * weights, copies * E * sbh * r)

    if tatp:   # K-split sub-weights: rows of h (QKV, output projection, FC1) or of the MLP width (FC2)
        qkv_w = rows_h * h * (h + 2 * llm.kv_hidden)
        out_w = rows_h * h * h
        fc1_w = n_experts * rows_h * h * ffn * g
        fc2_w = n_experts * rows_ffn * ffn * h
    else:      # Megatron: column blocks of QKV and FC1, row blocks of the output projection and FC2
        qkv_w = h * (hq + 2 * kv)
        out_w = hq * h
        fc1_w = n_experts * h * w * g
        fc2_w = n_experts * w * h
    router_w = h * llm.experts if moe else 0

    def streamed(weights, copies=1):
        """DRAM traffic of the sub-tensors a TATP operator receives and consumes."""
        return (t - 1) * stream_bytes(weights, copies) if tatp else 0.0

    ops = [
        elementwise("ln1", LAYERNORM_FLOPS * sbh * r, E * sbh * r, E * sbh * r, ("ln1_input",),
                    weights=2 * h),
        gemm("qkv", 2 * sb * h * (hq + 2 * kv), qkv_w, gemm_in, E * sb * (hq + 2 * kv), ("qkv_input",),
             streamed(qkv_w)),
    ]
    if training.attention == "flash":
        core_flops = 4 * b * s * s * hq + (SOFTMAX_FLOPS + DROPOUT_FLOPS) * ss
        qkv_bytes = E * sb * (hq + 2 * kv)
        fwd = Cost(core_flops, qkv_bytes + 2 * kv_streamed + E * sb * hq + STATS_BYTES * a * sb, True)
        bwd_flops = FLASH_BACKWARD_GEMMS * 4 * b * s * s * hq + BACKWARD_FACTOR * (SOFTMAX_FLOPS + DROPOUT_FLOPS) * ss
        ops.append(Op("flash_attention", fwd, Cost(bwd_flops, BACKWARD_FACTOR * fwd.bytes, True), 0.0,
                      qkv_bytes, E * sb * hq, ("qk", "v", "softmax_stats"), model_flops=4 * b * s * s * hq))
    else:
        ops += [
            elementwise("attn_scores", 2 * b * s * s * hq, E * sb * (hq + kv), E * ss, ("qk",),
                        extra_bytes=kv_streamed, matmul=True),
            elementwise("softmax", SOFTMAX_FLOPS * ss, E * ss, E * ss, ("softmax_output",), saved_bytes=E * ss),
            elementwise("attn_dropout", DROPOUT_FLOPS * ss, E * ss, E * ss,
                        ("attn_dropout_mask",), extra_bytes=MASK_BYTES * ss, saved_bytes=MASK_BYTES * ss),
            elementwise("attn_over_values", 2 * b * s * s * hq, E * ss + E * sb * kv, E * sb * hq,
                        ("attn_dropout_output", "v"), extra_bytes=kv_streamed, matmul=True),
        ]
    ops += [
        gemm("out_proj", 2 * sb * hq * h, out_w, E * sb * hq, E * sbh * (r if tatp else 1), ("proj_input",),
             streamed(out_w)),
        elementwise("attn_residual", RESIDUAL_FLOPS * sbh * r, 2 * E * sbh * r, E * sbh * r,
                    ("attn_residual_dropout_mask",), extra_bytes=MASK_BYTES * sbh * r,
                    saved_bytes=MASK_BYTES * sbh * r, grad_bytes=E * sbh * r),
        elementwise("ln2", LAYERNORM_FLOPS * sbh * r, E * sbh * r, E * sbh * r, ("ln2_input",), weights=2 * h),
    ]
    if moe:
        ops.append(gemm("router", 2 * sbh * llm.experts * r, router_w, E * sbh * r, E * sb * llm.experts * r))
    ops += [
        gemm("fc1", k * 2 * sb * h * w * g, fc1_w, k * gemm_in, k * g * E * sb * w, ("fc1_input",),
             streamed(fc1_w, k)),
        elementwise("activation", ACTIVATION_FLOPS[llm.mlp] * k * sb * w, k * g * E * sb * w, k * E * sb * w,
                    ("gelu_input",)),
        gemm("fc2", k * 2 * sb * w * h, fc2_w, k * E * sb * w, k * E * sbh * (r if tatp else 1), ("fc2_input",),
             streamed(fc2_w, k)),
        elementwise("mlp_residual", RESIDUAL_FLOPS * sbh * r, 2 * E * sbh * r, E * sbh * r,
                    ("mlp_dropout_mask",), extra_bytes=MASK_BYTES * sbh * r,
                    saved_bytes=MASK_BYTES * sbh * r, grad_bytes=E * sbh * r),
    ]
    if training.fused_elementwise:
        ops = _fuse_elementwise(ops)
    ops = tuple(ops)
    names = {o.name for o in ops}

    # --- collectives, in execution order --------------------------------------------------------
    def coll(kind, nbytes, op, purpose, overlap=0.0, asynchronous=False):
        return Collective(kind, nbytes, t, op, purpose, overlap, asynchronous)

    def beside_gemm_half(kind, op, purpose):
        """Megatron-LM's asynchronous backward collective of a column-parallel GEMM: the input
        re-gather runs beside the input-gradient GEMM, the input-gradient reduction beside the
        weight-gradient GEMM; each is half the operator's backward."""
        return coll(kind, full, op, purpose, BACKWARD_GEMM_HALF, asynchronous=True)

    full = E * sbh   # the layer's boundary tensor, whole
    fwd_comm: dict[str, tuple[list, list]] = {}   # op -> (collectives before it, after it)
    bwd_comm: dict[str, tuple[list, list]] = {}   # op -> (before its backward, after its backward)
    if t > 1 and tatp:
        # t rounds; the t - 1 transfers run under the compute of the other rounds (TEMP Sec. V)
        hidden = (t - 1) / t
        for name, wts, copies in (("qkv", qkv_w, 1), ("out_proj", out_w, 1), ("fc1", fc1_w, k), ("fc2", fc2_w, k)):
            v = stream_bytes(wts, copies)
            fwd_comm[name] = ([coll("stream", v, name, "streamed sub-tensors (TATP)", hidden)], [])
            bwd_comm[name] = ([coll("stream", v, name, "input-gradient stream (TATP)", hidden / 2),
                               coll("stream", v, name, "weight-gradient stream (TATP)", hidden / 2)], [])
        # attention over the sequence split: each round a die receives another's K/V block, half
        # from each neighbour; the backward streams K/V again and their gradients back
        core = "flash_attention" if training.attention == "flash" else "attn_scores"
        fwd_comm[core] = ([coll("stream", E * sb * kv, core, "K/V blocks of the other dies (TATP)", hidden)], [])
        bwd_comm[core] = ([coll("stream", E * sb * kv, core, "K/V blocks again (TATP)", hidden / 2),
                           coll("stream", E * sb * kv, core, "K/V gradients back (TATP)", hidden / 2)], [])
    elif t > 1 and sp:
        for first, last in (("qkv", "out_proj"), ("fc1", "fc2")):
            fwd_comm[first] = ([coll("all_gather", full, first, "gather the sequence-parallel input")], [])
            fwd_comm[last] = ([], [coll("reduce_scatter", full, last, "reduce-scatter the partial output")])
            bwd_comm[last] = ([coll("all_gather", full, last, "gather the output gradient")], [])
            bwd_comm[first] = ([beside_gemm_half("all_gather", first, REGATHER)],
                               [beside_gemm_half("reduce_scatter", first, "reduce-scatter the input gradient")])
    elif t > 1:
        for first, last in (("qkv", "out_proj"), ("fc1", "fc2")):
            fwd_comm[last] = ([], [coll("all_reduce", full, last, "all-reduce the partial output (g)")])
            bwd_comm[first] = ([], [beside_gemm_half("all_reduce", first, "all-reduce the input gradient (f)")])

    forward: list = []
    for o in ops:
        before, after = fwd_comm.get(o.name, ([], []))
        forward += before + [o.name] + after
    backward: list = []
    for o in reversed(ops):
        before, after = bwd_comm.get(o.name, ([], []))
        backward += before + [o.name] + after

    # --- units: stored tensors and their regeneration -------------------------------------------
    qk_share = (hq + kv) / (hq + 2 * kv)

    def comm_of(op_name):
        """Collectives regeneration repeats: the producer's forward collectives (an SP all-gather of
        a GEMM input included: the stored input is the sequence shard)."""
        before, after = fwd_comm.get(op_name, ([], []))
        return tuple(before + after)

    unit_list = [
        # The layer input: the output of the preceding layer's FC2, its collective and residual add
        # (this layer's shape stands in for that layer's). Full recomputation keeps it.
        LayerUnit("ln1_input", E * sbh * r, (("fc2", 1.0), ("mlp_residual", 1.0)), comm_of("fc2"), recomputable=False),
        LayerUnit("qkv_input", E * sbh * r, (("ln1", 1.0),)),
        LayerUnit("qk", E * sb * (hq + kv), (("qkv", qk_share),), comm_of("qkv")),
        LayerUnit("v", E * sb * kv, (("qkv", 1 - qk_share),), comm_of("qkv")),
    ]
    if training.attention == "flash":
        # no s^2 tensor is stored; output and row statistics come from re-running the fused kernel
        unit_list += [LayerUnit("softmax_stats", STATS_BYTES * a * sb, (("flash_attention", 1.0),),
                                comm_of("flash_attention")),
                      LayerUnit("proj_input", E * sb * hq, (("flash_attention", 1.0),), comm_of("flash_attention"))]
    else:
        unit_list += [
            LayerUnit("softmax_output", E * ss, (("attn_scores", 1.0), ("softmax", 1.0)), comm_of("attn_scores")),
            LayerUnit("attn_dropout_mask", MASK_BYTES * ss, (("attn_dropout", 0.5),)),   # RNG replay only
            LayerUnit("attn_dropout_output", E * ss, (("attn_dropout", 0.5),)),
            LayerUnit("proj_input", E * sb * hq, (("attn_over_values", 1.0),), comm_of("attn_scores")),
        ]
    unit_list += [
        LayerUnit("attn_residual_dropout_mask", MASK_BYTES * sbh * r, (("attn_residual", 1 / RESIDUAL_FLOPS),)),
        # output projection, its collective, dropout and residual add
        LayerUnit("ln2_input", E * sbh * r, (("out_proj", 1.0), ("attn_residual", 1.0)), comm_of("out_proj")),
        # a MoE layer stores the dispatched tokens: top_k copies of the LN output
        LayerUnit("fc1_input", k * E * sbh * r, (("ln2", 1.0),) + ((("router", 1.0),) if moe else ())),
        LayerUnit("gelu_input", k * g * E * sb * w, (("fc1", 1.0),), comm_of("fc1")),
        LayerUnit("fc2_input", k * E * sb * w, (("activation", 1.0),)),
        LayerUnit("mlp_dropout_mask", MASK_BYTES * sbh * r, (("mlp_residual", 1 / RESIDUAL_FLOPS),)),
    ]
    for u in unit_list:
        assert all(n in names for n, _ in u.producers), u
    stored = {name for o in ops for name in o.stores}
    assert stored == {u.name for u in unit_list}, stored ^ {u.name for u in unit_list}

    buffers = 0.0
    if tatp:  # double-buffered receive of the largest streamed sub-tensor from both neighbours
        buffers = 2 * 2 * max(c.tensor_bytes for c in (x for x in forward if isinstance(x, Collective)))
    return LayerTable(ops, tuple(forward), tuple(backward), tuple(unit_list), buffers, E * sbh * r)
