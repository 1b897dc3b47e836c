"""What a method returns: a plan, a status, and a bound that says where it comes from."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum


class Status(str, Enum):
    OPTIMAL = "optimal"        # a bound that agrees with the evaluated objective (core.numeric)
    FEASIBLE = "feasible"      # a plan the evaluator accepts, optimality not proven
    INFEASIBLE = "infeasible"  # proven: no plan exists
    UNKNOWN = "unknown"        # no plan found in the budget

    def __str__(self) -> str:
        return self.value


STATUSES = tuple(s.value for s in Status)

# Where a bound comes from.
CERTIFICATE = "certificate"  # data that `certify` re-derives from the instance alone
SOLVER = "solver"            # a MILP / CP-SAT proof: certify reports it as the solver's claim
PROVENANCES = (CERTIFICATE, SOLVER)


@dataclass
class Bound:
    """A proven lower bound on the objective (evaluator units).

    provenance: CERTIFICATE or SOLVER. kind: what computed it (e.g. "gilmore-lawler", "rlt1-duals",
    "highs", "cp-sat"); for certificates it names the checker in
    `wafopt.problems.<problem>.certificate`. data: what that checker needs beyond the instance.
    """

    value: float
    provenance: str = SOLVER
    kind: str = ""
    data: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.provenance not in PROVENANCES:
            raise ValueError(f"bound provenance must be one of {PROVENANCES}, got {self.provenance!r}")
        self.value = float(self.value)
        if not math.isfinite(self.value):
            raise ValueError(f"a bound must be finite, got {self.value}")

    def to_dict(self) -> dict:
        return {"value": self.value, "provenance": self.provenance, "kind": self.kind, "data": self.data}

    @classmethod
    def of(cls, value, solver: str = "") -> "Bound | None":
        """A bound from what a method returned: a Bound, a number (the solver's claim), or None."""
        if value is None or isinstance(value, Bound):
            return value
        value = float(value)
        return cls(value, SOLVER, solver) if math.isfinite(value) else None


@dataclass
class MethodResult:
    plan: dict | None
    status: str                  # a method's claim; the runner settles it (core.numeric.settle_status)
    bound: Bound | float | None = None   # proven lower bound (evaluator units); a float is a solver claim
    solver: str = "heuristic"    # e.g. "highs 1.14.0", "cp-sat 9.15.6755", "pymoo 0.6.2"
    message: str = ""
    stats: dict = field(default_factory=dict)

    def __post_init__(self):
        self.status = str(self.status.value if isinstance(self.status, Status) else self.status)
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        self.bound = Bound.of(self.bound, self.solver)
