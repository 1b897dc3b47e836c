"""Loading, solving, comparing, evaluating and certifying: the functions behind `wafopt solve`,
`compare`, `evaluate`, `certify` and `validate`."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from wafopt.compose.derive import derive
from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.core.files import display_path, read_mapping
from wafopt.core.numeric import finite
from wafopt.core.registry import load_libraries
from wafopt.core.result import Bound, Status
from wafopt.core.solution import Solution, is_solution_file, read_solution
from wafopt.core.workers import default_workers  # noqa: F401 - the CLI's default, re-exported
from wafopt.problems import Evaluation, Loaded, parse_instance
from wafopt.problems import evaluate as evaluate_plan
from wafopt.problems import load as load_file
from wafopt.run.certify import certify as certify_solution
from wafopt.run.methods import (
    DEFAULT_METHODS,
    UNLIMITED_METHODS,
    method_function,
    methods,
)
from wafopt.run.runner import not_applicable
from wafopt.run.runner import run as run_method
from wafopt.solvers.backends import pyomo_solver

Instance = Loaded  # a parsed instance file: .problem, .instance, .name, .known_optimum


@dataclass
class Result:
    """What one method did on one instance."""

    problem: str
    method: str
    status: Status
    objective: float | None          # the evaluator's value of the plan, never a solver variable
    bound: Bound | None              # proven lower bound with its provenance
    gap: float | None                # (objective - bound) / |objective|
    plan: dict | None
    time_s: float                    # wall time of the method, evaluation included
    message: str = ""
    interrupted: bool = False
    solution: Solution = field(repr=False, default=None)

    @classmethod
    def of(cls, solution: Solution) -> "Result":
        bound = None
        if solution.bound is not None and solution.bound_provenance != "none":
            bound = Bound(solution.bound, solution.bound_provenance, solution.bound_kind,
                          solution.certificate or {})
        return cls(solution.problem, solution.method, Status(solution.status), solution.objective, bound,
                   solution.gap, solution.plan, solution.time_s, solution.message,
                   bool(solution.stats.get("interrupted")), solution)

    def write(self, path: str | Path) -> Path:
        """Write the solution JSON (atomically)."""
        return self.solution.write(path)


def load(source: str | Path | Mapping[str, Any], problem: str | None = None) -> Instance:
    """An instance from a YAML/JSON file or from a mapping with `problem:`. With `problem`, the
    kernel of that problem derived from a scenario (`problem: plan`)."""
    if isinstance(source, Mapping):
        loaded = parse_instance(dict(source))
    elif isinstance(source, (str, Path)):
        loaded = load_file(source)
    else:
        raise InstanceError(f"expected a path or a mapping, got {type(source).__name__}", "instance")
    return derive(loaded, problem) if problem else loaded


def as_instance(instance: Instance | str | Path | Mapping, problem: str | None = None) -> Instance:
    """An instance as given, or loaded from a file or a mapping; with `problem`, that kernel of it."""
    if isinstance(instance, Loaded):
        return derive(instance, problem) if problem else instance
    return load(instance, problem)


def _plan_of(plan_or_solution) -> dict:
    if isinstance(plan_or_solution, Result):
        return plan_or_solution.plan
    if isinstance(plan_or_solution, Solution):
        return plan_or_solution.plan
    if isinstance(plan_or_solution, (str, Path)):
        return read_solution(plan_or_solution).plan
    return plan_or_solution


def options(time_limit: float | None = None, seed: int = 0, warm_start=None, quiet: bool = True,
            verbose: bool = False, workers: int = 1, solver: str = "highs", elite_share: float = 0.5,
            scheduler: str | None = None) -> SolveOptions:
    """Checked solve options (a bad value raises InstanceError naming the argument)."""
    if time_limit is not None and not (finite(time_limit) and time_limit > 0):
        raise InstanceError(f"must be a positive number of seconds, got {time_limit}", "time_limit")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InstanceError(f"must be a non-negative integer, got {seed!r}", "seed")
    check_workers(workers)
    if isinstance(elite_share, bool) or not isinstance(elite_share, (int, float)) or not 0 <= elite_share <= 1:
        raise InstanceError(f"must lie in [0, 1], got {elite_share!r}", "elite_share")   # also refuses nan
    if solver != "highs":
        pyomo_solver(solver)   # a solver that is not installed fails before any work
    start = _plan_of(warm_start) if warm_start is not None else None
    if start is not None and not isinstance(start, dict):
        raise InstanceError(f"must be a plan (mapping), a solution or a solution file, got {start!r:.60}",
                            "warm_start")
    return SolveOptions(time_limit=time_limit, seed=seed, quiet=quiet, verbose=verbose, warm_start=start,
                        workers=workers, solver=solver, elite_share=float(elite_share), scheduler=scheduler)


def check_workers(workers) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InstanceError(f"must be a positive number of processes, got {workers!r}", "workers")


def check_warm_start(instance: Instance, plan: dict, where: str = "warm_start") -> None:
    """A warm start must be a feasible plan of this instance."""
    verdict = evaluate_plan(instance.problem, instance.instance, plan)
    if not verdict.feasible:
        raise InstanceError("the warm start is not a feasible plan of this instance: "
                            + "; ".join(verdict.violations[:3]), where)


def solve(instance: Instance | str | Path | Mapping, method: str, *, problem: str | None = None,
          time_limit: float | None = None, seed: int = 0, warm_start=None, quiet: bool = True,
          verbose: bool = False, workers: int = 1, solver: str = "highs", elite_share: float = 0.5,
          scheduler: str | None = None) -> Result:
    """Solve with one method. Ctrl-C stops it and returns the best plan found so far.
    workers, scheduler: where the planner composes layouts (local processes, or a Dask cluster);
    solver: the MILP solver of the pyomo models; elite_share: the planner GA's elitism."""
    inst = as_instance(instance, problem)
    prepare_method(inst, method)
    opts = options(time_limit, seed, warm_start, quiet, verbose, workers, solver, elite_share, scheduler)
    if opts.warm_start is not None:
        check_warm_start(inst, opts.warm_start)
    return run(inst, method, opts)


def run(instance: Instance, method: str, options: SolveOptions) -> Result:
    """Run one method with checked options (see `options`); Ctrl-C stops it and returns the best
    plan found so far (`Result.interrupted`)."""
    return Result.of(run_method(instance, method, options))


def runs_without_limit(method: str, time_limit: float | None) -> bool:
    """True when the method would run with no time limit at all (an exact method, no `time_limit`)."""
    return time_limit is None and method in UNLIMITED_METHODS


def prepare_method(instance: Instance, method: str) -> None:
    """An unknown method, or one that does not apply to the instance (a wafer method on a cluster),
    fails before any work; the solver libraries of a known one load now."""
    function = method_function(instance.problem, method)
    why = not_applicable(instance, method)
    if why:
        raise InstanceError(why, "--method")
    load_libraries(function, instance.instance)


def read_warm_start(path: str | Path, instance: Instance) -> dict:
    """The plan of a solution file, checked to be a feasible start of this instance."""
    start = read_solution(path)
    if start.problem != instance.problem:
        raise InstanceError(f"is a {start.problem} solution, this instance is {instance.problem}", str(path))
    check_warm_start(instance, start.plan, str(path))
    return start.plan


def read_plan(path: str | Path, instance: Instance) -> dict:
    """A plan from a file: a hand-written plan (YAML/JSON) or the plan of a solution of this problem."""
    data, _ = read_mapping(path)
    if "plan" in data and data.get("problem") not in (None, instance.problem):
        raise InstanceError(f"is a solution of a {data['problem']} instance, this instance is "
                            f"{instance.problem}", str(path))
    return data["plan"] if isinstance(data.get("plan"), dict) else data


def validate(paths: Iterable[str | Path]) -> Iterator[tuple[str, Instance | None, InstanceError | None]]:
    """For each file as it is read: (path, instance, None) if it loads, else (path, None, error)."""
    for path in paths:
        try:
            if is_solution_file(path):
                raise InstanceError("this is a solution, not an instance: check it with wafopt certify", str(path))
            yield str(path), load_file(path), None
        except InstanceError as exc:
            yield str(path), None, exc


def applicable(instance: Instance, method: str) -> bool:
    return method in methods(instance.problem) and not_applicable(instance, method) is None


def default_methods(instance: Instance) -> list[str]:
    return list(DEFAULT_METHODS[instance.problem])


def compare(instance: Instance | str | Path | Mapping, methods: list[str] | None = None, *,
            problem: str | None = None, time_limit: float | None = None, seed: int = 0,
            quiet: bool = True) -> list[Result]:
    """Run several methods on one instance (default: the problem's default set). Methods that do
    not apply to the problem are skipped; `compare_table` gives the rows with the gaps to the best
    bound and to a known optimum, and the skipped methods."""
    inst = as_instance(instance, problem)
    chosen = [m for m in (methods or default_methods(inst)) if applicable(inst, m)]
    return [solve(inst, m, time_limit=time_limit, seed=seed, quiet=quiet) for m in chosen]


def evaluate(instance: Instance | str | Path | Mapping, plan, problem: str | None = None) -> Evaluation:
    """The shared evaluator's verdict on a plan (a mapping, a Result, a Solution or a solution file)."""
    inst = as_instance(instance, problem)
    return evaluate_plan(inst.problem, inst.instance, _plan_of(plan))


def certify(solution: str | Path | Result | Solution, instance: str | Path | None = None, *,
            resolve: bool = False, time_limit: float | None = None, workers: int = 1, quiet: bool = True):
    """Re-check a solution without trusting it (see `wafopt certify`): returns the report with
    `.verdict` (certified, claimed or invalid), the certified bound and gap, and its lines.
    workers: the processes a branch-and-bound tree's check may use (the verdict is the same);
    quiet: no progress lines on stderr during a long check."""
    check_workers(workers)
    if isinstance(solution, Result):
        solution = solution.solution
    if isinstance(solution, Solution):
        with tempfile.TemporaryDirectory() as tmp:
            path = solution.write(Path(tmp) / "solution.json")
            return certify_solution(str(path), instance if instance is not None else solution.instance,
                                    workers=workers, quiet=quiet, **_certify_options(resolve, time_limit))
    return certify_solution(display_path(solution), None if instance is None else str(instance),
                            workers=workers, quiet=quiet, **_certify_options(resolve, time_limit))


def certify_file(path: str | Path, instance: str | Path | None = None, resolve: bool = False,
                 time_limit: float | None = None, workers: int = 1, quiet: bool = True):
    """`wafopt certify`: as `certify`, on a solution file whose path the report names as given."""
    check_workers(workers)
    return certify_solution(str(path), None if instance is None else str(instance), resolve=resolve,
                            time_limit=time_limit, workers=workers, quiet=quiet)


def _certify_options(resolve: bool, time_limit: float | None) -> dict:
    return {"resolve": resolve, "time_limit": time_limit} if resolve else {}
