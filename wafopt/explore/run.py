"""The exploration: enumerate, then climb the fidelity ladder only where it can still change the answer.

Fidelities (per design and workload; wafopt.explore.fidelity):
- F0: the planner's certified lower bound on iteration time (valid for every plan);
- F1: a fast feasible plan, evaluated analytically (an upper bound on the analytic optimum);
- F2: the joint planner within a budget (a better plan, a tighter bound);
- F3: the simulator on F2's plan (the value a design is judged by).

The calibration gives epsilon, the largest relative error of the analytic model against the
simulator. Only one side of it matters: the simulator is never more than epsilon faster than the
analytic model, so a design's simulated value is at least (1 - epsilon) x its lower bound and at
least (1 - epsilon) x the analytic value of the plan F3 simulates. A design is pruned only when one
of those least values exceeds the best simulated value found: the optimum under F3 survives. (The
other side, the simulator slower than the model, is never relied on: on some wafers it exceeds
the calibration.) Designs climb in order of their bounds, in batches of a fixed size, so the work
done and the table do not depend on the number of workers.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from wafopt.core.numeric import at_most
from wafopt.explore import fidelity
from wafopt.explore.enumerate import Design, enumerate_designs
from wafopt.explore.space import LoadedSpace, LoadedWorkload
from wafopt.explore.store import Store, task_key

FIDELITIES = ("F0", "F1", "F2", "F3")
BATCH = 4  # designs per round of fine evaluation (fixed: results must not depend on workers)
FLUSH, FLUSH_S = 64, 10.0   # results are written to the store in groups this large, or this often


class OutOfTime(Exception):
    """The time limit passed before every task of a level had run (those that ran are stored)."""


@dataclass
class DesignState:
    design: Design
    bound: dict = field(default_factory=dict)      # workload -> lower bound on iteration time (s)
    upper: dict = field(default_factory=dict)      # workload -> analytic value of plans[workload]
    simulated: dict = field(default_factory=dict)  # workload -> simulated iteration time (s)
    plans: dict = field(default_factory=dict)      # workload -> best plan known (F1 or F2): F3 simulates it
    fidelity: str = ""
    status: str = "pending"                        # pending | infeasible | pruned (why) | evaluated
    why: str = ""


class Objective:
    """Designs are ranked by a cost to minimize, monotone in every workload's iteration time:
    the weighted geometric mean of iteration times (throughput), divided by the wafer's DRAM
    capacity for `capacity_x_throughput` (WATOS Fig. 25)."""

    def __init__(self, kind: str, workloads: list[LoadedWorkload]):
        self.kind = kind
        self.weights = {w.name: w.weight for w in workloads}

    def cost(self, design: Design, times: dict) -> float | None:
        if set(times) != set(self.weights) or any(t is None or not t > 0 for t in times.values()):
            return None
        total = sum(self.weights.values())
        mean = math.exp(sum(self.weights[k] * math.log(t) for k, t in times.items()) / total)
        if self.kind == "capacity_x_throughput":
            return mean / (design.dies * design.dram_gb)
        return mean

    def label(self) -> str:
        return ("iteration time (s, weighted geometric mean over workloads)" if self.kind == "throughput"
                else "iteration time / wafer DRAM capacity (s/GB; lower is better)")


class Explorer:
    def __init__(self, loaded: LoadedSpace, workloads: list[LoadedWorkload], evaluate: Callable[[dict], dict],
                 epsilon: float, store: Store | None = None, budget_s: float = 30.0, seed: int = 0,
                 workers: int = 0, scheduler: str | None = None, time_limit: float | None = None,
                 progress: Callable[[str, dict], None] | None = None):
        self.space = loaded.space
        self.workloads = workloads
        self.evaluate = evaluate
        self.epsilon = epsilon
        self.store = store or Store(None)
        self.budget_s = budget_s
        self.seed = seed
        self.workers = workers
        self.scheduler = scheduler
        self.deadline = None if time_limit is None else time.monotonic() + time_limit
        self.progress = progress or (lambda level, info: None)
        self.objective = Objective(self.space.objective, workloads)
        self.evaluations = {f: 0 for f in FIDELITIES}     # evaluations run (cached ones not counted)
        self.requested = {f: 0 for f in FIDELITIES}       # evaluations the run needed (cached or run)
        self.seconds = {f: 0.0 for f in FIDELITIES}       # wall time per level
        self.cpu = {f: 0.0 for f in FIDELITIES}           # CPU time of its evaluations (as they report it)
        self._client = None

    # ---- running tasks ------------------------------------------------------------------------
    def _run(self, fidelity: str, items: list[tuple[DesignState, LoadedWorkload, dict | None]],
             tick: Callable[[int], None] | None = None) -> list[dict]:
        """Evaluate (design, workload) tasks at one fidelity, through the store; in order. Results
        are stored as they come (a killed run keeps them); `tick(n)` counts the tasks done."""
        tasks, keys, todo = [], [], []
        budget = self.budget_s if self.deadline is None else min(self.budget_s, max(0.0, self.left()))
        for state, wl, plan in items:
            design = state.design.to_dict()
            task = {"fidelity": fidelity, "design": design, "workload": {"name": wl.name, "data": wl.data},
                    "budget": budget, "seed": self.seed, "plan": plan}
            key = task_key(design, wl.sha + (json.dumps(plan, sort_keys=True) if plan else ""), fidelity,
                           budget if fidelity == "F2" else None)
            tasks.append(task)
            keys.append(key)
            if self.store.get(key) is None:
                todo.append(len(tasks) - 1)
        done = len(tasks) - len(todo)
        self.requested[fidelity] += len(tasks)
        if tick:
            tick(done)
        pending, flushed = [], time.monotonic()
        started = time.perf_counter()
        try:
            for k, result in self._map([tasks[i] for i in todo]):
                i = todo[k]
                pending.append((keys[i], items[i][0].design.id, items[i][1].name, fidelity, result))
                self.evaluations[fidelity] += 1
                self.cpu[fidelity] += result.get("cpu_s", 0.0)
                done += 1
                if len(pending) >= FLUSH or time.monotonic() - flushed > FLUSH_S:
                    self.store.put_many(pending)
                    pending, flushed = [], time.monotonic()
                if tick:
                    tick(done)
        finally:
            self.store.put_many(pending)
            self.seconds[fidelity] += time.perf_counter() - started
        results = [self.store.get(k) for k in keys]
        if any(r is None for r in results):
            raise OutOfTime
        return results

    def _map(self, tasks: list[dict]):
        """(index, result) of each task, in the order they finish; none started after the time
        limit (a task started before it runs to its end, the planner's within its budget)."""
        if not tasks:
            return
        if self.workers == 0 and self.scheduler is None:
            for k, task in enumerate(tasks):
                if self.expired():
                    return
                yield k, self.evaluate(task)
            return
        from distributed import as_completed

        client = self._dask()
        futures = client.map(self.evaluate, tasks, pure=False)
        index = {f.key: k for k, f in enumerate(futures)}
        timeout = None if self.deadline is None else max(0.0, self.left())
        try:
            for future, result in as_completed(futures, with_results=True, timeout=timeout):
                yield index[future.key], result
        except TimeoutError:
            return
        finally:
            client.cancel(futures)   # an interrupted run leaves nothing running on the cluster

    def _dask(self):
        if self._client is None:
            from distributed import Client, LocalCluster

            if self.scheduler:
                self._client = Client(self.scheduler)
            else:
                cluster = LocalCluster(n_workers=max(1, self.workers), threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=50)
                self._client = Client(cluster)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            cluster = getattr(self._client, "cluster", None)
            self._client.close()
            if cluster is not None and not self.scheduler:
                cluster.close()
            self._client = None

    def left(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.monotonic()

    def expired(self, ahead: float = 0.0) -> bool:
        """Past the time limit, or within `ahead` seconds of it."""
        return self.deadline is not None and time.monotonic() + ahead > self.deadline

    # ---- the ladder ---------------------------------------------------------------------------
    def lower(self, s: DesignState) -> float | None:
        return self.objective.cost(s.design, s.bound)

    def _tell(self, level: str, states: list[DesignState], done: int, total: int, best=None,
              best_cost: float = math.inf, open_: list[DesignState] | None = None, ordered: bool = True) -> None:
        """Progress of a fidelity level: tasks done of total, designs pruned so far, designs still
        in play (`open_`, in order of bound unless not `ordered`), the best so far and the least
        bound of the designs that could still beat it."""
        open_ = states if open_ is None else open_
        bounds = [self.lower(s) for s in (open_[:1] if ordered else open_)]
        self.progress(level, {"done": done, "total": total,
                              "pruned": sum(s.status in ("pruned", "infeasible") for s in states),
                              "remaining": len(open_),
                              "best": best.design.id if best is not None else None,
                              "best_value": best_cost if best is not None else None,
                              "bound": min((x for x in bounds if x is not None), default=None),
                              "epsilon": self.epsilon})

    def run(self, exhaustive: bool = False) -> dict:
        started = time.perf_counter()
        designs, counts = enumerate_designs(self.space)
        states = [DesignState(d) for d in designs]
        self.progress("enumerate", {"counts": counts})
        n = len(self.workloads)

        # F0: a certified lower bound for every design and workload
        pairs = [(s, w, None) for s in states for w in self.workloads]
        try:
            bounds = self._run("F0", pairs, lambda k: self._tell("F0", states, k, len(pairs)))
        except OutOfTime:   # the designs cannot even be ordered: every one remains
            for s in states:
                s.status, s.why = "remaining", "not bounded within the time limit"
            return self.report(states, counts, None, math.inf, states, time.perf_counter() - started)
        for (s, w, _), r in zip(pairs, bounds):
            if r["feasible"]:
                s.bound[w.name] = r["bound"]
            else:
                s.status, s.why = "infeasible", f"{w.name}: {r['note']}"
            s.fidelity = "F0"
        live = [s for s in states if s.status != "infeasible"]
        live.sort(key=lambda s: (self.lower(s), s.design.id))
        self._tell("F0", states, len(pairs), len(pairs), open_=live)

        # F1 to F3 in order of bound, a batch of designs at a time, until no design left can beat
        # the best simulated value
        eps = self.epsilon
        best: DesignState | None = None
        best_cost = math.inf
        queue = list(live)
        stopped, longest = False, 0.0
        total, done = len(queue) * n, {"F1": 0, "F2": 0, "F3": 0}

        def beaten(s: DesignState, value: float | None) -> bool:   # value: a least cost of s
            return not exhaustive and value is not None and (1 - eps) * value > best_cost

        def tick(level):
            return lambda k, base=done[level]: self._tell(level, states, base + k, total, best, best_cost, queue)

        while queue:
            if beaten(queue[0], self.lower(queue[0])):
                for s in queue:
                    s.status, s.why = "pruned", f"{s.fidelity}: its bound is above the best design's value"
                queue = []
                break
            if self.expired(longest):   # start no batch that would end past the time limit
                stopped = True
                break
            batch, queue = queue[:BATCH], queue[BATCH:]
            batch_started = time.monotonic()
            try:
                best, best_cost = self._batch(batch, best, best_cost, beaten, done, tick)
            except OutOfTime:   # the batch's designs still open remain
                queue = [s for s in batch if s.status not in ("infeasible", "pruned")] + queue
                stopped = True
                break
            longest = max(longest, time.monotonic() - batch_started)
            self._tell("F3", states, done["F3"], total, best, best_cost, queue)
        remaining = [s for s in queue] if stopped else []
        for s in remaining:
            s.status, s.why = "remaining", "not evaluated within the time limit"
        # a design left without a plan could still be the optimum: the run proves nothing about it
        remaining += [s for s in states if s.status == "no plan" and (1 - eps) * self.lower(s) <= best_cost]
        for level in ("F1", "F2", "F3"):
            self._tell(level, states, done[level], done[level], best, best_cost, remaining, ordered=False)
        return self.report(states, counts, best, best_cost, remaining, time.perf_counter() - started)

    def _batch(self, batch: list[DesignState], best, best_cost: float, beaten, done: dict, tick):
        """F1 to F3 for one batch of designs; the best design and its cost after it."""
        batch = [s for s in batch if not self._prune(s, beaten(s, self.lower(s)), "bound")]
        pairs = [(s, w, None) for s in batch for w in self.workloads]
        for (s, w, _), r in zip(pairs, self._run("F1", pairs, tick("F1"))):
            if not r["feasible"]:   # the tightened bound proves that no layout fits
                s.status, s.why = "infeasible", f"{w.name}: {r['note']}"
            self._take(s, w, r, "F1")
        done["F1"] += len(pairs)
        batch = [s for s in batch if s.status != "infeasible"
                 and not self._prune(s, beaten(s, self.lower(s)), "tightened bound")]
        pairs = [(s, w, None) for s in batch for w in self.workloads]
        for (s, w, _), r in zip(pairs, self._run("F2", pairs, tick("F2"))):
            self._take(s, w, r, "F2")
        done["F2"] += len(pairs)
        # F3 simulates these plans: a design whose plans cannot simulate below the best is done
        batch = [s for s in batch if not self._prune(s, beaten(s, self.lower(s)), "tightened bound")
                 and not self._prune(s, beaten(s, self.planned(s)), "plan's analytic value")]
        pairs = [(s, w, s.plans[w.name]) for s in batch for w in self.workloads if w.name in s.plans]
        for (s, w, _), r in zip(pairs, self._run("F3", pairs, tick("F3"))):
            if r["feasible"]:
                s.simulated[w.name] = r["value"]
            s.fidelity = "F3"
        done["F3"] += len(pairs)
        for s in batch:
            cost = self.objective.cost(s.design, s.simulated)
            if cost is None:   # some workload has no plan (none found in the budget) or no simulation
                s.status, s.why = "no plan", "no plan found or simulated for every workload"
                continue
            s.status = "evaluated"
            if cost < best_cost or (cost == best_cost and best and s.design.id < best.design.id):
                best, best_cost = s, cost
        return best, best_cost

    def _prune(self, s: DesignState, beaten: bool, what: str) -> bool:
        if beaten:
            s.status, s.why = "pruned", f"{s.fidelity}: its {what} is above the best design's value"
        return beaten

    def _take(self, s: DesignState, w: LoadedWorkload, r: dict, fidelity: str) -> None:
        """A plan (kept when better than the one known: F3 simulates it) and a tightened bound."""
        if r["feasible"] and r["value"] is not None and r.get("plan") is not None \
                and r["value"] < s.upper.get(w.name, math.inf):
            s.upper[w.name], s.plans[w.name] = r["value"], r["plan"]
        if r.get("bound") is not None:
            s.bound[w.name] = max(s.bound.get(w.name, 0.0), r["bound"])
        s.fidelity = fidelity

    def planned(self, s: DesignState) -> float | None:
        """The cost of the plans F3 would simulate (never above their analytic values), when every
        workload has one: their simulated cost is at least (1 - epsilon) x this."""
        if any(w.name not in s.plans for w in self.workloads):
            return None
        return self.objective.cost(s.design, s.upper)

    # ---- results ------------------------------------------------------------------------------
    def coarse(self, s: DesignState) -> float | None:
        """The best analytic estimate of a design: its best plan's value, else its bound."""
        return self.objective.cost(s.design, {**s.bound, **s.upper})

    def report(self, states, counts, best, best_cost, remaining, seconds) -> dict:
        rows = []
        for s in sorted(states, key=lambda s: (self.objective.cost(s.design, s.simulated) or math.inf,
                                               self.lower(s) or math.inf, s.design.id)):
            rows.append({"design": s.design.id, "compute": s.design.compute, "rows": s.design.rows,
                         "cols": s.design.cols, "die_mm": [s.design.die_w_mm, s.design.die_h_mm],
                         "die_tflops": s.design.die_tflops, "dram_gb": s.design.dram_gb,
                         "dram_tbps": s.design.dram_tbps, "link_tbps": s.design.link_tbps,
                         "bound": self.lower(s), "analytic": self.objective.cost(s.design, s.upper),
                         "value": self.objective.cost(s.design, s.simulated), "fidelity": s.fidelity,
                         "status": s.status, "why": s.why})
        evaluated = [s for s in states if self.objective.cost(s.design, s.simulated) is not None]
        front = self.pareto_front(evaluated)
        out = {"objective": self.objective.label(), "epsilon": self.epsilon,
               "best": None if best is None else {"design": best.design.id, "value": best_cost,
                                                  "design_spec": best.design.to_dict()},
               "counts": {**counts, "after F0 (feasible)": sum(s.status != "infeasible" for s in states)},
               "evaluations": dict(self.evaluations), "needed": dict(self.requested), "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
               "cpu_seconds": {k: round(v, 3) for k, v in self.cpu.items()},
               "remaining": [s.design.id for s in remaining],
               "proven": best is not None and not remaining and self.within_epsilon(states),
               "model_error": self.model_error(states),
               "table": rows, "pareto": front, "s_curve": self.s_curve(states, best_cost),
               "workloads": len(self.workloads), "time_s": round(seconds, 3)}
        if remaining and best is not None:
            out["confidence"] = self.confidence(best_cost, remaining)
        return out

    def model_error(self, states) -> dict:
        """Simulated against analytic value of the same plans, as the run measured them: the
        pruning holds only while the simulator is never more than epsilon faster."""
        errors = [s.simulated[w] / s.upper[w] - 1 for s in states for w in s.simulated if s.upper.get(w)]
        return {"count": len(errors), "largest_under": min(errors, default=0.0), "largest_over": max(errors, default=0.0)}

    def within_epsilon(self, states) -> bool:
        e = self.model_error(states)
        return at_most(-e["largest_under"], self.epsilon)

    def pareto_front(self, evaluated: list[DesignState]) -> list[str]:
        """Designs no other beats in both simulated value and wafer DRAM capacity."""
        pts = [(self.objective.cost(s.design, s.simulated), -s.design.dies * s.design.dram_gb, s.design.id)
               for s in evaluated]
        front = []
        for v, c, i in sorted(pts):
            if not front or c < front[-1][1]:
                front.append((v, c, i))
        return [i for _, _, i in front]

    def s_curve(self, states, best_cost: float, errors=None) -> list[dict]:
        """For assumed model errors e, how many designs could still be the optimum under the rule
        the pruning uses, which relies on one side of the error only (the simulator at most e faster
        than the model): a simulated design when its value is the best; any other feasible design
        when (1 - e) x its least estimate (its bound, or the analytic value of the plans F3 would
        simulate) is not above the best simulated value. A proven run counts 1 (and ties) at its
        epsilon; the grid holds epsilon itself."""
        grid = errors if errors is not None else sorted({round(float(x), 3) for x in np.linspace(0.0, 0.5, 51)}
                                                        | {round(self.epsilon, 6)})
        simulated, least = 0, []
        for s in states:
            if s.status == "infeasible":
                continue
            cost = self.objective.cost(s.design, s.simulated)
            if cost is not None:
                simulated += at_most(cost, best_cost)
            elif self.lower(s) is not None:
                least.append(max(self.lower(s), self.planned(s) or 0.0))
        return [{"error": e, "potentially_optimal": simulated + sum(at_most((1 - e) * c, best_cost) for c in least)}
                for e in grid]

    def confidence(self, best_cost: float, remaining: list[DesignState], samples: int = 2000) -> dict:
        """P(the best found design is optimal), by Monte Carlo over the remaining candidates with
        relative errors drawn from the calibration's empirical error distribution."""
        errors = np.asarray(fidelity.calibration_errors() or [self.epsilon, -self.epsilon])
        rng = np.random.default_rng(self.seed)
        est = np.array([self.coarse(s) for s in remaining], dtype=float)
        draws = est[None, :] * (1 + rng.choice(errors, size=(samples, len(est))))
        p = float(np.mean(np.all(draws >= best_cost, axis=1)))
        return {"probability_best_is_optimal": p, "samples": samples,
                "remaining": [{"design": s.design.id, "estimate": c} for s, c in zip(remaining, est)]}


def explore(loaded: LoadedSpace, evaluate: Callable[[dict], dict] | None = None, exhaustive: bool = False,
            epsilon: float | None = None, **kw) -> dict:
    """Run an exploration; `evaluate` and `epsilon` default to the planner/simulator fidelities and
    the calibrated epsilon (wafopt.explore.fidelity)."""
    explorer = Explorer(loaded, fidelity.load_workloads(loaded), evaluate or fidelity.evaluate,
                        fidelity.epsilon() if epsilon is None else epsilon, **kw)
    try:
        return explorer.run(exhaustive)
    finally:
        explorer.close()
