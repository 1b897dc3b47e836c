"""A TATP group-mapping instance file (problem: tatp): its schema, the TatpInstance it builds and
the document of one."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from wafopt.core import schema
from wafopt.hardware.schema import MeshSpec
from wafopt.problems.tatp.instance import TatpInstance, make


class TatpDocument(schema.Document):
    """Partition healthy dies into `groups` rings of `group_size` dies (TEMP, WaferLLM)."""

    problem: Literal["tatp"]
    mesh: MeshSpec
    group_size: schema.DieCount = Field(description="N, dies per ring (at least 2)")
    groups: schema.DieCount = Field(description="G, number of rings")

    def to_instance(self, where: str) -> TatpInstance:
        return make(self.mesh.build(schema.field_at(where, "mesh")), self.group_size, self.groups, where)

    @classmethod
    def keys_of(cls, inst: TatpInstance) -> dict:
        return {"mesh": MeshSpec.of(inst.mesh), "group_size": inst.group_size, "groups": inst.groups}
