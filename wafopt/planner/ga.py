"""The global improvement phase: a pymoo GA over whole plans with WATOS's operators
(ga_operators), seeded from the best composed plans of the best layouts.

Fitness is the shared evaluator's iteration time. Seeded through pymoo's random_state; the run
ends after a fixed number of generations, STALL_GENERATIONS without a real improvement, or the
deadline, so equal seeds give equal plans.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from pymoo.algorithms.soo.nonconvex.ga import GA
from pymoo.core.callback import Callback
from pymoo.core.crossover import Crossover
from pymoo.core.mutation import Mutation
from pymoo.core.problem import Problem
from pymoo.core.sampling import Sampling
from pymoo.core.survival import Survival
from pymoo.core.termination import Termination
from pymoo.optimize import minimize

from wafopt.core.numeric import close
from wafopt.planner.ga_operators import (
    INFEASIBLE,
    OPERATORS,
    Plans,
    mutate,
    omega_survivors,
    recombine,
)
from wafopt.planner.space import plan_key

POP_SIZE = 12
GENERATIONS = 25
STALL_GENERATIONS = 8
SEED_LAYOUTS = 4     # layouts whose composed plans seed the population (Op0 draws from them)


@dataclass(eq=False)
class GAState:
    """What the GA's pymoo parts share: the plans' evaluator, the seed plans, the tallies."""
    plans: Plans
    layouts: list
    omega: float
    stopped: Callable[[], bool]
    counts: dict = field(default_factory=lambda: {f"op{k}": 0 for k in range(OPERATORS)} | {"repaired": 0, "dropped": 0})

    def __deepcopy__(self, memo):
        return self   # pymoo copies the algorithm: its parts must keep sharing this state


class WholePlans(Problem):
    """One variable, the plan itself; past the deadline a plan is not evaluated."""

    def __init__(self, shared: GAState):
        super().__init__(n_var=1, n_obj=1, vtype=object)
        self.shared = shared

    def _evaluate(self, X, out, *args, **kwargs):
        out["F"] = np.array([[INFEASIBLE if self.shared.stopped() else self.shared.plans.objective(x[0])] for x in X])


class Seeded(Sampling):
    """The seed plans, repeated to fill the population."""

    def __init__(self, shared: GAState):
        super().__init__()
        self.shared = shared

    def _do(self, problem, n_samples, random_state=None, **kwargs):
        layouts = self.shared.layouts
        X = np.empty((n_samples, 1), dtype=object)
        for k in range(n_samples):
            X[k, 0] = copy.deepcopy(layouts[k % len(layouts)])
        return X


class RecomputeCrossover(Crossover):
    """Op2 between the parents (same layout), else the first parent's copy."""

    def __init__(self, shared: GAState):
        super().__init__(2, 1)
        self.shared = shared

    def _do(self, problem, X, random_state=None, **kwargs):
        _, n_matings, _ = X.shape
        Y = np.empty((1, n_matings, 1), dtype=object)
        for k in range(n_matings):
            Y[0, k, 0] = recombine(self.shared.plans, X[0, k, 0], X[1, k, 0], random_state, self.shared.stopped)
            self.shared.counts["op2"] += 1
        return Y


class WatosMutation(Mutation):
    """One of Op0-Op6 per individual (ga_operators.mutate)."""

    def __init__(self, shared: GAState):
        super().__init__()
        self.shared = shared

    def _do(self, problem, X, random_state=None, **kwargs):
        shared = self.shared
        for k in range(len(X)):
            X[k, 0] = mutate(shared.plans, X[k, 0], shared.layouts, random_state, shared.counts, shared.stopped)
        return X


class OmegaSurvival(Survival):
    """The omega share of the best survive; binary tournaments fill the rest (WATOS omega)."""

    def __init__(self, shared: GAState):
        super().__init__(filter_infeasible=False)
        self.shared = shared

    def _do(self, problem, pop, *args, n_survive=None, random_state=None, **kwargs):
        return pop[omega_survivors(pop.get("F")[:, 0], n_survive, self.shared.omega, random_state)]


class Stop(Termination):
    """Ends the GA at the run's deadline."""

    def __init__(self, shared: GAState):
        super().__init__()
        self.shared = shared

    def _update(self, algorithm):
        return 1.0 if self.shared.stopped() else 0.0


class Track(Callback):
    """Offers each generation's best plan to the search; stops after GENERATIONS, or
    STALL_GENERATIONS without a real improvement."""

    def __init__(self, scenario, search):
        super().__init__()
        self.scenario, self.search = scenario, search
        self.stall, self.generations = 0, 0

    def notify(self, algorithm):
        self.generations += 1
        best = algorithm.opt[0]
        plan, value = best.X[0], float(best.F[0])
        before = self.search.objective
        offered = value < INFEASIBLE and self.search.offer(plan, value, plan_key(self.scenario, plan), "GA")
        if offered and (before is None or not close(value, before)):
            self.stall = 0   # a real improvement (float noise does not reset the stall count)
        else:
            self.stall += 1
        if self.stall >= STALL_GENERATIONS or self.generations >= GENERATIONS:
            algorithm.termination.force_termination = True


def improve(scenario, search, run, omega: float) -> dict:
    """GAState the GA from the best composed plans; offers every improvement to `search` (the
    planner's LayoutSearch: its outcomes, incumbent and offer())."""
    plans = Plans(scenario)
    seeds = sorted((o for o in search.outcomes.values() if o.plan is not None),
                   key=lambda o: (o.objective, o.layout))[:SEED_LAYOUTS]
    seeds = [o.plan for o in seeds]
    if search.plan is not None:
        seeds = [search.plan] + seeds
    if not seeds:
        return {}
    shared = GAState(plans, [plans.explicit(p) for p in seeds], omega, run.stopped)
    track = Track(scenario, search)
    algorithm = GA(pop_size=POP_SIZE, sampling=Seeded(shared), crossover=RecomputeCrossover(shared),
                   mutation=WatosMutation(shared), survival=OmegaSurvival(shared), eliminate_duplicates=False)
    minimize(WholePlans(shared), algorithm, Stop(shared), seed=int(search.options.seed) % (2 ** 32), callback=track,
             verbose=False)
    return {"generations": track.generations, "evaluations": len(plans.cache), "omega": omega,
            "operators": shared.counts}
