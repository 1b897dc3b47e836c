"""Discrete-event simulation of one training iteration of a plan (docs/simulate.md).

Reads a `PlanTasks` (the 1F1B task graph, wafopt.costmodel.tasks) and replays it in time:
compute steps take their seconds; communication steps move their flows over the links, which
the active flows share max-min fairly (`flows.max_min_rates`), re-solved whenever a flow starts
or ends on a link another flow uses. DRAM use is tracked per die over time and may never exceed
the die's capacity. With contention off every communication takes its analytic duration, so the
run is the longest path of the task graph.

Interleaved 1F1B (`interleave` v > 1 on the PlanTasks; `schedule.pipeline_order`): each stage's
forward / recompute / backward blocks are one chunk's, run once per (chunk, micro-batch); chunk c
of stage i is virtual stage c p + i; the last stage's `send_forward` carries chunk c to stage 0's
chunk c+1 and stage 0's `send_backward` carries chunk c's gradients to the last stage's chunk c-1.
Memory: `activation_bytes` (and offloaded shares) per in-flight chunk-micro-batch, from the
chunk's forward start to its backward end; `transient_bytes` during each chunk-backward.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from wafopt.core.numeric import at_most
from wafopt.costmodel.schedule import pipeline_order
from wafopt.costmodel.tasks import (
    Block,
    Comm,
    Die,
    Link,
    PlanTasks,
    analytic_seconds,
    compute_seconds,
)
from wafopt.simulate.flows import max_min_rates

FINISHED = 1e-9   # a flow with less than this share of its bytes left has arrived (float noise)
STEP_DONE, FLOWS_CHANGE, COMM_DONE = 0, 1, 2   # event kinds: a task's fixed step ends; the first
#                                               flow of a transfer arrives; a communication ends


# tasks that are one transfer and occupy no stage -> how the trace names them
TRANSFERS = {"SF": "send_forward", "SB": "send_backward", "DP": "dp_allreduce"}


class MemoryOverflow(Exception):
    """A die needs more DRAM than it has at some moment of the iteration."""

    def __init__(self, die: Die, time_s: float, needed: float, capacity: float):
        self.die, self.time_s, self.needed, self.capacity = die, time_s, needed, capacity
        super().__init__(f"die {list(die)} needs {needed / 1e9:.3f} GB at t = {time_s:.6g} s, "
                         f"capacity {capacity / 1e9:.3f} GB")


@dataclass
class Interval:
    """One task on one stage of one replica, for the Gantt chart."""
    replica: int
    stage: int
    kind: str          # forward | recompute | backward | optimizer
    microbatch: int    # -1 for the optimizer step
    start: float
    end: float
    chunk: int = 0     # model chunk (virtual stage chunk * pp + stage) with interleaving


@dataclass
class CommInterval:
    """One communication in time, for the trace: a step of a stage's task the stage waits on
    (`where` "stage": a TP collective, an offload; recorded with contention on), or a transfer that
    occupies no stage ("send_forward", "send_backward", "dp_allreduce"; replica -1 for the all-reduce
    over every replica)."""
    replica: int
    stage: int
    name: str          # the Comm's name (tp_allreduce, offload_store, ...), or `where` for a transfer
    where: str         # stage | send_forward | send_backward | dp_allreduce
    microbatch: int    # -1 for the all-reduce
    start: float
    end: float


@dataclass
class Simulation:
    iteration_s: float
    contention: bool
    die_capacity: float
    link_bandwidth: float
    compute_s: dict[Die, float]          # seconds each die computes
    comm_s: dict[Die, float]             # seconds each die's tasks wait on their own communication
    peak_memory: dict[Die, float]        # bytes
    link_bytes: dict[Link, float]        # bytes carried per directed link
    intervals: list[Interval]
    memory_timeline: dict[Die, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    stage_of: dict[Die, tuple[int, int]] = field(default_factory=dict)   # die -> (replica, stage)
    comm_intervals: list[CommInterval] = field(default_factory=list)    # recorded with the timeline

    @property
    def peak_memory_bytes(self) -> float:
        return max(self.peak_memory.values(), default=0.0)

    def link_utilization(self) -> dict[Link, float]:
        """Bytes carried over what the link could carry in the iteration."""
        span = self.iteration_s * self.link_bandwidth
        return {link: b / span for link, b in self.link_bytes.items()} if span > 0 else {}

    def to_dict(self) -> dict:
        dies = sorted(self.peak_memory)
        util = self.link_utilization()
        busiest = max(util, key=util.get, default=None)
        return {
            "iteration_s": self.iteration_s,
            "contention": self.contention,
            "peak_memory_bytes": self.peak_memory_bytes,
            "die_capacity_bytes": self.die_capacity,
            "dies": [{"die": list(d), "compute_s": self.compute_s.get(d, 0.0), "comm_s": self.comm_s.get(d, 0.0),
                      "idle_s": self.iteration_s - self.compute_s.get(d, 0.0) - self.comm_s.get(d, 0.0),
                      "peak_memory_bytes": self.peak_memory[d]} for d in dies],
            "links": [{"src": list(a), "dst": list(b), "bytes": self.link_bytes[(a, b)],
                       "utilization": util[(a, b)]} for a, b in sorted(self.link_bytes)],
            "busiest_link": None if busiest is None else {"src": list(busiest[0]), "dst": list(busiest[1]),
                                                          "utilization": util[busiest]},
        }


# --------------------------------------------------------------------------------------------
# prepared steps
# --------------------------------------------------------------------------------------------
class _CommRun:
    """A Comm with its flows resolved to link indices, and its flow rates when it is alone."""
    __slots__ = ("comm", "flow_bytes", "entry_link", "entry_flow", "links", "alone_rates", "alone_first",
                 "alone_last")

    def __init__(self, comm: Comm, link_index: dict[Link, int], capacity: float):
        self.comm = comm
        flows = [f for f in comm.flows if f.bytes > 0 and f.route]
        self.flow_bytes = np.array([float(f.bytes) for f in flows])
        # the link x flow incidence as (link, flow) entries
        self.entry_link = np.array([link_index[link] for f in flows for link in f.route], dtype=np.int64)
        self.entry_flow = np.array([j for j, f in enumerate(flows) for _ in f.route], dtype=np.int64)
        self.links = sorted({int(i) for i in self.entry_link})
        if flows:
            self.alone_rates = _rates(self.entry_link, self.entry_flow, len(flows), capacity)
            times = self.flow_bytes / self.alone_rates
            self.alone_first, self.alone_last = float(times.min()), float(times.max())


def _rates(entry_link: np.ndarray, entry_flow: np.ndarray, n_flows: int, capacity: float) -> np.ndarray:
    """Max-min fair rates of flows given as (link, flow) incidence entries."""
    links, local = np.unique(entry_link, return_inverse=True)
    incidence = np.zeros((len(links), n_flows), dtype=bool)
    incidence[local, entry_flow] = True
    return max_min_rates(incidence, np.full(len(links), capacity))


class _Transfer:
    """One occurrence of a Comm in flight: its flows' bytes left and current rates."""
    __slots__ = ("run", "task", "start", "left", "rates", "since", "version", "background", "alone")

    def __init__(self, run: _CommRun, task: int, start: float, background: bool):
        self.run, self.task, self.start, self.background = run, task, start, background
        self.left = run.flow_bytes.copy()
        self.rates = run.alone_rates
        self.since = start
        self.version = 0
        self.alone = True    # moving at its cached rates since it started


# --------------------------------------------------------------------------------------------
# the task graph
# --------------------------------------------------------------------------------------------
@dataclass
class _Task:
    kind: str                 # F, B, SF, SB, DP, OPT
    replica: int
    stage: int
    k: int
    steps: tuple              # floats (fixed seconds) and _CommRun
    mark: int = -1            # step index where a backward's recompute ends
    chunk: int = 0            # model chunk of an F or B (interleaving)
    succ: list = field(default_factory=list)
    waiting: int = 0
    pos: int = 0
    start: float = 0.0
    mark_time: float = 0.0
    step_start: float = 0.0   # when the step at pos - 1 started


class _Simulator:
    def __init__(self, tasks: PlanTasks, contention: bool, timeline: bool):
        self.plan, self.contention, self.timeline = tasks, contention, timeline
        self.capacity = tasks.link_bandwidth
        self.link_index: dict[Link, int] = {}
        self.runs: dict[int, _CommRun] = {}
        self.link_bytes: dict[Link, float] = defaultdict(float)
        self.heap: list = []
        self.seq = 0
        self.tasks: list[_Task] = []
        self.intervals: list[Interval] = []
        self.comm_intervals: list[CommInterval] = []
        self._build_memory()
        self._build_graph()

    # ---- preparation ----------------------------------------------------------------------
    def _run(self, comm: Comm, times: int) -> _CommRun:
        for f in comm.flows:
            for link in f.route:
                self.link_bytes[link] += f.bytes * times
        run = self.runs.get(id(comm))
        if run is None:
            for f in comm.flows:
                for link in f.route:
                    self.link_index.setdefault(link, len(self.link_index))
            run = self.runs[id(comm)] = _CommRun(comm, self.link_index, self.capacity)
        return run

    def _steps(self, blocks: tuple[Block, ...], times: int) -> tuple:
        """The phase as a flat tuple of fixed seconds and communications (adjacent fixed steps merged)."""
        for block in blocks:
            for step in block.steps:
                if isinstance(step, Comm):
                    self._run(step, times * block.repeat)
        if not self.contention:
            return (float(analytic_seconds(blocks)),)
        out: list = []
        for block in blocks:
            for _ in range(block.repeat):
                for step in block.steps:
                    if isinstance(step, Comm):
                        out.append(self._run(step, 0))
                    elif out and isinstance(out[-1], float):
                        out[-1] += float(step.seconds)
                    else:
                        out.append(float(step.seconds))
        return tuple(out)

    def _comm_steps(self, comm: Comm, times: int) -> tuple:
        run = self._run(comm, times)
        return (run,) if self.contention else (float(comm.analytic_s),)

    def _task(self, kind, r, i, k, steps, mark=-1, chunk=0) -> int:
        self.tasks.append(_Task(kind, r, i, k, steps, mark, chunk))
        return len(self.tasks) - 1

    def _edge(self, a: int | None, b: int) -> None:
        if a is not None:
            self.tasks[a].succ.append(b)
            self.tasks[b].waiting += 1

    def _build_graph(self) -> None:
        plan, m = self.plan, self.plan.microbatches
        p, v = plan.pp, getattr(plan, "interleave", 1)
        runs = m * v   # each stage's blocks run once per (chunk, micro-batch)
        last_backward: dict[int, list[int]] = defaultdict(list)
        self.compute_s: dict[Die, float] = defaultdict(float)
        for r, pipe in enumerate(plan.pipelines):
            fwd: dict[tuple[int, int, int], int] = {}   # (stage, chunk, micro-batch) -> task
            bwd: dict[tuple[int, int, int], int] = {}
            for st in pipe:
                i = st.index
                f_steps = self._steps(st.forward, runs)
                rec = self._steps(st.recompute, runs)
                b_steps = rec + self._steps(st.backward, runs)
                busy = runs * sum(compute_seconds(ph) for ph in (st.forward, st.recompute, st.backward))
                for d in st.dies:
                    self.compute_s[d] += busy + st.optimizer_s
                prev = None
                for kind, c, k in pipeline_order(i, p, m, v):
                    if kind == "F":
                        t = fwd[(i, c, k)] = self._task("F", r, i, k, f_steps, chunk=c)
                    else:
                        t = bwd[(i, c, k)] = self._task("B", r, i, k, b_steps, mark=len(rec), chunk=c)
                    self._edge(prev, t)
                    prev = t
                last_backward[i].append(prev)
            for st in pipe:
                i = st.index
                for c in range(v):
                    # the next virtual stage (c p + i + 1) and the previous one (c p + i - 1)
                    nxt = (i + 1, c) if i + 1 < p else (0, c + 1) if c + 1 < v else None
                    before = (i - 1, c) if i > 0 else (p - 1, c - 1) if c > 0 else None
                    for k in range(m):
                        if st.send_forward is not None and nxt is not None:
                            s = self._task("SF", r, i, k, self._comm_steps(st.send_forward, 1), chunk=c)
                            self._edge(fwd[(i, c, k)], s)
                            self._edge(s, fwd[(*nxt, k)])
                        if st.send_backward is not None and before is not None:
                            s = self._task("SB", r, i, k, self._comm_steps(st.send_backward, 1), chunk=c)
                            self._edge(bwd[(i, c, k)], s)
                            self._edge(s, bwd[(*before, k)])
                        if st.send_forward is None and nxt is not None:
                            self._edge(fwd[(i, c, k)], fwd[(*nxt, k)])
                        if st.send_backward is None and before is not None:
                            self._edge(bwd[(i, c, k)], bwd[(*before, k)])
        for i in range(p):
            gate = None
            comm = plan.dp_allreduce[i] if i < len(plan.dp_allreduce) else None
            if comm is not None:
                gate = self._task("DP", -1, i, -1, self._comm_steps(comm, 1))
                for t in last_backward[i]:
                    self._edge(t, gate)
            for r, pipe in enumerate(plan.pipelines):
                opt = self._task("OPT", r, i, -1, (float(pipe[i].optimizer_s),))
                self._edge(gate if gate is not None else last_backward[i][r], opt)

    def _build_memory(self) -> None:
        """Per stage group: which dies gain what when a micro-batch's activations are alive."""
        plan = self.plan
        dies: dict[Die, int] = {}

        def idx(d: Die) -> int:
            return dies.setdefault(d, len(dies))

        out: dict[Die, float] = defaultdict(float)
        hosted: dict[Die, list[tuple[Die, float]]] = defaultdict(list)
        for o in plan.offloads:   # interleaved: each in-flight chunk parks 1/v of a micro-batch's share
            out[o.sender] += o.bytes_per_microbatch / plan.interleave
            hosted[o.sender].append((o.helper, o.bytes_per_microbatch / plan.interleave))
        self.state = {}
        self.alive: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.transient: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        for r, pipe in enumerate(plan.pipelines):
            for st in pipe:
                gain: dict[int, float] = defaultdict(float)
                for d in st.dies:
                    self.state[idx(d)] = st.state_bytes
                    gain[idx(d)] += st.activation_bytes - out[d]
                    for helper, b in hosted[d]:
                        gain[idx(helper)] += b
                keys = np.array(list(gain), dtype=np.int64)
                self.alive[(r, st.index)] = (keys, np.array([gain[k] for k in keys]))
                self.transient[(r, st.index)] = (np.array([idx(d) for d in st.dies], dtype=np.int64),
                                                 np.full(len(st.dies), float(st.transient_bytes)))
        for o in plan.offloads:
            idx(o.helper)
        self.dies = sorted(dies, key=dies.get)
        self.memory = np.zeros(len(dies))
        for k, v in self.state.items():
            self.memory[k] = v
        self.peak = self.memory.copy()
        self.samples: dict[int, list[tuple[float, float]]] = defaultdict(list)
        worst = int(np.argmax(self.memory)) if len(self.memory) else 0
        if len(self.memory) and not at_most(self.memory[worst], plan.die_capacity):
            raise MemoryOverflow(self.dies[worst], 0.0, float(self.memory[worst]), plan.die_capacity)
        if self.timeline:
            for k in range(len(self.memory)):
                self.samples[k].append((0.0, float(self.memory[k])))

    # ---- events ---------------------------------------------------------------------------
    def _push(self, t: float, kind: int, obj, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, version))

    def _memory(self, change: tuple[np.ndarray, np.ndarray], sign: float, t: float) -> None:
        keys, delta = change
        if not len(keys):
            return
        self.memory[keys] += sign * delta
        if sign > 0:
            self.peak[keys] = np.maximum(self.peak[keys], self.memory[keys])
            worst = keys[int(np.argmax(self.memory[keys]))]
            if not at_most(self.memory[worst], self.plan.die_capacity):
                raise MemoryOverflow(self.dies[worst], t, float(self.memory[worst]), self.plan.die_capacity)
        if self.timeline:
            for k in keys:
                self.samples[int(k)].append((t, float(self.memory[k])))

    def _start(self, tid: int, t: float) -> None:
        task = self.tasks[tid]
        task.start = t
        group = (task.replica, task.stage)
        if task.kind == "F":
            self._memory(self.alive[group], +1, t)
        elif task.kind == "B":
            self._memory(self.transient[group], +1, t)
        self._advance(tid, t)

    def _advance(self, tid: int, t: float) -> None:
        task = self.tasks[tid]
        if self.timeline and task.pos > 0 and task.kind in ("F", "B"):
            ended = task.steps[task.pos - 1]
            if isinstance(ended, _CommRun):   # a communication the stage waited on
                self.comm_intervals.append(CommInterval(task.replica, task.stage, ended.comm.name, "stage", task.k,
                                                        task.step_start, t))
        if task.pos == task.mark:
            task.mark_time = t
        if task.pos < len(task.steps):
            step = task.steps[task.pos]
            task.pos += 1
            task.step_start = t
            if isinstance(step, _CommRun):
                self._start_comm(step, tid, t)
            else:
                self._push(t + step, STEP_DONE, tid)
            return
        self._finish(tid, t)

    def _finish(self, tid: int, t: float) -> None:
        task = self.tasks[tid]
        group = (task.replica, task.stage)
        if task.kind == "B":
            self._memory(self.transient[group], -1, t)
            self._memory(self.alive[group], -1, t)
            if task.mark > 0:
                self.intervals.append(Interval(*group, "recompute", task.k, task.start, task.mark_time,
                                               task.chunk))
            self.intervals.append(Interval(*group, "backward", task.k, task.mark_time if task.mark > 0
                                           else task.start, t, task.chunk))
        elif task.kind == "F":
            self.intervals.append(Interval(*group, "forward", task.k, task.start, t, task.chunk))
        elif task.kind == "OPT" and t > task.start:
            self.intervals.append(Interval(*group, "optimizer", -1, task.start, t))
        elif task.kind in TRANSFERS and self.timeline:
            self.comm_intervals.append(CommInterval(*group, TRANSFERS[task.kind], TRANSFERS[task.kind], task.k,
                                                    task.start, t))
        self.end = max(self.end, t)
        for s in task.succ:
            nxt = self.tasks[s]
            nxt.waiting -= 1
            if nxt.waiting == 0:
                self._start(s, t)

    # ---- the network ------------------------------------------------------------------------
    def _start_comm(self, run: _CommRun, tid: int, t: float) -> None:
        comm = run.comm
        if not len(run.flow_bytes):
            self._push(t + max(0.0, comm.latency_s - comm.hidden_s), COMM_DONE, tid)
            return
        tr = _Transfer(run, tid, t, comm.hidden_s > 0)
        users = self.users
        alone = not any(users[l] for l in run.links)
        for l in run.links:
            users[l].add(tr)
        if alone:   # nothing else on its links: the rates it has on its own (cached)
            self._push(t + run.alone_first, FLOWS_CHANGE, tr, tr.version)
            transfer = run.alone_last
        else:
            self._reshare([tr], t)
            transfer = float(np.max(tr.left / tr.rates))
        if tr.background:
            # the exposed part of an overlapped transfer, estimated from the rates at its start
            self._push(t + max(0.0, comm.latency_s + transfer - comm.hidden_s), COMM_DONE, tid)

    def _component(self, seeds) -> list[_Transfer]:
        """The transfers connected to `seeds` through links they share."""
        users = self.users
        seen = dict.fromkeys(seeds)
        frontier = list(seen)
        while frontier:
            tr = frontier.pop()
            for l in tr.run.links:
                for other in users[l]:
                    if other not in seen:
                        seen[other] = None
                        frontier.append(other)
        return list(seen)

    def _reshare(self, seeds, t: float) -> None:
        """Bring the transfers connected to `seeds` to time t, close the finished ones, and
        re-solve the max-min rates of the flows still moving."""
        moving, entries_link, entries_flow, offset = [], [], [], 0
        for tr in self._component(seeds):
            tr.left = tr.left - tr.rates * (t - tr.since)
            tr.since = t
            active = tr.left > FINISHED * tr.run.flow_bytes
            if not active.any():
                self._close(tr, t)
                continue
            tr.left = np.where(active, tr.left, 0.0)
            keep = active[tr.run.entry_flow]
            entries_link.append(tr.run.entry_link[keep])
            entries_flow.append(tr.run.entry_flow[keep] + offset)
            moving.append((tr, active, offset))
            offset += len(tr.left)
        if not moving:
            return
        rates = _rates(np.concatenate(entries_link), np.concatenate(entries_flow), offset, self.capacity)
        for tr, active, first in moving:
            r = rates[first:first + len(tr.left)]
            tr.rates = np.where(active, r, 0.0)   # finished flows: nothing left to move
            tr.version += 1
            tr.alone = False
            self._push(t + float(np.min(tr.left[active] / r[active])), FLOWS_CHANGE, tr, tr.version)

    def _close(self, tr: _Transfer, t: float) -> None:
        """All flows of `tr` have arrived: free its links; the communication ends after its latency."""
        tr.version += 1
        for l in tr.run.links:
            self.users[l].discard(tr)
        if not tr.background:   # (an overlapped transfer's task already went on, see _start_comm)
            self._push(t + tr.run.comm.latency_s, COMM_DONE, tr.task)

    def _flow_event(self, tr: _Transfer, t: float) -> None:
        """The first flow of `tr` to arrive: close it, or re-share what is left with its neighbours."""
        if (tr.alone and tr.run.alone_first == tr.run.alone_last) or \
                np.all(tr.left - tr.rates * (t - tr.since) <= FINISHED * tr.run.flow_bytes):
            self._close(tr, t)
            neighbours = {o for l in tr.run.links for o in self.users[l]}
            if neighbours:
                self._reshare(list(neighbours), t)
        else:
            self._reshare([tr], t)

    # ---- run --------------------------------------------------------------------------------
    def run(self) -> float:
        self.users = [set() for _ in range(len(self.link_index))]
        self.end = 0.0
        for tid, task in enumerate(self.tasks):
            if task.waiting == 0:
                self._start(tid, 0.0)
        heap = self.heap
        while heap:
            t, _, kind, obj, version = heapq.heappop(heap)
            if kind == FLOWS_CHANGE:
                if obj.version == version:
                    self._flow_event(obj, t)
            else:
                self._advance(obj, t)
        unfinished = [t for t in self.tasks if t.waiting > 0]
        if unfinished:   # a malformed task graph (a cycle): a bug in the producer
            raise RuntimeError(f"{len(unfinished)} tasks never became ready (first: {unfinished[0].kind} "
                               f"stage {unfinished[0].stage} micro-batch {unfinished[0].k})")
        return self.end


def simulate(tasks: PlanTasks, contention: bool = True, timeline: bool = False) -> Simulation:
    """Simulate one iteration; raises MemoryOverflow if a die's DRAM overflows at any moment.
    `timeline` also records every die's DRAM over time and every communication's span (with
    contention off, communications are inside their phases' analytic durations and not recorded)."""
    sim = _Simulator(tasks, contention, timeline)
    iteration = sim.run()
    comm_s: dict[Die, float] = defaultdict(float)
    dies_of = {(st.replica, st.index): st.dies for pipe in tasks.pipelines for st in pipe}
    for iv in sim.intervals:
        for d in dies_of[(iv.replica, iv.stage)]:
            comm_s[d] += iv.end - iv.start
    compute = dict(sim.compute_s)
    for d in compute:
        comm_s[d] = max(0.0, comm_s[d] - compute[d])
    timeline_out = {}
    if timeline:
        for k, samples in sim.samples.items():
            arr = np.array(samples)
            timeline_out[sim.dies[k]] = (arr[:, 0], arr[:, 1])
    return Simulation(
        iteration_s=iteration, contention=contention, die_capacity=tasks.die_capacity,
        link_bandwidth=tasks.link_bandwidth, compute_s=compute, comm_s=dict(comm_s),
        peak_memory={d: float(sim.peak[k]) for k, d in enumerate(sim.dies)},
        link_bytes=dict(sim.link_bytes), intervals=sim.intervals, memory_timeline=timeline_out,
        stage_of={d: group for group, dies in dies_of.items() for d in dies}, comm_intervals=sim.comm_intervals)
