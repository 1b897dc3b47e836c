"""A stage-placement instance file (problem: placement): its schema, the checks across its fields,
the PlacementInstance it builds and the document of one."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, Field, WithJsonSchema, field_validator

from wafopt.core import schema
from wafopt.core.errors import InstanceError
from wafopt.core.files import excerpt
from wafopt.core.limits import (
    MAX_FLOWS,
    MAX_MESH_SIDE,
    MAX_ROUTE_TABLE,
    MAX_STAGES,
    MAX_TILE_SHAPES,
    MAX_VOLUME,
)
from wafopt.core.numeric import exact
from wafopt.hardware.schema import MeshSpec
from wafopt.problems.placement.instance import PlacementInstance, layout


def _is_int(value) -> bool:
    return type(value) is int


def _tile_shape(value, where: str = "") -> list:
    if not (isinstance(value, list) and len(value) == 2 and all(_is_int(v) and v > 0 for v in value)):
        raise ValueError(f"expected a tile shape [h, w] of two positive integers, got {excerpt(value)}{where}")
    if max(value) > MAX_MESH_SIDE:
        raise ValueError(f"tile sides must be <= {MAX_MESH_SIDE} (limit), got {excerpt(value)}{where}")
    return value


def _tiles(value: list) -> list:
    """[h, w], or a list of candidate shapes [[h, w], ...]."""
    if value and all(isinstance(t, list) for t in value):
        if len(value) > MAX_TILE_SHAPES:
            raise ValueError(f"at most {MAX_TILE_SHAPES} tile shapes (limit), got {len(value)}")
        return [_tile_shape(t, f" (shape {k})") for k, t in enumerate(value)]
    return _tile_shape(value)


def _triple(item: list) -> list:
    """[i, j, volume]: two stage indices and a volume."""
    if not (len(item) == 3 and _is_int(item[0]) and _is_int(item[1])
            and type(item[2]) in (int, float)):
        raise ValueError(f"expected [i, j, volume] (two stage indices and a number), got {excerpt(item)}")
    i, j, volume = item
    if not (0 <= i < MAX_STAGES and 0 <= j < MAX_STAGES):
        raise ValueError(f"stage indices must lie in 0..{MAX_STAGES - 1}, got {excerpt(item)}")
    if not volume >= 0:  # also NaN
        raise ValueError(f"volume must be a finite number >= 0, got {volume!r}")
    if volume > MAX_VOLUME:
        raise ValueError(f"volume must be <= 2^53 (limit), got {volume!r}")
    return item


_SHAPE_SCHEMA = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": MAX_MESH_SIDE},
                 "minItems": 2, "maxItems": 2, "description": "[h, w]"}
Tiles = Annotated[list[Any], AfterValidator(_tiles), WithJsonSchema({
    "anyOf": [_SHAPE_SCHEMA, {"type": "array", "items": _SHAPE_SCHEMA, "minItems": 1,
                              "maxItems": MAX_TILE_SHAPES}],
    "description": "a tile shape [h, w] or a list of candidate shapes", "default": [1, 1]})]
Triple = Annotated[list[Any], AfterValidator(_triple), WithJsonSchema({
    "type": "array", "minItems": 3, "maxItems": 3, "description": "[i, j, volume]",
    "prefixItems": [{"type": "integer", "minimum": 0, "maximum": MAX_STAGES - 1},
                    {"type": "integer", "minimum": 0, "maximum": MAX_STAGES - 1},
                    {"type": "number", "minimum": 0, "maximum": MAX_VOLUME}]})]
StageCount = schema.integer(1, MAX_STAGES)


class PlacementDocument(schema.Document):
    """Pipeline stages onto aligned mesh tiles, minimizing WATOS Eq. 2 (volume x hops)."""

    problem: Literal["placement"]
    mesh: MeshSpec
    tile: Tiles | None = [1, 1]
    stages: StageCount | None = Field(None, description="default: from the flows")
    flows: Annotated[list[Triple], Field(max_length=MAX_FLOWS)] | None = Field(
        None, description="[i, j, volume] directed i -> j")
    flow_matrix: Annotated[list[Annotated[list[schema.Volume], Field(max_length=MAX_STAGES)]],
                           Field(max_length=MAX_STAGES)] | None = Field(None, description="dense n x n volumes")
    pairs: Annotated[list[Triple], Field(max_length=MAX_FLOWS)] | None = Field(
        None, description="Mem_pair flows [sender, helper, volume]")

    @field_validator("flow_matrix", mode="wrap")
    @classmethod
    def _square(cls, rows, handler):
        """n rows of n numbers (the rows as given in the message)."""
        value = handler(rows)
        for i, row in enumerate(rows if value is not None else []):
            if len(row) != len(rows):
                n = len(rows)
                raise schema.rule(f"expected a row of {n} numbers (the matrix is {n} x {n}), got {row!r:.60}", i)
        return value

    def to_instance(self, where: str) -> PlacementInstance:
        at = lambda key: schema.field_at(where, key)  # noqa: E731
        mesh = self.mesh.build(at("mesh"))
        mesh.require_connected(at("mesh"))
        raw_tile = self.tile
        shapes = raw_tile if raw_tile and all(isinstance(t, list) for t in raw_tile) else [raw_tile]
        tiles = [(int(h), int(w)) for h, w in shapes]
        if len(set(tiles)) != len(tiles):
            raise InstanceError(f"repeated tile shape in {raw_tile!r}", at("tile"))
        stages = self.stages
        given = self.model_fields_set
        if "flows" in given and "flow_matrix" in given:
            raise InstanceError("give either flows or flow_matrix, not both", at("flow_matrix"))
        pairs = _triples(self.pairs or [], at("pairs"))
        if "flow_matrix" in given:
            rows = self.flow_matrix
            if rows is None:
                raise InstanceError("missing required field", at("flow_matrix"))
            n = len(rows)
            flow = np.array(rows, dtype=float).reshape(n, n)
            if stages is not None and stages != n:
                raise InstanceError(f"stages is {stages} but flow_matrix is {n} x {n}", at("stages"))
        else:
            flows = _triples(self.flows or [], at("flows"))
            n = stages if stages is not None else 1 + max([max(i, j) for i, j, _ in flows + pairs], default=-1)
            if n == 0:
                raise InstanceError("no stages: give flows, flow_matrix or stages", at("flows"))
            flow = np.zeros((n, n))
            for k, (i, j, vol) in enumerate(flows):
                if max(i, j) >= n:
                    raise InstanceError(f"stage index {max(i, j)} out of range (stages: {n})", f"{at('flows')}[{k}]")
                flow[i, j] = float(exact(flow[i, j]) + exact(vol))  # repeated flows: the exact decimal sum
        for k, (s, h, _) in enumerate(pairs):
            if max(s, h) >= n:
                raise InstanceError(f"stage index {max(s, h)} out of range (stages: {n})", f"{at('pairs')}[{k}]")
        inst = PlacementInstance(mesh, tiles, flow, pairs)
        if not inst.layouts:
            counts = ", ".join(f"{h}x{w}: {len(layout(mesh, (h, w)).slots)}" for h, w in tiles)
            raise InstanceError(f"{n} stages do not fit: usable slots per tile shape {counts}", at("tile"))
        for lay in inst.layouts if pairs else ():
            entries = len(lay.slots) ** 2 * len(mesh.directed_links)
            if entries > MAX_ROUTE_TABLE:
                h, w = lay.tile
                raise InstanceError(f"routing conflicts need the XY route of every slot pair: {len(lay.slots):,} "
                                    f"slots of tile {h}x{w} x {len(mesh.directed_links):,} links is {entries:,} "
                                    f"entries, above the limit of {MAX_ROUTE_TABLE:,} (use larger tiles or fewer "
                                    "dies)", at("pairs"))
        return inst

    @classmethod
    def keys_of(cls, inst: PlacementInstance) -> dict:
        n = inst.stages
        keys = {"mesh": MeshSpec.of(inst.mesh),
                "tile": list(inst.tiles[0]) if len(inst.tiles) == 1 else [list(t) for t in inst.tiles],
                "stages": n,
                "flows": [[i, j, float(inst.flow[i, j])] for i in range(n) for j in range(n) if inst.flow[i, j] > 0]}
        if inst.pairs:
            keys["pairs"] = [[s, h, v] for s, h, v in inst.pairs]
        return keys


def _triples(items: list, where: str) -> list[tuple[int, int, float]]:
    """Validated [i, j, volume] items (Triple) as tuples; i and j must differ."""
    out = []
    for k, item in enumerate(items):
        i, j, vol = item
        if i == j:
            raise InstanceError(f"a flow needs two different stages, got {item!r}", f"{where}[{k}]")
        out.append((i, j, float(vol)))
    return out
