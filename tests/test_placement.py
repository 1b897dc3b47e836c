"""Stage placement: evaluator by hand, exact methods vs brute force, heuristics never beat the optimum."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from placement_helpers import TOL, brute_force, chain, loaded

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.problems import evaluate, load, parse_instance
from wafopt.run.runner import run


def solve(lo, method, **kw):
    sol = run(lo, method, SolveOptions(time_limit=kw.pop("time_limit", 20), quiet=True, **kw))
    if sol.plan is not None and sol.objective is not None:   # the evaluator recomputes the objective
        assert evaluate("placement", lo.instance, sol.plan).objective == pytest.approx(sol.objective)
    return sol


rng = np.random.default_rng(7)
TINY = {
    "1x1-3x3-n7": dict(mesh={"rows": 3, "cols": 3}, tile=[1, 1],
                       flows=chain(7) + [[0, 4, 3.5], [2, 6, 1.25], [5, 1, 2.0]]),
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
    "dense-n6": dict(mesh={"rows": 2, "cols": 4}, tile=[1, 1],
                     flow_matrix=rng.integers(0, 6, size=(6, 6)).astype(float).tolist()),
}
for case in TINY.values():
    if "flow_matrix" in case:
        np.fill_diagonal(m := np.array(case["flow_matrix"]), 0)
        case["flow_matrix"] = m.tolist()


@pytest.fixture(scope="module", params=sorted(TINY))
def tiny(request):
    lo = loaded(**TINY[request.param])
    return lo, brute_force(lo.instance, full=False)


@pytest.mark.parametrize("method", ["milp", "cpsat"])
def test_exact_methods_match_brute_force(tiny, method):
    lo, optimum = tiny
    sol = solve(lo, method)
    assert sol.status == "optimal", sol.message
    assert sol.objective == pytest.approx(optimum, abs=TOL)
    assert sol.bound == pytest.approx(optimum, abs=1e-5)


@pytest.mark.parametrize("method", ["local", "ga"])
def test_heuristics_find_but_never_beat_the_optimum(tiny, method):
    lo, optimum = tiny
    sol = solve(lo, method, time_limit=3, seed=1)
    assert sol.status == "feasible"
    assert sol.objective >= optimum - TOL
    assert sol.objective == pytest.approx(optimum, abs=TOL)


@pytest.mark.parametrize("method", ["serpentine", "rowmajor", "glb"])
def test_baselines_and_bound(tiny, method):
    lo, optimum = tiny
    sol = solve(lo, method)
    assert sol.objective >= optimum - TOL
    if method == "glb":
        assert sol.bound <= optimum + TOL


def test_rlt1_bound_between_gilmore_lawler_and_the_optimum(tiny):
    lo, optimum = tiny
    sol = solve(lo, "rlt1", time_limit=20)
    glb = solve(lo, "glb").bound
    assert glb - TOL <= sol.bound <= optimum + TOL
    assert sol.objective >= optimum - TOL and sol.status in ("optimal", "feasible")
    assert (sol.status == "optimal") == (sol.objective <= sol.bound + TOL)
    for stats in sol.stats["layouts"].values():
        lp = stats["rlt1"]
        assert lp["highs_status"] == "Optimal"
        # the certified (Lagrangian) bound agrees with HiGHS' LP optimum up to IPM tolerances
        assert lp["lagrangian_bound"] <= lp["lp_objective"] + 1e-6 * max(1.0, abs(lp["lp_objective"]))
        assert lp["lagrangian_bound"] >= lp["lp_objective"] - 1e-4 * max(1.0, abs(lp["lp_objective"]))


def test_rlt1_lagrangian_bound_is_valid_for_any_prices():
    from wafopt.models.placement import build_rlt1, lagrangian_bound

    lo = loaded(**TINY["1x2-fault-n5"])      # m > n slots: inequality rows
    lp = build_rlt1(lo.instance, lo.instance.layouts[0])
    optimum = brute_force(lo.instance, full=False)
    prices = np.random.default_rng(3).normal(size=(20, lp.shape[0]))
    assert all(lagrangian_bound(lp, pi) <= optimum + TOL for pi in prices)
    assert lagrangian_bound(lp, np.zeros(lp.shape[0])) == pytest.approx(0.0)


def test_rlt1_falls_back_to_gilmore_lawler_without_time():
    lo = loaded(**TINY["dense-n6"])
    sol = solve(lo, "rlt1", time_limit=1e-4)
    assert sol.bound == pytest.approx(solve(lo, "glb").bound)
    assert "Gilmore-Lawler" in sol.message


def test_rlt1_beats_gilmore_lawler_on_nug12():
    path = Path(__file__).resolve().parents[1] / "instances" / "placement" / "qaplib" / "nug12.yaml"
    sol = solve(load(path), "rlt1", time_limit=60)
    assert sol.bound > 493.0 and sol.bound <= 578.0     # GLB 493 (test_qaplib), optimum 578
    assert sol.objective >= 578.0 - TOL


def test_mem_pairs_full_objective_against_brute_force():
    lo = loaded(mesh={"rows": 2, "cols": 3}, tile=[1, 1], flows=chain(5, [4.0, 1.0, 3.0, 2.0]),
                pairs=[[0, 4, 3.0], [0, 2, 5.0]])
    base_opt, full_opt = brute_force(lo.instance, False), brute_force(lo.instance, True)
    assert full_opt > base_opt    # routing conflicts matter on this instance
    sol = solve(lo, "milp")
    assert sol.bound == pytest.approx(base_opt, abs=1e-5)   # base optimum: a proven lower bound
    assert sol.objective >= full_opt - TOL
    assert "does not minimize" in sol.message                 # says the penalty is unmodelled
    sol = solve(lo, "cpsat")                                 # models the conflicts: exact for Eq. 2
    assert sol.status == "optimal" and sol.objective == pytest.approx(full_opt, abs=TOL)
    assert "does not minimize" not in sol.message
    for method in ("local", "ga"):
        sol = solve(lo, method, time_limit=3)
        assert sol.objective == pytest.approx(full_opt, abs=TOL)


@pytest.mark.parametrize("case", [
    dict(mesh={"rows": 3, "cols": 3}, tile=[1, 1], flows=chain(4, [1.0, 2.0, 1.0]), pairs=[[0, 3, 4.0], [1, 2, 1.0]]),
    dict(mesh={"rows": 4, "cols": 4, "faulty_dies": [[3, 0]]}, tile=[[2, 2], [1, 2]], flows=chain(3), pairs=[[0, 2, 3.0]]),
    dict(mesh={"rows": 2, "cols": 4, "faulty_links": [[[0, 1], [0, 2]]]}, tile=[1, 1], flows=chain(4),
         pairs=[[0, 3, 2.0]]),
])
def test_cpsat_is_exact_for_the_full_objective(case):
    lo = loaded(**case)
    full_opt = brute_force(lo.instance, True)
    sol = solve(lo, "cpsat")
    assert sol.status == "optimal" and sol.objective == pytest.approx(full_opt, abs=TOL)
    assert solve(lo, "local", time_limit=2).objective >= full_opt - TOL


def test_serpentine_follows_the_boustrophedon():
    lo = loaded(mesh={"rows": 2, "cols": 3, "faulty_dies": [[0, 1]]}, tile=[1, 1], flows=chain(4))
    sol = solve(lo, "serpentine")
    assert sol.plan["assignment"] == [[0, 0], [0, 2], [1, 2], [1, 1]]
    assert solve(lo, "rowmajor").plan["assignment"] == [[0, 0], [0, 2], [1, 0], [1, 1]]


def test_warm_start_is_accepted():
    lo = loaded(**TINY["1x1-3x3-n7"])
    start = solve(lo, "local", time_limit=1).plan
    sol = run(lo, "milp", SolveOptions(time_limit=20, quiet=True, warm_start=start))
    assert sol.status == "optimal"


def test_time_limit_returns_incumbent_and_bound():
    lo = loaded(mesh={"rows": 4, "cols": 5}, tile=[1, 1],
                flow_matrix=(np.triu(rng.integers(0, 9, size=(18, 18)), 1) * 1.0).tolist())
    sol = solve(lo, "cpsat", time_limit=1.5)
    assert sol.status == "feasible" and sol.bound is not None and sol.bound <= sol.objective
    assert sol.time_s < 15


# --- evaluator on hand-computed plans ----------------------------------------------------------------

def test_evaluator_hand_computed_conflict_penalty():
    lo = loaded(mesh={"rows": 2, "cols": 4}, tile=[1, 1], flows=[[0, 1, 1.0], [1, 2, 1.0]], pairs=[[0, 2, 2.0]])
    # row placement: base 1 + 1 + 2*2 = 6; pair route (0,0)->(0,1)->(0,2) shares both flow links: 2*2*2 = 8
    ev = evaluate("placement", lo.instance, {"tile": [1, 1], "assignment": [[0, 0], [0, 1], [0, 2]]})
    assert ev.feasible and ev.objective == 14.0
    assert ev.details["base_objective"] == 6.0 and ev.details["pairs"][0]["gamma"] == 2
    # L shape: 0 at (0,0), 1 at (0,1), 2 at (1,1): pair XY route (0,0)->(0,1)->(1,1) shares both links
    ev = evaluate("placement", lo.instance, {"assignment": [[0, 0], [0, 1], [1, 1]]})
    assert ev.objective == 6.0 + 2 * 2 * 2
    # 2 at (1,0): flow 1->2 routes (0,1)->(0,0)->(1,0) (columns first) and shares the pair's link
    ev = evaluate("placement", lo.instance, {"assignment": [[0, 0], [0, 1], [1, 0]]})
    assert ev.objective == 5.0 + 2 * 1 * 1 and ev.details["pairs"][0]["gamma"] == 1
    # 0 at (1,1), 1 at (0,1), 2 at (0,2): pair route (1,1)->(1,2)->(0,2) uses no flow link
    ev = evaluate("placement", lo.instance, {"assignment": [[1, 1], [0, 1], [0, 2]]})
    assert ev.objective == 6.0 and ev.details["conflict_penalty"] == 0.0


def test_evaluator_detour_around_fault_and_tile_representatives():
    lo = loaded(mesh={"rows": 3, "cols": 3, "faulty_dies": [[1, 1]]}, tile=[1, 1], flows=[[0, 1, 2.0], [1, 0, 1.0]])
    ev = evaluate("placement", lo.instance, {"assignment": [[0, 1], [2, 1]]})
    assert ev.objective == 3.0 * 4     # (0,1) to (2,1) detours around the faulty centre: 4 hops
    lo = loaded(mesh={"rows": 4, "cols": 6}, tile=[2, 3], flows=[[0, 1, 1.0]])
    ev = evaluate("placement", lo.instance, {"assignment": [[0, 0], [1, 1]]})
    assert ev.details["representative_dies"] == [[0, 1], [2, 4]] and ev.objective == 5.0


@pytest.mark.parametrize("plan, text", [
    ({"assignment": [[0, 0], [0, 0]]}, "stage 1: slot [0, 0] already holds stage 0"),
    ({"assignment": [[0, 0], [1, 1]]}, "stage 1: slot [1, 1] contains faulty die(s) [[1, 1]]"),
    ({"assignment": [[0, 0], [3, 0]]}, "stage 1: slot [3, 0] outside the 3 x 3 slot grid"),
    ({"assignment": [[0, 0]]}, "assignment has 1 slots, the instance has 2 stages"),
    ({"tile": [1, 2], "assignment": [[0, 0], [0, 1]]}, "tile [1, 2] is not a candidate shape"),
    ({"assignment": [[0, 0], "x"]}, "assignment[1] must be a slot [a, b]"),
    ({"assignment": [[0, 0], [0, 1]], "slots": 1}, "unknown plan key 'slots'"),
])
def test_evaluator_rejects_bad_plans(plan, text):
    lo = loaded(mesh={"rows": 3, "cols": 3, "faulty_dies": [[1, 1]]}, tile=[1, 1], flows=[[0, 1, 1.0]])
    ev = evaluate("placement", lo.instance, plan)
    assert not ev.feasible
    assert any(text in v for v in ev.violations), ev.violations


# --- bad input ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, text", [
    (dict(mesh={"rows": 2, "cols": 2}, flows=[[0, 5, 1.0]], stages=3), "flows[0]: stage index 5 out of range (stages: 3)"),
    (dict(mesh={"rows": 2, "cols": 2}, flows=[[0, 0, 1.0]]), "flows[0]: a flow needs two different stages"),
    (dict(mesh={"rows": 2, "cols": 2}, flows=[[0, 1, -1.0]]), "volume must be a finite number >= 0, got -1.0"),
    (dict(mesh={"rows": 2, "cols": 2}, flows=[[0, 1]]), "flows[0]: expected [i, j, volume]"),
    (dict(mesh={"rows": 2, "cols": 2}, flows=chain(5)), "5 stages do not fit: usable slots per tile shape 1x1: 4"),
    (dict(mesh={"rows": 2, "cols": 2}, tile=[0, 1], flows=chain(2)), "tile: expected a tile shape [h, w] of two positive integers, got [0, 1]"),
    (dict(mesh={"rows": 2, "cols": 2}, flows=chain(2), flow_matrix=[[0]]), "give either flows or flow_matrix, not both"),
    (dict(mesh={"rows": 2, "cols": 2}, flow_matrix=[[0, 1], [1]]), "flow_matrix[1]: expected a row of 2 numbers"),
    (dict(mesh={"rows": 2, "cols": 2}, flows=chain(2), stages=2, pairs=[[0, 3, 1.0]]), "pairs[0]: stage index 3 out of range"),
    (dict(mesh={"rows": 2, "cols": 2}, flows=chain(2), colour="red"), "unknown key 'colour'"),
    (dict(mesh={"rows": 1, "cols": 3, "faulty_dies": [[0, 1]]}, flows=chain(2)), "do not form one connected mesh"),
    (dict(mesh={"rows": 64, "cols": 64}, flows=chain(4), pairs=[[0, 3, 1.0]]),
     "pairs: routing conflicts need the XY route of every slot pair: 4,096 slots of tile 1x1 x 16,128 links"),
])
def test_bad_instances_name_field_and_value(fields, text):
    with pytest.raises(InstanceError) as err:
        loaded(**fields)
    assert text in str(err.value)


def test_fitness_matches_evaluator_on_random_assignments():
    from wafopt.heuristics.placement import Fitness

    lo = loaded(mesh={"rows": 4, "cols": 4, "faulty_dies": [[2, 2]]}, tile=[1, 1], flows=chain(8),
                pairs=[[0, 7, 3.0], [2, 5, 1.0]])
    inst = lo.instance
    lay = inst.layouts[0]
    fit = Fitness(inst, lay)
    P = np.array([np.random.default_rng(k).permutation(len(lay.slots)) for k in range(40)])
    for perm, value in zip(P, fit(P)):
        assert value == pytest.approx(evaluate("placement", inst, lay.plan(perm[:8])).objective)


# --- scenario coupling ------------------------------------------------------------------------------------------

def test_from_scenario_flows_tiles_and_replicas():
    from wafopt.compose.derive import derive

    scenario = parse_instance({"problem": "plan", "wafer": "watos-config3", "model": "gpt3-6.7b",
                               "training": {"seq": 2048, "micro_batch": 1, "global_batch": 64},
                               "parallel": {"tp": 4, "pp": 4, "dp": 2}}, "scenario.yaml")
    inst = derive(scenario, "placement").instance
    workload = scenario.instance.workload()
    assert inst.stages == 8 and inst.tiles == [(1, 4), (2, 2), (4, 1)]
    each_way = workload.microbatches * workload.p2p_bytes       # m = 64 / (1 * 2), p2p = s b h * 2 bytes
    assert workload.microbatches == 32 and workload.p2p_bytes == 2048 * 4096 * 2
    assert inst.flow[0, 1] == inst.flow[1, 0] == inst.flow[6, 7] == each_way
    assert inst.flow[3, 4] == 0                                   # replicas 0 and 1 do not talk
    sol = solve(derive(scenario, "placement"), "cpsat", time_limit=20)
    assert sol.status == "optimal"
