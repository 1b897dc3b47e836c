"""A placed training plan as the 1F1B task graph of one iteration (`wafopt.costmodel.tasks`), with the
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

from wafopt.costmodel.model import LayoutWorkload
from wafopt.costmodel.network import (
    CommCosting,
    Network,
    dp_flow_bytes,
    network_of,
    ring_pairs,
    send_share,
)
from wafopt.costmodel.plan_layout import PlanLayout
from wafopt.costmodel.scenario import Scenario
from wafopt.costmodel.stage import FULL, ComputeStep, StageWorkload
from wafopt.costmodel.tasks import (
    Block,
    Comm,
    Compute,
    Offload,
    PlanTasks,
    RoutedFlow,
    StageTasks,
)
from wafopt.hardware.mesh import Die


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


def _blocks(blocks, dies, kappa, costing: CommCosting) -> tuple[Block, ...]:
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
    par, pipelines = layout.par, layout.pipelines
    m = work.microbatches
    net = network_of(scenario, layout.routes)
    costing = CommCosting(net)
    stages = work.stages

    # --- concurrency classes and per-iteration link loads --------------------------------------
    tp_pairs = [[ring_pairs(pipe[i], stages[i].scheme == "tatp") for i in range(par.pp)] for pipe in pipelines]
    for r in range(par.dp):
        for i in range(par.pp):
            net.register("tp", tp_pairs[r][i])
    v = par.interleave   # with v > 1 the last stage also sends to the first (chunk c to c + 1)
    bounds = par.pp if v > 1 else par.pp - 1
    send_pairs = [[list(zip(pipe[i], pipe[(i + 1) % par.pp])) for i in range(bounds)] for pipe in pipelines]
    tokens = work.training.seq * work.training.micro_batch

    def share(i: int, j: int) -> float:
        """Bytes a die sends across the boundary of stages i and j (TATP stages send whole tokens)."""
        return max(send_share(work.p2p_bytes, par.tp, tokens if stages[k].scheme == "tatp" else None)
                   for k in (i, j))
    for r in range(par.dp):
        for i in range(bounds):
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
            bwd = _blocks(s.backward_after_full if x[i] == FULL else s.backward, dies, kappa, costing)
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
            if i < bounds:
                send_f = _send(send_pairs[r][i], share(i, (i + 1) % par.pp), "p2p_forward", net, costing)
            if i > 0 or v > 1:
                back = [(b, a) for a, b in send_pairs[r][i - 1]]
                send_b = _send(back, share(i, (i - 1) % par.pp), "p2p_backward", net, costing)
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
            sends = m * v if v > 1 else m   # chunk boundaries crossed per micro-batch
            net.add_loads(send_f, sends if i < par.pp - 1 else m * (v - 1))
            net.add_loads(send_b, sends if i > 0 else m * (v - 1))
            row.append(c)
            tasks_row.append(StageTasks(
                index=i, replica=r, dies=tuple(dies), forward=_chunk(fwd, v), recompute=_chunk(recompute, v),
                backward=_chunk(bwd, v), send_forward=send_f, send_backward=send_b, optimizer_s=s.optimizer_s,
                state_bytes=s.state_bytes, activation_bytes=s.kept_bytes(x[i]) / v,
                transient_bytes=s.transient_bytes(x[i])))
        costs.append(row)
        pipes_tasks.append(tuple(tasks_row))

    dp_comms = tuple(_dp_allreduce(scenario, s, [pipe[i] for pipe in pipelines], net, costing)
                     if par.dp > 1 else None for i, s in enumerate(stages))
    offloads = tuple(Offload(snd, hlp, b) for (snd, hlp), b in per_mb_offload.items())
    tasks = PlanTasks(m, tuple(pipes_tasks), dp_comms, offloads, scenario.wafer.dram_capacity,
                      net.link_bandwidth, scenario.wafer.die_flops * scenario.wafer.compute_efficiency, v)
    return tasks, costs, net


def _chunk(blocks: tuple[Block, ...], v: int) -> tuple[Block, ...]:
    """One of the v equal chunks of a stage's pass (interleaved 1F1B): layer blocks with 1/v of their
    repeats; the embedding and LM head, which sit in one chunk, spread evenly over the v (their
    seconds and bytes / v), so a chunk lasts exactly 1/v of the stage."""
    if v == 1:
        return blocks
    out = []
    for block in blocks:
        if block.repeat % v == 0:
            out.append(Block(block.steps, block.repeat // v))
            continue
        steps = []
        for st in block.steps:
            if isinstance(st, Comm):
                steps.append(Comm(st.name, tuple(RoutedFlow(f.src, f.dst, f.bytes * block.repeat / v, f.route)
                                                 for f in st.flows),
                                  st.latency_s * block.repeat / v, st.analytic_s * block.repeat / v,
                                  st.hidden_s * block.repeat / v))
            else:
                steps.append(Compute(st.name, st.seconds * block.repeat / v, st.flops * block.repeat / v))
        out.append(Block(tuple(steps), 1))
    return tuple(out)


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


def _send(pairs, nbytes: float, cls: str, net: Network, costing: CommCosting) -> Comm:
    latency = costing.latency(pairs)
    kappa = net.kappa(cls, pairs)
    return Comm(cls, net.flows(pairs, nbytes), latency, latency + costing.transfer(pairs, nbytes, kappa))


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
            link_s = costing.latency([p for p, _ in pairs]) + \
                costing.transfer([p for p, _ in pairs], max(loads[link] for link in links))
            dram_s = sum(b for _, b in pairs) / scenario.wafer.dram_bandwidth
            if link_s - dram_s > worst:
                worst, hidden = link_s - dram_s, dram_s
            flows += [RoutedFlow(a, c, b, net.route(a, c)) for (a, c), b in pairs]
        latency = costing.latency([(f.src, f.dst) for f in flows])
        out.append(Comm(f"offload_{direction}", tuple(flows), latency, max(0.0, worst), hidden))
    return out[0], out[1]


def _dp_allreduce(scenario, s: StageWorkload, rings: list[list[Die]], net: Network, costing: CommCosting) -> Comm:
    """Gradient all-reduce of one stage over the replicas: one ring per TP position, concurrent.
    With the distributed optimizer: reduce-scatter of the gradients, all-gather of the weights."""
    dp = len(rings)
    by_position = [[ring[k] for ring in rings] for k in range(len(rings[0]))]
    pairs = [p for ring in by_position for p in ring_pairs(ring, False)]
    flow_bytes = dp_flow_bytes(dp, s.grad_bytes, s.dp_gather_bytes)
    counts: dict = {}
    for a, b in pairs:
        for link in net.route(a, b):
            counts[link] = counts.get(link, 0) + 1
    kappa = max(counts.values(), default=1)
    latency = 2 * (dp - 1) * costing.latency(pairs)
    comm = Comm("dp_allreduce", net.flows(pairs, flow_bytes), latency,
                latency + costing.transfer(pairs, flow_bytes, kappa))
    net.add_loads(comm, 1)
    return comm
