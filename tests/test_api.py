"""The public Python API: the README example runs as written, and the API agrees with the CLI."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import wafopt
from wafopt.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_example_runs(monkeypatch):
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Python API\n\n```python\n(.*?)```", text, flags=re.S)
    assert block, "README has no Python API example"
    monkeypatch.chdir(ROOT)
    exec(compile(block.group(1), "README.md", "exec"), {})


def test_the_lazily_loaded_api_is_listed_for_tab_completion():
    assert set(wafopt.__all__) <= set(dir(wafopt))


def test_solve_returns_typed_result_with_evaluated_objective():
    inst = wafopt.load(ROOT / "instances/recompute/rc-example-local.yaml")
    result = wafopt.solve(inst, "milp", time_limit=20)
    assert result.status is wafopt.Status.OPTIMAL
    assert result.objective == wafopt.evaluate(inst, result.plan).objective
    assert result.bound is not None and result.bound.value <= result.objective
    assert result.gap == 0.0


def test_load_accepts_a_mapping_and_rejects_bad_arguments():
    data = {"problem": "tatp", "mesh": {"rows": 2, "cols": 4}, "group_size": 4, "groups": 2}
    inst = wafopt.load(data)
    assert inst.problem == "tatp"
    with pytest.raises(wafopt.InstanceError, match="time_limit"):
        wafopt.solve(inst, "tiles", time_limit=-1)
    with pytest.raises(wafopt.InstanceError, match="seed"):
        wafopt.solve(inst, "tiles", seed=-3)
    with pytest.raises(wafopt.InstanceError, match="--method"):
        wafopt.solve(inst, "no-such-method")
    for bad in ({"workers": 0}, {"workers": True}, {"elite_share": float("nan")}, {"elite_share": 1.5},
                {"solver": "no-such-solver"}):
        with pytest.raises(wafopt.InstanceError, match=next(iter(bad)) if "solver" not in bad else "solver"):
            wafopt.solve(inst, "tiles", **bad)
    assert wafopt.solve(inst, "tiles", workers=2, elite_share=0.25).status.value == "optimal"


def test_compare_skips_methods_that_do_not_apply():
    inst = wafopt.load(ROOT / "instances/recompute/rc-example-local.yaml")
    results = wafopt.compare(inst, ["dp", "glb", "none"])
    assert [r.method for r in results] == ["dp", "none"]


def test_default_output_never_replaces_a_better_solution(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    inst = ROOT / "instances/placement/pl-sparse-12.yaml"
    assert main(["solve", str(inst), "--method", "local", "--time-limit", "2", "--quiet"]) == 0
    best = tmp_path / "solutions" / "pl-sparse-12.local.json"
    kept = json.loads(best.read_text())
    # a worse plan for the same instance and method: the default path keeps the better one
    assert main(["solve", str(inst), "--method", "local", "--time-limit", "2", "--quiet",
                 "--warm-start", str(best)]) == 0
    worse = dict(kept, objective=kept["objective"] * 2)
    best.write_text(json.dumps(dict(kept, objective=kept["objective"] / 2, bound=None)))
    assert main(["solve", str(inst), "--method", "serpentine", "--quiet",
                 "--out", str(tmp_path / "solutions")]) == 0
    assert json.loads(best.read_text())["objective"] == kept["objective"] / 2  # untouched
    serp = tmp_path / "solutions" / "pl-sparse-12.serpentine.json"
    assert serp.exists()
    serp_data = json.loads(serp.read_text())
    serp.write_text(json.dumps(dict(serp_data, objective=1.0)))  # pretend a much better one is there
    assert main(["solve", str(inst), "--method", "serpentine", "--quiet"]) == 0
    assert json.loads(serp.read_text())["objective"] == 1.0
    beside = tmp_path / "solutions" / "pl-sparse-12.serpentine.1.json"
    assert json.loads(beside.read_text())["objective"] == serp_data["objective"]
    assert "kept" in capsys.readouterr().err
    # named as the output file, the better solution is kept all the same
    assert main(["solve", str(inst), "--method", "serpentine", "--quiet", "--out", str(serp)]) == 0
    assert json.loads(serp.read_text())["objective"] == 1.0
    again = tmp_path / "solutions" / "pl-sparse-12.serpentine.2.json"
    assert json.loads(again.read_text())["objective"] == serp_data["objective"]
    assert "kept" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.tmp")), "no stray temporary files"
    del worse


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@needs_git
def test_solving_in_a_checkout_never_modifies_a_tracked_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    inst = str(ROOT / "instances/placement/pl-sparse-12.yaml")
    assert main(["solve", inst, "--method", "serpentine", "--quiet"]) == 0
    reference = tmp_path / "solutions" / "pl-sparse-12.serpentine.json"
    subprocess.run(["git", "add", str(reference)], check=True)    # the index is enough to be tracked
    capsys.readouterr()
    beside = reference.with_name("pl-sparse-12.serpentine.new.json")
    shipped = reference.read_bytes()
    # an equal result: the reference stays byte for byte, the run goes beside it with a note
    assert main(["solve", inst, "--method", "serpentine", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert reference.read_bytes() == shipped and beside.is_file()
    assert f"wrote {Path('solutions') / beside.name}" in captured.out
    assert "tracked by git" in captured.err and "is equal" in captured.err
    # a reference that is worse (objective doubled by hand) is kept too: the note says this run is better
    worse = dict(json.loads(shipped), objective=json.loads(shipped)["objective"] * 2)
    reference.write_text(json.dumps(worse))
    subprocess.run(["git", "add", str(reference)], check=True)
    for out in ([], ["--out", "solutions"], ["--out", str(reference)]):
        assert main(["solve", inst, "--method", "serpentine", "--quiet", *out]) == 0
        assert json.loads(reference.read_text()) == worse
        assert "is better" in capsys.readouterr().err
    assert json.loads(beside.read_text())["objective"] == worse["objective"] / 2


def test_without_git_an_untracked_solution_is_replaced_as_before(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))   # git cannot be found
    inst = str(ROOT / "instances/placement/pl-sparse-12.yaml")
    for _ in range(2):
        assert main(["solve", inst, "--method", "serpentine", "--quiet"]) == 0
    assert [p.name for p in (tmp_path / "solutions").iterdir()] == ["pl-sparse-12.serpentine.json"]
    assert "note" not in capsys.readouterr().err


def test_exit_code_3_when_no_plan(tmp_path):
    # more stages than slots: the mem_pair demand exceeds every helper's room -> infeasible
    inst = tmp_path / "mp.yaml"
    inst.write_text("problem: mem_pair\nmesh: {rows: 2, cols: 2}\nchunk: 1\n"
                    "senders: [{die: [0, 0], overflow: 5}]\nhelpers: [{die: [0, 1], spare: 1}]\n")
    assert main(["solve", str(inst), "--method", "milp", "--quiet", "--out", str(tmp_path / "s.json")]) == 3


def test_compare_table_is_what_compare_json_prints(capsys):
    """The compare rows (gap to the best bound, gap to the known optimum, skipped methods) come from
    the API; the CLI only prints them."""
    import wafopt.api

    paths = [str(ROOT / "instances/placement/qaplib/chr18b.yaml")]
    rows = wafopt.api.compare_table(paths, ["serpentine", "dp"])
    assert main(["compare", *paths, "--methods", "serpentine,dp", "--quiet", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    timeless = [{k: v for k, v in r.items() if k != "time_s"} for r in rows]
    assert timeless == [{k: v for k, v in r.items() if k != "time_s"} for r in printed]
    serpentine, dp = rows
    assert dp["status"] == "skipped" and dp["message"] == "does not apply to problem placement"
    known = serpentine["known_optimum"]
    assert serpentine["gap_known"] == (serpentine["objective"] - known) / abs(known)


def test_the_version_lives_below_the_api(capsys):
    from wafopt.core.version import __version__

    assert wafopt.__version__ == __version__
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"wafopt {__version__}"
