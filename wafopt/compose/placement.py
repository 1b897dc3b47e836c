"""The exact placement methods composed with the local search that gives them a start.

Apart from the other problems' (wafopt.compose.methods), so that a placement command loads no
other problem. Formulations (wafopt.models) and heuristics (wafopt.heuristics) never import each
other: the wrappers here run the heuristic on a share of the run's budget and hand its plan to the
model as data (`options.warm_start`), or pass the local search in (PlacementSearch), which the
exact methods call per tile shape. The table in wafopt.compose (METHODS) names them.
"""

from __future__ import annotations

import time

import numpy as np

from wafopt.compose.starts import start_seconds, warm_started
from wafopt.core.budget import SolveOptions
from wafopt.core.registry import CP_SAT, HIGHS, PYOMO_HIGHS, loads
from wafopt.core.result import MethodResult
from wafopt.heuristics.placement import (
    descend,
    descents,
    ga,
    local,
    walk_start,
)
from wafopt.models import placement as placement_model
from wafopt.models.placement_bnb import bnb
from wafopt.problems.placement import KERNELS

PLACEMENT_START_SHARE = 0.1  # placement: per tile shape, share of the limit for the local-search start
PLACEMENT_START_S = 2.0      # ... and at most this
PLACEMENT_POLISH_S = 2.0     # placement: local search on the full objective after a base-objective model
PLACEMENT_BNB_START_S = 0.5  # placement bnb: at most this for the local search's first incumbent,
PLACEMENT_BNB_PATIENCE = 10  # ... which ends after this many fruitless kicks (the search's own completions
                             # and descents improve on it: pl-sparse-24 gets its optimum in 0.1 s, not 0.46 s)
PLACEMENT_BNB_GA_S = 5.0     # ... unless its start share (a tenth of the limit) is this long on an instance
PLACEMENT_BNB_GA_STAGES = 28  # of this many stages (where the local search falls short on QAPLIB): the GA


# --- placement: iterated local search starts each tile shape and polishes base-objective plans ----

class PlacementSearch:
    """The local search the exact placement methods call per tile shape (models.placement.LocalSearch)."""
    def start(self, fit, perm: np.ndarray, options: SolveOptions) -> np.ndarray:
        """Iterated descent from the best pipeline walk (walk_start) and from `perm`; the better."""
        share = min(PLACEMENT_START_S, start_seconds(options, PLACEMENT_START_SHARE, PLACEMENT_START_S))
        deadline = time.monotonic() + options.sub(share).search_seconds()
        starts = walk_start(fit, deadline, options.stopped) + [perm]
        return descents(fit, starts, np.random.default_rng(options.seed), deadline, 50, stop=options.stopped)[0]

    def polish(self, fit, perm: np.ndarray, options: SolveOptions) -> np.ndarray:
        """Descent on the full objective from a base-objective plan."""
        seconds = options.sub(PLACEMENT_POLISH_S).search_seconds()
        return descend(fit, perm, time.monotonic() + seconds, stop=options.stopped)[0]


@loads(*PYOMO_HIGHS, *KERNELS)
def placement_milp(inst, options: SolveOptions) -> MethodResult:
    return placement_model.milp(inst, options, PlacementSearch())


@loads(*CP_SAT, *KERNELS)
def placement_cpsat(inst, options: SolveOptions) -> MethodResult:
    return placement_model.cpsat(inst, options, PlacementSearch())


@loads(*HIGHS, *KERNELS)
def placement_rlt1(inst, options: SolveOptions) -> MethodResult:
    return placement_model.rlt1(inst, options, PlacementSearch())


@loads(*KERNELS)
def placement_bnb(inst, options: SolveOptions) -> MethodResult:
    """Branch and bound, with the local search's plan (at most PLACEMENT_BNB_START_S, with
    PLACEMENT_BNB_PATIENCE) as its first incumbent, or on large instances with a long limit the
    GA's (a tenth of the limit): on short runs the GA would spend its share importing pymoo and
    ramping up a population; on long ones it finds the plans the local search misses (nug30: 6124
    against 6262)."""
    share = start_seconds(options, PLACEMENT_START_SHARE, PLACEMENT_START_S)
    if options.time_limit is not None and share >= PLACEMENT_BNB_GA_S and inst.stages >= PLACEMENT_BNB_GA_STAGES:
        return bnb(inst, warm_started(options, lambda sub: ga(inst, sub).plan, share))
    return bnb(inst, warm_started(options, lambda sub: local(inst, sub, PLACEMENT_BNB_PATIENCE).plan,
                                  min(PLACEMENT_BNB_START_S, share)))
