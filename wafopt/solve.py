"""What a method receives (SolveOptions) and returns (MethodResult).

Every method is a function `solve(instance, options) -> MethodResult`. It returns a plan and
what it can prove (status, bound); the runner (wafopt.runner) recomputes the objective with
the shared evaluator and never reports solver variables.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("optimal", "feasible", "infeasible", "unknown")
HEURISTIC_BUDGET_S = 10.0  # time budget of searching heuristics (GA, local search) without --time-limit


def _open_progress_stream():
    """The real stderr, duplicated at import: pyomo's HiGHS interface captures file descriptors 1
    and 2 while it solves, which would swallow progress lines written to sys.stderr."""
    try:
        return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
    except (OSError, ValueError, AttributeError):  # no real stderr (e.g. under some test runners)
        return None


PROGRESS_STREAM = _open_progress_stream()


def progress_line(text: str) -> None:
    print(text, file=PROGRESS_STREAM or sys.stderr, flush=True)


@dataclass
class MethodResult:
    plan: dict | None
    status: str                  # optimal only when proven with zero gap; see STATUSES
    bound: float | None = None   # proven lower bound on the objective (evaluator units)
    solver: str = "heuristic"    # e.g. "highs 1.14.0", "cp-sat 9.15.6755", "pymoo 0.6.2"
    message: str = ""
    stats: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


@dataclass
class SolveOptions:
    time_limit: float | None = None   # seconds; every method honours it
    seed: int = 0                     # every randomized method is seeded from it
    quiet: bool = False               # no progress output on stderr
    verbose: bool = False             # solver logs on stderr
    warm_start: dict | None = None    # a plan to start exact methods from
    interrupted: bool = False         # set when a solver stopped on Ctrl-C
    _incumbent: Any = None            # best plan reported so far (kept for Ctrl-C)
    _incumbent_bound: float | None = None
    _last_log: float = 0.0

    def incumbent(self, plan: dict, bound: float | None = None) -> None:
        """Methods call this with every improved plan, so an interrupt loses nothing."""
        self._incumbent = plan
        if bound is not None:
            self._incumbent_bound = bound

    def progress(self, text: str, force: bool = False) -> None:
        """A throttled progress line on stderr (at most one per second) unless quiet."""
        now = time.monotonic()
        if self.quiet or (not force and now - self._last_log < 1.0):
            return
        self._last_log = now
        progress_line(f"  .. {text}")

    def budget(self, default: float = HEURISTIC_BUDGET_S) -> float:
        """Seconds a searching heuristic may take: the time limit, else `default`."""
        return self.time_limit if self.time_limit is not None else default

    def remaining(self, started: float) -> float | None:
        """Seconds left of the time limit since `started` (time.monotonic()), or None."""
        if self.time_limit is None:
            return None
        return max(0.0, self.time_limit - (time.monotonic() - started))


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """(objective - bound) / |objective|; 0 when both are 0; None without a bound."""
    if objective is None or bound is None:
        return None
    diff = objective - bound
    if abs(diff) <= 1e-9 * max(1.0, abs(objective)):
        return 0.0
    if objective == 0:
        return None
    return diff / abs(objective)
