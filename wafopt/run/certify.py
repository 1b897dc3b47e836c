"""`wafopt certify`: re-check a solution file without taking its word for anything.

From the instance alone (the file's hash must match; a solution that records none is refused)
certify re-evaluates the plan with the shared evaluator, re-derives a bound whose provenance is
`certificate` with the problem's checker (wafopt.problems.<problem>.certificate), computes its own
cheap certified bound, and reports the solver's claimed bound separately. Verdicts and exit codes:
- certified (0): the plan is feasible, the stored objective is the evaluator's, and every bound
  and status the file states is proven by a certificate re-derived here (or by a re-solve);
- claimed (4): consistent, but a `solver` bound (or an `optimal` status resting on one) is not
  independently certified; `--resolve` re-solves with an exact method to confirm it;
- invalid (5): an infeasible plan, an objective that is not the evaluator's, NaN or infinity
  anywhere, a bound above the objective or above a known optimum (a bound with a certificate:
  anything above what the certificate re-derives or above the file's own objective, however
  little, since wafopt writes neither), a gap that does not follow
  from objective and bound, a certificate that does not re-derive, `optimal` without a bound
  that closes the gap, a changed instance, or a claim a re-solve contradicts.
Numbers agree under the one rule of wafopt.core.numeric.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

from wafopt.compose.derive import derive
from wafopt.core.budget import ProgressLines, SolveOptions
from wafopt.core.errors import (
    EXIT_CERTIFY_INVALID,
    EXIT_NOT_CERTIFIED,
    EXIT_OK,
    CertificateError,
    InstanceError,
)
from wafopt.core.files import read_bytes, read_mapping
from wafopt.core.numeric import at_most, close, finite, relative_gap, tolerance
from wafopt.core.registry import PROBLEMS, References
from wafopt.core.result import CERTIFICATE, SOLVER
from wafopt.core.solution import Solution, locate_instance, read_solution
from wafopt.problems import Loaded, evaluate, parse_instance
from wafopt.problems.certificates import CheckOptions
from wafopt.run.methods import methods
from wafopt.run.runner import run

CERTIFIED, CLAIMED, INVALID = "certified", "claimed", "invalid"
EXIT_CODES = {CERTIFIED: EXIT_OK, CLAIMED: EXIT_NOT_CERTIFIED, INVALID: EXIT_CERTIFY_INVALID}
RESOLVE_DEFAULT_S = 60.0        # time limit of `--resolve` without --time-limit
PROGRESS_AFTER_S = 2.0          # a certificate check this long shows its progress
EXACT_METHODS = ("cpsat", "milp")  # tried in this order by --resolve


@dataclass
class Report:
    verdict: str = CLAIMED
    objective: float | None = None         # the evaluator's value of the plan
    certified_bound: float | None = None   # the strongest bound proven here (re-derived)
    certified_kind: str = ""               # the certificate kind that proves it
    certified_gap: float | None = None     # (objective - certified bound) / |objective|
    claimed_bound: float | None = None     # a solver's bound, not re-derived
    invalid: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def certified(self) -> bool:
        return self.verdict == CERTIFIED

    @property
    def gap(self) -> float | None:
        return self.certified_gap


def certify(solution_path: str, instance_path: str | None = None, resolve: bool = False,
            time_limit: float | None = None, workers: int = 1, quiet: bool = True) -> Report:
    """Re-check a solution file, its certificate on `workers` processes (a long check reports its
    progress on stderr unless `quiet`); bad input (an unreadable file, a wrong type) raises
    InstanceError."""
    report = Report()
    raw = _raw_fields(solution_path)
    if raw is None or "plan" not in raw:
        _refuse_an_instance_file(solution_path)
    non_finite = _non_finite(raw) if raw is not None else None
    if non_finite is not None:
        report.lines.append(f"solution {solution_path}")
        return _finish(report, [f"{non_finite} is not a finite number (NaN or infinity)"])
    sol = read_solution(solution_path)
    report.lines.append(f"solution {solution_path}: {sol.problem} by {sol.method or '?'} "
                        f"({sol.solver or '?'}), status {sol.status}")
    loaded, invalid = _instance(sol, solution_path, instance_path, report.lines)
    if invalid:   # another instance: its plan check and bounds would read as results
        return _finish(report, invalid)
    invalid += _check_plan(sol, loaded, report)
    invalid += _check_bounds(sol, loaded, raw or {}, report,
                             CheckOptions(workers, None if quiet else _progress_lines()))
    if invalid:
        return _finish(report, invalid)
    verdict, why = _verdict(sol, report)
    if verdict == CLAIMED and resolve:
        verdict, why, contradiction = _resolve(sol, loaded, report, time_limit)
        if contradiction:
            return _finish(report, [contradiction])
    report.verdict = verdict
    report.lines.append(verdict.upper() + (f": {why}" if why else ""))
    return report


def _finish(report: Report, invalid: list[str]) -> Report:
    report.verdict, report.invalid = INVALID, invalid
    report.lines += [f"INVALID: {reason}" for reason in invalid]
    return report


# ---- reading ------------------------------------------------------------------------------------

def _raw_fields(path: str) -> dict | None:
    """The file as Python's json module reads it (NaN and overflowing literals become floats), so
    that a non-finite value is reported as invalid; None when it does not parse (read_solution
    then reports why)."""
    try:
        data = json.loads(read_bytes(path))
    except (InstanceError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _refuse_an_instance_file(path: str) -> None:
    """An instance given where the solution belongs: say so, rather than report its YAML as bad JSON."""
    try:
        data, _ = read_mapping(path)
    except InstanceError:
        return   # neither: read_solution says what is wrong with it
    if "problem" in data and "plan" not in data:
        problem = data["problem"] if isinstance(data["problem"], str) else ""
        raise InstanceError(f"this is {'a ' + problem if problem else 'an'} instance file, not a solution: usage: "
                            "wafopt certify SOLUTION [--instance INSTANCE] (solve the instance first to get a "
                            "solution file)", path)


def _non_finite(data, path: str = "") -> str | None:
    """The field path of the first NaN or infinite number, or None."""
    stack = [(data, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where or "a value"
        if isinstance(value, dict):
            stack += [(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(v, f"{where}[{k}]") for k, v in enumerate(value)]
    return None


def _instance(sol: Solution, solution_path: str, instance_path: str | None,
              lines: list[str]) -> tuple[Loaded, list[str]]:
    if not sol.instance_sha256:
        # without the hash, any instance would do: the plan could be re-targeted silently
        raise InstanceError("instance_sha256 is missing or empty: without it the solution cannot be tied to "
                            "the instance it solves (solve again to write a file that records it)", solution_path)
    given = instance_path if instance_path is not None else sol.instance
    if given is None:
        raise InstanceError("the solution names no instance: pass --instance", solution_path)
    path = locate_instance(given, solution_path, instance_path is not None)
    lines.append(f"instance {given} ({path.resolve()})")
    data, digest = read_mapping(path)
    invalid = []
    if digest != sol.instance_sha256:
        invalid.append(f"instance {given} ({path.resolve()}) is not the one solved: sha256 {digest[:12]}... "
                       f"!= stored {sol.instance_sha256[:12]}...")
    loaded = parse_instance(data, given, digest)
    if sol.derived_from or loaded.problem != sol.problem:
        loaded = derive(loaded, sol.problem)
    return loaded, invalid


# ---- plan, objective, gap -------------------------------------------------------------------------

def _check_plan(sol: Solution, loaded: Loaded, report: Report) -> list[str]:
    invalid = []
    if sol.plan is None:
        if sol.status in ("optimal", "feasible"):
            invalid.append(f"status {sol.status} without a plan")
        if sol.objective is not None:
            invalid.append(f"an objective ({sol.objective:.10g}) without a plan")
        report.lines.append(f"no plan (status {sol.status}): nothing to re-evaluate")
        return invalid
    ev = evaluate(loaded.problem, loaded.instance, sol.plan)
    if not ev.feasible:
        return [f"the plan is infeasible: {'; '.join(ev.violations[:5])}"]
    if not finite(ev.objective):
        return [f"the evaluator's objective of this plan is not a finite number ({ev.objective})"]
    report.objective = ev.objective
    report.lines.append(f"plan feasible; objective recomputed by the evaluator: {ev.objective:.10g}")
    if sol.objective is None:
        invalid.append(f"the solution states no objective for its feasible plan ({ev.objective:.10g})")
    elif not close(sol.objective, ev.objective):
        invalid.append(f"stored objective {sol.objective:.10g} != re-evaluated {ev.objective:.10g}")
    if sol.status in ("infeasible", "unknown"):
        invalid.append(f"status {sol.status} but the plan is feasible")
    stored = sol.evaluation.get("objective")
    if not invalid and stored is not None and (not finite(stored) or not close(stored, ev.objective)):
        invalid.append(f"stored evaluation objective {stored!r:.30} != re-evaluated {ev.objective:.10g}")
    if sol.objective is not None and sol.status in ("optimal", "feasible"):
        expected = relative_gap(sol.objective, sol.bound)
        if (expected is None) != (sol.gap is None) or (expected is not None and not close(sol.gap, expected)):
            invalid.append(f"stored gap {sol.gap!r:.30} does not follow from objective {sol.objective:.10g} "
                           f"and bound {sol.bound!r:.30} (expected {expected!r:.30})")
    return invalid


# ---- bounds ---------------------------------------------------------------------------------------

# problem -> the module that re-derives its certified bounds: check(instance, kind, data, options),
# bound(instance); imported on first use
CERTIFICATES = References({**{problem: f"{package}.certificate" for problem, package in PROBLEMS.items()},
                           "plan": "wafopt.planner.certificate"})   # a scenario's: the planner's


def _progress_lines():
    """A long check's progress lines (at most one a second), from PROGRESS_AFTER_S on: a check
    that ends sooner says nothing."""
    lines, started = ProgressLines(), time.monotonic()
    return lambda text: lines(text) if time.monotonic() - started >= PROGRESS_AFTER_S else None


def _check_bounds(sol: Solution, loaded: Loaded, raw: dict, report: Report, options: CheckOptions) -> list[str]:
    invalid = []
    certificate = CERTIFICATES[loaded.problem]
    proven: list[tuple[float, str]] = []
    objective = report.objective
    upper = [(objective, "the plan's objective")] if objective is not None else []
    if loaded.known_optimum is not None and not loaded.derived_from:
        upper.append((loaded.known_optimum.value, "the known optimum recorded in the instance"))
    bound = sol.bound
    provenance = sol.bound_provenance if "bound_provenance" in raw else SOLVER
    if bound is not None:
        for value, what in upper:
            if not at_most(bound, value):
                invalid.append(f"bound {bound:.10g} is above {what} ({value:.10g})")
        if provenance == CERTIFICATE and sol.objective is not None and sol.objective < bound <= sol.objective + \
                tolerance(bound, sol.objective):   # wafopt writes a proven bound at most its objective, exactly
            invalid.append(f"bound {bound!r} is above the solution's own objective {sol.objective!r}")
        if provenance == CERTIFICATE:
            try:
                derived = certificate.check(loaded.instance, sol.bound_kind, sol.certificate, options)
            except CertificateError as exc:
                invalid.append(f"the {sol.bound_kind or 'unnamed'} certificate does not prove the bound: {exc}")
            except (TypeError, ValueError, KeyError, IndexError, OverflowError, ZeroDivisionError) as exc:
                invalid.append(f"the {sol.bound_kind or 'unnamed'} certificate is malformed: "
                               f"{type(exc).__name__}: {str(exc)[:120]}")
            else:
                if bound > derived:   # derived exactly (rounded down): nothing above it is proven
                    invalid.append(f"the {sol.bound_kind} certificate proves {derived:.10g}, "
                                   f"the solution states {bound:.10g}")
                else:
                    proven.append((derived, f"{sol.bound_kind}, re-derived from the solution's certificate"))
        elif provenance == SOLVER:
            report.claimed_bound = bound
        else:
            invalid.append(f"bound {bound:.10g} with provenance {provenance!r}: a bound must state where it "
                           "comes from")
    own = certificate.bound(loaded.instance)
    if own is not None:
        proven.append((own.value, f"{own.kind}, computed here from the instance"))
    if proven:
        value, kind = max(proven, key=lambda p: p[0])
        for limit, what in upper:
            if not at_most(value, limit):
                invalid.append(f"the certified bound {value:.10g} ({kind}) is above {what} ({limit:.10g}): "
                               "the instance and the plan disagree")
        report.certified_bound, report.certified_kind = value, kind
        report.certified_gap = relative_gap(objective, value)
        gap = "" if report.certified_gap is None else f"; certified gap {report.certified_gap:.6%}"
        report.lines.append(f"certified bound {value:.10g} ({kind}){gap}")
    else:
        report.lines.append("no certified bound for this problem: the gap is not certified")
    if report.claimed_bound is not None:
        kind = sol.bound_kind or ("no provenance recorded" if "bound_provenance" not in raw else "")
        report.lines.append(f"solver-claimed bound {report.claimed_bound:.10g}" + (f" ({kind})" if kind else ""))
    if sol.status == "optimal" and objective is not None and (bound is None or not close(bound, objective)):
        invalid.append("status optimal but no bound closes the gap")
    return invalid


def _verdict(sol: Solution, report: Report) -> tuple[str, str]:
    if sol.plan is None:
        return CLAIMED, f"no plan; status {sol.status} is the method's claim"
    certified = report.certified_bound
    if report.claimed_bound is not None and (certified is None or not at_most(report.claimed_bound, certified)):
        return CLAIMED, (f"the solver's bound {report.claimed_bound:.10g} is not independently certified "
                         f"(certified: {'none' if certified is None else f'{certified:.10g}'})")
    closes = certified is not None and close(certified, report.objective)
    if sol.status == "optimal" and not closes:
        return CLAIMED, "status optimal rests on the solver's claim"
    return CERTIFIED, "optimal" if closes else ""


def _resolve(sol: Solution, loaded: Loaded, report: Report,
             time_limit: float | None) -> tuple[str, str, str | None]:
    """Re-solve with an exact method: (verdict, why, contradiction or None)."""
    method = next((m for m in EXACT_METHODS if m in methods(loaded.problem)), None)
    if method is None:
        return CLAIMED, f"no exact method for problem {loaded.problem}: the claim stays a claim", None
    limit = time_limit if time_limit is not None else RESOLVE_DEFAULT_S
    again = run(loaded, method, SolveOptions(time_limit=limit, seed=sol.seed, quiet=True))
    claim = sol.bound if sol.bound is not None else report.objective
    report.lines.append(f"re-solve: {method} in {limit:g} s: status {again.status}, objective "
                        f"{again.objective!r:.14}, bound {again.bound!r:.14}")
    if sol.status == "infeasible":
        if again.objective is not None:
            return INVALID, "", f"status infeasible, but the re-solve found a plan ({again.objective:.10g})"
        if again.status == "infeasible":
            return CERTIFIED, "the re-solve proves the instance infeasible", None
        return CLAIMED, "the re-solve could not confirm infeasibility", None
    if claim is None:
        return CLAIMED, "nothing the re-solve could confirm", None
    if again.objective is not None and not at_most(claim, again.objective):
        return INVALID, "", (f"the claimed bound {claim:.10g} is contradicted: the re-solve found a plan of "
                             f"objective {again.objective:.10g}")
    if again.bound is not None and at_most(claim, again.bound) or \
            again.status == "optimal" and close(claim, again.objective):
        report.certified_bound, report.certified_kind = claim, f"confirmed by a {method} re-solve"
        report.certified_gap = relative_gap(report.objective, claim)
        return CERTIFIED, f"the {method} re-solve proves the claimed bound {claim:.10g}", None
    return CLAIMED, f"the {method} re-solve in {limit:g} s neither confirms nor contradicts the claim", None
