"""The budget of a heuristic start and the options that carry its plan, shared by the composed
methods (wafopt.compose.methods, wafopt.compose.placement)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from wafopt.core.budget import SolveOptions

START_SHARE = 0.2            # share of the time limit a heuristic start may use
START_S = 2.0                # its budget without a time limit


def start_seconds(options: SolveOptions, share: float = START_SHARE, default: float = START_S) -> float:
    """The budget of a heuristic start: a share of the time limit, else `default` seconds."""
    return default if options.time_limit is None else share * options.time_limit


def warm_started(options: SolveOptions, start: Callable[[SolveOptions], dict | None],
                 seconds: float) -> SolveOptions:
    """`options` with the plan of `start(sub_options)` as warm start, unless one is given."""
    if options.warm_start is not None:
        return options
    plan = start(options.sub(seconds))
    return options if plan is None else replace(options, warm_start=plan)
