"""A training plan read and checked against its scenario: layout, placement, choice (micro-batch
size, layer split, tensor-parallel schemes) and recompute rows; the first step from a plan to
its cost (`prepare`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from wafopt.core.errors import InstanceError, PlanError
from wafopt.costmodel.layout import stage_schemes
from wafopt.costmodel.model import LayoutWorkload
from wafopt.costmodel.rules import (
    group_violation,
    layout_violation,
    sequence_parallel_violation,
)
from wafopt.costmodel.scenario import Choice, Parallel, Scenario
from wafopt.costmodel.stage import FULL, recompute_row
from wafopt.hardware.mesh import Die, Mesh, as_die


def _int(plan: dict, key: str, default=None) -> int:
    value = plan.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PlanError(f"{key} must be a positive integer, got {value!r:.60}")
    return value


def _die(value, where: str) -> Die:
    try:
        return as_die(value, where)
    except InstanceError as exc:
        raise PlanError(str(exc)) from None


@dataclass(frozen=True)
class PlanLayout:
    choice: Choice            # layout, scheme per stage, `micro_batch` and `layers` (None: the scenario's)
    pipelines: tuple          # [replica][stage] -> list of dies in ring order
    recompute: object         # the plan's `recompute` (checked against the workload later)
    offload: tuple            # (sender, helper, bytes)
    routes: dict              # (src, dst) -> path of dies

    @property
    def par(self) -> Parallel:
        return self.choice.parallel

    @property
    def schemes(self) -> tuple[str, ...]:
        return self.choice.schemes


def placement_choice(placement: dict) -> Choice:
    """What a placed plan chooses beyond its layout that changes its stages' numbers: its schemes
    and sequence parallelism (absent: the scenario's), as the kernels derived from it read them."""
    return Choice(schemes=placement.get("tp_scheme"), sequence_parallel=placement.get("sequence_parallel"))


def read_plan(plan: dict, interleave: int = 1) -> PlanLayout:
    """Structure of the plan (`interleave`: its default, the scenario's); PlanError if it cannot be read."""
    if not isinstance(plan, dict):
        raise PlanError(f"a plan is a mapping, got {type(plan).__name__}")
    par = Parallel(_int(plan, "tp"), _int(plan, "pp"), _int(plan, "dp", 1), _int(plan, "interleave", interleave))
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
    try:   # absent: the scenario's default (Scenario.schemes_of)
        schemes = None if plan.get("tp_scheme") is None else stage_schemes(plan["tp_scheme"], par.pp)
    except InstanceError as exc:
        raise PlanError(str(exc)) from None
    routes = {}
    if not isinstance(plan.get("routes") or [], list):
        raise PlanError("routes must be a list of {src, dst, path}")
    for k, item in enumerate(plan.get("routes") or []):
        if not isinstance(item, dict) or not {"src", "dst", "path"} <= set(item) or not isinstance(item["path"], list):
            raise PlanError(f"routes[{k}] must be {{src, dst, path: [[r, c], ...]}}")
        src, dst = _die(item["src"], f"routes[{k}].src"), _die(item["dst"], f"routes[{k}].dst")
        routes[(src, dst)] = tuple(_die(d, f"routes[{k}].path") for d in item["path"])
    layers = plan.get("layers")
    if layers is not None:
        if (not isinstance(layers, list) or len(layers) != par.pp
                or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in layers)):
            raise PlanError(f"layers must be a list of pp = {par.pp} positive integers, got {layers!r:.60}")
        layers = tuple(layers)
    micro_batch = None if plan.get("micro_batch") is None else _int(plan, "micro_batch")
    sp = plan.get("sequence_parallel")
    if sp is not None and not isinstance(sp, bool):
        raise PlanError(f"sequence_parallel must be true or false, got {sp!r:.60}")
    return PlanLayout(Choice(par, schemes, micro_batch, layers, sp), tuple(dies), plan.get("recompute"),
                      tuple(offload), routes)


def check_routes(mesh: Mesh, routes: dict) -> list[str]:
    out = []
    for (src, dst), path in routes.items():
        why = mesh.check_route(path, src, dst)
        if why:
            out.append(f"route {list(src)} -> {list(dst)}: {why}")
    return out


@dataclass
class Prepared:
    layout: PlanLayout | None
    work: LayoutWorkload | None
    x: list | None
    owner: dict
    violations: list


def prepare(scenario: Scenario, plan: dict) -> Prepared:
    """Read the plan, build its workload and check placement and recompute rows."""
    mesh = scenario.mesh()
    layout = read_plan(plan, scenario.fixed.interleave or 1)
    par, picked = layout.par, layout.choice
    violations: list[str] = []
    if scenario.parallel is not None and (scenario.parallel.tp, scenario.parallel.pp, scenario.parallel.dp) != (
            par.tp, par.pp, par.dp):
        violations.append(f"plan layout tp={par.tp}, pp={par.pp}, dp={par.dp} differs from the instance's "
                          f"tp={scenario.parallel.tp}, pp={scenario.parallel.pp}, dp={scenario.parallel.dp}")
    elif scenario.fixed.violation(par, scenario.schemes_of(picked)):   # a partial `parallel:` fixes some
        violations.append(scenario.fixed.violation(par, scenario.schemes_of(picked)))
    sequences = scenario.training.global_batch // (picked.micro_batch or scenario.training.micro_batch)
    illegal = layout_violation(scenario.llm, scenario.wafer.parallel_rules, par.tp, par.pp, par.interleave,
                               sequences // par.dp if sequences % par.dp == 0 else None,
                               schemes=scenario.schemes_of(picked), system=scenario.wafer)
    if illegal:
        return Prepared(layout, None, None, {}, violations + [f"illegal layout: {illegal}"])
    if par.dies > len(mesh.healthy_dies):
        return Prepared(layout, None, None, {}, [f"tp*pp*dp = {par.dies} exceeds the "
                                                 f"{scenario.wafer.healthy_devices}"])
    wrong: list[str] = []   # the plan's micro-batch size and layer split
    allowed = scenario.training.micro_batches
    if picked.micro_batch is not None and picked.micro_batch not in allowed:
        wrong.append(f"micro_batch {picked.micro_batch} is not one of the scenario's sizes "
                     f"{', '.join(map(str, allowed))}")
    elif picked.micro_batch is None and len(allowed) > 1:
        wrong.append(f"the plan must give micro_batch: the scenario allows {', '.join(map(str, allowed))}")
    if scenario.fixed.interleave is not None and par.interleave != scenario.fixed.interleave:
        wrong.append(f"interleave {par.interleave}: the scenario fixes interleave {scenario.fixed.interleave} "
                     "(parallel.interleave)")
    training = scenario.training
    if (picked.sequence_parallel is not None and training.sequence_parallel_fixed
            and picked.sequence_parallel != training.sequence_parallel):
        wrong.append(f"sequence_parallel {str(picked.sequence_parallel).lower()}: the scenario fixes "
                     f"training.sequence_parallel: {str(training.sequence_parallel).lower()}")
    sp = training.sequence_parallel if picked.sequence_parallel is None else picked.sequence_parallel
    why = sequence_parallel_violation(training.seq, par.tp) if sp else None
    if why:
        wrong.append(f"illegal layout: {why}")
    if picked.layers is not None and sum(picked.layers) != scenario.llm.layers:
        wrong.append(f"layers {list(picked.layers)} sum to {sum(picked.layers)}, the model has "
                      f"{scenario.llm.layers}")
    elif picked.layers is not None and par.interleave > 1 and len(set(picked.layers)) > 1:
        wrong.append(f"layers {list(picked.layers)}: interleave {par.interleave} runs equal model chunks, "
                     "so every stage holds the same number of layers")
    if wrong:
        return Prepared(layout, None, None, {}, violations + wrong)
    try:
        work = scenario.workload(picked)
    except InstanceError as exc:
        return Prepared(layout, None, None, {}, [f"layout cannot be modelled: {exc}"])
    stages = work.stages

    owner: dict[Die, int] = {}
    device, system = scenario.wafer.device, "cluster" if scenario.wafer.system == "cluster" else "mesh"
    for r, pipe in enumerate(layout.pipelines):
        for i, dies in enumerate(pipe):
            for d in dies:
                if not mesh.is_healthy(d):
                    violations.append(f"stage {i} of pipeline {r} uses {device} {list(d)}, which is "
                                      f"{'faulty' if mesh.contains(d) else 'outside the ' + system}")
                elif d in owner:
                    violations.append(f"{device} {list(d)} is used twice")
                owner[d] = i
            why = group_violation(scenario.wafer, dies)
            if why:
                violations.append(f"stage {i} of pipeline {r} {why}")
    violations += check_routes(mesh, layout.routes)
    if violations:
        return Prepared(layout, work, None, owner, violations)

    # recomputation: per stage a row x[i][j] in 0..layers_i, or "full"
    n_units = len(stages[0].units)
    recompute = layout.recompute
    if recompute is None:
        x = [[0] * n_units for _ in stages]
        if scenario.training.recompute_policy is not None:
            violations.append(f"recompute: the scenario fixes training.recompute: {scenario.training.recompute_policy}")
    else:
        if not isinstance(recompute, list) or len(recompute) != layout.par.pp or any(
                row != FULL and (not isinstance(row, list) or len(row) != n_units) for row in recompute):
            raise PlanError(f"recompute must be {layout.par.pp} rows, each {n_units} integers (units: "
                            f"{', '.join(u.name for u in stages[0].units)}) or \"full\"")
        x = recompute
        for i, row in enumerate(x):
            if not scenario.training.recompute and (row == FULL or any(row)):
                violations.append(f"recompute[{i}]: the scenario forbids recomputation (training.recompute: false)")
                continue
            policy = scenario.training.recompute_policy
            if policy is not None and row != recompute_row(stages[i], policy):
                violations.append(f"recompute[{i}]: the scenario fixes training.recompute: {policy}")
                continue
            if row == FULL:
                continue
            for j, v in enumerate(row):
                if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= stages[i].layers:
                    violations.append(f"recompute[{i}][{j}] = {v!r} must be an integer in 0..{stages[i].layers}")
                elif v and not stages[i].units[j].recomputable:
                    violations.append(f"recompute[{i}][{j}] = {v}: unit {stages[i].units[j].name} is the layer "
                                      "input checkpoint and cannot be recomputed")
    return Prepared(layout, work, x, owner, violations)
