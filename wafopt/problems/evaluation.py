"""The shared evaluator: one function per problem family, recomputing everything from the plan.

`evaluate(problem, instance, plan)` dispatches to `wafopt.evaluate.<problem>.evaluate`. Every
solver and heuristic output passes through here; reported objectives come only from it.
A malformed plan is never an exception: it is an infeasible Evaluation naming what is wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Evaluation:
    objective: float | None   # minimized everywhere; None when the plan cannot be scored
    feasible: bool
    violations: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)  # problem-specific figures (JSON-serializable)
    malformed: bool = False   # the plan could not be read at all (bad input, not an infeasible plan)

    def __post_init__(self):
        # valid input gives a finite objective; an overflow or NaN is never a plan to report
        if self.objective is not None and not math.isfinite(self.objective):
            self.violations.append(f"the objective is not a finite number ({self.objective})")
            self.feasible = False

    def to_dict(self) -> dict:
        return {"objective": self.objective, "feasible": self.feasible,
                "violations": list(self.violations), "details": self.details}
