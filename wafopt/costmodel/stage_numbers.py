"""The cost model's numbers of one pipeline stage as the planner's bounds need them: compute (with
the least time its tensor-parallel collectives take on any placement), memory and recomputation
per stage role and layer range, whatever the rest of the split.

Built on `Scenario.stage_workload` (the stage exactly as `build_workload` prices it in any split) and the
operator tables (`build_layer`, `Roofline`), so a bound assembles no stage costs of its own.
Micro-batch sizes here are sizes, never None: callers resolve the scenario's default.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

from wafopt.costmodel.model import boundary_bytes
from wafopt.costmodel.network import (
    least_blocks_comm_s,
    least_dp_allreduce_s,
    least_send_s,
)
from wafopt.costmodel.operators import Roofline, build_layer
from wafopt.costmodel.rules import sequence_parallel_violation
from wafopt.costmodel.scenario import Choice, Parallel

# the (pp, index) of a pipeline whose stage `index` has this role: its numbers are the role's in any pp
ROLE_STAGE = {"only": (1, 0), "first": (2, 0), "middle": (3, 1), "last": (2, 1)}


class StageNumbers(NamedTuple):
    """Per die and micro-batch, of one stage under one tensor-parallel scheme."""
    forward_s: float          # forward compute + the least time of its collectives
    backward_s: float         # backward compute + the least time of its collectives
    fixed_bytes: float        # state + gradients of one operator + buffers: never offloaded
    kept_bytes: float         # activations of one micro-batch without recomputation
    unit_bytes: list          # per unit: bytes per layer recomputation frees (0: cannot be dropped)
    unit_seconds: list        # per unit: seconds per recomputed layer
    optimizer_s: float        # the optimizer step
    grad_bytes: float         # gradients data parallelism reduces (per die)
    gather_bytes: float       # weights the distributed optimizer re-gathers (per die)


def stage_role(j: int, p: int) -> str:
    """The role of stage j of p: only, first, middle or last."""
    return "only" if p == 1 else "first" if j == 0 else "last" if j == p - 1 else "middle"


def state_floor(scenario, par) -> float:
    """Least model state of the busiest die: the stages' parameters cover the model at least once."""
    tr = scenario.training
    states = tr.states
    shard = par.dp if tr.distributed_optimizer else 1
    per_param = states.weights + states.grads + states.optimizer / shard
    return scenario.llm.total_params / (par.tp * par.pp) * per_param


@lru_cache(maxsize=64)
def kind_prefix(llm) -> list[int]:
    """MoE layers before each layer boundary (a stage's numbers depend on its role and kind counts)."""
    out = [0]
    for i in range(llm.layers):
        out.append(out[-1] + bool(llm.is_moe_layer(i)))
    return out


@lru_cache(maxsize=1 << 16)
def exact_stage_numbers(scenario, tp: int, dp: int, micro_batch: int, role: str, first: int, n: int,
                        scheme: str, sp: bool | None = None) -> StageNumbers:
    """The numbers of a stage with this role holding layers first .. first + n - 1 (the cost
    model's own stage, as in any split), with sequence parallelism `sp` (None: the scenario's)."""
    return _stage_numbers(scenario, tp, dp, micro_batch, role, first, n, scheme, sp)


def scheme_settings(scenario, tp: int) -> list[tuple]:
    """Every (tensor-parallel scheme, sequence-parallel setting) a plan's stages may use over tp
    dies: the legal schemes, each with its sequence_parallel_choices."""
    return [(scheme, sp) for scheme in scenario.tp_schemes(tp)
            for sp in sequence_parallel_choices(scenario, tp, scheme)]


def sequence_parallel_choices(scenario, tp: int, scheme: str = "megatron") -> tuple:
    """The sequence-parallel settings a plan may use over tp dies: the scenario's where it fixes one
    (None), else off and, where the sequence splits over tp (wafopt.costmodel.rules), on. TATP
    splits the sequence anyway: one setting."""
    if scenario.training.sequence_parallel_fixed or tp == 1 or scheme == "tatp":
        return (None,)
    return (False, True) if sequence_parallel_violation(scenario.training.seq, tp) is None else (False,)


def _stage_numbers(scenario, tp, dp, micro_batch, role, first, n, scheme, sp) -> StageNumbers:
    pp, index = ROLE_STAGE[role]
    choice = Choice(Parallel(tp, pp, dp), scheme, micro_batch, sequence_parallel=sp)
    tr = scenario.training_for(choice)
    st = scenario.stage_workload(choice, index, first, n)
    drop = [u.recomputable and tr.recompute for u in st.units]   # else dropping it saves no memory
    ub = [u.bytes if ok else 0.0 for u, ok in zip(st.units, drop)]
    r = [u.recompute_s if ok else 0.0 for u, ok in zip(st.units, drop)]
    every = n * sum(r)
    if every > 0 and st.full_recompute_s < every:   # full recomputation is the cheaper way
        r = [v * st.full_recompute_s / every for v in r]
    wafer = scenario.wafer
    fwd_comm = least_blocks_comm_s(st.forward, wafer)
    # after full recomputation the backward skips the SP re-gathers: the lesser of the two
    bwd_comm = min(least_blocks_comm_s(st.backward, wafer), least_blocks_comm_s(st.backward_after_full, wafer))
    return StageNumbers(st.fwd_s + fwd_comm, st.bwd_s + bwd_comm, st.state_bytes + st.transient_bytes(None),
                        st.kept_bytes(None), ub, r, st.optimizer_s, st.grad_bytes, st.dp_gather_bytes)


def least_tail_s(numbers: StageNumbers, dp: int, wafer) -> float:
    """What follows a stage's last backward at the least: its gradient reduction over dp replicas
    on any placement (one hop per ring step, no contention) and its optimizer step."""
    return numbers.optimizer_s + least_dp_allreduce_s(dp, numbers.grad_bytes, numbers.gather_bytes, wafer)


def stage_numbers(scenario, tp: int, dp: int, micro_batch: int, role: str, first: int, n: int,
                  scheme: str, sp: bool | None = None) -> StageNumbers:
    """exact_stage_numbers; for a model of one layer kind, every number of a stage is affine in
    its layers (sums over layers, plus the embedding or head), so two stages give them all (float
    rounding ~1e-16 relative, far inside the bounds' safety margin)."""
    if n <= 2 or kind_prefix(scenario.llm)[-1] not in (0, scenario.llm.layers):
        return exact_stage_numbers(scenario, tp, dp, micro_batch, role, first, n, scheme, sp)
    one = exact_stage_numbers(scenario, tp, dp, micro_batch, role, 0, 1, scheme, sp)
    two = exact_stage_numbers(scenario, tp, dp, micro_batch, role, 0, 2, scheme, sp)
    k = n - 1
    out = []
    for a, b in zip(one, two):
        if isinstance(a, list):
            out.append([x + k * (y - x) for x, y in zip(a, b)])
        else:
            out.append(a + k * (b - a))
    return StageNumbers(*out)


def least_stage_send_s(scenario, tp: int, micro_batch: int) -> float:
    """The least time of one pipeline send between two stages per micro-batch, on any placement."""
    training = scenario.training_for(Choice(micro_batch=micro_batch))
    return least_send_s(boundary_bytes(training, scenario.llm), tp, scenario.wafer)


@lru_cache(maxsize=1024)
def layer_compute(scenario, tp: int, micro_batch: int) -> tuple[float, float]:
    """(forward, backward) compute seconds of one layer per micro-batch, the least over the TP
    schemes and layer kinds (the operators' rooflines of the workload's layer tables)."""
    llm, roofline = scenario.llm, Roofline(scenario.wafer)
    kinds = {llm.is_moe_layer(i) for i in range(llm.layers)}
    f = b = math.inf
    for scheme in scenario.tp_schemes(tp):
        for moe, sp in ((moe, sp) for moe in kinds for sp in sequence_parallel_choices(scenario, tp, scheme)):
            t = build_layer(llm, scenario.training_for(Choice(micro_batch=micro_batch, sequence_parallel=sp)), tp,
                            moe, scheme)
            f = min(f, sum(roofline(t.op(n).fwd) for n in t.forward if isinstance(n, str)))
            b = min(b, sum(roofline(t.op(n).bwd) for n in t.backward if isinstance(n, str)))
    return f, b
