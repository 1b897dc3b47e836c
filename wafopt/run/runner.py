"""Running one method on one instance: solve, evaluate the plan, settle the status.

The run owns the budget: it starts the clock, turns Ctrl-C into the shared interrupt event (a
second Ctrl-C raises at once), evaluates the plan with the shared evaluator, adds the certified
bound `certify` derives from the instance where methods give none of their own, and settles the
status with the one rule of wafopt.core.numeric.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from dataclasses import replace

from wafopt.core.budget import SolveOptions, Stopped, stop_abandonable_step
from wafopt.core.numeric import relative_gap, settle_status
from wafopt.core.registry import References, load_libraries
from wafopt.core.result import CERTIFICATE, Bound, MethodResult
from wafopt.core.solution import Solution
from wafopt.problems import Evaluation, Loaded, evaluate
from wafopt.run.methods import CLUSTER_METHODS, method_function
from wafopt.solvers.reported import start_run

# problem -> the cheap certified bound `certify` derives from the instance alone, derived at solve
# time too: a plan method proves no bound of its own (compute-floor on a fixed layout); imported on first use
SOLVE_TIME_BOUNDS = References({"plan": "wafopt.planner.certificate:bound"})


def not_applicable(loaded: Loaded, method: str) -> str | None:
    """Why `method` does not apply to this instance (a wafer method on a cluster scenario), or None."""
    system = getattr(loaded.instance, "wafer", None)
    if loaded.problem == "plan" and getattr(system, "system", "wafer") == "cluster" and method not in CLUSTER_METHODS:
        return (f"{method} does not apply to a cluster scenario: its placement, offloading and routing model a "
                f"die mesh; use --method {' or '.join(CLUSTER_METHODS)}")
    return None


def run(loaded: Loaded, method: str, options: SolveOptions) -> Solution:
    """Run `method`; on Ctrl-C keep the best plan reported so far (status feasible, bound kept)."""
    fn = method_function(loaded.problem, method)
    why = not_applicable(loaded, method)
    if why:
        return finish(loaded, method, MethodResult(None, "unknown", message=why), 0.0, options)
    load_libraries(fn, loaded.instance)   # before the clock: limits and times count the solve, not the imports
    options.start()
    start_run(options)
    started = time.perf_counter()
    stop = threading.Event()
    if not options.quiet:
        threading.Thread(target=_heartbeat, args=(method, options, stop), daemon=True).start()
    try:
        with _interrupts(options):
            result: MethodResult = fn(loaded.instance, options)
    except KeyboardInterrupt:
        options.interrupted = True
        result = _incumbent_result(options)
    except Stopped:  # an abandonable step the method did not catch itself
        result = _incumbent_result(options)
    finally:
        stop.set()
    if options.interrupted and result.plan is None and options.budget_.incumbent is not None:
        result = _incumbent_result(options, result.bound)   # a bound without a plan holds for it too
    elapsed = time.perf_counter() - started
    solution = finish(loaded, method, result, elapsed, options)
    if options.interrupted:  # set by Ctrl-C here, or by a solver that stopped on it
        solution.stats["interrupted"] = True
        solution.message = _note(solution.message, "interrupted by the user (Ctrl-C): best plan found so far")
    return solution


def _incumbent_result(options: SolveOptions, bound: Bound | None = None) -> MethodResult:
    """The best plan reported so far, with the method's own bound where it returned one (it bounds
    every plan), else the bound reported with the plan."""
    plan = options.budget_.incumbent
    return MethodResult(plan, "feasible" if plan is not None else "unknown",
                        bound if bound is not None else options.budget_.incumbent_bound, "interrupted")


class _interrupts:
    """While a method runs, the first SIGINT sets the shared interrupt event (methods stop and
    return their best plan); a second one raises KeyboardInterrupt at once.

    Python runs signal handlers only between bytecodes of the main thread, which a solver may keep
    in C++ for seconds; so the signal also wakes a watcher thread (signal.set_wakeup_fd) that sets
    the event at once, and the solver helpers stop their solver from it."""

    def __init__(self, options: SolveOptions):
        self.options = options
        self.previous = None
        self.signals = 0
        self.wakeup = None   # (reader, writer, previous wakeup descriptor)

    def _handler(self, signum, frame):
        self.signals += 1
        if self.signals > 1:
            raise KeyboardInterrupt
        self.options.interrupted = True
        stop_abandonable_step(frame)  # e.g. building a model: dropped now (core.budget)

    def _watch(self, reader) -> None:
        with reader:
            while True:
                try:
                    received = reader.recv(64)
                except OSError:
                    return
                if not received:  # the writer was closed: the run is over
                    return
                if signal.SIGINT in received:
                    self.options.interrupted = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handler)
            reader, writer = socket.socketpair()
            writer.setblocking(False)
            previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
            self.wakeup = (reader, writer, previous_fd)
            threading.Thread(target=self._watch, args=(reader,), name="Ctrl-C watcher", daemon=True).start()
        return self

    def __exit__(self, *exc):
        if self.wakeup is not None:
            _, writer, previous_fd = self.wakeup
            signal.set_wakeup_fd(previous_fd)
            writer.close()
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False


def _note(message: str, text: str) -> str:
    return f"{message}; {text}" if message else text


def _heartbeat(method: str, options: SolveOptions, stop: threading.Event, every: float = 15.0) -> None:
    """While a run goes on: a progress line the one-a-second rule held back is shown after its
    second, and after `every` seconds without any line, one saying how long it has run."""
    started, lines = time.monotonic(), options.budget_.lines
    while not stop.wait(0.25):
        lines.release_held()
        if time.monotonic() - max(lines.last_shown, started) >= every:
            limit = f" of {options.time_limit:g} s" if options.time_limit else ""
            have = "has a plan" if options.budget_.incumbent is not None else "no plan yet"
            lines(f"  .. {method}: {time.monotonic() - started:.0f} s{limit} elapsed, {have}", force=True)


def instance_bound(loaded: Loaded) -> Bound | None:
    """The certified bound of SOLVE_TIME_BOUNDS for this instance, or None."""
    derive = SOLVE_TIME_BOUNDS.get(loaded.problem)
    return derive(loaded.instance) if derive is not None else None


def _strongest(*bounds: Bound | None) -> Bound | None:
    """The greatest bound; of equal ones the certificate (certify re-derives it)."""
    known = [b for b in bounds if b is not None]
    return max(known, key=lambda b: (b.value, b.provenance == CERTIFICATE)) if known else None


def finish(loaded: Loaded, method: str, result: MethodResult, elapsed: float,
           options: SolveOptions) -> Solution:
    """Evaluate the plan with the shared evaluator; settle status, objective, bound and gap."""
    message = result.message
    if result.plan is not None:
        ev = evaluate(loaded.problem, loaded.instance, result.plan)
    else:
        ev = Evaluation(None, False, ["no plan"] if result.status != "infeasible" else [result.message])
    if result.plan is not None and not ev.feasible and result.status != "infeasible":
        message = _note(message, "the evaluator rejected the plan: " + "; ".join(ev.violations[:3]))
    objective = ev.objective if ev.feasible else None
    bound = _strongest(result.bound, None if result.status == "infeasible" else instance_bound(loaded))
    status, kept, note = settle_status(result.status, objective, bound.value if bound else None, ev.feasible)
    message = _note(message, note) if note else message
    bound = None if kept is None else replace(bound, value=kept)
    if status == "infeasible":
        objective = None
    gap = relative_gap(objective, bound.value if bound else None) if status in ("optimal", "feasible") else None
    return Solution(
        problem=loaded.problem, instance=loaded.path, instance_sha256=loaded.sha256, method=method,
        solver=result.solver, status=status, objective=objective, bound=bound.value if bound else None,
        bound_provenance=bound.provenance if bound else "none", bound_kind=bound.kind if bound else "",
        certificate=bound.data if bound and bound.data else None, gap=gap,
        time_s=round(elapsed, 4), seed=options.seed, plan=result.plan, evaluation=ev.to_dict(),
        message=message, time_limit=options.time_limit, derived_from=loaded.derived_from,
        known_optimum=loaded.known_optimum.value if loaded.known_optimum else None, stats=result.stats)
