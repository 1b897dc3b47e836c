"""Eigenvalue bounds of stage placement (docs/placement.md): the projected eigenvalue bound (`pb`)
and the convex quadratic programming bound (`qpb`, Frank-Wolfe on the convex relaxation), each
proven by a certificate that wafopt.problems.placement.projected re-derives.

Frank-Wolfe minimizes f(X) = h(X - P) + <L', X> + constant over the doubly stochastic matrices
(module doc of projected.py; h convex). Each step solves one assignment problem on the gradient
(its vertex), steps to it by the exact line search of a quadratic, and evaluates the Frank-Wolfe
lower bound f(X) + min_vertex <grad f(X), vertex - X>, valid at every X by convexity; the best
one's X is the certificate's point.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np

from wafopt.core.budget import SolveOptions
from wafopt.core.registry import loads
from wafopt.core.result import CERTIFICATE, Bound, MethodResult
from wafopt.problems.certificates import float_down
from wafopt.problems.placement import KERNELS
from wafopt.problems.placement.assignment import assignment_columns
from wafopt.problems.placement.certificate import (
    gilmore_lawler_tile,
    integral,
    tile_name,
)
from wafopt.problems.placement.fitness import Fitness
from wafopt.problems.placement.instance import PlacementInstance
from wafopt.problems.placement.projected import (
    MAX_SLOTS,
    Spectral,
    bound_at_point,
    spectral,
    tile_matrices,
)
from wafopt.problems.placement.projected import frank_wolfe as projected_frank_wolfe

QPB_STEPS = 3000          # Frank-Wolfe steps per tile shape without a time limit
THETA_STEPS = 400         # Frank-Wolfe steps between two choices of theta
THETA_ROUNDS = 4
QPB_SHARE = 0.8           # of the time limit, for the Frank-Wolfe steps (the rest: the proof)


def frank_wolfe(A: np.ndarray, B: np.ndarray, L: np.ndarray | None, spec: Spectral, steps: int,
                deadline: float | None = None, stopped=lambda: False, start: np.ndarray | None = None
                ) -> tuple[float, np.ndarray | None, np.ndarray, dict]:
    """(best Frank-Wolfe lower bound of min t(X) in floats, the point that gave it (None: the
    start P, where the bound is PB), the last iterate, statistics): projected.frank_wolfe on one
    problem."""
    best, best_X, best_step, X, steps_run = projected_frank_wolfe(
        A[None], B[None], None if L is None else L[None], spec.S[None], spec.T[None], steps,
        None if start is None else start[None], deadline, stopped)
    point = None if best_step[0] == 0 and start is None else best_X[0]
    return float(best[0]), point, X[0], {"steps": steps_run}


def qpb_search(A: np.ndarray, B: np.ndarray, L: np.ndarray | None, spec: Spectral, steps: int,
               deadline: float | None = None, stopped=lambda: False) -> tuple[float, np.ndarray | None, Spectral, dict]:
    """Frank-Wolfe with the dual's shape (theta) chosen on the way: a short run, then theta
    maximizing the relaxation at its last iterate (Spectral.better_theta), until theta settles
    (at most THETA_ROUNDS), then the remaining steps from the last iterate."""
    X, rounds = None, 0
    for rounds in range(THETA_ROUNDS):
        _, _, X, _ = frank_wolfe(A, B, L, spec, THETA_STEPS, deadline, stopped, X)
        theta = spec.better_theta(X)
        if np.array_equal(theta, spec.theta):
            break
        spec = spec.with_theta(theta)
    best, best_X, _, info = frank_wolfe(A, B, L, spec, max(1, steps - (rounds + 1) * THETA_STEPS), deadline, stopped, X)
    base, _, _, _ = frank_wolfe(A, B, L, spec, 1)          # PB, at P: kept if Frank-Wolfe did not beat it
    if base >= best:
        best, best_X = base, None
    return best, best_X, spec, {**info, "theta_rounds": rounds + 1}


def _tile_bounds(inst: PlacementInstance, options: SolveOptions, quadratic: bool) -> tuple[dict, dict]:
    """Per tile shape: the certificate entry and statistics."""
    layouts = inst.layouts
    tiles, stats, proven = {}, {}, []
    best_plan, best_value = None, math.inf
    for position, lay in enumerate(layouts):
        name = tile_name(lay.tile)
        tick = time.monotonic()

        def gilmore_lawler():
            value = gilmore_lawler_tile(inst, lay)
            tiles[name] = {"value": float(value), "from": "gilmore-lawler"}
            stats[name] = {"bound": float(value), "from": "gilmore-lawler"}
            proven.append(value)

        # the convexity proof would be too large, or the run is stopped (the exact proof of a tile
        # takes up to seconds): the tile keeps its Gilmore-Lawler bound
        if len(lay.slots) > MAX_SLOTS or inst.stages < 2 or options.stopped():
            gilmore_lawler()
            continue
        A, B = tile_matrices(inst.weights, lay.distance)
        spec = spectral(A, B)
        info, point = {}, None
        if quadratic:
            left = options.remaining()
            deadline = None if left is None else time.monotonic() + QPB_SHARE * left / (len(layouts) - position)
            fw, point, spec, info = qpb_search(A, B, None, spec, QPB_STEPS, deadline, options.stopped)
            if options.interrupted:
                gilmore_lawler()
                continue
            info["frank_wolfe_bound"] = fw / 2
        value, entry, point = bound_at_point(A, B, None, point, spec)
        value /= 2
        # a plan, so that the bound comes with a certified gap: the point (or the linear term at P)
        # rounded to the nearest permutation
        rounding = -point if point is not None else (2.0 / len(A)) * np.outer(A.sum(axis=1), B.sum(axis=1))
        col = assignment_columns(rounding[None])[0][:inst.stages]
        objective = Fitness(inst, lay).one(col)
        if objective < best_value:
            best_plan, best_value = lay.plan(col), objective
        entry["value"] = float(value)
        tiles[name] = entry
        proven.append(Fraction(math.ceil(value)) if integral(inst, lay) else value)
        stats[name] = {"bound": float(math.ceil(value)) if integral(inst, lay) else float(value),
                       "time_s": round(time.monotonic() - tick, 3), **info}
        options.progress(f"{'qpb' if quadratic else 'pb'} tile {name}: bound {stats[name]['bound']:.10g}", force=True)
    return tiles, stats, proven, best_plan


def eigenvalue_bound(inst: PlacementInstance, options: SolveOptions, quadratic: bool) -> MethodResult:
    """PB, or QPB, the least over tile shapes, with its certificate; the plan (as glb's) is only the
    rounding of the bound's point, feasible and not optimized, so that the file certifies a gap."""
    started = time.monotonic()
    tiles, stats, proven, plan = _tile_bounds(inst, options, quadratic)
    kind = "qpb" if quadratic else "projected-eigenvalue"
    data = {"tiles": tiles}
    value = float_down(min(proven)) if proven else None   # as check_projected re-derives it
    bound = Bound(value, CERTIFICATE, kind, data) if value is not None else None
    name = ("convex quadratic programming bound (Anstreicher-Brixius), Frank-Wolfe" if quadratic
            else "projected eigenvalue bound (Hadley-Rendl-Wolkowicz)")
    message = ""
    if value is not None:   # said, not substituted: this method's bound is the eigenvalue one
        glb = float_down(min(gilmore_lawler_tile(inst, lay) for lay in inst.layouts))
        if glb > value:
            message = (f"the Gilmore-Lawler bound (--method glb) is stronger here: {glb:.10g} (the eigenvalue "
                       "bounds are weak where the flows lack spectral structure, e.g. sparse pipelines)")
    return MethodResult(plan, "feasible" if plan is not None else "unknown", bound, f"wafopt {name}", message,
                        stats={"layouts": stats, "time_s": round(time.monotonic() - started, 3)})


@loads(*KERNELS)
def pb(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    return eigenvalue_bound(inst, options, quadratic=False)


@loads(*KERNELS)
def qpb(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    return eigenvalue_bound(inst, options, quadratic=True)

