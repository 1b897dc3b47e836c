"""A routing instance file (problem: routing): its schema, the checks across its fields, the
RoutingInstance it builds and the document of one."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from wafopt.core import schema
from wafopt.core.limits import MAX_DETOUR, MAX_FLOWS
from wafopt.hardware.schema import Die, MeshSpec
from wafopt.problems.routing.instance import Flow, RoutingInstance, make


class FlowSpec(schema.Spec):
    src: Die
    dst: Die
    volume: schema.PositiveVolume = Field(description="volume per iteration (bytes or instance units)")
    label: schema.Name | None = ""


Detours = schema.integer(0, MAX_DETOUR)


class Detour(schema.Spec):
    noun: ClassVar[str] = "{detour: k}"
    detour: Detours = Field(description="extra hops allowed over the shortest path")


class RoutingDocument(schema.Document):
    """One path per flow; minimize the peak directed-link load (TEMP's TCME)."""

    problem: Literal["routing"]
    mesh: MeshSpec
    flows: Annotated[list[FlowSpec], Field(max_length=MAX_FLOWS)]
    paths: Literal["minimal"] | Detour | None = "minimal"

    def to_instance(self, where: str) -> RoutingInstance:
        mesh = self.mesh.build(schema.field_at(where, "mesh"))
        flows = [Flow(tuple(f.src), tuple(f.dst), f.volume, f.label) for f in self.flows]
        return make(mesh, flows, 0 if self.paths == "minimal" else self.paths.detour, where)

    @classmethod
    def keys_of(cls, inst: RoutingInstance) -> dict:
        flows = [FlowSpec.model_construct(src=list(f.src), dst=list(f.dst), volume=f.volume,
                                          **({"label": f.label} if f.label else {})) for f in inst.flows]
        paths = "minimal" if inst.detour == 0 else Detour.model_construct(detour=inst.detour)
        return {"mesh": MeshSpec.of(inst.mesh), "flows": flows, "paths": paths}
