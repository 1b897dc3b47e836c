"""Placement heuristics: serpentine / row-major baselines, local search, and a pymoo GA.

An assignment is a permutation `perm` of the m usable slot indices of one Layout (stage i in slot
perm[i], i < n); `Fitness` (wafopt.problems.placement.fitness) scores populations of them on the
full Eq. 2 objective.
"""

from __future__ import annotations

import time

import numpy as np

from wafopt.core.budget import SolveOptions, never
from wafopt.core.numeric import at_most, tolerance
from wafopt.core.registry import PYMOO, loads
from wafopt.core.result import MethodResult
from wafopt.problems.placement import KERNELS
from wafopt.problems.placement.fitness import Fitness
from wafopt.problems.placement.instance import Layout, PlacementInstance
from wafopt.problems.placement.walks import best_walk, is_pipeline


def base_descent(fit: Fitness, perm: np.ndarray, deadline: float | None = None, stop=never) -> np.ndarray:
    """Swap descent on the base objective (Fitness.base_descent)."""
    return fit.base_descent(perm, deadline, stop)


def _best_full_swap(fit: Fitness, perm: np.ndarray, value: float) -> tuple[np.ndarray, float] | None:
    """The best swap by the full objective, or None when none improves. A swap can only improve if
    its base delta is below the current conflict penalty (the penalty stays >= 0), so only those
    swaps get their penalty evaluated."""
    penalty = float(fit.penalty(perm[None, :fit.n])[0])
    delta = fit.swaps(perm).deltas()
    r, s = np.nonzero(delta < penalty - tolerance(value))
    if not len(r):
        return None
    cand = np.repeat(perm[None, :], len(r), axis=0)
    idx = np.arange(len(r))
    cand[idx, r], cand[idx, s] = perm[s], perm[r]
    scores = value + delta[r, s] + np.concatenate(
        [fit.penalty(cand[k:k + 4096, :fit.n]) for k in range(0, len(cand), 4096)]) - penalty
    k = int(np.argmin(scores))
    if at_most(value, scores[k]):
        return None
    return cand[k], fit.one(cand[k])


def descend(fit: Fitness, perm: np.ndarray, deadline: float | None = None,
            cycles: bool = True, stop=never) -> tuple[np.ndarray, float]:
    """Best-improvement descent on the full objective: swaps/relocations (exact base deltas, the
    conflict penalty evaluated only where it can matter), segment reversals (2-opt of the pipeline
    path), then 3-cycles; never worse than perm."""
    start = np.array(perm)
    perm = base_descent(fit, start, deadline, stop)
    value = fit.one(perm)
    if fit.pairs and value > fit.one(start):   # the base pre-pass may add routing conflicts
        perm, value = start, fit.one(start)
    kinds = (["swap"] if fit.pairs else []) + ["reverse"] + (["cycle"] if cycles else [])
    while True:
        improved = False
        for kind in kinds:
            if (deadline is not None and time.monotonic() > deadline) or stop():
                return perm, value
            if kind == "swap":
                step = _best_full_swap(fit, perm, value)
                if step is not None:
                    (perm, value), improved = step, True
                    break
                continue
            cand = fit.neighbours(perm, kind)
            if not len(cand):   # too few stages for this move (e.g. 2 stages: no reversal, no 3-cycle)
                continue
            scores = np.concatenate([fit(cand[k:k + 4096]) for k in range(0, len(cand), 4096)])
            k = int(np.argmin(scores))
            if not at_most(value, scores[k]):
                perm, value, improved = cand[k].copy(), float(scores[k]), True
                break
        if not improved:
            return perm, value
        if not fit.pairs:
            perm = base_descent(fit, perm, deadline, stop)
            value = fit.one(perm)


# --- baselines ----------------------------------------------------------------------------------

def _ordered(inst: PlacementInstance, serpentine: bool):
    best = None
    for lay in inst.layouts:
        fit = Fitness(inst, lay)
        perm = np.array(lay.order(serpentine))
        value = fit.one(perm)
        if best is None or value < best[0]:
            best = (value, lay, perm)
    return best


def _result(lay: Layout, perm, solver: str, stats: dict, n: int) -> MethodResult:
    return MethodResult(lay.plan(perm[:n]), "feasible", None, solver, stats=stats)


def serpentine(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    """Stage i in the i-th usable slot in boustrophedon order (WATOS Fig. 11a); best tile shape."""
    _, lay, perm = _ordered(inst, serpentine=True)
    return _result(lay, perm, "serpentine", {}, inst.stages)


def rowmajor(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    _, lay, perm = _ordered(inst, serpentine=False)
    return _result(lay, perm, "rowmajor", {}, inst.stages)


# --- local search ------------------------------------------------------------------------------------

def iterated_descent(fit: Fitness, start: np.ndarray, rng: np.random.Generator, deadline: float,
                     max_stall: int, on_improve=None, stop=never) -> tuple[np.ndarray, float, int]:
    """Descend from `start`, then repeat: perturb the best by a few random swaps, descend, keep if better."""
    best, value = descend(fit, start, deadline, stop=stop)
    if on_improve:
        on_improve(best, value)
    rounds = stall = 0
    kick = max(2, fit.n // 8)
    while time.monotonic() < deadline and stall < max_stall and not stop():
        perm = best.copy()
        for _ in range(kick):
            r = rng.integers(fit.n)
            s = rng.integers(fit.m - 1)
            s += s >= r
            perm[r], perm[s] = perm[s], perm[r]
        perm, v = descend(fit, perm, deadline, cycles=False, stop=stop)
        rounds += 1
        stall += 1
        if not at_most(value, v):
            best, value, stall = perm, v, 0
            if on_improve:
                on_improve(best, value)
        elif at_most(v, value):
            best = perm          # sideways: drift across plateaus of equal objective
    best, value = descend(fit, best, deadline, stop=stop)
    return best, value, rounds


def _per_layout(inst: PlacementInstance, options: SolveOptions, solver: str, search) -> MethodResult:
    """Run `search(fit, lay, deadline, report)` on each tile shape (time split evenly); keep the best."""
    started = time.monotonic()
    budget = options.search_seconds()
    best = None
    stats = {"layouts": {}}

    def report(lay, perm, value):
        nonlocal best
        if best is None or not at_most(best[0], value):
            best = (value, lay, np.array(perm))
            options.incumbent(lay.plan(perm[:inst.stages]))
            options.progress(f"{solver}: {value:.6g} (tile {lay.tile[0]}x{lay.tile[1]})")

    layouts = inst.layouts
    for k, lay in enumerate(layouts):
        share = (budget - (time.monotonic() - started)) / (len(layouts) - k)
        deadline = time.monotonic() + max(0.0, share)
        fit = Fitness(inst, lay)
        value, extra = search(fit, lay, deadline, lambda perm, v, lay=lay: report(lay, perm, v))
        stats["layouts"][f"{lay.tile[0]}x{lay.tile[1]}"] = {"objective": value, **extra}
    value, lay, perm = best
    return _result(lay, perm, solver, stats, inst.stages)


WALK_MIN_S = 0.25   # the compiled walk's first load takes 0.05-0.2 s (numba loads before the clock), past a shorter deadline


def walk_start(fit: Fitness, deadline: float, stop=never) -> list[np.ndarray]:
    """On a pipeline, the best walk (wafopt.problems.placement.walks) as a start: the folded snakes
    that keep Mem_pair partners close are out of the descent's reach from the serpentine
    (pl-sparse-24: 292 from it, 278 from the walk); else nothing, and nothing with less than
    WALK_MIN_S left before the deadline."""
    if deadline - time.monotonic() < WALK_MIN_S:
        return []
    walk = best_walk(fit, deadline=deadline, stop=stop)
    return [] if walk is None else [walk[0]]


def descents(fit: Fitness, starts: list[np.ndarray], rng: np.random.Generator, deadline: float, max_stall: int,
             on_improve=None, stop=never) -> tuple[np.ndarray, float, int]:
    """iterated_descent from each start in turn (the time left shared evenly); the best. Neither
    start wins everywhere: on pl-llama3-70b-config3-faulty the serpentine's descent reaches the
    optimum and the walk's does not."""
    best, total = None, 0
    for k, start in enumerate(starts):
        share = (deadline - time.monotonic()) / (len(starts) - k)
        perm, value, rounds = iterated_descent(fit, start, rng, time.monotonic() + max(0.0, share), max_stall,
                                               on_improve, stop)
        total += rounds
        if best is None or not at_most(best[1], value):
            best = (perm, value)
    return best[0], best[1], total


def on_a_pipeline(inst: PlacementInstance) -> bool:
    """Whether the methods' start includes the compiled pipeline walk (walk_start)."""
    return is_pipeline(inst.weights)


LOCAL_PATIENCE = 100   # kicks in a row that find nothing better before an iterated descent ends


@loads(*KERNELS, only_if=on_a_pipeline)
def local(inst: PlacementInstance, options: SolveOptions, patience: int = LOCAL_PATIENCE) -> MethodResult:
    """Iterated 2-swap / relocation / 3-cycle descent from the best pipeline walk (walk_start) and
    from the serpentine placement (seeded kicks, each descent until `patience` kicks in a row
    find nothing better); the better."""
    rng = np.random.default_rng(options.seed)

    def search(fit, lay, deadline, report):
        starts = walk_start(fit, deadline, options.stopped) + [np.array(lay.order(True))]
        perm, value, rounds = descents(fit, starts, rng, deadline, patience, report, options.stopped)
        return value, {"rounds": rounds}

    return _per_layout(inst, options, "local search", search)


# --- genetic algorithm (pymoo) ---------------------------------------------------------------------

@loads(*KERNELS, only_if=on_a_pipeline)
@loads(*PYMOO)
def ga(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    """pymoo GA on slot permutations (order crossover, swap/inversion mutation, memetic repair)
    on the full objective, the best pipeline walk (walk_start) in its first population; the best
    individual is polished by iterated descent."""
    from importlib.metadata import version

    rng = np.random.default_rng(options.seed)

    def search(fit, lay, deadline, report):
        start = time.monotonic()
        ga_deadline = start + 0.8 * (deadline - start)
        walks = walk_start(fit, ga_deadline, options.stopped)
        perm, generations, per_generation = _run_ga(fit, lay, walks, ga_deadline, options.seed, report,
                                                    stop=options.stopped)
        perm, value, rounds = iterated_descent(fit, perm, rng, deadline, max_stall=100, on_improve=report,
                                               stop=options.stopped)
        return value, {"generations": generations, "polish_rounds": rounds, "per_generation": per_generation}

    return _per_layout(inst, options, f"pymoo {version('pymoo')}", search)


def _run_ga(fit: Fitness, lay: Layout, walks: list[np.ndarray], deadline: float, seed: int, report, pop_size: int = 60,
            stall_generations: int = 60, stop=never):
    from pymoo.algorithms.soo.nonconvex.ga import (
        GA,  # lazy: slow import (docs/architecture.md)
    )
    from pymoo.core.callback import Callback
    from pymoo.core.mutation import Mutation
    from pymoo.core.problem import Problem
    from pymoo.core.repair import Repair
    from pymoo.core.sampling import Sampling
    from pymoo.core.termination import Termination
    from pymoo.operators.crossover.ox import OrderCrossover
    from pymoo.optimize import minimize

    n, m = fit.n, fit.m

    class Placement(Problem):
        def __init__(self):
            super().__init__(n_var=m, n_obj=1, xl=0, xu=m - 1, vtype=int)

        def _evaluate(self, X, out, *args, **kwargs):
            out["F"] = fit(X.astype(int))

    class Seeded(Sampling):
        """Serpentine and row-major placements, the pipeline walk if any, and random permutations."""

        def _do(self, problem, n_samples, random_state=None, **kwargs):
            X = np.array([random_state.permutation(m) for _ in range(n_samples)])
            seeds = [lay.order(True), lay.order(False), *walks]
            X[:len(seeds)] = seeds
            return X

    class SwapInversion(Mutation):
        """Swap two positions (half the time) or reverse a segment."""

        def _do(self, problem, X, random_state=None, **kwargs):
            Y = X.copy()
            for y in Y:
                a, b = sorted(random_state.choice(m, 2, replace=False))
                if random_state.random() < 0.5:
                    y[a], y[b] = y[b], y[a]
                else:
                    y[a:b + 1] = y[a:b + 1][::-1].copy()
            return Y

    class Memetic(Repair):
        """Descend each offspring on the base objective (exact swap deltas), then sort the free
        slots so equal assignments are equal vectors (for duplicate elimination)."""

        def _do(self, problem, X, **kwargs):
            X = X.astype(int)
            for k in range(len(X)):
                if time.monotonic() < deadline and not stop():
                    X[k] = base_descent(fit, X[k], deadline, stop)
                X[k, n:] = np.sort(X[k, n:])
            return X

    class Deadline(Termination):
        def _update(self, algorithm):
            return 1.0 if time.monotonic() >= deadline or stop() else 0.0

    class Track(Callback):
        def __init__(self):
            super().__init__()
            self.best, self.stall = np.inf, 0
            self.per_generation = {"best": [], "mean": []}   # for the convergence picture

        def notify(self, algorithm):
            opt = algorithm.opt[0]
            self.per_generation["best"].append(float(opt.F[0]))
            self.per_generation["mean"].append(float(np.mean(algorithm.pop.get("F"))))
            if self.best == np.inf or not at_most(self.best, float(opt.F[0])):
                self.best, self.stall = float(opt.F[0]), 0
                report(opt.X.astype(int), self.best)
            else:
                self.stall += 1
                if self.stall >= stall_generations:
                    algorithm.termination.force_termination = True

    algorithm = GA(pop_size=pop_size, sampling=Seeded(), crossover=OrderCrossover(),
                   mutation=SwapInversion(), repair=Memetic(), eliminate_duplicates=True)
    track = Track()
    res = minimize(Placement(), algorithm, Deadline(), seed=int(seed) % (2 ** 32), callback=track,
                   verbose=False)
    return np.asarray(res.X, dtype=int), int(res.algorithm.n_gen), track.per_generation
