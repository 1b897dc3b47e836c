"""wafopt: exact and heuristic optimization of LLM training layouts on wafer-scale chips.

The public API (wafopt.api): `load`, `solve`, `compare`, `evaluate`, `certify`, and the result
types `Result`, `Status`, `Bound`. Imported lazily so that `import wafopt` stays cheap.
"""

from wafopt.core.version import __version__

_API = ("load", "solve", "compare", "evaluate", "certify", "Result", "Instance")
_CORE = {"Status": "wafopt.core.result", "Bound": "wafopt.core.result", "InstanceError": "wafopt.core.errors"}
__all__ = [*_API, *_CORE, "__version__"]


def __getattr__(name):
    from importlib import import_module

    if name in _API:
        return getattr(import_module("wafopt.api"), name)
    if name in _CORE:
        return getattr(import_module(_CORE[name]), name)
    raise AttributeError(f"module 'wafopt' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))   # the lazily loaded names too (tab completion)
