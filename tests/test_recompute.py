"""Recomputation selection: evaluator by hand, exact models vs brute force, heuristics never better."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.problems import Loaded, evaluate, load, parse_instance
from wafopt.problems.recompute.instance import (
    RecomputeInstance,
    Stage,
    Unit,
    from_scenario,
    generate,
)
from wafopt.problems.recompute.schema import RecomputeDocument
from wafopt.run.runner import run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "instances" / "recompute" / "rc-example-local.yaml"
REL = 1e-9


def loaded(inst: RecomputeInstance) -> Loaded:
    return Loaded(None, "recompute", inst, {}, None, "test")


def tiny(seed: int, mode: str) -> RecomputeInstance:
    """<= 3 stages, <= 2 units, <= 3 layers per stage; decimal data."""
    rng = random.Random(seed)
    p, n = rng.choice((1, 2, 3, 3)), rng.randint(1, 2)
    m = rng.randint(1, 6)
    units = tuple(Unit(f"u{j}", rng.randint(1, 8) / 2, rng.randint(1, 30) / 100) for j in range(n))
    stages = []
    for i in range(p):
        L = rng.randint(0, 3)
        k = min(p - i, m)
        state = float(rng.randint(5, 15))
        full_act = k * L * sum(u.mem for u in units)
        cap = state + round(rng.uniform(0.0, 1.0) * full_act * 2) / 2  # from tight to roomy
        if rng.random() < 0.06:
            cap = state - 1.0  # even full recomputation does not fit
        stages.append(Stage(L, k, state, max(cap, 0.0), rng.randint(10, 40) / 10))
    return RecomputeInstance(mode, m, units, tuple(stages))


def brute_force(inst: RecomputeInstance) -> float | None:
    best = None
    ranges = [range(s.layers + 1) for s in inst.stages for _ in inst.units]
    n = len(inst.units)
    for flat in itertools.product(*ranges):
        x = [list(flat[i * n:(i + 1) * n]) for i in range(len(inst.stages))]
        ev = evaluate("recompute", inst, {"x": x})
        if ev.feasible and (best is None or ev.objective < best):
            best = ev.objective
    return best


CASES = [(seed, mode) for seed in range(20) for mode in ("local", "pooled")]


@pytest.mark.parametrize("seed,mode", CASES)
def test_exact_methods_match_brute_force_and_heuristics_never_beat_it(seed, mode):
    inst = tiny(seed, mode)
    best = brute_force(inst)
    opts = SolveOptions(time_limit=20, quiet=True, seed=seed)
    for method in ("milp", "cpsat"):
        sol = run(loaded(inst), method, opts)
        if best is None:
            assert sol.status == "infeasible", (method, sol.status, sol.message)
            assert "shortfall" in sol.message
            continue
        assert sol.status == "optimal", (method, sol.message)
        assert sol.objective == pytest.approx(best, rel=REL), method
        assert sol.bound <= sol.objective * (1 + REL) + 1e-12
        # the objective is the evaluator's, recomputed from the plan
        assert sol.objective == evaluate("recompute", inst, sol.plan).objective
    for method in ("dp", "uniform", "full"):
        sol = run(loaded(inst), method, opts)
        if best is None:
            assert sol.status == "infeasible"
            continue
        # optimal only when a certified bound (dp: the memory relaxation) meets the plan
        assert sol.status == "feasible" or sol.bound == pytest.approx(best, rel=REL), (method, sol.message)
        assert sol.objective >= best * (1 - REL), method
    dp = run(loaded(inst), "dp", opts)
    if best is not None and dp.stats["exact"]:
        assert dp.objective == pytest.approx(best, rel=REL)  # exact discretization: dp is optimal


def test_evaluator_on_a_hand_computed_plan():
    inst = load(EXAMPLE).instance
    ev = evaluate("recompute", inst, {"x": [[0, 3], [0, 1], [0, 0], [0, 0]]})
    # stage 0: 20 + 4 * (1.5 * 4 + 1.0 * (4 - 3)) = 48 <= 48; times 4.15, 4.05, 4.0, 4.2
    assert ev.feasible, ev.violations
    assert ev.details["stage_memory"][0] == pytest.approx(48.0)
    assert ev.details["stage_time"] == pytest.approx([4.15, 4.05, 4.0, 4.2])
    assert ev.objective == pytest.approx(4.15 + 4.05 + 4.0 + 4.2 + 7 * 4.2)
    bad = evaluate("recompute", inst, {"x": [[0, 2], [0, 1], [0, 0], [0, 0]]})
    assert not bad.feasible
    assert bad.violations == ["stage 0 memory 52 exceeds its capacity 48 by 4"]
    assert evaluate("recompute", inst, {"x": [[5, 0], [0, 0], [0, 0], [0, 0]]}).violations[0] == \
        "x[0][0] = 5 is outside 0..4 (layers of stage 0)"
    assert "must be a list of 4 rows" in evaluate("recompute", inst, {"x": [[0, 0]]}).violations[0]
    assert "missing 'x'" in evaluate("recompute", inst, {}).violations[0]


def test_pooled_evaluator_lists_senders_and_helpers():
    inst = RecomputeInstance("pooled", 2, (Unit("a", 1.0, 0.1),),
                             (Stage(2, 2, 10.0, 12.0, 1.0), Stage(2, 1, 5.0, 12.0, 1.0)))
    ev = evaluate("recompute", inst, {"x": [[0], [0]]})
    # memory 14 and 7 against 12 each: stage 0 sends 2, stage 1 has 5 spare
    assert ev.feasible
    assert ev.details["senders"] == [{"stage": 0, "overflow": 2.0}]
    assert ev.details["helpers"] == [{"stage": 1, "spare": 5.0}]
    assert ev.objective == pytest.approx(2.0 + 1 * 1.0)


def test_infeasible_instances_name_the_shortfall():
    local = RecomputeInstance("local", 4, (Unit("a", 1.0, 0.1),),
                              (Stage(2, 2, 30.0, 25.0, 1.0), Stage(2, 1, 5.0, 12.0, 1.0)))
    for method in ("milp", "cpsat", "dp", "uniform", "full"):
        sol = run(loaded(local), method, SolveOptions(quiet=True))
        assert sol.status == "infeasible"
        assert sol.message == ("infeasible: even full recomputation leaves stage 0 5 over its capacity "
                               "(1 stage(s) short; memory shortfall with full recomputation = 5)")
    pooled = RecomputeInstance("pooled", 4, local.units, local.stages)
    assert run(loaded(pooled), "milp", SolveOptions(quiet=True)).status == "optimal"
    pooled = RecomputeInstance("pooled", 4, local.units, (Stage(2, 2, 30.0, 20.0, 1.0), local.stages[1]))
    sol = run(loaded(pooled), "cpsat", SolveOptions(quiet=True))
    assert sol.status == "infeasible"
    assert sol.message == ("infeasible: even full recomputation needs 35 of pooled memory but the "
                           "stages have 32 (memory shortfall = 3)")


@pytest.mark.parametrize("change,message", [
    ({"mode": "shared"}, "mode: must be one of local, pooled; got 'shared'"),
    ({"microbatches": 0}, "microbatches: must be a positive integer, got 0"),
    ({"units": []}, "units: needs at least one operator unit"),
    ({"stages": [{"layers": -1, "inflight": 1, "state": 1, "capacity": 2, "compute": 1}]},
     "stages[0].layers: must be >= 0, got -1"),
    ({"units": [{"name": "a", "mem": 1, "recompute": 1}, {"name": "a", "mem": 1, "recompute": 1}]},
     "units[1].name: duplicate unit name 'a'"),
    ({"stages": [{"layers": 1, "inflight": 1, "state": 1, "capacity": 2, "compute": 1, "speed": 3}]},
     "stages[0].speed: unknown key 'speed'"),
])
def test_bad_input_names_field_and_value(change, message):
    data = load(EXAMPLE).data | change
    with pytest.raises(InstanceError) as err:
        parse_instance(data, "x.yaml")
    assert message in str(err.value)


def rounded_quanta_instance() -> RecomputeInstance:
    """Unit memories off the DP's quantum grid by a little each."""
    inst = generate(3, stages=6, layers=48, units=6, mode="pooled")
    return RecomputeInstance(inst.mode, inst.microbatches,
                             tuple(Unit(u.name, u.mem + 0.001 * j, u.recompute) for j, u in enumerate(inst.units)),
                             inst.stages)


def test_dp_with_rounded_quanta_stays_feasible_and_not_better_than_milp():
    inst = rounded_quanta_instance()
    opts = SolveOptions(time_limit=20, quiet=True)
    dp = run(loaded(inst), "dp", opts)
    assert dp.status == "feasible"
    milp = run(loaded(inst), "milp", opts)
    assert milp.status == "optimal"
    assert dp.objective >= milp.objective * (1 - REL)


@pytest.mark.slow
def test_dp_with_rounded_quanta_takes_under_a_second():
    """A timing target (about 0.05 s on an idle machine), so a benchmark."""
    assert run(loaded(rounded_quanta_instance()), "dp", SolveOptions(time_limit=20, quiet=True)).time_s < 1.0


def test_generator_is_reproducible_and_parses():
    a, b = generate(7, 4, 16, 3), generate(7, 4, 16, 3)
    assert a == b
    assert parse_instance(RecomputeDocument.of(a, "g").dump()).instance == a


def test_shipped_generated_instances_come_from_the_seeded_generator():
    for path in sorted((ROOT / "instances" / "recompute").glob("rc-g*.yaml")):
        data = load(path).data
        call = data["source"]
        assert call.startswith("wafopt.problems.recompute.instance.generate(")
        assert eval(call.replace("wafopt.problems.recompute.instance.", ""), {"generate": generate}) == load(path).instance


def test_gcmr_chain_on_a_scenario_is_feasible_and_beats_the_megatron_baseline():
    scenario = load(ROOT / "instances" / "plan" / "llama3-70b-config3.yaml")
    opts = SolveOptions(time_limit=20, quiet=True)
    gcmr = run(scenario, "gcmr", opts)
    megatron = run(scenario, "megatron", opts)
    assert gcmr.status == "feasible", gcmr.message
    assert gcmr.objective < megatron.objective
    assert gcmr.plan["offload"], "pooled recomputation should leave Senders to offload"
    # the per-die memory after offloading fits (the plan evaluator checks it)
    assert gcmr.evaluation["details"]["max_memory_fraction"] <= 1 + 1e-9
    # the kernel holds only recomputable units (the layer-input checkpoint is fixed memory)
    units = scenario.instance.workload().stages[0].units
    x = [[v for v, u in zip(row, units) if u.recomputable] for row in gcmr.plan["recompute"]]
    assert all(v == 0 for row in gcmr.plan["recompute"] for v, u in zip(row, units) if not u.recomputable)
    kernel = evaluate("recompute", from_scenario(scenario.instance), {"x": x})
    assert kernel.feasible


def test_byte_sized_data_with_fractions_is_scaled_exactly():
    # 10 layers of 999999999.6 B fit 9999999999.4 B exactly (9999999996 B): nothing to recompute.
    # A relative integrality tolerance would round 999999999.6 to 10^9 and force recomputation.
    inst = parse_instance({
        "problem": "recompute", "mode": "local", "microbatches": 2,
        "units": [{"name": "u", "mem": 999999999.6, "recompute": 1.0}],
        "stages": [{"layers": 10, "inflight": 1, "state": 0.0, "capacity": 9999999999.4, "compute": 10.0}]})
    for method in ("milp", "cpsat", "dp", "none"):
        sol = run(inst, method, SolveOptions(quiet=True, time_limit=10))
        assert sol.objective == pytest.approx(20.0), (method, sol.objective, sol.message)
