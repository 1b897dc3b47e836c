"""Solving helpers shared by every formulation: HiGHS through pyomo, and CP-SAT.

Both are set to prove optimality with zero gap (HiGHS' default mip_rel_gap is 1e-4, CP-SAT's
absolute gap 1e-4): a status `optimal` from here is a proof.

Both obey the run's budget: a solver gets only what is left of the run's deadline once its model
is built, and stops on Ctrl-C. HiGHS polls its interrupt callbacks (MIP, simplex, interior point),
which answer from the shared interrupt event and the deadline; as a MIP polls them only between LP
solves, pyomo models are solved in a child process that is killed when it does not stop in time.
CP-SAT does not catch SIGINT itself (the run's handler must see it) and a watcher thread calls
StopSearch when the event is set. Building a model is an abandonable step (core.budget).
"""

from __future__ import annotations

import contextlib
import logging
import math
import mmap
import os
import pickle
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

from wafopt.core.budget import SolveOptions, Stopped, stderr_copy
from wafopt.core.errors import InstanceError
from wafopt.core.numeric import decimal_scale  # noqa: F401  (models import it from here too)
from wafopt.core.result import MethodResult
from wafopt.solvers.reported import WHOLE, Reported, report_model, run_progress

# Solver logs (--verbose) go to their own copy of stderr, set as sys.stdout while a pyomo solver
# runs: the solver interface captures that descriptor (with 1 and 2), never the progress stream's, so
# progress lines get through while it solves, and stdout stays clean for --json.
SOLVER_LOG = stderr_copy()


@dataclass
class SolverOutcome:
    status: str          # optimal | feasible | infeasible | unknown
    bound: float | None  # proven lower bound of the model objective (model units)
    has_solution: bool   # variable values are loaded into the model / solver
    solver: str
    message: str = ""




def highs_version() -> str:
    return f"highs {version('highspy')}"


def milp_solver_name(options: SolveOptions) -> str:
    """The solver a pyomo model of this run is solved with, as results name it: HiGHS with its
    version by default, else the solver asked for with --solver (as solve_pyomo_with reports it)."""
    return highs_version() if options.solver == "highs" else pyomo_label(options.solver)


def pyomo_label(name: str) -> str:
    return f"{name} (pyomo)"


def time_left(options: SolveOptions, asked: float | None = None) -> float | None:
    """Seconds a solver may run from now: `asked`, capped by what is left of the run (None: no
    limit at all). Called once the model is built, so building counts against the limit."""
    left = options.remaining()
    if asked is None:
        return left
    return asked if left is None else min(asked, left)


def not_started(options: SolveOptions, solver: str) -> SolverOutcome:
    """The outcome of a solve skipped (or a model not built) because the run is stopped."""
    why = "interrupted (Ctrl-C)" if options.interrupted else "no time left"
    return SolverOutcome("unknown", None, False, solver, f"{solver} not started: {why}")


@contextlib.contextmanager
def _logger_level(name: str, level: int):
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


def build_unless_stopped(options: SolveOptions, build, *args, **kwargs):
    """`build(*args, **kwargs)` (a model) as an abandonable step: its result, or None when Ctrl-C
    or the deadline came first (core.budget: building stops at once, not at the next poll)."""
    pyomo_log = logging.getLogger("pyomo.core")   # logs a construction it sees fail, then re-raises
    pyomo_log.addFilter(_not_about_stopping)
    try:
        with options.abandonable():
            return build(*args, **kwargs)
    except Stopped:
        return None
    finally:
        pyomo_log.removeFilter(_not_about_stopping)


def _not_about_stopping(record: logging.LogRecord) -> bool:
    return Stopped.__name__ not in record.getMessage()


def stop_highs_when_stopped(highs, options: SolveOptions) -> None:
    """Subscribe HiGHS' interrupt callbacks (MIP, simplex, interior point): HiGHS stops at its next
    poll once the run is interrupted or past its deadline. The callbacks run Python on the solving
    thread, so a pending Ctrl-C handler also runs there."""
    def interrupt_if_stopped(event):
        if options.stopped():
            event.interrupt()

    for name in ("cbMipInterrupt", "cbSimplexInterrupt", "cbIpmInterrupt"):
        getattr(highs, name).subscribe(interrupt_if_stopped)


FEASIBLE_POINT = 2   # HiGHS' kSolutionStatusFeasible


def solve_pyomo(model, options: SolveOptions, warm_start: bool = False,
                time_limit: float | None = None, highs_options: dict | None = None,
                reported: Reported = WHOLE) -> SolverOutcome:
    """Solve a pyomo model (minimization) with HiGHS via appsi; load the incumbent if any.

    warm_start: variable values already set on the model are passed to HiGHS as a MIP start.
    time_limit: at most this many seconds (never more than what is left of the run).
    highs_options: further HiGHS options by name (other solvers ignore them).
    reported: how the model's objective reads as the run's reported one (progress lines).
    """
    if options.export is not None:
        return options.export.write_pyomo(model)
    if options.solver != "highs":
        return solve_pyomo_with(options.solver, model, options, warm_start, time_limit)
    if options.stopped():
        return not_started(options, highs_version())
    if hasattr(os, "fork"):
        return _in_child_process(model, options,
                                 lambda: _solve_highs(model, options, warm_start, time_limit, highs_options, reported))
    return _solve_highs(model, options, warm_start, time_limit, highs_options, reported)


def _solve_highs(model, options: SolveOptions, warm_start: bool, time_limit: float | None,
                 highs_options: dict | None = None, reported: Reported = WHOLE) -> SolverOutcome:
    """HiGHS on a pyomo model in this process (solve_pyomo runs it in a child process)."""
    import highspy  # lazy: slow import (docs/architecture.md)
    from pyomo.contrib.appsi.base import TerminationCondition as TC
    from pyomo.contrib.appsi.solvers.highs import Highs

    opt = Highs()
    opt.config.load_solution = False
    opt.config.mip_gap = 0.0
    opt.config.warmstart = warm_start
    opt.config.stream_solver = options.verbose
    opt.highs_options = {"mip_abs_gap": 0.0, "random_seed": int(options.seed) % 2147483647, **(highs_options or {})}
    with contextlib.redirect_stdout(SOLVER_LOG or sys.stderr):
        try:
            with options.abandonable():   # translating a big model for HiGHS takes seconds
                opt.set_instance(model)
        except Stopped:
            return not_started(options, highs_version())
        highs = opt._solver_model
        stop_highs_when_stopped(highs, options)
        if not options.quiet and not options.verbose:
            _report_progress(highs, options, reported)
        limit = time_left(options, time_limit)
        if limit is not None:
            opt.config.time_limit = max(1e-3, float(limit))
        with _logger_level("pyomo.contrib.appsi.solvers.highs", logging.ERROR):
            res = opt.solve(model)   # (appsi warns of HiGHS' interrupt status; handled below)
    tc = res.termination_condition
    has_solution = res.best_feasible_objective is not None and math.isfinite(res.best_feasible_objective)
    bound = res.best_objective_bound
    stopped_here = highs.getModelStatus() == highspy.HighsModelStatus.kInterrupt
    if stopped_here:  # appsi maps HiGHS' interrupt to `unknown` and drops its incumbent and bound
        info = highs.getInfo()
        # a MIP incumbent is feasible; an LP stopped mid-simplex has values but no feasible point
        has_solution = bool(highs.getSolution().value_valid) and info.primal_solution_status == FEASIBLE_POINT
        bound = info.mip_dual_bound if info.mip_node_count >= 0 else None
    if has_solution:
        opt.load_vars()
    bound = float(bound) if bound is not None and math.isfinite(bound) else None
    if tc == TC.optimal:
        # appsi reports `optimal` when HiGHS stops within mip_rel_gap/mip_abs_gap, both 0 here.
        return SolverOutcome("optimal", bound if bound is not None else res.best_feasible_objective,
                       True, highs_version())
    if tc == TC.infeasible:
        return SolverOutcome("infeasible", None, False, highs_version(), "HiGHS proved the model infeasible")
    status = "feasible" if has_solution else "unknown"
    if stopped_here:
        why = "interrupted (Ctrl-C)" if options.interrupted else "time limit of the run"
        return SolverOutcome(status, bound, has_solution, highs_version(), f"HiGHS stopped: {why}")
    return SolverOutcome(status, bound, has_solution, highs_version(), f"HiGHS stopped: {tc.name}")


STOP_GRACE_S = 0.5   # a stopped HiGHS child that has not answered by then is killed


def _in_child_process(model, options: SolveOptions, solve) -> SolverOutcome:
    """Run `solve()` (HiGHS on `model`) in a forked child process; copy its variable values back.

    HiGHS polls its interrupt callbacks, and checks its own time limit, only between LP solves and
    between some presolve steps, which take many seconds on big models. A child process can be
    stopped at once: on Ctrl-C it is asked to stop (a shared flag its callbacks read), at the
    deadline it stops by itself, and if it has not answered STOP_GRACE_S later it is killed; the
    method then goes on without HiGHS' incumbent (with its start plan).
    """
    import highspy  # lazy: slow import (docs/architecture.md)
    import pyomo.environ as pyo

    variables = list(model.component_data_objects(pyo.Var, descend_into=True))
    stop_flag = mmap.mmap(-1, 1)    # anonymous shared memory: the parent sets it, the child reads it
    reader, writer = os.pipe()
    lines_in, lines_out = os.pipe()  # the child's progress lines, shown by the parent's reporter
    highspy._core._Highs.resetGlobalScheduler(True)   # no HiGHS worker threads cross the fork
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        os.close(lines_in)
        options.budget_.lines.forward_to(lines_out)
        _child_solve(solve, variables, options, stop_flag, writer)   # never returns
    os.close(writer)
    os.close(lines_out)
    try:
        answer = _child_answer(reader, lines_in, options, stop_flag)
    finally:
        os.close(reader)
        os.close(lines_in)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)   # gone already, or stopped too late
        os.waitpid(pid, 0)
    if answer is None:
        why = "Ctrl-C" if options.interrupted else "the time limit"
        return SolverOutcome("unknown", None, False, highs_version(),
                       f"HiGHS stopped by force: no answer within {STOP_GRACE_S:g} s of {why}")
    kind, outcome, values, progress = answer
    if progress is not None:   # what the child's progress lines showed, for the lines after it
        run_progress(options).merge(progress)
    if kind == "error" and options.stopped():
        # the deadline's Stopped can surface wrapped by a library (pyomo's output capture turns
        # it into a RuntimeError): at the limit that is a stop, not a failure
        return SolverOutcome("unknown", None, False, highs_version(), f"HiGHS stopped at the limit ({outcome[:80]})")
    if kind == "error":
        raise RuntimeError(f"HiGHS failed: {outcome}")
    for var, value in zip(variables, values or ()):
        var.set_value(value, skip_validation=True)
    return outcome


def _child_solve(solve, variables, options: SolveOptions, stop_flag, writer: int):
    """The child process: ignore Ctrl-C (the terminal sends it to the parent too, which decides),
    solve, send (kind, outcome, values) to the parent and exit without running any cleanup."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.set_wakeup_fd(-1)
        parent = os.getppid()

        def watch_stop_flag():
            while not stop_flag[0]:
                if os.getppid() != parent:   # the parent is gone (killed): nobody wants the answer
                    os._exit(1)
                time.sleep(0.02)
            options.interrupted = True   # the interrupt callbacks stop HiGHS at its next poll

        threading.Thread(target=watch_stop_flag, daemon=True).start()
        outcome = solve()
        values = [var.value for var in variables] if outcome.has_solution else None
        answer = pickle.dumps(("done", outcome, values, run_progress(options).state()))
    except BaseException as exc:  # noqa: BLE001 (reported to the parent, which raises it)
        answer = pickle.dumps(("error", f"{type(exc).__name__}: {exc}", None, None))
        code = 1
    try:
        with os.fdopen(writer, "wb") as out:
            out.write(answer)
        if SOLVER_LOG is not None:
            SOLVER_LOG.flush()
    finally:
        os._exit(code)


def _child_answer(reader: int, lines_in: int, options: SolveOptions, stop_flag, poll_s: float = 0.05):
    """Read the child's answer, passing on its progress lines; None when it was stopped and did not
    answer in time."""
    received, asked, partial = [], None, b""
    watched = [reader, lines_in]
    while True:
        ready = select.select(watched, [], [], poll_s)[0]
        if lines_in in ready:
            chunk = os.read(lines_in, 1 << 16)
            if not chunk:
                watched.remove(lines_in)
            *complete, partial = (partial + chunk).split(b"\n")
            for line in complete:
                options.budget_.lines(line.decode("utf-8", "replace"))
        if reader in ready:
            chunk = os.read(reader, 1 << 20)
            if not chunk:   # end of file: the child has answered (or died)
                return pickle.loads(b"".join(received)) if received else None
            received.append(chunk)
            continue
        if options.stopped():
            if options.interrupted:
                stop_flag[0] = 1
            if asked is None:
                asked = time.monotonic()
            elif time.monotonic() - asked > STOP_GRACE_S:
                return None


def _report_progress(highs, options: SolveOptions, reported: Reported) -> None:
    """Progress lines from HiGHS' MIP callback: incumbent, bound and gap in the reported
    objective (its raw log only with --verbose)."""
    def on_mip(event):
        data = event.data_out
        report_model(options, "highs", data.mip_primal_bound, data.mip_dual_bound, reported)

    highs.cbMipInterrupt.subscribe(on_mip)


def cpsat_version() -> str:
    return f"cp-sat {version('ortools')}"


def solve_cpsat(model, options: SolveOptions, on_solution=None, time_limit: float | None = None,
                workers: int = 2, parameters: dict | None = None, reported: Reported = WHOLE):
    """Solve a CP-SAT model (minimization). Returns (SolverOutcome, solver).

    parameters: further CP-SAT parameters by name (e.g. {"linearization_level": 2}).

    reported: how the model's objective (integers scaled from the data, less constant terms) reads
    as the run's reported objective; the progress lines (incumbent, bound, gap) are in the latter.

    on_solution(solver_like) is called with every improving solution (a CpSolverSolutionCallback
    exposes Value like the solver), so methods can report incumbents for Ctrl-C.
    """
    from ortools.sat.python import cp_model  # lazy: slow import (docs/architecture.md)

    solver = cp_model.CpSolver()
    if options.export is not None:
        return options.export.write_cpsat(model), solver
    if options.stopped():
        return not_started(options, cpsat_version()), solver
    p = solver.parameters
    p.catch_sigint_signal = False  # the run's SIGINT handler sets the interrupt event instead
    limit = time_left(options, time_limit)
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

    class _Callback(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self):
            if on_solution is not None:   # first: a method's own record of the plan, then the line
                on_solution(self)
            report_model(options, "cp-sat", self.ObjectiveValue(), self.BestObjectiveBound(), reported)

    callback = None if options.quiet and on_solution is None else _Callback()
    if not options.quiet:
        solver.best_bound_callback = lambda bound: report_model(options, "cp-sat", None, bound, reported)
    with _stop_search_when_interrupted(solver, options):
        code = solver.Solve(model, callback)
    has_solution = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    bound = solver.BestObjectiveBound() if has_solution or code == cp_model.UNKNOWN else None
    if bound is not None and not math.isfinite(bound):
        bound = None
    if code == cp_model.OPTIMAL:
        return SolverOutcome("optimal", solver.ObjectiveValue(), True, cpsat_version()), solver
    if code == cp_model.INFEASIBLE:
        return SolverOutcome("infeasible", None, False, cpsat_version(), "CP-SAT proved the model infeasible"), solver
    if code == cp_model.MODEL_INVALID:
        why = model.Validate()
        if "overflow" in why:   # data too large for CP-SAT's 64-bit integers: no proof, no crash
            return SolverOutcome("unknown", None, False, cpsat_version(),
                           "CP-SAT cannot take this model: its integer coefficients could overflow "
                           "64 bits (the data are too large to scale exactly)"), solver
        raise RuntimeError(f"CP-SAT model invalid: {why[:300]}")
    why = "CP-SAT stopped by Ctrl-C" if options.interrupted else "CP-SAT stopped at the time limit"
    return SolverOutcome("feasible" if has_solution else "unknown", bound, has_solution, cpsat_version(), why), solver


@contextlib.contextmanager
def _stop_search_when_interrupted(solver, options: SolveOptions, poll_s: float = 0.05):
    """While CP-SAT solves (the calling thread blocked in C++), a watcher thread waits on the run's
    interrupt event and stops the search when it is set (again every poll, in case the stop came
    before the search had started)."""
    interrupt = options.budget_.interrupt
    done = threading.Event()

    def watch():
        while not done.is_set():
            if interrupt.wait(poll_s):
                solver.StopSearch()
                done.wait(poll_s)

    watcher = threading.Thread(target=watch, name="cp-sat interrupt watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def milp_method(model, options: SolveOptions, start: dict | None, set_start, decode,
                reported: Reported = WHOLE):
    """The common MILP method: warm start from a plan, solve, decode the incumbent into a plan.

    set_start(model, plan) writes a plan into the variables; decode(model) reads one back. If HiGHS
    ends without a solution of its own, the start plan is returned (the runner evaluates it).
    reported: how the model's objective reads as the reported one (progress lines).
    """
    if start is not None:
        set_start(model, start)
        options.incumbent(start)
    out = solve_pyomo(model, options, warm_start=start is not None, reported=reported)
    if out.status == "infeasible":
        return MethodResult(None, "infeasible", None, out.solver, out.message)
    plan = decode(model) if out.has_solution else start
    return MethodResult(plan, out.status if plan is not None else "unknown", out.bound, out.solver, out.message)


# --- other MILP solvers (pyomo's SolverFactory) -------------------------------------------------------

# each solver's name for a time limit in seconds (pyomo passes options through to the solver)
TIME_LIMIT_OPTION = {"gurobi": "TimeLimit", "gurobi_direct": "TimeLimit", "gurobi_persistent": "TimeLimit",
                     "cplex": "timelimit", "cplex_direct": "timelimit", "cbc": "sec", "glpk": "tmlim",
                     "scip": "limits/time", "xpress": "maxtime", "xpress_direct": "maxtime"}


def pyomo_solver(name: str):
    """pyomo's solver named `name`, or InstanceError (exit 2) when pyomo does not know it or it is
    not installed on this machine."""
    import pyomo.environ  # noqa: F401  (registers the solver plugins)
    from pyomo.opt import SolverFactory

    factory_log = logging.getLogger("pyomo.opt")
    previous = factory_log.level
    factory_log.setLevel(logging.CRITICAL)     # an unknown name is our message, not pyomo's
    try:
        solver = SolverFactory(name)
        available = solver is not None and bool(solver.available(exception_flag=False))
    except Exception:
        available = False
    finally:
        factory_log.setLevel(previous)
    if not available:
        raise InstanceError(f"MILP solver {name!r} is not installed or pyomo does not know it "
                            f"(HiGHS, the default, is: --solver highs)", "--solver")
    return solver


def solve_pyomo_with(name: str, model, options: SolveOptions, warm_start: bool = False,
                     time_limit: float | None = None) -> SolverOutcome:
    """Solve a pyomo model with another MILP solver through pyomo's SolverFactory: the run's time
    left as the solver's time limit, its proven bound from the results, the incumbent loaded."""
    import pyomo.environ as pyo  # lazy: slow import (docs/architecture.md)
    from pyomo.opt import SolverStatus
    from pyomo.opt import TerminationCondition as TC

    solver = pyomo_solver(name)
    label = pyomo_label(name)
    if options.stopped():
        return not_started(options, label)
    limit = time_left(options, time_limit)
    if limit is not None and name in TIME_LIMIT_OPTION:
        solver.options[TIME_LIMIT_OPTION[name]] = max(1, math.ceil(limit)) if name in ("cbc", "glpk") else limit
    kwargs = {"load_solutions": False, "tee": options.verbose}
    if warm_start and getattr(solver, "warm_start_capable", lambda: False)():
        kwargs["warmstart"] = True
    with contextlib.redirect_stdout(SOLVER_LOG or sys.stderr):
        results = solver.solve(model, **kwargs)
    tc = results.solver.termination_condition
    has_solution = len(results.solution) > 0 and tc != TC.infeasible
    if has_solution:
        model.solutions.load_from(results)
    bound = getattr(results.problem, "lower_bound", None)
    bound = float(bound) if bound is not None and math.isfinite(float(bound)) else None
    if tc == TC.optimal and results.solver.status == SolverStatus.ok:
        value = float(pyo.value(next(model.component_data_objects(pyo.Objective, active=True))))
        return SolverOutcome("optimal", bound if bound is not None else value, has_solution, label)
    if tc in (TC.infeasible, TC.infeasibleOrUnbounded):
        return SolverOutcome("infeasible", None, False, label, f"{name} proved the model infeasible")
    return SolverOutcome("feasible" if has_solution else "unknown", bound, has_solution, label, f"{name} stopped: {tc}")


# --- writing models instead of solving them (`wafopt export`) -------------------------------------------

@dataclass
class ModelExport:
    """Where `wafopt export` writes the models a method builds: the first to `path`, any further one
    (another tile shape, a second phase) beside it as <stem>.2<suffix>, ... Each solve call writes
    its model and returns `unknown`, so the method goes on to build the next."""

    path: str
    format: str                 # mps | lp (pyomo models) or pb (CP-SAT's CpModelProto, binary)
    written: list = field(default_factory=list)

    def _next_path(self) -> str:
        target = Path(self.path)
        if self.written:
            target = target.with_name(f"{target.stem}.{len(self.written) + 1}{target.suffix}")
        self.written.append(str(target))
        return str(target)

    def write_pyomo(self, model) -> SolverOutcome:
        if self.format not in ("mps", "lp"):
            raise InstanceError(f"a MILP model is written as mps or lp, not {self.format}", "--format")
        from pyomo.opt import ProblemFormat  # lazy: slow import (docs/architecture.md)

        kind = {"mps": ProblemFormat.mps, "lp": ProblemFormat.cpxlp}[self.format]   # pyomo's name for LP
        model.write(self._next_path(), format=kind, io_options={"symbolic_solver_labels": True})
        return SolverOutcome("unknown", None, False, f"pyomo {self.format} writer", "model written, not solved")

    def write_cpsat(self, model) -> SolverOutcome:
        if self.format != "pb":
            raise InstanceError(f"a CP-SAT model is written as pb (its CpModelProto), not {self.format}",
                                "--format")
        path = self._next_path()
        if not model.ExportToFile(path):   # binary CpModelProto (a .txt name would give text format)
            raise InstanceError("cannot write the CP-SAT model", path)
        return SolverOutcome("unknown", None, False, "cp-sat model proto", "model written, not solved")
