"""`wafopt certify` trusts nothing: forged bounds and objectives, NaN, tampered certificates and a
changed instance are invalid (exit 5), solver claims stay claims (exit 4) until a re-solve confirms
them, and every certificate checker agrees with the method that made the bound. Property tests:
no certified bound is ever above the objective of a random feasible plan of a small instance."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wafopt.cli import main
from wafopt.core.budget import SolveOptions
from wafopt.core.errors import CertificateError
from wafopt.core.numeric import close, relative_gap
from wafopt.problems import evaluate, load, parse_instance
from wafopt.run.certify import CERTIFICATES, CERTIFIED, CLAIMED, INVALID, certify
from wafopt.run.runner import run

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
PROPERTY = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def tampered(tmp_path: Path, name: str, **changes) -> str:
    """A copy of a shipped solution with some fields changed (the gap follows unless given)."""
    data = json.loads((SOLUTIONS / name).read_text())
    data.update(changes)
    if "gap" not in changes and data.get("objective") is not None:
        data["gap"] = relative_gap(data["objective"], data.get("bound"))
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def solved(tmp_path: Path, instance: str, method: str, time_limit: float | None = None) -> str:
    """Solve a shipped instance now (the solution carries today's certificate) and write it."""
    solution = run(load(instance), method, SolveOptions(time_limit=time_limit, quiet=True))
    return str(solution.write(tmp_path / f"{Path(instance).stem}.{method}.json"))


def edit(path: str, change) -> str:
    data = json.loads(Path(path).read_text())
    change(data)
    Path(path).write_text(json.dumps(data))
    return path


# ---- forged bounds -----------------------------------------------------------------------------

def test_bound_raised_above_the_objective_is_invalid(tmp_path, at_root):
    # the case: optimum 113, bound raised to 117
    report = certify(tampered(tmp_path, "pl-sparse-12.cpsat.json", bound=117.0))
    assert report.verdict == INVALID and report.exit_code == 5
    assert any("above the plan's objective" in r for r in report.invalid)


def test_bound_raised_above_the_known_optimum_is_invalid(tmp_path, at_root):
    # nug12: known optimum 578 recorded in the instance; the plan itself is worse (832)
    report = certify(tampered(tmp_path, "nug12.glb.json", bound=600.0, bound_provenance="solver"))
    assert report.verdict == INVALID
    assert any("known optimum" in r for r in report.invalid)


def test_forged_claim_on_a_worse_plan_is_never_certified_and_resolve_rejects_it(tmp_path, capsys):
    # a serpentine plan of objective 31 with a claimed optimal bound 31; the optimum is 15
    instance = tmp_path / "cross.yaml"
    instance.write_text(json.dumps({"problem": "placement", "mesh": {"rows": 2, "cols": 3}, "stages": 6,
                                    "flows": [[0, 3, 5], [1, 4, 4], [2, 5, 3], [0, 5, 2], [1, 2, 1]]}))
    path = edit(solved(tmp_path, str(instance), "serpentine"), lambda d: d.update(
        bound=31.0, gap=0.0, bound_provenance="solver", bound_kind="cp-sat", status="optimal"))
    report = certify(path)
    assert report.objective == 31 and report.verdict == CLAIMED and report.certified_bound < 31
    assert main(["certify", path]) == 4
    assert main(["certify", path, "--resolve", "--time-limit", "20"]) == 5
    assert "contradicted: the re-solve found a plan of objective 15" in capsys.readouterr().out


def test_forged_tatp_claim_is_rejected_by_a_resolve(tmp_path, at_root):
    path = tampered(tmp_path, "tatp-6x8-n4.snake.json", bound=20.0, bound_provenance="solver")
    assert certify(path).verdict == CLAIMED
    report = certify(path, resolve=True, time_limit=10)
    assert report.verdict == INVALID and "found a plan of objective 12" in report.invalid[0]


def test_a_true_claim_is_confirmed_by_a_resolve(at_root):
    path = str(SOLUTIONS / "rc-example-local.milp.json")
    assert certify(path).verdict == CLAIMED            # the solver's 45.8 beats the relaxation
    report = certify(path, resolve=True, time_limit=20)
    assert report.verdict == CERTIFIED and close(report.certified_bound, 45.8)


def test_optimal_without_a_closing_bound_is_invalid(tmp_path, at_root):
    report = certify(tampered(tmp_path, "nug12.glb.json", status="optimal"))
    assert report.verdict == INVALID and any("no bound closes the gap" in r for r in report.invalid)


def test_a_gap_that_does_not_follow_is_invalid(tmp_path, at_root):
    report = certify(tampered(tmp_path, "nug12.glb.json", gap=0.01))
    assert report.verdict == INVALID and any("does not follow" in r for r in report.invalid)


def test_a_bound_without_provenance_is_invalid(tmp_path, at_root):
    report = certify(tampered(tmp_path, "nug12.glb.json", bound_provenance="none"))
    assert report.verdict == INVALID


# ---- objectives, NaN, instances ----------------------------------------------------------------

def test_relative_tamper_of_a_tiny_routing_objective_is_caught(tmp_path, at_root):
    data = json.loads((SOLUTIONS / "rt-8x8-f2-snake.tcme.json").read_text())
    assert 1e-6 < data["objective"] < 1e-5
    report = certify(tampered(tmp_path, "rt-8x8-f2-snake.tcme.json", objective=data["objective"] * (1 + 1e-3)))
    assert report.verdict == INVALID and any("re-evaluated" in r for r in report.invalid)


@pytest.mark.parametrize("field, literal", [("objective", "NaN"), ("bound", "NaN"), ("bound", "Infinity"),
                                            ("objective", "-Infinity"), ("gap", "NaN"), ("objective", "1e400")])
def test_nan_and_infinity_are_invalid(tmp_path, at_root, capsys, field, literal):
    data = json.loads((SOLUTIONS / "nug12.glb.json").read_text())
    text = json.dumps({**data, field: "@@"}).replace('"@@"', literal)
    path = tmp_path / "nan.json"
    path.write_text(text)
    assert main(["certify", str(path)]) == 5
    out = capsys.readouterr().out
    assert f"{field} is not a finite number" in out and "Traceback" not in out


def test_nan_inside_the_evaluation_or_certificate_is_invalid(tmp_path, at_root):
    path = tampered(tmp_path, "nug12.glb.json")
    text = Path(path).read_text().replace('"evaluation": {', '"evaluation": {"x": NaN, ', 1)
    Path(path).write_text(text)
    report = certify(path)
    assert report.verdict == INVALID and "evaluation.x" in report.invalid[0]


@pytest.mark.parametrize("changes, message", [
    ({"bound": "abc"}, "bound must be a number or null"),
    ({"status": "great"}, "status must be one of"),
    ({"plan": [1, 2]}, "plan must be a mapping or null"),
    ({"certificate": 3}, "certificate must be a mapping or null"),
    ({"bound_provenance": "oracle"}, "bound_provenance must be one of"),
])
def test_malformed_solution_files_are_bad_input(tmp_path, at_root, capsys, changes, message):
    path = tampered(tmp_path, "nug12.glb.json", gap=None, **changes)
    assert main(["certify", path]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_stored_objective_not_the_evaluators_and_infeasible_plan(tmp_path, at_root):
    assert certify(tampered(tmp_path, "nug12.glb.json", objective=800.0)).verdict == INVALID
    path = tampered(tmp_path, "nug12.glb.json")
    edit(path, lambda d: d["plan"]["assignment"].__setitem__(0, d["plan"]["assignment"][1]))
    report = certify(path)
    assert report.verdict == INVALID and "infeasible" in report.invalid[0]


def test_changed_instance_is_invalid_and_named_with_its_absolute_path(tmp_path, at_root, capsys):
    instance = tmp_path / "tatp-6x8-n4.yaml"
    instance.write_text((ROOT / "instances/tatp/tatp-6x8-n4.yaml").read_text() + "\n# edited\n")
    assert main(["certify", str(SOLUTIONS / "tatp-6x8-n4.cpsat.json"), "--instance", str(instance)]) == 5
    out = capsys.readouterr().out
    assert "is not the one solved" in out and str(instance.resolve()) in out
    assert "certified bound" not in out and "objective recomputed" not in out   # nothing read as a result


@pytest.mark.parametrize("hash_field", [{"instance_sha256": ""}, {"instance_sha256": None}, "dropped"])
def test_a_solution_without_an_instance_hash_is_refused(tmp_path, at_root, capsys, hash_field):
    # without the hash the plan could be certified against any instance the caller names
    path = tampered(tmp_path, "tatp-6x8-n4.cpsat.json", **({} if hash_field == "dropped" else hash_field))
    if hash_field == "dropped":
        edit(path, lambda d: d.pop("instance_sha256"))
    assert main(["certify", path]) == 2
    assert main(["certify", path, "--instance", "instances/tatp/tatp-6x8-n4.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("instance_sha256" in line for line in err)


@pytest.mark.parametrize("instance", ["instances/placement/pl-sparse-12.yaml", "instances/plan/gpt3-175b-config3.yaml"])
def test_an_instance_given_as_the_solution_is_named_as_one(at_root, capsys, instance):
    assert main(["certify", instance]) == 2
    err = capsys.readouterr().err
    assert "instance file, not a solution" in err and "wafopt certify SOLUTION" in err
    assert "malformed JSON" not in err and len(err.strip().splitlines()) == 1


def test_exit_codes_certified_claimed_invalid(tmp_path, at_root, capsys):
    assert main(["certify", str(SOLUTIONS / "tatp-6x8-n4.cpsat.json")]) == 0     # ring floor = optimum
    assert main(["certify", str(SOLUTIONS / "nug12.milp.json")]) == 4           # solver bound 578
    assert main(["certify", tampered(tmp_path, "nug12.milp.json", objective=1.0)]) == 5
    assert main(["certify", str(SOLUTIONS / "nug12.milp.json"), "--time-limit", "5"]) == 2
    out = capsys.readouterr().out
    assert "CERTIFIED: optimal" in out and "CLAIMED" in out and "INVALID" in out


# ---- certificates --------------------------------------------------------------------------------

CERTIFYING_RUNS = [  # (instance, method, kind)
    ("instances/placement/pl-sparse-12.yaml", "glb", "gilmore-lawler"),
    ("instances/placement/pl-llama3-70b-config3-faulty.yaml", "glb", "gilmore-lawler"),
    ("instances/placement/qaplib/nug12.yaml", "rlt1", "rlt1"),
    ("instances/mem_pair/mp-g8x8-16s20h-faults.yaml", "lp", "transport-lp"),
    ("instances/mem_pair/mp-g12x12-64s64h.yaml", "lp", "transport-lp"),
    ("instances/recompute/rc-g4s16l4u-pooled.yaml", "dp", "memory-relaxation"),
    ("instances/recompute/rc-g16s96l15u-pooled-tight.yaml", "dp", "memory-relaxation"),   # coarse quanta: not exact
    ("instances/tatp/tatp-8x8-f3-n4.yaml", "tiles", "ring-floor"),
    ("instances/tatp/tatp-6x9-n6.yaml", "snake", "ring-floor"),
    ("instances/routing/rt-8x8-f2-snake.yaml", "xy", "endpoint"),
]


@pytest.mark.parametrize("instance, method, kind", CERTIFYING_RUNS, ids=lambda v: Path(str(v)).stem)
def test_checker_agrees_with_the_method_and_certify_certifies(tmp_path, at_root, instance, method, kind):
    path = solved(tmp_path, instance, method, time_limit=30)
    sol = json.loads(Path(path).read_text())
    assert sol["bound_provenance"] == "certificate" and sol["bound_kind"] == kind
    loaded = load(instance)
    derived = CERTIFICATES[loaded.problem].check(loaded.instance, kind, sol["certificate"])
    assert close(derived, sol["bound"]) and sol["bound"] <= sol["objective"]
    report = certify(path)
    assert report.verdict == CERTIFIED, report.lines
    assert report.certified_bound >= sol["bound"]


def test_rlt1_certificate_beats_gilmore_lawler_and_tampered_duals_are_invalid(tmp_path, at_root):
    path = solved(tmp_path, "instances/placement/qaplib/nug12.yaml", "rlt1", time_limit=30)
    sol = json.loads(Path(path).read_text())
    assert sol["bound"] > 493 and sol["bound"] <= 578     # GL 493, optimum 578
    duals = sol["certificate"]["tiles"]["1x1"]["duals"]
    assert len(duals) > 1000
    edit(path, lambda d: d["certificate"]["tiles"]["1x1"]["duals"].__setitem__(
        slice(0, 50), [x + 3.0 for x in duals[:50]]))
    report = certify(path)
    assert report.verdict == INVALID and "rlt1 certificate proves" in report.invalid[0]
    edit(path, lambda d: d["certificate"]["tiles"]["1x1"].__setitem__("duals", duals[:-1]))
    assert "needs" in certify(path).invalid[0]


def test_tampered_transport_duals_and_kinds_are_invalid(tmp_path, at_root):
    path = solved(tmp_path, "instances/mem_pair/mp-example.yaml", "lp")
    sol = json.loads(Path(path).read_text())
    assert certify(path).verdict == CERTIFIED
    edit(path, lambda d: d["certificate"]["u"].__setitem__(0, d["certificate"]["u"][0] + 7))
    assert certify(path).verdict == INVALID
    edit(path, lambda d: d["certificate"].__setitem__("u", sol["certificate"]["u"]))
    edit(path, lambda d: d["certificate"]["v"].__setitem__(0, -1))
    assert "must be >= 0" in certify(path).invalid[0]
    edit(path, lambda d: d.__setitem__("bound_kind", "magic"))
    assert "unknown certificate kind" in certify(path).invalid[0]


def test_raised_gilmore_lawler_bound_does_not_re_derive(tmp_path, at_root):
    path = solved(tmp_path, "instances/placement/pl-sparse-12.yaml", "glb")
    edit(path, lambda d: d.update(bound=112.0, gap=relative_gap(d["objective"], 112.0),
                                  certificate={"tiles": {"1x1": 112.0}}))
    report = certify(path)
    assert report.verdict == INVALID and "re-derives as 111" in report.invalid[0]


@pytest.mark.parametrize("tiles", [{"1x1": 5000.0}, {"1x1": "abc"}, {"1x1": 111.0, "2x2": 1.0}, []])
def test_tampered_gilmore_lawler_tile_values_are_invalid(tmp_path, at_root, tiles):
    path = solved(tmp_path, "instances/placement/pl-sparse-12.yaml", "glb")
    assert certify(path).certified
    report = certify(edit(path, lambda d: d.update(certificate={"tiles": tiles})))
    assert report.verdict == INVALID and "gilmore-lawler" in report.invalid[0]


@pytest.mark.parametrize("excess", [2.89e-4, 1e-9])
def test_a_certified_bound_a_hair_above_the_objective_is_invalid(tmp_path, at_root, excess):
    # within the shared relative tolerance of the objective 578, yet above it and above what the
    # tree proves: a proven integer bound admits nothing above itself
    report = certify(tampered(tmp_path, "nug12.bnb.json", bound=578.0 + excess, gap=0.0))
    assert report.verdict == INVALID
    assert any("above the solution's own objective" in r for r in report.invalid)
    assert any("certificate proves 578" in r for r in report.invalid)


@pytest.mark.parametrize("delta", [0.5, 1.0, 5000.0])
def test_a_raised_tile_bound_in_a_bnb_tree_is_invalid(tmp_path, at_root, delta):
    def raise_tile(d):
        tile = next(iter(d["certificate"]["tiles"].values()))
        tile["bound"] += delta

    report = certify(edit(tampered(tmp_path, "nug12.bnb.json"), raise_tile))
    assert report.verdict == INVALID and "above what its tree proves" in report.invalid[0]


def test_unknown_certificate_data_never_tracebacks():
    placement = load(ROOT / "instances/placement/qaplib/nug12.yaml").instance
    check = CERTIFICATES["placement"].check
    for data in (None, {}, {"tiles": 3}, {"tiles": {"9x9": {}}}, {"tiles": {"1x1": {"duals": "x"}}},
                 {"tiles": {"1x1": {"duals": [float("nan")] * 10}}}):
        try:
            value = check(placement, "rlt1", data)
        except CertificateError:
            continue
        assert math.isfinite(value)


# ---- property tests: certified bounds never exceed a feasible plan's objective --------------------

def bound_and_check(problem: str, instance) -> float:
    certificate = CERTIFICATES[problem]
    bound = certificate.bound(instance)
    assert close(certificate.check(instance, bound.kind, bound.data), bound.value)
    return bound.value


def assert_below(problem: str, instance, plans) -> None:
    value = bound_and_check(problem, instance)
    for plan in plans:
        ev = evaluate(problem, instance, plan)
        assert ev.feasible, ev.violations
        assert value <= ev.objective + 1e-9 * abs(ev.objective), (value, ev.objective, plan)


@st.composite
def placements(draw):
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(2, 3))
    n = draw(st.integers(2, min(5, rows * cols)))
    flows = [[i, j, draw(st.sampled_from([0.5, 1, 2.25, 3, 7]))] for i in range(n) for j in range(n)
             if i != j and draw(st.booleans())]
    pairs = [[0, n - 1, 1.5]] if draw(st.booleans()) and n > 2 else []
    data = {"problem": "placement", "mesh": {"rows": rows, "cols": cols}, "stages": n,
            "flows": flows, "pairs": pairs}
    return parse_instance(data).instance, draw(st.randoms(use_true_random=False))


@PROPERTY
@given(placements())
def test_placement_bounds_never_above_a_plan(case):
    inst, rng = case
    lay = inst.layouts[0]
    plans = [lay.plan(rng.sample(range(len(lay.slots)), inst.stages)) for _ in range(6)]
    assert_below("placement", inst, plans)
    if len(lay.slots) <= 6:  # brute force: the RLT-1 bound of optimal duals is at most the optimum
        from wafopt.problems.placement.certificate import build_rlt1, rlt1_certificate
        optimum = min(evaluate("placement", inst, lay.plan(p)).details["base_objective"]
                      for p in itertools.permutations(range(len(lay.slots)), inst.stages))
        lp = build_rlt1(inst, lay)
        for prices in (np.zeros(lp.shape[0]), np.asarray([rng.uniform(-3, 3) for _ in range(lp.shape[0])])):
            bound = rlt1_certificate(inst, {"1x1": prices.tolist()})
            assert bound.value <= optimum + 1e-9 * optimum


@st.composite
def recomputes(draw):
    stages = draw(st.integers(1, 3))
    units = [{"mem": draw(st.sampled_from([0.25, 1, 1.5, 3])), "recompute": draw(st.sampled_from([0, 0.01, 0.1, 0.3]))}
             for _ in range(draw(st.integers(1, 3)))]
    rows = [{"layers": draw(st.integers(0, 3)), "inflight": draw(st.integers(1, 3)), "state": 2.0,
             "capacity": draw(st.sampled_from([2.0, 4.0, 8.0, 20.0])), "compute": draw(st.sampled_from([1.0, 1.2]))}
            for _ in range(stages)]
    data = {"problem": "recompute", "mode": draw(st.sampled_from(["local", "pooled"])),
            "microbatches": draw(st.integers(1, 6)), "units": units, "stages": rows}
    return parse_instance(data).instance


@PROPERTY
@given(recomputes())
def test_recompute_bound_never_above_a_plan(inst):
    ranges = [range(s.layers + 1) for s in inst.stages for _ in inst.units]
    plans = []
    for flat in itertools.islice(itertools.product(*ranges), 300):
        x = [list(flat[i * len(inst.units):(i + 1) * len(inst.units)]) for i in range(len(inst.stages))]
        if evaluate("recompute", inst, {"x": x}).feasible:
            plans.append({"x": x})
    if plans:
        assert_below("recompute", inst, plans)


@st.composite
def mem_pairs(draw):
    rows, cols = 3, draw(st.integers(2, 4))
    dies = draw(st.permutations([(r, c) for r in range(rows) for c in range(cols)]))
    s, h = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    data = {"problem": "mem_pair", "mesh": {"rows": rows, "cols": cols},
            "senders": [{"die": list(d), "overflow": draw(st.sampled_from([1, 2, 3.5]))} for d in dies[:s]],
            "helpers": [{"die": list(d), "spare": draw(st.sampled_from([1, 2, 4]))} for d in dies[s:s + h]],
            "chunk": draw(st.sampled_from([0.5, 1.0])), "max_helpers_per_sender": draw(st.sampled_from([None, 1, 2]))}
    if data["max_helpers_per_sender"] is None:
        del data["max_helpers_per_sender"]
    return parse_instance(data).instance, draw(st.randoms(use_true_random=False))


@PROPERTY
@given(mem_pairs())
def test_mem_pair_bound_never_above_a_plan(case):
    inst, rng = case
    if inst.infeasibility():
        return
    plans = []
    for _ in range(20):   # random allocations: each sender's chunks to random helpers with room
        room, chunks = list(inst.room), {}
        for s, need in enumerate(inst.need):
            for _ in range(need):
                free = [h for h in range(len(room)) if room[h] > 0]
                if not free:
                    break
                h = rng.choice(free)
                room[h] -= 1
                chunks[s, h] = chunks.get((s, h), 0) + 1
        plan = {"allocations": [{"sender": list(inst.senders[s].die), "helper": list(inst.helpers[h].die),
                                 "amount": c * inst.chunk} for (s, h), c in chunks.items()]}
        if evaluate("mem_pair", inst, plan).feasible:
            plans.append(plan)
    assert_below("mem_pair", inst, plans)


@PROPERTY
@given(st.integers(2, 4), st.integers(2, 4), st.integers(2, 5), st.randoms(use_true_random=False))
def test_tatp_and_routing_bounds_never_above_a_plan(rows, cols, size, rng):
    dies = [(r, c) for r in range(rows) for c in range(cols)]
    groups = len(dies) // size
    if groups == 0:
        return
    tatp = parse_instance({"problem": "tatp", "mesh": {"rows": rows, "cols": cols}, "group_size": size,
                           "groups": groups}).instance
    plans = []
    for _ in range(10):
        order = rng.sample(dies, len(dies))
        plans.append({"groups": [[list(d) for d in order[g * size:(g + 1) * size]] for g in range(groups)]})
    assert_below("tatp", tatp, plans)
    flows = [{"src": list(a), "dst": list(b), "volume": rng.choice([1e-6, 0.5, 3.0])}
             for a, b in zip(rng.sample(dies, len(dies)), rng.sample(dies, len(dies))) if a != b]
    if not flows:
        return
    routing = parse_instance({"problem": "routing", "mesh": {"rows": rows, "cols": cols}, "flows": flows,
                              "paths": {"detour": 1}}).instance
    mesh = routing.mesh
    routes = [[mesh.paths(f.src, f.dst, 1) for f in routing.flows] for _ in range(1)][0]
    plans = [{"routes": [[list(d) for d in rng.choice(options)] for options in routes]} for _ in range(10)]
    assert_below("routing", routing, plans)


def test_a_solution_read_from_elsewhere_says_how_to_name_its_instance(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    path = solved(tmp_path, "instances/placement/pl-sparse-12.yaml", "serpentine")   # names it relative to ROOT
    monkeypatch.chdir(tmp_path)
    for command in (["certify", path], ["show", path]):
        assert main(command) == 2
        assert "pass --instance" in capsys.readouterr().err
    for command in ("certify", "show"):
        assert main([command, path, "--instance", str(ROOT / "instances/placement/pl-sparse-12.yaml")]) == 0


def test_validate_names_a_solution_file_for_what_it_is(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    path = solved(tmp_path, "instances/placement/pl-sparse-12.yaml", "serpentine")
    assert main(["validate", path]) == 2
    assert "this is a solution, not an instance" in capsys.readouterr().out


@pytest.mark.parametrize("after_s, shown", [(0.0, True), (1e9, False)])
def test_a_long_tree_check_shows_its_progress_and_a_short_one_says_nothing(monkeypatch, after_s, shown):
    import wafopt.run.certify as certify_module

    lines = []
    monkeypatch.setattr(certify_module, "PROGRESS_AFTER_S", after_s)
    monkeypatch.setattr(certify_module, "ProgressLines", lambda: lines.append)
    report = certify(str(SOLUTIONS / "nug12.bnb.json"), quiet=False)
    assert report.verdict == CERTIFIED
    assert bool(lines) == shown
    assert all(line.startswith("certify bnb-frontier 1x1: ") for line in lines)
    before = len(lines)
    assert certify(str(SOLUTIONS / "nug12.bnb.json")).verdict == CERTIFIED    # quiet: no lines
    assert len(lines) == before
