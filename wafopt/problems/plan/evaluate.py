"""Evaluator of a full training plan (problem: plan).

Plan: {tp, pp, dp, tile: [h, w], pipelines: [[[die] * tp] * pp] * dp, recompute: [[x_ij]],
offload: [{sender, helper, bytes}]}. Formulas: docs/evaluator.md.
"""

from __future__ import annotations

import math

from wafopt.problems.evaluation import Evaluation, PlanError
from wafopt.problems.plan.instance import Parallel, Scenario
from wafopt.hardware.mesh import Die, Mesh, as_die
from wafopt.core.errors import InstanceError

MEMORY_TOLERANCE = 1e-9  # relative slack on DRAM capacity for float sums


def _int(plan: dict, key: str) -> int:
    value = plan.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PlanError(f"{key} must be a positive integer, got {value!r}")
    return value


def _die(value, where: str) -> Die:
    try:
        return as_die(value, where)
    except InstanceError as exc:
        raise PlanError(str(exc)) from None


def ring_hops(mesh: Mesh, dies: list[Die]) -> int:
    """Longest hop of the cyclic order `dies` (a TP ring step lasts as long as its longest hop)."""
    if len(dies) < 2:
        return 0
    return max(mesh.distance(a, b) for a, b in zip(dies, dies[1:] + dies[:1]))


def read_plan(plan: dict):
    """Structure of the plan -> (parallel, pipelines, recompute, offload); PlanError if malformed."""
    par = Parallel(_int(plan, "tp"), _int(plan, "pp"), plan.get("dp", 1) if isinstance(plan.get("dp", 1), int) else 0)
    if par.dp <= 0:
        raise PlanError(f"dp must be a positive integer, got {plan.get('dp')!r}")
    pipelines = plan.get("pipelines")
    if not isinstance(pipelines, list) or len(pipelines) != par.dp:
        raise PlanError(f"pipelines must be a list of dp = {par.dp} pipelines")
    dies = []
    for r, pipe in enumerate(pipelines):
        if not isinstance(pipe, list) or len(pipe) != par.pp:
            raise PlanError(f"pipelines[{r}] must list pp = {par.pp} stages")
        stages = []
        for i, stage in enumerate(pipe):
            if not isinstance(stage, list) or len(stage) != par.tp:
                raise PlanError(f"pipelines[{r}][{i}] must list tp = {par.tp} dies")
            stages.append([_die(d, f"pipelines[{r}][{i}]") for d in stage])
        dies.append(stages)
    recompute = plan.get("recompute")
    offload = []
    if not isinstance(plan.get("offload") or [], list):
        raise PlanError(f"offload must be a list of {{sender, helper, bytes}}, got {plan.get('offload')!r:.60}")
    for k, o in enumerate(plan.get("offload") or []):
        if not isinstance(o, dict) or not {"sender", "helper", "bytes"} <= set(o):
            raise PlanError(f"offload[{k}] must be {{sender, helper, bytes}}")
        b = o["bytes"]
        if not isinstance(b, (int, float)) or isinstance(b, bool) or not math.isfinite(b) or b < 0:
            raise PlanError(f"offload[{k}].bytes must be a number >= 0, got {b!r}")
        offload.append((_die(o["sender"], f"offload[{k}].sender"), _die(o["helper"], f"offload[{k}].helper"),
                        float(b)))
    return par, dies, recompute, offload


def evaluate(scenario: Scenario, plan: dict) -> Evaluation:
    mesh = scenario.mesh()
    par, pipelines, recompute, offload = read_plan(plan)
    violations: list[str] = []
    if scenario.parallel is not None and scenario.parallel != par:
        violations.append(f"plan layout tp={par.tp}, pp={par.pp}, dp={par.dp} differs from the instance's "
                          f"tp={scenario.parallel.tp}, pp={scenario.parallel.pp}, dp={scenario.parallel.dp}")
    if par.dies > len(mesh.healthy_dies):
        return Evaluation(None, False, [f"tp*pp*dp = {par.dies} exceeds the {len(mesh.healthy_dies)} healthy dies"])
    try:
        work = scenario.workload(par)
    except InstanceError as exc:
        return Evaluation(None, False, [f"layout cannot be modelled: {exc}"])
    stages = work.stages
    n_units = len(stages[0].units)

    # placement: healthy, distinct dies
    owner: dict[Die, int] = {}
    for r, pipe in enumerate(pipelines):
        for i, dies in enumerate(pipe):
            for d in dies:
                if not mesh.is_healthy(d):
                    violations.append(f"stage {i} of pipeline {r} uses die {list(d)}, which is "
                                      f"{'faulty' if mesh.contains(d) else 'outside the mesh'}")
                elif d in owner:
                    violations.append(f"die {list(d)} is used twice")
                owner[d] = i
    if violations:
        return Evaluation(None, False, violations)

    # recomputation: x[i][j] in 0..layers_i
    if recompute is None:
        x = [[0] * n_units for _ in stages]
    else:
        if not isinstance(recompute, list) or len(recompute) != par.pp or any(
                not isinstance(row, list) or len(row) != n_units for row in recompute):
            raise PlanError(f"recompute must be {par.pp} rows of {n_units} integers (units: "
                            f"{', '.join(u.name for u in stages[0].units)})")
        x = recompute
        for i, row in enumerate(x):
            for j, v in enumerate(row):
                if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= stages[i].layers:
                    violations.append(f"recompute[{i}][{j}] = {v!r} must be an integer in 0..{stages[i].layers}")
                elif v and not stages[i].units[j].recomputable:
                    violations.append(f"recompute[{i}][{j}] = {v}: unit {stages[i].units[j].name} is the layer "
                                      "input checkpoint and cannot be recomputed")
        if violations:
            return Evaluation(None, False, violations)

    # memory per die, after offloading
    capacity = scenario.wafer.dram_capacity
    memory: dict[Die, float] = {}
    kept: dict[Die, float] = {}
    for pipe in pipelines:
        for i, dies in enumerate(pipe):
            s = stages[i]
            for d in dies:
                memory[d] = s.memory_bytes(x[i])
                kept[d] = memory[d] - s.state_bytes
    moved_out: dict[Die, float] = {}
    for k, (snd, hlp, b) in enumerate(offload):
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
        if out > kept[d] * (1 + MEMORY_TOLERANCE):
            violations.append(f"die {list(d)} offloads {out:.4g} B but keeps only {kept[d]:.4g} B of checkpoints")
    for d, used in sorted(memory.items()):
        if used > capacity * (1 + MEMORY_TOLERANCE):
            violations.append(f"die {list(d)} needs {used / 1e9:.3f} GB, capacity {capacity / 1e9:.3f} GB")

    # time per micro-batch of each stage (the slowest replica decides)
    m = work.microbatches
    stage_rows = []
    loads: dict = {}

    def add_load(src: Die, dst: Die, volume: float) -> None:
        for link in mesh.route_links(mesh.xy_route(src, dst)):
            loads[link] = loads.get(link, 0.0) + volume

    for i, s in enumerate(stages):
        recompute_s = s.recompute_seconds(x[i])
        worst = {"tp_comm_s": 0.0, "p2p_s": 0.0, "offload_s": 0.0}
        for pipe in pipelines:
            dies = pipe[i]
            tp_s = 0.0
            if par.tp > 1:
                hops = ring_hops(mesh, dies)
                per_allreduce = 2 * (par.tp - 1) * hops * mesh.link_latency + \
                    work.tp_allreduce_bytes / mesh.link_bandwidth
                tp_s = per_allreduce * work.tp_allreduces_per_layer * s.layers
                for a, b in zip(dies, dies[1:] + dies[:1]):
                    add_load(a, b, work.tp_allreduce_bytes * work.tp_allreduces_per_layer * s.layers * m)
            p2p_s = 0.0
            share = work.p2p_bytes / par.tp  # Megatron scatter/gather: die k talks to die k of the next stage
            for nb in (i - 1, i + 1):
                if 0 <= nb < par.pp:
                    p2p_s += max(mesh.transfer_time(share, mesh.distance(a, b)) for a, b in zip(dies, pipe[nb]))
                    for a, b in zip(dies, pipe[nb]):
                        add_load(a, b, share * m)
            off_s = 0.0
            for d in dies:
                exposed = 0.0
                for snd, hlp, b in offload:
                    if snd != d or b <= 0:
                        continue
                    per_mb = b / s.inflight  # each in-flight micro-batch parks its share, stored then loaded
                    link_s = mesh.transfer_time(per_mb, mesh.distance(snd, hlp))
                    dram_s = per_mb / scenario.wafer.dram_bandwidth
                    exposed += 2 * max(0.0, link_s - dram_s)  # D2D slower than the DRAM access it replaces
                    add_load(snd, hlp, per_mb * m)
                    add_load(hlp, snd, per_mb * m)
                off_s = max(off_s, exposed)
            for key, v in (("tp_comm_s", tp_s), ("p2p_s", p2p_s), ("offload_s", off_s)):
                worst[key] = max(worst[key], v)
        compute_s = s.fwd_s + s.bwd_s
        time_s = compute_s + recompute_s + worst["tp_comm_s"] + worst["p2p_s"] + worst["offload_s"]
        stage_rows.append({"stage": i, "layers": s.layers, "inflight": s.inflight, "compute_s": compute_s,
                           "recompute_s": recompute_s, **worst, "time_s": time_s})

    # data-parallel gradient all-reduce between same-position dies of the replicas (ring over replicas)
    dp_s = 0.0
    if par.dp > 1:
        for i, s in enumerate(stages):
            grad_bytes = s.params * scenario.training.activation_bytes
            for k in range(par.tp):
                ring = [pipe[i][k] for pipe in pipelines]
                t = 2 * (par.dp - 1) * ring_hops(mesh, ring) * mesh.link_latency + \
                    2 * (par.dp - 1) / par.dp * grad_bytes / mesh.link_bandwidth
                dp_s = max(dp_s, t)
                for a, b in zip(ring, ring[1:] + ring[:1]):
                    add_load(a, b, 2 * (par.dp - 1) / par.dp * grad_bytes)

    times = [row["time_s"] for row in stage_rows]
    iteration = sum(times) + (m - 1) * max(times) + dp_s   # 1F1B: fill/drain plus (m-1) steady steps
    recompute_total = m * sum(row["recompute_s"] for row in stage_rows)
    compute_total = m * sum(row["compute_s"] + row["recompute_s"] for row in stage_rows)
    peak_flops = len(mesh.healthy_dies) * scenario.wafer.die_flops
    throughput = work.model_flops_per_iteration / iteration
    details = {
        "iteration_time_s": iteration, "microbatches": m, "dp_allreduce_s": dp_s,
        "stages": stage_rows,
        "memory": [{"die": list(d), "bytes": b, "capacity": capacity} for d, b in sorted(memory.items())],
        "max_memory_fraction": max(memory.values()) / capacity,
        "recompute_s": recompute_total,
        "recompute_share": recompute_total / compute_total if compute_total else 0.0,
        "peak_link_load_bytes": max(loads.values(), default=0.0),
        "link_loads": [[list(a), list(b), v] for (a, b), v in sorted(loads.items())],
        "throughput_flops": throughput, "peak_fraction": throughput / peak_flops,
    }
    return Evaluation(iteration, not violations, violations, details)
