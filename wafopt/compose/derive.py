"""Kernel instances of a scenario, chained: the one place where one kernel's decision feeds the
derivation of another.

Each problem's `from_scenario` is pure and takes what it depends on as an input. The defaults
chosen here are deterministic and do not depend on machine speed, so a derived kernel is the same
bytes on every run:
- placement, recompute, tatp: the scenario alone (recompute on the canonical serpentine placement);
- mem_pair: the recompute decision of the GCMR DP (exact DP, no time limit) on that placement;
- routing: the rings of the `tiles` TATP mapping, run to completion without a deadline.
"""

from __future__ import annotations

import math

from wafopt.core.errors import InstanceError
from wafopt.problems import Loaded, problem_module


def kernel_of(scenario, problem: str, placement: dict | None = None, recompute: list | None = None,
              groups: list | None = None):
    """The `problem` kernel of a scenario; decisions not given get the documented defaults."""
    # heavy (the kernels' derivations and the heuristics behind their defaults): imported here so
    # that a command on a kernel instance, which never derives one, does not load them
    from wafopt.heuristics.recompute import dp_plan
    from wafopt.heuristics.tatp import tile_groups
    from wafopt.problems.mem_pair.instance import from_scenario as mem_pair_kernel
    from wafopt.problems.plan.layouts import default_placement
    from wafopt.problems.recompute.instance import from_scenario as recompute_kernel
    from wafopt.problems.recompute.instance import plan_recompute
    from wafopt.problems.routing.instance import from_scenario as routing_kernel
    from wafopt.problems.tatp.instance import from_scenario as tatp_kernel

    if problem == "recompute":
        return recompute_kernel(scenario, placement)
    if problem == "mem_pair":
        placement = placement if placement is not None else default_placement(scenario)
        if recompute is None:
            kernel = recompute_kernel(scenario, placement)
            x = dp_plan(kernel, budget_s=math.inf)
            if x is None:
                raise InstanceError(kernel.shortfall() or "no pooled recomputation fits the wafer DRAM")
            recompute = plan_recompute(scenario, x["x"])
        return mem_pair_kernel(scenario, placement, recompute)
    if problem == "routing":
        if groups is None:
            groups = tile_groups(tatp_kernel(scenario), math.inf)[0]
        return routing_kernel(scenario, groups)
    module = problem_module(problem)
    if not hasattr(module, "from_scenario"):
        raise InstanceError(f"problem {problem} cannot be derived from a scenario")
    return module.from_scenario(scenario)


def derive(loaded: Loaded, problem: str, **decisions) -> Loaded:
    """The kernel instance of `problem` derived from a scenario (`solve SCENARIO --problem X`)."""
    if problem == loaded.problem:
        return loaded
    if loaded.problem != "plan":
        raise InstanceError(f"--problem {problem} needs a scenario instance (problem: plan), "
                            f"this is problem: {loaded.problem}", loaded.path)
    problem_module(problem)  # an unknown problem fails with the list of known ones
    # heavy (the wafer and cluster presets): only a scenario's kernels need it
    from wafopt.hardware.cluster import require_mesh

    require_mesh(loaded.instance.wafer, f"--problem {problem}", loaded.path)
    try:
        kernel = kernel_of(loaded.instance, problem, **decisions)
    except InstanceError as exc:
        raise InstanceError(str(exc), loaded.path) from None
    return Loaded(loaded.path, problem, kernel, loaded.data, loaded.sha256, loaded.name,
                  None, derived_from=loaded.problem)
