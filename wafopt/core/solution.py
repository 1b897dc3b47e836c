"""Solution files: the JSON record every solving command writes, and reading it back."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from wafopt import __version__
from wafopt.core.errors import InstanceError


@dataclass
class Solution:
    problem: str
    instance: str | None
    instance_sha256: str | None
    method: str
    solver: str
    status: str
    objective: float | None
    bound: float | None
    gap: float | None
    time_s: float
    seed: int
    plan: dict | None
    evaluation: dict
    message: str = ""
    time_limit: float | None = None
    derived_from: str | None = None   # "plan" when the kernel instance came from a scenario
    known_optimum: float | None = None
    bound_provenance: str = "none"    # certificate | solver | none (core.result)
    bound_kind: str = ""              # what computed the bound, e.g. gilmore-lawler, highs, cp-sat
    certificate: dict | None = None   # data the certificate checker needs beyond the instance
    wafopt_version: str = __version__
    stats: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _clean(asdict(self))

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        tmp.replace(p)  # atomic: an interrupted write never leaves half a file
        return p


def _clean(value):
    """JSON-safe: non-finite floats become null, tuples lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _clean(value.item())
    return value


def read_solution(path: str | Path) -> Solution:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InstanceError("no such file", str(path)) from None
    except json.JSONDecodeError as exc:
        raise InstanceError(f"not a solution JSON file: {exc.msg} at line {exc.lineno}", str(path)) from None
    if not isinstance(data, dict):
        raise InstanceError("not a solution JSON file (expected a mapping)", str(path))
    known = {f for f in Solution.__dataclass_fields__}
    missing = [k for k in ("problem", "plan") if k not in data]
    if missing:
        raise InstanceError(f"not a solution file: missing {', '.join(missing)}", str(path))
    for key in ("objective", "bound", "gap"):
        value = data.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise InstanceError(f"{key} must be a number or null, got {value!r}", str(path))
    if data["plan"] is not None and not isinstance(data["plan"], dict):
        raise InstanceError(f"plan must be a mapping or null, got {type(data['plan']).__name__}", str(path))
    defaults = {"instance": None, "instance_sha256": None, "method": "", "solver": "", "status": "unknown",
                "objective": None, "bound": None, "gap": None, "time_s": 0.0, "seed": 0, "evaluation": {}}
    return Solution(**{**defaults, **{k: v for k, v in data.items() if k in known}})


def is_solution_file(path: str | Path) -> bool:
    p = Path(path)
    if p.suffix != ".json":
        return False
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and "plan" in data and "problem" in data
