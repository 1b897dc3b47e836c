"""Training hyper-parameters of a scenario (`training:`): sequence, micro-batch sizes, global
batch, attention kind, model-state bytes per parameter and the memory options; TrainingSpec
describes the mapping. Sources and defaults: docs/workload.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Mapping

from pydantic import BeforeValidator, model_validator

from wafopt.core.errors import InstanceError
from wafopt.core.files import excerpt
from wafopt.core.limits import MAX_COUNT, MAX_SCENARIO_MICROBATCHES
from wafopt.core.schema import (
    Flag,
    Record,
    checked_count,
    count,
    field_at,
    quantity,
    rule,
    text,
    validate,
)
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
    recompute_policy: str | None = None   # selective | full: every plan recomputes exactly so (forced)
    sequence_parallel_fixed: bool = False  # the scenario sets sequence_parallel (else plans may choose)
    fused_elementwise: bool = False       # chains of element-wise operators run as one kernel

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


def _micro_batches(raw) -> tuple[int, ...]:
    """`micro_batch: 2` or the allowed sizes `micro_batch: [1, 2, 4]` (the planner chooses one per
    plan); sorted, the least first."""
    if not isinstance(raw, list):
        return (checked_count(raw, positive=True),)
    if not 1 <= len(raw) <= MAX_MICRO_BATCH_CHOICES:
        raise rule(f"a list of micro-batch sizes must have 1 to {MAX_MICRO_BATCH_CHOICES} entries, got {len(raw)}")
    for k, v in enumerate(raw):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0 or v > MAX_COUNT:
            raise rule(f"must be a positive integer, got {v!r:.60}", k)
    if len(set(raw)) != len(raw):
        raise rule(f"lists a micro-batch size twice: {raw!r:.60}")
    return tuple(sorted(raw))


def _recompute(raw):
    """`recompute:` true (plans choose what to recompute), false or none (nothing), selective
    (Korthikanti's attention core) or full (every layer from its input): the last two are forced."""
    if isinstance(raw, bool) or raw in ("none", "selective", "full"):
        return raw
    raise rule(f"must be true, false, none, selective or full, got {raw!r:.60}")


class StatesSpec(Record):
    """Bytes of model state per parameter."""

    null_is_missing: ClassVar[bool] = True
    keys_after_fields: ClassVar[bool] = True

    weights: quantity(positive=True)
    master: quantity(nonnegative=True)
    moments: quantity(nonnegative=True)
    grads: quantity(nonnegative=True)

    def build(self, where: str) -> StateBytes:
        return StateBytes(self.weights, self.master, self.moments, self.grads)


_ONE_OF = {"flash_attention": "attention", "state_bytes_per_param": "states"}  # alternative key -> the key it spells


class TrainingSpec(Record):
    """The `training:` mapping of a scenario."""

    null_is_missing: ClassVar[bool] = True
    keys_after_fields: ClassVar[bool] = True

    seq: count(positive=True)
    micro_batch: Annotated[Any, BeforeValidator(_micro_batches)]   # a size or a list: the sorted sizes
    global_batch: count(positive=True)
    attention: text(*ATTENTIONS) = "standard"
    flash_attention: Flag = None           # true: attention flash, false: standard
    sequence_parallel: Flag = None         # absent: plans choose (default off)
    states: Any = DEFAULT_STATES           # a preset name or {weights, master, moments, grads}
    state_bytes_per_param: quantity(positive=True) = None   # the total of a states preset, naming it
    distributed_optimizer: Flag = False
    activation_bytes: count(positive=True) = 2
    workspace_gb: quantity(nonnegative=True) = 0.0
    recompute: Annotated[Any, BeforeValidator(_recompute)] = True   # true | false | none | selective | full
    fused_elementwise: Flag = False        # element-wise chains as one kernel (no DRAM round trip between)

    @model_validator(mode="before")
    @classmethod
    def _one_of(cls, data):
        """A key and its alternative exclude each other; an alternative key given must have a value."""
        if isinstance(data, dict):
            for old, new in _ONE_OF.items():
                if old in data and new in data:
                    raise rule(f"give {new} or {old}, not both", old)
                if old in data and data[old] is None:
                    raise rule("missing required field", old)
        return data

    @classmethod
    def allowed_keys(cls, data: dict) -> list[str]:
        """An alternative key is listed only when given, and then instead of the key it spells."""
        keys = list(cls.model_fields)
        for old, new in _ONE_OF.items():
            keys.remove(new if old in data else old)
        return keys

    def build(self, where: str) -> Training:
        at = lambda key: field_at(where, key)  # noqa: E731
        sizes = self.micro_batch
        attention = self.attention
        if self.flash_attention is not None:
            attention = "flash" if self.flash_attention else "standard"
        training = Training(
            seq=self.seq, micro_batch=sizes[0], global_batch=self.global_batch, attention=attention,
            micro_batches=sizes, sequence_parallel=bool(self.sequence_parallel), states=self._states(at),
            distributed_optimizer=self.distributed_optimizer, activation_bytes=self.activation_bytes,
            workspace_bytes=self.workspace_gb * GB, recompute=self.recompute not in (False, "none"),
            recompute_policy=self.recompute if self.recompute in ("selective", "full") else None,
            sequence_parallel_fixed=self.sequence_parallel is not None,
            fused_elementwise=self.fused_elementwise)
        for b in sizes:
            if training.global_batch % b:
                raise InstanceError(f"must be a multiple of micro_batch {b}, got {training.global_batch}",
                                    at("global_batch"))
        if training.global_batch // min(sizes) > MAX_SCENARIO_MICROBATCHES:
            raise InstanceError(f"{training.global_batch} / micro_batch {min(sizes)} = "
                                f"{training.global_batch // min(sizes):,} micro-batches an iteration, more than the "
                                f"limit of {MAX_SCENARIO_MICROBATCHES:,}", at("global_batch"))
        return training

    @classmethod
    def of(cls, training: Training) -> "TrainingSpec":
        """Every key but the alternative ones; states by its preset name when it is a preset."""
        sizes = training.micro_batches
        presets = [name for name, preset in STATE_PRESETS.items() if preset == training.states]
        states = presets[0] if presets else StatesSpec.model_construct(**vars(training.states))
        return cls.model_construct(
            seq=training.seq, micro_batch=sizes[0] if len(sizes) == 1 else list(sizes),
            global_batch=training.global_batch, attention=training.attention,
            sequence_parallel=training.sequence_parallel if training.sequence_parallel_fixed else None,
            states=states, distributed_optimizer=training.distributed_optimizer,
            activation_bytes=training.activation_bytes, workspace_gb=training.workspace_bytes / GB,
            recompute=training.recompute_policy or training.recompute,
            fused_elementwise=training.fused_elementwise)

    def _states(self, at) -> StateBytes:
        if self.state_bytes_per_param is not None:
            total = self.state_bytes_per_param
            for preset in STATE_PRESETS.values():
                if preset.total == total:
                    return preset
            raise InstanceError(f"must be the total of a states preset ({', '.join(f'{k} {v.total:g}' for k, v in STATE_PRESETS.items())}), "
                                f"got {total:g}; give states: {{weights, master, moments, grads}} instead",
                                at("state_bytes_per_param"))
        spec = self.states
        if isinstance(spec, str):
            if spec not in STATE_PRESETS:
                raise InstanceError(f"unknown preset {spec!r} (known: {', '.join(STATE_PRESETS)})", at("states"))
            return STATE_PRESETS[spec]
        if not isinstance(spec, dict):
            raise InstanceError(f"expected a mapping, got {type(spec).__name__} {excerpt(spec)}", at("states"))
        return validate(StatesSpec, spec, at("states")).value


def parse_training(mapping: Mapping, where: str = "training") -> Training:
    """The Training of a `training:` mapping (raises InstanceError naming the field below `where`)."""
    if not isinstance(mapping, dict):
        raise InstanceError(f"expected a mapping, got {type(mapping).__name__} {excerpt(mapping)}", where)
    return validate(TrainingSpec, mapping, where).value
