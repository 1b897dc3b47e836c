"""What the commands share: the Command base, the solve options, Ctrl-C around a run, exit codes."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading

from wafopt.api import (
    EXIT_INTERRUPTED,
    EXIT_NO_PLAN,
    EXIT_OK,
    PROBLEMS,
    STARTUP_SIGINTS,
    InstanceError,
    Result,
    methods,
    options,
    run,
    runs_without_limit,
    save,
)
from wafopt.api.solving import default_workers
from wafopt.present.progress import console_progress


class Command:
    name = ""
    help = ""

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        pass

    def run(self, args) -> int:
        raise NotImplementedError


def stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# the API's argument -> the flag that sets it: messages name what the user typed
FLAGS = {"time_limit": "--time-limit", "seed": "--seed", "workers": "--workers", "elite_share": "--elite-share",
         "solver": "--solver", "scheduler": "--scheduler", "warm_start": "--warm-start"}


def solve_options(args):
    """The checked solve options of the flags a command has (the others at their defaults)."""
    workers = getattr(args, "workers", 1)
    try:
        return options(args.time_limit, args.seed, None, args.quiet, getattr(args, "verbose", False),
                       workers=default_workers(workers),
                       solver=getattr(args, "solver", None) or "highs",
                       elite_share=getattr(args, "elite_share", 0.5), scheduler=getattr(args, "scheduler", None))
    except InstanceError as exc:
        if exc.where not in FLAGS:
            raise
        raise InstanceError(exc.reason, FLAGS[exc.where]) from None


def add_solve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problem", help="solve this sub-problem derived from a scenario instance "
                   "(placement, recompute, mem_pair, tatp, routing)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds per method (default: none for exact methods, 10 s for the GA and local search)")
    p.add_argument("--seed", type=int, default=0, help="seed of every randomized method (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    p.add_argument("--verbose", action="store_true", help="solver logs on stderr")
    p.add_argument("--solver", default="highs", metavar="NAME",
                   help="MILP solver of the pyomo models: highs (default) or any solver pyomo's SolverFactory "
                        "finds installed (gurobi, cplex, scip, cbc, ...)")


def note_no_time_limit(method_names: list[str], args) -> None:
    """Once per command: the exact methods about to run without any time limit, and the flag that sets one."""
    unlimited = [m for m in dict.fromkeys(method_names) if runs_without_limit(m, args.time_limit)]
    if unlimited and not args.quiet:
        stderr(f"wafopt: note: no time limit is set: {', '.join(unlimited)} "
               f"{'runs' if len(unlimited) == 1 else 'run'} until the result is proven, which can take hours; "
               "set a limit with --time-limit S")


def methods_help() -> str:
    """'problem: method, method; ...' from the problem registry."""
    return "; ".join(f"{p}: {', '.join(methods(p))}" for p in PROBLEMS)


@contextlib.contextmanager
def ctrl_c_noted(options):
    """While a run goes on, the runner turns Ctrl-C into a stop. Around it (before it installs its
    handler; after it returned, e.g. the second of two quick Ctrl-Cs) Ctrl-C stops the run too but
    never loses its plan: it is noted (the list yielded) until the solution is written."""
    noted: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def note(*_):
        noted.append(True)
        options.interrupted = True

    previous = signal.signal(signal.SIGINT, note)
    if STARTUP_SIGINTS:   # a Ctrl-C while the libraries loaded that an extension swallowed
        note()
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


NOTHING_WRITTEN = "interrupted before any plan was found; nothing written"


def run_and_save(loaded, method: str, options, write: bool = True, out: str | None = None,
                 announce: str | None = None):
    """Show `announce` on stderr, run a method with its progress on stderr, then write its solution
    (`write`), Ctrl-C noted from the announcement until it is written. A run Ctrl-C stopped before
    it had any plan writes nothing (the note says so). Returns (result, path written or None, note,
    interrupted)."""
    path, note = None, None
    with ctrl_c_noted(options) as late_ctrl_c:
        if announce:
            stderr(announce)   # only now: a Ctrl-C from the moment it shows stops the run, never the command
        with console_progress(options):
            result: Result = run(loaded, method, options)
        if write and result.interrupted and (result.plan is None or result.status not in ("optimal", "feasible")):
            note = NOTHING_WRITTEN   # no plan yet, or only a point the evaluator rejects
        elif write:
            path, note = save(result, loaded, out)
    return result, path, note, bool(late_ctrl_c) or result.interrupted


def exit_code(result) -> int:
    """0 a plan (optimal or feasible); 3 no plan exists or none was found; 130 interrupted."""
    if result.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if result.status in ("optimal", "feasible") else EXIT_NO_PLAN
