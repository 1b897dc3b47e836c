"""Exact methods composed with the heuristics that give them a start.

Formulations (wafopt.models) and heuristics (wafopt.heuristics) never import each other. Where an
exact method profits from a heuristic, the wrapper here runs the heuristic on a share of the run's
budget (`options.sub`) and hands its plan to the model as data (`options.warm_start`; `replace`
keeps the shared Budget, so incumbents and Ctrl-C still reach the runner), or, where the exact
algorithm calls a heuristic inside its own loop, passes the heuristic in as a function.
The table at the end names them as the methods of their problems.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import Callable

import numpy as np

from wafopt.compose import gcmr
from wafopt.core.budget import SolveOptions
from wafopt.core.registry import CP_SAT, HIGHS, PYOMO_HIGHS, SCIPY, loads
from wafopt.core.result import MethodResult
from wafopt.heuristics.mem_pair import greedy_chunks
from wafopt.heuristics.placement import (
    descend,
    descents,
    ga,
    local,
    walk_start,
)
from wafopt.heuristics.recompute import dp_plan
from wafopt.heuristics.routing import tcme_routes
from wafopt.heuristics.tatp import complete_groups, tile_groups
from wafopt.models import mem_pair as mem_pair_model
from wafopt.models import placement as placement_model
from wafopt.models import recompute as recompute_model
from wafopt.models import routing as routing_model
from wafopt.models import tatp as tatp_model
from wafopt.models.placement_bnb import bnb
from wafopt.problems.mem_pair.plans import plan_of, respects_k, transport_chunks
from wafopt.problems.routing.evaluate import evaluate as evaluate_routes
from wafopt.problems.routing.plans import routes_plan, xy_routes
from wafopt.problems.tatp.evaluate import evaluate as evaluate_groups
from wafopt.problems.tatp.plans import groups_plan

START_SHARE = 0.2            # share of the time limit a heuristic start may use
START_S = 2.0                # its budget without a time limit
RECOMPUTE_START_S = 0.5      # the GCMR DP start of the recompute models
PLACEMENT_START_SHARE = 0.1  # placement: per tile shape, share of the limit for the local-search start
PLACEMENT_START_S = 2.0      # ... and at most this
PLACEMENT_POLISH_S = 2.0     # placement: local search on the full objective after a base-objective model
PLACEMENT_BNB_START_S = 0.5  # placement bnb: at most this for the local search's first incumbent
PLACEMENT_BNB_GA_S = 5.0     # ... unless its start share (a tenth of the limit) is this long on an instance
PLACEMENT_BNB_GA_STAGES = 28  # of this many stages (where the local search falls short on QAPLIB): the GA


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


# --- recompute: the GCMR DP starts the MILP and CP-SAT ----------------------------------------------

def _recompute_start(inst, options: SolveOptions) -> SolveOptions:
    return warm_started(options, lambda sub: dp_plan(inst, budget_s=sub.search_seconds(RECOMPUTE_START_S)),
                        RECOMPUTE_START_S)


@loads(*PYOMO_HIGHS)
def recompute_milp(inst, options: SolveOptions) -> MethodResult:
    return recompute_model.solve_milp(inst, _recompute_start(inst, options))


@loads(*CP_SAT)
def recompute_cpsat(inst, options: SolveOptions) -> MethodResult:
    return recompute_model.solve_cpsat(inst, _recompute_start(inst, options))


# --- mem_pair: Alg. 3 greedy starts the models when the transportation optimum breaks K ----------

def _mem_pair_greedy(inst, options: SolveOptions) -> dict | None:
    """The greedy plan of Alg. 3 when there is no warm start and the transportation optimum (the
    models' own start) breaks K; else None."""
    if options.warm_start is not None:
        return None
    relaxed = transport_chunks(inst)
    if relaxed is not None and respects_k(inst, relaxed):
        return None
    chunks = greedy_chunks(inst)
    return plan_of(inst, chunks) if chunks is not None else None


@loads(*PYOMO_HIGHS)
def mem_pair_milp(inst, options: SolveOptions) -> MethodResult:
    """The greedy plan is the MILP's start."""
    return mem_pair_model.solve_milp(inst, warm_started(options, lambda sub: _mem_pair_greedy(inst, sub), START_S))


@loads(*CP_SAT)
def mem_pair_cpsat(inst, options: SolveOptions) -> MethodResult:
    """The greedy plan is the incumbent and the fallback; CP-SAT's hint stays the transportation
    optimum (K-free), which guides its search better than the greedy plan does."""

    fallback = _mem_pair_greedy(inst, options)
    if fallback is not None:
        options.incumbent(fallback)
    result = mem_pair_model.solve_cpsat(inst, options)
    if result.plan is None and fallback is not None and result.status != "infeasible":
        result.plan, result.status = fallback, "feasible"
        result.message = "; ".join(m for m in (result.message, "plan of the greedy (Alg. 3)") if m)
    return result


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

        seconds = options.sub(PLACEMENT_POLISH_S).search_seconds()
        return descend(fit, perm, time.monotonic() + seconds, stop=options.stopped)[0]


@loads(*PYOMO_HIGHS, *SCIPY)
def placement_milp(inst, options: SolveOptions) -> MethodResult:
    return placement_model.milp(inst, options, PlacementSearch())


@loads(*CP_SAT, *SCIPY)
def placement_cpsat(inst, options: SolveOptions) -> MethodResult:
    return placement_model.cpsat(inst, options, PlacementSearch())


@loads(*HIGHS, *SCIPY)
def placement_rlt1(inst, options: SolveOptions) -> MethodResult:
    return placement_model.rlt1(inst, options, PlacementSearch())


@loads(*SCIPY)
def placement_bnb(inst, options: SolveOptions) -> MethodResult:
    """Branch and bound, with the local search's plan (at most PLACEMENT_BNB_START_S) as its first
    incumbent, or on large instances with a long limit the GA's (a tenth of the limit): on short
    runs the GA would spend its share importing pymoo and ramping up a population; on long ones it
    finds the plans the local search misses (nug30: 6124 against 6262)."""
    share = start_seconds(options, PLACEMENT_START_SHARE, PLACEMENT_START_S)
    if options.time_limit is not None and share >= PLACEMENT_BNB_GA_S and inst.stages >= PLACEMENT_BNB_GA_STAGES:
        return bnb(inst, warm_started(options, lambda sub: ga(inst, sub).plan, share))
    return bnb(inst, warm_started(options, lambda sub: local(inst, sub).plan, min(PLACEMENT_BNB_START_S, share)))


# --- tatp: the tiles mapping starts the models; their column search repairs relaxed solutions ---

def _tatp_start(instance, options: SolveOptions) -> SolveOptions:
    if options.warm_start is not None and not evaluate_groups(instance, options.warm_start).feasible:
        options = replace(options, warm_start=None)   # an unusable start is replaced, not kept
    return warm_started(options, lambda sub: groups_plan(
        tile_groups(instance, time.monotonic() + sub.search_seconds(), sub.stopped)[0]), start_seconds(options))


@loads(*CP_SAT, *HIGHS)
def tatp_cpsat(instance, options: SolveOptions) -> MethodResult:
    return tatp_model.solve_cpsat(instance, _tatp_start(instance, options), partial(complete_groups, stop=options.stopped))


@loads(*PYOMO_HIGHS, *CP_SAT)
def tatp_milp(instance, options: SolveOptions) -> MethodResult:
    return tatp_model.solve_milp(instance, _tatp_start(instance, options), partial(complete_groups, stop=options.stopped))


# --- routing: TCME from XY starts the models --------------------------------------------------------

def _routing_start(instance, options: SolveOptions) -> SolveOptions:
    if options.warm_start is not None and not evaluate_routes(instance, options.warm_start).feasible:
        options = replace(options, warm_start=None)
    return warm_started(options, lambda sub: routes_plan(
        tcme_routes(instance, xy_routes(instance), time.monotonic() + sub.search_seconds(), sub.stopped)[0]),
        start_seconds(options))


@loads(*PYOMO_HIGHS)
def routing_milp(instance, options: SolveOptions) -> MethodResult:
    return routing_model.solve_milp(instance, _routing_start(instance, options))


@loads(*CP_SAT)
def routing_cpsat(instance, options: SolveOptions) -> MethodResult:
    return routing_model.solve_cpsat(instance, _routing_start(instance, options))


# --- the table: `--method NAME` of each problem that this layer owns (wafopt.run.methods gathers) ---

METHODS = {
    "placement": {"rlt1": placement_rlt1, "milp": placement_milp, "cpsat": placement_cpsat, "bnb": placement_bnb},
    "recompute": {"milp": recompute_milp, "cpsat": recompute_cpsat},
    "mem_pair": {"milp": mem_pair_milp, "cpsat": mem_pair_cpsat},
    "tatp": {"cpsat": tatp_cpsat, "milp": tatp_milp},
    "routing": {"milp": routing_milp, "cpsat": routing_cpsat},
    "plan": {"uniform": gcmr.solve_uniform, "gcmr": gcmr.solve_gcmr},
}
