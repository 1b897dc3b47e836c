"""Instance files and the exact models built from them: `wafopt schema`, `import-qaplib`, `export`
and `show`."""

from __future__ import annotations

from pathlib import Path

from wafopt.api.solving import load
from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.core.schema import json_schema
from wafopt.present.show import show as show_target
from wafopt.problems import document_schema
from wafopt.problems.placement.qaplib import write_instance
from wafopt.run.methods import method_function, methods
from wafopt.solvers.backends import ModelExport

EXPORT_FORMATS = {"milp": ("mps", "lp"), "cpsat": ("pb",)}   # model -> its file formats, default first


def schema(problem: str) -> dict:
    """The JSON Schema of a problem's instance files."""
    document = document_schema(problem)
    if document is None:
        raise InstanceError("publishes no schema", problem)
    return json_schema(document)


def import_qaplib(dat: str | Path, sln: str | Path | None = None,
                  out: str | Path = "instances/placement/qaplib") -> Path:
    """Convert a QAPLIB .dat (and its .sln, by default the one beside it) whose distances form a
    grid into a placement instance in `out`; returns the path written."""
    if sln is None and Path(dat).with_suffix(".sln").exists():
        sln = str(Path(dat).with_suffix(".sln"))
    return write_instance(dat, sln, out)


def export(instance: str | Path, model: str, fmt: str | None = None, problem: str | None = None,
           out: str | Path | None = None) -> list:
    """Write the exact `model` (milp: MPS or LP; cpsat: its CpModelProto) the method builds for an
    instance, to `out` (default <instance-stem>.<model>.<format>), further models beside it.
    Returns the paths written."""
    if model not in EXPORT_FORMATS:
        raise InstanceError(f"unknown model {model!r} (known: {', '.join(sorted(EXPORT_FORMATS))})", "--model")
    fmt = fmt or EXPORT_FORMATS[model][0]
    if fmt not in EXPORT_FORMATS[model]:
        raise InstanceError(f"{model} is written as {' or '.join(EXPORT_FORMATS[model])}, not {fmt}", "--format")
    loaded = load(instance, problem)
    if model not in methods(loaded.problem):
        raise InstanceError(f"problem {loaded.problem} has no {model} model", "--model")
    target = ModelExport(str(out or f"{Path(instance).stem}.{model}.{fmt}"), fmt)
    method_function(loaded.problem, model)(loaded.instance, SolveOptions(quiet=True, export=target).start())
    if not target.written:
        raise InstanceError(f"the {model} method solved this instance without building a model "
                            f"(a heuristic start already meets its bound)", str(instance))
    return target.written


def show(target: str, problem: str | None = None, png: str | None = None, instance: str | None = None) -> dict:
    """What an instance or a solution holds (see `wafopt show`); `png` also draws it there;
    `instance`: the one a solution solves, where the path it names does not lead there."""
    return show_target(target, problem, png, instance)
