"""Simulating a solution file (its pictures: wafopt.present.simulation; its trace: wafopt.present.trace)."""

from __future__ import annotations

from wafopt.core.errors import InstanceError, PlanError
from wafopt.core.files import read_mapping
from wafopt.core.solution import locate_instance
from wafopt.costmodel.plan import plan_tasks
from wafopt.hardware.cluster import require_mesh
from wafopt.problems import evaluate, load
from wafopt.simulate.engine import simulate


def simulate_solution(solution: str, instance: str | None = None, contention: bool = True,
                      timeline: bool = False):
    """(Simulation, analytic Evaluation) of a plan solution file; InstanceError for bad input."""
    data, _ = read_mapping(solution)
    if data.get("problem") != "plan":
        raise InstanceError(f"simulate needs a solution of a plan scenario, got problem: {data.get('problem')!r}",
                            solution)
    if not isinstance(data.get("plan"), dict):
        raise InstanceError("has no plan to simulate", solution)
    where = instance or data.get("instance")
    if not isinstance(where, str):
        raise InstanceError("names no instance: pass --instance SCENARIO.yaml", solution)
    loaded = load(locate_instance(where, solution, explicit=instance is not None))
    if loaded.problem != "plan":
        raise InstanceError(f"is a {loaded.problem} instance, simulate needs a plan scenario", where)
    require_mesh(loaded.instance.wafer, "simulate", where)
    evaluation = evaluate("plan", loaded.instance, data["plan"])
    if evaluation.objective is None:
        raise InstanceError(f"plan cannot be evaluated: {'; '.join(evaluation.violations)[:300]}", solution)
    try:
        tasks = plan_tasks(loaded.instance, data["plan"])
    except (PlanError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise InstanceError(f"malformed plan: {str(exc)[:300]}", solution) from None
    return simulate(tasks, contention=contention, timeline=timeline), evaluation
