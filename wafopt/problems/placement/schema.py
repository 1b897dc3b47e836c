"""Schema of a stage-placement instance file (problem: placement)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema

from wafopt.core import schema
from wafopt.core.files import excerpt
from wafopt.core.limits import (
    MAX_FLOWS,
    MAX_MESH_SIDE,
    MAX_STAGES,
    MAX_TILE_SHAPES,
    MAX_VOLUME,
)
from wafopt.hardware.schema import MeshSpec


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


class Document(schema.Document):
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
