"""What a method receives: SolveOptions (seed, warm start, output) with its Budget (deadline,
interrupt, progress reporter).

Every method is a function `solve(instance, options) -> MethodResult`. The budget is absolute: a
deadline on the monotonic clock set once when the run starts, so a nested solve asks
`options.remaining()` and never gets more than what is left of the whole run. An interrupt
(Ctrl-C) sets one event shared by every nested solve; long loops poll `options.stopped()`, and
solver helpers stop their solver from it (wafopt.solvers.backends). A step worth nothing
half-done (building a solver model) runs as `options.abandonable()`: Ctrl-C or the deadline
raise Stopped inside it at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable

HEURISTIC_BUDGET_S = 10.0  # time budget of searching heuristics (GA, local search) without --time-limit


def stderr_copy():
    """The real stderr, duplicated (None without one, e.g. under some test runners)."""
    try:
        return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
    except (OSError, ValueError, AttributeError):
        return None


# Progress lines go to a copy of stderr made at import: pyomo's solver interfaces capture file
# descriptors 1 and 2 (and that of sys.stdout) while they solve, which would swallow them.
PROGRESS_STREAM = stderr_copy()


def never() -> bool:
    """The stop test of a search that only its own deadline ends (search loops take `stop`, a
    method passes `options.stopped` so Ctrl-C and the run's deadline end them too)."""
    return False


class Stopped(BaseException):
    """Raised inside `options.abandonable()` when Ctrl-C or the deadline comes. A BaseException,
    like KeyboardInterrupt, so that no `except Exception` of library code swallows it."""


_abandonable_steps = 0   # abandonable steps running on the main thread (the only one signals reach)


def in_abandonable_step() -> bool:
    """Whether the main thread runs an abandonable step (the run's Ctrl-C handler asks)."""
    return _abandonable_steps > 0


def stop_abandonable_step(frame) -> None:
    """From a signal handler: raise Stopped in the abandonable step the main thread runs (`frame`
    is where the handler interrupted it), unless it is importing a module, which a half-run import
    would leave broken for the rest of the process: then try again shortly."""
    if not in_abandonable_step():
        return
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        frame = frame.f_back
    raise Stopped


def _deadline_passed(signum, frame):
    stop_abandonable_step(frame)


def progress_line(text: str) -> None:
    print(text, file=PROGRESS_STREAM or sys.stderr, flush=True)


class ProgressLines:
    """Where progress lines go, at most one a second. A line held back by that rule is kept until
    the next one or `release_held` (the runner's heartbeat), so the latest state is never lost.
    Shared by a run and every solve nested in it; solver callbacks report from their own threads."""

    def __init__(self, reporter: Callable[[str], None] | None = None):
        self.reporter = reporter or progress_line
        self.every = 1.0                  # seconds between lines
        self.last_shown = 0.0
        self.held: str | None = None
        self._lock = threading.Lock()

    def __call__(self, text: str, force: bool = False) -> None:
        # a bounded wait: a process forked while another thread held the lock must not hang on it
        if not self._lock.acquire(timeout=0.2):
            return
        try:
            now = time.monotonic()
            if not force and now - self.last_shown < self.every:
                self.held = text
                return
            self.last_shown, self.held = now, None
            self.reporter(text)
        finally:
            self._lock.release()

    def release_held(self) -> None:
        if self.held is not None and time.monotonic() - self.last_shown >= self.every:
            self(self.held, force=True)

    def forward_to(self, fd: int) -> None:
        """In a child process: send every line, unthrottled, to the parent, which shows it."""
        self.reporter = lambda text: os.write(fd, text.replace("\n", " ").encode() + b"\n")
        self.every, self._lock = 0.0, threading.Lock()   # a fresh lock: the fork copied its state


class Budget:
    """Deadline + interrupt + progress lines, shared by a run and every solve nested in it."""

    def __init__(self, time_limit: float | None = None):
        self.time_limit = time_limit
        self.deadline: float | None = None if time_limit is None else time.monotonic() + time_limit
        self.interrupt = threading.Event()
        self.lines = ProgressLines()
        self.incumbent: Any = None          # best plan reported so far (kept for Ctrl-C)
        self.incumbent_bound: Any = None    # its bound (float or core.result.Bound)

    def remaining(self) -> float | None:
        """Seconds left before the deadline (0 when interrupted), or None without a limit."""
        if self.interrupt.is_set():
            return 0.0
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0.0


@dataclass
class SolveOptions:
    time_limit: float | None = None   # seconds for the whole run; every method honours it
    seed: int = 0                     # every randomized method is seeded from it
    quiet: bool = False               # no progress output on stderr
    verbose: bool = False             # solver logs on stderr
    warm_start: dict | None = None    # a plan to start from (data, never a method's state)
    workers: int = 1                  # local processes a method may spread independent work over
    scheduler: str | None = None      # address of an existing Dask cluster to use instead
    solver: str = "highs"             # MILP solver of the pyomo models (any name pyomo's SolverFactory knows)
    elite_share: float = 0.5          # plan: the share of elites each GA generation keeps (WATOS omega)
    export: Any = None                # wafopt.solvers.backends.ModelExport: write each model, do not solve
    budget_: Budget | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.budget_ is None:
            self.budget_ = Budget(self.time_limit)

    # ---- budget ----
    def start(self) -> "SolveOptions":
        """Start the clock: the deadline is `time_limit` from now (the runner calls this)."""
        self.budget_.time_limit = self.time_limit
        self.budget_.deadline = None if self.time_limit is None else time.monotonic() + self.time_limit
        return self

    @property
    def interrupted(self) -> bool:
        return self.budget_.interrupt.is_set()

    @interrupted.setter
    def interrupted(self, value: bool) -> None:
        if value:
            self.budget_.interrupt.set()

    def stopped(self) -> bool:
        """True once interrupted or past the deadline: long loops stop and return their best."""
        return self.budget_.expired()

    def remaining(self) -> float | None:
        """Seconds left of the run's budget (None without a time limit)."""
        return self.budget_.remaining()

    @contextmanager
    def abandonable(self):
        """A step that is dropped part-way when the run stops (building a solver model): on the
        main thread, Ctrl-C (through the run's handler) and the deadline (a SIGALRM timer armed for
        the step) raise Stopped inside it; the caller catches Stopped and goes on without the step.
        Elsewhere the step just runs. Raises Stopped at once when the run is already stopped."""
        global _abandonable_steps
        if self.stopped():
            raise Stopped
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        left = self.remaining()
        entered = time.monotonic()
        previous_handler = signal.signal(signal.SIGALRM, _deadline_passed)
        previous_alarm, _ = signal.setitimer(signal.ITIMER_REAL, 0)
        delays = [d for d in (left, previous_alarm) if d]   # None: no deadline; 0: no timer
        signal.setitimer(signal.ITIMER_REAL, max(1e-3, min(delays)) if delays else 0)
        _abandonable_steps += 1
        try:
            yield
        finally:
            _abandonable_steps -= 1
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous_handler is None else previous_handler)
            if previous_alarm:  # an enclosing step's (or another user's) timer goes on
                signal.setitimer(signal.ITIMER_REAL, max(1e-3, previous_alarm - (time.monotonic() - entered)))

    def search_seconds(self, default: float = HEURISTIC_BUDGET_S) -> float:
        """Seconds a searching heuristic may take: what is left of the limit, else `default`."""
        left = self.remaining()
        return default if left is None else left

    def sub(self, seconds: float | None = None, quiet: bool = True, warm_start: dict | None = None
            ) -> "SolveOptions":
        """Options for a nested solve: the same interrupt and seed, a deadline no later than the
        run's (and `seconds` from now when given), no warm start unless passed."""
        budget = Budget.__new__(Budget)
        budget.__dict__.update(self.budget_.__dict__)  # shares the interrupt event and progress lines
        if seconds is not None:
            mine = time.monotonic() + max(0.0, seconds)
            budget.deadline = mine if budget.deadline is None else min(budget.deadline, mine)
        budget.time_limit = None if budget.deadline is None else max(0.0, budget.deadline - time.monotonic())
        return replace(self, time_limit=budget.time_limit, quiet=quiet or self.quiet,
                       warm_start=warm_start, budget_=budget)

    # ---- incumbent and progress ----
    def incumbent(self, plan: dict, bound=None) -> None:
        """Methods call this with every improved plan, so an interrupt loses nothing."""
        self.budget_.incumbent = plan
        if bound is not None:
            self.budget_.incumbent_bound = bound

    def progress(self, text: str, force: bool = False) -> None:
        """A progress line on stderr (at most one a second, the latest never lost) unless quiet."""
        if not self.quiet:
            self.budget_.lines(f"  .. {text}", force)
