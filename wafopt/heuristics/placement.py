"""Placement heuristics: serpentine / row-major baselines, local search, and a pymoo GA.

An assignment is encoded as a permutation `perm` of the m usable slot indices of one Layout:
stage i sits in slot perm[i] (i < n); perm[n:] are the free slots. `Fitness` scores a whole
population of such assignments in numpy (the full Eq. 2 objective, equal to the evaluator's).
"""

from __future__ import annotations

import time
from itertools import combinations

import numpy as np

from wafopt.problems.placement.instance import Layout, PlacementInstance
from wafopt.core.result import MethodResult
from wafopt.core.budget import SolveOptions


class Fitness:
    """Vectorized full objective of assignments on one layout.

    base(P) = sum_e C_e * D[P[:, i_e], P[:, j_e]] over unordered stage pairs e with weight C_e > 0;
    penalty(P) = sum over Mem_pairs of vol * D * gamma, gamma = |route(pair) & union of flow routes|,
    routes as boolean link vectors of the XY route between representative dies.
    """

    def __init__(self, inst: PlacementInstance, lay: Layout):
        self.inst, self.layout = inst, lay
        self.n, self.m = inst.stages, len(lay.slots)
        self.D = lay.distance
        self.C = inst.weights
        iu, ju = np.triu_indices(self.n, 1)
        keep = self.C[iu, ju] > 0
        self.edge_i, self.edge_j, self.edge_w = iu[keep], ju[keep], self.C[iu, ju][keep]
        self.pairs = inst.pairs
        if self.pairs:
            self._routes()

    def _routes(self) -> None:
        mesh, lay = self.inst.mesh, self.layout
        links = {link: k for k, link in enumerate(mesh.directed_links)}
        reps = [lay.representative(s) for s in lay.slots]
        self.R = np.zeros((self.m, self.m, len(links)), dtype=bool)  # R[k, l]: links of XY route k -> l
        for k in range(self.m):
            for l in range(self.m):
                if k != l:
                    for link in mesh.route_links(mesh.xy_route(reps[k], reps[l])):
                        self.R[k, l, links[link]] = True
        V = self.inst.flow
        self.flow_i, self.flow_j = np.nonzero(V > 0)
        self.pair_s = np.array([s for s, _, _ in self.pairs])
        self.pair_h = np.array([h for _, h, _ in self.pairs])
        self.pair_v = np.array([v for _, _, v in self.pairs])

    def base(self, P: np.ndarray) -> np.ndarray:
        return self.D[P[:, self.edge_i], P[:, self.edge_j]] @ self.edge_w

    def __call__(self, P: np.ndarray) -> np.ndarray:
        """Full objective of each row of P (pop, >= n) of slot indices."""
        P = np.asarray(P)[:, :self.n]
        total = self.base(P)
        if self.pairs:
            union = self.R[P[:, self.flow_i], P[:, self.flow_j]].any(axis=1)        # (pop, L)
            pair_links = self.R[P[:, self.pair_s], P[:, self.pair_h]]              # (pop, pairs, L)
            gamma = (pair_links & union[:, None, :]).sum(axis=2)
            total = total + (self.D[P[:, self.pair_s], P[:, self.pair_h]] * gamma) @ self.pair_v
        return total

    def one(self, perm) -> float:
        return float(self(np.asarray(perm)[None, :])[0])

    # --- moves ----------------------------------------------------------------------------------
    def best_base_swap(self, perm: np.ndarray) -> tuple[float, int, int]:
        """Best swap of positions (r, s), r < n, r < s < m, by the exact change of the base objective.

        Stage-stage swaps: delta = A[r,s] + A[s,r] - a[r] - a[s] + 2 C[r,s] D[p_r,p_s] with
        A = C @ D[p][:, p], a = diag(A); stage r to free slot f: delta = (D[f, p] @ C)[r] - a[r].
        """
        n = self.n
        p = perm[:n]
        Dp = self.D[np.ix_(p, p)]
        A = self.C @ Dp
        a = np.diag(A).copy()
        swap = A + A.T - a[:, None] - a[None, :] + 2 * self.C * Dp
        swap[np.tril_indices(n)] = np.inf
        r, s = np.unravel_index(np.argmin(swap), swap.shape)
        best = (float(swap[r, s]), int(r), int(s))
        if self.m > n:
            move = self.D[np.ix_(perm[n:], p)] @ self.C - a[None, :]          # (free, n)
            f, r2 = np.unravel_index(np.argmin(move), move.shape)
            if move[f, r2] < best[0]:
                best = (float(move[f, r2]), int(r2), int(n + f))
        return best

    def neighbours(self, perm: np.ndarray, kind: str) -> np.ndarray:
        """All neighbours of perm by one move: "swap" (positions r < n, r < s < m), "reverse" (the
        slots of stages a..b in reverse order: 2-opt of the pipeline path) or "cycle" (3-cycles of
        stage positions)."""
        if kind == "cycle":
            trip = np.array(list(combinations(range(self.n), 3)), dtype=int).reshape(-1, 3)
            trip = np.concatenate([trip, trip[:, [0, 2, 1]]])
            out = np.repeat(perm[None, :], len(trip), axis=0)
            rows = np.arange(len(trip))[:, None]
            out[rows, trip] = perm[np.roll(trip, 1, axis=1)]
            return out
        if kind == "reverse":
            segs = [(a, b) for a in range(self.n) for b in range(a + 2, self.n)]
            out = np.repeat(perm[None, :], len(segs), axis=0)
            for row, (a, b) in zip(out, segs):
                row[a:b + 1] = perm[a:b + 1][::-1]
            return out
        r, s = np.array([(r, s) for r in range(self.n) for s in range(r + 1, self.m)], dtype=int).reshape(-1, 2).T
        out = np.repeat(perm[None, :], len(r), axis=0)
        idx = np.arange(len(r))
        out[idx, r], out[idx, s] = perm[s], perm[r]
        return out


def base_descent(fit: Fitness, perm: np.ndarray, deadline: float | None = None) -> np.ndarray:
    """Best-improvement swaps/relocations by exact base-objective deltas (fast, O(n^2 m) a step)."""
    perm = np.array(perm)
    while deadline is None or time.monotonic() < deadline:
        delta, r, s = fit.best_base_swap(perm)
        if delta >= -1e-9:
            break
        perm[r], perm[s] = perm[s], perm[r]
    return perm


def descend(fit: Fitness, perm: np.ndarray, deadline: float | None = None,
            cycles: bool = True) -> tuple[np.ndarray, float]:
    """Best-improvement descent on the full objective: swaps/relocations (exact deltas when there are
    no Mem_pairs), segment reversals (2-opt of the pipeline path), then 3-cycles; never worse than perm."""
    start = np.array(perm)
    perm = base_descent(fit, start, deadline)
    value = fit.one(perm)
    if fit.pairs and value > fit.one(start):   # the base pre-pass may add routing conflicts
        perm, value = start, fit.one(start)
    kinds = (["swap"] if fit.pairs else []) + ["reverse"] + (["cycle"] if cycles else [])
    while True:
        improved = False
        for kind in kinds:
            if deadline is not None and time.monotonic() > deadline:
                return perm, value
            cand = fit.neighbours(perm, kind)
            scores = np.concatenate([fit(cand[k:k + 4096]) for k in range(0, len(cand), 4096)])
            k = int(np.argmin(scores))
            if scores[k] < value - 1e-9:
                perm, value, improved = cand[k].copy(), float(scores[k]), True
                break
        if not improved:
            return perm, value
        if not fit.pairs:
            perm = base_descent(fit, perm, deadline)
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
                     max_stall: int, on_improve=None) -> tuple[np.ndarray, float, int]:
    """Descend from `start`, then repeat: perturb the best by a few random swaps, descend, keep if better."""
    best, value = descend(fit, start, deadline)
    if on_improve:
        on_improve(best, value)
    rounds = stall = 0
    kick = max(2, fit.n // 8)
    while time.monotonic() < deadline and stall < max_stall:
        perm = best.copy()
        for _ in range(kick):
            r = rng.integers(fit.n)
            s = rng.integers(fit.m - 1)
            s += s >= r
            perm[r], perm[s] = perm[s], perm[r]
        perm, v = descend(fit, perm, deadline, cycles=False)
        rounds += 1
        stall += 1
        if v < value - 1e-9:
            best, value, stall = perm, v, 0
            if on_improve:
                on_improve(best, value)
        elif v <= value + 1e-9:
            best = perm          # sideways: drift across plateaus of equal objective
    best, value = descend(fit, best, deadline)
    return best, value, rounds


def _per_layout(inst: PlacementInstance, options: SolveOptions, solver: str, search) -> MethodResult:
    """Run `search(fit, lay, deadline, report)` on each tile shape (time split evenly); keep the best."""
    started = time.monotonic()
    budget = options.search_seconds()
    best = None
    stats = {"layouts": {}}

    def report(lay, perm, value):
        nonlocal best
        if best is None or value < best[0] - 1e-9:
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


def local(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    """Iterated 2-swap / relocation / 3-cycle descent from the serpentine placement (seeded kicks)."""
    rng = np.random.default_rng(options.seed)

    def search(fit, lay, deadline, report):
        perm, value, rounds = iterated_descent(fit, np.array(lay.order(True)), rng, deadline,
                                               max_stall=100, on_improve=report)
        return value, {"rounds": rounds}

    return _per_layout(inst, options, "local search", search)


# --- genetic algorithm (pymoo) ---------------------------------------------------------------------

def ga(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    """pymoo GA on slot permutations (order crossover, swap/inversion mutation, memetic repair)
    on the full objective; the best individual is polished by iterated descent."""
    from importlib.metadata import version

    rng = np.random.default_rng(options.seed)

    def search(fit, lay, deadline, report):
        start = time.monotonic()
        ga_deadline = start + 0.8 * (deadline - start)
        perm, generations = _run_ga(fit, lay, ga_deadline, options.seed, report)
        perm, value, rounds = iterated_descent(fit, perm, rng, deadline, max_stall=100, on_improve=report)
        return value, {"generations": generations, "polish_rounds": rounds}

    return _per_layout(inst, options, f"pymoo {version('pymoo')}", search)


def _run_ga(fit: Fitness, lay: Layout, deadline: float, seed: int, report, pop_size: int = 60,
            stall_generations: int = 60):
    from pymoo.algorithms.soo.nonconvex.ga import GA
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
        """Serpentine and row-major placements plus random permutations."""

        def _do(self, problem, n_samples, random_state=None, **kwargs):
            X = np.array([random_state.permutation(m) for _ in range(n_samples)])
            X[0], X[1] = lay.order(True), lay.order(False)
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
                if time.monotonic() < deadline:
                    X[k] = base_descent(fit, X[k], deadline)
                X[k, n:] = np.sort(X[k, n:])
            return X

    class Deadline(Termination):
        def _update(self, algorithm):
            return 1.0 if time.monotonic() >= deadline else 0.0

    class Track(Callback):
        def __init__(self):
            super().__init__()
            self.best, self.stall = np.inf, 0

        def notify(self, algorithm):
            opt = algorithm.opt[0]
            if opt.F[0] < self.best - 1e-9:
                self.best, self.stall = float(opt.F[0]), 0
                report(opt.X.astype(int), self.best)
            else:
                self.stall += 1
                if self.stall >= stall_generations:
                    algorithm.termination.force_termination = True

    algorithm = GA(pop_size=pop_size, sampling=Seeded(), crossover=OrderCrossover(),
                   mutation=SwapInversion(), repair=Memetic(), eliminate_duplicates=True)
    res = minimize(Placement(), algorithm, Deadline(), seed=int(seed) % (2 ** 32), callback=Track(),
                   verbose=False)
    return np.asarray(res.X, dtype=int), int(res.algorithm.n_gen)
