"""Placement branch and bound: exact against brute force, bounds never above a plan, certificates
that re-derive (and tampered ones that do not), time limits and Ctrl-C."""

from __future__ import annotations

import copy
import json
import math
import threading
import time
from itertools import permutations
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_helpers import TOL, brute_force, chain, loaded, plans
from wafopt.models.placement_bnb import bnb

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import CertificateError
from wafopt.problems import evaluate, load
from wafopt.problems.certificates import CheckOptions
from wafopt.problems.placement.branch_bound import (
    TileSpace,
    check_bnb_frontier,
    decode_tree,
    encode_tree,
    node_bound,
    path_bound,
    root_bound,
    walk,
)
from wafopt.run.runner import run

ROOT = Path(__file__).resolve().parents[1]
QAPLIB = ROOT / "instances" / "placement" / "qaplib"


def solve_direct(inst, time_limit=30.0, warm_start=None):
    options = SolveOptions(time_limit=time_limit, quiet=True, warm_start=warm_start).start()
    return bnb(inst, options)


rng = np.random.default_rng(11)
dense = rng.integers(0, 6, size=(6, 6))
np.fill_diagonal(dense, 0)
TINY = {
    "1x1-dense-n6": dict(mesh={"rows": 2, "cols": 4}, tile=[1, 1], flow_matrix=dense.tolist()),
    "1x1-n7": dict(mesh={"rows": 3, "cols": 3}, tile=[1, 1], flows=chain(7) + [[0, 4, 3.5], [2, 6, 1.25]]),
    "1x1-fault-n6": dict(mesh={"rows": 3, "cols": 3, "faulty_dies": [[1, 1]]}, tile=[1, 1],
                         flows=chain(6, [5.0, 1.0, 4.0, 2.0, 3.0]) + [[0, 3, 2.0], [1, 4, 1.5]]),
    "1x1-faulty-link-n5": dict(mesh={"rows": 3, "cols": 3, "faulty_links": [[[0, 1], [1, 1]], [[1, 0], [1, 1]]]},
                               tile=[1, 1], flows=chain(5) + [[0, 4, 2.0]]),
    "1x2-n5": dict(mesh={"rows": 3, "cols": 6}, tile=[1, 2], flows=chain(5, [3.0, 1.0, 2.0, 7.0]) + [[0, 2, 4.0]]),
    "1x2-fault-n5": dict(mesh={"rows": 2, "cols": 6, "faulty_dies": [[1, 4]]}, tile=[1, 2],
                         flows=chain(5) + [[4, 0, 1.0]]),
    "2x2-n5": dict(mesh={"rows": 4, "cols": 6}, tile=[2, 2], flows=chain(5, [1.0, 9.0, 2.0, 3.0])),
    "2x2-fault-n4": dict(mesh={"rows": 6, "cols": 4, "faulty_dies": [[2, 3]]}, tile=[2, 2],
                         flows=chain(4) + [[0, 3, 6.0]]),
    "shapes-n3": dict(mesh={"rows": 2, "cols": 4}, tile=[[1, 2], [2, 1]], flows=chain(3) + [[0, 2, 1.0]]),
    # Mem_pairs: the full objective pays routing conflicts (Eq. 2 gamma)
    "pairs-n5": dict(mesh={"rows": 2, "cols": 3}, tile=[1, 1], flows=chain(5, [4.0, 1.0, 3.0, 2.0]),
                     pairs=[[0, 4, 3.0], [0, 2, 5.0]]),
    "pairs-fault-n5": dict(mesh={"rows": 3, "cols": 3, "faulty_dies": [[0, 0]]}, tile=[1, 1],
                           flows=chain(5, [2.0, 1.0, 3.0, 1.0]), pairs=[[0, 3, 4.0], [1, 4, 2.0]]),
    "pairs-faulty-link-n4": dict(mesh={"rows": 2, "cols": 4, "faulty_links": [[[0, 1], [0, 2]]]}, tile=[1, 1],
                                 flows=chain(4), pairs=[[0, 3, 2.0]]),
    "pairs-2x2-n4": dict(mesh={"rows": 4, "cols": 6, "faulty_dies": [[3, 5]]}, tile=[[2, 2], [1, 2]],
                         flows=chain(4, [1.0, 2.0, 1.0]), pairs=[[0, 3, 4.0], [1, 2, 1.0]]),
}


@pytest.mark.parametrize("case", sorted(TINY))
def test_bnb_matches_brute_force(case):
    lo = loaded(**TINY[case])
    optimum = brute_force(lo.instance)
    result = solve_direct(lo.instance)
    assert result.status == "optimal"
    assert evaluate("placement", lo.instance, result.plan).objective == pytest.approx(optimum, abs=TOL)
    assert result.bound.value == pytest.approx(optimum, rel=1e-6, abs=TOL)
    assert result.bound.kind == "bnb-frontier" and result.bound.provenance == "certificate"
    data = json.loads(json.dumps(result.bound.data))                        # as stored in a solution file
    assert check_bnb_frontier(lo.instance, data) >= result.bound.value - TOL


def test_pairs_case_needs_the_full_objective():
    """On the Mem_pair case the base optimum is below the full one: bnb proves the full one."""
    lo = loaded(**TINY["pairs-n5"])
    base = min(evaluate("placement", lo.instance, p).details["base_objective"] for p in plans(lo.instance))
    assert brute_force(lo.instance) > base + 1.0


def test_runner_with_the_ga_start_is_optimal_and_certified():
    lo = loaded(**TINY["pairs-fault-n5"])
    sol = run(lo, "bnb", SolveOptions(time_limit=10, quiet=True))
    assert sol.status == "optimal"
    assert sol.objective == pytest.approx(brute_force(lo.instance), abs=TOL)
    assert sol.bound_provenance == "certificate" and sol.bound_kind == "bnb-frontier"


# --- bounds never above a plan (property tests) ---------------------------------------------------

@st.composite
def tiny_instances(draw):
    rows, cols = draw(st.sampled_from([(2, 3), (3, 3), (2, 4)]))
    n = draw(st.integers(3, 5))
    faulty = draw(st.sampled_from([[], [[0, 0]], [[1, 1]]]))
    if rows * cols - len(faulty) < n:
        faulty = []
    flows = [[i, j, draw(st.integers(1, 9))] for i in range(n) for j in range(n)
             if i != j and draw(st.booleans())]
    if not flows:
        flows = [[0, 1, 1]]
    pairs = []
    if draw(st.booleans()):
        s, h = draw(st.sampled_from([(a, b) for a in range(n) for b in range(n) if a != b]))
        pairs = [[s, h, draw(st.integers(1, 5))]]
    return loaded(mesh={"rows": rows, "cols": cols, "faulty_dies": faulty}, tile=[1, 1], stages=n,
                  flows=flows, pairs=pairs).instance


def draw_node(space, data):
    """A random node (fixed stages and their slots), the stage it branches on and its kids."""
    depth = data.draw(st.integers(0, space.n - 1))
    order = data.draw(st.permutations(range(space.n)))
    slots = list(data.draw(st.permutations(range(space.m)))[:depth])
    return list(order[:depth]), slots, order[depth], np.array(sorted(set(range(space.m)) - set(slots)))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(inst=tiny_instances(), data=st.data())
def test_child_bound_never_above_its_best_completion(inst, data):
    """A node's bound (Gilmore-Lawler + fixed cost + fixed routing conflicts) is at most the full
    objective of every plan that completes it."""
    space = TileSpace(inst, inst.layouts[0])
    n, m = space.n, space.m
    stages, slots, branch, kids = draw_node(space, data)
    bounds, exact, _ = space.children(stages, slots, branch, kids)
    fixed = dict(zip(stages, slots))
    free = [i for i in range(n) if i not in fixed and i != branch]
    for a, k in enumerate(kids):
        others = [s for s in range(m) if s not in slots and s != k]
        best = np.inf
        for rest in permutations(others, len(free)):
            slot_of = np.empty(n, dtype=int)
            for i, s in fixed.items():
                slot_of[i] = s
            slot_of[branch] = k
            slot_of[free] = rest
            best = min(best, space.fit.one(slot_of))
        assert bounds[a] <= best + 1e-9 * max(1.0, best)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(inst=tiny_instances(), data=st.data())
def test_a_complete_assignment_is_bounded_by_its_full_objective(inst, data):
    """The last stage's children are whole plans: their bound is the full Eq. 2 objective (the
    base cost and the routing-conflict penalty, compiled), not only at most it."""
    space = TileSpace(inst, inst.layouts[0])
    n, m = space.n, space.m
    order = data.draw(st.permutations(range(n)))
    slots = list(data.draw(st.permutations(range(m)))[:n - 1])
    kids = np.array(sorted(set(range(m)) - set(slots)))
    bounds, exact, completions = space.children(list(order[:n - 1]), slots, order[n - 1], kids)
    assert exact.all()
    for bound, plan in zip(bounds, completions):
        assert bound == pytest.approx(space.fit.one(np.array(plan)), rel=1e-12, abs=1e-12)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(inst=tiny_instances(), data=st.data())
def test_weaker_bounds_never_above_the_full_one(inst, data):
    """Children spared their assignment problem (by the cutoff, or lazily above `assign_below`) keep
    a weaker bound (the screen or the row-minimum one): never above the full bound, and at least the
    level that spared them; the others get the full bound."""
    space = TileSpace(inst, inst.layouts[0])
    stages, slots, branch, kids = draw_node(space, data)
    full, every, _ = space.children(stages, slots, branch, kids)
    assert every.all()
    cutoff = data.draw(st.sampled_from(sorted(set(full.tolist())) + [np.inf]))
    below = data.draw(st.sampled_from([np.inf, -np.inf, float(np.median(full))]))
    bounds, exact, completion = space.children(stages, slots, branch, kids, cutoff, below)
    assert np.array_equal(bounds[exact], full[exact])
    assert np.all(bounds[~exact] <= full[~exact] + 1e-9 * np.abs(full[~exact]))
    assert np.all(exact | (bounds >= min(cutoff, below)))
    assert all((c is not None) == e for c, e in zip(completion, exact)) or len(stages) == space.n - 1


@settings(max_examples=20, deadline=None, derandomize=True)
@given(inst=tiny_instances(), seconds=st.sampled_from([0.0, 0.01, 5.0]))
def test_certified_bound_never_above_any_plan(inst, seconds):
    """Whatever the time limit, the bound (least over the frontier) is at most the optimum, and the
    certificate re-derives it."""
    result = solve_direct(inst, time_limit=seconds)
    optimum = brute_force(inst)
    assert result.bound.value <= optimum + TOL
    assert check_bnb_frontier(inst, json.loads(json.dumps(result.bound.data))) >= result.bound.value - TOL


def test_the_checker_computes_node_qpbs_only_where_a_search_may_have(monkeypatch):
    """A sparse pipeline's eigenvalue bounds are far below Gilmore-Lawler, so its search gives no
    node a QPB, and neither does the checker; nug15's search does, and so does its checker."""
    lo = load(ROOT / "instances/placement/pl-sparse-16.yaml")
    result = solve_direct(lo.instance, time_limit=60)
    assert result.status == "optimal"
    assert not any(TileSpace(lo.instance, lay).qpb_may_pay for lay in lo.instance.layouts)
    data = json.loads(json.dumps(result.bound.data))
    monkeypatch.setattr(TileSpace, "qpb_children_batch", lambda *a, **k: pytest.fail("a node QPB"))
    assert check_bnb_frontier(lo.instance, data) >= result.bound.value - TOL
    nug = load(QAPLIB / "nug15.yaml").instance
    space = TileSpace(nug, nug.layouts[0])
    assert space.qpb_pays and space.qpb_may_pay


# --- QAPLIB ----------------------------------------------------------------------------------------

def test_nug12_is_proven_optimal():
    lo = load(QAPLIB / "nug12.yaml")
    result = solve_direct(lo.instance, time_limit=120)
    assert result.status == "optimal"
    assert evaluate("placement", lo.instance, result.plan).objective == 578.0 == lo.known_optimum.value
    assert result.bound.value == 578.0
    assert check_bnb_frontier(lo.instance, result.bound.data) == 578.0


@pytest.mark.slow
@pytest.mark.parametrize("name, optimum", [("nug15", 1150.0), ("scr12", 31410.0), ("chr18b", 1534.0)])
def test_qaplib_optima_are_proven(name, optimum):
    lo = load(QAPLIB / f"{name}.yaml")
    result = solve_direct(lo.instance, time_limit=900)
    assert result.status == "optimal" and result.bound.value == optimum
    assert evaluate("placement", lo.instance, result.plan).objective == optimum


# --- the certificate ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def open_frontier():
    """nug15 stopped early: a tree with open nodes."""
    lo = load(QAPLIB / "nug15.yaml")
    result = solve_direct(lo.instance, time_limit=1.5)
    assert result.status == "feasible" and result.bound.data["tiles"]["1x1"]["open_nodes"] > 0
    return lo.instance, result


def test_open_frontier_rederives(open_frontier):
    inst, result = open_frontier
    data = json.loads(json.dumps(result.bound.data))
    assert root_bound(TileSpace(inst, inst.layouts[0])) <= result.bound.value <= 1150.0
    assert check_bnb_frontier(inst, data) >= result.bound.value - TOL
    frontier = data["tiles"]["1x1"]["frontier"]
    assert frontier and min(b for _, b in frontier) >= data["tiles"]["1x1"]["bound"] - TOL


def test_tampered_certificates_do_not_prove_their_bound(open_frontier):
    inst, result = open_frontier
    claimed = result.bound.value
    good = result.bound.data
    tile = good["tiles"]["1x1"]
    tokens = decode_tree(tile["tree"], inst.stages)

    raised = copy.deepcopy(good)          # a claimed bound raised above what the leaves prove
    raised["tiles"]["1x1"]["bound"] = claimed + 50
    with pytest.raises(CertificateError, match="above what its tree proves"):
        check_bnb_frontier(inst, raised)

    pruned = copy.deepcopy(good)          # the tree cut to the root: only the root bound is proven
    pruned["tiles"]["1x1"]["tree"] = encode_tree([inst.stages])
    with pytest.raises(CertificateError, match="above what its tree proves"):
        check_bnb_frontier(inst, pruned)
    pruned["tiles"]["1x1"]["bound"] = -1e9   # stated as what it proves, it proves less than the tree
    assert check_bnb_frontier(inst, pruned) < claimed

    cut = copy.deepcopy(good)             # a truncated tree does not cover the assignments
    cut["tiles"]["1x1"]["tree"] = encode_tree(tokens[:-3].tolist())
    with pytest.raises(CertificateError):
        check_bnb_frontier(inst, cut)

    lying = copy.deepcopy(good)           # a frontier node stored above what its path proves
    pairs = lying["tiles"]["1x1"]["frontier"][0][0]
    space = TileSpace(inst, inst.layouts[0])
    lying["tiles"]["1x1"]["frontier"][0][1] = path_bound(space, [i for i, _ in pairs], [k for _, k in pairs]) + 10
    with pytest.raises(CertificateError):
        check_bnb_frontier(inst, lying)

    for text in ("not base64!", encode_tree([inst.stages + 5])):
        broken = copy.deepcopy(good)
        broken["tiles"]["1x1"]["tree"] = text
        with pytest.raises(CertificateError):
            check_bnb_frontier(inst, broken)


def test_the_checker_on_workers_derives_the_serial_bound(open_frontier, monkeypatch):
    import wafopt.problems.placement.branch_bound as bb

    inst, result = open_frontier
    space = TileSpace(inst, inst.layouts[0])
    tile = result.bound.data["tiles"]["1x1"]
    tokens = decode_tree(tile["tree"], inst.stages)
    monkeypatch.setattr(bb, "PARALLEL_NODES", 0)       # the small tree still goes to the workers
    monkeypatch.setattr(bb, "WALK_BATCH", 4)           # in many batches
    monkeypatch.setattr(bb.os, "cpu_count", lambda: 2)
    for claimed in (tile["bound"], tile["bound"] + 50, -1e9):
        serial = walk(space, tokens, claimed)
        lines = []
        assert walk(space, tokens, claimed, CheckOptions(workers=2, progress=lines.append)) == serial
        expanded = int((tokens < inst.stages).sum())
        assert len(lines) > 1 and lines[-1].startswith(f"{expanded:,} of {expanded:,} expanded nodes")
    assert (check_bnb_frontier(inst, result.bound.data, CheckOptions(workers=2))
            == check_bnb_frontier(inst, result.bound.data))
    raised = copy.deepcopy(result.bound.data)
    raised["tiles"]["1x1"]["bound"] = tile["bound"] + 50
    with pytest.raises(CertificateError, match="above what its tree proves"):
        check_bnb_frontier(inst, raised, CheckOptions(workers=2))


def test_an_error_in_a_checking_worker_is_raised_as_itself(open_frontier, monkeypatch):
    import wafopt.problems.placement.branch_bound as bb

    inst, result = open_frontier
    tile = result.bound.data["tiles"]["1x1"]

    def broken(*args):
        raise ValueError("no assignment of finite cost")
    monkeypatch.setattr(bb, "bound_batch", broken)        # forked workers inherit it
    monkeypatch.setattr(bb, "PARALLEL_NODES", 0)
    monkeypatch.setattr(bb.os, "cpu_count", lambda: 2)
    with pytest.raises(ValueError, match="finite cost"):
        walk(TileSpace(inst, inst.layouts[0]), decode_tree(tile["tree"], inst.stages), tile["bound"],
             CheckOptions(workers=2))


def test_tree_round_trip():
    tokens = [3, 0, 5, 5, 1, 5, 5, 5]
    assert decode_tree(encode_tree(tokens), 5).tolist() == tokens


# --- symmetry ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mesh, pairs, size", [
    ({"rows": 3, "cols": 3}, [], 8),                                  # the square: 4 rotations x 2
    ({"rows": 3, "cols": 3, "faulty_dies": [[1, 1]]}, [], 8),          # the centre keeps them all
    ({"rows": 3, "cols": 3, "faulty_dies": [[0, 0]]}, [], 2),          # a corner: its diagonal only
    ({"rows": 3, "cols": 4}, [], 4),                                  # a rectangle: reflections
    ({"rows": 3, "cols": 3}, [[0, 2, 1.0]], 4),                       # routes: transpositions go
])
def test_symmetry_group_follows_faults_and_routes(mesh, pairs, size):
    inst = loaded(mesh=mesh, tile=[1, 1], flows=chain(3), pairs=pairs).instance
    space = TileSpace(inst, inst.layouts[0])
    assert len(space.group) == size
    D = space.D
    for g in space.group:
        assert np.array_equal(D[np.ix_(g, g)], D)


# --- time limits and Ctrl-C --------------------------------------------------------------------------

def test_time_limit_holds_and_the_frontier_certifies():
    lo = load(QAPLIB / "nug20.yaml")
    started = time.monotonic()
    sol = run(lo, "bnb", SolveOptions(time_limit=2.0, quiet=True))
    assert time.monotonic() - started < 3.0
    assert sol.status == "feasible" and sol.plan is not None
    assert 2057.0 <= sol.bound <= 2570.0                                # GLB <= bound <= optimum
    assert check_bnb_frontier(lo.instance, sol.certificate) >= sol.bound - TOL


def test_interrupt_stops_within_two_seconds():
    lo = load(QAPLIB / "nug20.yaml")
    options = SolveOptions(quiet=True)
    timer = threading.Timer(3.0, lambda: setattr(options, "interrupted", True))
    timer.start()
    started = time.monotonic()
    sol = run(lo, "bnb", options)
    timer.cancel()
    assert time.monotonic() - started < 3.0 + 2.0
    assert sol.stats.get("interrupted") and sol.plan is not None
    assert sol.bound is not None and check_bnb_frontier(lo.instance, sol.certificate) >= sol.bound - TOL


def test_an_interrupted_search_writes_a_smaller_tree_that_still_certifies(monkeypatch):
    """After Ctrl-C the certificate's tree is cut to INTERRUPTED_TREE_TOKENS (writing a full one can
    take seconds), and the bound it claims still re-derives."""
    import wafopt.models.placement_bnb as placement_bnb

    monkeypatch.setattr(placement_bnb, "INTERRUPTED_TREE_TOKENS", 500)
    progress = placement_bnb.BranchAndBound._progress

    def interrupt_once_grown(search, space, tree):   # Ctrl-C once the tree outgrows the cap
        if tree.expanded >= 100:
            search.options.interrupted = True
        progress(search, space, tree)

    monkeypatch.setattr(placement_bnb.BranchAndBound, "_progress", interrupt_once_grown)
    lo = load(QAPLIB / "nug20.yaml")
    sol = run(lo, "bnb", SolveOptions(quiet=True, workers=1))
    tile = sol.certificate["tiles"]["1x1"]
    assert "cut_at_bound" in tile and len(decode_tree(tile["tree"], 20)) <= 500
    assert check_bnb_frontier(lo.instance, sol.certificate) >= sol.bound - TOL


def test_depth_first_beyond_the_open_node_cap_stays_exact(monkeypatch):
    """With few open nodes allowed, the search goes depth-first: same optimum, certificate holds."""
    import wafopt.models.placement_bnb as placement_bnb

    monkeypatch.setattr(placement_bnb, "MAX_OPEN", 5)
    lo = loaded(**TINY["1x1-fault-n6"])
    result = solve_direct(lo.instance)
    assert result.status == "optimal"
    assert result.bound.value == pytest.approx(brute_force(lo.instance), abs=TOL)
    assert check_bnb_frontier(lo.instance, result.bound.data) >= result.bound.value - TOL


def test_the_open_node_cap_follows_the_available_memory(monkeypatch):
    """Unset, the cap holds OPEN_MEMORY_SHARE of the memory available at OPEN_NODE_BYTES a node,
    never fewer than MIN_OPEN; unknown memory keeps the fixed cap; a set MAX_OPEN wins."""
    from wafopt.models import placement_bnb

    monkeypatch.setattr(placement_bnb, "available_memory", lambda: 8 * 2**30)
    expected = int(placement_bnb.OPEN_MEMORY_SHARE * 8 * 2**30 / placement_bnb.OPEN_NODE_BYTES)
    assert placement_bnb.open_cap() == expected > placement_bnb.MIN_OPEN
    monkeypatch.setattr(placement_bnb, "available_memory", lambda: 2**20)
    assert placement_bnb.open_cap() == placement_bnb.MIN_OPEN
    monkeypatch.setattr(placement_bnb, "available_memory", lambda: None)
    assert placement_bnb.open_cap() == placement_bnb.UNKNOWN_MEMORY_OPEN
    monkeypatch.setattr(placement_bnb, "MAX_OPEN", 7)
    assert placement_bnb.open_cap() == 7
    lo = loaded(**TINY["1x1-fault-n6"])
    result = solve_direct(lo.instance)
    assert result.stats["layouts"]["1x1"]["open_cap"] == 7


def test_available_memory_is_a_positive_byte_count():
    from wafopt.core.machine import available_memory

    available = available_memory()
    assert available is None or (isinstance(available, int) and 0 < available < 2**50)


def test_depth_first_with_lazy_nodes_on_a_sparse_pipeline_stays_exact(monkeypatch):
    """Diving past the open-node cap on sparse flows pops nodes kept with their row-minimum bound;
    settling one that its full bound raises puts it back among the open nodes of its depth."""
    import wafopt.models.placement_bnb as placement_bnb

    monkeypatch.setattr(placement_bnb, "MAX_OPEN", 20)
    lo = load(ROOT / "instances" / "placement" / "pl-sparse-16.yaml")   # optimum 152 (docs/placement.md)
    result = solve_direct(lo.instance, time_limit=120)
    assert result.status == "optimal" and result.bound.value == 152.0
    assert check_bnb_frontier(lo.instance, result.bound.data) >= result.bound.value - TOL


def test_a_tree_too_large_to_check_is_cut_and_still_certifies(monkeypatch):
    """Beyond MAX_TREE_TOKENS nodes the certificate cuts the tree at the largest bound at which it
    fits; the cut's expanded nodes become leaves with their own bounds, so the claimed bound drops
    but holds."""
    import wafopt.models.placement_bnb as placement_bnb

    lo = load(QAPLIB / "nug12.yaml")
    monkeypatch.setattr(placement_bnb, "MAX_TREE_TOKENS", 300)
    result = solve_direct(lo.instance, time_limit=60)
    tile = result.bound.data["tiles"]["1x1"]
    assert "cut_at_bound" in tile and len(decode_tree(tile["tree"], 12)) <= 300
    assert root_bound(TileSpace(lo.instance, lo.instance.layouts[0])) <= result.bound.value <= 578.0
    assert result.bound.value <= tile["cut_at_bound"]
    assert check_bnb_frontier(lo.instance, result.bound.data) >= result.bound.value - TOL


def test_a_tree_too_large_for_the_file_limit_is_cut_until_it_fits(monkeypatch):
    """A packed tree longer than TREE_TEXT_BYTES is cut further, so certify can read the file;
    the cut bound still certifies."""
    from wafopt.models import placement_bnb

    lo = load(QAPLIB / "nug12.yaml")
    whole = solve_direct(lo.instance, time_limit=60).bound.data["tiles"]["1x1"]["tree"]
    monkeypatch.setattr(placement_bnb, "TREE_TEXT_BYTES", len(whole) // 3)
    result = solve_direct(lo.instance, time_limit=60)
    tile = result.bound.data["tiles"]["1x1"]
    assert len(tile["tree"]) <= len(whole) // 3 and result.bound.value <= tile["cut_at_bound"] < 578.0
    assert check_bnb_frontier(lo.instance, result.bound.data) >= result.bound.value - TOL


@pytest.mark.parametrize("limit", [1, 40, 300, 3000])
def test_the_cut_is_the_largest_bound_at_which_the_tree_fits(limit):
    """tokens(cut_for(limit)) fits in `limit`; the next larger node bound would not."""
    from wafopt.models.placement_bnb import BranchAndBound

    lo = load(QAPLIB / "nug12.yaml")
    space = TileSpace(lo.instance, lo.instance.layouts[0])
    search = BranchAndBound(lo.instance, SolveOptions(time_limit=60, quiet=True).start())
    tree = search.search(space, deadline=None)
    whole = len(tree.tokens())
    cut = tree.cut_for(limit)
    assert len(tree.tokens(cut)) <= max(limit, 1)
    if whole <= limit:
        assert cut == float("inf")
    else:
        above = [b for b in tree.bound.values() if b > cut]
        assert not above or len(tree.tokens(min(above))) > limit


# --- subtrees in parallel ----------------------------------------------------------------------------

def solve_in_waves(inst, workers: int, time_limit=120.0, in_process=False):
    options = SolveOptions(time_limit=time_limit, quiet=True, workers=workers).start()
    return bnb(inst, options, waves_in_process=in_process)


@pytest.mark.parametrize("case", ["1x1-n7", "pairs-fault-n5", "2x2-fault-n4", "shapes-n3"])
def test_waves_match_brute_force(case):
    inst = loaded(**TINY[case]).instance
    optimum = brute_force(inst)
    result = solve_in_waves(inst, 2)
    assert result.status == "optimal"
    assert abs(evaluate("placement", inst, result.plan).objective - optimum) <= TOL
    assert check_bnb_frontier(inst, result.bound.data) >= optimum - TOL


@pytest.mark.parametrize("name", ["nug12", "pl-sparse-16"])
def test_waves_give_one_answer_for_any_number_of_workers(name):
    """The waves deal the open nodes into a fixed number of groups and merge the groups' results in
    their order: in this process, on 2 or on 3 processes the answer and the tree are the same, and
    the optimum is the one search without waves proves."""
    path = QAPLIB / f"{name}.yaml" if name.startswith("nug") else ROOT / "instances" / "placement" / f"{name}.yaml"
    inst = load(path).instance
    serial = solve_direct(inst, time_limit=120)
    runs = [solve_in_waves(inst, 1, in_process=True), solve_in_waves(inst, 2), solve_in_waves(inst, 3)]
    for result in runs:
        assert result.status == serial.status == "optimal" and result.bound.value == serial.bound.value
        assert result.plan == runs[0].plan and result.bound.data == runs[0].bound.data
        stats = result.stats["layouts"]
        assert all(s["waves"] >= 1 for s in stats.values())
        assert evaluate("placement", inst, result.plan).objective == serial.bound.value
        assert check_bnb_frontier(inst, json.loads(json.dumps(result.bound.data))) >= serial.bound.value - TOL


def test_an_interrupted_wave_keeps_a_valid_frontier():
    inst = load(QAPLIB / "nug15.yaml").instance
    options = SolveOptions(time_limit=60, quiet=True, workers=2).start()
    threading.Timer(1.5, lambda: setattr(options, "interrupted", True)).start()
    started = time.monotonic()
    result = bnb(inst, options)
    assert time.monotonic() - started < 10
    assert result.status == "feasible" and result.bound.data["tiles"]["1x1"]["open_nodes"] > 0
    assert check_bnb_frontier(inst, json.loads(json.dumps(result.bound.data))) >= result.bound.value - TOL


def test_the_checker_bounds_each_leaf_by_the_largest_node_bound_on_its_path():
    """walk re-derives min over leaves of the largest own bound on the leaf's path (a node's plans
    are among its parent's), here recomputed leaf by leaf with path_bound; the search's open
    nodes carry no more than that."""
    from wafopt.models.placement_bnb import BranchAndBound, TileSearch, node_qpb_depth

    lo = load(QAPLIB / "nug15.yaml")     # its nodes get their QPB (TileSpace.qpb_pays)
    space = TileSpace(lo.instance, lo.instance.layouts[0])
    search = BranchAndBound(lo.instance, SolveOptions(quiet=True).start())
    search.qpb_depth = node_qpb_depth(space)
    tree = TileSearch(space, stages=[()], slots=[()], levels={0: [(root_bound(space), 0)]}, queued=1)
    search.run(space, tree, None, expansions=6)   # no incumbent: every child is a leaf or expanded
    leaves = []
    stack = [(0, [], [])]
    while stack:
        node, stages, slots = stack.pop()
        kids = space.kids(stages, slots).tolist()
        for k, child in zip(kids, tree.children[node]):
            path = (stages + [tree.branch[node]], slots + [k])
            if child in tree.branch:
                stack.append((child, *path))
            else:
                leaves.append(path)
    assert 10 < len(leaves) < 5_000
    by_path = min(path_bound(space, stages, slots) for stages, slots in leaves)
    assert walk(space, np.array(tree.tokens()), math.inf) == pytest.approx(by_path, abs=TOL)
    assert tree.least() <= by_path + TOL


def test_a_listed_node_may_carry_the_bound_it_inherits_and_no_more(monkeypatch):
    """A frontier node is checked against the largest bound on its path: this nug12 node's own
    bound is about 684.8, an ancestor's QPB about 685.4, so 685 passes and 686 does not (the
    checker computing node QPBs, as on a tile shape whose search gives its nodes theirs)."""
    monkeypatch.setattr(TileSpace, "qpb_may_pay", True)
    lo = load(QAPLIB / "nug12.yaml")
    space = TileSpace(lo.instance, lo.instance.layouts[0])
    pairs = [[4, 2], [8, 3], [2, 7], [6, 5], [1, 0], [7, 4], [10, 6], [0, 8]]
    stages, slots = [p[0] for p in pairs], [p[1] for p in pairs]
    assert node_bound(space, stages, slots) < 685.0 < path_bound(space, stages, slots) < 686.0
    data = solve_direct(lo.instance).bound.data
    data["tiles"]["1x1"]["frontier"] = [[pairs, 685.0]]
    assert check_bnb_frontier(lo.instance, data) == 578.0
    data["tiles"]["1x1"]["frontier"] = [[pairs, 686.0]]
    with pytest.raises(CertificateError, match="re-derives"):
        check_bnb_frontier(lo.instance, data)
