"""A Mem_pair allocation instance file (problem: mem_pair): its schema, the checks across its
fields, the MemPairInstance it builds and the document of one."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from pydantic_core import PydanticCustomError

from wafopt.core import schema
from wafopt.core.errors import InstanceError
from wafopt.core.limits import MAX_CHUNKS, MAX_DIES
from wafopt.hardware.mesh import Mesh, as_die
from wafopt.hardware.schema import Die, MeshSpec
from wafopt.problems.mem_pair.instance import Helper, MemPairInstance, Sender


class SenderSpec(schema.Spec):
    die: Die
    overflow: schema.Amount = Field(description="bytes (or volume units) to place on helpers")


class HelperSpec(schema.Spec):
    die: Die
    spare: schema.Amount = Field(description="free DRAM it can take")


class MemPairDocument(schema.Document):
    """Place each sender's overflow, in chunks, on helpers; minimize volume x hops (WATOS Alg. 3)."""

    problem: Literal["mem_pair"]
    mesh: MeshSpec
    senders: Annotated[list[SenderSpec], Field(max_length=MAX_DIES)]
    helpers: Annotated[list[HelperSpec], Field(max_length=MAX_DIES)]
    chunk: schema.PositiveAmount | None = Field(1.0, description="allocation granularity")
    max_helpers_per_sender: schema.DieCount | None = None

    def to_instance(self, where: str) -> MemPairInstance:
        self._check_chunk_counts()
        at = lambda key: schema.field_at(where, key)  # noqa: E731
        mesh = self.mesh.build(at("mesh"))
        used: dict = {}
        senders = tuple(Sender(_die(mesh, s.die, used, at(f"senders[{k}].die")), s.overflow)
                        for k, s in enumerate(self.senders))
        helpers = tuple(Helper(_die(mesh, h.die, used, at(f"helpers[{k}].die")), h.spare)
                        for k, h in enumerate(self.helpers))
        if not senders:
            raise InstanceError("needs at least one sender (nothing to place otherwise)", at("senders"))
        return MemPairInstance(mesh, senders, helpers, self.chunk, self.max_helpers_per_sender)

    def _check_chunk_counts(self):
        """Chunk counts stay exact integers for CP-SAT and the MILP."""
        for kind, items, amount in (("senders", self.senders, "overflow"), ("helpers", self.helpers, "spare")):
            for k, item in enumerate(items):
                count = getattr(item, amount) / self.chunk
                if count > MAX_CHUNKS:
                    raise PydanticCustomError(
                        "too_many_chunks", f"{kind}[{k}].{amount} / chunk = {count:.3g} chunks, more than the "
                        "limit of 2^40: use a larger chunk")

    @classmethod
    def keys_of(cls, inst: MemPairInstance) -> dict:
        keys = {"mesh": MeshSpec.of(inst.mesh, links=False),
                "senders": [SenderSpec.model_construct(die=list(s.die), overflow=s.overflow) for s in inst.senders],
                "helpers": [HelperSpec.model_construct(die=list(h.die), spare=h.spare) for h in inst.helpers],
                "chunk": inst.chunk}
        if inst.max_helpers_per_sender is not None:
            keys["max_helpers_per_sender"] = inst.max_helpers_per_sender
        return keys


def _die(mesh: Mesh, raw: list, used: dict, where: str):
    """A sender's or helper's die: healthy, inside the mesh, and no other's."""
    die = as_die(raw, where)
    if not mesh.contains(die):
        raise InstanceError(f"die {list(die)} lies outside the {mesh.rows} x {mesh.cols} mesh", where)
    if not mesh.is_healthy(die):
        raise InstanceError(f"die {list(die)} is faulty", where)
    if die in used:
        raise InstanceError(f"die {list(die)} already appears as {used[die]}", where)
    used[die] = where
    return die
