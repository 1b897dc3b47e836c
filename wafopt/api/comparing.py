"""`wafopt compare`: several methods on each instance, as rows with the gap of each method to the
best bound of its instance and to a known optimum, and the methods that do not apply."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from wafopt.api.solving import (
    Instance,
    Result,
    applicable,
    as_instance,
    default_methods,
    solve,
)
from wafopt.core.errors import InstanceError
from wafopt.core.numeric import relative_gap
from wafopt.core.registry import PROBLEMS
from wafopt.run.methods import methods as methods_of
from wafopt.run.runner import not_applicable


@dataclass
class CompareJob:
    """One instance of a comparison: the methods to run on it and those that do not apply."""

    instance: Instance
    methods: list[str]
    skipped: list[str]

    @property
    def objective(self) -> str:
        """What the problem minimizes, in words ("" when the problem does not say)."""
        return getattr(self.instance.module, "OBJECTIVE", "")


def known_methods() -> list[str]:
    """Every method of every problem, sorted."""
    return sorted({m for p in PROBLEMS for m in methods_of(p)})


def compare_jobs(instances: list[Instance | str | Path | Mapping], methods: list[str] | None = None,
                 problem: str | None = None) -> list[CompareJob]:
    """Load every instance before anything is solved. `methods` (default: each problem's default
    set) must name known methods and at least one must apply; the others are skipped."""
    if methods is not None and not methods:
        raise InstanceError("names no method", "--methods")
    known_anywhere = set(known_methods())
    for method in methods or []:
        if method not in known_anywhere:
            raise InstanceError(f"unknown method {method!r} (known: {', '.join(sorted(known_anywhere))})",
                                "--methods")
    jobs = []
    for source in instances:
        loaded = as_instance(source, problem)
        chosen = methods if methods is not None else default_methods(loaded)
        jobs.append(CompareJob(loaded, [m for m in chosen if applicable(loaded, m)],
                               [m for m in chosen if not applicable(loaded, m)]))
    if methods is not None and not any(job.methods for job in jobs):
        raise InstanceError(f"none of {', '.join(methods)} applies to these instances", "--methods")
    return jobs


def compare_rows(job: CompareJob, results: list[Result], details: list[str] = ()) -> list[dict]:
    """One row per method run (in order), then one per skipped method. `gap_best_bound` is the gap
    to the best bound any method proved (never above the best plan: such a bound is a bug and
    shows as a negative gap), `gap_known` the gap to the instance's known optimum; `details` adds
    these keys of the evaluator's details as columns."""
    loaded = job.instance
    block = [r.solution for r in results]
    best_bound = max((s.bound for s in block if s.bound is not None), default=None)
    best_obj = min((s.objective for s in block if s.objective is not None), default=None)
    if best_bound is not None and best_obj is not None:
        best_bound = min(best_bound, best_obj)  # a bound above a feasible plan is a bug; never hide it
    known = loaded.known_optimum
    rows = [{
        "instance": loaded.name, "method": s.method, "status": s.status,
        "objective": s.objective, "bound": s.bound, "bound_provenance": s.bound_provenance,
        "gap": s.gap, "gap_best_bound": relative_gap(s.objective, best_bound),
        "known_optimum": known.value if known else None,
        "gap_known": (None if known is None or s.objective is None
                      else (s.objective - known.value) / abs(known.value or 1.0)),
        "time_s": s.time_s, "solver": s.solver, "message": s.message,
        **{k: (s.evaluation.get("details") or {}).get(k) for k in details}} for s in block]
    rows += [{"instance": loaded.name, "method": m, "status": "skipped", "objective": None,
              "bound": None, "bound_provenance": "none", "gap": None, "gap_best_bound": None,
              "known_optimum": known.value if known else None, "gap_known": None, "time_s": None,
              "solver": "", "message": not_applicable(loaded, m) or f"does not apply to problem {loaded.problem}",
              **{k: None for k in details}} for m in job.skipped]
    return rows


def missing_details(rows: list[dict], details: list[str]) -> list[str]:
    """The detail keys no row has a value for."""
    return [k for k in details if all(r[k] is None for r in rows)]


def compare_table(instances: list[Instance | str | Path | Mapping], methods: list[str] | None = None, *,
                  problem: str | None = None, time_limit: float | None = None, seed: int = 0,
                  quiet: bool = True, details: list[str] = ()) -> list[dict]:
    """The rows of `wafopt compare --json` (see `compare_rows`) for these instances."""
    rows = []
    for job in compare_jobs(instances, methods, problem):
        results = [solve(job.instance, m, time_limit=time_limit, seed=seed, quiet=quiet) for m in job.methods]
        rows += compare_rows(job, results, details)
    return rows
