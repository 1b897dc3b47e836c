"""Schema of a recomputation-selection instance file (problem: recompute)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from wafopt.core import schema
from wafopt.core.limits import MAX_LAYERS, MAX_MICROBATCHES, MAX_SECONDS, MAX_STAGES, MAX_UNITS


class UnitSpec(schema.Spec):
    name: schema.Name | None = None
    mem: schema.number(ge=0, description="a_j: activation kept per layer per micro-batch")
    recompute: schema.number(ge=0, le=MAX_SECONDS, description="r_j: time to regenerate it per layer")


class StageSpec(schema.Spec):
    layers: schema.integer(0, MAX_LAYERS) = Field(description="L_i")
    inflight: schema.integer(1, MAX_MICROBATCHES) = Field(description="k_i: micro-batches held at once")
    state: schema.number(ge=0, description="S_i: weights, gradients, optimizer state")
    capacity: schema.number(gt=0, description="Cap_i: DRAM of the stage")
    compute: schema.number(ge=0, le=MAX_SECONDS, description="T0_i: time per micro-batch without recomputation")


class Document(schema.Document):
    """Which operator activations to recompute per stage (WATOS Sec. IV-B, Alg. 2)."""

    problem: Literal["recompute"]
    mode: Literal["local", "pooled"] | None = "local"
    microbatches: schema.integer(1, MAX_MICROBATCHES)
    units: Annotated[list[UnitSpec], Field(max_length=MAX_UNITS)]
    stages: Annotated[list[StageSpec], Field(max_length=MAX_STAGES)]
