"""From a plan to its cost, top-down: the plan read and checked against its scenario
(`plan_layout.prepare`: layout, placement, choice, recompute rows, the stage workload of the
choice), its 1F1B task graph with every task's analytic duration (`assemble`), and the graph's
longest path (`schedule.pipeline_finish`). The evaluator's objective and per-stage figures
(`price`) and the simulator's task graph (`plan_tasks`) both come from here.
Formulas: docs/evaluator.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from wafopt.core.errors import PlanError
from wafopt.costmodel.assemble import assemble
from wafopt.costmodel.model import LayoutWorkload
from wafopt.costmodel.plan_layout import PlanLayout, prepare
from wafopt.costmodel.scenario import Scenario
from wafopt.costmodel.schedule import pipeline_finish
from wafopt.costmodel.stage import StageWorkload
from wafopt.costmodel.tasks import PlanTasks
from wafopt.hardware.mesh import Die


def die_memory(stages: tuple[StageWorkload, ...], pipelines, x) -> tuple[dict, dict, dict]:
    """Per die of the placement, before offloading: peak bytes, the bytes of in-flight activation
    checkpoints (what it may offload) and transient bytes, under the recompute rows `x`."""
    memory: dict[Die, float] = {}
    kept: dict[Die, float] = {}
    transient: dict[Die, float] = {}
    for pipe in pipelines:
        for i, dies in enumerate(pipe):
            s = stages[i]
            for d in dies:
                memory[d] = s.memory_bytes(x[i])
                kept[d] = s.inflight_bytes(x[i])
                transient[d] = s.transient_bytes(x[i])
    return memory, kept, transient


@dataclass(frozen=True)
class PlanCost:
    """The analytic cost of a placed plan."""
    tasks: PlanTasks
    stages: list[dict]             # per stage, the worst replica: task times, communication, recompute
    dp_allreduce_s: list[float]    # per stage: the gradient all-reduce (0 without data parallelism)
    iteration_s: float             # the longest path of the task graph
    optimizer_exposed_s: float     # optimizer time past the last all-reduce
    link_loads: dict               # directed link -> bytes per iteration


def price(scenario: Scenario, work: LayoutWorkload, layout: PlanLayout, x: list) -> PlanCost:
    """The cost of a plan `prepare` accepted (`x`: its recompute rows)."""
    tasks, costs, net = assemble(scenario, work, layout, x)
    par, stages = layout.par, work.stages
    m = work.microbatches
    finish = [0.0] * par.pp
    v = par.interleave   # a device runs v chunks of 1/v of its stage each (interleaved 1F1B)
    for row in costs:
        ends = pipeline_finish([c.forward_s / v for c in row], [c.backward_s / v for c in row],
                               [c.send_forward_s for c in row], [c.send_backward_s for c in row], m, v)
        finish = [max(a, b) for a, b in zip(finish, ends)]
    dp_s = [c.analytic_s if c is not None else 0.0 for c in tasks.dp_allreduce]
    ends = [f + d for f, d in zip(finish, dp_s)]
    iteration = max(e + s.optimizer_s for e, s in zip(ends, stages))
    optimizer_exposed = iteration - max(ends)

    stage_rows = []
    for i, s in enumerate(stages):
        worst = {key: max(getattr(row[i], key) for row in costs)
                 for key in ("forward_s", "backward_s", "compute_s", "recompute_s", "recompute_comm_s", "tp_comm_s",
                             "offload_s",
                             "send_forward_s", "send_backward_s", "full_recompute_s")}
        p2p = (worst["send_forward_s"] if i < par.pp - 1 else 0.0) + \
              (max(row[i - 1].send_forward_s for row in costs) if i > 0 else 0.0)
        p2p += worst["send_backward_s"] + (max(row[i + 1].send_backward_s for row in costs)
                                           if i < par.pp - 1 else 0.0)
        stage_rows.append({
            "stage": i, "layers": s.layers, "inflight": s.inflight, "tp_scheme": s.scheme,
            "fwd_s": worst["forward_s"], "bwd_s": worst["backward_s"],
            "compute_s": s.fwd_s + s.bwd_s, "recompute_s": worst["recompute_s"],
            "tp_comm_s": worst["tp_comm_s"], "recompute_comm_s": worst["recompute_comm_s"], "p2p_s": p2p, "offload_s": worst["offload_s"],
            "send_forward_s": worst["send_forward_s"], "send_backward_s": worst["send_backward_s"],
            "time_s": worst["forward_s"] + worst["backward_s"] + p2p,
            "dp_allreduce_s": dp_s[i], "optimizer_s": s.optimizer_s,
            "transient_bytes": s.transient_bytes(x[i]), "tp_kappa": max(row[i].tp_kappa for row in costs),
            "ring_hops": max(row[i].ring_hops for row in costs),
            "recompute_unit_s": [max(row[i].unit_s[j] for row in costs) for j in range(len(s.units))],
            "full_recompute_s": worst["full_recompute_s"]})
    return PlanCost(tasks, stage_rows, dp_s, iteration, optimizer_exposed, net.loads)


def plan_tasks(scenario: Scenario, plan: dict) -> PlanTasks:
    """The task graph of `plan` for the simulator. Raises PlanError for a plan the evaluator cannot
    read or place (a plan that overflows DRAM still yields its tasks: the simulator reports it)."""
    if scenario.wafer.system == "cluster":
        raise PlanError("the simulator replays plans on a wafer's mesh links; a cluster scenario's time is "
                        "the evaluator's (wafopt solve / evaluate)")
    prepared = prepare(scenario, plan)
    if prepared.violations:
        raise PlanError("; ".join(prepared.violations))
    tasks, _, _ = assemble(scenario, prepared.work, prepared.layout, prepared.x)
    return tasks
