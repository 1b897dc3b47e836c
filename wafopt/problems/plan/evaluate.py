"""Evaluator of a full training plan (problem: plan).

Plan: {tp, pp, dp, tile: [h, w], pipelines: [[[die] * tp] * pp] * dp, recompute: [[x_ij] or
"full"], offload: [{sender, helper, bytes}], tp_scheme: megatron | tatp | [per stage],
routes: [{src, dst, path}], layers: [n_0, ..., n_{pp-1}] (default as even as possible),
micro_batch: one of the scenario's sizes (default its only one)}. The objective is the longest
path of the plan's 1F1B task graph with per-operator compute and link-contention communication;
the cost model (`wafopt.costmodel.plan_layout.prepare`, `wafopt.costmodel.plan`: `die_memory`,
`price`) gives every number,
this module checks memory and offloading and reports. Formulas: docs/evaluator.md.
"""

from __future__ import annotations

from dataclasses import replace

from wafopt.core.numeric import at_most
from wafopt.costmodel.plan import die_memory, price
from wafopt.costmodel.plan_layout import prepare
from wafopt.costmodel.scenario import Scenario
from wafopt.hardware.mesh import Die
from wafopt.problems.evaluation import Evaluation


def evaluate(scenario: Scenario, plan: dict) -> Evaluation:
    prep = prepare(scenario, plan)
    if prep.work is None or prep.x is None or prep.violations:
        return Evaluation(None, False, prep.violations)
    mesh = scenario.mesh()
    layout, work, x, owner = prep.layout, prep.work, prep.x, prep.owner
    stages = work.stages
    violations: list[str] = []

    # memory per die, after offloading
    capacity = scenario.wafer.dram_capacity
    memory, kept, transient = die_memory(stages, layout.pipelines, x)
    moved_out: dict[Die, float] = {}
    for k, (snd, hlp, b) in enumerate(layout.offload):
        if snd not in owner:
            violations.append(f"offload[{k}]: sender {list(snd)} runs no stage")
            continue
        if not mesh.is_healthy(hlp):
            violations.append(f"offload[{k}]: helper {list(hlp)} is not a healthy die")
            continue
        if snd == hlp:
            violations.append(f"offload[{k}]: sender and helper are the same die {list(snd)}")
            continue
        moved_out[snd] = moved_out.get(snd, 0.0) + b
        memory[snd] -= b
        memory[hlp] = memory.get(hlp, 0.0) + b
    for d, out in moved_out.items():
        if not at_most(out, kept[d]):
            violations.append(f"die {list(d)} offloads {out:.4g} B but keeps only {kept[d]:.4g} B of checkpoints")
    for d, used in sorted(memory.items()):
        if not at_most(used, capacity):
            violations.append(f"{scenario.wafer.device} {list(d)} needs {used / 1e9:.3f} GB, "
                              f"capacity {capacity / 1e9:.3f} GB")
    if violations:
        offload_ok = [o for o in layout.offload if o[0] in owner and mesh.is_healthy(o[1]) and o[0] != o[1]]
        layout = replace(layout, offload=tuple(offload_ok))

    # the task graph, its longest path and the per-stage figures
    cost = price(scenario, work, layout, x)
    m, iteration, stage_rows, dp_s = work.microbatches, cost.iteration_s, cost.stages, cost.dp_allreduce_s

    recompute_total = m * sum(row["recompute_s"] for row in stage_rows)
    compute_total = m * sum(row["compute_s"] + row["recompute_s"] for row in stage_rows)
    peak_flops = len(mesh.healthy_dies) * scenario.wafer.die_flops
    throughput = work.model_flops_per_iteration / iteration
    busiest = max(cost.link_loads.items(), key=lambda kv: (kv[1], kv[0]), default=None)
    details = {
        "iteration_time_s": iteration, "microbatches": m, "micro_batch": work.training.micro_batch,
        "layers": [s.layers for s in stages], "dp_allreduce_s": max(dp_s),
        "optimizer_s": max(s.optimizer_s for s in stages), "optimizer_exposed_s": cost.optimizer_exposed_s,
        "tp_scheme": list(work.schemes),
        "stages": stage_rows,
        "memory": [{"die": list(d), "bytes": b, "capacity": capacity, "transient_bytes": transient.get(d, 0.0)}
                   for d, b in sorted(memory.items())],
        "max_memory_fraction": max(memory.values()) / capacity,
        "transient_bytes": max(transient.values()),
        "recompute_s": recompute_total,
        "recompute_share": recompute_total / compute_total if compute_total else 0.0,
        # exposed tensor-parallel communication (recomputation's included) over the stages' task time
        "tp_comm_share": sum(r["tp_comm_s"] + r["recompute_comm_s"] for r in stage_rows)
        / sum(r["fwd_s"] + r["bwd_s"] for r in stage_rows),
        "peak_link_load_bytes": busiest[1] if busiest else 0.0,
        "busiest_link": [list(busiest[0][0]), list(busiest[0][1])] if busiest else None,
        "link_loads": [[list(a), list(b), v] for (a, b), v in sorted(cost.link_loads.items())],
        "throughput_flops": throughput, "peak_fraction": throughput / peak_flops,
    }
    return Evaluation(iteration, not violations, violations, details)
