"""Recomputation heuristics: the GCMR dynamic program (WATOS Alg. 2), uniform, full and none.

dp (docs/recompute.md, "The GCMR dynamic program"):
1. Fine memory quantum q (stage level). When every a_j, S_i and Cap_i is a decimal that scales to
   integers, q is the gcd of the per-layer weights k_i a_j and exact, provided one stage's table
   stays within MAX_STAGE_UNITS quanta; otherwise q = (largest stage activation memory) /
   MAX_STAGE_UNITS and every weight k_i a_j is rounded UP to whole quanta.
2. Profile per stage (bounded knapsack, binary splitting): P_i(b) = least recompute time of stage
   i when its activations use at most b fine quanta.
3. Pooled mode: the stage DP (Alg. 2, over stages from the last to the first with the memory
   budget as state) works on coarse quanta Q = ratio * q with at most MAX_UNITS of them; a stage
   given B coarse quanta uses its profile at B * ratio fine quanta (one rounding per stage). The
   smallest bottleneck tau* whose per-stage budgets fit is the min-max of Alg. 2; then
   G_tau[t][B] = least sum_{i>=t} T_i with every T_i <= tau, and the 1F1B objective
   G_tau + (m - 1) tau is minimized over tau >= tau* in increasing order until the bound
   G_inf + (m - 1) tau cannot improve.
The result is exact (optimal for the instance) when q is exact, ratio is 1 and the tau loop ends
within the time budget; otherwise it is a feasible plan whose gap the stats and docs report.
Local mode needs no stage DP: each stage takes its own least-time profile point.
"""

from __future__ import annotations

import math
import time

import numpy as np

from wafopt.core.budget import SolveOptions
from wafopt.core.numeric import at_most, close, decimal_scale, exact, scaled, tolerance
from wafopt.core.result import SOLVER, Bound, MethodResult
from wafopt.costmodel.schedule import one_f_one_b
from wafopt.problems.recompute.certificate import bound as relaxation_bound
from wafopt.problems.recompute.evaluate import MEMORY_TOLERANCE, evaluate
from wafopt.problems.recompute.instance import RecomputeInstance
from wafopt.problems.recompute.plans import plan_of

MAX_UNITS = 2000         # coarse quanta of the pooled budget table (stage DP)
MAX_STAGE_UNITS = 50000  # fine quanta of one stage's knapsack table


# --- discretization ---------------------------------------------------------------------------


def quantize(inst: RecomputeInstance):
    """Fine quanta: (weights W[i][j], budget per stage, pooled budget, quantum q, exact?)."""
    useful = [s.inflight * s.layers * sum(u.mem for u in inst.units) for s in inst.stages]
    scale = decimal_scale([u.mem for u in inst.units] + [s.state for s in inst.stages]
                          + [s.capacity for s in inst.stages])
    if scale is not None:
        ints = [[s.inflight * scaled(u.mem, scale) for u in inst.units] for s in inst.stages]
        g = max(1, math.gcd(*[v for row in ints for v in row]))
        if max(useful) * scale / g <= MAX_STAGE_UNITS:
            spare_int = [scaled(s.capacity, scale) - scaled(s.state, scale) for s in inst.stages]
            W = [[v // g for v in row] for row in ints]
            return W, [v // g for v in spare_int], sum(spare_int) // g, g / scale, True
    q = max(max(useful), 1e-300) / MAX_STAGE_UNITS
    # rounded in exact arithmetic: weights up and budgets down, so every plan of the quanta fits
    qx = exact(q)
    spare = [exact(s.capacity) - exact(s.state) for s in inst.stages]
    W = [[math.ceil(s.inflight * exact(u.mem) / qx) for u in inst.units] for s in inst.stages]
    return W, [math.floor(v / qx) for v in spare], math.floor(sum(spare) / qx), q, False


# --- per-stage profile: bounded knapsack over kept layers ---------------------------------------


class StageProfile:
    """P(b): least recompute time of one stage with activations within b quanta, and its x."""

    def __init__(self, inst: RecomputeInstance, i: int, weights: list[int], size: int, ratio: int = 1):
        stage = inst.stages[i]
        self.layers = stage.layers
        self.weights = weights
        self.size = size = max(0, min(size, sum(w * stage.layers for w in weights)))
        values = [u.recompute for u in inst.units]
        total = sum(values[j] * stage.layers for j in range(len(weights)))
        eps = tolerance(stage.compute + total)   # time differences below this are float noise
        # binary splitting of y_j in 0..L into items of 1, 2, 4, ... layers kept
        self.items: list[tuple[int, int]] = []  # (unit, count)
        for j in range(len(weights)):
            left, c = stage.layers, 1
            while left > 0:
                take = min(c, left)
                self.items.append((j, take))
                left -= take
                c *= 2
        kept = np.zeros(size + 1)          # best kept recompute value within b quanta
        self.take = np.zeros((len(self.items), size + 1), dtype=bool)
        for t, (j, c) in enumerate(self.items):
            w, v = weights[j] * c, values[j] * c
            if v <= 0:
                continue  # keeping a unit that is free to recompute never helps
            if w == 0:
                kept += v
                self.take[t, :] = True
                continue
            if w > size:
                continue
            cand = kept[:size + 1 - w] + v
            better = cand > kept[w:] + eps
            self.take[t, w:] = better
            kept[w:] = np.where(better, cand, kept[w:])
        self.ratio = ratio
        fine_time = stage.compute + np.maximum(total - kept, 0.0)   # T_i(b), b in fine quanta
        coarse = -(-size // ratio)  # budgets beyond ceil(size / ratio) coarse quanta change nothing
        self.time = fine_time[np.minimum(np.arange(coarse + 1) * ratio, size)]  # T_i(B), coarse
        # budgets where T_i strictly drops (the only ones a budget DP needs), coarse and fine
        drops = np.flatnonzero(np.diff(self.time) < -eps) + 1
        self.breakpoints = np.concatenate(([0], drops)).astype(int)
        self.fine_time = fine_time
        self.fine_drops = np.flatnonzero(np.diff(fine_time) < -eps) + 1

    def x(self, b: int) -> list[int]:
        """x_ij of the profile point with b coarse quanta (unit-wise recomputed layers)."""
        return self.x_fine(min(b * self.ratio, self.size))

    def x_fine(self, b: int) -> list[int]:
        """x_ij of the profile point with b fine quanta."""
        kept = [0] * len(self.weights)
        for t in range(len(self.items) - 1, -1, -1):
            j, c = self.items[t]
            if self.take[t, b]:
                kept[j] += c
                b -= self.weights[j] * c
        return [self.layers - y for y in kept]

    def min_budget(self, tau: float) -> int | None:
        """beta(tau): the least budget with T_i <= tau, None if none."""
        ok = np.flatnonzero(self.time <= tau + tolerance(tau))
        return int(ok[0]) if len(ok) else None


# --- the stage DP (Alg. 2) ---------------------------------------------------------------------


def stage_dp(profiles: list[StageProfile], budget: int, tau: float):
    """G_tau over stages last to first; returns (least sum of stage times, budgets per stage) or None."""
    p = len(profiles)
    G = np.zeros(budget + 1)
    choice = []
    eps = tolerance(sum(float(prof.time.max()) for prof in profiles))   # float noise of the sums
    for t in range(p - 1, -1, -1):
        prof = profiles[t]
        beta = prof.min_budget(tau)
        if beta is None:
            return None
        new = np.full(budget + 1, np.inf)
        arg = np.full(budget + 1, -1, dtype=np.int64)
        points = prof.breakpoints[prof.breakpoints >= beta]
        if beta not in points:
            points = np.concatenate(([beta], points))
        for b in points:
            b = int(b)
            if b > budget:
                break
            cand = prof.time[b] + G[:budget + 1 - b]
            better = cand < new[b:] - eps
            new[b:] = np.where(better, cand, new[b:])
            arg[b:] = np.where(better, b, arg[b:])
        G = new
        choice.append(arg)
        if not np.isfinite(G[budget]):
            return None
    choice.reverse()
    spent, rest = [], budget
    for t in range(p):
        b = int(choice[t][rest])
        spent.append(b)
        rest -= b
    return float(G[budget]), spent


def spend_leftover(profiles: list[StageProfile], fine: list[int], total: int, m: int) -> list[int]:
    """Stage budgets in fine quanta after the coarse stage DP, which leaves up to ratio - 1 fine
    quanta of every stage and of the pooled total unused: spend them on further drops of stage
    times, the largest objective gain per quantum first. The objective never increases."""
    fine = list(fine)
    times = [float(prof.fine_time[f]) for prof, f in zip(profiles, fine)]
    left = total - sum(fine)
    while left > 0:
        # a change of one stage time moves the 1F1B objective (workload.schedule.one_f_one_b) by
        # its own change plus (m - 1) times the change of the largest stage time
        order = np.argsort(times)
        top, second = times[order[-1]], (times[order[-2]] if len(times) > 1 else -math.inf)
        best = None
        for i, prof in enumerate(profiles):
            k = int(np.searchsorted(prof.fine_drops, fine[i], side="right"))
            if k == len(prof.fine_drops) or prof.fine_drops[k] - fine[i] > left:
                continue
            f = int(prof.fine_drops[k])
            after = float(prof.fine_time[f])
            others = second if i == order[-1] else top
            gain = (times[i] - after) + (m - 1) * (top - max(others, after))
            if gain > 0 and (best is None or gain / (f - fine[i]) > best[0]):
                best = (gain / (f - fine[i]), i, f, after)
        if best is None:
            break
        _, i, f, after = best
        left -= f - fine[i]
        fine[i], times[i] = f, after
    return fine


def dp_solve(inst: RecomputeInstance, budget_s: float = 0.8):
    """The dp plan with facts about its exactness, or None when no plan fits."""
    started = time.monotonic()
    if inst.shortfall():
        return None
    nothing = plan_of([[0] * len(inst.units) for _ in inst.stages])
    if evaluate(inst, nothing).feasible:   # every stage at its least time: optimal, no DP needed
        return nothing, {"quantum": None, "exact_quantum": True, "ratio": 1, "tau_candidates_tried": 0,
                         "enumeration_complete": True, "exact": True, "nothing_recomputed": True}
    W, budgets, total, q, exact_quantum = quantize(inst)
    p = len(inst.stages)
    m = inst.microbatches
    stats = {"quantum": q, "exact_quantum": exact_quantum}
    if inst.mode == "local":
        profiles = [StageProfile(inst, i, W[i], budgets[i]) for i in range(p)]
        x = [profiles[i].x(budgets[i]) for i in range(p)]
        stats.update(coarse_quantum=q, ratio=1, tau_candidates_tried=0, enumeration_complete=True,
                     exact=exact_quantum)
        return plan_of(x), stats
    stage_cap = [sum(w * inst.stages[i].layers for w in W[i]) for i in range(p)]
    total = max(0, min(total, sum(stage_cap)))
    ratio = max(1, math.ceil(total / MAX_UNITS))
    profiles = [StageProfile(inst, i, W[i], min(total, stage_cap[i]), ratio) for i in range(p)]
    fine_total = total
    total //= ratio  # coarse quanta from here on
    stats.update(coarse_quantum=q * ratio, ratio=ratio)
    values = np.unique(np.concatenate([prof.time for prof in profiles]))
    # tau*: the smallest bottleneck whose least per-stage budgets fit (the min-max of Alg. 2)

    def fits(tau):
        need = [prof.min_budget(tau) for prof in profiles]
        return all(b is not None for b in need) and sum(need) <= total

    lo, hi = 0, len(values) - 1
    if not fits(values[hi]):
        return None  # rounding made it infeasible although full recomputation fits
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(values[mid]):
            hi = mid
        else:
            lo = mid + 1
    free = stage_dp(profiles, total, math.inf)
    best = None
    tried, complete = 0, False
    for k in range(lo, len(values)):
        tau = float(values[k])
        if best is not None and at_most(best[0], free[0] + (m - 1) * tau):  # no tau above can improve
            complete = True
            break
        if tried and time.monotonic() - started > budget_s:
            break
        res = stage_dp(profiles, total, tau)
        tried += 1
        if res is None:
            continue
        times = [profiles[i].time[b] for i, b in enumerate(res[1])]
        obj = one_f_one_b(times, m)
        if best is None or not at_most(best[0], obj):
            best = (obj, res[1])
    else:
        complete = True
    fine = [min(b * ratio, prof.size) for prof, b in zip(profiles, best[1])]
    if ratio > 1:
        fine = spend_leftover(profiles, fine, fine_total, m)
    x = [prof.x_fine(f) for prof, f in zip(profiles, fine)]
    stats.update(tau_candidates_tried=tried, enumeration_complete=complete,
                 exact=exact_quantum and ratio == 1 and complete)
    return plan_of(x), stats


def dp_plan(inst: RecomputeInstance, budget_s: float = 0.8) -> dict | None:
    out = dp_solve(inst, budget_s)
    return out[0] if out else None


def budget_of(options: SolveOptions, default: float = 0.8) -> float:
    """The tau enumeration's budget: `default`, less when less is left of the run (0 on Ctrl-C)."""
    return min(default, options.search_seconds(default))


def solve_dp(inst: RecomputeInstance, options: SolveOptions) -> MethodResult:
    why = inst.shortfall()
    if why:
        return MethodResult(None, "infeasible", None, "dp", why)
    out = dp_solve(inst, budget_of(options))
    if out is None:
        return MethodResult(None, "unknown", None, "dp", "rounding the memory to quanta left no plan")
    plan, stats = out
    if stats.get("nothing_recomputed"):
        message = "no recomputation fits the memory: every stage at its least time (optimal)"
    else:
        message = (f"memory quantum {stats['quantum']:.6g} "
                   f"({'exact' if stats['exact_quantum'] else 'weights rounded up'}), stage DP on "
                   f"{stats['ratio']} quanta per step; tau enumeration "
                   f"{'complete' if stats['enumeration_complete'] else 'cut by the time budget'}; "
                   + ("exact: optimal for the instance" if stats["exact"] else "not exact"))
    options.incumbent(plan)
    return MethodResult(plan, "optimal" if stats["exact"] else "feasible", proven_bound(inst, plan, stats["exact"]),
                        "dp", message, stats)


def proven_bound(inst: RecomputeInstance, plan: dict, exact_dp: bool) -> Bound | None:
    """The memory relaxation (certify re-derives it); where the DP is exact and the relaxation
    leaves a gap, the DP's own proof instead: its plan's objective (a claim, like a solver's)."""
    certified = relaxation_bound(inst)
    if not exact_dp:
        return certified
    objective = evaluate(inst, plan).objective
    if certified is not None and close(certified.value, objective):
        return certified
    return Bound(objective, SOLVER, "dp")


# --- baselines ---------------------------------------------------------------------------------


def solve_uniform(inst: RecomputeInstance, options: SolveOptions) -> MethodResult:
    """Megatron-style: one set of units recomputed in every layer of every stage.

    Among the 2^n unit sets, the one with the least iteration time for which every stage fits its
    own DRAM (no offloading); if no set fits locally, the instance's own memory rule is used.
    """
    why = inst.shortfall()
    if why:
        return MethodResult(None, "infeasible", None, "uniform", why)
    n = len(inst.units)
    if n > 20:
        return MethodResult(None, "unknown", None, "uniform", f"{n} units: too many unit sets")
    subsets = np.arange(2 ** n)
    bits = ((subsets[:, None] >> np.arange(n)[None, :]) & 1).astype(float)   # 1 = recomputed
    a = np.array([u.mem for u in inst.units])
    r = np.array([u.recompute for u in inst.units])
    kept_mem = (1 - bits) @ a
    rec_time = bits @ r
    L = np.array([s.layers for s in inst.stages], dtype=float)
    k = np.array([s.inflight for s in inst.stages], dtype=float)
    S = np.array([s.state for s in inst.stages])
    cap = np.array([s.capacity for s in inst.stages])
    T0 = np.array([s.compute for s in inst.stages])
    mem = S[None, :] + (k * L)[None, :] * kept_mem[:, None]
    times = T0[None, :] + L[None, :] * rec_time[:, None]
    obj = one_f_one_b(times, inst.microbatches)
    # the evaluator's capacity rule (wafopt.problems.recompute.evaluate.fits), vectorized
    local_ok = (mem <= cap + MEMORY_TOLERANCE * np.maximum(1.0, np.abs(cap))).all(axis=1)
    rule = "local capacity"
    ok = local_ok
    if not ok.any():
        ok = mem.sum(axis=1) <= cap.sum() + MEMORY_TOLERANCE * max(1.0, abs(cap.sum()))
        rule = "pooled capacity (no unit set fits every stage locally)"
    best = int(np.flatnonzero(ok)[np.argmin(obj[ok])])
    x = [[int(L[i]) if bits[best, j] else 0 for j in range(n)] for i in range(len(inst.stages))]
    names = [inst.units[j].name for j in range(n) if bits[best, j]]
    plan = plan_of(x)
    options.incumbent(plan)
    return MethodResult(plan, "feasible", None, "uniform",
                        f"recompute {{{', '.join(names)}}} in every layer; fits by {rule}")


def solve_full(inst: RecomputeInstance, options: SolveOptions) -> MethodResult:
    why = inst.shortfall()
    if why:
        return MethodResult(None, "infeasible", None, "full", why)
    return MethodResult(plan_of([[s.layers] * len(inst.units) for s in inst.stages]), "feasible",
                        None, "full", "every unit of every layer recomputed")


def solve_none(inst: RecomputeInstance, options: SolveOptions) -> MethodResult:
    return MethodResult(plan_of([[0] * len(inst.units) for _ in inst.stages]), "feasible", None,
                        "none", "no recomputation (the evaluator says whether it fits)")
