"""The CLI end to end: bad input gives one readable message and exit 2, solve/certify round trip."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wafopt.cli import main

SCENARIO = """problem: plan
wafer: watos-config3
model: gpt3-175b
training: {seq: 2048, micro_batch: 1, global_batch: 64, flash_attention: false, sequence_parallel: false, state_bytes_per_param: 16}
parallel: {tp: 8, pp: 7, dp: 1}
"""


def write(tmp_path: Path, text: str, name: str = "inst.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("text, message", [
    ("problem: plan\nwafer: [1, 2\n", "malformed YAML at line"),
    (SCENARIO + "colour: blue\n", "unknown key 'colour'"),
    (SCENARIO.replace("problem: plan", "problem: teleport"), "problem: must be one of"),
    (SCENARIO.replace("model: gpt3-175b", "model: gpt5"), "gpt5"),
    (SCENARIO.replace("wafer: watos-config3", "wafer: watos-config9"), "watos-config9"),
    (SCENARIO.replace("seq: 2048", "seq: 0"), "training.seq"),
    (SCENARIO.replace("seq: 2048, ", ""), "training.seq: missing required field"),
    (SCENARIO.replace("pp: 7", "pp: 8"), "tp*pp*dp = 8*8*1 = 64 dies, but the wafer has only 56 healthy dies"),
    (SCENARIO.replace("wafer: watos-config3", "wafer: {preset: watos-config3, faulty_dies: [[9, 9]]}"),
     "die [9, 9] lies outside"),
    (SCENARIO.replace("model: gpt3-175b", "model: llama3-405b").replace("pp: 7", "pp: 1"),
     "cannot fit with tp=8, pp=1, dp=1 even with full recomputation"),
])
def test_bad_input_is_one_message_and_exit_2(tmp_path, capsys, text, message):
    code = main(["validate", write(tmp_path, text)])
    out = capsys.readouterr().out
    assert code == 2
    assert message in out, out
    code = main(["solve", write(tmp_path, text), "--method", "megatron", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and message in err, err


def test_missing_file_and_unknown_method(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().out
    assert main(["solve", write(tmp_path, SCENARIO), "--method", "magic", "--quiet"]) == 2
    assert "unknown method 'magic'" in capsys.readouterr().err


def test_a_picture_that_cannot_be_written_stops_the_solve_before_it_starts(tmp_path, capsys, at_root):
    out = tmp_path / "x.json"
    args = ["solve", "instances/placement/pl-sparse-12.yaml", "--method", "local", "--quiet", "--out", str(out)]
    (tmp_path / "a-file").write_text("in the way")
    assert main(args + ["--plot", str(tmp_path / "a-file" / "x.png")]) == 2
    assert "cannot write the picture there" in capsys.readouterr().err and not out.exists()


def test_pictures_create_their_directories_as_solutions_do(tmp_path, capsys, at_root):
    solution, picture = tmp_path / "new" / "x.json", tmp_path / "new" / "deeper" / "x.png"
    args = ["solve", "instances/placement/pl-sparse-12.yaml", "--method", "serpentine", "--quiet"]
    assert main(args + ["--out", str(solution), "--plot", str(picture)]) == 0
    assert solution.is_file() and picture.stat().st_size > 0
    shown = tmp_path / "shown" / "y.png"
    assert main(["show", str(solution), "--plot", str(shown)]) == 0 and shown.stat().st_size > 0
    bare = tmp_path / "shown" / "no-suffix"    # written where named, not as no-suffix.png
    assert main(["show", str(solution), "--plot", str(bare)]) == 0 and bare.stat().st_size > 0
    assert main(args + ["--out", str(solution), "--plot", str(tmp_path / "shown")]) == 2   # a directory
    (tmp_path / "a-file").write_text("in the way")
    assert main(["show", str(solution), "--plot", str(tmp_path / "a-file" / "y.png")]) == 2
    assert "cannot write the picture" in capsys.readouterr().err
    space = tmp_path / "space.yaml"   # never read: the picture directory is checked first
    assert main(["explore", str(space), "--plot", str(tmp_path / "a-file" / "pictures"), "--quiet"]) == 2
    assert "cannot write the picture there" in capsys.readouterr().err


def test_flag_errors_name_the_flag_and_a_kernel_method_on_a_scenario_names_problem(tmp_path, capsys):
    inst = write(tmp_path, SCENARIO)
    out = str(tmp_path / "out.json")
    for flag, value in (("--time-limit", "-1"), ("--seed", "-1"), ("--elite-share", "2")):
        assert main(["solve", inst, "--method", "megatron", "--quiet", "--out", out, flag, value]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"wafopt: error: {flag}: "), err
    assert main(["compare", inst, "--methods", "megatron", "--time-limit", "0"]) == 2
    captured = capsys.readouterr()
    assert "--time-limit: " in captured.err and "megatron (1/1)" not in captured.err   # before any work
    assert main(["solve", inst, "--method", "cpsat", "--quiet"]) == 2
    assert "add --problem P (P one of placement, recompute, mem_pair, tatp, routing)" in capsys.readouterr().err
    assert main(["solve", inst, "--method", "dp", "--quiet"]) == 2
    assert "add --problem recompute" in capsys.readouterr().err


def test_result_lines_carry_the_objective_unit(tmp_path, capsys):
    out = str(tmp_path / "out.json")
    assert main(["solve", write(tmp_path, SCENARIO), "--method", "megatron", "--quiet", "--out", out]) == 0
    assert re.search(r"objective [0-9.]+ s  bound", capsys.readouterr().out)
    tatp = str(Path(__file__).resolve().parents[1] / "instances/tatp/tatp-6x8-n4.yaml")
    assert main(["solve", tatp, "--method", "snake", "--quiet", "--out", out]) == 0
    assert re.search(r"objective [0-9.]+ hops  bound [0-9.]+ hops \(certificate", capsys.readouterr().out)


def test_an_exact_method_without_a_time_limit_says_so_once(tmp_path, capsys):
    kernel = str(Path(__file__).resolve().parents[1] / "instances/recompute/rc-example-local.yaml")
    out = str(tmp_path / "out.json")
    assert main(["solve", kernel, "--method", "milp", "--out", out]) == 0
    err = capsys.readouterr().err
    assert err.count("no time limit is set") == 1 and "--time-limit S" in err
    for quieter in (["--time-limit", "30"], ["--quiet"]):
        assert main(["solve", kernel, "--method", "milp", "--out", out, *quieter]) == 0
        assert "no time limit" not in capsys.readouterr().err
    assert main(["solve", kernel, "--method", "dp", "--out", out]) == 0          # dp stops by its own budget
    assert "no time limit" not in capsys.readouterr().err
    assert main(["compare", kernel, "--methods", "milp,cpsat,dp"]) == 0
    err = capsys.readouterr().err
    assert err.count("no time limit is set: milp, cpsat run") == 1


def test_solve_certify_show_round_trip(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inst = write(tmp_path, SCENARIO, "gpt.yaml")
    assert main(["solve", inst, "--method", "megatron", "--quiet", "--json"]) == 0
    sol = json.loads(capsys.readouterr().out)
    for key in ("problem", "instance", "instance_sha256", "method", "solver", "status", "objective", "bound",
                "gap", "time_s", "seed", "plan", "evaluation"):
        assert key in sol
    assert sol["status"] == "feasible" and sol["objective"] == sol["evaluation"]["objective"] > 0
    path = tmp_path / "solutions" / "gpt.megatron.json"
    assert path.exists()
    assert main(["certify", str(path)]) == 0
    assert "CERTIFIED" in capsys.readouterr().out
    # tampering with the stored objective must fail certification
    data = json.loads(path.read_text())
    data["objective"] *= 0.9
    path.write_text(json.dumps(data))
    assert main(["certify", str(path)]) == 5
    assert "INVALID" in capsys.readouterr().out
    assert main(["certify", str(path), "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err
    assert main(["show", inst, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    stage = info["summary"]["workload"]["stages"][0]
    assert {"layers", "inflight", "params", "state_bytes", "activation_bytes", "units"} <= set(stage)
    assert stage["activation_bytes"] == pytest.approx(sum(u["bytes"] for u in stage["units"]))
    png = tmp_path / "plan.png"
    data["objective"] /= 0.9
    path.write_text(json.dumps(data))
    assert main(["show", str(path), "--png", str(png)]) == 0
    assert png.stat().st_size > 1000


def test_evaluate_hand_written_plan(tmp_path, capsys):
    inst = write(tmp_path, SCENARIO.replace("tp: 8, pp: 7", "tp: 1, pp: 2").replace("gpt3-175b", "gpt3-6.7b"))
    plan = write(tmp_path, "tp: 1\npp: 2\ndp: 1\npipelines: [[[[0, 0]], [[0, 0]]]]\n", "plan.yaml")
    assert main(["evaluate", inst, plan]) == 3   # a plan that breaks a rule: infeasible
    assert "die [0, 0] is used twice" in capsys.readouterr().out
    typo = write(tmp_path, "tp: 1\npp: 2\ndp: 1\npipeline: [[[[0, 0]], [[0, 1]]]]\n", "typo.yaml")
    assert main(["evaluate", inst, typo]) == 2   # a plan that cannot be read: bad input
    assert "pipeline" in capsys.readouterr().err


def test_python_dash_m_works():
    out = subprocess.run([sys.executable, "-m", "wafopt", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "certify" in out.stdout


def test_tatp_report_reproduces_temp_6x9(capsys, at_root):
    assert main(["tatp-report", "instances/tatp/tatp-temp-6x9-llama2-7b.yaml", "--combos",
                 "snake+xy,tiles+tcme", "--json"]) == 0
    rows = {f"{r['mapping']}+{r['routing']}": r for r in json.loads(capsys.readouterr().out)["rows"]}
    # TEMP: the sequential mapping leaves groups non-contiguous; tiles makes all nine physical rings
    assert rows["snake+xy"]["physical_rings"] < 9 and rows["tiles+tcme"]["physical_rings"] == 9
    assert rows["tiles+tcme"]["peak_link_bytes"] < rows["snake+xy"]["peak_link_bytes"]


def test_bad_warm_start_and_bad_solution_file_are_one_message(tmp_path, capsys, at_root):
    ws = tmp_path / "ws.json"
    ws.write_text(json.dumps({"problem": "mem_pair", "method": "x", "status": "feasible", "objective": 1.0,
                              "plan": {"allocations": [{"sender": [9, 9], "helper": [0, 0], "amount": 1}]}}))
    assert main(["solve", "instances/mem_pair/mp-example.yaml", "--method", "milp", "--warm-start", str(ws),
                 "--quiet", "--out", str(tmp_path / "o.json")]) == 2
    assert "warm start is not a feasible plan" in capsys.readouterr().err
    ws.write_text(json.dumps({"problem": "mem_pair", "method": "x", "status": "feasible", "objective": 1.0,
                              "bound": "abc", "plan": {}}))
    assert main(["certify", str(ws)]) == 2
    assert "bound must be a number or null" in capsys.readouterr().err


def test_exponent_numbers_in_yaml(tmp_path, capsys):
    text = SCENARIO.replace("global_batch: 64", "global_batch: 6.4e1")
    assert main(["validate", write(tmp_path, text.replace("6.4e1", "64e0"))]) == 0


def test_solve_help_lists_every_method():
    from wafopt.cli import build_parser
    from wafopt.core.registry import PROBLEMS
    from wafopt.run.methods import methods

    text = build_parser()._subparsers._group_actions[0].choices["solve"].format_help()
    text = " ".join(text.split())
    for problem, module in PROBLEMS.items():
        assert f"{problem}: {', '.join(methods(problem))}" in text, problem


def test_readme_lists_every_method(at_root):

    from wafopt.core.registry import PROBLEMS
    from wafopt.run.methods import methods

    readme = (at_root / "README.md").read_text()
    for problem, module in PROBLEMS.items():
        row = f"| `{problem}` | {', '.join(f'`{m}`' for m in methods(problem))} |"
        assert row in readme, row


def test_presets_list_every_preset_with_its_numbers_and_source(capsys):
    from wafopt.hardware.catalog import llm_presets, wafer_presets
    from wafopt.hardware.cluster import cluster_presets

    assert main(["presets", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in found["models"]] == llm_presets()
    assert [w["name"] for w in found["wafers"]] == wafer_presets()
    assert [c["name"] for c in found["clusters"]] == cluster_presets()
    gpt3 = next(m for m in found["models"] if m["name"] == "gpt3-175b")
    assert (gpt3["layers"], gpt3["hidden"], gpt3["heads"], gpt3["ffn_hidden"]) == (96, 12288, 96, 49152)
    assert 174e9 < gpt3["params"] < 176e9
    config3 = next(w for w in found["wafers"] if w["name"] == "watos-config3")
    assert (config3["dies"], config3["die_tflops"], config3["dram_gb"], config3["dram_tbps"],
            config3["link_tbps"], config3["parallel_rules"]) == (56, 708, 70, 2.0, 4.0, "watos")
    dgx = found["clusters"][0]
    assert (dgx["gpu_tflops"], dgx["hbm_gb"], dgx["hbm_tbps"], dgx["nvlink_gbps"]) == (312, 80, 2.039, 300)
    assert all(entry["source"] for kind in found.values() for entry in kind)
    assert main(["presets"]) == 0
    text = capsys.readouterr().out
    assert "watos-config3" in text and "llama3-70b" in text and "dgx-a100-80g" in text
    assert "64/8" in text   # Llama3-70B's heads / KV heads
    assert "WATOS Table II, Config 3" in text   # the source


def test_show_prints_an_interleaved_scenario_whose_stages_hold_fractional_micro_batches(tmp_path, capsys):
    inst = write(tmp_path, "problem: plan\nwafer: watos-config3\nmodel: {preset: gpt3-6.7b}\n"
                           "training: {seq: 2048, micro_batch: 1, global_batch: 64}\n"
                           "parallel: {tp: 4, pp: 4, dp: 1, interleave: 2}\n")
    assert main(["show", inst]) == 0
    assert "inflight" in capsys.readouterr().out
