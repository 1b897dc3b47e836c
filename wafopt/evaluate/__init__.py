"""The shared evaluator: one function per problem family, recomputing everything from the plan.

`evaluate(problem, instance, plan)` dispatches to `wafopt.evaluate.<problem>.evaluate`. Every
solver and heuristic output passes through here; reported objectives come only from it.
A malformed plan is never an exception: it is an infeasible Evaluation naming what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module


@dataclass
class Evaluation:
    objective: float | None   # minimized everywhere; None when the plan cannot be scored
    feasible: bool
    violations: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)  # problem-specific figures (JSON-serializable)

    def to_dict(self) -> dict:
        return {"objective": self.objective, "feasible": self.feasible,
                "violations": list(self.violations), "details": self.details}


class PlanError(Exception):
    """Raised inside evaluators for a plan whose structure cannot be read; becomes a violation."""


def evaluate(problem: str, instance, plan) -> Evaluation:
    module = import_module(f"wafopt.evaluate.{problem}")
    if not isinstance(plan, dict):
        return Evaluation(None, False, [f"plan must be a mapping, got {type(plan).__name__}"])
    try:
        return module.evaluate(instance, plan)
    except PlanError as exc:
        return Evaluation(None, False, [f"malformed plan: {exc}"])
    except (TypeError, KeyError, IndexError, ValueError) as exc:  # structure the evaluator did not expect
        return Evaluation(None, False, [f"malformed plan: {type(exc).__name__}: {exc}"])
