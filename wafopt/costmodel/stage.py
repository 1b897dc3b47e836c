"""The per-stage numbers of one pipeline stage, per die and per micro-batch: its compute and
communication steps, its checkpointable units, and the memory and recompute arithmetic of a
recompute row (`wafopt.costmodel.model` builds them from the per-operator tables).
Formulas and sources: docs/workload.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union

from wafopt.costmodel.operators import (
    CHECKPOINT_UNIT,
    REGATHER,
    SELECTIVE_UNITS,
    Collective,
    LayerTable,
)

# The layer input is the checkpoint full recomputation restarts each layer from (Korthikanti
# et al. 2022, Sec. 5); a recomputation plan must keep it.
CHECKPOINT_UNITS = frozenset({CHECKPOINT_UNIT})
FULL = "full"              # a recompute row meaning Megatron's full recomputation of every layer
RECOMPUTE_POLICIES = ("none", "selective", FULL)


@dataclass(frozen=True)
class ComputeStep:
    name: str          # the operators it runs, e.g. "ln1+qkv"
    seconds: float     # sum of the operators' rooflines
    flops: float


@dataclass(frozen=True)
class CommStep:
    collective: Collective
    hidden_s: float = 0.0   # compute it runs under (TATP streams), seconds


StageStep = Union[ComputeStep, CommStep]
StageBlocks = tuple[tuple[tuple[StageStep, ...], int], ...]   # (steps, repeat) in order


@dataclass(frozen=True)
class OperatorUnit:
    """A checkpointable activation of one transformer layer (mean over the stage's layers)."""

    name: str
    bytes: float               # per die, per layer, per micro-batch, if kept
    recompute_flops: float     # per die, to regenerate it: its producers' forward FLOPs
    recompute_s: float         # compute seconds of that (per-operator rooflines)
    recompute_bytes: float = 0.0   # DRAM traffic of the regeneration
    recomputable: bool = True      # False for the layer input: full recomputation restarts from it
    recompute_comm: tuple[CommStep, ...] = ()   # collectives the regeneration repeats


@dataclass(frozen=True)
class StageWorkload:
    index: int
    layers: int
    inflight: int              # micro-batches whose activations a stage holds (1F1B)
    params: float              # per die (replicated parameters counted in full)
    state_bytes: float         # per die: weights, gradients, optimizer states
    units: tuple[OperatorUnit, ...]
    activation_bytes: float    # per die per layer per micro-batch = sum of unit bytes
    boundary_bytes: float      # per die per layer per micro-batch kept under full recomputation
    fwd_flops: float           # per die per micro-batch, all layers (+ embedding / LM head)
    bwd_flops: float
    fwd_s: float               # compute seconds per micro-batch (communication excluded)
    bwd_s: float
    first_layer: int = 0       # global index of the stage's first layer
    scheme: str = "megatron"   # tensor-parallel scheme: megatron | tatp
    extra_activation_bytes: float = 0.0   # per micro-batch: embedding mask, LM head input and logits
    gradient_bytes: float = 0.0           # peak activation gradients of one backward operator
    buffer_bytes: float = 0.0             # workspace + TATP receive buffers
    full_recompute_flops: float = 0.0     # per micro-batch: the whole forward of every layer
    full_recompute_s: float = 0.0
    optimizer_s: float = 0.0              # one optimizer step (memory-bound over the states)
    grad_bytes: float = 0.0               # per die: the gradients data parallelism reduces
    dp_gather_bytes: float = 0.0          # per die: weights re-gathered by the distributed optimizer
    forward: StageBlocks = ()
    backward: StageBlocks = ()
    full_recompute_blocks: StageBlocks = ()
    backward_after_full: StageBlocks = ()   # the backward after full recomputation (no SP re-gathers)
    tables: tuple[tuple[LayerTable, int], ...] = field(default=(), repr=False)

    def _recomputed(self, recomputed_layers_per_unit) -> list[float] | str:
        """Normalize {unit name: layers}, a sequence aligned with `units` or "full"."""
        if recomputed_layers_per_unit is None:
            return [0.0] * len(self.units)
        if isinstance(recomputed_layers_per_unit, str):
            if recomputed_layers_per_unit != FULL:
                raise ValueError(f"a recompute row is a list of counts or {FULL!r}, got "
                                 f"{recomputed_layers_per_unit!r}")
            return FULL
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

    def kept_bytes(self, recomputed_layers_per_unit=None) -> float:
        """Stored activations of one micro-batch: sum_j bytes_j * (layers - x_j) + the extras."""
        xs = self._recomputed(recomputed_layers_per_unit)
        if xs == FULL:
            return self.layers * self.boundary_bytes + self.extra_activation_bytes
        return sum(u.bytes * (self.layers - x) for u, x in zip(self.units, xs)) + self.extra_activation_bytes

    def inflight_bytes(self, recomputed_layers_per_unit=None) -> float:
        """Stored activations of all in-flight micro-batches (what a die may offload)."""
        return self.inflight * self.kept_bytes(recomputed_layers_per_unit)

    def transient_bytes(self, recomputed_layers_per_unit=None) -> float:
        """Peak over the backward of what is not stored between passes: the activations the
        plan regenerates for one layer (every unit dropped in some layer, as if all in the same
        one), the activation gradients of one operator, workspace and TATP buffers."""
        xs = self._recomputed(recomputed_layers_per_unit)
        regenerated = sum(u.bytes for u, x in zip(self.units, [self.layers] * len(self.units) if xs == FULL
                                                  else xs) if x > 0 and u.recomputable)
        return regenerated + self.gradient_bytes + self.buffer_bytes

    def memory_bytes(self, recomputed_layers_per_unit=None) -> float:
        """Peak per-die bytes: state + inflight * kept activations + transient.

        x_j = layers of this stage in which unit j is dropped and recomputed (None: keep all;
        "full": Megatron's full recomputation, only each layer's input kept).
        """
        return (self.state_bytes + self.inflight_bytes(recomputed_layers_per_unit)
                + self.transient_bytes(recomputed_layers_per_unit))

    def recompute_seconds(self, recomputed_layers_per_unit=None) -> float:
        """Extra compute seconds per micro-batch spent regenerating dropped units, sum_j x_j * t_j
        (collectives excluded: their time depends on the placement)."""
        xs = self._recomputed(recomputed_layers_per_unit)
        if xs == FULL:
            return self.full_recompute_s
        return sum(u.recompute_s * x for u, x in zip(self.units, xs))

    def policy_row(self, policy: str):
        """The recompute row of a named policy (none, selective, full): `recompute_row`."""
        return recompute_row(self, policy)

    def full_recompute_bytes(self) -> float:
        """Per-die bytes under full recomputation: the least memory any plan needs on its own dies."""
        return self.memory_bytes(FULL)

    def compute_s(self) -> float:
        return self.fwd_s + self.bwd_s

    def tp_bytes_per_layer(self, recomputed_layers_per_unit=None) -> float:
        """Bytes one die sends for tensor-parallel collectives per layer and micro-batch: forward,
        backward and the recomputation of `recomputed_layers_per_unit` (mean over the layers)."""
        xs = self._recomputed(recomputed_layers_per_unit)
        sent = sum(c * sum(coll.bytes_sent for coll in t.collectives("forward") + t.collectives("backward"))
                   for t, c in self.tables)
        if xs == FULL:   # the recomputed forward's collectives replace the backward's re-gathers
            sent += sum(c * sum(coll.bytes_sent for coll in t.collectives("forward")) for t, c in self.tables)
            sent -= sum(c * sum(coll.bytes_sent for coll in t.collectives("backward") if coll.purpose == REGATHER)
                        for t, c in self.tables)
        else:
            sent += sum(x * sum(st.collective.bytes_sent for st in u.recompute_comm) for u, x in zip(self.units, xs))
        return sent / self.layers


def recompute_row(stage: StageWorkload, policy: str):
    """The recompute row of a named policy: none, selective (Korthikanti's attention core) or full."""
    if policy == "none":
        return [0] * len(stage.units)
    if policy == "selective":
        return [stage.layers if u.name in SELECTIVE_UNITS else 0 for u in stage.units]
    if policy == FULL:
        return FULL
    raise ValueError(f"unknown recompute policy {policy!r} (known: {', '.join(RECOMPUTE_POLICIES)})")
