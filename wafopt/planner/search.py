"""The joint planner's search (`--method plan`): search the layout, compose the kernels per layout,
improve the best plans globally, and certify how far the result is from the best plan of the space.

1. Bounds first: every choice of the space (wafopt.planner.space: layout and micro-batch size)
   gets its certified lower bound (quick_bound, full_bound, lp_bound, raised where they are least
   by the policy of tighten), or is infeasible with the reason (WATOS Alg. 1's early pruning made
   exact). A first plan comes from the Megatron baseline on the least-bound layouts (a fraction of
   a second), so a short run still ends with a plan.
2. Layouts in order of bound, in waves of WAVE: a layout whose bound is not below the incumbent is
   pruned; the others are composed by the kernels (compose.py), locally, on a process pool or on a
   Dask cluster (parallel.py). The incumbent changes only between waves, so a run gives the same
   result with any number of workers.
3. A global improvement phase (ga.py): pymoo over whole plans with WATOS's operators Op1-Op5 and a
   layout change, seeded from the best composed plans.
4. The plan-level bound is the least bound over the layouts not proven infeasible; its certificate
   (certificate.py) lists every layout with its bound, and `wafopt certify` re-derives them from
   the scenario.
"""

from __future__ import annotations

import time
from importlib.metadata import version

from wafopt.core.budget import SolveOptions
from wafopt.core.numeric import at_most, close, relative_gap
from wafopt.core.registry import PYOMO_HIGHS, SCIPY, loads
from wafopt.core.result import CERTIFICATE, Bound, MethodResult
from wafopt.heuristics.megatron import solve_megatron
from wafopt.planner.certificate import KIND, certificate_data
from wafopt.planner.compose import fixed_scenario
from wafopt.planner.ga import improve
from wafopt.planner.layout_data import LayoutBound
from wafopt.planner.parallel import executor
from wafopt.planner.space import key_name, layout_choices, plan_key
from wafopt.planner.tighten import plan_bound, space_bounds, tighten, upgrade
from wafopt.problems import evaluate

DEFAULT_BUDGET_S = 60.0   # the planner's budget without --time-limit
LAYOUT_S = 30.0           # at most this per layout composition
WAVE = 4                  # layouts composed between two incumbent updates (fixed: same result for any workers)
GA_SHARE = 0.25           # of the budget, kept for the global improvement phase
FIRST_PLAN_LAYOUTS = 8    # least-bound layouts tried for a quick first plan
FIRST_PLAN_SHARE = 0.05   # of the budget, at most, for it

SOLVED, OPTIMAL, NO_PLAN, PRUNED, INFEASIBLE, TIMED_OUT = (
    "solved", "optimal for its layout", "no plan found", "pruned by bound", "infeasible", "timed out")


class LayoutSearch:
    """The run's state: the layout bounds, what became of each layout, the incumbent, convergence."""

    def __init__(self, scenario, options: SolveOptions, bounds: list[LayoutBound]):
        self.scenario, self.options = scenario, options
        self.started = time.monotonic()
        self.bounds = bounds
        self.index = {b.key(): k for k, b in enumerate(bounds)}
        self.status: dict = {}          # layout -> (status, note)
        self.outcomes: dict = {}        # layout -> compose.Composition
        self.first: dict = {}           # layout -> (objective, how) of the quick first plan
        self.improved: dict = {}        # layout -> (objective, how) of the best plan offered on it
        self.objective: float | None = None
        self.plan: dict | None = None
        self.best_layout = None
        self.convergence: list[list] = []
        self.bound: float | None = None
        self.update_bound()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def update_bound(self) -> None:
        best = plan_bound(self.bounds)
        self.bound = best.value if best else None

    def record(self) -> None:
        self.convergence.append([round(self.elapsed(), 3), self.objective, self.bound])

    def offer(self, plan: dict, objective: float, key, how: str) -> bool:
        """Take the plan if it is better (ties: the smaller layout key, so the order in which a
        wave's layouts finish does not matter)."""
        if self.objective is not None and (objective, key) >= (self.objective, self.best_layout):
            return False
        self.improved[key] = (objective, how)    # the layout's row shows its best plan
        self.objective, self.plan, self.best_layout = objective, plan, key
        self.options.incumbent(plan, self.certificate())
        self.record()
        gap = relative_gap(objective, self.bound)
        self.options.progress(f"plan: {objective:.6g} s ({key_name(key)}, {how})"
                              + (f", bound {self.bound:.6g}, gap {100 * gap:.3g}%" if gap is not None else ""),
                              force=True)
        return True

    def certificate(self) -> Bound | None:
        if self.bound is None:
            return None
        return Bound(self.bound, CERTIFICATE, KIND, certificate_data(self.bounds))

    def table(self) -> list[dict]:
        rows = []
        for b in self.bounds:
            status, note = self.status.get(b.key(), (INFEASIBLE, b.reason) if not b.feasible else (TIMED_OUT, ""))
            outcome = self.outcomes.get(b.key())
            objective = outcome.objective if outcome else None
            if objective is None and b.key() in self.first:   # its composition gave nothing better
                objective, how = self.first[b.key()]
                note = f"{note}; {how}" if note else how
            later, how = self.improved.get(b.key(), (None, ""))
            if later is not None and (objective is None or (later < objective and not close(later, objective))):
                objective, note = later, f"{note}; then {how}" if note else how
                if status == SOLVED and close(objective, b.value):
                    status = OPTIMAL
            rows.append({"layout": key_name(b.key()), "tp": b.layout.tp, "pp": b.layout.pp, "dp": b.layout.dp,
                         "interleave": b.layout.interleave, **({} if b.choice.micro_batch is None else {"micro_batch": b.choice.micro_batch}),
                         "bound": b.value, "bound_tier": b.tier + (" + LP" if b.refined else ""),
                         "objective": objective, "status": status, "note": note,
                         "seconds": round(outcome.seconds, 3) if outcome else None})
        order = {INFEASIBLE: 1}
        return sorted(rows, key=lambda r: (order.get(r["status"], 0), r["bound"] if r["bound"] is not None else 0.0,
                                           r["tp"], r["pp"], r["dp"], r["interleave"], r.get("micro_batch", 0)))

    def settle(self, key, outcome) -> None:
        if outcome is None:
            return   # left "timed out"
        self.outcomes[key] = outcome
        if outcome.objective is None:
            self.status[key] = (NO_PLAN, "; ".join(outcome.notes[:2]))
            return
        bound = self.bounds[self.index[key]].value
        self.status[key] = (OPTIMAL if close(outcome.objective, bound) else SOLVED, outcome.how)
        self.offer(outcome.plan, outcome.objective, key, outcome.how)

    def next_wave(self, stopped) -> list:
        """The next WAVE layouts in order of bound, each upgraded to the full bound first; prunes
        the layouts whose bound is not below the incumbent."""
        wave = []
        while len(wave) < WAVE and not stopped():
            before = self.bound
            tighten(self.scenario, self.bounds, stopped)
            self.update_bound()
            if self.bound != before:
                self.record()
            open_ = [k for k, b in enumerate(self.bounds)
                     if b.feasible and b.key() not in self.status and b.key() not in [w.key() for w in wave]]
            if not open_:
                break
            k = min(open_, key=lambda i: (self.bounds[i].value, self.bounds[i].key()))
            b = self.bounds[k]
            if self.objective is not None and at_most(self.objective, b.value):
                for i in open_:   # every open bound is at least this one
                    self.status[self.bounds[i].key()] = (PRUNED, f"bound {self.bounds[i].value:.6g} >= incumbent "
                                                                 f"{self.objective:.6g}")
                break
            if b.tier == "quick":
                upgrade(self.scenario, self.bounds, k)
                continue   # its full bound may change its rank, or prove it infeasible
            wave.append(b)
        return wave


@loads(*PYOMO_HIGHS, *SCIPY)
def solve_planner(scenario, options: SolveOptions, improve_globally: bool = True) -> MethodResult:
    """The method `plan` (see the module docstring); `improve_globally=False` leaves out the GA
    phase (the ablation's +M step)."""
    budget = options.search_seconds(DEFAULT_BUDGET_S)
    run = options.sub(budget)
    bounds = space_bounds(scenario, run.stopped)
    complete = len(bounds) == len(layout_choices(scenario))
    search = LayoutSearch(scenario, options, bounds)
    if options.warm_start:   # a given plan is the first incumbent (it prunes like any other)
        ev = evaluate("plan", scenario, options.warm_start)
        if ev.feasible:
            ws = options.warm_start
            search.offer(ws, ev.objective, plan_key(scenario, ws), "warm start")
    if search.plan is None:   # before tightening: a short limit still ends with this plan
        first_plan(scenario, bounds, search, run, FIRST_PLAN_SHARE * budget)
    tighten(scenario, bounds, run.stopped)   # full and LP bounds where the least bounds are
    search.update_bound()
    best = plan_bound(bounds)
    options.progress(f"plan: {len(bounds)} layouts, {sum(b.feasible for b in bounds)} not excluded by their "
                     f"model state; bound " + (f"{search.bound:.6g} s ({key_name(best.key())})" if best else "none"),
                     force=True)
    search.record()
    pool = executor(options, max(1, options.workers), options.scheduler) if best else None
    try:
        while not run.stopped():
            wave = search.next_wave(run.stopped)
            if not wave:
                break
            left = run.remaining()
            keep = GA_SHARE * budget if improve_globally and search.objective is not None else 0.0
            seconds = LAYOUT_S if left is None else max(0.0, min(LAYOUT_S, left - keep))
            if seconds <= 0.0:
                break
            pool.run(scenario, [b.choice for b in wave], options.seed, seconds,
                     lambda k, outcome, wave=wave: search.settle(wave[k].key(), outcome))
            options.progress(f"plan: {len(search.status)} of {sum(b.feasible for b in bounds)} layouts settled, "
                             f"{search.elapsed():.0f} s")
    finally:
        if pool is not None:
            pool.close()
    search.update_bound()
    ga_stats = {}
    if improve_globally and search.plan is not None and not run.stopped():
        ga_stats = improve(scenario, search, run, options.elite_share)
    search.record()
    certificate = search.certificate() if complete else None
    if search.plan is None:
        why = "no layout fits the wafer" if best is None else "no plan composed within the budget"
        return MethodResult(None, "unknown", certificate, _solver(), f"planner: {why}", _stats(search, ga_stats, budget))
    counts = _counts(search)
    message = (f"best layout {key_name(search.best_layout)}; {len(bounds)} layouts: "
               + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return MethodResult(search.plan, "feasible", certificate, _solver(), message, _stats(search, ga_stats, budget))


def first_plan(scenario, bounds: list[LayoutBound], search: LayoutSearch, run: SolveOptions, seconds: float) -> None:
    """Offer the Megatron baseline's plan (serpentine tiles; no recomputation, or full where memory
    forces it) of the first least-bound layout that has one. The waves compose these layouts
    properly later; until then the plan is the incumbent that short runs keep and pruning uses."""
    deadline = time.monotonic() + seconds
    ranked = sorted((b for b in bounds if b.feasible), key=lambda b: (b.value, b.key()))
    for b in ranked[:FIRST_PLAN_LAYOUTS]:
        if run.stopped() or time.monotonic() > deadline:
            return
        key = b.key()
        micro_batch = b.choice.micro_batch
        fixed = fixed_scenario(scenario, b.choice)
        result = solve_megatron(fixed, run.sub(max(0.0, deadline - time.monotonic())))
        if result.plan is None:
            continue
        plan = result.plan if micro_batch is None else dict(result.plan, micro_batch=micro_batch)
        ev = evaluate("plan", scenario, plan)
        if ev.feasible:
            search.first[key] = (ev.objective, "first plan: Megatron baseline")
            search.offer(plan, ev.objective, key, "Megatron baseline")
            return


def _counts(search: LayoutSearch) -> dict:
    out = {}
    for r in search.table():
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out


def _solver() -> str:
    return f"planner (pymoo {version('pymoo')})"


def _stats(search: LayoutSearch, ga_stats: dict, budget: float) -> dict:
    return {"candidates": search.table(), "convergence": search.convergence, "counts": _counts(search),
            "best_layout": key_name(search.best_layout) if search.best_layout else None,
            "budget_s": budget, "workers": search.options.workers, "ga": ga_stats}
