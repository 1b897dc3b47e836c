"""Schema of a Mem_pair allocation instance file (problem: mem_pair)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from wafopt.core import schema
from wafopt.core.limits import MAX_CHUNKS, MAX_DIES
from wafopt.hardware.schema import Die, MeshSpec


class SenderSpec(schema.Spec):
    die: Die
    overflow: schema.Amount = Field(description="bytes (or volume units) to place on helpers")


class HelperSpec(schema.Spec):
    die: Die
    spare: schema.Amount = Field(description="free DRAM it can take")


class Document(schema.Document):
    """Place each sender's overflow, in chunks, on helpers; minimize volume x hops (WATOS Alg. 3)."""

    problem: Literal["mem_pair"]
    mesh: MeshSpec
    senders: Annotated[list[SenderSpec], Field(max_length=MAX_DIES)]
    helpers: Annotated[list[HelperSpec], Field(max_length=MAX_DIES)]
    chunk: schema.PositiveAmount | None = Field(1.0, description="allocation granularity")
    max_helpers_per_sender: schema.DieCount | None = None

    @model_validator(mode="after")
    def _chunk_counts(self):
        """Chunk counts stay exact integers for CP-SAT and the MILP."""
        chunk = self.chunk if self.chunk is not None else 1.0
        for kind, items, amount in (("senders", self.senders, "overflow"), ("helpers", self.helpers, "spare")):
            for k, item in enumerate(items):
                count = getattr(item, amount) / chunk
                if count > MAX_CHUNKS:
                    raise PydanticCustomError(
                        "too_many_chunks", f"{kind}[{k}].{amount} / chunk = {count:.3g} chunks, more than the "
                        "limit of 2^40: use a larger chunk")
        return self
