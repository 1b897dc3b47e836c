"""Efficiency tables of a system: the share of peak a kernel or a transfer reaches.

The shape follows Calculon's system files (Isaev et al. 2023, "Calculon: a methodology and tool
for high-level co-design of systems and large language models", Sec. 3): matrix-unit efficiency
by the FLOPs of one operator call, one vector-unit efficiency, memory efficiency by the bytes of
one transfer, a bandwidth efficiency per network class, and the share of its window an
asynchronous collective hides (`async_overlap`: 0 puts it on the critical path). A table is a list of
[size, efficiency] points, read as a step function: an operator of size x gets the efficiency of
the largest point not above x (the first point below it). Absent tables are ideal (1.0): the
WATOS and TEMP presets model their papers' ideal dies. Defaults and sources: docs/workload.md,
"Efficiency".
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import ClassVar

from wafopt.core.errors import InstanceError
from wafopt.core.schema import Record, field_at, quantity, validate

Table = tuple[tuple[float, float], ...]   # (size, efficiency) points, sizes ascending


def lookup(table: Table, size: float) -> float:
    """The efficiency of an operator of `size` (step function; ideal when the table is empty)."""
    if not table:
        return 1.0
    k = bisect_right([point[0] for point in table], size) - 1
    return table[max(k, 0)][1]


@dataclass(frozen=True)
class Efficiency:
    matrix: Table = ()          # by GFLOP of one matrix operator
    vector: float = 1.0         # element-wise operators' FLOP rate
    memory: Table = ()          # by MB moved by one operator
    intra: float = 1.0          # share of the intra-node (or die-to-die) link bandwidth collectives reach
    inter: float = 1.0          # share of the inter-node bandwidth
    async_overlap: float = 0.0  # share of its window an asynchronous collective hides (0: critical path)

    def matrix_at(self, flops: float) -> float:
        return lookup(self.matrix, flops / 1e9)

    def memory_at(self, nbytes: float) -> float:
        return lookup(self.memory, nbytes / 1e6)


IDEAL = Efficiency()


def _table(points, key: str) -> Table:
    """Checked points (ValueError saying what is wrong)."""
    if not isinstance(points, list) or not 1 <= len(points) <= 64:
        raise ValueError("must be a list of 1 to 64 [size, efficiency] points")
    out = []
    for k, point in enumerate(points):
        if (not isinstance(point, list) or len(point) != 2
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in point)):
            raise ValueError(f"point {k} must be [size, efficiency], got {point!r:.40}")
        size, eff = float(point[0]), float(point[1])
        if not (0 <= size < 1e12) or not (0 < eff <= 1):
            raise ValueError(f"point {k} needs size >= 0 and efficiency in (0, 1], got {point!r:.40}")
        out.append((size, eff))
    if [p[0] for p in out] != sorted({p[0] for p in out}):
        raise ValueError("sizes must be strictly ascending")
    return tuple(out)


class EfficiencySpec(Record):
    """`efficiency:` of a wafer or cluster: {matrix: [[GFLOP, eff], ...], vector, memory: [[MB, eff],
    ...], intra, inter, async_overlap}."""

    null_is_missing: ClassVar[bool] = True

    matrix: list | None = None
    vector: quantity(positive=True) = 1.0
    memory: list | None = None
    intra: quantity(positive=True) = 1.0
    inter: quantity(positive=True) = 1.0
    async_overlap: quantity(nonnegative=True) = 0.0

    def build(self, where: str) -> Efficiency:
        for key in ("vector", "intra", "inter", "async_overlap"):
            if getattr(self, key) > 1:
                interval = "[0, 1]" if key == "async_overlap" else "(0, 1]"
                raise InstanceError(f"must lie in {interval}, got {getattr(self, key)!r}", field_at(where, key))
        tables = {}
        for key in ("matrix", "memory"):
            try:
                tables[key] = _table(getattr(self, key), key) if getattr(self, key) is not None else ()
            except ValueError as exc:
                raise InstanceError(str(exc), field_at(where, key)) from None
        return Efficiency(tables["matrix"], self.vector, tables["memory"], self.intra, self.inter, self.async_overlap)

    @classmethod
    def of(cls, eff: Efficiency) -> "EfficiencySpec":
        return cls.model_construct(matrix=[list(p) for p in eff.matrix] or None, vector=eff.vector,
                                   memory=[list(p) for p in eff.memory] or None, intra=eff.intra, inter=eff.inter,
                                   async_overlap=eff.async_overlap)


def parse_efficiency(mapping, where: str) -> Efficiency:
    """The Efficiency of an `efficiency:` mapping (None: ideal)."""
    if mapping is None:
        return IDEAL
    return validate(EfficiencySpec, mapping, where).value
