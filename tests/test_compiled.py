"""The compiled kernels: the assignment problems are optimal from a cold and from any warm start
(and, rectangular, with tight dual potentials for the certificates), a problem's Frank-Wolfe
steps do not depend on its batch or on how they are chunked, more steps never lower the best
bound, a node's theta is Spectral.better_theta's, and a non-finite cost is refused instead of
looped on."""

from __future__ import annotations

from itertools import pairwise, permutations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wafopt.problems.placement import projected
from wafopt.problems.placement.assignment import (
    column_potentials,
    hungarian,
    sibling_assignment_columns,
)
from wafopt.problems.placement.compiled import assignment
from wafopt.problems.placement.projected import (
    Spectral,
    frank_wolfe,
    node_spectra,
    refitted,
)

PROPERTY = settings(max_examples=60, deadline=None, derandomize=True)


def solve(cost: np.ndarray, v: np.ndarray | None = None):
    m = len(cost)
    cols = np.full(m, -1, dtype=np.int64)
    potentials = np.zeros(m + 1) if v is None else v.copy()
    scratch = (np.empty(m + 1), np.empty(m + 1, dtype=np.int64), np.empty(m + 1, dtype=np.int64),
               np.empty(m + 1), np.empty(m + 1, dtype=bool))
    ok = assignment(np.ascontiguousarray(cost, dtype=float), cols, potentials, v is not None, *scratch)
    return ok, cols


def brute_min(cost: np.ndarray) -> float:
    m = len(cost)
    return min(sum(cost[i, p[i]] for i in range(m)) for p in permutations(range(m)))


@PROPERTY
@given(st.data())
def test_assignment_is_optimal_from_cold_and_any_warm_start(data):
    m = data.draw(st.integers(1, 6))
    entries = st.integers(-5, 5) if data.draw(st.booleans()) else st.floats(-1e3, 1e3, allow_nan=False)
    cost = np.array(data.draw(st.lists(entries, min_size=m * m, max_size=m * m)), dtype=float).reshape(m, m)
    warm = np.array(data.draw(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=m + 1, max_size=m + 1)))
    for v in (None, warm):
        ok, cols = solve(cost, v)
        assert ok
        assert sorted(cols) == list(range(m))
        assert np.isclose(cost[np.arange(m), cols].sum(), brute_min(cost), rtol=1e-9, atol=1e-6)


def test_a_non_finite_cost_is_refused_not_looped_on():
    cost = np.full((3, 3), np.nan)
    assert not solve(cost)[0]


@PROPERTY
@given(st.data())
def test_the_assignment_bound_from_hungarian_potentials_is_tight_and_proven(data):
    """projected._assignment_lower_float (Hungarian potentials): at most the minimum
    over permutations (and within rounding of it), and bound + rise[i, j] at most the minimum
    over the permutations taking i to j."""
    m = data.draw(st.integers(1, 5))
    k = data.draw(st.integers(1, 3))
    entries = st.integers(-50, 50) if data.draw(st.booleans()) else st.floats(-1e3, 1e3, allow_nan=False)
    low = np.array(data.draw(st.lists(entries, min_size=k * m * m, max_size=k * m * m)), dtype=float)
    low = low.reshape(k, m, m)
    bound, rise = projected._assignment_lower_float(low, fixing=True)
    for p in range(k):
        best = np.full((m, m), np.inf)
        for perm in permutations(range(m)):
            value = low[p][np.arange(m), perm].sum()
            best[np.arange(m), perm] = np.minimum(best[np.arange(m), perm], value)
        assert bound[p] <= best.min() and np.isclose(bound[p], best.min(), rtol=1e-9, atol=1e-6)
        assert np.all(rise[p] >= 0) and np.all(bound[p] + rise[p] <= best)


def random_problems(k: int, m: int, seed: int):
    rng = np.random.default_rng(seed)
    A = np.triu(rng.integers(0, 9, (k, m, m)), 1).astype(float)
    A = A + np.swapaxes(A, 1, 2)
    points = rng.integers(0, 4, (k, m, 2))
    B = np.abs(points[:, :, None, :] - points[:, None, :, :]).sum(axis=3).astype(float)
    L = rng.integers(0, 20, (k, m, m)).astype(float)
    return A, B, L, node_spectra(A, B)


def test_a_problems_steps_are_its_own_in_any_batch():
    A, B, L, spec = random_problems(5, 7, 3)
    together = frank_wolfe(A, B, L, spec.S, spec.T, 40)
    for i in range(5):
        alone = frank_wolfe(A[i:i + 1], B[i:i + 1], L[i:i + 1], spec.S[i:i + 1], spec.T[i:i + 1], 40)
        assert alone[0][0] == together[0][i]
        assert np.array_equal(alone[1][0], together[1][i])


def test_chunking_the_steps_changes_nothing(monkeypatch):
    A, B, L, spec = random_problems(3, 8, 4)
    whole = frank_wolfe(A, B, L, spec.S, spec.T, 150)
    monkeypatch.setattr(projected, "FW_CHUNK", 7)
    chunked = frank_wolfe(A, B, L, spec.S, spec.T, 150)
    assert np.array_equal(whole[0], chunked[0])
    assert np.array_equal(whole[1], chunked[1])


@pytest.mark.parametrize("pairwise_steps", [False, True])
def test_more_steps_never_lower_the_best_bound(pairwise_steps):
    A, B, L, spec = random_problems(6, 9, 5)
    bounds = [frank_wolfe(A, B, L, spec.S, spec.T, steps, pairwise=pairwise_steps)[0] for steps in (1, 5, 20, 80)]
    for fewer, more in pairwise(bounds):
        assert np.all(more >= fewer)
    assert np.any(bounds[-1] > bounds[0])


@PROPERTY
@given(st.data())
def test_pairwise_steps_keep_a_doubly_stochastic_point_and_a_valid_bound(data):
    """Pairwise steps move weight between atoms: the iterate stays doubly stochastic and
    nonnegative, its Frank-Wolfe bound never exceeds the best permutation, and a problem's steps
    are its own in any batch."""
    m = data.draw(st.integers(2, 6))
    A, B, L, spec = random_problems(3, m, data.draw(st.integers(0, 10 ** 6)))
    best, _, _, X, _ = frank_wolfe(A, B, L, spec.S, spec.T, 25, pairwise=True)
    assert np.all(X >= -1e-12)
    assert np.allclose(X.sum(axis=1), 1.0) and np.allclose(X.sum(axis=2), 1.0)
    for p in range(3):
        optimum = min(sum(A[p, i, j] * B[p, q[i], q[j]] for i in range(m) for j in range(m))
                      + sum(L[p, i, q[i]] for i in range(m)) for q in permutations(range(m)))
        assert best[p] <= optimum + 1e-7 * max(1.0, abs(optimum))
        alone = frank_wolfe(A[p:p + 1], B[p:p + 1], L[p:p + 1], spec.S[p:p + 1], spec.T[p:p + 1], 25, pairwise=True)
        assert alone[0][0] == best[p]


def test_pairwise_steps_beat_classic_ones_at_equal_steps():
    """On a fixed set of node-sized problems, 30 pairwise steps end with a higher mean best
    bound than 30 classic ones (they can step away from earlier vertices)."""
    A, B, L, spec = random_problems(8, 12, 7)
    classic = frank_wolfe(A, B, L, spec.S, spec.T, 30)[0]
    paired = frank_wolfe(A, B, L, spec.S, spec.T, 30, pairwise=True)[0]
    assert paired.mean() > classic.mean()


@PROPERTY
@given(st.data())
def test_sibling_assignments_warm_started_in_a_chain_are_each_optimal(data):
    """Problems one row short of square solved in a chain, each from the potentials of the one
    before it in its group (others from cold), with a barred (infinite) column as a node's kids
    have: each is optimal against brute force."""
    n = data.draw(st.integers(1, 4))
    m = n + data.draw(st.sampled_from([1, 1, 2]))
    groups = np.array(sorted(data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=5))))
    costs = np.array(data.draw(st.lists(st.integers(-9, 9), min_size=len(groups) * n * m,
                                        max_size=len(groups) * n * m)), dtype=float).reshape(-1, n, m)
    barred = data.draw(st.lists(st.integers(0, m - 1), min_size=len(groups), max_size=len(groups)))
    costs[np.arange(len(groups)), :, barred] = np.inf
    cols = sibling_assignment_columns(costs, groups)
    for cost, col in zip(costs, cols):
        best = min(sum(cost[i, p[i]] for i in range(n)) for p in permutations(range(m), n))
        assert len(set(col)) == n and cost[np.arange(n), col].sum() == best


@PROPERTY
@given(st.data())
def test_hungarian_on_rectangles_is_optimal_with_feasible_potentials(data):
    """The certificates' assignment (rows <= columns): optimal against brute force, and its
    potentials are dual feasible (v <= 0, u_i + v_k <= cost) and tight (they sum to the optimum)."""
    n = data.draw(st.integers(1, 5))
    m = data.draw(st.integers(n, 6))
    cost = np.array(data.draw(st.lists(st.integers(-9, 9), min_size=n * m, max_size=n * m)), dtype=float).reshape(n, m)
    col, u, v = hungarian(cost)
    best = min(sum(cost[i, p[i]] for i in range(n)) for p in permutations(range(m), n))
    assert len(set(col)) == n
    assert cost[np.arange(n), col].sum() == best
    assert np.all(v <= 0)
    assert np.all(u[:, None] + v[None, :] <= cost + 1e-9)
    assert np.isclose(u.sum() + v[col].sum(), best)


@PROPERTY
@given(st.data())
def test_column_potentials_of_a_batch_are_each_problems_own_and_tight(data):
    """The node QPBs' assignment problems in one compiled call: each problem's column potentials
    are hungarian's, and their Lagrangian value sum_i min_k (cost_ik - v_k) + sum_k v_k is its
    brute-force optimum."""
    m = data.draw(st.integers(1, 5))
    count = data.draw(st.integers(1, 4))
    costs = np.array(data.draw(st.lists(st.integers(-9, 9), min_size=count * m * m, max_size=count * m * m)),
                     dtype=float).reshape(count, m, m)
    v = column_potentials(costs)
    for cost, own in zip(costs, v):
        assert np.array_equal(own, hungarian(cost)[2])
        best = min(sum(cost[i, p[i]] for i in range(m)) for p in permutations(range(m)))
        assert np.isclose((cost - own[None, :]).min(axis=1).sum() + own.sum(), best)


def test_a_nodes_refitted_theta_is_the_one_maximizing_its_relaxation():
    """The compiled choice of theta at an iterate agrees with Spectral.better_theta (before its
    canonical form), and the refitted S, T are those of that theta."""
    A, B, L, spec = random_problems(6, 9, 6)
    X = frank_wolfe(A, B, L, spec.S, spec.T, 10)[3]
    refit = refitted(spec, X)
    flipped = 0
    for p in range(len(A)):
        one = Spectral(spec.alpha[p], spec.beta[p], spec.WA[p], spec.WB[p], np.ones(7))
        Y2 = np.square(one.WA.T @ X[p] @ one.WB)
        rows = np.cumsum(Y2.sum(axis=1)[::-1])[::-1][1:]
        cols = np.cumsum(Y2.sum(axis=0)[::-1])[::-1][1:]
        clear = np.abs(rows - cols) > 1e-9 * (rows + cols)       # not a tie up to rounding
        assert np.array_equal(refit.theta[p][clear], (rows > cols)[clear])
        theirs = one.with_theta(refit.theta[p])
        assert np.allclose(refit.S[p], theirs.S) and np.allclose(refit.T[p], theirs.T)
        flipped += int((refit.theta[p] == 0).sum())
    assert flipped > 0            # the refit moves theta away from all ones somewhere
