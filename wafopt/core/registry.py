"""The registries: problem name -> its package, and method names -> "module:function" strings.

Methods are named by strings and resolved at call time, so a problem's schema never imports the
solvers and heuristics that solve it (the layers stay one-way).
"""

from __future__ import annotations

from importlib import import_module

from wafopt.core.errors import InstanceError

# problem name -> package holding instance.py (schema, METHODS), evaluate.py and certificate.py
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
    """The schema module of a problem: parse, METHODS, DEFAULT_METHODS, OBJECTIVE, summary."""
    return problem_part(problem, "instance")


def methods(problem: str) -> dict[str, str]:
    return problem_module(problem).METHODS


def resolve(target: str):
    """'package.module:function' -> the function."""
    module, _, name = target.partition(":")
    return getattr(import_module(module), name)


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


def method_function(problem: str, method: str):
    table = methods(problem)
    if method not in table:
        raise InstanceError(f"unknown method {method!r} for problem {problem} "
                            f"(available: {', '.join(table)})", "--method")
    return resolve(table[method])
