"""Running one method on one instance: solve, evaluate the plan, state the status honestly."""

from __future__ import annotations

import threading
import time

from wafopt.errors import InstanceError
from wafopt.evaluate import evaluate
from wafopt.instance import Loaded, resolve
from wafopt.solution import Solution
from wafopt.solve import MethodResult, SolveOptions, progress_line, relative_gap

OPTIMALITY_TOLERANCE = 1e-6  # relative gap under which a proven bound certifies optimality


def method_function(loaded: Loaded, method: str):
    methods = loaded.methods
    if method not in methods:
        raise InstanceError(f"unknown method {method!r} for problem {loaded.problem} "
                            f"(available: {', '.join(methods)})", "--method")
    return resolve(methods[method])


def run(loaded: Loaded, method: str, options: SolveOptions) -> Solution:
    """Run `method`; on Ctrl-C keep the best plan reported so far (status feasible, bound kept)."""
    fn = method_function(loaded, method)
    started = time.perf_counter()
    stop = threading.Event()
    if not options.quiet:
        threading.Thread(target=_heartbeat, args=(method, options, stop), daemon=True).start()
    try:
        result: MethodResult = fn(loaded.instance, options)
    except KeyboardInterrupt:
        options.interrupted = True
        result = MethodResult(options._incumbent, "feasible" if options._incumbent else "unknown",
                              options._incumbent_bound, "interrupted")
    finally:
        stop.set()
    elapsed = time.perf_counter() - started
    solution = finish(loaded, method, result, elapsed, options)
    if options.interrupted:  # set here, or by a solver that stopped on Ctrl-C itself
        solution.stats["interrupted"] = True
        solution.message = _note(solution.message, "interrupted by the user (Ctrl-C): best plan found so far")
    return solution


def _note(message: str, text: str) -> str:
    return f"{message}; {text}" if message else text


def _heartbeat(method: str, options: SolveOptions, stop: threading.Event, every: float = 15.0) -> None:
    """A line on stderr every `every` seconds of a long run, whatever the method reports itself."""
    started = time.monotonic()
    while not stop.wait(every):
        limit = f" of {options.time_limit:g} s" if options.time_limit else ""
        have = "has a plan" if options._incumbent is not None else "no plan yet"
        progress_line(f"  .. {method}: {time.monotonic() - started:.0f} s{limit} elapsed, {have}")


def finish(loaded: Loaded, method: str, result: MethodResult, elapsed: float,
           options: SolveOptions) -> Solution:
    """Evaluate the plan with the shared evaluator and derive status, objective and gap."""
    status, message = result.status, result.message
    if result.plan is not None:
        ev = evaluate(loaded.problem, loaded.instance, result.plan)
    else:
        from wafopt.evaluate import Evaluation
        ev = Evaluation(None, False, ["no plan"] if status != "infeasible" else [result.message])
    objective = ev.objective if ev.feasible else None
    bound = result.bound
    if status == "infeasible":
        objective, bound = None, None
    elif result.plan is None:
        status = "unknown"
    elif not ev.feasible:
        status = "unknown"
        message = _note(message, "the evaluator rejected the plan: " + "; ".join(ev.violations[:3]))
    else:
        gap = relative_gap(objective, bound)
        if gap is not None and gap < -OPTIMALITY_TOLERANCE:
            status, bound = "feasible", None  # a "bound" above a feasible plan's objective proves nothing
            message = _note(message, f"the reported bound {result.bound} exceeds the evaluated objective "
                                     f"{objective}: discarded")
        elif status == "optimal" and (gap is None or gap > OPTIMALITY_TOLERANCE):
            status = "feasible"
            message = _note(message, "claimed optimal but the evaluated objective exceeds the proven bound")
        elif status in ("unknown", "feasible"):
            status = "feasible"
            if gap == 0.0:  # a proven bound equal to the evaluated objective is a proof of optimality
                status = "optimal"
                message = _note(message, "optimal: the proven bound equals the objective")
    gap = relative_gap(objective, bound) if status in ("optimal", "feasible") else None
    return Solution(
        problem=loaded.problem, instance=loaded.path, instance_sha256=loaded.sha256, method=method,
        solver=result.solver, status=status, objective=objective, bound=bound, gap=gap,
        time_s=round(elapsed, 4), seed=options.seed, plan=result.plan, evaluation=ev.to_dict(),
        message=message, time_limit=options.time_limit, derived_from=loaded.derived_from,
        known_optimum=loaded.known_optimum.value if loaded.known_optimum else None, stats=result.stats)
