"""Problem name -> its package, and the libraries a method loads before its clock starts.

The method tables (name -> function) belong to the layers that own the methods and are gathered
above them, in wafopt.run.methods.
"""

from __future__ import annotations

from importlib import import_module

from wafopt.core.errors import InstanceError

# problem name -> package holding schema.py (its Document), instance.py, evaluate.py and certificate.py
PROBLEMS = {
    "plan": "wafopt.problems.plan",
    "placement": "wafopt.problems.placement",
    "recompute": "wafopt.problems.recompute",
    "mem_pair": "wafopt.problems.mem_pair",
    "tatp": "wafopt.problems.tatp",
    "routing": "wafopt.problems.routing",
}


def problem_part(problem: str, part: str):
    """wafopt.problems.<problem>.<part> (instance, evaluate or certificate)."""
    if problem not in PROBLEMS:
        raise InstanceError(f"unknown problem {problem!r} (known: {', '.join(PROBLEMS)})", "problem")
    return import_module(f"{PROBLEMS[problem]}.{part}")


def problem_module(problem: str):
    """The instance module of a problem: OBJECTIVE, summary, from_scenario (its files are described
    by the problem's Document in `<problem>.schema`)."""
    return problem_part(problem, "instance")


# libraries a method imports when it runs (each takes 0.1-0.6 s to import the first time)
CP_SAT = ("ortools.sat.python.cp_model",)
PYOMO_HIGHS = ("pyomo.environ", "pyomo.contrib.appsi.solvers.highs", "highspy")
HIGHS = ("highspy",)
SCIPY = ("scipy.optimize",)
PYMOO = ("pymoo.algorithms.soo.nonconvex.ga", "pymoo.optimize")


def loads(*modules: str):
    """Mark a method with the libraries it imports. The runner imports them before it starts the
    clock, so a time limit and the reported time count the solve, not the loading."""
    def mark(fn):
        fn.libraries = modules
        return fn
    return mark


def load_libraries(fn) -> None:
    for module in getattr(fn, "libraries", ()):
        import_module(module)
