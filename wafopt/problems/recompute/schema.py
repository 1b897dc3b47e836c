"""Schema of a recomputation-selection instance file (problem: recompute)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from wafopt.core import schema
from wafopt.core.limits import MAX_LAYERS, MAX_MICROBATCHES, MAX_STAGES, MAX_UNITS

Layers = schema.integer(0, MAX_LAYERS)
Microbatches = schema.integer(1, MAX_MICROBATCHES)


class UnitSpec(schema.Spec):
    name: schema.Name | None = None
    mem: schema.Amount = Field(description="a_j: activation kept per layer per micro-batch")
    recompute: schema.Seconds = Field(description="r_j: time to regenerate it per layer")


class StageSpec(schema.Spec):
    layers: Layers = Field(description="L_i")
    inflight: Microbatches = Field(description="k_i: micro-batches held at once")
    state: schema.Amount = Field(description="S_i: weights, gradients, optimizer state")
    capacity: schema.PositiveAmount = Field(description="Cap_i: DRAM of the stage")
    compute: schema.Seconds = Field(description="T0_i: time per micro-batch without recomputation")


class Document(schema.Document):
    """Which operator activations to recompute per stage (WATOS Sec. IV-B, Alg. 2)."""

    problem: Literal["recompute"]
    mode: Literal["local", "pooled"] | None = "local"
    microbatches: Microbatches
    units: Annotated[list[UnitSpec], Field(max_length=MAX_UNITS)]
    stages: Annotated[list[StageSpec], Field(max_length=MAX_STAGES)]
