"""The problems: one package per problem (`wafopt.problems.<problem>`) with
- `schema.py`: its `Document` (e.g. `PlacementDocument`, listed in DOCUMENTS), the one
  description of its instance files: validation checks every field and the rules across fields
  and builds the typed instance; `PlacementDocument.of(instance).dump()` writes an instance back
  as a document;
- `instance.py`: the typed instance, `OBJECTIVE`, `summary(instance)`, and for kernels of a
  scenario a pure `from_scenario(scenario, ...)` that takes every decision it depends on as an input;
- `evaluate.py`: `evaluate(instance, plan) -> Evaluation`, the shared evaluator;
- `certificate.py`: the checkers that re-derive certified bounds from the instance.

Every instance file is a mapping with `problem:`, an optional `schema:` version, optional `name`,
`description`, `source` and `known_optimum: {value, source}`, and the problem's own fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wafopt.core.errors import InstanceError, PlanError
from wafopt.core.files import check_document, display_path, excerpt, read_mapping
from wafopt.core.limits import MAX_INSTANCE_NODES
from wafopt.core.registry import PROBLEMS, References
from wafopt.core.schema import SCHEMA_VERSION, Document, KnownOptimum, validate  # noqa: F401 (re-exported)
from wafopt.problems.evaluation import Evaluation

COMMON_KEYS = tuple(f.alias or name for name, f in Document.model_fields.items())

# problem name -> the pydantic model of its instance files, its instance module (OBJECTIVE,
# summary, from_scenario) and its evaluator; each imported on first use, so that a command loads
# only the problems it reads
_DOCUMENT_NAMES = {"plan": "PlanDocument", "placement": "PlacementDocument", "recompute": "RecomputeDocument",
                   "mem_pair": "MemPairDocument", "tatp": "TatpDocument", "routing": "RoutingDocument"}
DOCUMENTS: Mapping[str, type[Document]] = References(
    {problem: f"{PROBLEMS[problem]}.schema:{name}" for problem, name in _DOCUMENT_NAMES.items()})
INSTANCE_MODULES = References({problem: f"{package}.instance" for problem, package in PROBLEMS.items()})
EVALUATORS = References({problem: f"{package}.evaluate:evaluate" for problem, package in PROBLEMS.items()})


def problem_module(problem: str):
    """The instance module of a problem: OBJECTIVE, summary, from_scenario."""
    if problem not in INSTANCE_MODULES:
        raise InstanceError(f"unknown problem {problem!r} (known: {', '.join(PROBLEMS)})", "problem")
    return INSTANCE_MODULES[problem]


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
    def objective_unit(self) -> str:
        """The unit of the objective ("s", "hops"); "" where the instance's own units are free."""
        unit = getattr(self.module, "UNIT", "")
        return getattr(self.module, "SCENARIO_UNIT", unit) if self.derived_from else unit


def document_schema(problem: str) -> type[Document]:
    """The pydantic model of a problem's instance files (wafopt.problems.<problem>.schema)."""
    if problem not in DOCUMENTS:
        problem_module(problem)   # the one message for an unknown problem
    return DOCUMENTS[problem]


def parse_instance(data: dict, path: str | None = None, sha256: str | None = None) -> Loaded:
    """Parse a mapping into a Loaded instance (raises InstanceError)."""
    where = str(path) if path else "instance"
    if not isinstance(data, dict):
        raise InstanceError(f"expected a mapping with a 'problem:' key, got {type(data).__name__}", where)
    try:
        check_document(data, MAX_INSTANCE_NODES)
        problem = _problem_of(data)
        document = validate(document_schema(problem), data)  # every field, the rules across them, the instance
    except InstanceError as exc:
        raise InstanceError(str(exc), where) from None
    name = document.name if document.name is not None else (Path(path).stem if path else problem)
    return Loaded(str(path) if path else None, problem, document.value, data, sha256, name, document.known_optimum)


def _problem_of(data: dict) -> str:
    """The `problem:` key, which chooses the Document that describes the rest."""
    problem = data.get("problem")
    if problem is None:
        raise InstanceError("missing required field", "problem")
    if not isinstance(problem, str):
        raise InstanceError(f"must be a string, got {excerpt(problem)}", "problem")
    if problem not in PROBLEMS:
        raise InstanceError(f"must be one of {', '.join(PROBLEMS)}; got {excerpt(problem)}", "problem")
    return problem


def load(path: str | Path) -> Loaded:
    data, digest = read_mapping(path)
    return parse_instance(data, display_path(path), digest)


def evaluate(problem: str, instance, plan) -> Evaluation:
    """The shared evaluator of `problem`. A malformed plan is never an exception: it is an
    infeasible Evaluation naming what is wrong."""
    problem_module(problem)   # an unknown problem: the one message
    if not isinstance(plan, dict):
        return Evaluation(None, False, [f"plan must be a mapping, got {type(plan).__name__}"], malformed=True)
    try:
        return EVALUATORS[problem](instance, plan)
    except PlanError as exc:
        return Evaluation(None, False, [f"malformed plan: {exc}"], malformed=True)
    except (TypeError, KeyError, IndexError, ValueError, OverflowError) as exc:  # unexpected structure
        return Evaluation(None, False, [f"malformed plan: {type(exc).__name__}: {exc}"], malformed=True)
