"""A training plan as the 1F1B task graph of one iteration (`wafopt.costmodel.tasks`), with the
analytic duration of every task from the cost model and the link-contention model.

The plan evaluator's iteration time is the longest path of this graph
(`wafopt.costmodel.schedule.one_f_one_b_finish`); the simulator replays the same graph.

Communication (WATOS Eq. 1, alpha-beta, with contention): every flow is routed (XY, or the
plan's `routes`), and a communication phase lasts
    max over its flows of hops x steps x alpha  +  kappa x (bytes per flow) / bandwidth
where kappa, the contention of the phase, is the largest number of concurrent flows on any
directed link of its routes. Concurrent are: all tensor-parallel ring flows of every stage and
replica (in the steady state every stage runs its layers' collectives at the same points), all
pipeline sends of one direction, all offload transfers of one direction, and the data-parallel
rings of one stage. Offload transfers carry different volumes, so their phase takes the bytes
on its busiest link instead. Formulas: docs/evaluator.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wafopt.core.errors import InstanceError, PlanError
from wafopt.costmodel.layout import stage_schemes
from wafopt.costmodel.model import LayoutWorkload
from wafopt.costmodel.scenario import Choice, Parallel, Scenario
from wafopt.costmodel.stage import FULL, CommStep, ComputeStep, StageWorkload
from wafopt.costmodel.tasks import (
    Block,
    Comm,
    Compute,
    Offload,
    PlanTasks,
    RoutedFlow,
    StageTasks,
)
from wafopt.hardware.mesh import Die, Mesh, as_die


# --------------------------------------------------------------------------------------------
# reading a plan
# --------------------------------------------------------------------------------------------
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
    par: Parallel
    pipelines: tuple          # [replica][stage] -> list of dies in ring order
    recompute: object         # the plan's `recompute` (checked against the workload later)
    offload: tuple            # (sender, helper, bytes)
    schemes: tuple[str, ...]  # tensor-parallel scheme per stage
    routes: dict              # (src, dst) -> path of dies
    layers: tuple | None = None       # the plan's `layers` per stage (None: the scenario's split)
    micro_batch: int | None = None    # the plan's `micro_batch` (None: the scenario's)


def read_plan(plan: dict) -> PlanLayout:
    """Structure of the plan; PlanError if it cannot be read."""
    if not isinstance(plan, dict):
        raise PlanError(f"a plan is a mapping, got {type(plan).__name__}")
    par = Parallel(_int(plan, "tp"), _int(plan, "pp"), _int(plan, "dp", 1))
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
    try:
        schemes = stage_schemes(plan.get("tp_scheme"), par.pp)
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
    return PlanLayout(par, tuple(dies), plan.get("recompute"), tuple(offload), schemes, routes, layers, micro_batch)


def check_routes(mesh: Mesh, routes: dict) -> list[str]:
    out = []
    for (src, dst), path in routes.items():
        why = mesh.check_route(path, src, dst)
        if why:
            out.append(f"route {list(src)} -> {list(dst)}: {why}")
    return out


# --------------------------------------------------------------------------------------------
# the network: routes and contention
# --------------------------------------------------------------------------------------------
class Network:
    """Routes (the plan's, else XY) and the per-link flow counts of each concurrency class."""

    def __init__(self, mesh: Mesh, routes: dict):
        self.mesh, self.routes = mesh, routes
        self._cache: dict = {}
        self.counts: dict[str, dict] = {}     # class -> link -> concurrent flows
        self.loads: dict = {}                 # link -> bytes per iteration

    def route(self, src: Die, dst: Die) -> tuple:
        key = (src, dst)
        if key not in self._cache:
            path = self.routes.get(key) or self.mesh.xy_route(src, dst)
            self._cache[key] = tuple(Mesh.route_links(list(path)))
        return self._cache[key]

    def register(self, cls: str, pairs) -> None:
        counts = self.counts.setdefault(cls, {})
        for src, dst in pairs:
            for link in self.route(src, dst):
                counts[link] = counts.get(link, 0) + 1

    def add_loads(self, comm: Comm | None, times: float) -> None:
        """Bytes per iteration: `comm` occurs `times` times."""
        if comm is None:
            return
        for flow in comm.flows:
            for link in flow.route:
                self.loads[link] = self.loads.get(link, 0.0) + flow.bytes * times

    def kappa(self, cls: str, pairs) -> int:
        counts = self.counts.get(cls, {})
        return max((counts.get(link, 1) for src, dst in pairs for link in self.route(src, dst)), default=1)

    def flows(self, pairs, nbytes: float) -> tuple[RoutedFlow, ...]:
        return tuple(RoutedFlow(src, dst, nbytes, self.route(src, dst)) for src, dst in pairs)


def ring_pairs(dies: list[Die], both_ways: bool) -> list[tuple[Die, Die]]:
    if len(dies) < 2:
        return []
    pairs = list(zip(dies, dies[1:] + dies[:1]))
    if len(dies) == 2:          # a 2-ring is one link each way
        pairs = pairs[:1]
        both_ways = True
    return pairs + [(b, a) for a, b in pairs] if both_ways else pairs


# --------------------------------------------------------------------------------------------
# assembling the tasks
# --------------------------------------------------------------------------------------------
@dataclass
class StageCosts:
    """Per stage and replica: the analytic durations the evaluator reports."""
    forward_s: float = 0.0        # task F: compute + exposed TP comm + offload store
    backward_s: float = 0.0       # task B: recompute + backward + exposed comm + offload load
    compute_s: float = 0.0        # forward + backward compute
    recompute_s: float = 0.0      # recompute compute + its collectives
    recompute_comm_s: float = 0.0  # the collectives' part of it
    tp_comm_s: float = 0.0        # exposed TP communication of forward and backward
    offload_s: float = 0.0
    send_forward_s: float = 0.0
    send_backward_s: float = 0.0
    tp_kappa: int = 1
    ring_hops: int = 0
    unit_s: tuple = ()            # per unit: seconds to regenerate it in one layer, collectives included
    full_recompute_s: float = 0.0


class _Costing:
    def __init__(self, mesh: Mesh, net: Network):
        self.alpha, self.bandwidth, self.net = mesh.link_latency, mesh.link_bandwidth, net

    def collective(self, step: CommStep, dies: list[Die], kappa: int, name: str) -> Comm:
        """A ring collective: its steps each last as long as the ring's longest route."""
        c = step.collective
        pairs = ring_pairs(dies, c.directions == 2)
        hops = max((len(self.net.route(a, b)) for a, b in pairs), default=0)
        latency = c.steps * hops * self.alpha
        analytic = max(0.0, latency + kappa * c.flow_bytes / self.bandwidth - step.hidden_s)
        return Comm(name or c.kind, self.net.flows(pairs, c.flow_bytes), latency, analytic, step.hidden_s)


def _blocks(blocks, dies, kappa, costing: _Costing) -> tuple[Block, ...]:
    out = []
    for steps, repeat in blocks:
        converted = []
        for st in steps:
            if isinstance(st, ComputeStep):
                converted.append(Compute(st.name, st.seconds, st.flops))
            else:
                converted.append(costing.collective(st, dies, kappa, f"tp_{st.collective.kind}"))
        out.append(Block(tuple(converted), repeat))
    return tuple(out)


def _analytic(blocks: tuple[Block, ...], comm_only: bool = False) -> float:
    total = 0.0
    for block in blocks:
        for st in block.steps:
            if isinstance(st, Comm):
                total += block.repeat * st.analytic_s
            elif not comm_only:
                total += block.repeat * st.seconds
    return total


def assemble(scenario: Scenario, work: LayoutWorkload, layout: PlanLayout, x: list) -> tuple[PlanTasks, list[list[StageCosts]], Network]:
    """The task graph of a structurally valid plan, its per-stage costs, and the link loads."""
    mesh = scenario.mesh()
    par, pipelines = layout.par, layout.pipelines
    m = work.microbatches
    net = Network(mesh, layout.routes)
    costing = _Costing(mesh, net)
    stages = work.stages

    # --- concurrency classes and per-iteration link loads --------------------------------------
    tp_pairs = [[ring_pairs(pipe[i], stages[i].scheme == "tatp") for i in range(par.pp)] for pipe in pipelines]
    for r in range(par.dp):
        for i in range(par.pp):
            net.register("tp", tp_pairs[r][i])
    send_pairs = [[list(zip(pipe[i], pipe[i + 1])) for i in range(par.pp - 1)] for pipe in pipelines]
    share = work.p2p_bytes / par.tp   # Megatron scatter/gather: die k talks to die k of the next stage
    for r in range(par.dp):
        for i in range(par.pp - 1):
            net.register("p2p_forward", send_pairs[r][i])
            net.register("p2p_backward", [(b, a) for a, b in send_pairs[r][i]])
    stage_of = {d: (r, i) for r, pipe in enumerate(pipelines) for i, dies in enumerate(pipe) for d in dies}
    per_mb_offload = {}
    for snd, hlp, b in layout.offload:
        if b > 0 and snd in stage_of:
            per_mb = b / stages[stage_of[snd][1]].inflight   # each in-flight micro-batch parks its share
            per_mb_offload[(snd, hlp)] = per_mb_offload.get((snd, hlp), 0.0) + per_mb
    offload_load = {"store": {}, "load": {}}
    for (snd, hlp), b in per_mb_offload.items():
        for direction, (a, c) in (("store", (snd, hlp)), ("load", (hlp, snd))):
            for link in net.route(a, c):
                offload_load[direction][link] = offload_load[direction].get(link, 0.0) + b

    # --- per stage and replica ------------------------------------------------------------------
    costs: list[list[StageCosts]] = []
    pipes_tasks = []
    for r, pipe in enumerate(pipelines):
        row, tasks_row = [], []
        for i, s in enumerate(stages):
            dies = pipe[i]
            hops = max((len(net.route(a, b)) for a, b in tp_pairs[r][i]), default=0)
            kappa = net.kappa("tp", tp_pairs[r][i])
            fwd = _blocks(s.forward, dies, kappa, costing)
            bwd = _blocks(s.backward, dies, kappa, costing)
            full = _blocks(s.full_recompute_blocks, dies, kappa, costing)
            unit_s = tuple(u.recompute_s + sum(costing.collective(st, dies, kappa, "").analytic_s
                                               for st in u.recompute_comm) for u in s.units)
            recompute = _recompute_blocks(s, x[i], full, dies, kappa, costing)
            tp_comm_s = _analytic(fwd, True) + _analytic(bwd, True)
            recompute_s = _analytic(recompute)
            recompute_comm_s = _analytic(recompute, True)
            store, load = _offload_comms(scenario, s, dies, per_mb_offload, offload_load, net, costing)
            if store is not None:
                fwd = fwd + (Block((store,)),)
                recompute = (Block((load,)),) + recompute
            send_f = send_b = None
            if i < par.pp - 1:
                send_f = _send(send_pairs[r][i], share, "p2p_forward", net, costing)
            if i > 0:
                back = [(b, a) for a, b in send_pairs[r][i - 1]]
                send_b = _send(back, share, "p2p_backward", net, costing)
            c = StageCosts(
                forward_s=_analytic(fwd), backward_s=_analytic(recompute) + _analytic(bwd),
                compute_s=s.fwd_s + s.bwd_s, recompute_s=recompute_s, recompute_comm_s=recompute_comm_s,
                tp_comm_s=tp_comm_s,
                offload_s=(store.analytic_s + load.analytic_s) if store else 0.0,
                send_forward_s=send_f.analytic_s if send_f else 0.0,
                send_backward_s=send_b.analytic_s if send_b else 0.0,
                tp_kappa=kappa, ring_hops=hops, unit_s=unit_s, full_recompute_s=_analytic(full))
            for blocks in (fwd, recompute, bwd):
                for block in blocks:
                    for st in block.steps:
                        if isinstance(st, Comm):
                            net.add_loads(st, block.repeat * m)
            net.add_loads(send_f, m)
            net.add_loads(send_b, m)
            row.append(c)
            tasks_row.append(StageTasks(
                index=i, replica=r, dies=tuple(dies), forward=fwd, recompute=recompute, backward=bwd,
                send_forward=send_f, send_backward=send_b, optimizer_s=s.optimizer_s,
                state_bytes=s.state_bytes, activation_bytes=s.kept_bytes(x[i]),
                transient_bytes=s.transient_bytes(x[i])))
        costs.append(row)
        pipes_tasks.append(tuple(tasks_row))

    dp_comms = tuple(_dp_allreduce(scenario, s, [pipe[i] for pipe in pipelines], net, costing)
                     if par.dp > 1 else None for i, s in enumerate(stages))
    offloads = tuple(Offload(snd, hlp, b) for (snd, hlp), b in per_mb_offload.items())
    tasks = PlanTasks(m, tuple(pipes_tasks), dp_comms, offloads, scenario.wafer.dram_capacity,
                      mesh.link_bandwidth, scenario.wafer.die_flops * scenario.wafer.compute_efficiency)
    return tasks, costs, net


def _recompute_blocks(s: StageWorkload, row, full: tuple[Block, ...], dies, kappa, costing) -> tuple[Block, ...]:
    """Full recomputation: the whole forward of every layer, collectives included; a unit row:
    each dropped unit regenerated x_j times from its producers, with their collectives."""
    if row == FULL:
        return full
    if not any(row):
        return ()
    blocks = [Block((Compute("recompute", s.recompute_seconds(row),
                             sum(u.recompute_flops * x for u, x in zip(s.units, row))),))]
    for u, x in zip(s.units, row):
        if x and u.recompute_comm:
            comms = tuple(costing.collective(st, dies, kappa, f"recompute_{st.collective.kind}")
                          for st in u.recompute_comm)
            blocks.append(Block(comms, int(x)))
    return tuple(blocks)


def _send(pairs, nbytes: float, cls: str, net: Network, costing: _Costing) -> Comm:
    hops = max(len(net.route(a, b)) for a, b in pairs)
    latency = hops * costing.alpha
    kappa = net.kappa(cls, pairs)
    return Comm(cls, net.flows(pairs, nbytes), latency, latency + kappa * nbytes / costing.bandwidth)


def _offload_comms(scenario, s: StageWorkload, dies, per_mb_offload, offload_load, net, costing):
    """Store (forward) and load (backward) of the stage's offloaded checkpoints: exposed only where
    the D2D transfer is slower than the DRAM access it replaces (WATOS Sec. IV-C.2)."""
    mine = [(snd, hlp, b) for (snd, hlp), b in per_mb_offload.items() if snd in dies]
    if not mine:
        return None, None
    out = []
    for direction in ("store", "load"):
        loads = offload_load[direction]
        worst, hidden, flows = -math.inf, 0.0, []   # the die whose transfer outlasts its DRAM access most
        for d in dies:
            pairs = [((snd, hlp) if direction == "store" else (hlp, snd), b) for snd, hlp, b in mine if snd == d]
            if not pairs:
                continue
            links = [link for (a, c), _ in pairs for link in net.route(a, c)]
            link_s = max(len(net.route(a, c)) for (a, c), _ in pairs) * costing.alpha + \
                max(loads[link] for link in links) / costing.bandwidth
            dram_s = sum(b for _, b in pairs) / scenario.wafer.dram_bandwidth
            if link_s - dram_s > worst:
                worst, hidden = link_s - dram_s, dram_s
            flows += [RoutedFlow(a, c, b, net.route(a, c)) for (a, c), b in pairs]
        latency = max(len(f.route) for f in flows) * costing.alpha
        out.append(Comm(f"offload_{direction}", tuple(flows), latency, max(0.0, worst), hidden))
    return out[0], out[1]


def _dp_allreduce(scenario, s: StageWorkload, rings: list[list[Die]], net: Network, costing: _Costing) -> Comm:
    """Gradient all-reduce of one stage over the replicas: one ring per TP position, concurrent.
    With the distributed optimizer: reduce-scatter of the gradients, all-gather of the weights."""
    dp = len(rings)
    by_position = [[ring[k] for ring in rings] for k in range(len(rings[0]))]
    pairs = [p for ring in by_position for p in ring_pairs(ring, False)]
    if s.dp_gather_bytes:
        flow_bytes = (dp - 1) / dp * (s.grad_bytes + s.dp_gather_bytes)
    else:
        flow_bytes = 2 * (dp - 1) / dp * s.grad_bytes
    counts: dict = {}
    for a, b in pairs:
        for link in net.route(a, b):
            counts[link] = counts.get(link, 0) + 1
    kappa = max(counts.values(), default=1)
    hops = max(len(net.route(a, b)) for a, b in pairs)
    latency = 2 * (dp - 1) * hops * costing.alpha
    comm = Comm("dp_allreduce", net.flows(pairs, flow_bytes), latency,
                latency + kappa * flow_bytes / costing.bandwidth)
    net.add_loads(comm, 1)
    return comm


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
    layout = read_plan(plan)
    par = layout.par
    violations: list[str] = []
    if scenario.parallel is not None and scenario.parallel != par:
        violations.append(f"plan layout tp={par.tp}, pp={par.pp}, dp={par.dp} differs from the instance's "
                          f"tp={scenario.parallel.tp}, pp={scenario.parallel.pp}, dp={scenario.parallel.dp}")
    elif getattr(scenario, "fixed", None) is not None and scenario.fixed.violation(par):
        violations.append(scenario.fixed.violation(par))   # a partial `parallel:` fixes some of tp, pp, dp
    if par.dies > len(mesh.healthy_dies):
        return Prepared(layout, None, None, {}, [f"tp*pp*dp = {par.dies} exceeds the {len(mesh.healthy_dies)} "
                                                 "healthy dies"])
    choice: list[str] = []   # the plan's micro-batch size and layer split
    allowed = scenario.training.micro_batches
    if layout.micro_batch is not None and layout.micro_batch not in allowed:
        choice.append(f"micro_batch {layout.micro_batch} is not one of the scenario's sizes "
                      f"{', '.join(map(str, allowed))}")
    elif layout.micro_batch is None and len(allowed) > 1:
        choice.append(f"the plan must give micro_batch: the scenario allows {', '.join(map(str, allowed))}")
    if layout.layers is not None and sum(layout.layers) != scenario.llm.layers:
        choice.append(f"layers {list(layout.layers)} sum to {sum(layout.layers)}, the model has "
                      f"{scenario.llm.layers}")
    if choice:
        return Prepared(layout, None, None, {}, violations + choice)
    try:
        work = scenario.workload(Choice(par, layout.schemes, layout.micro_batch, layout.layers))
    except InstanceError as exc:
        return Prepared(layout, None, None, {}, [f"layout cannot be modelled: {exc}"])
    stages = work.stages

    owner: dict[Die, int] = {}
    for r, pipe in enumerate(layout.pipelines):
        for i, dies in enumerate(pipe):
            for d in dies:
                if not mesh.is_healthy(d):
                    violations.append(f"stage {i} of pipeline {r} uses die {list(d)}, which is "
                                      f"{'faulty' if mesh.contains(d) else 'outside the mesh'}")
                elif d in owner:
                    violations.append(f"die {list(d)} is used twice")
                owner[d] = i
    violations += check_routes(mesh, layout.routes)
    if violations:
        return Prepared(layout, work, None, owner, violations)

    # recomputation: per stage a row x[i][j] in 0..layers_i, or "full"
    n_units = len(stages[0].units)
    recompute = layout.recompute
    if recompute is None:
        x = [[0] * n_units for _ in stages]
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
            if row == FULL:
                continue
            for j, v in enumerate(row):
                if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= stages[i].layers:
                    violations.append(f"recompute[{i}][{j}] = {v!r} must be an integer in 0..{stages[i].layers}")
                elif v and not stages[i].units[j].recomputable:
                    violations.append(f"recompute[{i}][{j}] = {v}: unit {stages[i].units[j].name} is the layer "
                                      "input checkpoint and cannot be recomputed")
    return Prepared(layout, work, x, owner, violations)


# --------------------------------------------------------------------------------------------
# public producer
# --------------------------------------------------------------------------------------------
def plan_tasks(scenario: Scenario, plan: dict) -> PlanTasks:
    """The task graph of `plan` for the simulator. Raises PlanError for a plan the evaluator cannot
    read or place (a plan that overflows DRAM still yields its tasks: the simulator reports it)."""
    prepared = prepare(scenario, plan)
    if prepared.violations:
        raise PlanError("; ".join(prepared.violations))
    tasks, _, _ = assemble(scenario, prepared.work, prepared.layout, prepared.x)
    return tasks
