"""Progress lines in the units and meaning of the objective a run reports.

A solver sees its model's objective: CP-SAT an integer scaled from the data, less any constant
the model leaves out; a placement model the base objective without the routing penalty; a
column model a relaxation. `Reported` says how a model's objective reads as the reported one
(`(value + offset) / scale`), and whether its incumbent is a plan's reported objective and its
bound a bound of it. `RunProgress`, one per run's budget, keeps the least incumbent and the
greatest bound seen, so a line never shows an incumbent that rises or a bound that falls.

A search in parts (one model per tile shape) declares its parts with the bound each has before
its model runs (`expect_parts`): a part's bound bounds only its own plans, so the run's bound is
the least over the parts.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass
from typing import Hashable

from wafopt.core.budget import Budget, SolveOptions


@dataclass(frozen=True)
class Reported:
    """How a model's objective value reads as the run's reported objective."""

    scale: float = 1.0       # model value = (reported - offset') x scale: divide to report
    offset: float = 0.0      # model units left out of the model's objective (a constant term)
    incumbent: bool = True   # the model's incumbent value is its plan's reported objective
    bound: bool = True       # the model's bound is a bound of the reported objective (of its part)
    part: Hashable = None    # the part of the search the bound covers (None: the whole run)

    def value(self, model_value: float | None) -> float | None:
        if model_value is None or not math.isfinite(model_value):
            return None
        return (model_value + self.offset) / self.scale


SILENT = Reported(incumbent=False, bound=False)   # an auxiliary model (another objective): no lines
WHOLE = Reported()                                # the model's objective is the reported one


class RunProgress:
    """The least incumbent and the greatest bound a run has reported (reported units)."""

    def __init__(self):
        self.incumbent: float | None = None
        self.whole_bound: float | None = None    # a bound of every plan
        self.parts: dict = {}                     # part -> greatest bound of its plans
        self._lock = threading.Lock()             # solver callbacks report from their own threads

    def bound(self) -> float | None:
        """The run's bound: the greatest bound of every plan, and the least over declared parts."""
        over_parts = min(self.parts.values()) if self.parts else None
        known = [b for b in (self.whole_bound, over_parts) if b is not None]
        return max(known) if known else None

    def update(self, incumbent: float | None = None, bound: float | None = None, part: Hashable = None) -> None:
        with self._lock:
            if incumbent is not None and (self.incumbent is None or incumbent < self.incumbent):
                self.incumbent = incumbent
            if bound is None:
                return
            if part is None:
                self.whole_bound = bound if self.whole_bound is None else max(self.whole_bound, bound)
            elif part in self.parts:   # undeclared parts bound nothing of the run
                self.parts[part] = max(self.parts[part], bound)

    def state(self) -> tuple:
        return self.incumbent, self.whole_bound, dict(self.parts)

    def merge(self, state: tuple) -> None:
        """What a solve in a child process reported (its copy of this object)."""
        incumbent, whole, parts = state
        self.update(incumbent, whole)
        for part, bound in parts.items():
            self.update(None, bound, part)


_RUNS: weakref.WeakKeyDictionary[Budget, RunProgress] = weakref.WeakKeyDictionary()


def run_progress(options: SolveOptions) -> RunProgress:
    """The progress of the run `options` belongs to (one per budget; nested `sub` budgets are
    runs of their own, quiet by default)."""
    budget = options.budget_
    if budget not in _RUNS:
        _RUNS[budget] = RunProgress()
    return _RUNS[budget]


def start_run(options: SolveOptions) -> None:
    """Forget what an earlier run on the same options reported."""
    _RUNS[options.budget_] = RunProgress()


def expect_parts(options: SolveOptions, bounds: dict) -> None:
    """Declare the parts of a search with the bound each has before its model runs."""
    progress = run_progress(options)
    for part, bound in bounds.items():
        progress.parts[part] = max(progress.parts.get(part, -math.inf), float(bound))


def report_model(options: SolveOptions, label: str, incumbent: float | None, bound: float | None,
                 reported: Reported = WHOLE, force: bool = False, extra: str = "") -> None:
    """A progress line from a model's incumbent and bound (model units, `reported` maps them)."""
    if reported is SILENT:
        return
    report(options, label, reported.value(incumbent) if reported.incumbent else None,
           reported.value(bound) if reported.bound else None, reported.part, force, extra)


def report(options: SolveOptions, label: str, incumbent: float | None = None, bound: float | None = None,
           part: Hashable = None, force: bool = False, extra: str = "") -> None:
    """Record an incumbent and a bound (reported units) and show the run's best of each:
    `label: incumbent X, bound Y, gap Z[, extra]`; '-' where none is known."""
    if options.quiet:
        return
    progress = run_progress(options)
    progress.update(incumbent, bound, part)
    inc, low = progress.incumbent, progress.bound()
    if inc is not None and low is not None:
        low = min(low, inc)   # float noise of a converted bound never shows above the incumbent
    gap = "-"
    if inc is not None and low is not None:
        gap = f"{100 * max(0.0, inc - low) / max(abs(inc), 1e-300):.3g}%" if inc else "0%"
    options.progress(f"{label}: incumbent {'-' if inc is None else f'{inc:.8g}'}, "
                     f"bound {'-' if low is None else f'{low:.8g}'}, gap {gap}" + (f", {extra}" if extra else ""),
                     force=force)
