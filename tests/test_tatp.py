"""TATP group mapping: evaluator by hand, exact methods vs brute force, heuristics vs optimum."""

from __future__ import annotations

import itertools
from functools import lru_cache

import pytest

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.problems import evaluate, parse_instance
from wafopt.run.runner import run


def loaded(rows, cols, N, G, faulty_dies=(), faulty_links=()):
    return parse_instance({"problem": "tatp", "group_size": N, "groups": G,
                           "mesh": {"rows": rows, "cols": cols, "faulty_dies": [list(d) for d in faulty_dies],
                                    "faulty_links": [[list(a), list(b)] for a, b in faulty_links]}})


def brute_force(instance) -> int:
    """Minimum total ring cost over all choices of G disjoint N-sets of healthy dies and all
    cyclic orders of each set (memoized over the set of dies already decided)."""
    mesh, N, G = instance.mesh, instance.group_size, instance.groups
    dies = mesh.healthy_dies
    spare = len(dies) - N * G

    @lru_cache(maxsize=None)
    def ring(members: tuple[int, ...]) -> int:
        head, rest = members[0], members[1:]
        best = None
        for order in itertools.permutations(rest):
            cyc = (head,) + order
            cost = max(mesh.distance(dies[cyc[k]], dies[cyc[(k + 1) % N]]) for k in range(N))
            best = cost if best is None else min(best, cost)
        return best

    @lru_cache(maxsize=None)
    def best(decided: int, left: int) -> float:
        if left == 0:
            return 0
        i = next((k for k in range(len(dies)) if not decided >> k & 1), None)
        if i is None:
            return float("inf")
        skipped = bin(decided).count("1") - N * (G - left)
        out = float("inf")
        if skipped < spare:
            out = best(decided | 1 << i, left)
        free = [k for k in range(i + 1, len(dies)) if not decided >> k & 1]
        for rest in itertools.combinations(free, N - 1):
            mask = decided | 1 << i
            for k in rest:
                mask |= 1 << k
            out = min(out, ring((i,) + rest) + best(mask, left - 1))
        return out

    return int(best(0, G))


def starts(ld) -> list[dict | None]:
    """No warm start (the exact methods start from tiles, often already optimal) and the snake
    plan (a poor start, so the models themselves must find the optimum)."""
    return [None, run(ld, "snake", SolveOptions(quiet=True)).plan]


CASES = [  # rows, cols, N, G, faulty dies, faulty links
    (3, 3, 4, 2, [], []),                          # two 2x2 blocks always overlap: optimum > bound
    (3, 3, 3, 2, [], []),                          # odd N: each ring at least 2
    (3, 3, 2, 4, [(1, 1)], []),
    (4, 4, 2, 7, [(1, 2), (2, 1)], []),            # all 14 healthy dies paired
    (4, 4, 4, 3, [(1, 1), (2, 2)], []),
    (4, 4, 3, 4, [(0, 0), (3, 3)], []),
    (4, 4, 4, 2, [], [((1, 1), (1, 2)), ((2, 1), (2, 2))]),
    (3, 4, 4, 2, [(0, 1), (1, 2)], []),           # faults break every 2x2 block but one
]


def assert_exact_methods_prove(ld, optimum):
    """cpsat and milp, from a good and a poor start, prove `optimum`; returns their solutions."""
    solutions = []
    for method in ("cpsat", "milp"):
        for start in starts(ld):
            sol = run(ld, method, SolveOptions(time_limit=30, quiet=True, warm_start=start))
            assert sol.status == "optimal", (method, sol.message)
            assert sol.objective == optimum, method
            assert sol.bound <= optimum + 1e-9
            solutions.append(sol)
    return solutions


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}-N{c[2]}-G{c[3]}-f{len(c[4])}{len(c[5])}")
def test_exact_methods_match_brute_force_and_heuristics_never_beat_it(case):
    rows, cols, N, G, dies, links = case
    ld = loaded(rows, cols, N, G, dies, links)
    optimum = brute_force(ld.instance)
    assert_exact_methods_prove(ld, optimum)
    for method in ("snake", "tiles", "ga"):
        sol = run(ld, method, SolveOptions(time_limit=2, seed=3, quiet=True))
        assert sol.evaluation["feasible"]
        assert sol.objective >= optimum
        assert sol.bound <= optimum
        if sol.status == "optimal":
            assert sol.objective == optimum


# three rings on a 4 x 4 with two faulty dies, as CASES[4], whose fallback MILP takes 10 s (-m slow);
# here the faulty corners leave optimum 4, still above the ring floor, proven in about 3 s
FALLBACK_THREE_RINGS = (4, 4, 4, 3, [(0, 0), (3, 3)], [])


@pytest.mark.parametrize("case", [CASES[0], pytest.param(CASES[4], marks=pytest.mark.slow),
                                  pytest.param(FALLBACK_THREE_RINGS, id="4x4-N4-G3-f20-corners"), CASES[6], CASES[7]],
                         ids=lambda c: f"{c[0]}x{c[1]}-N{c[2]}-G{c[3]}-f{len(c[4])}{len(c[5])}")
def test_circuit_fallback_matches_brute_force(case, monkeypatch):
    """With the ring enumeration disabled, cpsat and milp fall back to the per-group models."""
    import wafopt.models.tatp_rings as exact

    monkeypatch.setattr(exact, "MAX_COLUMNS", 0)
    rows, cols, N, G, dies, links = case
    ld = loaded(rows, cols, N, G, dies, links)
    optimum = brute_force(ld.instance)
    for sol in assert_exact_methods_prove(ld, optimum):
        assert sol.stats["columns_up_to_cost"] is None


def test_ring_enumeration_matches_brute_force_costs():
    """enumerate_rings lists exactly the die sets whose best cyclic order costs <= K."""
    from wafopt.models.tatp_rings import build_data, enumerate_rings

    ld = loaded(3, 4, 4, 2, [(1, 1)], [((0, 2), (1, 2))])
    inst = ld.instance
    data = build_data(inst, 10)
    for K in (1, 2, 3):
        cols = enumerate_rings(data, K)
        found = {frozenset(r): c for r, c in zip(cols.rings, cols.costs)}
        expected = {}
        for members in itertools.combinations(range(len(data.dies)), 4):
            cost = min(max(data.dist[c[k], c[(k + 1) % 4]] for k in range(4))
                       for c in ((members[0],) + p for p in itertools.permutations(members[1:])))
            if cost <= K:
                expected[frozenset(members)] = cost
        assert found == expected, K
        for ring, cost in zip(cols.rings, cols.costs):  # the stored order reaches the cost
            assert max(data.dist[ring[k], ring[(k + 1) % 4]] for k in range(4)) == cost
    assert enumerate_rings(data, 3, max_columns=5) is None


def test_region_partition_is_exact():
    """best_partition over all healthy dies is the brute-force optimum."""
    from wafopt.heuristics.tatp import best_partition

    for rows, cols, N, G, dies, links in (CASES[0], CASES[4], CASES[5], CASES[7]):
        inst = loaded(rows, cols, N, G, dies, links).instance
        cost, rings = best_partition(inst.mesh, inst.mesh.healthy_dies, G, N, inst.ring_lower_bound)
        assert cost == brute_force(inst)
        ev = evaluate("tatp", inst, {"groups": [[list(d) for d in r] for r in rings]})
        assert ev.feasible and ev.objective == cost


def faulty_8x8_rings_of_four():
    return loaded(8, 8, 4, 15, [(1, 1), (3, 6), (6, 3)])   # instances/tatp/tatp-8x8-f3-n4.yaml


def test_tiles_reaches_the_proven_optimum_on_the_faulty_8x8_rings_of_four():
    """Three faulty dies break the 2 x 2 tiling; the optimum 20 is proven by cpsat and milp (test
    below, docs/tatp.md); tiles reaches it by region search after packing."""
    sol = run(faulty_8x8_rings_of_four(), "tiles", SolveOptions(time_limit=10, quiet=True))
    assert sol.evaluation["feasible"] and sol.objective == 20 and sol.time_s < 5


@pytest.mark.parametrize("method", ["cpsat", "milp"])
def test_exact_methods_prove_the_faulty_8x8_rings_of_four(method):
    """The stage of rings of cost <= 3 (after skipping the small stages 1 and 2) proves 20 once the
    LP's reduced costs leave under a tenth of its 9 547 rings."""
    sol = run(faulty_8x8_rings_of_four(), method, SolveOptions(time_limit=60, quiet=True))
    assert sol.status == "optimal" and sol.objective == 20 and sol.bound == 20
    assert sol.stats["columns_up_to_cost"] == 3


@pytest.mark.parametrize("case", [(3, 4, 4, 2, [(0, 1), (1, 2)], []), (3, 4, 2, 5, [(1, 1)], []),
                                  (4, 4, 3, 3, [(0, 0), (3, 3)], [])], ids=str)
def test_stage_lp_bound_and_fixing_keep_every_better_solution(case):
    """Brute force over every stage solution (disjoint columns plus wildcards): the LP bound is at
    most the stage optimum, and reduced-cost fixing keeps every column (and wildcards) of every
    solution of cost <= upper, for each upper from the bound up."""
    from wafopt.models.tatp_rings import build_data, enumerate_rings, stage_lp

    rows, cols_, N, G, dies, links = case
    inst = loaded(rows, cols_, N, G, dies, links).instance
    data = build_data(inst, 10 * G)
    for K in (inst.ring_lower_bound, inst.ring_lower_bound + 1):
        cols = enumerate_rings(data, K)
        solutions = []   # (cost, columns, wildcards)

        def extend(start, chosen, used, cost):
            wild = G - len(chosen)
            solutions.append((cost + wild * (K + 1), tuple(chosen), wild))
            if wild == 0:
                return
            for s in range(start, len(cols.rings)):
                ring = set(cols.rings[s])
                if not ring & used:
                    extend(s + 1, chosen + [s], used | ring, cost + cols.costs[s])

        extend(0, [], set(), 0)
        optimum = min(c for c, _, _ in solutions)
        for upper in range(optimum - 1, optimum + 4):
            low, keep, wild_ok = stage_lp(data, cols, upper)
            assert low <= optimum + 1e-6
            for cost, chosen, wild in solutions:
                if cost <= upper:
                    assert all(keep[s] for s in chosen) and (wild_ok or wild == 0), (K, upper, cost, chosen)


def test_evaluator_by_hand():
    ld = loaded(3, 4, 4, 2, [(2, 3)])
    plan = {"groups": [[[0, 0], [0, 1], [1, 1], [1, 0]],      # 2x2 block: cost 1
                       [[0, 2], [0, 3], [1, 3], [2, 2]]]}     # hops 1, 1, 2 ([1,3]->[2,2]), 2 back: cost 2
    ev = evaluate("tatp", ld.instance, plan)
    assert ev.feasible and ev.objective == 3.0
    assert ev.details["ring_costs"] == [1, 2]
    assert ev.details["physical_rings"] == 1 and ev.details["tail_hops"] == 2
    # the same dies in a worse order: [0,0] -> [1,1] is 2 hops
    ev = evaluate("tatp", ld.instance, {"groups": [[[0, 0], [1, 1], [0, 1], [1, 0]], plan["groups"][1]]})
    assert ev.details["ring_costs"] == [2, 2]


def test_evaluator_rejects_bad_plans():
    ld = loaded(3, 4, 4, 2, [(2, 3)])
    bad = {"groups": [[[0, 0], [0, 1], [1, 1], [2, 3]], [[0, 0], [0, 2], [5, 5]]]}
    ev = evaluate("tatp", ld.instance, bad)
    assert not ev.feasible
    assert "group 0: die [2, 3] is faulty" in ev.violations
    assert "group 1 has 3 dies, the group size is 4" in ev.violations
    assert "group 1: die [0, 0] is also in group 0" in ev.violations
    assert "group 1: die [5, 5] lies outside the 3 x 4 mesh" in ev.violations
    ev = evaluate("tatp", ld.instance, {"groups": [[[0, 0], [0, 1], [1, 1], [1, 0]]]})
    assert ev.violations == ["plan has 1 groups, the instance asks for 2"]
    ev = evaluate("tatp", ld.instance, {"groups": [["x"]]})
    assert ev.violations == ["malformed plan: groups[0][0] must be a die [row, col], got 'x'"]


def test_too_many_dies_and_disconnected_mesh_are_clear_errors():
    with pytest.raises(InstanceError, match=r"groups: 4 groups x 4 dies = 16 dies, but the mesh has only 15 healthy"):
        loaded(4, 4, 4, 4, [(0, 0)])
    with pytest.raises(InstanceError, match="the healthy dies do not form one connected mesh"):
        loaded(3, 3, 2, 2, [(0, 1), (1, 1), (2, 1)])
    with pytest.raises(InstanceError, match=r"group_size: must be at least 2 .* got 1"):
        loaded(3, 3, 1, 2)


PAPER_WAFERS = ((6, 9, 6, 9), (8, 8, 8, 8), (7, 8, 8, 6), (6, 8, 4, 12), (8, 8, 16, 4))   # rows, cols, N, G


def test_tiles_reaches_the_bound_on_fault_free_paper_wafers():
    for rows, cols, N, G in PAPER_WAFERS:
        sol = run(loaded(rows, cols, N, G), "tiles", SolveOptions(time_limit=5, quiet=True))
        assert sol.status == "optimal" and sol.objective == G, (rows, cols, N)


@pytest.mark.slow
def test_tiles_takes_under_a_second_on_the_paper_wafers():
    """A timing target (a few ms each on an idle machine), so a benchmark: wall time on a shared
    machine measures the neighbours too."""
    for rows, cols, N, G in PAPER_WAFERS:
        assert run(loaded(rows, cols, N, G), "tiles", SolveOptions(time_limit=5, quiet=True)).time_s < 1.0


def test_snake_reproduces_temp_sequential_mapping_on_6x9():
    """TEMP Fig. 7(a): N = 6 on 6 x 9, a sequential mapping leaves six of nine groups non-rings."""
    sol = run(loaded(6, 9, 6, 9), "snake", SolveOptions(quiet=True))
    assert sol.evaluation["details"]["physical_rings"] == 3
    assert sol.objective > 9


def test_ga_is_seeded_and_deterministic():
    ld = loaded(4, 4, 3, 4, [(0, 0), (3, 3)])
    a = run(ld, "ga", SolveOptions(time_limit=20, seed=5, quiet=True))
    b = run(ld, "ga", SolveOptions(time_limit=20, seed=5, quiet=True))
    assert a.plan == b.plan
    assert a.objective >= brute_force(ld.instance)


def test_ga_interrupted_before_its_first_generation_still_returns_the_tiled_rings():
    ld = loaded(6, 9, 6, 9)   # tiles leave non-rings on 6 x 9 (TEMP Fig. 7), so the GA runs
    options = SolveOptions(time_limit=20, seed=5, quiet=True)
    options.interrupted = True   # Ctrl-C already pressed: no generation runs
    sol = run(ld, "ga", options)
    assert sol.plan is not None
    assert evaluate("tatp", ld.instance, sol.plan).objective == sol.objective


# --- untangle: rings whose traffic shares the fewest links ---------------------------------------------


def _price(mesh, rings):
    from wafopt.heuristics.tatp import _LinkLoad, _ring_steps

    load = _LinkLoad(mesh)
    for ring in rings:
        load.change(_ring_steps(ring), +1)
    return load.price, max(load.load.values())


def test_the_incremental_link_price_matches_a_fresh_count_after_every_move():
    import random

    from wafopt.hardware.mesh import Mesh
    from wafopt.heuristics import tatp as T

    mesh = Mesh.build(6, 6, faulty_dies=[(2, 2)], faulty_links=[((0, 0), (0, 1))])
    rng = random.Random(3)
    for _ in range(10):
        dies = rng.sample(mesh.healthy_dies, 32)
        rings = [dies[k:k + 8] for k in range(0, 32, 8)]
        load = T._LinkLoad(mesh)
        for ring in rings:
            load.change(T._ring_steps(ring), +1)
        for _ in range(200):
            pick = rng.random()
            saved, out, into = next(m for share, m in T.MOVES if pick < share)(rings, rng, 8)
            load.change(out, -1)
            load.change(into, +1)
            if rng.random() < 0.5:   # undone, as a rejected move is
                load.change(into, -1)
                load.change(out, +1)
                for g, ring in saved.items():
                    rings[g] = ring
            assert load.price == _price(mesh, rings)[0]
            assert sorted(d for r in rings for d in r) == sorted(dies)


def test_untangle_turns_interleaved_rings_into_two_one_hop_ladders():
    from wafopt.hardware.mesh import Mesh
    from wafopt.heuristics.tatp import untangle

    mesh = Mesh.build(2, 8)
    dies = mesh.healthy_dies
    tangled = [dies[0::2], dies[1::2]]   # every step 2 hops, links shared
    assert _price(mesh, tangled)[1] > 1
    for seed in (0, 1):
        calm = untangle(mesh, tangled, seed=seed)
        assert sorted(d for r in calm for d in r) == sorted(dies) and [len(r) for r in calm] == [8, 8]
        assert _price(mesh, calm) == (0, 1)   # a 2 x 4 block each: one-hop steps, no link shared
        assert untangle(mesh, tangled, seed=seed) == calm   # one seed, one answer


def test_untangle_never_returns_rings_pricier_than_its_start_on_a_faulty_wafer():
    from wafopt.hardware.mesh import Mesh
    from wafopt.heuristics.tatp import untangle
    from wafopt.problems.tatp.plans import snake_groups

    mesh = Mesh.build(8, 7, faulty_dies=[(2, 3), (5, 6)], faulty_links=[((0, 0), (0, 1))])
    start = snake_groups(mesh, 18, 3)
    calm = untangle(mesh, start, seed=0, moves=5000)
    assert sorted(d for r in calm for d in r) == sorted(d for r in start for d in r)
    assert _price(mesh, calm)[0] <= _price(mesh, start)[0]
    assert _price(mesh, calm)[1] <= 2 < _price(mesh, start)[1]   # the snake's 6-hop wrap shares a link 3 ways


def test_round_volumes_of_a_degree_that_divides_nothing_are_the_busiest_dies():
    from pathlib import Path

    from wafopt.problems import load
    from wafopt.problems.tatp.instance import layer_volumes
    scenario = load(Path(__file__).parents[1] / "instances/tatp/tatp-temp-6x9-llama2-7b.yaml").instance
    vol = layer_volumes(scenario)
    # Llama2-7B at N = 6: 683 of 4096 rows of the 4096 x 11008 up-projection, 683 of 4096 tokens
    assert vol["ring_bytes"] == min(683 * 11008, 683 * 4096) * 2
    assert vol["round_compute_s"] == pytest.approx(2 * 683 * 683 * 11008 / scenario.wafer.die_flops)
