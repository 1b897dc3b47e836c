"""The convex quadratic programming bound at branch-and-bound nodes, proven in floats: at any
point it agrees with the exact (rational) evaluation, it is never above the brute-force optimum of
a node (faults, Mem_pairs, tile shapes) and never below the projected eigenvalue bound, bnb with
it proves the optimum, its tree certifies only through the checker's own QPBs, the checker's
Frank-Wolfe steps are the search's, and the waves give one answer."""

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
from wafopt.problems.placement.branch_bound import (
    TileSpace,
    check_bnb_frontier,
    path_bound,
)
from wafopt.problems.placement.projected import (
    node_points,
    node_spectra,
    nodes_problems,
    pb_float,
    qpb_nodes,
    spectral,
    trace_bound,
)

QAPLIB = Path(__file__).resolve().parents[1] / "instances" / "placement" / "qaplib"
PROPERTY = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def brute_trace(A, B, L) -> float:
    m = A.shape[0]
    return min(sum(A[i, j] * B[p[i], p[j]] for i in range(m) for j in range(m)) + sum(L[i, p[i]] for i in range(m))
               for p in permutations(range(m)))


def small_problem(data):
    """A symmetric integer flow matrix, grid distances and an integer linear cost."""
    m = data.draw(st.integers(2, 6))
    upper = np.array(data.draw(st.lists(st.integers(0, 9), min_size=m * m, max_size=m * m)), dtype=float).reshape(m, m)
    A = np.triu(upper, 1) + np.triu(upper, 1).T
    points = np.array(data.draw(st.lists(st.integers(0, 3), min_size=2 * m, max_size=2 * m))).reshape(m, 2)
    B = np.abs(points[:, None, :] - points[None, :, :]).sum(axis=2).astype(float)
    L = np.array(data.draw(st.lists(st.integers(0, 20), min_size=m * m, max_size=m * m)), dtype=float).reshape(m, m)
    return A, B, L


@PROPERTY
@given(st.data())
def test_node_qpb_is_the_exact_bound_at_its_point_and_never_above_the_optimum(data):
    A, B, L = small_problem(data)
    X, spec = node_points(A[None], B[None], L[None], node_spectra(A[None], B[None]))
    value = qpb_nodes(A[None], B[None], L[None], spec, X)[0]
    assert value <= brute_trace(A, B, L) + 1e-9
    # the float proof loses only rounding against the rational evaluation at the same point and theta
    exact = trace_bound(A, B, L, spectral(A, B, spec.theta[0]), X[0])
    assert value == pytest.approx(float(exact), rel=1e-9, abs=1e-6)
    # Frank-Wolfe starts at P, where the bound is the projected eigenvalue bound
    assert value >= pb_float(A, B, L) - 1e-6 * max(1.0, abs(value))


@PROPERTY
@given(st.data())
def test_node_qpb_with_one_assignment_fixed_is_never_above_that_optimum(data):
    """The QPB's bounds of the children (i fixed to j, from the assignment's reduced costs) are
    never above the best permutation with i at j, nor below the QPB itself."""
    A, B, L = small_problem(data)
    m = A.shape[0]
    X, spec = node_points(A[None], B[None], L[None], node_spectra(A[None], B[None]))
    value, fixed = qpb_nodes(A[None], B[None], L[None], spec, X, fixing=True)
    assert value[0] == qpb_nodes(A[None], B[None], L[None], spec, X)[0]
    best = np.full((m, m), np.inf)
    for p in permutations(range(m)):
        cost = sum(A[i, j] * B[p[i], p[j]] for i in range(m) for j in range(m)) + sum(L[i, p[i]] for i in range(m))
        for i in range(m):
            best[i, p[i]] = min(best[i, p[i]], cost)
    assert np.all(fixed[0] <= best + 1e-9)
    assert np.all(fixed[0] >= value[0] - 1e-9 * max(1.0, abs(value[0])))


@PROPERTY
@given(st.data())
def test_node_qpb_holds_at_any_point(data):
    """The inequality is valid at every point, not only at Frank-Wolfe's: a random doubly
    stochastic matrix, or any matrix at all, gives a bound below the optimum too."""
    A, B, L = small_problem(data)
    m = A.shape[0]
    weights = np.array(data.draw(st.lists(st.floats(0, 1), min_size=3, max_size=3))) + 1e-3
    perms = [np.eye(m)[list(data.draw(st.permutations(range(m))))] for _ in range(3)]
    mixed = sum(w * P for w, P in zip(weights / weights.sum(), perms))
    wild = np.array(data.draw(st.lists(st.floats(-2, 2), min_size=m * m, max_size=m * m))).reshape(m, m)
    spec = node_spectra(A[None], B[None])
    values = qpb_nodes(np.stack([A, A]), np.stack([B, B]), np.stack([L, L]),
                       node_spectra(np.stack([A, A]), np.stack([B, B])), np.stack([mixed, wild]))
    assert np.all(values <= brute_trace(A, B, L) + 1e-9)
    assert spec.S.shape == (1, m, m)


@PROPERTY
@given(integer_instances(), st.data())
def test_a_node_qpb_never_exceeds_its_best_completion(inst, data):
    space, stages, slots = drawn_node(inst, data, 1)
    if space is None:
        return
    value = space.qpb_children_batch([(stages[:-1], slots[:-1], stages[-1], np.array(slots[-1:]))])[0][0]
    assert value <= best_completion(space, stages, slots) + 1e-9


def drawn_node(inst, data, extra: int):
    """A tile shape where QPB is proven (else None) and a node with depth + `extra` fixed stages."""
    space = TileSpace(inst, data.draw(st.sampled_from(inst.layouts)))
    if not space.qpb_valid:
        return None, None, None
    depth = data.draw(st.integers(0, space.n - 2))
    return (space, data.draw(st.permutations(range(space.n)))[:depth + extra],
            data.draw(st.permutations(range(space.m)))[:depth + extra])


def best_completion(space: TileSpace, stages: list, slots: list) -> float:
    """The least full Eq. 2 objective over the plans with `stages` at `slots`, by brute force."""
    rest = [i for i in range(space.n) if i not in stages]
    rows = []
    for chosen in permutations([k for k in range(space.m) if k not in slots], len(rest)):
        row = np.empty(space.n, dtype=int)
        row[stages], row[rest] = slots, chosen
        rows.append(row)
    return float(space.fit(np.array(rows)).min())


@PROPERTY
@given(integer_instances(), st.data())
def test_a_grandchilds_bound_from_its_parents_qpb_never_exceeds_its_best_completion(inst, data):
    """qpb_children_batch with fixing bounds each child of a node (one more stage at a free slot)
    by the node's QPB: never above that child's best completion (faults, Mem_pairs, tiles)."""
    space, stages, slots = drawn_node(inst, data, 2)
    if space is None:
        return
    _, below = space.qpb_children_batch([(stages[:-2], slots[:-2], stages[-2], np.array([slots[-2]]))], fixing=True)
    free_stages = [i for i in range(space.n) if i not in stages[:-1]]
    free = [k for k in range(space.m) if k not in slots[:-1]]
    value = below[0][0][free_stages.index(stages[-1]), free.index(slots[-1])]
    assert value <= best_completion(space, stages, slots) + 1e-9
    assert path_bound(space, stages, slots) >= value       # the checker takes it too


def nug20_part():
    """Ten facilities of nug20 on a 2 x 5 grid: QPB pays at the nodes."""
    keep = [10, 15, 12, 11, 9, 16, 19, 1, 3, 4]
    flow = load(QAPLIB / "nug20.yaml").instance.weights[np.ix_(keep, keep)]
    flows = [[i, j, float(flow[i, j])] for i in range(10) for j in range(10) if flow[i, j] > 0]
    return loaded(mesh={"rows": 2, "cols": 5}, tile=[1, 1], stages=10, flows=flows).instance


def solve(inst, workers: int = 1, qpb: bool = True):
    with pytest.MonkeyPatch.context() as patch:
        if not qpb:
            patch.setattr(placement_bnb, "node_qpb_depth", lambda space: 0)
        return bnb(inst, SolveOptions(time_limit=120, quiet=True, workers=workers).start())


@pytest.fixture(scope="module")
def with_qpb():
    inst = nug20_part()
    return inst, solve(inst)


def test_bnb_with_node_qpb_proves_the_optimum_gilmore_lawler_proves(with_qpb):
    inst, result = with_qpb
    plain = solve(inst, qpb=False)
    assert result.status == plain.status == "optimal" and result.bound.value == plain.bound.value
    assert evaluate("placement", inst, result.plan).objective == result.bound.value
    stats = result.stats["layouts"]["1x1"]
    assert stats["node_qpb"]["depth"] == 7 and plain.stats["layouts"]["1x1"]["node_qpb"]["depth"] == 0
    assert sum(d["pruned"] for d in stats["node_qpb"]["by_depth"].values()) > 0
    assert stats["nodes"] < plain.stats["layouts"]["1x1"]["nodes"]


def test_strong_branching_keeps_the_optimum_within_its_budget(with_qpb):
    inst, result = with_qpb
    node_qpb = result.stats["layouts"]["1x1"]["node_qpb"]
    computed = sum(depth["computed"] for depth in node_qpb["by_depth"].values())
    strong = node_qpb["strong_branching"]
    assert strong["nodes"] > 0
    assert strong["qpbs"] <= placement_bnb.STRONG_SHARE * computed + placement_bnb.STRONG_PER_S * 120
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(placement_bnb, "STRONG_DEPTH", -1)
        plain = solve(inst)
    assert plain.stats["layouts"]["1x1"]["node_qpb"]["strong_branching"] == {"nodes": 0, "qpbs": 0}
    assert result.status == plain.status == "optimal" and result.bound.value == plain.bound.value
    assert evaluate("placement", inst, plain.plan).objective == result.bound.value
    with pytest.MonkeyPatch.context() as patch:     # without a budget every open node of depths 1-2 has it
        patch.setattr(placement_bnb, "STRONG_PER_S", 10 ** 9)
        unlimited = solve(inst)
    node_qpb = unlimited.stats["layouts"]["1x1"]["node_qpb"]
    shallow = [node_qpb["by_depth"][d] for d in ("1", "2") if d in node_qpb["by_depth"]]
    assert node_qpb["strong_branching"]["nodes"] == sum(d["computed"] - d["pruned"] for d in shallow) > 0
    assert unlimited.bound.value == result.bound.value


def test_the_checker_proves_the_qpb_leaves_itself(with_qpb, monkeypatch):
    inst, result = with_qpb
    data = json.loads(json.dumps(result.bound.data))
    assert check_bnb_frontier(inst, data) == result.bound.value
    raised = copy.deepcopy(data)
    raised["tiles"]["1x1"]["bound"] += 1
    with pytest.raises(CertificateError, match="above what its tree proves"):
        check_bnb_frontier(inst, raised)
    # the tree's pruned leaves hold only by QPB: a checker without it does not prove the claim
    monkeypatch.setattr(TileSpace, "qpb_valid", property(lambda self: False))
    with pytest.raises(CertificateError, match="above what its tree proves"):
        check_bnb_frontier(inst, data)


def test_a_qpb_tree_for_other_flows_does_not_certify(with_qpb):
    inst, result = with_qpb
    other = nug20_part()
    heavy = np.unravel_index(np.argmax(other.flow), other.flow.shape)
    other.flow[heavy] = other.flow[heavy[::-1]] = 0.0                 # less flow: a lower optimum
    data = json.loads(json.dumps(result.bound.data))
    with pytest.raises(CertificateError, match="re-derives"):          # the root QPB first
        check_bnb_frontier(other, data)
    del data["tiles"]["1x1"]["root"]
    with pytest.raises(CertificateError, match="above what its tree proves"):
        check_bnb_frontier(other, data)


def test_waves_with_node_qpb_give_one_answer(with_qpb):
    inst, serial = with_qpb
    runs = [solve(inst, workers=2), solve(inst, workers=3)]
    for result in runs:
        assert result.status == "optimal" and result.bound.value == serial.bound.value
        assert result.plan == runs[0].plan and result.bound.data == runs[0].bound.data
        assert result.stats["layouts"]["1x1"]["node_qpb"] == runs[0].stats["layouts"]["1x1"]["node_qpb"]


def test_qpb_of_several_nodes_in_one_batch_is_each_nodes_own():
    """The checker bounds nodes in other batches than the search: a node's QPB must not depend
    on the batch it is computed in (Frank-Wolfe per node, deterministic)."""
    space = TileSpace(nug20_part(), nug20_part().layouts[0])
    nodes = [([0], [3], 5, np.array([1, 2, 7])), ([4], [0], 2, np.array([5, 9])), ([1], [9], 0, np.array([2]))]
    batch = space.qpb_children_batch(nodes)
    for node, values in zip(nodes, batch):
        alone = space.qpb_children_batch([node])[0]
        for a, kid in enumerate(node[3]):
            single = space.qpb_children_batch([(node[0], node[1], node[2], np.array([kid]))])[0][0]
            assert values[a] == alone[a] == single
    _, fixed = space.qpb_children_batch(nodes, fixing=True)
    for node, below in zip(nodes, fixed):
        for a, kid in enumerate(node[3]):
            single = space.qpb_children_batch([(node[0], node[1], node[2], np.array([kid]))], fixing=True)[1][0][0]
            assert np.array_equal(below[a], single)


def test_node_problems_of_a_batch_are_each_nodes_own():
    """nodes_problems over nodes with different fixed stages (so different A') equals
    nodes_problems of each node alone."""
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
        A1, _, B1, L1, K1 = nodes_problems(space.C, space.D, np.array([fixed[s]]), np.array([places[s]]))
        assert np.array_equal(A[which[s]], A1[0]) and np.array_equal(B[s], B1[0])
        assert np.array_equal(L[s], L1[0]) and K[s] == K1[0]
