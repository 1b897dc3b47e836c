"""Exact numbers: decimal data solved to proven optimality is reported `optimal`, CP-SAT coefficients
come from the data's exact decimal places (never from float sums), scaled sums beyond 2^53 fall
back without claiming optimality, and each formula is computed in one place."""

from __future__ import annotations

from fractions import Fraction
from itertools import permutations

import numpy as np
import pytest

from wafopt.core.budget import SolveOptions
from wafopt.core.numeric import MAX_EXACT, integral_bound
from wafopt.costmodel.schedule import one_f_one_b
from wafopt.hardware.mesh import Mesh
from wafopt.problems import evaluate, parse_instance
from wafopt.run.runner import run


def placement(**fields):
    return parse_instance({"problem": "placement", **fields}, "exact.yaml")


def brute_force(loaded) -> float:
    """The least evaluated objective over every injective assignment to usable slots (the
    evaluator scores each plan; nothing of the models is reused)."""
    inst = loaded.instance
    best = np.inf
    for tile in inst.tiles:
        h, w = tile
        slots = [(a, b) for a in range(inst.mesh.rows // h) for b in range(inst.mesh.cols // w)
                 if all(inst.mesh.is_healthy((a * h + i, b * w + j)) for i in range(h) for j in range(w))]
        for assign in permutations(slots, inst.stages):
            ev = evaluate("placement", inst, {"tile": list(tile), "assignment": [list(s) for s in assign]})
            best = min(best, ev.objective)
    return best


def solve(loaded, method, **kw):
    return run(loaded, method, SolveOptions(time_limit=kw.pop("time_limit", 20), quiet=True, **kw))


# A 3 x 4 mesh of 1 x 2 tiles with a faulty die and two-decimal volumes: HiGHS proves the optimum
# 45.01 with a bound of 45.009998 (float noise of the solver), which used to end `feasible` with a
# message blaming routing conflicts, although the instance has no Mem_pairs.
MILP_CASE = dict(mesh={"rows": 3, "cols": 4, "faulty_dies": [[0, 0]]}, tile=[1, 2],
                 flows=[[0, 1, 8.34], [1, 0, 1.09], [1, 2, 1.38], [2, 1, 9.64], [2, 3, 7.65], [3, 2, 3.71],
                        [0, 3, 1.09]])

# Weights that are sums of two-decimal volumes (6.87 + 3.51 = 10.379999999999999 in floats): the
# CP-SAT scale used to be chosen from the float sums, fell back to flooring and ended `feasible`.
SUMS_CASE = dict(mesh={"rows": 3, "cols": 3, "faulty_dies": [[1, 1]]}, tile=[1, 1],
                 flows=[[0, 1, 6.87], [1, 0, 3.51], [1, 2, 2.43], [2, 1, 1.19], [2, 3, 4.05], [3, 2, 0.77],
                        [0, 3, 1.34]])


@pytest.mark.parametrize("method, case", [("milp", MILP_CASE), ("cpsat", MILP_CASE), ("milp", SUMS_CASE),
                                          ("cpsat", SUMS_CASE)])
def test_two_decimal_placements_end_optimal(method, case):
    loaded = placement(**case)
    optimum = brute_force(loaded)
    sol = solve(loaded, method)
    assert sol.status == "optimal", sol.message
    assert sol.objective == pytest.approx(optimum, rel=1e-12)
    assert sol.bound == pytest.approx(optimum, rel=1e-12)   # on the data's 0.01 grid, not 45.009998
    assert "gamma" not in sol.message and "conflict" not in sol.message   # there are no Mem_pairs
    if method == "cpsat":
        assert sol.stats["exact_scaling"] is True and sol.stats["weight_scale"] == 100.0


def test_cpsat_weights_are_summed_from_the_exact_decimals():
    from wafopt.models.placement import integer_volumes

    volumes = integer_volumes(placement(**SUMS_CASE).instance)
    assert volumes.exact and volumes.scale == 100
    assert volumes.W[0, 1] == 687 + 351 and volumes.W[0, 3] == 134 and volumes.W[2, 3] == 405 + 77
    # the same flow given twice is summed as decimals, not as floats
    repeated = placement(mesh={"rows": 2, "cols": 2}, tile=[1, 1], flows=[[0, 1, 6.87], [0, 1, 3.51], [1, 2, 0.02]])
    assert repeated.instance.flow[0, 1] == 10.38
    volumes = integer_volumes(repeated.instance)
    assert volumes.exact and volumes.scale == 50 and volumes.W[0, 1] == 519 and volumes.W[1, 2] == 1


def test_cpsat_with_mem_pairs_is_exact_on_decimal_data():
    loaded = placement(mesh={"rows": 2, "cols": 3}, tile=[1, 1],
                       flows=[[0, 1, 2.25], [1, 0, 1.5], [1, 2, 0.75], [2, 3, 3.05]], pairs=[[0, 3, 1.15]])
    optimum = brute_force(loaded)
    sol = solve(loaded, "cpsat")
    assert sol.stats["exact_scaling"] is True
    assert sol.status == "optimal", sol.message
    assert sol.objective == pytest.approx(optimum, rel=1e-12)


def test_scaled_sums_beyond_2_to_the_53_fall_back_without_claiming_optimality():
    from wafopt.models.placement import integer_volumes

    big = 98765432109876.7   # one decimal, but x 100 (for 1.23) summed over the edges passes 2^53
    loaded = placement(mesh={"rows": 2, "cols": 3}, tile=[1, 1],
                       flows=[[0, 1, big], [1, 2, big], [2, 3, big], [3, 0, big], [0, 2, 1.23]])
    volumes = integer_volumes(loaded.instance)
    assert not volumes.exact and "2^53" in volumes.note
    assert int(np.triu(volumes.W, 1).sum()) * 3 <= MAX_EXACT   # the fallback weights stay exact sums
    sol = solve(loaded, "cpsat")
    assert sol.stats["exact_scaling"] is False and "2^53" in sol.message
    assert sol.objective >= brute_force(loaded) * (1 - 1e-12)
    assert sol.bound <= sol.objective            # floored weights: a valid bound


def test_volumes_with_too_many_decimals_fall_back_with_a_valid_bound():
    loaded = placement(mesh={"rows": 2, "cols": 2}, tile=[1, 1],
                       flows=[[0, 1, 1 / 3], [1, 2, 2 / 7], [2, 3, 0.1]])
    sol = solve(loaded, "cpsat")
    assert sol.stats["exact_scaling"] is False and "decimals" in sol.message
    assert sol.bound <= sol.objective + 1e-12
    assert sol.objective == pytest.approx(brute_force(loaded), rel=1e-12)


def test_recompute_cpsat_scales_time_and_memory_exactly():
    from wafopt.models.recompute import integer_data

    loaded = parse_instance({"problem": "recompute", "mode": "pooled", "microbatches": 4,
                             "units": [{"mem": 1.15, "recompute": 0.07}, {"mem": 0.35, "recompute": 0.03}],
                             "stages": [{"layers": 2, "inflight": 2, "state": 3.1, "capacity": 5.05, "compute": 1.11},
                                        {"layers": 2, "inflight": 1, "state": 2.9, "capacity": 5.05,
                                         "compute": 0.98}]}, "rc.yaml")
    data = integer_data(loaded.instance)
    assert data["exact_mem"] and data["exact_time"]
    assert data["a"] == [115, 35] and data["Cap"] == [505, 505] and data["r"] == [7, 3] and data["T0"] == [111, 98]
    sol = solve(loaded, "cpsat")
    assert sol.status == "optimal", sol.message
    brute = min(evaluate("recompute", loaded.instance, {"x": [[a, b], [c, d]]}).objective
                for a in range(3) for b in range(3) for c in range(3) for d in range(3)
                if evaluate("recompute", loaded.instance, {"x": [[a, b], [c, d]]}).feasible)
    assert sol.objective == pytest.approx(brute, rel=1e-12)


def test_recompute_cpsat_falls_back_when_the_scaled_time_would_pass_2_to_the_53():
    from wafopt.models.recompute import integer_data

    loaded = parse_instance({"problem": "recompute", "microbatches": 1000,
                             "units": [{"mem": 1.0, "recompute": 123456789.123456789}],
                             "stages": [{"layers": 100, "inflight": 1, "state": 1.0, "capacity": 500.0,
                                         "compute": 1.5}]}, "rc.yaml")
    data = integer_data(loaded.instance)
    assert data["exact_mem"] and not data["exact_time"]
    sol = solve(loaded, "cpsat")
    assert "time rounded down" in sol.message and sol.stats["exact_scaling"] is False


def test_routing_cpsat_volumes_exact_and_total_within_2_to_the_53():
    from wafopt.models.routing import integer_volumes

    weights, scale, is_exact = integer_volumes([6.87, 3.51, 0.5])
    assert is_exact and scale == 100 and weights == [687, 351, 50]
    weights, scale, is_exact = integer_volumes([2.0 ** 52, 2.0 ** 52, 1.5])   # sum x 10 passes 2^53
    assert not is_exact and max(weights) == 10 ** 6


def test_integral_bound_rounds_solver_noise_onto_the_data_grid():
    assert integral_bound(577.9999999) == 578.0
    assert integral_bound(578.01) == 579.0                      # a real excess is not rounded away
    assert integral_bound(45.009998, 100) == 45.01
    assert integral_bound(45.0102, 100) == 45.02
    assert integral_bound(22.839975, Fraction(100)) == pytest.approx(22.84)
    assert integral_bound(18574776.0) == 18574776.0               # a large exact bound is not weakened
    assert integral_bound(18574775.9999) == 18574776.0


# --- one place per rule ------------------------------------------------------------------------------

def test_one_f_one_b_by_hand():
    # 3 stages of 2, 5 and 3 s, 4 micro-batches: fill and drain 10 s, then 3 more steps of 5 s
    assert one_f_one_b([2.0, 5.0, 3.0], 4) == 25.0
    assert one_f_one_b([7.5], 1) == 7.5
    times = np.array([[2.0, 5.0, 3.0], [4.0, 4.0, 4.0]])
    assert one_f_one_b(times, 4).tolist() == [25.0, 24.0]


def test_recompute_evaluator_uses_the_one_schedule():
    loaded = parse_instance({"problem": "recompute", "microbatches": 3,
                             "units": [{"mem": 1.0, "recompute": 0.5}],
                             "stages": [{"layers": 2, "inflight": 2, "state": 1.0, "capacity": 9.0, "compute": 2.0},
                                        {"layers": 1, "inflight": 1, "state": 1.0, "capacity": 9.0, "compute": 1.0}]},
                            "rc.yaml")
    ev = evaluate("recompute", loaded.instance, {"x": [[1], [0]]})
    # stage times 2 + 0.5 = 2.5 and 1: 2.5 + 1 + (3 - 1) x 2.5
    assert ev.feasible and ev.objective == 8.5 == one_f_one_b([2.5, 1.0], 3)


def test_ring_cost_by_hand():
    mesh = Mesh.build(3, 3, faulty_dies=[[1, 1]])
    assert mesh.ring_cost([(0, 0), (0, 1), (1, 0)]) == 2            # (0,1) -> (1,0) detours: 2 hops
    assert mesh.ring_cost([(0, 0), (0, 1), (0, 2), (1, 2), (2, 2), (2, 1), (2, 0), (1, 0)]) == 1
    assert mesh.ring_cost([(0, 0), (2, 2)]) == 4                    # around the faulty centre
    assert mesh.ring_cost([(0, 0)]) == 0
