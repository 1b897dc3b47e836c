"""`wafopt show`: what an instance or a solution holds, as text, JSON or a picture."""

from __future__ import annotations

from pathlib import Path

import yaml

from wafopt.compose.derive import derive
from wafopt.core.errors import InstanceError
from wafopt.core.solution import is_solution_file, locate_instance, read_solution
from wafopt.present.pictures import DRAW, save_picture
from wafopt.problems import load
from wafopt.run.methods import methods
from wafopt.run.runner import not_applicable


def show(target: str, problem: str | None = None, png: str | None = None, instance: str | None = None) -> dict:
    plan = None
    if is_solution_file(target):
        sol = read_solution(target)
        loaded = load(locate_instance(instance or sol.instance, target, explicit=instance is not None))
        if sol.derived_from or loaded.problem != sol.problem:
            loaded = derive(loaded, sol.problem)
        plan = sol.plan
        info = {"kind": "solution", "path": target, "problem": sol.problem, "method": sol.method,
                "solver": sol.solver, "status": sol.status, "objective": sol.objective, "bound": sol.bound,
                "gap": sol.gap, "time_s": sol.time_s, "instance": sol.instance,
                "evaluation": {k: v for k, v in sol.evaluation.items() if k != "details"}}
        details = sol.evaluation.get("details") or {}
        scalars = {k: v for k, v in details.items() if isinstance(v, (int, float, str, bool))}
        if scalars:
            info["evaluation"]["figures"] = scalars
        if isinstance(details.get("stages"), list):   # counts and seconds of each stage
            info["stage_times"] = [{k: v for k, v in row.items() if k in ("stage", "layers", "inflight")
                                    or (k.endswith("_s") and isinstance(v, (int, float)))}
                                   for row in details["stages"]]
    else:
        loaded = load(target)
        if problem:
            loaded = derive(loaded, problem)
        info = {"kind": "instance", "path": target, "problem": loaded.problem, "name": loaded.name}
        if loaded.known_optimum:
            info["known_optimum"] = {"value": loaded.known_optimum.value, "source": loaded.known_optimum.source}
    module = loaded.module
    if hasattr(module, "summary"):
        info["summary"] = module.summary(loaded.instance)
    info["methods"] = [m for m in methods(loaded.problem) if not_applicable(loaded, m) is None]
    if png:
        if loaded.problem not in DRAW:
            raise InstanceError(f"no picture is defined for problem {loaded.problem}", "--png")
        solution = info["kind"] == "solution"
        save_picture(loaded.problem, loaded.instance, plan, sol.stats if solution else None, png,
                     f"{loaded.name}: {sol.method}" if solution and sol.method else loaded.name)
        info["png"] = str(Path(png))
    return info


def render_text(info: dict) -> str:
    """YAML-like text; a scenario's workload becomes a per-stage table, its units listed once."""
    info = dict(info)
    summary = dict(info.get("summary") or {})
    workload = summary.pop("workload", None)
    stage_times = info.pop("stage_times", None)
    if summary:
        info["summary"] = summary
    text = yaml.safe_dump(info, sort_keys=False, default_flow_style=None, width=110).rstrip()
    if workload:
        text += "\n" + _workload_table(workload)
    if stage_times:
        text += "\n" + _table("stage times per micro-batch (ms):", stage_times, scale=1e3)
    return text


def _table(title: str, rows: list[dict], scale: float = 1.0) -> str:
    keys = list(rows[0])
    heads = [k[:-2] if k.endswith("_s") else k for k in keys]  # the title gives the unit
    lines = [title, "  " + "  ".join(f"{k:>11s}" for k in heads)]
    for row in rows:
        lines.append("  " + "  ".join(f"{row[k]:11d}" if isinstance(row[k], int) else f"{row[k] * scale:11.3f}"
                                      for k in keys))
    return "\n".join(lines)


def _workload_table(workload: dict) -> str:
    lines = ["workload (per die; activations per layer per micro-batch):",
             f"  p2p {workload['p2p_bytes'] / 1e6:.1f} MB per micro-batch, TP sent per layer "
             f"{workload['tp_bytes_per_layer'] / 1e6:.1f} MB, model FLOPs per iteration "
             f"{workload['model_flops_per_iteration']:.4g}",
             "  stage  layers  inflight  params (B)  state (GB)  activations (GB)  fwd (ms)  bwd (ms)"]
    for s in workload["stages"]:
        lines.append(f"  {s['index']:5d}  {s['layers']:6d}  {s['inflight']:8g}  {s['params'] / 1e9:10.3f}  "
                     f"{s['state_bytes'] / 1e9:10.2f}  {s['activation_bytes'] / 1e9:16.4f}  "
                     f"{s['fwd_s'] * 1e3:8.2f}  {s['bwd_s'] * 1e3:8.2f}")
    lines.append("  operator units of stage 0 (bytes, recompute time):")
    for u in workload["stages"][0]["units"]:
        lines.append(f"    {u['name']:28s} {u['bytes'] / 1e6:10.2f} MB  {u['recompute_s'] * 1e6:9.1f} us")
    return "\n".join(lines)
