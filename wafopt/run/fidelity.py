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

A file may also list `layers` (with `layers_source`): one transformer layer's forward and
backward pass as profiled, {model, tp, micro_batch, sequence_parallel, recompute, forward_ms,
backward_ms}, predicted by the per-layer pass times of `wafopt workload`.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from statistics import mean
from typing import Callable

import yaml

from wafopt.core.budget import SolveOptions
from wafopt.costmodel.report import workload_report
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


@dataclass(frozen=True)
class MeasuredLayer:
    name: str
    source: str
    scenario: dict        # one node running the layer's tp group (a one-layer model)
    recompute: str        # none | selective | full
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class LayerRow:
    layer: MeasuredLayer
    forward_s: float      # predicted
    backward_s: float

    @property
    def errors(self) -> tuple[float, float]:
        """(predicted - measured) / measured of the forward and of the backward pass."""
        return (self.forward_s / self.layer.forward_s - 1, self.backward_s / self.layer.backward_s - 1)


def _measured_files():
    folder = resources.files("wafopt").joinpath("data", "measured")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            yield yaml.safe_load(entry.read_text(encoding="utf-8"))


def _scenario(data: dict, name: str, model: str, nodes: int, training: dict, parallel: dict) -> dict:
    """A `problem: plan` scenario of a measured file: its cluster preset, sequence length and
    shared training settings, with the run's own."""
    return {"problem": "plan", "name": name,
            "cluster": {"preset": data.get("cluster", "dgx-a100-80g"), "nodes": nodes},
            "model": data["models"][model],
            "training": {**data.get("training", {}), "seq": data.get("seq", 2048), **training},
            "parallel": parallel}


def measured_runs() -> list[MeasuredRun]:
    out = []
    for data in _measured_files():
        for run_data in data["runs"]:
            par = run_data["parallel"]
            name = (f"{run_data['model']} tp{par['tp']} pp{par['pp']} dp{par.get('dp', 1)} "
                    f"v{par.get('interleave', 1)} {run_data['setting']}")
            scenario = _scenario(data, name, run_data["model"], run_data["nodes"],
                                 {"micro_batch": run_data["micro_batch"], "global_batch": run_data["global_batch"],
                                  **SETTINGS[run_data["setting"]]}, dict(par))
            out.append(MeasuredRun(name, data["source"], scenario, float(run_data["measured_s"])))
    return out


def measured_layers() -> list[MeasuredLayer]:
    out = []
    for data in _measured_files():
        for row in data.get("layers", []):
            sp = "+sp" if row["sequence_parallel"] else ""
            name = f"{row['model']} layer tp{row['tp']} mb{row['micro_batch']} {row['recompute']}{sp}"
            scenario = _scenario(data, name, row["model"], 1,
                                 {"micro_batch": row["micro_batch"], "global_batch": row["micro_batch"],
                                  "sequence_parallel": row["sequence_parallel"], "recompute": row["recompute"]},
                                 {"tp": row["tp"], "pp": 1, "dp": 1})
            # the profiled layer alone: the whole model need not fit one node under its policy
            scenario["model"] = dict(scenario["model"], layers=1)
            out.append(MeasuredLayer(name, data["layers_source"], scenario, row["recompute"],
                                     row["forward_ms"] / 1e3, row["backward_ms"] / 1e3))
    return out


def layer_fidelity() -> list[LayerRow]:
    """Every shipped measured layer: the per-layer forward and backward pass of `wafopt workload`."""
    rows = []
    for measured in measured_layers():
        sc = parse_instance(measured.scenario).instance
        report = workload_report(sc.llm, sc.training, sc.wafer, sc.parallel.tp, 1, 1, measured.recompute)
        layer = report["per_layer"]
        rows.append(LayerRow(measured, layer["forward_pass_s"], layer["backward_pass_s"]))
    return rows


def layer_summary(rows: list[LayerRow]) -> dict:
    """Mean and largest absolute relative error over every pass (forward and backward) measured."""
    errors = [abs(e) for r in rows for e in r.errors]
    return {"layers": len(rows), "passes": len(errors), "mean_abs_error": mean(errors) if errors else None,
            "max_abs_error": max(errors) if errors else None}


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
