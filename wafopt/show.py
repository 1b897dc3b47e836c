"""`wafopt show`: what an instance or a solution holds, as text, JSON or a picture."""

from __future__ import annotations

from pathlib import Path

import yaml

from wafopt.instance import derive, load
from wafopt.solution import is_solution_file, read_solution


def show(target: str, problem: str | None = None, png: str | None = None) -> dict:
    plan = None
    if is_solution_file(target):
        sol = read_solution(target)
        loaded = load(sol.instance)
        if sol.derived_from or loaded.problem != sol.problem:
            loaded = derive(loaded, sol.problem)
        plan = sol.plan
        info = {"kind": "solution", "path": target, "problem": sol.problem, "method": sol.method,
                "solver": sol.solver, "status": sol.status, "objective": sol.objective, "bound": sol.bound,
                "gap": sol.gap, "time_s": sol.time_s, "instance": sol.instance,
                "evaluation": {k: v for k, v in sol.evaluation.items() if k != "details"}}
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
    info["methods"] = list(module.METHODS)
    if png:
        if not hasattr(module, "draw"):
            from wafopt.errors import InstanceError
            raise InstanceError(f"no picture is defined for problem {loaded.problem}", "--png")
        from wafopt.draw import save_figure

        save_figure(lambda ax: module.draw(loaded.instance, plan, ax), png)
        info["png"] = str(Path(png))
    return info


def render_text(info: dict) -> str:
    return yaml.safe_dump(info, sort_keys=False, default_flow_style=None, width=110).rstrip()
