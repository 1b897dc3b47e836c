"""The problems: one package per problem (`wafopt.problems.<problem>`) with
- `instance.py`: the typed instance, `parse(fields)`, `METHODS` (name -> "module:function"),
  `DEFAULT_METHODS`, `OBJECTIVE`, `summary(instance)`, and for kernels of a scenario a pure
  `from_scenario(scenario, ...)` that takes every decision it depends on as an input;
- `evaluate.py`: `evaluate(instance, plan) -> Evaluation`, the shared evaluator;
- `certificate.py`: the checkers that re-derive certified bounds from the instance.

Every instance file is a mapping with `problem:`, an optional `schema:` version, optional `name`,
`description`, `source` and `known_optimum: {value, source}`, and the problem's own fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wafopt.core.errors import InstanceError, PlanError
from wafopt.core.fields import Fields
from wafopt.core.files import check_document, display_path, read_mapping
from wafopt.core.limits import MAX_INSTANCE_NODES
from wafopt.core.registry import PROBLEMS, problem_module, problem_part
from wafopt.core.schema import validate
from wafopt.problems.evaluation import Evaluation

SCHEMA_VERSION = 1
COMMON_KEYS = ("problem", "schema", "name", "description", "source", "known_optimum")


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


def document_schema(problem: str):
    """The pydantic model of a problem's instance files (wafopt.problems.<problem>.schema), or
    None for a problem that publishes none (its parser alone checks the document)."""
    try:
        return problem_part(problem, "schema").Document
    except ModuleNotFoundError as exc:
        if exc.name != f"{PROBLEMS[problem]}.schema":
            raise
        return None


def parse_instance(data: dict, path: str | None = None, sha256: str | None = None) -> Loaded:
    """Parse a mapping into a Loaded instance (raises InstanceError)."""
    where = str(path) if path else "instance"
    if not isinstance(data, dict):
        raise InstanceError(f"expected a mapping with a 'problem:' key, got {type(data).__name__}", where)
    f = Fields(data, "")
    try:
        check_document(data, MAX_INSTANCE_NODES)
        problem = f.string("problem", choices=tuple(PROBLEMS))
        document = document_schema(problem)
        if document is not None:
            validate(document, data)  # types, limits, unknown keys; the problem's parser then builds
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


def evaluate(problem: str, instance, plan) -> Evaluation:
    """The shared evaluator of `problem`. A malformed plan is never an exception: it is an
    infeasible Evaluation naming what is wrong."""
    module = problem_part(problem, "evaluate")
    if not isinstance(plan, dict):
        return Evaluation(None, False, [f"plan must be a mapping, got {type(plan).__name__}"])
    try:
        return module.evaluate(instance, plan)
    except PlanError as exc:
        return Evaluation(None, False, [f"malformed plan: {exc}"])
    except (TypeError, KeyError, IndexError, ValueError, OverflowError) as exc:  # unexpected structure
        return Evaluation(None, False, [f"malformed plan: {type(exc).__name__}: {exc}"])
