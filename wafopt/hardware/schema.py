"""The `mesh:` mapping of kernel instances: its schema, the Mesh it builds and the mapping of a Mesh."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from wafopt.core.limits import MAX_DIES, MAX_MESH_SIDE
from wafopt.core.schema import Rate, Seconds, Spec, integer
from wafopt.hardware.mesh import Mesh

Coordinate = integer(0, MAX_MESH_SIDE - 1)
Die = Annotated[list[Coordinate], Field(min_length=2, max_length=2, description="[row, col]")]
Link = Annotated[list[Die], Field(min_length=2, max_length=2, description="[[r, c], [r, c]] of neighbours")]
Side = integer(1, MAX_MESH_SIDE)


class MeshSpec(Spec):
    """A rows x cols mesh of dies (rows * cols at most 4,096)."""

    rows: Side
    cols: Side
    faulty_dies: Annotated[list[Die], Field(max_length=MAX_DIES)] | None = None
    faulty_links: Annotated[list[Link], Field(max_length=2 * MAX_DIES)] | None = None
    link_bandwidth: Rate | None = Field(1.0, description="volume per time unit per link direction")
    link_latency: Seconds | None = Field(0.0, description="seconds per hop")

    @model_validator(mode="after")
    def _size(self):
        if self.rows * self.cols > MAX_DIES:
            raise PydanticCustomError("too_many_dies", f"{self.rows} x {self.cols} = {self.rows * self.cols:,} dies, "
                                      f"more than the limit of {MAX_DIES:,}")
        return self

    def build(self, where: str) -> Mesh:
        """The Mesh; faults must lie in it and faulty links join neighbours (InstanceError at `where`)."""
        return Mesh.build(self.rows, self.cols, self.faulty_dies or [], self.faulty_links or [],
                          self.link_bandwidth, self.link_latency, where)

    @classmethod
    def of(cls, mesh: Mesh, links: bool = True) -> "MeshSpec":
        """The mapping of `mesh`, faults sorted; with `links`, its link bandwidth and latency too."""
        keys = {"rows": mesh.rows, "cols": mesh.cols,
                "faulty_dies": sorted([list(d) for d in mesh.faulty_dies]),
                "faulty_links": sorted([sorted([list(d) for d in link]) for link in mesh.faulty_links])}
        if links:
            keys.update(link_bandwidth=mesh.link_bandwidth, link_latency=mesh.link_latency)
        return cls.model_construct(**keys)
