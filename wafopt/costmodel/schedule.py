"""The pipeline schedule: 1F1B (one forward, one backward) and its interleaved form.

With p stages of per-micro-batch times T_i and m micro-batches, the fill and drain pass every
stage once and the steady state runs m - 1 more micro-batches at the pace of the slowest stage:
    iteration = sum_i T_i + (m - 1) max_i T_i
(WATOS, Sec. II-B and Fig. 8a: warmup, steady and ending phases of 1F1B; Narayanan et al. 2021,
"Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", Sec. 2.2).
This is the one place the formula is computed from numbers; exact models state it as linear
constraints (t_max >= T_i) and point here.

Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2): each device holds v model chunks; chunk c
of device i is virtual stage c*p + i of a p*v-stage pipeline, and a micro-batch passes every
device v times. The order is Megatron-LM's `forward_backward_pipelining_with_interleaving`
(Megatron-Core, microbatch_group_size_per_vp_stage = p; needs m % p == 0). With chunk times
T_i / v the bubble shrinks by v:
    iteration = sum_i T_i / v + (m - 1/v) max_i T_i        (= (m + (p-1)/v) T for equal stages)
which is exact for equal stages and free sends but NOT a lower bound in general (a slow early
stage overlaps the later stages' fill); the certified lower bound is
    max_j ( sum_{i<j} T_i / v + m T_j )                    (`interleaved_lower_bound`).
`pipeline_finish` takes the longest path of the task graph itself.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def one_f_one_b(stage_times: Sequence[float] | np.ndarray, microbatches: int):
    """sum_i T_i + (m - 1) max_i T_i.

    `stage_times` is a sequence of per-micro-batch stage times (floats, or Fractions for exact
    arithmetic: the result has their type), or a numpy array whose last axis runs over stages (an
    array over the other axes is returned, e.g. one iteration time per candidate plan)."""
    if isinstance(stage_times, np.ndarray) and stage_times.ndim > 1:
        return stage_times.sum(axis=-1) + (microbatches - 1) * stage_times.max(axis=-1)
    times = list(stage_times)
    if not times:
        raise ValueError("a pipeline needs at least one stage time")
    return sum(times) + (microbatches - 1) * max(times)


def interleaved_iteration(stage_times: Sequence[float] | np.ndarray, microbatches: int, interleave: int):
    """sum_i T_i / v + (m - 1/v) max_i T_i, T_i = device i's time per micro-batch over its v chunks.

    `one_f_one_b` for v = 1; same input conventions. Equals max(pipeline_finish(...)) with chunk
    times T_i / v when all devices have equal chunk times and sends are free (whatever the
    forward/backward split). Otherwise it may exceed the task graph's longest path: use
    `interleaved_lower_bound` as a certified bound."""
    _check_interleave(interleave)
    if interleave == 1:
        return one_f_one_b(stage_times, microbatches)
    v, m = interleave, microbatches
    if isinstance(stage_times, np.ndarray) and stage_times.ndim > 1:
        return (stage_times.sum(axis=-1) + (m * v - 1) * stage_times.max(axis=-1)) / v
    times = list(stage_times)
    if not times:
        raise ValueError("a pipeline needs at least one stage time")
    return (sum(times) + (m * v - 1) * max(times)) / v   # Fractions stay exact


def interleaved_lower_bound(stage_times: Sequence[float] | np.ndarray, microbatches: int, interleave: int = 1):
    """max_j ( sum_{i<j} T_i / v + m T_j ): never more than max(pipeline_finish(...)) with chunk
    times T_i / v (any forward/backward split) and any nonnegative sends.

    Proof: device j's first task is F(j, chunk 0, micro-batch 0), after F(i, 0, 0) of every i < j;
    it then runs its m v chunk-tasks one at a time (m T_j in all); its last task is
    B(j, 0, m-1) (backward step mv-1, using m % p == 0), before B(i, 0, m-1) of every i < j.
    That path lasts sum_{i<j} T_i / v + m T_j; sends only lengthen it. For equal stages it is
    (m + (p-1)/v) T, the exact value; it equals `interleaved_iteration` whenever the last device
    is a slowest one. Same input conventions as `one_f_one_b` (Fractions stay exact)."""
    _check_interleave(interleave)
    v, m = interleave, microbatches
    if isinstance(stage_times, np.ndarray) and stage_times.ndim > 1:
        before = np.cumsum(stage_times, axis=-1) - stage_times
        return (before + m * v * stage_times).max(axis=-1) / v
    times = list(stage_times)
    if not times:
        raise ValueError("a pipeline needs at least one stage time")
    best, before = None, times[0] * 0
    for t in times:
        path = before + m * v * t
        best = path if best is None or path > best else best
        before += t
    return best / v if v > 1 else best


def inflight_microbatches(pp: int, index: int, m: int, interleave: int = 1) -> float:
    """Micro-batches whose activations stage `index` holds at its peak under 1F1B: min(pp - index, m);
    interleaved with v chunks per device, min(2 (pp - index - 1) + (v - 1) pp + 1, m v) chunks of
    1/v of the stage each (Megatron-LM's warm-up; Korthikanti et al. 2022, Sec. 4.2.3)."""
    if interleave == 1:
        return min(pp - index, m)
    return min(2 * (pp - index - 1) + (interleave - 1) * pp + 1, m * interleave) / interleave


def _check_interleave(interleave: int) -> None:
    if interleave < 1:
        raise ValueError(f"interleave must be at least 1, got {interleave}")


def pipeline_order(stage: int, stages: int, microbatches: int, interleave: int = 1) -> list[tuple[str, int, int]]:
    """The order in which device `stage` runs its tasks: (kind "F"/"B", chunk, micro-batch).

    v = 1: Megatron's 1F1B, warm-up forwards F_0..F_{w-1} with w = min(p-1-i, m), steady pairs
    (F_{w+j}, B_j), cool-down backwards. v > 1: Megatron-LM's interleaved order over m v
    chunk-tasks of each kind: forward step f is chunk (f // p) % v of micro-batch
    (f // (p v)) p + f % p; backward step j is chunk v-1-((j // p) % v) of micro-batch
    (j // (p v)) p + j % p; w = min(2 (p-i-1) + (v-1) p, m v) warm-up forwards, then pairs
    (forward w+j, backward j), then the remaining backwards. (Older Megatron versions ran all
    forwards first when m == p; Megatron-Core uses the min above.)"""
    p, m, v = stages, microbatches, interleave
    _check_interleave(v)
    if not 0 <= stage < p:
        raise ValueError(f"stage {stage} is not one of the {p} stages")
    if v > 1 and m % p:
        raise ValueError(f"interleaved 1F1B (interleave {v}) needs the micro-batches ({m}) to be a "
                         f"multiple of the pipeline stages ({p}), as in Megatron-LM")
    total = m * v
    warmup = min(p - 1 - stage, m) if v == 1 else min(2 * (p - stage - 1) + (v - 1) * p, total)

    def forward(f: int) -> tuple[str, int, int]:
        return ("F", (f // p) % v, (f // (p * v)) * p + f % p)

    def backward(j: int) -> tuple[str, int, int]:
        return ("B", v - 1 - (j // p) % v, (j // (p * v)) * p + j % p)

    order = [forward(f) for f in range(warmup)]
    for j in range(total - warmup):
        order += [forward(warmup + j), backward(j)]
    return order + [backward(j) for j in range(total - warmup, total)]


def one_f_one_b_order(stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """Megatron's 1F1B order of one stage: warm-up forwards F_0..F_{w-1} with w = min(p-1-i, m),
    steady pairs (F_{w+j}, B_j), cool-down backwards (`pipeline_order` with v = 1)."""
    return [(kind, k) for kind, _, k in pipeline_order(stage, stages, microbatches)]


def pipeline_finish(forward: Sequence[float], backward: Sequence[float], send_forward: Sequence[float],
                    send_backward: Sequence[float], microbatches: int, interleave: int = 1) -> list[float]:
    """When each device ends its last backward: the longest path of the (interleaved) 1F1B task graph.

    Device i runs its tasks one at a time in `pipeline_order`; forward[i] / backward[i] are the
    durations of one chunk's forward / backward there (the whole stage for v = 1). Chunk c of
    device i is virtual stage c p + i. F(i, c, k) also waits for the previous virtual stage's
    forward of micro-batch k plus its send: F(i-1, c, k) + send_forward[i-1], or for i = 0, c > 0
    F(p-1, c-1, k) + send_forward[p-1] (the wrap-around send, used only when v > 1). B(i, c, k)
    waits for B(i+1, c, k) + send_backward[i+1], or for i = p-1, c < v-1 B(0, c+1, k) +
    send_backward[0]; the last virtual stage's backward waits for its own forward. Sends do not
    occupy a device. With equal stage times and free sends the result is
    sum_i T_i / v + (m - 1/v) max_i T_i (`interleaved_iteration`).
    Times may be numpy arrays of one shape (one pipeline per entry: the finishes are arrays too).
    """
    p, v = len(forward), interleave
    zero = forward[0] * 0   # keeps exact inputs (Fractions) exact
    later = np.maximum if isinstance(zero, np.ndarray) else max
    orders = [pipeline_order(i, p, microbatches, v) for i in range(p)]
    done: dict[tuple[str, int, int, int], float] = {}
    clock = [zero] * p
    position = [0] * p
    left = sum(len(o) for o in orders)
    while left:
        progressed = False
        for i in range(p):
            while position[i] < len(orders[i]):
                kind, c, k = orders[i][position[i]]
                if kind == "F":
                    if i > 0:
                        ready, send = done.get(("F", i - 1, c, k)), send_forward[i - 1]
                    elif c > 0:
                        ready, send = done.get(("F", p - 1, c - 1, k)), send_forward[p - 1]
                    else:
                        ready, send = zero, zero
                    duration = forward[i]
                else:
                    if i < p - 1:
                        ready, send = done.get(("B", i + 1, c, k)), send_backward[i + 1]
                    elif c < v - 1:
                        ready, send = done.get(("B", 0, c + 1, k)), send_backward[0]
                    else:
                        ready, send = done[("F", i, c, k)], zero
                    duration = backward[i]
                if ready is None:
                    break
                clock[i] = later(clock[i], ready + send) + duration
                done[(kind, i, c, k)] = clock[i]
                position[i] += 1
                left -= 1
                progressed = True
        if not progressed:   # cannot happen for these orders; guards a future edit
            raise RuntimeError("the pipeline task graph has a cycle")
    return clock


def one_f_one_b_finish(forward: Sequence[float], backward: Sequence[float], send_forward: Sequence[float],
                       send_backward: Sequence[float], microbatches: int) -> list[float]:
    """When each stage ends its last backward: the longest path of the 1F1B task graph.

    Stage i runs its tasks one at a time in `one_f_one_b_order`; forward F(i, k) lasts forward[i]
    and also waits for F(i-1, k) plus send_forward[i-1] (the activations sent from stage i-1);
    backward B(i, k) lasts backward[i] and, below the last stage, waits for B(i+1, k) plus
    send_backward[i+1] (the gradients sent from stage i+1). Sends do not occupy a stage. With
    equal stage times and free sends this is sum_i T_i + (m - 1) max_i T_i (`one_f_one_b`).
    `pipeline_finish` with v = 1.
    """
    return pipeline_finish(forward, backward, send_forward, send_backward, microbatches, 1)
