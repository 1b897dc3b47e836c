"""Training hyper-parameters of a scenario (`training:`): sequence, micro-batch sizes, global
batch, attention kind, model-state bytes per parameter and the memory options. Sources and
defaults: docs/workload.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from wafopt.core.errors import InstanceError
from wafopt.core.fields import Fields
from wafopt.core.limits import MAX_COUNT
from wafopt.costmodel.operators import ATTENTIONS
from wafopt.hardware.catalog import GB


@dataclass(frozen=True)
class StateBytes:
    """Bytes of model state per parameter (Megatron-LM mixed precision by default)."""

    weights: float = 2.0    # fp16/bf16 weights used by forward and backward
    master: float = 4.0     # fp32 master copy the optimizer updates
    moments: float = 8.0    # Adam m and v in fp32
    grads: float = 4.0      # fp32 gradient accumulation buffer (also what data parallelism reduces)

    @property
    def total(self) -> float:
        return self.weights + self.master + self.moments + self.grads

    @property
    def optimizer(self) -> float:
        """The part the distributed optimizer shards over data-parallel ranks."""
        return self.master + self.moments


STATE_PRESETS = {
    "megatron": StateBytes(2, 4, 8, 4),   # 18: Megatron-LM, fp32 grads (45.5625 GiB for GPT-3 175B, t = p = 8)
    "mixed16": StateBytes(2, 4, 8, 2),    # 16: fp16 weights and grads, fp32 master and Adam
    "watos14": StateBytes(2, 0, 8, 4),    # 14: WATOS's total (5670 GB for Llama3-405B); no fp32 master copy
}
DEFAULT_STATES = "megatron"


MAX_MICRO_BATCH_CHOICES = 16   # a scenario's allowed micro-batch sizes (each one multiplies the planner's layouts)


@dataclass(frozen=True)
class Training:
    seq: int
    micro_batch: int                      # the size the cost model uses (the least allowed one)
    global_batch: int
    attention: str = "standard"           # standard | flash (fused: no s^2 tensor stored or moved)
    sequence_parallel: bool = False
    states: StateBytes = STATE_PRESETS[DEFAULT_STATES]
    distributed_optimizer: bool = False   # shard master weights and Adam moments over dp
    activation_bytes: int = 2             # element size of activations and weights (fp16)
    workspace_bytes: float = 0.0          # per die: kernel workspace and communication buffers
    recompute: bool = True                # False: every activation is kept (offloading still allowed)
    micro_batches: tuple[int, ...] = ()   # the sizes a plan may choose (default: micro_batch alone)

    def __post_init__(self):
        if self.micro_batch not in self.micro_batches:   # e.g. after replace(micro_batch=...)
            object.__setattr__(self, "micro_batches", (self.micro_batch,))
        if isinstance(self.states, str):   # a preset name
            if self.states not in STATE_PRESETS:
                raise ValueError(f"unknown states preset {self.states!r} (known: {', '.join(STATE_PRESETS)})")
            object.__setattr__(self, "states", STATE_PRESETS[self.states])
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, got {self.attention!r}")

    @property
    def flash_attention(self) -> bool:
        return self.attention == "flash"

    @property
    def state_bytes_per_param(self) -> float:
        return self.states.total


def parse_training(fields_or_mapping: Fields | Mapping, where: str = "training") -> Training:
    """Parse the `training:` mapping (or a Fields over it; finish() is called here)."""
    f = fields_or_mapping if isinstance(fields_or_mapping, Fields) else Fields(fields_or_mapping,
                                                                               where)
    seq = f.integer("seq", positive=True)
    sizes = _parse_micro_batches(f)
    global_batch = f.integer("global_batch", positive=True)
    attention = _parse_attention(f)
    training = Training(
        seq=seq, micro_batch=sizes[0], global_batch=global_batch, attention=attention, micro_batches=sizes,
        sequence_parallel=f.boolean("sequence_parallel", False),
        states=_parse_states(f),
        distributed_optimizer=f.boolean("distributed_optimizer", False),
        activation_bytes=f.integer("activation_bytes", 2, positive=True),
        workspace_bytes=f.number("workspace_gb", 0.0, nonnegative=True) * GB,
        recompute=f.boolean("recompute", True),
    )
    f.finish()
    for b in sizes:
        if training.global_batch % b:
            raise InstanceError(f"must be a multiple of micro_batch {b}, got {training.global_batch}",
                                f.path("global_batch"))
    return training


def _parse_micro_batches(f: Fields) -> tuple[int, ...]:
    """`micro_batch: 2` or the allowed sizes `micro_batch: [1, 2, 4]` (the planner chooses one per
    plan); sorted, the least first."""
    raw = f.raw("micro_batch")
    if not isinstance(raw, list):
        return (f.integer("micro_batch", positive=True),)
    if not 1 <= len(raw) <= MAX_MICRO_BATCH_CHOICES:
        raise InstanceError(f"a list of micro-batch sizes must have 1 to {MAX_MICRO_BATCH_CHOICES} entries, "
                            f"got {len(raw)}", f.path("micro_batch"))
    for k, v in enumerate(raw):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0 or v > MAX_COUNT:
            raise InstanceError(f"must be a positive integer, got {v!r:.60}", f"{f.path('micro_batch')}[{k}]")
    if len(set(raw)) != len(raw):
        raise InstanceError(f"lists a micro-batch size twice: {raw!r:.60}", f.path("micro_batch"))
    return tuple(sorted(raw))


def _parse_attention(f: Fields) -> str:
    """`attention: standard | flash`; the older `flash_attention: true/false` still reads."""
    if f.has("attention") and f.has("flash_attention"):
        raise InstanceError("give attention or flash_attention, not both", f.path("flash_attention"))
    if f.has("flash_attention"):
        return "flash" if f.boolean("flash_attention") else "standard"
    return f.string("attention", "standard", choices=ATTENTIONS)


def _parse_states(f: Fields) -> StateBytes:
    """`states:` a preset name or {weights, master, moments, grads} bytes per parameter; the older
    `state_bytes_per_param: N` reads as the preset with that total."""
    if f.has("states") and f.has("state_bytes_per_param"):
        raise InstanceError("give states or state_bytes_per_param, not both", f.path("state_bytes_per_param"))
    if f.has("state_bytes_per_param"):
        total = f.number("state_bytes_per_param", positive=True)
        for preset in STATE_PRESETS.values():
            if preset.total == total:
                return preset
        raise InstanceError(f"must be the total of a states preset ({', '.join(f'{k} {v.total:g}' for k, v in STATE_PRESETS.items())}), "
                            f"got {total:g}; give states: {{weights, master, moments, grads}} instead",
                            f.path("state_bytes_per_param"))
    spec = f.raw("states", DEFAULT_STATES)
    if isinstance(spec, str):
        if spec not in STATE_PRESETS:
            raise InstanceError(f"unknown preset {spec!r} (known: {', '.join(STATE_PRESETS)})", f.path("states"))
        return STATE_PRESETS[spec]
    g = Fields(spec, f.path("states"))
    states = StateBytes(g.number("weights", positive=True), g.number("master", nonnegative=True),
                        g.number("moments", nonnegative=True), g.number("grads", nonnegative=True))
    g.finish()
    return states
