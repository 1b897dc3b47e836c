"""A recomputation-selection instance file (problem: recompute): its schema, the checks across its
fields, the RecomputeInstance it builds and the document of one."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from wafopt.core import schema
from wafopt.core.errors import InstanceError
from wafopt.core.limits import MAX_LAYERS, MAX_MICROBATCHES, MAX_STAGES, MAX_UNITS
from wafopt.problems.recompute.instance import RecomputeInstance, Stage, Unit

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


class RecomputeDocument(schema.Document):
    """Which operator activations to recompute per stage (WATOS Sec. IV-B, Alg. 2)."""

    problem: Literal["recompute"]
    mode: Literal["local", "pooled"] | None = "local"
    microbatches: Microbatches
    units: Annotated[list[UnitSpec], Field(max_length=MAX_UNITS)]
    stages: Annotated[list[StageSpec], Field(max_length=MAX_STAGES)]

    def to_instance(self, where: str) -> RecomputeInstance:
        at = lambda key: schema.field_at(where, key)  # noqa: E731
        units = tuple(Unit(u.name if u.name is not None else f"unit{j}", u.mem, u.recompute)
                      for j, u in enumerate(self.units))
        if not units:
            raise InstanceError("needs at least one operator unit", at("units"))
        names = [u.name for u in units]
        for j, name in enumerate(names):
            if names.index(name) != j:
                raise InstanceError(f"duplicate unit name {name!r}", at(f"units[{j}].name"))
        stages = tuple(Stage(s.layers, s.inflight, s.state, s.capacity, s.compute) for s in self.stages)
        if not stages:
            raise InstanceError("needs at least one stage", at("stages"))
        return RecomputeInstance(self.mode, self.microbatches, units, stages)

    @classmethod
    def keys_of(cls, inst: RecomputeInstance) -> dict:
        return {"mode": inst.mode, "microbatches": inst.microbatches,
                "units": [UnitSpec.model_construct(name=u.name, mem=u.mem, recompute=u.recompute)
                          for u in inst.units],
                "stages": [StageSpec.model_construct(layers=s.layers, inflight=s.inflight, state=s.state,
                                                     capacity=s.capacity, compute=s.compute)
                           for s in inst.stages]}
