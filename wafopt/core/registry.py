"""The problems by name, tables that import what they name on first use (References), and the
libraries a method loads before its clock starts.

The method tables (name -> reference to a function) belong to the layers that own the methods and
are gathered above them, in wafopt.run.methods.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import Any

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


class References(Mapping):
    """A read-only mapping of keys to dotted references, `"package.module:attribute"` or
    `"package.module"` for a module, each imported on its first lookup and kept.

    Why: a command must import only what it uses; importing every method, schema and checker
    up front costs every command about half a second of start-up. Iterating the keys, `in` and
    `len` import nothing."""

    def __init__(self, references: Mapping[str, str]):
        self.references = dict(references)   # key -> dotted reference
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._loaded:
            module, _, attribute = self.references[key].partition(":")   # KeyError for an unknown key
            found = import_module(module)
            self._loaded[key] = getattr(found, attribute) if attribute else found
        return self._loaded[key]

    def __contains__(self, key: object) -> bool:
        return key in self.references

    def __iter__(self) -> Iterator[str]:
        return iter(self.references)

    def __len__(self) -> int:
        return len(self.references)

    def __repr__(self) -> str:
        return f"References({self.references!r})"


# libraries a method imports when it runs (each takes 0.1-0.6 s to import the first time)
CP_SAT = ("ortools.sat.python.cp_model",)
PYOMO_HIGHS = ("pyomo.environ", "pyomo.contrib.appsi.solvers.highs", "highspy")
HIGHS = ("highspy",)
SCIPY = ("scipy.optimize",)
PYMOO = ("pymoo.algorithms.soo.nonconvex.ga", "pymoo.optimize")


def loads(*modules: str, only_if=None):
    """Mark a method with the libraries it imports. The runner imports them before it starts the
    clock, so a time limit and the reported time count the solve, not the loading. With
    `only_if(instance)`: libraries the method uses on some instances only, loaded for those."""
    def mark(fn):
        fn.libraries = (*getattr(fn, "libraries", ()), (only_if, modules))
        return fn
    return mark


def load_libraries(fn, instance=None) -> None:
    """Import a method's libraries (loads), those it needs only on some instances where `instance`
    is one of them."""
    for only_if, modules in getattr(fn, "libraries", ()):
        if only_if is None or (instance is not None and only_if(instance)):
            for module in modules:
                import_module(module)
