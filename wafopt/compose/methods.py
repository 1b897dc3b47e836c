"""Exact methods composed with the heuristics that give them a start.

Formulations (wafopt.models) and heuristics (wafopt.heuristics) never import each other. Where an
exact method profits from a heuristic, the wrapper here runs the heuristic on a share of the run's
budget (`options.sub`) and hands its plan to the model as data (`options.warm_start`; `replace`
keeps the shared Budget, so incumbents and Ctrl-C still reach the runner), or, where the exact
algorithm calls a heuristic inside its own loop, passes the heuristic in as a function.
The placement methods are in wafopt.compose.placement (a placement command loads no other
problem). The table in wafopt.compose (METHODS) names them as the methods of their problems.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

from wafopt.compose.starts import START_S, start_seconds, warm_started
from wafopt.core.budget import SolveOptions
from wafopt.core.registry import CP_SAT, HIGHS, PYOMO_HIGHS, loads
from wafopt.core.result import MethodResult
from wafopt.heuristics.mem_pair import greedy_chunks
from wafopt.heuristics.recompute import dp_plan
from wafopt.heuristics.routing import tcme_routes
from wafopt.heuristics.tatp import complete_groups, tile_groups
from wafopt.models import mem_pair as mem_pair_model
from wafopt.models import recompute as recompute_model
from wafopt.models import routing as routing_model
from wafopt.models import tatp as tatp_model
from wafopt.problems.mem_pair.plans import plan_of, respects_k, transport_chunks
from wafopt.problems.routing.evaluate import evaluate as evaluate_routes
from wafopt.problems.routing.plans import routes_plan, xy_routes
from wafopt.problems.tatp.evaluate import evaluate as evaluate_groups
from wafopt.problems.tatp.plans import groups_plan

RECOMPUTE_START_S = 0.5      # the GCMR DP start of the recompute models


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

