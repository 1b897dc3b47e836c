"""The runner: honest statuses and nothing lost on Ctrl-C."""

import sys

from wafopt.core.budget import SolveOptions
from wafopt.core.registry import loads
from wafopt.core.result import MethodResult
from wafopt.problems import load
from wafopt.run import runner

EXAMPLE = "instances/mem_pair/mp-example.yaml"


def test_ctrl_c_keeps_the_best_plan(monkeypatch, at_root):
    loaded = load(EXAMPLE)
    good = runner.run(loaded, "greedy", SolveOptions(quiet=True)).plan

    def interrupted_method(instance, options):
        options.incumbent(good, bound=10.0)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "method_function", lambda loaded, method: interrupted_method)
    sol = runner.run(loaded, "milp", SolveOptions(quiet=True))
    assert sol.plan == good and sol.status == "feasible" and sol.bound == 10.0
    assert sol.stats["interrupted"] and "Ctrl-C" in sol.message
    assert sol.objective == sol.evaluation["objective"] == 71


def test_ctrl_c_keeps_the_bound_a_method_returns_without_a_plan(monkeypatch, at_root):
    # a method stopped before its own plan (e.g. bnb while its start ran): the start's plan, which
    # reported no bound, and the method's bound, which holds for every plan
    loaded = load(EXAMPLE)
    good = runner.run(loaded, "greedy", SolveOptions(quiet=True)).plan

    def stopped_early(instance, options):
        options.incumbent(good)
        options.interrupted = True
        return MethodResult(None, "unknown", 12.0, "x")

    monkeypatch.setattr(runner, "method_function", lambda loaded, method: stopped_early)
    sol = runner.run(loaded, "milp", SolveOptions(quiet=True))
    assert sol.plan == good and sol.status == "feasible" and sol.bound == 12.0
    assert sol.objective == 71 and sol.stats["interrupted"]


def test_unproven_optimal_claim_is_downgraded(monkeypatch, at_root):
    loaded = load(EXAMPLE)
    plan = runner.run(loaded, "greedy", SolveOptions(quiet=True)).plan
    monkeypatch.setattr(runner, "method_function",
                        lambda loaded, method: lambda inst, opt: MethodResult(plan, "optimal", 50.0, "liar"))
    sol = runner.run(loaded, "milp", SolveOptions(quiet=True))
    assert sol.status == "feasible" and "exceeds the proven bound" in sol.message


def test_bound_meeting_the_objective_is_optimal(monkeypatch, at_root):
    loaded = load(EXAMPLE)
    plan = runner.run(loaded, "greedy", SolveOptions(quiet=True)).plan
    monkeypatch.setattr(runner, "method_function",
                        lambda loaded, method: lambda inst, opt: MethodResult(plan, "feasible", 71.0, "x"))
    assert runner.run(loaded, "milp", SolveOptions(quiet=True)).status == "optimal"


def test_rejected_plan_is_unknown(monkeypatch, at_root):
    loaded = load(EXAMPLE)
    monkeypatch.setattr(runner, "method_function",
                        lambda loaded, method: lambda inst, opt: MethodResult({"allocations": []}, "optimal", 0.0))
    sol = runner.run(loaded, "milp", SolveOptions(quiet=True))
    assert sol.status == "unknown" and sol.objective is None and "rejected" in sol.message


def test_declared_libraries_load_before_the_clock(monkeypatch, at_root, tmp_path):
    # a library that takes 1 s to import: declared with `loads`, it is neither part of the
    # reported time nor of the time limit
    (tmp_path / "slow_library_for_test.py").write_text("import time\ntime.sleep(1.0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = load(EXAMPLE)
    plan = runner.run(loaded, "greedy", SolveOptions(quiet=True)).plan
    seen = {}

    @loads("slow_library_for_test")
    def method(inst, options):
        import slow_library_for_test  # noqa: F401
        seen["remaining"] = options.remaining()
        return MethodResult(plan, "feasible", None, "x")

    monkeypatch.setattr(runner, "method_function", lambda loaded, name: method)
    sol = runner.run(loaded, "milp", SolveOptions(quiet=True, time_limit=5.0))
    assert "slow_library_for_test" in sys.modules
    assert sol.time_s < 0.9 and seen["remaining"] > 4.1
