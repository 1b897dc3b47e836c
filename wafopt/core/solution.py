"""Solution files: the JSON record every solving command writes, and reading it back."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from wafopt.core.errors import InstanceError
from wafopt.core.files import parse_text, read_bytes, write_text
from wafopt.core.result import PROVENANCES, STATUSES
from wafopt.core.version import __version__


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
        text = json.dumps(self.to_dict(), indent=1) + "\n"   # fails before any file exists
        return write_text(path, text)


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


# type of every field a solution file may hold: (allowed types, may be null)
_NUMBER = (int, float)
_FIELD_TYPES = {
    "problem": (str, False), "instance": (str, True), "instance_sha256": (str, True), "method": (str, False),
    "solver": (str, False), "status": (str, False), "objective": (_NUMBER, True), "bound": (_NUMBER, True),
    "gap": (_NUMBER, True), "time_s": (_NUMBER, False), "seed": (int, False), "plan": (dict, True),
    "evaluation": (dict, False), "message": (str, False), "time_limit": (_NUMBER, True),
    "derived_from": (str, True), "known_optimum": (_NUMBER, True), "bound_provenance": (str, False),
    "bound_kind": (str, False), "certificate": (dict, True), "wafopt_version": (str, False), "stats": (dict, False),
}
_TYPE_NAMES = {str: "a string", dict: "a mapping", int: "an integer", _NUMBER: "a number"}


def read_solution(path: str | Path) -> Solution:
    """A solution file, read as untrusted input: the reader's limits (no NaN or infinity anywhere,
    wafopt.core.files), then the type of every field; InstanceError naming the field otherwise."""
    where = str(path)
    data = parse_text(read_bytes(path), "json", where)
    if not isinstance(data, dict):
        raise InstanceError("not a solution JSON file (expected a mapping)", where)
    missing = [k for k in ("problem", "plan") if k not in data]
    if missing:
        raise InstanceError(f"not a solution file: missing {', '.join(missing)}", where)
    for key, (kinds, nullable) in _FIELD_TYPES.items():
        value = data.get(key)
        if value is None and (nullable or key not in data):
            continue
        if not isinstance(value, kinds) or isinstance(value, bool):
            what = _TYPE_NAMES[kinds] + (" or null" if nullable else "")
            raise InstanceError(f"{key} must be {what}, got {value!r:.60}", where)
    if data.get("status", "unknown") not in STATUSES:
        raise InstanceError(f"status must be one of {', '.join(STATUSES)}, got {data['status']!r:.60}", where)
    provenance = data.get("bound_provenance", "none")
    if provenance not in (*PROVENANCES, "none"):
        raise InstanceError(f"bound_provenance must be one of {', '.join(PROVENANCES)}, none; got "
                            f"{provenance!r:.60}", where)
    known = {f for f in Solution.__dataclass_fields__}
    defaults = {"instance": None, "instance_sha256": None, "method": "", "solver": "", "status": "unknown",
                "objective": None, "bound": None, "gap": None, "time_s": 0.0, "seed": 0, "evaluation": {}}
    given = {k: v for k, v in data.items() if k in known and (v is not None or _FIELD_TYPES[k][1])}
    return Solution(**{**defaults, **given})


def locate_instance(given: str, solution_path: str | Path, explicit: bool = False) -> Path:
    """The instance file a solution names: as given (relative to the working directory), else
    relative to the repository the solution sits in (<repo>/solutions/) or to its folder; an
    InstanceError with the way out when none exists (`explicit`: the user's own path, as given)."""
    path = Path(given)
    if explicit or path.is_absolute() or path.exists():
        return path
    solution_dir = Path(solution_path).resolve().parent
    for base in (solution_dir.parent, solution_dir):
        if (base / path).exists():
            return base / path
    raise InstanceError("no such file, here or beside the solution (a solution names its instance as it was "
                        "given to solve): pass --instance PATH", given)


def is_solution_file(path: str | Path) -> bool:
    p = Path(path)
    if p.suffix != ".json":
        return False
    try:   # within the file limits: a hostile file is refused where it is read as what it is
        data = parse_text(read_bytes(p), "json", str(p))
    except InstanceError:
        return False
    return isinstance(data, dict) and "plan" in data and "problem" in data
