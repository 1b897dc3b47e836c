"""Pipeline walks (the local search's start on sparse pipelines): against brute force over every
walk on tiny meshes, resumable in chunks, and where the local search and bnb start."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_helpers import chain, loaded, usable_slots

from wafopt import api
from wafopt.core.errors import InstanceError
from wafopt.problems import evaluate
from wafopt.problems.placement import walks
from wafopt.problems.placement.branch_bound import TileSpace
from wafopt.problems.placement.walks import best_walk, is_pipeline

ROOT = Path(__file__).resolve().parents[1]


def walk_plans(inst, tile):
    """Every assignment of the stages to distinct usable slots with stage i + 1 on a slot beside
    stage i's (slot grid neighbours), written from the statement."""
    slots = set(usable_slots(inst.mesh, tile))

    def extend(path):
        if len(path) == inst.stages:
            yield {"tile": list(tile), "assignment": [list(s) for s in path]}
            return
        a, b = path[-1]
        for near in ((a - 1, b), (a + 1, b), (a, b - 1), (a, b + 1)):
            if near in slots and near not in path:
                yield from extend(path + [near])

    for start in sorted(slots):
        yield from extend([start])


@st.composite
def pipelines(draw):
    """3-9 stages in a chain (integer or decimal volumes) with up to three extra flows, on a small
    mesh, a faulty die or none, a 1x1 or 1x2 tile; a Mem_pair or none."""
    rows, cols = draw(st.sampled_from([(2, 3), (3, 3), (2, 4), (3, 4), (4, 4)]))
    tile = draw(st.sampled_from([[1, 1], [1, 1], [1, 2]]))
    mesh = {"rows": rows, "cols": cols * tile[1]}
    if draw(st.booleans()):
        mesh["faulty_dies"] = [[draw(st.integers(0, rows - 1)), draw(st.integers(0, cols * tile[1] - 1))]]
    n = draw(st.integers(3, min(9, rows * cols - 1)))
    volumes = [draw(st.sampled_from([1.0, 2.5, 3.0, 7.0, 9.0])) for _ in range(n - 1)]
    extra = [[draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)), draw(st.sampled_from([1.0, 4.0, 6.5]))]
             for _ in range(draw(st.integers(0, 3)))]
    flows = chain(n, volumes) + [f for f in extra if f[0] != f[1]]
    pairs = [[0, n - 1, float(draw(st.integers(1, 4)))]] if draw(st.booleans()) else []
    try:
        return loaded(mesh=mesh, tile=tile, stages=n, flows=flows, pairs=pairs).instance
    except InstanceError:   # the stages do not fit around the fault
        return loaded(mesh={"rows": rows, "cols": cols * tile[1]}, tile=tile, stages=n, flows=flows,
                      pairs=pairs).instance


@settings(max_examples=40, deadline=None)
@given(pipelines(), st.sampled_from([1, walks.KEEP]))
def test_the_best_walk_is_the_least_walk_by_brute_force(inst, keep):
    walks.KEEP, kept = keep, walks.KEEP    # one walk kept: the search prunes at the best one
    try:
        check_against_brute_force(inst)
    finally:
        walks.KEEP = kept


def check_against_brute_force(inst):
    lay = inst.layouts[0]
    space = TileSpace(inst, lay)
    everything = [evaluate("placement", inst, plan).objective for plan in walk_plans(inst, lay.tile)]
    for starts in (np.arange(space.m), None):     # every slot, one per symmetry orbit
        found = best_walk(space.fit, 10**7, starts=starts)
        if not everything or not is_pipeline(space.C):
            assert found is None
            continue
        perm, value, _ = found
        plan = lay.plan(perm[:space.n])
        assert evaluate("placement", inst, plan).objective == pytest.approx(value, rel=1e-12)
        assert [list(s) for s in plan["assignment"]] in [p["assignment"] for p in walk_plans(inst, lay.tile)]
        if inst.pairs:    # the least full objective among the walks of least base objective
            assert value >= min(everything) - 1e-9
        else:
            assert value == pytest.approx(min(everything), rel=1e-12)


@pytest.mark.parametrize("seed", range(14))
def test_pruning_at_the_best_walk_keeps_the_least_one(seed, monkeypatch):
    """Longer chains with heavy flows between far stages (the walk must fold back), one walk
    kept: a bound that overshoots loses the least walk here (seen with a tenth too much)."""
    monkeypatch.setattr(walks, "KEEP", 1)
    rng = np.random.default_rng(seed)
    for rows, cols in ((3, 3), (3, 4), (4, 4)):
        n = int(rng.integers(7, min(11, rows * cols)))    # from 7 stages 3 extra flows keep it a pipeline
        volumes = [float(v) for v in rng.integers(1, 10, n - 1)]
        extra = [[int(a), int(b), float(rng.integers(1, 12))] for a, b in rng.integers(0, n, (3, 2)) if a != b]
        inst = loaded(mesh={"rows": rows, "cols": cols}, tile=[1, 1], stages=n, flows=chain(n, volumes) + extra).instance
        V = inst.flow
        least = min(sum(V[i, j] * (abs(a[i][0] - a[j][0]) + abs(a[i][1] - a[j][1]))     # hops on a healthy mesh
                        for i, j in zip(*np.nonzero(V)))
                    for a in (p["assignment"] for p in walk_plans(inst, [1, 1])))
        space = TileSpace(inst, inst.layouts[0])
        assert best_walk(space.fit, 10**7)[1] == pytest.approx(least, rel=1e-12)


def test_a_search_in_small_chunks_gives_the_same_walk(monkeypatch):
    inst = loaded(mesh={"rows": 3, "cols": 4}, tile=[1, 1], stages=9,
                  flows=chain(9, [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]) + [[0, 5, 2.0], [2, 8, 3.0]],
                  pairs=[[1, 7, 2.0]]).instance
    space = TileSpace(inst, inst.layouts[0])
    whole = best_walk(space.fit, 10**7)
    monkeypatch.setattr(walks, "CHUNK_NODES", 7)
    chunked = best_walk(space.fit, 10**7)
    assert whole[1] == chunked[1] and whole[2] == chunked[2] > 7
    assert np.array_equal(whole[0], chunked[0])
    cut = best_walk(space.fit, 20)      # the node budget holds
    assert cut is None or cut[2] <= 20


def test_only_pipelines_get_walks():
    inst = loaded(mesh={"rows": 2, "cols": 3}, tile=[1, 1], stages=4, flows=[[0, 1, 1.0], [2, 3, 1.0]]).instance
    space = TileSpace(inst, inst.layouts[0])
    assert not is_pipeline(space.C)
    assert best_walk(space.fit, 1000) is None
    assert is_pipeline(loaded(mesh={"rows": 3, "cols": 3}, tile=[1, 1], stages=8, flows=chain(8)).instance.weights)
    dense = np.ones((8, 8)) - np.eye(8)      # every stage talks to the next, and to every other one
    assert not is_pipeline(dense)


def test_a_walk_that_cannot_fit_is_none():
    # 4 stages on a plus of 5 dies (3 x 3 without its corners): the longest walk has 3 slots
    inst = loaded(mesh={"rows": 3, "cols": 3, "faulty_dies": [[0, 0], [0, 2], [2, 0], [2, 2]]}, tile=[1, 1],
                  stages=4, flows=chain(4)).instance
    space = TileSpace(inst, inst.layouts[0])
    assert best_walk(space.fit, 10**6) is None


@pytest.mark.parametrize("name, optimum", [("pl-sparse-16", 152.0), ("pl-sparse-24", 278.0)])
def test_the_local_search_starts_from_the_best_walk(name, optimum):
    # from the serpentine alone it ends at 155 and 292; bnb's first incumbent is this plan
    path = ROOT / "instances" / "placement" / f"{name}.yaml"
    assert api.solve(path, "local", time_limit=10).objective == optimum


def test_no_walk_search_starts_too_close_to_its_deadline():
    # numba's first load alone could overrun a short limit: the start is then the serpentine's
    from wafopt.heuristics.placement import WALK_MIN_S, walk_start
    from wafopt.problems import load

    inst = load(ROOT / "instances" / "placement" / "pl-sparse-16.yaml").instance
    space = TileSpace(inst, inst.layouts[0])
    assert walk_start(space.fit, time.monotonic() + WALK_MIN_S / 2) == []
    assert len(walk_start(space.fit, time.monotonic() + 60)) == 1
