"""Schema of a routing instance file (problem: routing)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from wafopt.core import schema
from wafopt.core.limits import MAX_DETOUR, MAX_FLOWS, MAX_VOLUME
from wafopt.hardware.schema import Die, MeshSpec


class FlowSpec(schema.Spec):
    src: Die
    dst: Die
    volume: schema.number(gt=0, le=MAX_VOLUME, description="volume per iteration (bytes or instance units)")
    label: schema.Name | None = ""


class Detour(schema.Spec):
    noun: ClassVar[str] = "{detour: k}"
    detour: schema.integer(0, MAX_DETOUR) = Field(description="extra hops allowed over the shortest path")


class Document(schema.Document):
    """One path per flow; minimize the peak directed-link load (TEMP's TCME)."""

    problem: Literal["routing"]
    mesh: MeshSpec
    flows: Annotated[list[FlowSpec], Field(max_length=MAX_FLOWS)]
    paths: Literal["minimal"] | Detour | None = "minimal"
