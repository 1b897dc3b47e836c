"""`wafopt export`: the exact models written for other solvers read back with the same optimum;
`--solver` runs the pyomo models with any installed solver and says so plainly when one is not."""

from __future__ import annotations

import logging
import subprocess
import sys
from itertools import permutations
from pathlib import Path

import numpy as np
import pytest
import yaml

from wafopt.cli import main

ROOT = Path(__file__).resolve().parents[1]

# 4 stages on a 2 x 3 mesh: the base optimum by enumeration below
TINY = {"problem": "placement", "name": "tiny", "mesh": {"rows": 2, "cols": 3}, "tile": [1, 1],
        "flows": [[0, 1, 3], [1, 2, 1], [2, 3, 2], [0, 3, 4], [1, 3, 1]]}


def base_optimum(spec: dict) -> float:
    """min over injective assignments of sum volume x Manhattan hops (no faults: Manhattan)."""
    rows, cols = spec["mesh"]["rows"], spec["mesh"]["cols"]
    dies = [(r, c) for r in range(rows) for c in range(cols)]
    best = np.inf
    for assign in permutations(dies, 4):
        best = min(best, sum(v * (abs(assign[i][0] - assign[j][0]) + abs(assign[i][1] - assign[j][1]))
                             for i, j, v in spec["flows"]))
    return best


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def highs_optimum(path: Path) -> float:
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    assert h.readModel(str(path)) == highspy.HighsStatus.kOk
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return h.getInfo().objective_function_value


@pytest.mark.parametrize("fmt", ["mps", "lp"])
def test_milp_written_and_read_back_by_highs_has_the_same_optimum(tiny, tmp_path, fmt, capsys, caplog):
    out = tmp_path / f"tiny.{fmt}"
    assert main(["export", str(tiny), "--model", "milp", "--format", fmt, "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]   # no writer noise
    assert highs_optimum(out) == pytest.approx(base_optimum(TINY), abs=1e-6)


def test_cpsat_model_proto_read_back_has_the_same_optimum(tiny, tmp_path):
    from google.protobuf import text_format
    from ortools.sat import cp_model_pb2
    from ortools.sat.python import cp_model

    out = tmp_path / "tiny.pb"
    assert main(["export", str(tiny), "--model", "cpsat", "--out", str(out)]) == 0
    proto = cp_model_pb2.CpModelProto()
    proto.ParseFromString(out.read_bytes())
    model = cp_model.CpModel()
    model.Proto().parse_text_format(text_format.MessageToString(proto))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 30
    assert solver.Solve(model) == cp_model.OPTIMAL
    # integer volumes with gcd 1 are not rescaled: the proto's objective is the base objective
    assert solver.ObjectiveValue() == pytest.approx(base_optimum(TINY))


def test_every_model_of_an_instance_is_written(tmp_path):
    """Several tile shapes: one model each, beside the first file."""
    spec = dict(TINY, mesh={"rows": 2, "cols": 4}, tile=[[1, 2], [2, 1]], flows=[[0, 1, 1], [1, 2, 2]])
    path = tmp_path / "shapes.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "shapes.mps"
    assert main(["export", str(path), "--model", "milp", "--out", str(out)]) == 0
    assert out.exists() and (tmp_path / "shapes.2.mps").exists()


@pytest.mark.parametrize("args, field", [
    (["--model", "cpsat", "--format", "mps"], "--format"),
    (["--model", "milp", "--format", "pb"], "--format"),
])
def test_wrong_format_exits_2_naming_the_option(tiny, args, field, capsys):
    assert main(["export", str(tiny), *args]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_a_problem_without_the_model_exits_2(tmp_path, capsys):
    path = ROOT / "instances" / "plan" / "llama3-70b-config3.yaml"
    assert main(["export", str(path), "--model", "milp", "--out", str(tmp_path / "x.mps")]) == 2
    assert "--model" in capsys.readouterr().err


def test_export_writes_other_problems_too(tmp_path):
    out = tmp_path / "mp.mps"
    assert main(["export", str(ROOT / "instances" / "mem_pair" / "mp-example.yaml"), "--model", "milp",
                 "--out", str(out)]) == 0
    assert out.stat().st_size > 0


def cpsat_optimum(path: Path, seconds: float = 30) -> float:
    from google.protobuf import text_format
    from ortools.sat import cp_model_pb2
    from ortools.sat.python import cp_model

    proto = cp_model_pb2.CpModelProto()
    proto.ParseFromString(path.read_bytes())
    model = cp_model.CpModel()
    model.Proto().parse_text_format(text_format.MessageToString(proto))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    assert solver.Solve(model) == cp_model.OPTIMAL
    return solver.ObjectiveValue()


def test_tatp_exports_its_exact_model_even_when_the_start_is_optimal(tmp_path):
    """The tiles heuristic meets the ring floor here; the exported circuit model still proves 6."""
    instance = ROOT / "instances" / "tatp" / "tatp-6x8-n8.yaml"
    out = tmp_path / "tatp.pb"
    assert main(["export", str(instance), "--model", "cpsat", "--out", str(out)]) == 0
    assert cpsat_optimum(out) == pytest.approx(6.0)


def shipped_kernels():
    """Every shipped kernel instance (placement: the sparse pipelines); the first of each problem in
    the default run, the others marked slow (the 24 MB flow MILP of tatp-8x8-f3-n4 alone takes 10 s)."""
    paths = sorted(p for p in (ROOT / "instances").glob("[!p]*/*.yaml") if "problem: plan" not in p.read_text())
    paths += sorted((ROOT / "instances" / "placement").glob("pl-sparse-1*.yaml"))
    seen = set()
    for path in paths:
        first = path.parent.name not in seen
        seen.add(path.parent.name)
        yield pytest.param(path, id=path.stem, marks=() if first else pytest.mark.slow)


@pytest.mark.parametrize("path", list(shipped_kernels()))
def test_every_shipped_kernel_instance_exports_both_models(path, tmp_path):
    for model, fmt in (("milp", "mps"), ("cpsat", "pb")):
        out = tmp_path / f"model.{fmt}"
        assert main(["export", str(path), "--model", model, "--out", str(out)]) == 0
        assert out.stat().st_size > 0


# --- --solver -----------------------------------------------------------------------------------------

def test_an_absent_solver_is_a_clear_error(tiny, capsys):
    assert main(["solve", str(tiny), "--method", "milp", "--solver", "no-such-solver", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--solver" in err and "no-such-solver" in err and "Traceback" not in err


def installed(name: str) -> bool:
    from wafopt.core.errors import InstanceError
    from wafopt.solvers.backends import pyomo_solver

    try:
        pyomo_solver(name)
        return True
    except InstanceError:
        return False


@pytest.mark.parametrize("name", ["appsi_highs", "gurobi", "cplex", "scip", "cbc", "glpk"])
def test_pyomo_solvers_reach_the_same_optimum(tiny, tmp_path, name):
    if not installed(name):
        pytest.skip(f"{name} is not installed")
    out = tmp_path / "sol.json"
    assert main(["solve", str(tiny), "--method", "milp", "--solver", name, "--quiet", "--time-limit", "60",
                 "--out", str(out)]) == 0
    import json

    solution = json.loads(out.read_text())
    assert solution["status"] == "optimal"
    assert solution["objective"] == pytest.approx(base_optimum(TINY))


# --- progress -------------------------------------------------------------------------------------------

def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wafopt", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


# the limit is at least 5x the time of the method's first progress line on an idle machine (bnb and
# CP-SAT: 0.1 s; HiGHS, started in a child process: about 1 s)
@pytest.mark.parametrize("method, source, limit", [("bnb", "bnb", "4"), ("milp", "highs", "8"),
                                                   ("cpsat", "cp-sat", "4")])
def test_a_long_solve_shows_incumbent_bound_and_gap(tmp_path, method, source, limit):
    """From bnb itself and from the HiGHS and CP-SAT callbacks (HiGHS solving in a child process
    whose output pyomo captures)."""
    done = run_cli("solve", "instances/placement/qaplib/nug15.yaml", "--method", method, "--time-limit", limit,
                   "--out", str(tmp_path / "s.json"))
    assert done.returncode == 0
    lines = [line for line in done.stderr.splitlines() if "incumbent" in line]
    assert lines and all(" s " in line and "bound" in line for line in lines)
    assert any(line.split(" s ", 1)[1].strip().startswith(source) and "gap" in line for line in lines)


def test_quiet_shows_nothing(tmp_path):
    # nug12: without --quiet, bnb says what it solves and reports its root bound (a progress line
    # whatever the clock), then proves the optimum within a second
    done = run_cli("solve", "instances/placement/qaplib/nug12.yaml", "--method", "bnb", "--time-limit", "4",
                   "--quiet", "--out", str(tmp_path / "s.json"))
    assert done.returncode == 0
    assert done.stderr.strip() == ""
