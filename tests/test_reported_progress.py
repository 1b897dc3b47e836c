"""Progress lines and statuses a user can believe (issue 21, items 6 and 7).

Progress lines are in the reported objective's units and meaning: the incumbent never rises, the
bound never falls nor exceeds the result, and the last incumbent is the result. A plan method on a
fixed layout carries the certified bound `certify` derives; an exact method is `optimal`.
"""

from __future__ import annotations

import re

import pytest

from wafopt.core.budget import SolveOptions
from wafopt.core.numeric import at_most, close
from wafopt.problems import load
from wafopt.run.certify import CERTIFIED, CLAIMED, certify
from wafopt.run.runner import run

LINE = re.compile(r"incumbent ([^,\s]+), bound ([^,\s]+)")


def solved_with_progress(instance: str, method: str, time_limit: float):
    """The solution and every progress line's (incumbent, bound), unthrottled, None for '-'."""
    options = SolveOptions(time_limit=time_limit, seed=0)
    lines: list[str] = []
    options.budget_.lines.reporter = lines.append
    options.budget_.lines.every = 0.0
    solution = run(load(instance), method, options)
    values = [tuple(None if v == "-" else float(v) for v in m.groups()) for m in map(LINE.search, lines) if m]
    return solution, values


@pytest.mark.parametrize("instance, method, limit", [
    ("instances/recompute/rc-g16s96l15u-pooled.yaml", "cpsat", 8),   # CP-SAT's scaled units, a constant left out
    ("instances/recompute/rc-example-local.yaml", "cpsat", 8),
    ("instances/placement/pl-sparse-24.yaml", "milp", 3),            # a base-objective model, Eq. 2 reported
    ("instances/placement/pl-sparse-12.yaml", "cpsat", 3),           # scaled, two phases, tile shapes
], ids=lambda v: str(v).split("/")[-1])
def test_progress_lines_are_in_the_reported_objective(at_root, instance, method, limit):
    solution, values = solved_with_progress(instance, method, limit)
    assert solution.objective is not None and values
    incumbents = [inc for inc, _ in values if inc is not None]
    bounds = [low for _, low in values if low is not None]
    assert incumbents and bounds
    assert close(incumbents[-1], solution.objective), (incumbents, solution.objective)
    assert all(at_most(b, a) for a, b in zip(incumbents, incumbents[1:])), incumbents   # never rises
    assert all(at_most(a, b) for a, b in zip(bounds, bounds[1:])), bounds               # never falls
    assert all(at_most(b, solution.objective) for b in bounds), (bounds, solution.objective)


def test_a_plan_method_on_a_fixed_layout_carries_the_certified_bound(tmp_path, at_root):
    solution = run(load("instances/plan/gpt3-175b-config3.yaml"), "gcmr", SolveOptions(quiet=True))
    assert solution.bound_provenance == "certificate" and solution.bound_kind == "compute-floor"
    assert 0 < solution.gap < 1 and solution.status == "feasible"
    report = certify(str(solution.write(tmp_path / "gcmr.json")))
    assert report.verdict == CERTIFIED, report.lines
    assert close(report.certified_bound, solution.bound)


def test_exact_dp_is_optimal(tmp_path, at_root):
    solution = run(load("instances/recompute/rc-example-local.yaml"), "dp", SolveOptions(quiet=True))
    assert solution.stats["exact"] and solution.status == "optimal" and solution.gap == 0
    # the memory relaxation leaves a gap here: the bound is the DP's proof, a claim certify names
    assert solution.bound_provenance == "solver" and solution.bound_kind == "dp"
    report = certify(str(solution.write(tmp_path / "dp.json")))
    assert report.verdict == CLAIMED and report.claimed_bound == solution.bound
    assert report.certified_bound < solution.objective   # memory-relaxation, computed by certify


def test_dp_on_coarse_quanta_is_feasible(at_root):
    solution = run(load("instances/recompute/rc-g16s96l15u-pooled-tight.yaml"), "dp", SolveOptions(quiet=True))
    assert not solution.stats["exact"] and solution.status == "feasible"
    assert solution.bound_provenance == "certificate" and solution.bound_kind == "memory-relaxation"
