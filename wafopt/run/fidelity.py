"""The cost model against measured training runs: published iteration times shipped as data
(wafopt/data/measured/*.yaml, each file with its source), each run's scenario solved with the
Megatron-LM baseline (`--method megatron`: the exact configuration the run used), predicted
against measured.

A file lists `models` (LLM mappings) and `runs`, each {model, nodes, parallel, micro_batch,
global_batch, setting: full | selective, measured_s}: `full` is full recomputation without
sequence parallelism, `selective` sequence parallelism with selective recomputation
(Korthikanti et al. 2022's two columns). Every run is on the `cluster` preset of its file
(default dgx-a100-80g) with sequence 2048 unless the file says otherwise; the file's `training`
mapping holds the settings its runs share.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from statistics import mean
from typing import Callable

import yaml

from wafopt.core.budget import SolveOptions
from wafopt.problems import parse_instance
from wafopt.run.runner import run

SETTINGS = {"full": {"sequence_parallel": False, "recompute": "full"},
            "selective": {"sequence_parallel": True, "recompute": "selective"}}


@dataclass(frozen=True)
class MeasuredRun:
    name: str
    source: str
    scenario: dict        # a `problem: plan` scenario mapping with a `cluster:`
    measured_s: float


@dataclass(frozen=True)
class FidelityRow:
    run: MeasuredRun
    predicted_s: float | None
    message: str

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured."""
        return None if self.predicted_s is None else (self.predicted_s - self.run.measured_s) / self.run.measured_s


def measured_runs() -> list[MeasuredRun]:
    out = []
    folder = resources.files("wafopt").joinpath("data", "measured")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        data = yaml.safe_load(entry.read_text(encoding="utf-8"))
        cluster, seq = data.get("cluster", "dgx-a100-80g"), data.get("seq", 2048)
        for run_data in data["runs"]:
            par = run_data["parallel"]
            name = (f"{run_data['model']} tp{par['tp']} pp{par['pp']} dp{par.get('dp', 1)} "
                    f"v{par.get('interleave', 1)} {run_data['setting']}")
            scenario = {"problem": "plan", "name": name,
                        "cluster": {"preset": cluster, "nodes": run_data["nodes"]},
                        "model": data["models"][run_data["model"]],
                        "training": {**data.get("training", {}), "seq": seq, "micro_batch": run_data["micro_batch"],
                                     "global_batch": run_data["global_batch"], **SETTINGS[run_data["setting"]]},
                        "parallel": dict(par)}
            out.append(MeasuredRun(name, data["source"], scenario, float(run_data["measured_s"])))
    return out


def fidelity(progress: Callable | None = None) -> list[FidelityRow]:
    """Every shipped measured run, predicted by the Megatron-LM baseline."""
    rows = []
    for measured in measured_runs():
        loaded = parse_instance(measured.scenario)
        result = run(loaded, "megatron", SolveOptions(quiet=True))
        row = FidelityRow(measured, result.objective, result.message)
        rows.append(row)
        if progress:
            progress(row)
    return rows


def summary(rows: list[FidelityRow]) -> dict:
    """Mean and largest absolute relative error over the runs predicted, in all and per source."""
    def stats(some):
        errors = [abs(r.error) for r in some if r.error is not None]
        return {"runs": len(some), "predicted": len(errors), "mean_abs_error": mean(errors) if errors else None,
                "max_abs_error": max(errors) if errors else None}

    sources = dict.fromkeys(r.run.source for r in rows)
    return {**stats(rows), "by_source": {src: stats([r for r in rows if r.run.source == src]) for src in sources}}
