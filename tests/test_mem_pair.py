"""Mem_pair allocation: evaluator by hand, exact models vs brute force, greedy never better, lp <= optimum."""

from __future__ import annotations

import itertools
import random
from functools import lru_cache
from pathlib import Path

import pytest

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.hardware.mesh import Mesh
from wafopt.problems import Loaded, evaluate, load, parse_instance
from wafopt.problems.mem_pair.instance import (
    Helper,
    MemPairInstance,
    Sender,
    generate,
)
from wafopt.problems.mem_pair.schema import MemPairDocument
from wafopt.run.runner import run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "instances" / "mem_pair" / "mp-example.yaml"


def loaded(inst) -> Loaded:
    return Loaded(None, "mem_pair", inst, {}, None, "test")


def tiny(seed: int, with_k: bool) -> MemPairInstance:
    """<= 3 senders, <= 4 helpers, <= 6 chunks each, on a 3 x 4 mesh with faults on odd seeds."""
    rng = random.Random(seed)
    cells = [(r, c) for r in range(3) for c in range(4)]
    rng.shuffle(cells)
    faulty = [cells.pop()] if seed % 2 else []
    links = []
    if seed % 2:
        a = cells[0]
        for b in ((a[0], a[1] + 1), (a[0] + 1, a[1])):
            if b in cells:
                links.append([list(a), list(b)])
                break
    mesh = Mesh.build(3, 4, [list(d) for d in faulty], links)
    ns, nh = rng.randint(1, 3), rng.randint(2, 4)
    chunk = rng.choice((1.0, 0.5, 2.0))
    senders = tuple(Sender(cells[k], rng.randint(1, 6) * chunk - rng.choice((0.0, 0.25)) * chunk)
                    for k in range(ns))
    helpers = tuple(Helper(cells[ns + k], rng.randint(2, 6) * chunk + rng.choice((0.0, 0.3)) * chunk)
                    for k in range(nh))
    return MemPairInstance(mesh, senders, helpers, chunk, rng.randint(1, 2) if with_k else None)


def brute_force(inst: MemPairInstance) -> float | None:
    """Exhaustive: every split of each sender's chunks over the helpers, memoized on the rooms left."""
    H = range(len(inst.helpers))
    K = inst.max_helpers_per_sender

    def splits(s, room):
        for y in itertools.product(*[range(min(room[h], inst.need[s]) + 1) for h in H]):
            if sum(y) != inst.need[s] or (K is not None and sum(1 for v in y if v) > K):
                continue
            if any(v and inst.hops[s][h] is None for h, v in enumerate(y)):
                continue
            yield y

    @lru_cache(maxsize=None)
    def best(s, room):
        if s == len(inst.senders):
            return 0.0
        out = None
        for y in splits(s, room):
            rest = best(s + 1, tuple(r - v for r, v in zip(room, y)))
            if rest is not None:
                cost = sum(v * inst.hops[s][h] for h, v in enumerate(y) if v) * inst.chunk + rest
                out = cost if out is None else min(out, cost)
        return out

    return best(0, tuple(inst.room))


CASES = [(seed, with_k) for seed in range(20) for with_k in (False, True)]


@pytest.mark.parametrize("seed,with_k", CASES)
def test_exact_methods_match_brute_force(seed, with_k):
    inst = tiny(seed, with_k)
    best = brute_force(inst)
    opts = SolveOptions(time_limit=20, quiet=True, seed=seed)
    for method in ("milp", "cpsat"):
        sol = run(loaded(inst), method, opts)
        if best is None:
            assert sol.status == "infeasible", (method, sol.status, sol.message)
            continue
        assert sol.status == "optimal", (method, sol.message)
        assert sol.objective == pytest.approx(best), method
        assert sol.objective == evaluate("mem_pair", inst, sol.plan).objective
        assert sol.bound <= sol.objective + 1e-9
    lp = run(loaded(inst), "lp", opts)
    if best is not None:
        assert lp.bound is not None and lp.bound <= best + 1e-9
        if not with_k:
            assert lp.status == "optimal" and lp.objective == pytest.approx(best)
    greedy = run(loaded(inst), "greedy", opts)
    if best is None:
        assert greedy.status in ("infeasible", "unknown")
    elif greedy.status == "feasible":
        assert greedy.objective >= best - 1e-9


def test_evaluator_on_a_hand_computed_plan():
    inst = load(EXAMPLE).instance
    plan = {"allocations": [{"sender": [0, 0], "helper": [2, 3], "amount": 9.0},
                            {"sender": [0, 0], "helper": [3, 3], "amount": 1.0},
                            {"sender": [0, 1], "helper": [3, 3], "amount": 4.0}]}
    ev = evaluate("mem_pair", inst, plan)
    # hops: (0,0)->(2,3) = 5, (0,0)->(3,3) = 6, (0,1)->(3,3) = 5: 9*5 + 1*6 + 4*5 = 71
    assert ev.feasible, ev.violations
    assert ev.objective == 71.0
    assert ev.details["helper_used"] == [5.0, 9.0]
    over = {"allocations": [{"sender": [0, 0], "helper": [2, 3], "amount": 10.0},
                            {"sender": [0, 1], "helper": [3, 3], "amount": 3.5}]}
    ev = evaluate("mem_pair", inst, over)
    assert ev.violations == [
        "allocations[1]: amount 3.5 is not a positive whole number of chunks of 1",
        "sender [0, 1] places 0 chunks, needs exactly 4 (overflow 4, chunk 1)",
        "helper [2, 3] receives 10 chunks, room for 9 (spare 9)"]
    three = MemPairInstance(inst.mesh, inst.senders, inst.helpers + (Helper((1, 1), 3.0),), 1.0, 2)
    spread = {"allocations": [{"sender": [0, 0], "helper": [2, 3], "amount": 4.0},
                              {"sender": [0, 0], "helper": [3, 3], "amount": 3.0},
                              {"sender": [0, 0], "helper": [1, 1], "amount": 3.0},
                              {"sender": [0, 1], "helper": [2, 3], "amount": 4.0}]}
    assert evaluate("mem_pair", three, spread).violations == ["sender [0, 0] uses 3 helpers, at most 2 allowed"]
    assert "malformed plan" in evaluate("mem_pair", inst, {"allocations": [{"sender": [0, 0]}]}).violations[0]


def test_faults_lengthen_routes():
    mesh = Mesh.build(1, 4, faulty_links=[[[0, 1], [0, 2]]])
    inst = MemPairInstance(mesh, (Sender((0, 0), 2.0),), (Helper((0, 3), 5.0),), 1.0)
    sol = run(loaded(inst), "milp", SolveOptions(quiet=True))
    # the only route from (0,0) to (0,3) is cut: unreachable, so infeasible
    assert sol.status == "infeasible"
    assert "helpers it can reach have 0" in sol.message
    mesh = Mesh.build(2, 4, faulty_links=[[[0, 1], [0, 2]]])
    inst = MemPairInstance(mesh, (Sender((0, 0), 2.0),), (Helper((0, 3), 5.0),), 1.0)
    assert run(loaded(inst), "cpsat", SolveOptions(quiet=True)).objective == 2.0 * 5  # detour of 5 hops


def test_total_overflow_above_total_spare_is_infeasible_with_both_totals():
    inst = load(EXAMPLE).instance
    short = MemPairInstance(inst.mesh, inst.senders, (Helper((3, 3), 8.0), Helper((2, 3), 5.5)), 1.0)
    for method in ("milp", "cpsat", "lp", "greedy"):
        sol = run(loaded(short), method, SolveOptions(quiet=True))
        assert sol.status == "infeasible"
        assert sol.message == "infeasible: total overflow 14 (14 chunks of 1) exceeds total spare 13.5 (13 chunks)"


@pytest.mark.parametrize("change,message", [
    ({"senders": [{"die": [0, 9], "overflow": 1.0}]}, "senders[0].die: die [0, 9] lies outside the 4 x 4 mesh"),
    ({"senders": [{"die": [3, 3], "overflow": 1.0}]}, "helpers[0].die: die [3, 3] already appears as senders[0].die"),
    ({"mesh": {"rows": 4, "cols": 4, "faulty_dies": [[0, 0]]}}, "senders[0].die: die [0, 0] is faulty"),
    ({"chunk": 0}, "chunk: must be positive, got 0"),
    ({"senders": [{"die": [0, 0], "overflow": -1}]}, "senders[0].overflow: must be >= 0, got -1"),
    ({"max_helpers_per_sender": 0}, "max_helpers_per_sender: must be a positive integer, got 0"),
])
def test_bad_input_names_field_and_value(change, message):
    data = load(EXAMPLE).data | change
    with pytest.raises(InstanceError) as err:
        parse_instance(data, "x.yaml")
    assert message in str(err.value)


def test_generator_is_reproducible_and_parses():
    a = generate(5, 8, 8, 10, 12, faulty_dies=3)
    assert a == generate(5, 8, 8, 10, 12, faulty_dies=3)
    assert parse_instance(MemPairDocument.of(a, "g").dump()).instance == a


def test_shipped_generated_instances_come_from_the_seeded_generator():
    for path in sorted((ROOT / "instances" / "mem_pair").glob("mp-g*.yaml")):
        data = load(path).data
        call = data["source"]
        assert call.startswith("wafopt.problems.mem_pair.instance.generate(")
        assert eval(call.replace("wafopt.problems.mem_pair.instance.", ""), {"generate": generate}) == load(path).instance
