"""Which function solves `--method NAME` of each problem.

Every layer that owns methods publishes a table of references to them: the heuristics
(wafopt.heuristics.methods), the formulations (wafopt.models.methods), the exact models composed
with their heuristic starts and the GCMR chain (wafopt.compose.methods), and the joint planner
(wafopt.planner.METHODS). This module gathers them; `compare` runs a problem's DEFAULT_METHODS.
"""

from __future__ import annotations

from wafopt import planner
from wafopt.compose import methods as composed
from wafopt.core.errors import InstanceError
from wafopt.core.registry import PROBLEMS
from wafopt.heuristics import methods as heuristics
from wafopt.models import methods as formulations

LAYERS = (heuristics.METHODS, formulations.METHODS, composed.METHODS, planner.METHODS)

METHODS: dict[str, dict] = {problem: {name: fn for table in LAYERS for name, fn in table.get(problem, {}).items()}
                            for problem in PROBLEMS}

CLUSTER_METHODS = ("megatron", "mg-wafer")   # the plan methods that apply to a cluster scenario

DEFAULT_METHODS = {
    "plan": ["megatron", "mg-wafer", "uniform", "gcmr"],
    "placement": ["serpentine", "local", "ga", "glb", "milp", "cpsat"],
    "recompute": ["milp", "cpsat", "dp", "uniform", "full"],
    "mem_pair": ["milp", "cpsat", "lp", "greedy"],
    "tatp": ["snake", "tiles", "ga", "cpsat", "milp"],
    "routing": ["xy", "tcme", "milp", "cpsat"],
}


def methods(problem: str) -> dict:
    """name -> function of one problem."""
    if problem not in METHODS:
        raise InstanceError(f"unknown problem {problem!r} (known: {', '.join(PROBLEMS)})", "problem")
    return METHODS[problem]


def method_function(problem: str, method: str):
    table = methods(problem)
    if method not in table:
        raise InstanceError(f"unknown method {method!r} for problem {problem} "
                            f"(available: {', '.join(table)})", "--method")
    return table[method]
