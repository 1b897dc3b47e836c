"""`wafopt explore`: which wafer to build, with pruning that keeps the optimum."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from wafopt.core.errors import InstanceError
from wafopt.core.workers import default_workers
from wafopt.explore.report import render
from wafopt.explore.run import explore as run_exploration
from wafopt.explore.space import load_space
from wafopt.explore.store import Store
from wafopt.present.exploration import plot_exploration


@dataclass
class Exploration:
    """The exploration's result (its JSON)."""

    result: dict

    def text(self) -> str:
        """The funnel, the best designs and the bounds as text."""
        return render(self.result)

    def plot(self, directory: str | Path) -> list[Path]:
        """Write funnel.png, pareto.png and s-curve.png into `directory`; returns their paths."""
        return list(plot_exploration(self.result, directory))


def explore(space: str | Path, exhaustive: bool = False, store: str | Path | None = None,
            workers: int | None = None, scheduler: str | None = None, budget: float = 20.0,
            time_limit: float | None = None, seed: int = 0, epsilon: float | None = None,
            progress: Callable[[str, dict], None] | None = None) -> Exploration:
    """Explore a design space. `store`: SQLite store of evaluations (resume, no repeated work);
    `workers`: Dask local workers (default one per core, 0 runs here) or an existing `scheduler`;
    `budget`: planner seconds per F2 evaluation; `epsilon`: the model error to prune with (default
    calibrated); `progress(level, info)` as levels advance."""
    loaded = load_space(space)
    for name, v in (("budget", budget), ("time_limit", time_limit)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise InstanceError(f"must be a positive number of seconds, got {v}", "--" + name.replace("_", "-"))
    if epsilon is not None and not (math.isfinite(epsilon) and 0 <= epsilon < 1):
        raise InstanceError(f"must be a model error in [0, 1), got {epsilon}", "--epsilon")
    workers = default_workers(workers)
    if workers < 0:
        raise InstanceError(f"must be >= 0, got {workers}", "--workers")
    opened = Store(store) if store else None
    try:
        result = run_exploration(loaded, exhaustive=exhaustive, epsilon=epsilon, store=opened, budget_s=budget,
                                 seed=seed, workers=workers, scheduler=scheduler, time_limit=time_limit,
                                 progress=progress)
    finally:
        if opened is not None:
            opened.close()
    return Exploration(result)
