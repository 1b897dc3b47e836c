"""The problems by name, and the libraries a method loads before its clock starts.

The method tables (name -> function) belong to the layers that own the methods and are gathered
above them, in wafopt.run.methods.
"""

from __future__ import annotations

from importlib import import_module

# problem name -> its package: schema.py (its Document), instance.py, evaluate.py, certificate.py
# (wafopt.problems lists their documents, instance modules and evaluators by reference)
PROBLEMS = {
    "plan": "wafopt.problems.plan",
    "placement": "wafopt.problems.placement",
    "recompute": "wafopt.problems.recompute",
    "mem_pair": "wafopt.problems.mem_pair",
    "tatp": "wafopt.problems.tatp",
    "routing": "wafopt.problems.routing",
}


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
