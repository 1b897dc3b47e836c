"""Per-stage workload of one TP x PP (x DP) layout: memory, FLOPs, time, traffic.

Everything is per die and per micro-batch unless a name says otherwise. Every figure is a sum
over the per-operator table of `wafopt.costmodel.operators` (one table per layer kind and
tensor-parallel scheme); this module adds the stages (layer split, embedding and LM head, 1F1B
in-flight micro-batches), the model state, transient memory and the optimizer step, and
returns them as `wafopt.costmodel.stage.StageWorkload`s.
Formulas and sources: docs/workload.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from wafopt.core.errors import InstanceError
from wafopt.costmodel.layout import (
    check_degree,
    check_split,
    split_layers,
    stage_schemes,
)
from wafopt.costmodel.operators import (
    LAYERNORM_FLOPS,
    MASK_BYTES,
    REGATHER,
    SOFTMAX_FLOPS,
    Collective,
    Cost,
    LayerTable,
    Roofline,
    build_layer,
)
from wafopt.costmodel.rules import busiest_share, layout_violation, padded_vocab
from wafopt.costmodel.schedule import inflight_microbatches
from wafopt.costmodel.stage import (
    CommStep,
    ComputeStep,
    OperatorUnit,
    StageStep,
    StageWorkload,
)
from wafopt.costmodel.training import Training
from wafopt.hardware.catalog import LLM, Wafer

OPTIMIZER_FLOPS = 12       # per parameter and step: Adam moments, bias correction, update
LOGIT_BYTES = 4            # the cross-entropy keeps fp32 logits for its backward


@dataclass(frozen=True)
class LayoutWorkload:
    llm: LLM
    wafer: Wafer
    training: Training
    tp: int
    pp: int
    dp: int
    microbatches: int              # m = global_batch / (micro_batch * dp)
    stages: tuple[StageWorkload, ...]
    p2p_bytes: float               # b*s*h*bytes: the stage boundary tensor, per micro-batch, each way
    model_flops_per_iteration: float   # 3 * forward matmul FLOPs of the global batch (no recompute)
    schemes: tuple[str, ...] = ()
    interleave: int = 1            # virtual pipeline stages per device

    @property
    def dies(self) -> int:
        return self.tp * self.pp * self.dp

    def policy_rows(self, policy: str) -> list:
        """Every stage's recompute row of a named policy (none, selective, full)."""
        return [s.policy_row(policy) for s in self.stages]

    def fits(self, rows: list) -> bool:
        """Whether every stage under its recompute row fits one device's DRAM (nothing offloaded)."""
        return all(s.memory_bytes(row) <= self.wafer.dram_capacity for s, row in zip(self.stages, rows))


def build_workload(llm: LLM, training: Training, wafer: Wafer, tp: int, pp: int,
                   dp: int = 1, schemes=None, layers=None, interleave: int = 1) -> LayoutWorkload:
    """The workload of every pipeline stage for a TP x PP x DP layout of `llm` on `wafer`;
    `schemes`: the tensor-parallel scheme of every stage (default Megatron); `layers`: the layers
    of every stage (default split_layers, as even as possible)."""
    tp, pp, dp = check_degree(tp, "tp"), check_degree(pp, "pp"), check_degree(dp, "dp")
    if pp > llm.layers:
        raise InstanceError(f"must be <= the {llm.layers} layers of {llm.name}, got {pp}", "pp")
    if tp * pp * dp > wafer.healthy_die_count:
        raise InstanceError(f"needs {tp * pp * dp} {wafer.device}s, {wafer.system} {wafer.name} has "
                            f"{wafer.healthy_devices}", "tp*pp*dp")
    per_step = training.micro_batch * dp
    if training.global_batch % per_step:
        raise InstanceError(f"must be a multiple of micro_batch * dp = {per_step}, got "
                            f"{training.global_batch}", "training.global_batch")
    schemes = stage_schemes(schemes, pp)
    illegal = layout_violation(llm, wafer.parallel_rules, tp, schemes=schemes, system=wafer)
    if illegal:
        raise InstanceError(illegal, "tp")
    m = training.global_batch // per_step
    roofline = Roofline(wafer)
    tables = {(moe, sch): build_layer(llm, training, tp, moe, sch)
              for moe in {llm.is_moe_layer(i) for i in range(llm.layers)} for sch in set(schemes)}
    stages = []
    first = 0
    split = split_layers(llm.layers, pp) if layers is None else check_split(layers, llm.layers, pp)
    for index, n in enumerate(split):
        kinds = tuple((tables[(moe, schemes[index])], c) for moe, c in _kind_counts(llm, first, n))
        stages.append(_stage(llm, training, wafer, roofline, tp, pp, dp, m, index, first, n, kinds,
                             schemes[index], interleave))
        first += n
    return LayoutWorkload(llm=llm, wafer=wafer, training=training, tp=tp, pp=pp, dp=dp, microbatches=m,
                          stages=tuple(stages), p2p_bytes=boundary_bytes(training, llm),
                          model_flops_per_iteration=model_flops_per_iteration(llm, training), schemes=schemes,
                          interleave=interleave)


def stage_workload(llm: LLM, training: Training, wafer: Wafer, tp: int, pp: int, dp: int, index: int,
                   first_layer: int, n: int, scheme: str, microbatches: int | None = None) -> StageWorkload:
    """Stage `index` of a pp-stage pipeline holding layers first_layer .. first_layer + n - 1 alone
    (what build_workload builds for it within any split); its in-flight count assumes
    `microbatches` micro-batches per iteration (default: at least pp)."""
    kinds = tuple((_layer_table(llm, training, tp, moe, scheme), c) for moe, c in _kind_counts(llm, first_layer, n))
    return _stage(llm, training, wafer, Roofline(wafer), tp, pp, dp, microbatches or pp, index, first_layer, n,
                  kinds, scheme)


def _kind_counts(llm: LLM, first_layer: int, n: int) -> list[tuple[bool, int]]:
    """(is MoE, count) of each layer kind among layers first_layer .. first_layer + n - 1, dense first."""
    counts: dict[bool, int] = {}
    for i in range(first_layer, first_layer + n):
        counts[llm.is_moe_layer(i)] = counts.get(llm.is_moe_layer(i), 0) + 1
    return sorted(counts.items())


@lru_cache(maxsize=256)
def _layer_table(llm, training, tp, moe, scheme):
    return build_layer(llm, training, tp, moe, scheme)


def _steps(table: LayerTable, order, roofline: Roofline, backward: bool) -> tuple[StageStep, ...]:
    """Consecutive operators merge into one compute step; collectives are steps of their own."""
    steps: list[StageStep] = []
    names: list[str] = []

    def flush():
        if names:
            costs = [table.op(n).bwd if backward else table.op(n).fwd for n in names]
            steps.append(ComputeStep("+".join(names), sum(roofline(c) for c in costs), sum(c.flops for c in costs)))
            names.clear()

    for item in order:
        if isinstance(item, Collective):
            flush()
            op = table.op(item.op)
            steps.append(CommStep(item, roofline.hidden_s(item, op.bwd if backward else op.fwd)))
        else:
            names.append(item)
    flush()
    return tuple(steps)


def _head_ops(llm: LLM, training: Training, tp: int, scheme: str, first: bool, last: bool):
    """Embedding (first stage) and final norm + LM head + cross-entropy (last stage): their costs,
    collectives and stored bytes. Vocabulary-parallel in both schemes (Megatron)."""
    E, s, b, h, V = training.activation_bytes, training.seq, training.micro_batch, llm.hidden, padded_vocab(llm.vocab, tp)
    sb, sbh = s * b, s * b * llm.hidden
    sharded = tp > 1 and (training.sequence_parallel or scheme == "tatp")
    # the sequence-sharded norm, dropout and boundary tensors: TATP's busiest die holds whole tokens
    r = (busiest_share(sb, tp) if scheme == "tatp" else 1 / tp) if sharded else 1.0
    out = []   # (name, fwd Cost, bwd Cost, fwd collectives, bwd collectives, stored bytes)
    if first:
        fwd = Cost(sbh * r, E * sbh + 2 * E * sbh * r)   # gather rows, add positions, dropout
        coll = [] if tp == 1 else [Collective("reduce_scatter" if sharded else "all_reduce", E * sbh, tp,
                                              "embedding", "combine the vocabulary-parallel lookups")]
        out.append(("embedding", fwd, Cost(2 * fwd.flops, 2 * fwd.bytes), coll, [], MASK_BYTES * sbh * r))
    if last:
        gemm = 2 * sb * h * V / tp
        fwd = Cost(LAYERNORM_FLOPS * sbh * r + gemm + SOFTMAX_FLOPS * sb * V / tp,
                   2 * E * sbh * r + E * sbh + E * h * V / tp + LOGIT_BYTES * sb * V / tp, True)
        fwd_coll, bwd_coll = [], []
        if tp > 1 and sharded:
            fwd_coll = [Collective("all_gather", E * sbh, tp, "lm_head", "gather the final norm output")]
            bwd_coll = [Collective("reduce_scatter", E * sbh, tp, "lm_head", "reduce-scatter the input gradient")]
        elif tp > 1:
            bwd_coll = [Collective("all_reduce", E * sbh, tp, "lm_head", "all-reduce the input gradient")]
        stored = E * sbh * r + E * sbh * r + LOGIT_BYTES * sb * V / tp   # norm input, head input, logits
        out.append(("lm_head", fwd, Cost(2 * fwd.flops, 2 * fwd.bytes, True), fwd_coll, bwd_coll, stored))
    return out


def _stage(llm, training, wafer, roofline, tp, pp, dp, m, index, first_layer, n, kinds, scheme,
           interleave: int = 1) -> StageWorkload:
    first, last = index == 0, index == pp - 1
    h = llm.hidden

    # parameters per die: TP-split matrices, replicated norms, routers and position table
    params = sum(c * t.weights for t, c in kinds)
    vocab = padded_vocab(llm.vocab, tp)
    if first:
        params += vocab * h / tp + llm.max_positions * h
    if last:
        params += 2 * h   # final norm
        if not llm.tied_embeddings or pp > 1:
            params += vocab * h / tp   # LM head (a tied model's last stage keeps its own copy)
    states = training.states
    shard = dp if training.distributed_optimizer else 1
    state_bytes = params * (states.weights + states.grads + states.optimizer / shard)

    # units: mean over the stage's layers
    units = []
    ref = kinds[0][0]
    for j, ref_unit in enumerate(ref.units):
        nbytes = flops = traffic = secs = 0.0
        comm: dict[tuple, list[float]] = {}   # collective -> [tensor bytes, hidden seconds], summed
        for table, c in kinds:
            u = table.units[j]
            assert u.name == ref_unit.name
            regen = table.unit_regen(u)
            nbytes += c * u.bytes
            flops += c * regen.flops
            traffic += c * regen.bytes
            secs += c * table.unit_seconds(u, roofline)
            share = dict(u.producers)
            for coll in u.comm:
                acc = comm.setdefault((coll.kind, coll.group, coll.op, coll.purpose, coll.overlap,
                                       coll.asynchronous), [0.0, 0.0])
                acc[0] += c * coll.tensor_bytes
                acc[1] += c * share.get(coll.op, 1.0) * roofline.hidden_s(coll, table.op(coll.op).fwd)
        steps = tuple(CommStep(Collective(k[0], v[0] / n, k[1], k[2], k[3], k[4], k[5]), v[1] / n)
                      for k, v in comm.items())
        units.append(OperatorUnit(ref_unit.name, nbytes / n, flops / n, secs / n, traffic / n,
                                  ref_unit.recomputable, steps))
    activation = sum(u.bytes for u in units)
    boundary = sum(u.bytes for u in units if not u.recomputable)

    # passes: embedding, layers, LM head
    heads = _head_ops(llm, training, tp, scheme, first, last)
    fwd_blocks, bwd_blocks = [], []
    for name, fwd, bwd, fcoll, _, _ in heads:
        if name == "embedding":
            fwd_blocks.append(((ComputeStep(name, roofline(fwd), fwd.flops),)
                               + tuple(CommStep(c) for c in fcoll), 1))
    fwd_blocks += [(_steps(t, t.forward, roofline, False), c) for t, c in kinds]
    full_blocks = tuple((_steps(t, t.forward, roofline, False), c) for t, c in kinds)
    for name, fwd, bwd, fcoll, bcoll, _ in heads:
        if name == "lm_head":
            fwd_blocks.append((tuple(CommStep(c) for c in fcoll) + (ComputeStep(name, roofline(fwd), fwd.flops),), 1))
            bwd_blocks.append(((ComputeStep(name, roofline(bwd), bwd.flops),) + tuple(CommStep(c) for c in bcoll), 1))
    bwd_blocks += [(_steps(t, t.backward, roofline, True), c) for t, c in reversed(kinds)]
    for name, fwd, bwd, fcoll, bcoll, _ in heads:
        if name == "embedding":
            bwd_blocks.append(((ComputeStep(name, roofline(bwd), bwd.flops),), 1))

    def compute(blocks):
        return (sum(c * sum(st.seconds for st in steps if isinstance(st, ComputeStep)) for steps, c in blocks),
                sum(c * sum(st.flops for st in steps if isinstance(st, ComputeStep)) for steps, c in blocks))

    fwd_s, fwd_flops = compute(fwd_blocks)
    bwd_s, bwd_flops = compute(bwd_blocks)
    full_s, full_flops = compute(full_blocks)

    # optimizer step: memory-bound pass over the states (the sharded part over dp ranks)
    local = params / shard
    read = states.grads + states.moments + (states.master or states.weights)
    write = states.moments + states.master + states.weights
    optimizer_s = roofline(Cost(OPTIMIZER_FLOPS * local, local * (read + write)))

    return StageWorkload(
        index=index, layers=n, inflight=inflight_microbatches(pp, index, m, interleave), params=params,
        state_bytes=state_bytes,
        units=tuple(units), activation_bytes=activation, boundary_bytes=boundary,
        fwd_flops=fwd_flops, bwd_flops=bwd_flops, fwd_s=fwd_s, bwd_s=bwd_s, first_layer=first_layer,
        scheme=scheme, extra_activation_bytes=sum(hd[5] for hd in heads),
        gradient_bytes=max(t.gradient_peak_bytes() for t, _ in kinds),
        buffer_bytes=training.workspace_bytes + max(t.stream_buffer_bytes for t, _ in kinds),
        full_recompute_flops=full_flops, full_recompute_s=full_s, optimizer_s=optimizer_s,
        grad_bytes=params * states.grads,
        dp_gather_bytes=params * states.weights if training.distributed_optimizer else 0.0,
        forward=tuple(fwd_blocks), backward=tuple(bwd_blocks), full_recompute_blocks=full_blocks,
        backward_after_full=tuple((tuple(st for st in steps if not (isinstance(st, CommStep)
                                                                     and st.collective.purpose == REGATHER)), c)
                                  for steps, c in bwd_blocks),
        tables=kinds)


def boundary_bytes(training: Training, llm: LLM) -> float:
    """The stage boundary tensor b s h, per micro-batch, each way."""
    return training.activation_bytes * training.micro_batch * training.seq * llm.hidden


def model_flops_per_iteration(llm: LLM, training: Training) -> float:
    """Model FLOPs of one iteration: 3 x forward matmul FLOPs (fwd + 2x bwd), no recomputation.

    For GPT (ffn = 4h, MHA) this is 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) (Korthikanti et al.
    2022 section 6; Narayanan et al. 2021 Eq. 3 without its recomputation pass).
    """
    one = Training(training.seq, 1, training.global_batch, training.attention, False, training.states)
    per_kind = {moe: build_layer(llm, one, 1, moe).model_flops for moe in {llm.is_moe_layer(i)
                                                                          for i in range(llm.layers)}}
    per_sequence = sum(per_kind[llm.is_moe_layer(i)] for i in range(llm.layers))
    per_sequence += 2 * training.seq * llm.hidden * llm.vocab   # LM head
    return 3 * training.global_batch * per_sequence
