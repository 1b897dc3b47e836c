"""The projected eigenvalue bound at branch-and-bound nodes, proven in floats: the eigenvalue
enclosures hold the exact spectrum, the bound is never above the brute-force optimum of a node
(faults, Mem_pairs, tile shapes), bnb with it proves the optimum, its tree certifies only through
the checker's own PBs, and the waves give one answer."""

from __future__ import annotations

import copy
import json
from itertools import permutations
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_helpers import integer_instances, loaded
from wafopt.models import placement_bnb
from wafopt.models.placement_bnb import bnb

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import CertificateError
from wafopt.problems import evaluate, load
from wafopt.problems.placement.branch_bound import TileSpace, check_bnb_frontier
from wafopt.problems.placement.projected import (
    eigen_enclosure,
    node_problem,
    nodes_problems,
    pb_float,
    pb_node,
)

QAPLIB = Path(__file__).resolve().parents[1] / "instances" / "placement" / "qaplib"
PROPERTY = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def brute_trace(A, B, L) -> float:
    m = A.shape[0]
    return min(sum(A[i, j] * B[p[i], p[j]] for i in range(m) for j in range(m)) + sum(L[i, p[i]] for i in range(m))
               for p in permutations(range(m)))


@PROPERTY
@given(st.data())
def test_pb_node_is_never_above_the_brute_force_optimum(data):
    m = data.draw(st.integers(2, 6))
    A = np.array(data.draw(st.lists(st.integers(0, 9), min_size=m * m, max_size=m * m)), dtype=float).reshape(m, m)
    points = np.array(data.draw(st.lists(st.integers(0, 3), min_size=2 * m, max_size=2 * m))).reshape(m, 2)
    B = np.abs(points[:, None, :] - points[None, :, :]).sum(axis=2).astype(float)   # grid distances
    L = np.array(data.draw(st.lists(st.integers(0, 20), min_size=m * m, max_size=m * m)), dtype=float).reshape(m, m)
    value = pb_node(A, B[None], L[None])[0]
    assert value <= brute_trace(A, B, L) + 1e-9
    # the proof costs almost nothing: the float PB of the symmetric part, less rounding
    assert value == pytest.approx(pb_float((A + A.T) / 2, B, L), rel=1e-9, abs=1e-6)


def test_eigen_enclosures_hold_the_exact_spectrum():
    rng = np.random.default_rng(0)
    for m in (2, 5, 12, 30):
        spectrum = np.sort(rng.integers(-50, 50, m).astype(float))
        P = np.eye(m)[rng.permutation(m)] * rng.choice([-1.0, 1.0], m)   # a signed permutation: exact
        M = P @ np.diag(spectrum) @ P.T
        rank_one = np.outer(np.arange(m), np.arange(m)).astype(float)     # spectrum: 0s and |v|^2
        for matrix, exact in ((M, spectrum), (rank_one, np.sort([0.0] * (m - 1) + [float(np.arange(m) @ np.arange(m))]))):
            values, radius = eigen_enclosure(matrix)
            assert np.all(np.abs(values - exact) <= radius)
            assert np.all(radius <= 1e-9 * max(1.0, float(np.abs(exact).max())))
    stack = np.stack([M, M + np.eye(m)])                                 # a stack: one enclosure each
    values, radius = eigen_enclosure(stack)
    assert np.all(np.abs(values - np.stack([spectrum, spectrum + 1])) <= radius)


@PROPERTY
@given(integer_instances(), st.data())
def test_a_node_pb_never_exceeds_its_best_completion(inst, data):
    space = TileSpace(inst, data.draw(st.sampled_from(inst.layouts)))
    if not space.pb_valid:
        return
    depth = data.draw(st.integers(0, space.n - 2))
    stages = data.draw(st.permutations(range(space.n)))[:depth + 1]
    slots = data.draw(st.permutations(range(space.m)))[:depth + 1]
    value = space.pb_children(stages[:-1], slots[:-1], stages[-1], np.array(slots[-1:]))[0]
    free_stages = [i for i in range(space.n) if i not in stages]
    rows = []
    for chosen in permutations([k for k in range(space.m) if k not in slots], len(free_stages)):
        row = np.empty(space.n, dtype=int)
        row[stages], row[free_stages] = slots, chosen
        rows.append(row)
    assert value <= float(space.fit(np.array(rows)).min()) + 1e-9     # the full Eq. 2 objective


def nug20_part():
    """Ten facilities of nug20 on a 2 x 5 grid: PB pays at the nodes (it prunes about a third)."""
    keep = [10, 15, 12, 11, 9, 16, 19, 1, 3, 4]
    flow = load(QAPLIB / "nug20.yaml").instance.weights[np.ix_(keep, keep)]
    flows = [[i, j, float(flow[i, j])] for i in range(10) for j in range(10) if flow[i, j] > 0]
    return loaded(mesh={"rows": 2, "cols": 5}, tile=[1, 1], stages=10, flows=flows).instance


def solve(inst, workers: int = 1, pb: bool = True):
    with pytest.MonkeyPatch.context() as patch:
        if not pb:
            patch.setattr(placement_bnb, "node_pb_depth", lambda space: 0)
        return bnb(inst, SolveOptions(time_limit=120, quiet=True, workers=workers).start())


@pytest.fixture(scope="module")
def with_pb():
    inst = nug20_part()
    return inst, solve(inst)


def test_bnb_with_node_pb_proves_the_optimum_gilmore_lawler_proves(with_pb):
    inst, result = with_pb
    plain = solve(inst, pb=False)
    assert result.status == plain.status == "optimal" and result.bound.value == plain.bound.value
    assert evaluate("placement", inst, result.plan).objective == result.bound.value
    stats = result.stats["layouts"]["1x1"]
    assert stats["node_pb"]["depth"] == 5 and plain.stats["layouts"]["1x1"]["node_pb"]["depth"] == 0
    assert sum(d["pruned"] for d in stats["node_pb"]["by_depth"].values()) > 0
    assert stats["nodes"] < plain.stats["layouts"]["1x1"]["nodes"]


def test_the_checker_proves_the_pb_leaves_itself(with_pb, monkeypatch):
    inst, result = with_pb
    data = json.loads(json.dumps(result.bound.data))
    assert check_bnb_frontier(inst, data) == result.bound.value
    raised = copy.deepcopy(data)
    raised["tiles"]["1x1"]["bound"] += 1
    with pytest.raises(CertificateError, match="above what its tree proves"):
        check_bnb_frontier(inst, raised)
    # the tree's pruned leaves hold only by PB: a checker without it does not prove the claim
    monkeypatch.setattr(TileSpace, "pb_valid", property(lambda self: False))
    with pytest.raises(CertificateError, match="above what its tree proves"):
        check_bnb_frontier(inst, data)


def test_a_pb_tree_for_other_flows_does_not_certify(with_pb):
    inst, result = with_pb
    other = nug20_part()
    heavy = np.unravel_index(np.argmax(other.flow), other.flow.shape)
    other.flow[heavy] = other.flow[heavy[::-1]] = 0.0                 # less flow: a lower optimum
    data = json.loads(json.dumps(result.bound.data))
    with pytest.raises(CertificateError, match="re-derives"):          # the root QPB first
        check_bnb_frontier(other, data)
    del data["tiles"]["1x1"]["root"]
    with pytest.raises(CertificateError, match="above what its tree proves"):
        check_bnb_frontier(other, data)


def test_waves_with_node_pb_give_one_answer(with_pb):
    inst, serial = with_pb
    runs = [solve(inst, workers=2), solve(inst, workers=3)]
    for result in runs:
        assert result.status == "optimal" and result.bound.value == serial.bound.value
        assert result.plan == runs[0].plan and result.bound.data == runs[0].bound.data
        assert result.stats["layouts"]["1x1"]["node_pb"] == runs[0].stats["layouts"]["1x1"]["node_pb"]


def test_pb_of_several_nodes_in_one_batch_is_each_nodes_own():
    space = TileSpace(nug20_part(), nug20_part().layouts[0])
    nodes = [([0], [3], 5, np.array([1, 2, 7])), ([4], [0], 2, np.array([5, 9])), ([1], [9], 0, np.array([2]))]
    batch = space.pb_children_batch(nodes)
    for node, values in zip(nodes, batch):
        assert np.array_equal(values, space.pb_children(*node))


def test_node_problems_of_a_batch_are_each_nodes_own():
    """nodes_problems over nodes with different fixed stages (so different A') and depths' worth
    of slots equals node_problem of each node alone."""
    inst = nug20_part()
    space = TileSpace(inst, inst.layouts[0])
    rng = np.random.default_rng(3)
    fixed, places = [], []
    for _ in range(12):
        fixed.append(rng.permutation(space.n)[:4])
        places.append(rng.permutation(space.m)[:4])
    fixed[5], fixed[7] = fixed[2][::-1], fixed[2]          # one set of stages in two orders
    A, which, B, L, K = nodes_problems(space.C, space.D, np.array(fixed), np.array(places))
    assert len(A) == len({frozenset(f.tolist()) for f in fixed}) < 12
    for s in range(12):
        A1, B1, L1, K1 = node_problem(space.C, space.D, list(fixed[s]), list(places[s]))
        assert np.array_equal(A[which[s]], A1) and np.array_equal(B[s], B1)
        assert np.array_equal(L[s], L1) and K[s] == K1


def test_reused_distance_enclosures_give_each_nodes_own_pb():
    """Nodes that use the same slots in another order share the enclosure of their distances:
    their PB on a space that has seen those slots equals the PB on a fresh space."""
    inst = nug20_part()
    warm = TileSpace(inst, inst.layouts[0])
    first = [([0, 4], [3, 8], 5, np.array([1, 2, 7])), ([4, 1], [0, 6], 2, np.array([5, 9]))]
    again = [([4, 0], [8, 3], 5, np.array([7, 1])), ([1, 4], [6, 0], 2, np.array([9, 3]))]
    warm.pb_children_batch(first)
    for node in again:
        cold = TileSpace(inst, inst.layouts[0])
        assert np.array_equal(warm.pb_children(*node), cold.pb_children(*node))
