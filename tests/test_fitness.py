"""The fast Eq. 2 objective's swap deltas against full re-evaluation, and descent on tiny instances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wafopt.core.budget import SolveOptions
from wafopt.heuristics.placement import base_descent, descend
from wafopt.problems import parse_instance
from wafopt.problems.placement.fitness import Fitness
from wafopt.run.runner import run


def placement(**fields):
    return parse_instance({"problem": "placement", **fields}, "test.yaml")


def directed(n, seed, density=0.6, integral=True):
    """Random asymmetric flows V[i][j] != V[j][i]."""
    rng = np.random.default_rng(seed)
    flows = []
    for i in range(n):
        for j in range(n):
            if i != j and rng.random() < density:
                flows.append([i, j, int(rng.integers(1, 20)) if integral else float(rng.uniform(0.1, 9.9))])
    return flows


# with and without Mem_pairs, empty slots (m > n) or none, integral and float volumes
CASES = {
    "no pairs, empty slots": dict(mesh={"rows": 3, "cols": 4, "faulty_dies": [[1, 2]]}, tile=[1, 1],
                                  flows=directed(7, 1)),
    "Mem_pairs": dict(mesh={"rows": 3, "cols": 4}, tile=[1, 1], flows=directed(7, 2),
                      pairs=[[0, 5, 3], [1, 6, 2], [2, 4, 7]]),
    "all slots used, tiles 1x2": dict(mesh={"rows": 4, "cols": 4}, tile=[1, 2], flows=directed(8, 3)),
    "tiles 2x2, faults, pairs": dict(mesh={"rows": 6, "cols": 6, "faulty_dies": [[0, 0], [5, 3]]},
                                     tile=[2, 2], flows=directed(5, 4), pairs=[[0, 4, 2]]),
    "float volumes": dict(mesh={"rows": 3, "cols": 3}, tile=[1, 1], flows=directed(6, 5, integral=False),
                          pairs=[[0, 5, 1.25]]),
}


def fitness(case):
    inst = placement(**CASES[case]).instance
    return Fitness(inst, inst.layouts[0])


def swapped(perm, r, s):
    q = perm.copy()
    q[r], q[s] = q[s], q[r]
    return q


@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_swap_delta_equals_full_reevaluation(case, data):
    fit = fitness(case)
    perm = np.array(data.draw(st.permutations(range(fit.m))))
    r = data.draw(st.integers(0, fit.n - 1))
    s = data.draw(st.integers(0, fit.m - 1).filter(lambda s: s != r))
    after = swapped(perm, r, s)
    base_change = fit.base(after[None, :fit.n])[0] - fit.base(perm[None, :fit.n])[0]
    assert fit.swap_delta(perm, r, s) == pytest.approx(base_change, rel=1e-9, abs=1e-9)
    # the full objective changes by the base delta plus the change of the conflict penalty
    assert fit.one(after) - fit.one(perm) == pytest.approx(
        fit.swap_delta(perm, r, s) + fit.penalty(after[None, :fit.n])[0] - fit.penalty(perm[None, :fit.n])[0],
        rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("case", sorted(CASES))
def test_delta_table_stays_exact_while_swaps_are_applied(case):
    fit = fitness(case)
    rng = np.random.default_rng(7)
    table = fit.swaps(rng.permutation(fit.m))
    for _ in range(80):     # past SwapDeltas.REFRESH: float tables are rebuilt on the way
        delta = table.deltas()
        here = fit.base(table.perm[None, :fit.n])[0]
        for r in range(fit.n):
            for s in range(fit.m):
                if s <= r and s < fit.n:
                    assert delta[r, s] == np.inf
                    continue
                after = fit.base(swapped(table.perm, r, s)[None, :fit.n])[0]
                assert delta[r, s] == pytest.approx(after - here, rel=1e-9, abs=1e-9)
        r = int(rng.integers(fit.m))
        s = int(rng.integers(fit.m - 1))
        table.apply(r, s + (s >= r))
    assert sorted(table.perm) == list(range(fit.m))


def test_integer_data_use_exact_integer_deltas():
    assert fitness("no pairs, empty slots").exact_deltas
    assert fitness("no pairs, empty slots").swaps(np.arange(11)).M.dtype == np.int64
    assert not fitness("float volumes").exact_deltas


@pytest.mark.parametrize("case", sorted(CASES))
def test_descents_end_in_swap_local_optima(case):
    """No single swap improves the base objective after base_descent, nor the full objective after
    descend (brute force over all swaps); descend never returns anything worse than its start."""
    fit = fitness(case)
    rng = np.random.default_rng(3)
    for _ in range(3):
        start = rng.permutation(fit.m)
        perm = base_descent(fit, start)
        here = fit.base(perm[None, :fit.n])[0]
        moves = [swapped(perm, r, s) for r in range(fit.n) for s in range(r + 1, fit.m)]
        assert min(fit.base(np.array(moves)[:, :fit.n])) >= here - 1e-9
        perm, value = descend(fit, start, cycles=False)
        assert value == pytest.approx(fit.one(perm)) and value <= fit.one(start) + 1e-9
        moves = [swapped(perm, r, s) for r in range(fit.n) for s in range(r + 1, fit.m)]
        assert min(fit(np.array(moves))) >= value - 1e-9


@pytest.mark.parametrize("method", ["local", "ga"])
def test_two_stages_on_two_slots(method):
    """No reversal or 3-cycle exists with two stages: the descent must not fail on an empty move list."""
    lo = placement(mesh={"rows": 1, "cols": 2}, tile=[1, 1], flows=[[0, 1, 3.0], [1, 0, 1.0]])
    result = run(lo, method, SolveOptions(quiet=True, time_limit=1.0, seed=0))
    assert result.plan is not None and result.objective == 4.0
