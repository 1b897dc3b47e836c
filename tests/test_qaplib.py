"""QAPLIB grid instances as placement instances: reader, converter, known optima, bounds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.problems import evaluate, load, parse_instance
from wafopt.problems.placement import qaplib
from wafopt.run.runner import run

SHIPPED = Path(__file__).resolve().parents[1] / "instances" / "placement" / "qaplib"
QAPLIB = SHIPPED / "source"     # the QAPLIB .dat and .sln files the shipped instances are made from
NAMES = sorted(p.stem for p in QAPLIB.glob("*.dat"))


def test_every_shipped_instance_has_its_qaplib_files():
    assert NAMES and NAMES == sorted(p.stem for p in SHIPPED.glob("*.yaml"))
    assert all((QAPLIB / f"{name}.sln").is_file() for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_known_solution_reproduces_the_listed_value(name):
    dat, sln = QAPLIB / f"{name}.dat", QAPLIB / f"{name}.sln"
    mapping = qaplib.convert(dat, sln)
    loaded = parse_instance(mapping, f"{name}.yaml")
    ev = evaluate("placement", loaded.instance, qaplib.known_plan(dat, sln))
    assert ev.feasible and ev.objective == mapping["known_optimum"]["value"]
    assert loaded.known_optimum.proven == (name != "tho40")


def test_nug12_conversion_and_gilmore_lawler_bound():
    mapping = qaplib.convert(QAPLIB / "nug12.dat", QAPLIB / "nug12.sln")
    assert mapping["mesh"] == {"rows": 3, "cols": 4} and mapping["tile"] == [1, 1]
    assert mapping["known_optimum"] == {"value": 578.0, "source": "QAPLIB nug12.sln", "proven": True}
    sol = run(parse_instance(mapping, "nug12.yaml"), "glb", SolveOptions(quiet=True))
    assert sol.bound == pytest.approx(493.0)     # the Gilmore-Lawler bound of nug12 in the literature
    assert sol.objective >= 578.0


def test_grid_in_matrix_b_and_inverse_solution_convention():
    # chr18b: matrix B is the 6 x 3 grid; tho30: the .sln lists the inverse permutation
    assert qaplib.convert(QAPLIB / "chr18b.dat")["mesh"] == {"rows": 6, "cols": 3}
    mapping = qaplib.convert(QAPLIB / "tho30.dat", QAPLIB / "tho30.sln")
    assert mapping["known_optimum"]["value"] == 149936.0


def test_write_instance_round_trip(tmp_path):
    out = qaplib.write_instance(QAPLIB / "scr12.dat", QAPLIB / "scr12.sln", tmp_path)
    assert out.name == "scr12.yaml"
    loaded = load(out)
    assert loaded.instance.stages == 12 and loaded.known_optimum.value == 31410.0


def test_shipped_instances_are_the_converter_output():
    for path in sorted(SHIPPED.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        assert data == qaplib.convert(QAPLIB / f"{path.stem}.dat", QAPLIB / f"{path.stem}.sln")


def test_local_and_ga_reach_scr12_optimum():
    loaded = load(SHIPPED / "scr12.yaml")
    for method in ("local", "ga"):
        sol = run(loaded, method, SolveOptions(time_limit=3, quiet=True, seed=3))
        assert sol.objective >= 31410.0
    assert sol.objective == 31410.0


@pytest.mark.parametrize("content, text", [
    ("3\n0 1\n", "expected n = 3 followed by two 3 x 3 matrices (18 numbers), found 2 numbers"),
    ("2\n0 2 2 0\n0 5 5 0\n", "neither matrix is the Manhattan distance of a row-major grid"),
    ("x y", "QAPLIB files hold integers only"),
])
def test_bad_dat_files(tmp_path, content, text):
    dat = tmp_path / "bad.dat"
    dat.write_text(content)
    with pytest.raises(InstanceError) as err:
        qaplib.convert(dat)
    assert text in str(err.value)


def test_solution_value_mismatch_is_reported(tmp_path):
    dat, sln = tmp_path / "g4.dat", tmp_path / "g4.sln"
    dat.write_text("4\n0 1 1 2\n1 0 2 1\n1 2 0 1\n2 1 1 0\n0 3 0 0\n3 0 1 0\n0 1 0 2\n0 0 2 0\n")
    sln.write_text("4 99\n1 2 3 4\n")   # identity: 2*3*1 + 2*1*2 + 2*2*1 = 14
    with pytest.raises(InstanceError) as err:
        qaplib.convert(dat, sln)
    assert "the permutation costs 14 (inverse: 14), the file states 99" in str(err.value)
