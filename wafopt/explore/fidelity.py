"""The fidelity ladder on real designs: the planner and the simulator of this package.

F0: the quick certified bound; F1: the planner's composition on the layouts of least bound;
F2: the joint planner within the task's budget (wafopt.planner.design); F3: the simulator on the
task's plan. Every evaluation is a pure function of its task (design, workload scenario,
fidelity, budget, seed, and for F3 the plan), so it runs on any Dask worker and its result can be
cached.
"""

from __future__ import annotations

import hashlib
import json
import time

from wafopt.core.errors import InstanceError
from wafopt.core.files import read_mapping
from wafopt.costmodel.plan import plan_tasks
from wafopt.costmodel.training import parse_training
from wafopt.explore.space import LoadedSpace, LoadedWorkload
from wafopt.planner.design import (
    DesignPlan,
    bound_only,
    compose_least_bound,
    plan_design,
)
from wafopt.problems import parse_instance
from wafopt.simulate.calibrate import read_calibration
from wafopt.simulate.engine import MemoryOverflow, simulate

DEFAULT_EPSILON = 0.10  # used only when no calibration has been recorded; said in the report


def load_workloads(loaded: LoadedSpace) -> list[LoadedWorkload]:
    out = []
    for w in loaded.space.workloads:
        path = loaded.workload_path(w)
        data, digest = read_mapping(path)
        if data.get("problem") != "plan":
            raise InstanceError(f"is not a scenario (problem: plan): {path}", f"workloads.{w.name}.scenario")
        if w.training:
            data = dict(data, training={**(data.get("training") or {}), **w.training})
            digest = hashlib.sha256((digest + json.dumps(w.training, sort_keys=True)).encode()).hexdigest()
            parse_training(data["training"], f"workloads.{w.name}.training")   # a bad field names itself
        out.append(LoadedWorkload(w.name, data, digest, w.weight))
    return out


def _calibration() -> dict | None:
    try:
        return read_calibration()
    except OSError:   # none recorded
        return None


def epsilon() -> float:
    """The calibrated maximum relative error of the analytic model against the simulator."""
    cal = _calibration()
    if cal is None:
        return DEFAULT_EPSILON
    return float(cal.get("epsilon", DEFAULT_EPSILON))


def calibration_errors() -> list[float]:
    """The signed relative errors (simulated / analytic - 1) the calibration measured."""
    cal = _calibration()
    return [float(e) for e in (cal or {}).get("errors", [])]


def scenario_for(design: dict, workload: dict):
    """The workload's scenario on this design's wafer, with its layout (tp, pp, dp) left to the
    planner and what else its `parallel:` fixes (interleave, tp_scheme) kept."""
    data = {k: v for k, v in workload["data"].items() if k not in ("parallel", "known_optimum")}
    kept = {k: v for k, v in (workload["data"].get("parallel") or {}).items() if k not in ("tp", "pp", "dp")}
    if kept:
        data["parallel"] = kept
    data["wafer"] = {k: design[k] for k in ("rows", "cols")} | {
        "name": design["id"], "die_tflops": design["die_tflops"], "dram_gb": design["dram_gb"],
        "dram_bw_tbps": design["dram_tbps"], "link_bw_tbps": design["link_tbps"],
        "link_latency_us": design["link_latency_us"]}
    return parse_instance(data, f"{design['id']}/{workload['name']}").instance


def _result(feasible: bool, bound=None, value=None, plan=None, note: str = "") -> dict:
    return {"feasible": feasible, "bound": bound, "value": value, "plan": plan, "note": note}


def _from_planner(out: DesignPlan) -> dict:
    return _result(out.feasible, out.bound, out.value, out.plan, out.note)


def evaluate(task: dict) -> dict:
    """One rung of the ladder for one design and workload (a pure function of the task), with the
    CPU seconds it took (the machine may be shared: wall time alone says little)."""
    started = time.process_time()
    result = _evaluate(task)
    result["cpu_s"] = time.process_time() - started
    return result


def _evaluate(task: dict) -> dict:
    fidelity, design, workload = task["fidelity"], task["design"], task["workload"]
    try:
        scenario = scenario_for(design, workload)
    except InstanceError as exc:  # the model cannot fit this wafer even in pooled memory
        return _result(False, note=str(exc)[:200])
    if fidelity == "F0":
        return _from_planner(bound_only(scenario))
    if fidelity == "F1":
        return _from_planner(compose_least_bound(scenario, task["seed"]))
    if fidelity == "F2":
        return _from_planner(plan_design(scenario, task["budget"], task["seed"]))
    if fidelity == "F3":
        try:
            sim = simulate(plan_tasks(scenario, task["plan"]))
        except MemoryOverflow as exc:
            return _result(False, note=f"simulated memory overflow: {exc}"[:200])
        return _result(True, None, sim.iteration_s)
    raise ValueError(f"unknown fidelity {fidelity!r}")
