"""Instance files: reading YAML/JSON, the problem registry, and dispatch to each schema.

Every instance file is a mapping with `problem:` (one of PROBLEMS), an optional `schema:`
version, optional `name`, `description`, `source` and `known_optimum: {value, source}`, and the
problem's own fields, parsed by `wafopt.instance.<problem>.parse`.

A problem module (`wafopt.instance.<problem>`) defines:
- `parse(fields: Fields) -> instance`: the typed instance (a dataclass); `fields.finish()` is
  called by the loader afterwards, so unknown keys are rejected;
- `METHODS: dict[str, str]`: method name -> "module:function", each `solve(instance, options)`
  returning a `wafopt.solve.MethodResult`; `DEFAULT_METHODS` (what `compare` runs by default) and
  `OBJECTIVE` (what the objective measures, with its unit);
- optionally `from_scenario(scenario) -> instance` (for `--problem` on a scenario), `summary(instance)
  -> dict` (for `show`) and `draw(instance, plan, ax)` (for `show --png`).
The evaluator of each problem is `wafopt.evaluate.<problem>.evaluate(instance, plan)`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

import yaml

from wafopt.errors import InstanceError
from wafopt.instance.fields import Fields

SCHEMA_VERSION = 1

# problem name -> module with its instance schema and method table
PROBLEMS = {
    "plan": "wafopt.instance.plan",
    "placement": "wafopt.instance.placement",
    "recompute": "wafopt.instance.recompute",
    "mem_pair": "wafopt.instance.mem_pair",
    "tatp": "wafopt.instance.tatp",
    "routing": "wafopt.instance.routing",
}

COMMON_KEYS = ("problem", "schema", "name", "description", "source", "known_optimum")


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that also reads 1e9 and 2E-3 as numbers (YAML 1.1 wants a dot: 1.0e9)."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def problem_module(problem: str):
    if problem not in PROBLEMS:
        raise InstanceError(f"unknown problem {problem!r} (known: {', '.join(PROBLEMS)})", "problem")
    return import_module(PROBLEMS[problem])


def resolve(target: str):
    """'package.module:function' -> the function."""
    module, _, name = target.partition(":")
    return getattr(import_module(module), name)


@dataclass
class KnownOptimum:
    value: float
    source: str
    proven: bool = True  # False for a best known value (e.g. QAPLIB tho40)


@dataclass
class Loaded:
    """An instance file, parsed."""

    path: str | None
    problem: str
    instance: Any
    data: dict
    sha256: str | None
    name: str
    known_optimum: KnownOptimum | None = None
    derived_from: str | None = None  # "plan" when a kernel instance was derived from a scenario
    extra: dict = field(default_factory=dict)

    @property
    def module(self):
        return problem_module(self.problem)

    @property
    def methods(self) -> dict[str, str]:
        return self.module.METHODS


def read_mapping(path: str | Path) -> tuple[dict, str]:
    """Read a YAML or JSON file into a mapping; returns it with the file's sha256."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InstanceError("no such file", str(path)) from None
    except IsADirectoryError:
        raise InstanceError("is a directory, not an instance file", str(path)) from None
    except OSError as exc:
        raise InstanceError(f"cannot read: {exc.strerror}", str(path)) from None
    digest = hashlib.sha256(raw).hexdigest()
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.load(text, Loader=_YamlLoader)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InstanceError(f"malformed {'JSON' if p.suffix == '.json' else 'YAML'}{where}: {reason}",
                            str(path)) from None
    if not isinstance(data, dict):
        raise InstanceError(f"expected a mapping with a 'problem:' key at the top, got {type(data).__name__}",
                            str(path))
    return data, digest


def parse_instance(data: dict, path: str | None = None, sha256: str | None = None) -> Loaded:
    """Parse a mapping into a Loaded instance (raises InstanceError)."""
    where = str(path) if path else "instance"
    f = Fields(data, "")
    try:
        problem = f.string("problem", choices=tuple(PROBLEMS))
        schema = f.integer("schema", default=SCHEMA_VERSION, positive=True)
        if schema > SCHEMA_VERSION:
            raise InstanceError(f"schema version {schema} is newer than this wafopt supports "
                                f"({SCHEMA_VERSION})", "schema")
        name = f.string("name", default=Path(path).stem if path else problem)
        f.string("description", default="")
        f.raw("source", default=None)
        known = None
        if f.has("known_optimum"):
            k = f.mapping("known_optimum")
            known = KnownOptimum(k.number("value"), k.string("source"), k.boolean("proven", default=True))
            k.finish()
        instance = problem_module(problem).parse(f)
        f.finish()
    except InstanceError as exc:
        raise InstanceError(str(exc), where) from None
    return Loaded(str(path) if path else None, problem, instance, data, sha256, name, known)


def load(path: str | Path) -> Loaded:
    data, digest = read_mapping(path)
    return parse_instance(data, display_path(path), digest)


def derive(loaded: Loaded, problem: str) -> Loaded:
    """The kernel instance of `problem` derived from a scenario (`solve SCENARIO --problem X`)."""
    if problem == loaded.problem:
        return loaded
    if loaded.problem != "plan":
        raise InstanceError(f"--problem {problem} needs a scenario instance (problem: plan), "
                            f"this is problem: {loaded.problem}", loaded.path)
    module = problem_module(problem)
    if not hasattr(module, "from_scenario"):
        raise InstanceError(f"problem {problem} cannot be derived from a scenario yet", loaded.path)
    try:
        kernel = module.from_scenario(loaded.instance)
    except InstanceError as exc:
        raise InstanceError(str(exc), loaded.path) from None
    return Loaded(loaded.path, problem, kernel, loaded.data, loaded.sha256, loaded.name,
                  None, derived_from=loaded.problem)


def display_path(path: str | Path) -> str:
    """The path relative to the working directory when it lies below it, else absolute."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)
