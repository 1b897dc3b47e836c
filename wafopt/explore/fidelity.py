"""The fidelity ladder on real designs: the planner and the simulator of this package.

Every evaluation is a pure function of its task (design, workload scenario, fidelity, budget,
seed, and for F3 the plan), so it runs on any Dask worker and its result can be cached.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources

from wafopt.core.errors import InstanceError
from wafopt.explore.space import LoadedSpace, LoadedWorkload

DEFAULT_EPSILON = 0.10  # used only when no calibration has been recorded; said in the report


def load_workloads(loaded: LoadedSpace) -> list[LoadedWorkload]:
    from wafopt.core.files import read_mapping
    from wafopt.costmodel.training import parse_training

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


FAST_LAYOUTS = 1   # F1: the planner's composition on this many feasible layouts of least bound
FAST_TRIES = 4     # ... looking at no more layouts than this (a layout that composes nothing is skipped)
FAST_S = 30.0      # ... a safety cap per layout only: F1 is bounded by its work (about a CPU second),
                   # not by a clock, so its plan does not depend on how loaded the machine is


def _result(feasible: bool, bound=None, value=None, plan=None, note: str = "") -> dict:
    return {"feasible": feasible, "bound": bound, "value": value, "plan": plan, "note": note}


def _plan(scenario, seconds: float, seed: int, ga: bool = True) -> dict:
    """The joint planner on the scenario: (analytic value, certified bound, plan)."""
    from wafopt.core.budget import SolveOptions
    from wafopt.planner import solve_planner
    from wafopt.problems import evaluate as evaluate_plan

    options = SolveOptions(time_limit=seconds, seed=seed, quiet=True).start()
    result = solve_planner(scenario, options)
    bound = result.bound.value if result.bound is not None else None
    if result.plan is None:
        return _result(bound is not None, bound, None, None, result.message[:200])
    ev = evaluate_plan("plan", scenario, result.plan)
    if not ev.feasible:
        return _result(bound is not None, bound, None, None, "; ".join(ev.violations[:2])[:200])
    return _result(True, bound, ev.objective, result.plan)


def _fast(scenario, seed: int) -> dict:
    """F1: the certified bound tightened where it is least, and the joint planner's composition
    (placement, recomputation, offloading; no layout search, no GA) on the layouts of least bound:
    a feasible plan in about a second, evaluated analytically. (The Megatron baseline alone finds
    no plan on most wafers of small dies: it neither offloads nor tiles odd tensor-parallel sizes.)"""
    from wafopt.core.budget import SolveOptions
    from wafopt.planner.bound import layout_bound, plan_bound, space_bounds, tighten
    from wafopt.planner.compose import compose_layout
    from wafopt.problems import evaluate as evaluate_plan

    options = SolveOptions(time_limit=FAST_TRIES * FAST_S, seed=seed, quiet=True).start()
    bounds = space_bounds(scenario)
    tighten(scenario, bounds, options.stopped)
    least = plan_bound(bounds)
    if least is None:
        return _result(False, note="no layout fits this wafer")
    best, plans, tries = None, 0, 0
    for b in sorted((b for b in bounds if b.feasible), key=lambda b: (b.value, b.key())):
        if plans >= FAST_LAYOUTS or tries >= FAST_TRIES or options.stopped():
            break
        tries += 1
        if b.tier == "quick" and not layout_bound(scenario, b.layout, b.micro_batch).feasible:
            continue
        out = compose_layout(scenario, b.layout, options.sub(FAST_S), b.micro_batch)
        if out.plan is None:
            continue
        plans += 1
        ev = evaluate_plan("plan", scenario, out.plan)   # the shared evaluator has the last word
        if ev.feasible and (best is None or ev.objective < best[0]):
            best = (ev.objective, out.plan)
    if best is None:
        return _result(True, least.value, note=f"no plan composed on the {tries} layouts of least bound")
    return _result(True, least.value, best[0], best[1])


def evaluate(task: dict) -> dict:
    """One rung of the ladder for one design and workload (a pure function of the task), with the
    CPU seconds it took (the machine may be shared: wall time alone says little)."""
    import time

    started = time.process_time()
    result = _evaluate(task)
    result["cpu_s"] = time.process_time() - started
    return result


def _evaluate(task: dict) -> dict:
    from wafopt.core.errors import InstanceError as BadInput

    fidelity, design, workload = task["fidelity"], task["design"], task["workload"]
    try:
        scenario = scenario_for(design, workload)
    except BadInput as exc:  # the model cannot fit this wafer even in pooled memory
        return _result(False, note=str(exc)[:200])
    if fidelity == "F0":
        from wafopt.planner.bound import plan_bound, space_bounds

        best = plan_bound(space_bounds(scenario))
        if best is None:
            return _result(False, note="no layout fits this wafer")
        return _result(True, best.value)
    if fidelity == "F1":
        return _fast(scenario, task["seed"])
    if fidelity == "F2":
        return _plan(scenario, task["budget"], task["seed"])
    if fidelity == "F3":
        from wafopt.costmodel.plan import plan_tasks
        from wafopt.simulate.engine import MemoryOverflow, simulate

        try:
            sim = simulate(plan_tasks(scenario, task["plan"]))
        except MemoryOverflow as exc:
            return _result(False, note=f"simulated memory overflow: {exc}"[:200])
        return _result(True, None, sim.iteration_s)
    raise ValueError(f"unknown fidelity {fidelity!r}")
