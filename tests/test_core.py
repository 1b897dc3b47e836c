"""The core: one numeric rule, status settling, exact decimals, budgets, pure and picklable kernels."""

import itertools
import pickle
import time
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wafopt.compose.derive import derive
from wafopt.core import numeric
from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.core.result import Bound, MethodResult
from wafopt.problems import load

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "instances" / "plan").glob("*.yaml")) + \
    sorted(p for p in (ROOT / "instances" / "tatp").glob("*.yaml") if "problem: plan" in p.read_text())
KERNELS = ("placement", "recompute", "mem_pair", "tatp", "routing")


# ---- one tolerance rule -------------------------------------------------------------------------

def test_relative_rule_catches_small_tampering_on_tiny_objectives():
    objective = 5.123e-6  # a routing peak in seconds
    assert not numeric.close(objective, objective * (1 + 1e-3))
    assert numeric.close(objective, objective * (1 + 1e-9))
    assert numeric.close(40.57, 40.5699995)      # solver noise on a two-decimal optimum
    assert not numeric.close(113.0, 117.0)
    assert numeric.close(0.0, 0.0) and not numeric.close(0.0, 1e-9)


@given(st.floats(1e-9, 1e12), st.floats(-0.5, 0.5))
def test_relative_gap_follows_from_objective_and_bound(objective, rel):
    bound = objective * (1 - rel)
    gap = numeric.relative_gap(objective, bound)
    if numeric.close(objective, bound):
        assert gap == 0.0
    else:
        assert gap == pytest.approx(rel, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("claimed,objective,bound,feasible,expect", [
    ("optimal", 10.0, 10.0, True, "optimal"),
    ("optimal", 10.0, 9.0, True, "feasible"),        # a claim the bound does not support
    ("optimal", 10.0, None, True, "feasible"),
    ("feasible", 10.0, 10.0 - 1e-7, True, "optimal"),  # a bound that agrees proves optimality
    ("feasible", 10.0, 11.0, True, "feasible"),       # a bound above the objective is discarded
    ("infeasible", None, None, False, "infeasible"),
    ("feasible", None, 3.0, False, "unknown"),
    ("optimal", float("inf"), float("inf"), True, "unknown"),
    ("optimal", float("nan"), 1.0, True, "unknown"),
])
def test_settle_status_is_the_one_rule(claimed, objective, bound, feasible, expect):
    status, kept, _ = numeric.settle_status(claimed, objective, bound, feasible)
    assert status == expect
    if status == "optimal":
        assert kept <= objective
    if bound is not None and objective is not None and bound > objective * (1 + 1e-3):
        assert kept is None


def test_integral_bound_rounds_solver_noise_not_real_fractions():
    assert numeric.integral_bound(577.9999999) == 578
    assert numeric.integral_bound(578.0000001) == 578
    assert numeric.integral_bound(577.5) == 578
    assert numeric.integral_bound(577.01) == 578
    assert numeric.integral_bound(577.0001) == 577  # agrees with 577 under the one rule


# ---- exact decimals -----------------------------------------------------------------------------

def test_decimals_are_read_exactly_not_as_binary_fractions():
    assert numeric.exact(6.87) == Fraction(687, 100)
    assert numeric.exact(6.87 + 3.51) != Fraction(1038, 100)  # the float sum is not 10.38 ...
    assert numeric.decimal_scale([6.87, 3.51]) == 100            # ... so scale from the data itself
    assert numeric.scaled(40.57, 100) == 4057
    assert numeric.decimal_scale([1 / 3]) is None
    assert numeric.decimal_scale([0.125]) == 1000
    assert numeric.decimal_scale([2.0 ** 52] * 3, limit=2.0 ** 53, total=True) is None


@given(st.lists(st.decimals(min_value=0, max_value=10 ** 6, places=3, allow_nan=False), min_size=1, max_size=8))
def test_decimal_scale_makes_every_value_an_exact_integer(values):
    floats = [float(v) for v in values]
    scale = numeric.decimal_scale(floats)
    assert scale is not None and scale <= 1000
    for v, f in zip(values, floats):
        assert numeric.scaled(f, scale) == int(v * scale)


# ---- results and budgets ------------------------------------------------------------------------

def test_bounds_carry_provenance_and_refuse_non_finite_values():
    assert MethodResult(None, "unknown", 3.0, "highs 1.14.0").bound == Bound(3.0, "solver", "highs 1.14.0")
    with pytest.raises(ValueError):
        Bound(float("nan"))
    with pytest.raises(ValueError):
        Bound(1.0, "trust me")
    assert MethodResult(None, "unknown", float("inf")).bound is None
    with pytest.raises(ValueError):
        MethodResult(None, "solved")


def test_nested_budgets_share_the_deadline_and_the_interrupt():
    options = SolveOptions(time_limit=5.0).start()
    inner = options.sub(100.0)
    assert inner.remaining() <= options.remaining() + 1e-3  # never more than the run has left
    short = options.sub(0.5)
    assert short.remaining() <= 0.5
    options.interrupted = True
    assert inner.stopped() and short.stopped() and inner.interrupted
    assert SolveOptions().remaining() is None and SolveOptions().search_seconds(7.0) == 7.0


def test_progress_lines_hold_back_the_latest_and_release_it(monkeypatch):
    """At most one line a second across nested solves; the held-back line is the latest and is
    shown once its second has passed, so a run never ends showing a stale state."""
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    shown = []
    options = SolveOptions(quiet=False)
    options.budget_.lines.reporter = shown.append
    inner = options.sub(quiet=False)
    options.progress("first")
    inner.progress("second")                 # within the second: held
    inner.progress("third")                  # replaces it
    options.budget_.lines.release_held()
    assert shown == ["  .. first"]
    clock[0] += 1.0
    options.budget_.lines.release_held()
    assert shown == ["  .. first", "  .. third"]
    options.budget_.lines.release_held()     # nothing held any more
    clock[0] += 5.0
    options.sub().progress("never")          # a nested solve is quiet unless asked
    assert len(shown) == 2


# ---- kernels: pure, deterministic, picklable -----------------------------------------------------

def test_every_instance_and_derived_kernel_pickles(tmp_path):
    paths = sorted(p for p in (ROOT / "instances").rglob("*.yaml"))
    assert len(paths) > 50
    for path in paths:
        loaded = load(path)
        again = pickle.loads(pickle.dumps(loaded))
        assert again.problem == loaded.problem, path
        assert again.module.summary(again.instance) == loaded.module.summary(loaded.instance), path


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_kernel_derivation_is_deterministic_and_speed_independent(scenario, monkeypatch):
    loaded = load(scenario)
    if loaded.instance.parallel is None:
        pytest.skip("no fixed layout")
    first = {problem: _derived_bytes(loaded, problem) for problem in KERNELS}
    # a "machine" whose clock runs 1000x faster: any deadline inside a derivation would cut it short
    real = time.monotonic
    ticks = itertools.count()
    monkeypatch.setattr(time, "monotonic", lambda: real() + 1000.0 * next(ticks))
    for problem in KERNELS:
        assert _derived_bytes(load(scenario), problem) == first[problem], problem


def _derived_bytes(loaded, problem: str) -> bytes:
    """The pickled kernel, or the message of the error that says it cannot be derived."""
    try:
        return pickle.dumps(derive(loaded, problem).instance)
    except InstanceError as exc:
        return str(exc).encode()


def test_writing_into_a_pipe_keeps_the_pipe(tmp_path):
    # a solution written to a device or a pipe (--out /dev/stdout) goes into it; the atomic
    # rename of a regular file would replace the device with a plain file
    import os
    import stat
    import threading

    from wafopt.core.files import write_text

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_text()))
    reader.start()
    write_text(pipe, '{"a": 1}\n')
    reader.join(10)
    assert received == ['{"a": 1}\n'] and stat.S_ISFIFO(pipe.stat().st_mode)
    plain = write_text(tmp_path / "sub" / "plain.json", "x\n")   # a regular file: atomic, no leftovers
    assert plain.read_text() == "x\n" and [p.name for p in plain.parent.iterdir()] == ["plain.json"]
