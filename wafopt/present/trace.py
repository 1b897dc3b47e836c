"""The simulated iteration in the Chrome trace event format (`wafopt simulate --trace`), which
Perfetto (ui.perfetto.dev) and chrome://tracing open.

One process per die group (a pipeline stage of one replica, its dies in lockstep), with threads:
1. the stage's phases (forward, recompute, backward, optimizer step) as complete events, so their
   durations sum to the stage's busy time (compute and the communication it waits on);
2. the communication steps inside those phases (tensor-parallel collectives, offload transfers);
3. the pipeline sends from the stage, which occupy links, not the stage;
4. the gradient all-reduce of the stage over the replicas.
DRAM in use per die is a counter track (GB) in its group's process; dies that only host offloaded
checkpoints get a process of their own. Times are microseconds from the start of the iteration.
"""

from __future__ import annotations

import json
from pathlib import Path

from wafopt.core.errors import InstanceError
from wafopt.core.files import write_text
from wafopt.simulate.engine import Simulation

US_PER_S = 1e6
PHASES, COMMUNICATION, SENDS, ALL_REDUCE = 1, 2, 3, 4   # thread ids of a stage's process
THREAD_NAMES = {PHASES: "phases (compute + waits on communication)", COMMUNICATION: "communication in the phases",
                SENDS: "pipeline sends", ALL_REDUCE: "gradient all-reduce"}


def _us(seconds: float) -> float:
    return round(seconds * US_PER_S, 3)   # nanosecond resolution: the file stays deterministic and short


def chrome_trace(sim: Simulation) -> dict:
    """The JSON object of a Chrome trace of `sim` (simulated with its timeline)."""
    groups = sorted({*sim.stage_of.values(), *((iv.replica, iv.stage) for iv in sim.intervals)})
    pid = {g: n + 1 for n, g in enumerate(groups)}
    replicas = len({r for r, _ in groups})
    dies_of: dict[tuple[int, int], list] = {g: [] for g in groups}
    for die, g in sorted(sim.stage_of.items()):
        dies_of[g].append(die)
    helpers = sorted(d for d in sim.memory_timeline if d not in sim.stage_of)
    helper_pid = len(groups) + 1

    events: list[dict] = []
    for g in groups:
        r, i = g
        name = f"stage {i}" + (f", replica {r}" if replicas > 1 else "")
        events += [{"name": "process_name", "ph": "M", "pid": pid[g], "tid": 0, "args": {"name": name}},
                   {"name": "process_sort_index", "ph": "M", "pid": pid[g], "tid": 0, "args": {"sort_index": pid[g]}},
                   {"name": "process_labels", "ph": "M", "pid": pid[g], "tid": 0,
                    "args": {"labels": "dies " + " ".join(f"[{a},{b}]" for a, b in dies_of[g])}}]
        events += [{"name": "thread_name", "ph": "M", "pid": pid[g], "tid": tid, "args": {"name": text}}
                   for tid, text in THREAD_NAMES.items()]
    if helpers:
        events += [{"name": "process_name", "ph": "M", "pid": helper_pid, "tid": 0,
                    "args": {"name": "helper dies (offloaded checkpoints only)"}},
                   {"name": "process_sort_index", "ph": "M", "pid": helper_pid, "tid": 0,
                    "args": {"sort_index": helper_pid}}]

    spans = []
    for iv in sim.intervals:
        args = {"microbatch": iv.microbatch} if iv.microbatch >= 0 else {}
        if iv.chunk:
            args["chunk"] = iv.chunk
        spans.append((pid[(iv.replica, iv.stage)], PHASES, iv.start, iv.end, iv.kind, "phase", args))
    for cv in sim.comm_intervals:
        args = {"microbatch": cv.microbatch} if cv.microbatch >= 0 else {}
        if cv.where == "dp_allreduce":   # one all-reduce over every replica: shown on each replica's stage
            owners = [(r, cv.stage) for r in range(replicas) if (r, cv.stage) in pid]
            tid = ALL_REDUCE
        else:
            owners = [(cv.replica, cv.stage)]
            tid = COMMUNICATION if cv.where == "stage" else SENDS
        spans += [(pid[g], tid, cv.start, cv.end, cv.name, "communication", args) for g in owners]
    for p, tid, start, end, name, category, args in sorted(spans, key=lambda s: s[:5]):
        events.append({"name": name, "cat": category, "ph": "X", "ts": _us(start), "dur": _us(end - start),
                       "pid": p, "tid": tid, "args": args})

    for die in sorted(sim.memory_timeline):
        times, used = sim.memory_timeline[die]
        latest: dict[float, float] = {}
        for t, b in zip(times, used):   # several changes at one moment: the value after the last
            latest[_us(float(t))] = round(float(b) / 1e9, 9)
        owner = pid[sim.stage_of[die]] if die in sim.stage_of else helper_pid
        events += [{"name": f"DRAM die [{die[0]},{die[1]}]", "cat": "memory", "ph": "C", "ts": ts, "pid": owner,
                    "args": {"GB": gb}} for ts, gb in latest.items()]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"iteration_s": sim.iteration_s, "contention": sim.contention,
                          "die_capacity_gb": sim.die_capacity / 1e9}}


def write_trace(sim: Simulation, path: str | Path) -> Path:
    try:
        return write_text(path, json.dumps(chrome_trace(sim), separators=(",", ":")))
    except OSError as exc:
        raise InstanceError(f"cannot write the trace: {exc.strerror or exc}", str(path)) from None
