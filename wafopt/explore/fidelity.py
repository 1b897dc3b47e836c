"""The fidelity ladder on real designs: the planner and the simulator of this package.

Every evaluation is a pure function of its task (design, workload scenario, fidelity, budget,
seed, and for F3 the plan), so it runs on any Dask worker and its result can be cached.
"""

from __future__ import annotations

import json
from importlib import resources

from wafopt.core.errors import InstanceError
from wafopt.explore.run import Workload
from wafopt.explore.space import LoadedSpace

DEFAULT_EPSILON = 0.10  # used only when no calibration has been recorded; said in the report


def load_workloads(loaded: LoadedSpace) -> list[Workload]:
    from wafopt.core.files import read_mapping

    out = []
    for w in loaded.space.workloads:
        path = loaded.workload_path(w)
        data, digest = read_mapping(path)
        if data.get("problem") != "plan":
            raise InstanceError(f"is not a scenario (problem: plan): {path}", f"workloads.{w.name}.scenario")
        out.append(Workload(w.name, data, digest, w.weight))
    return out


def _calibration() -> dict | None:
    try:
        text = resources.files("wafopt.data").joinpath("calibration.json").read_text()
    except (FileNotFoundError, ModuleNotFoundError, OSError):
        return None
    return json.loads(text)


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
    """The workload's scenario on this design's wafer, with its layout left to the planner."""
    from wafopt.problems import parse_instance

    data = {k: v for k, v in workload["data"].items() if k not in ("parallel", "known_optimum")}
    data["wafer"] = {k: design[k] for k in ("rows", "cols")} | {
        "name": design["id"], "die_tflops": design["die_tflops"], "dram_gb": design["dram_gb"],
        "dram_bw_tbps": design["dram_tbps"], "link_bw_tbps": design["link_tbps"],
        "link_latency_us": design["link_latency_us"]}
    return parse_instance(data, f"{design['id']}/{workload['name']}").instance


def evaluate(task: dict) -> dict:
    """One rung of the ladder for one design and workload."""
    raise NotImplementedError("wired to the planner and the simulator")
