"""Schema of a TATP group-mapping instance file (problem: tatp)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from wafopt.core import schema
from wafopt.hardware.schema import MeshSpec


class Document(schema.Document):
    """Partition healthy dies into `groups` rings of `group_size` dies (TEMP, WaferLLM)."""

    problem: Literal["tatp"]
    mesh: MeshSpec
    group_size: schema.DieCount = Field(description="N, dies per ring (at least 2)")
    groups: schema.DieCount = Field(description="G, number of rings")
