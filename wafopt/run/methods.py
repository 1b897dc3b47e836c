"""Which function solves `--method NAME` of each problem.

Every layer that owns methods publishes a table of references to them: the heuristics
(wafopt.heuristics.methods), the formulations (wafopt.models.methods), the exact models composed
with their heuristic starts and the GCMR chain (wafopt.compose.METHODS), and the joint planner
(wafopt.planner.METHODS). This module gathers them into one References mapping per problem, so a
method's module is imported only when it runs; `compare` runs a problem's DEFAULT_METHODS.
"""

from __future__ import annotations

from wafopt import compose, planner
from wafopt.core.errors import InstanceError
from wafopt.core.registry import PROBLEMS, References
from wafopt.heuristics import methods as heuristics
from wafopt.models import methods as formulations

LAYERS = (heuristics.METHODS, formulations.METHODS, compose.METHODS, planner.METHODS)

# problem -> method name -> its function, imported on first lookup
METHODS: dict[str, References] = {
    problem: References({name: ref for table in LAYERS for name, ref in table.get(problem, {}).items()})
    for problem in PROBLEMS}

CLUSTER_METHODS = ("megatron", "mg-wafer")   # the plan methods that apply to a cluster scenario
# the methods with no time limit of their own: without one they search until they prove their
# result (or their LP) optimal, which can take hours (the others stop by a default budget)
UNLIMITED_METHODS = ("milp", "cpsat", "bnb", "rlt1")

DEFAULT_METHODS = {
    "plan": ["megatron", "mg-wafer", "uniform", "gcmr"],
    "placement": ["serpentine", "local", "ga", "glb", "milp", "cpsat"],
    "recompute": ["milp", "cpsat", "dp", "uniform", "full"],
    "mem_pair": ["milp", "cpsat", "lp", "greedy"],
    "tatp": ["snake", "tiles", "ga", "cpsat", "milp"],
    "routing": ["xy", "tcme", "milp", "cpsat"],
}


def methods(problem: str) -> References:
    """name -> function of one problem (a function is imported when it is looked up)."""
    if problem not in METHODS:
        raise InstanceError(f"unknown problem {problem!r} (known: {', '.join(PROBLEMS)})", "problem")
    return METHODS[problem]


def method_function(problem: str, method: str):
    table = methods(problem)
    if method not in table:
        kernels = [p for p in PROBLEMS if p != problem and method in METHODS[p]] if problem == "plan" else []
        which = kernels[0] if len(kernels) == 1 else f"P (P one of {', '.join(kernels)})"
        hint = f"; {method} solves a kernel of the scenario: add --problem {which}" if kernels else ""
        raise InstanceError(f"unknown method {method!r} for problem {problem} "
                            f"(available: {', '.join(table)}){hint}", "--method")
    return table[method]
