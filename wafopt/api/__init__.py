"""The public Python API, and the only facade of the package: every `wafopt` command is one of
these functions, and the command line (wafopt.cli) only parses its arguments, calls them and
prints what they return through wafopt.present.

    import wafopt

    inst = wafopt.load("instances/placement/pl-sparse-12.yaml")
    result = wafopt.solve(inst, "cpsat", time_limit=20, seed=0)
    result.status, result.objective, result.bound.value, result.bound.provenance, result.gap

Every objective is recomputed by the shared evaluator from the plan; `status` is `optimal` only
when a proven bound agrees with it (one numeric rule, wafopt.core.numeric). Bad input raises
InstanceError naming the file or the option at fault.
"""

from importlib import import_module

from wafopt.api.comparing import (
    CompareJob,
    compare_jobs,
    compare_rows,
    compare_table,
    known_methods,
    missing_details,
)
from wafopt.api.instances import EXPORT_FORMATS, export, import_qaplib, schema, show
from wafopt.api.saving import SOLUTIONS_DIR, default_solution_name, save
from wafopt.api.solving import (
    Instance,
    Result,
    applicable,
    as_instance,
    certify,
    certify_file,
    check_warm_start,
    compare,
    default_methods,
    evaluate,
    load,
    options,
    prepare_method,
    read_plan,
    read_warm_start,
    run,
    runs_without_limit,
    solve,
    validate,
)
from wafopt.core.budget import SolveOptions
from wafopt.core.errors import (
    EXIT_INFEASIBLE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_NO_PLAN,
    EXIT_OK,
    NOT_STARTED,
    STARTUP_SIGINTS,
    InstanceError,
)
from wafopt.core.registry import PROBLEMS
from wafopt.core.result import Bound, Status
from wafopt.core.version import __version__
from wafopt.run.methods import methods

# The explorer, the simulator with its reports and the presets load on first use: importing them here
# would add to the start-up of every command (`wafopt --help` included).
_ON_FIRST_USE = {
    "wafopt.api.exploring": ("Exploration", "explore"),
    "wafopt.api.presets": ("presets",),
    "wafopt.api.scenarios": ("AblationRun", "Calibration", "FidelityRun", "SimulationRun", "ablation", "calibrate",
                             "fidelity", "scenario",
                             "simulate", "tatp_report", "workload"),
    "wafopt.simulate.engine": ("MemoryOverflow",),
}
_HOME = {name: module for module, names in _ON_FIRST_USE.items() for name in names}


def __getattr__(name: str):
    if name in _HOME:
        # kept here, so `presets` stays the function once its module (which the import binds here) is loaded
        globals()[name] = found = getattr(import_module(_HOME[name]), name)
        return found
    raise AttributeError(f"module 'wafopt.api' has no attribute {name!r}")


__all__ = [
    "AblationRun", "Bound", "Calibration", "CompareJob", "EXIT_INFEASIBLE", "EXIT_INTERNAL", "EXIT_INTERRUPTED", "NOT_STARTED", "STARTUP_SIGINTS",
    "EXIT_INVALID", "EXIT_NO_PLAN", "EXIT_OK", "EXPORT_FORMATS", "Exploration", "FidelityRun", "Instance",
    "InstanceError",
    "MemoryOverflow", "PROBLEMS", "Result", "SOLUTIONS_DIR", "SimulationRun", "SolveOptions", "Status",
    "__version__", "ablation", "applicable", "as_instance", "calibrate", "certify", "certify_file", "check_warm_start",
    "compare", "compare_jobs", "compare_rows", "compare_table", "default_methods", "default_solution_name",
    "evaluate", "explore", "export", "fidelity", "import_qaplib", "known_methods", "load", "methods", "missing_details",
    "options", "prepare_method", "presets", "read_plan", "read_warm_start", "run", "runs_without_limit", "save", "scenario",
    "schema", "show", "simulate", "solve", "tatp_report", "validate", "workload",
]
