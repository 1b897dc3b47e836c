"""Solving helpers shared by every formulation: HiGHS through pyomo, and CP-SAT.

Both are set to prove optimality with zero gap (HiGHS' default mip_rel_gap is 1e-4, CP-SAT's
absolute gap 1e-4): a status `optimal` from here is a proof.
"""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass
from importlib.metadata import version

from wafopt.core.budget import SolveOptions
from wafopt.core.numeric import decimal_scale  # noqa: F401  (models import it from here too)


@dataclass
class Outcome:
    status: str          # optimal | feasible | infeasible | unknown
    bound: float | None  # proven lower bound of the model objective (model units)
    has_solution: bool   # variable values are loaded into the model / solver
    solver: str
    message: str = ""




def highs_version() -> str:
    return f"highs {version('highspy')}"


def solve_pyomo(model, options: SolveOptions, warm_start: bool = False,
                time_limit: float | None = None) -> Outcome:
    """Solve a pyomo model (minimization) with HiGHS via appsi; load the incumbent if any.

    warm_start: variable values already set on the model are passed to HiGHS as a MIP start.
    """
    from pyomo.contrib.appsi.base import TerminationCondition as TC
    from pyomo.contrib.appsi.solvers.highs import Highs

    opt = Highs()
    opt.config.load_solution = False
    opt.config.mip_gap = 0.0
    limit = time_limit if time_limit is not None else options.time_limit
    if limit is not None:
        opt.config.time_limit = max(1e-3, float(limit))
    opt.config.warmstart = warm_start
    opt.config.stream_solver = options.verbose
    opt.highs_options = {"mip_abs_gap": 0.0, "random_seed": int(options.seed) % 2147483647}
    # HiGHS logs to stdout; keep stdout clean for --json output.
    with contextlib.redirect_stdout(sys.stderr):
        opt.set_instance(model)
        if not options.quiet and not options.verbose:
            _report_progress(opt._solver_model, options)
        res = opt.solve(model)
    tc = res.termination_condition
    has_solution = res.best_feasible_objective is not None and math.isfinite(res.best_feasible_objective)
    if has_solution:
        res.solution_loader.load_vars()
    bound = res.best_objective_bound
    bound = float(bound) if bound is not None and math.isfinite(bound) else None
    if tc == TC.optimal:
        # appsi reports `optimal` when HiGHS stops within mip_rel_gap/mip_abs_gap, both 0 here.
        return Outcome("optimal", bound if bound is not None else res.best_feasible_objective,
                       True, highs_version())
    if tc == TC.infeasible:
        return Outcome("infeasible", None, False, highs_version(), "HiGHS proved the model infeasible")
    if tc == TC.interrupted:
        options.interrupted = True
    status = "feasible" if has_solution else "unknown"
    return Outcome(status, bound, has_solution, highs_version(), f"HiGHS stopped: {tc.name}")


def _report_progress(highs, options: SolveOptions) -> None:
    """Throttled progress lines from HiGHS' callbacks: its own log lines (presolve, root LP, the
    branch-and-bound table), which it emits even when nothing is printed."""
    def on_log(event):
        line = " ".join(str(event.message).split())
        if line:
            options.progress(f"highs: {line[:150]}")

    try:
        highs.cbLogging.subscribe(on_log)
    except AttributeError:  # highspy without the callback API: no progress lines
        pass


def cpsat_version() -> str:
    return f"cp-sat {version('ortools')}"


def solve_cpsat(model, options: SolveOptions, on_solution=None, time_limit: float | None = None,
                workers: int = 2, parameters: dict | None = None):
    """Solve a CP-SAT model (minimization). Returns (Outcome, solver).

    parameters: further CP-SAT parameters by name (e.g. {"linearization_level": 2}).

    on_solution(solver_like) is called with every improving solution (a CpSolverSolutionCallback
    exposes Value like the solver), so methods can report incumbents for Ctrl-C.
    """
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    p = solver.parameters
    limit = time_limit if time_limit is not None else options.time_limit
    if limit is not None:
        p.max_time_in_seconds = max(1e-3, float(limit))
    p.num_workers = workers
    p.random_seed = int(options.seed) % 2147483647
    p.relative_gap_limit = 0.0
    p.absolute_gap_limit = 0.0
    for name, value in (parameters or {}).items():
        setattr(p, name, value)
    if options.verbose:
        p.log_search_progress = True
        p.log_to_stdout = False
        solver.log_callback = lambda line: print(line, file=sys.stderr)

    callback = None
    if on_solution is not None:
        class _Callback(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self):
                on_solution(self)
        callback = _Callback()
    code = solver.Solve(model, callback)
    has_solution = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    bound = solver.BestObjectiveBound() if has_solution or code == cp_model.UNKNOWN else None
    if bound is not None and not math.isfinite(bound):
        bound = None
    if code == cp_model.OPTIMAL:
        return Outcome("optimal", solver.ObjectiveValue(), True, cpsat_version()), solver
    if code == cp_model.INFEASIBLE:
        return Outcome("infeasible", None, False, cpsat_version(), "CP-SAT proved the model infeasible"), solver
    if code == cp_model.MODEL_INVALID:
        raise RuntimeError(f"CP-SAT model invalid: {model.Validate()}")
    # CP-SAT catches Ctrl-C and returns its incumbent; it stops early for no other reason here
    stopped_early = limit is None or solver.WallTime() < 0.95 * limit
    options.interrupted |= stopped_early
    why = "CP-SAT stopped by Ctrl-C" if stopped_early else "CP-SAT stopped at the time limit"
    return Outcome("feasible" if has_solution else "unknown", bound, has_solution, cpsat_version(), why), solver


def milp_method(model, options: SolveOptions, start: dict | None, set_start, decode):
    """The common MILP method: warm start from a plan, solve, decode the incumbent into a plan.

    set_start(model, plan) writes a plan into the variables; decode(model) reads one back. If HiGHS
    ends without a solution of its own, the start plan is returned (the runner evaluates it).
    """
    from wafopt.core.result import MethodResult

    if start is not None:
        set_start(model, start)
        options.incumbent(start)
    out = solve_pyomo(model, options, warm_start=start is not None)
    if out.status == "infeasible":
        return MethodResult(None, "infeasible", None, out.solver, out.message)
    plan = decode(model) if out.has_solution else start
    return MethodResult(plan, out.status if plan is not None else "unknown", out.bound, out.solver, out.message)
