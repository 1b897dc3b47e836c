"""Design-space files (`wafopt explore SPACE.yaml`): the wafer, compute-die options, the units that
can sit on a die's edges, the workloads and the objective.

After the hardware template of WATOS (Sec. III-A, Fig. 3; Sec. V "Basic Hardware Configurations")
and the design space of the multi-fidelity DSE paper (Methods 1): a homogeneous compute die is
surrounded on its four edges by units (DRAM chiplets, D2D interface blocks); dies tile the wafer
in a 2D mesh, as many as fit its usable area.

```yaml
problem: explore
wafer: {width_mm: 198, height_mm: 198, link_latency_us: 0.2}
compute_dies:
  - {name: c16, cores: [16, 16], size_mm: [21.92, 22.81], core_tflops: 2.04}
edge:
  budget_tbps: 12            # DRAM bandwidth + 2 x link bandwidth per die (each link shared by two dies)
  max_units: 3               # units per edge
  units:
    - {name: hbm, kind: dram, width_mm: 7.0, depth_mm: 2.0, capacity_gb: 16, bandwidth_tbps: 0.5}
    - {name: d2d, kind: d2d, width_mm: 3.0, depth_mm: 0.0, bandwidth_tbps: 1.0}
workloads:
  - {name: gpt3, scenario: ../plan/gpt3-175b-config3.yaml}    # its wafer is replaced by each design
objective: throughput        # throughput | capacity_x_throughput
```
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from wafopt.core.errors import InstanceError
from wafopt.core.files import read_mapping

MAX_UNIT_TYPES = 8
MAX_UNITS_PER_EDGE = 6
MAX_COMPUTE_DIES = 8
MAX_WORKLOADS = 8

Number = Field(gt=0, le=1e6, allow_inf_nan=False)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WaferArea(_Strict):
    width_mm: float = Field(198.0, gt=0, le=1000, allow_inf_nan=False)
    height_mm: float = Field(198.0, gt=0, le=1000, allow_inf_nan=False)
    link_latency_us: float = Field(0.2, ge=0, le=1e3, allow_inf_nan=False)
    topology: Literal["mesh"] = "mesh"
    die_fault_rate: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False)
    link_fault_rate: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False)
    fault_seed: int = Field(0, ge=0, le=2 ** 31)


class ComputeDie(_Strict):
    name: str = Field(min_length=1, max_length=40)
    cores: tuple[int, int] = (16, 16)
    size_mm: tuple[float, float]                                   # (width along x, height along y)
    core_tflops: float | None = Field(2.04, gt=0, le=1e4, allow_inf_nan=False)
    tflops: float | None = Field(None, gt=0, le=1e6, allow_inf_nan=False)   # given instead of cores x core_tflops
    sram_mb_per_core: float = Field(1.25, ge=0, le=1e4, allow_inf_nan=False)

    @model_validator(mode="after")
    def _sizes(self):
        if not all(0 < v <= 1000 for v in self.size_mm):
            raise ValueError(f"size_mm must be two positive lengths in mm, got {list(self.size_mm)}")
        if not all(1 <= c <= 1024 for c in self.cores):
            raise ValueError(f"cores must be two counts in 1..1024, got {list(self.cores)}")
        return self

    @property
    def peak_tflops(self) -> float:
        return self.tflops if self.tflops is not None else self.cores[0] * self.cores[1] * self.core_tflops


class EdgeUnit(_Strict):
    name: str = Field(min_length=1, max_length=40)
    kind: Literal["dram", "d2d"]
    width_mm: float = Field(gt=0, le=1000, allow_inf_nan=False)    # along the edge
    depth_mm: float = Field(0.0, ge=0, le=1000, allow_inf_nan=False)  # away from the die: grows the footprint
    capacity_gb: float = Field(0.0, ge=0, le=1e6, allow_inf_nan=False)
    bandwidth_tbps: float = Field(gt=0, le=1e3, allow_inf_nan=False)


class Edge(_Strict):
    budget_tbps: float = Field(12.0, gt=0, le=1e4, allow_inf_nan=False)
    max_units: int = Field(3, ge=0, le=MAX_UNITS_PER_EDGE)
    units: tuple[EdgeUnit, ...] = Field(min_length=1, max_length=MAX_UNIT_TYPES)

    @model_validator(mode="after")
    def _unique_names(self):
        _unique([u.name for u in self.units], "unit")   # an edge is identified by its unit names
        return self


class WorkloadSpec(_Strict):
    name: str = Field(min_length=1, max_length=60)
    scenario: str = Field(min_length=1, max_length=500)  # a scenario file, relative to the space file
    weight: float = Field(1.0, gt=0, le=1e6, allow_inf_nan=False)
    # fields of the scenario's `training:` to replace (e.g. a smaller global batch); the scenario
    # parser checks them like any scenario's
    training: dict[str, int | float | bool | str] = Field(default_factory=dict, max_length=20)


@dataclass
class LoadedWorkload:
    """A workload of a space with its scenario read: what every fidelity evaluates."""
    name: str
    data: dict       # the scenario mapping (its wafer is replaced by each design's)
    sha: str
    weight: float


class Space(_Strict):
    problem: Literal["explore"]
    name: str = ""
    description: str = ""
    source: str = ""
    wafer: WaferArea = WaferArea()
    compute_dies: tuple[ComputeDie, ...] = Field(min_length=1, max_length=MAX_COMPUTE_DIES)
    edge: Edge
    workloads: tuple[WorkloadSpec, ...] = Field(min_length=1, max_length=MAX_WORKLOADS)
    objective: Literal["throughput", "capacity_x_throughput"] = "throughput"
    min_dies: int = Field(1, ge=1, le=10_000)   # designs with fewer dies are not wafers worth planning

    @model_validator(mode="after")
    def _unique_names(self):
        _unique([d.name for d in self.compute_dies], "compute die")   # design ids start with it
        _unique([w.name for w in self.workloads], "workload")         # results are keyed by it
        return self


def _unique(names: list[str], what: str) -> None:
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{what} names must be unique, {repeated[0]!r} repeats")


@dataclass(frozen=True)
class LoadedSpace:
    space: Space
    path: Path | None
    sha256: str | None

    def workload_path(self, workload: WorkloadSpec) -> Path:
        p = Path(workload.scenario)
        return p if p.is_absolute() or self.path is None else (self.path.parent / p)


def parse_space(data: dict, path: str | Path | None = None, sha256: str | None = None) -> LoadedSpace:
    where = str(path) if path else "space"
    try:
        space = Space.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "space"
        raise InstanceError(f"{err['msg']} (got {str(err.get('input'))[:60]!r})", f"{where}: {field}") from None
    return LoadedSpace(space, Path(path) if path else None, sha256)


def load_space(path: str | Path) -> LoadedSpace:

    data, digest = read_mapping(path)
    return parse_space(data, path, digest)
