"""QPB at branch-and-bound nodes: a node's bound is never above the best completion below it (brute
force), re-derives exactly, raises the leaves below it in the certificate's walk, and bnb with node
QPBs proves the optimum while a tampered or transplanted node entry is refused."""

from __future__ import annotations

import base64
import copy
import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_helpers import best_completion, integer_instances
from wafopt.models import placement_bnb
from wafopt.models.placement_bnb import BranchAndBound, TileSearch, bnb

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import CertificateError
from wafopt.problems import evaluate, load
from wafopt.problems.placement.branch_bound import (
    TileSpace,
    check_bnb_frontier,
    decode_entries,
    encode_entries,
    path_floor,
    walk,
)
from wafopt.problems.placement.projected import node_entry_value

QAPLIB = Path(__file__).resolve().parents[1] / "instances" / "placement" / "qaplib"
PROPERTY = settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def search_node_qpb(space: TileSpace, stages: list[int], slots: list[int]) -> tuple[float, list]:
    """The search's QPB of the node fixing stages -> slots (its last pair as the child)."""
    search = BranchAndBound(space.inst, SolveOptions(quiet=True).start())
    out = search.node_qpbs(space, TileSearch(space), stages, slots[:-1], np.array([slots[-1]]), np.array([-math.inf]))
    return out[slots[-1]]


@PROPERTY
@given(integer_instances(), st.data())
def test_a_node_qpb_never_exceeds_its_best_completion(inst, data):
    space = TileSpace(inst, data.draw(st.sampled_from(inst.layouts)))
    depth = data.draw(st.integers(1, min(2, space.n - 1)))
    stages = data.draw(st.permutations(range(space.n)))[:depth]
    slots = data.draw(st.permutations(range(space.m)))[:depth]
    value, (pairs, entry) = search_node_qpb(space, stages, slots)
    assert pairs == [[i, k] for i, k in zip(stages, slots)]
    assert value == math.ceil(node_entry_value(space.C, space.D, stages, slots, json.loads(json.dumps(entry)), "x"))
    assert value <= best_completion(space, stages, slots) + 1e-9


def test_the_walk_raises_each_leaf_to_its_paths_qpb():
    inst = load(QAPLIB / "nug12.yaml").instance
    space = TileSpace(inst, inst.layouts[0])
    branch, kids = 0, space.kids([], []).tolist()
    tokens = np.array([branch] + [space.n] * len(kids))     # the root expanded on stage 0, its children leaves
    plain = walk(space, tokens, math.inf)
    everywhere = {((branch, k),): 10_000.0 for k in kids}
    assert walk(space, tokens, math.inf, everywhere) == 10_000.0
    one_left = dict(everywhere)
    del one_left[((branch, kids[0]),)]
    assert plain <= walk(space, tokens, math.inf, one_left) < 10_000.0
    assert path_floor(everywhere, [branch, 3], [kids[0], 5]) == 10_000.0
    assert path_floor(one_left, [branch], [kids[0]]) == -math.inf


def with_node_qpbs(inst, workers: int = 1):
    """bnb with QPB at the root's children (forced: on nug12 QPB is below Gilmore-Lawler)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(placement_bnb, "NODE_QPB_GAIN", -1.0)
        patch.setattr(placement_bnb, "NODE_QPB_DEPTH", 1)
        return bnb(inst, SolveOptions(time_limit=120, quiet=True, workers=workers).start())


@pytest.fixture(scope="module")
def nug12_with_node_qpbs():
    inst = load(QAPLIB / "nug12.yaml").instance
    return inst, with_node_qpbs(inst)


def test_bnb_with_node_qpbs_proves_nug12(nug12_with_node_qpbs):
    inst, result = nug12_with_node_qpbs
    assert result.status == "optimal" and result.bound.value == 578.0
    assert evaluate("placement", inst, result.plan).objective == 578.0
    tile = result.bound.data["tiles"]["1x1"]
    assert result.stats["layouts"]["1x1"]["root_bounds"]["node_qpb"] == len(decode_entries(tile["qpb"], "x")) > 0
    assert check_bnb_frontier(inst, json.loads(json.dumps(result.bound.data))) == 578.0


def test_node_qpbs_on_two_processes_are_the_ones_computed_here(nug12_with_node_qpbs):
    inst, serial = nug12_with_node_qpbs
    pooled = with_node_qpbs(inst, workers=2)
    assert pooled.status == "optimal" and pooled.bound.value == 578.0
    entries = [decode_entries(r.bound.data["tiles"]["1x1"]["qpb"], "x") for r in (serial, pooled)]
    assert entries[0] == entries[1]
    assert check_bnb_frontier(inst, json.loads(json.dumps(pooled.bound.data))) == 578.0


def test_a_tampered_or_transplanted_node_qpb_is_refused(nug12_with_node_qpbs):
    inst, result = nug12_with_node_qpbs
    good = result.bound.data
    entries = decode_entries(good["tiles"]["1x1"]["qpb"], "x")

    def with_entries(change):
        bad = copy.deepcopy(good)
        edited = copy.deepcopy(entries)
        change(edited)
        bad["tiles"]["1x1"]["qpb"] = encode_entries(edited)
        return bad

    def raise_value(e):
        e[0][1]["value"] += 1

    def nudge_point(e):
        e[0][1]["point"][3] += 1e-3

    def move_node(e):
        e[0][0][0][1] = (e[0][0][0][1] + 1) % 12

    for change, error in ((raise_value, "re-derives"), (nudge_point, "re-derives"), (move_node, "re-derives|twice")):
        with pytest.raises(CertificateError, match=error):
            check_bnb_frontier(inst, with_entries(change))
    for text in ("not base64!", base64.b64encode(zlib.compress(b"[[[")).decode(), encode_entries({"a": 1})):
        bad = copy.deepcopy(good)
        bad["tiles"]["1x1"]["qpb"] = text
        with pytest.raises(CertificateError):
            check_bnb_frontier(inst, bad)
    with pytest.raises(CertificateError):
        check_bnb_frontier(load(QAPLIB / "scr12.yaml").instance, good)   # same size, other flows and grid
