"""The pipeline schedule: iteration time of 1F1B (one forward, one backward) from stage times.

With p stages of per-micro-batch times T_i and m micro-batches, the fill and drain pass every
stage once and the steady state runs m - 1 more micro-batches at the pace of the slowest stage:
    iteration = sum_i T_i + (m - 1) max_i T_i
(WATOS, Sec. II-B and Fig. 8a: warmup, steady and ending phases of 1F1B; Narayanan et al. 2021,
"Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", Sec. 2.2).
This is the one place the formula is computed from numbers; exact models state it as linear
constraints (t_max >= T_i) and point here.
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


def one_f_one_b_order(stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """Megatron's 1F1B order of one stage: warm-up forwards F_0..F_{w-1} with w = min(p-1-i, m),
    steady pairs (F_{w+j}, B_j), cool-down backwards."""
    warmup = min(stages - 1 - stage, microbatches)
    order = [("F", k) for k in range(warmup)]
    for j in range(microbatches - warmup):
        order += [("F", warmup + j), ("B", j)]
    return order + [("B", k) for k in range(microbatches - warmup, microbatches)]


def one_f_one_b_finish(forward: Sequence[float], backward: Sequence[float], send_forward: Sequence[float],
                       send_backward: Sequence[float], microbatches: int) -> list[float]:
    """When each stage ends its last backward: the longest path of the 1F1B task graph.

    Stage i runs its tasks one at a time in `one_f_one_b_order`; forward F(i, k) lasts forward[i]
    and also waits for F(i-1, k) plus send_forward[i-1] (the activations sent from stage i-1);
    backward B(i, k) lasts backward[i] and, below the last stage, waits for B(i+1, k) plus
    send_backward[i+1] (the gradients sent from stage i+1). Sends do not occupy a stage. With
    equal stage times and free sends this is sum_i T_i + (m - 1) max_i T_i (`one_f_one_b`).
    """
    p = len(forward)
    zero = forward[0] * 0   # keeps exact inputs (Fractions) exact
    orders = [one_f_one_b_order(i, p, microbatches) for i in range(p)]
    done: dict[tuple[str, int, int], float] = {}
    clock = [zero] * p
    position = [0] * p
    left = sum(len(o) for o in orders)
    while left:
        progressed = False
        for i in range(p):
            while position[i] < len(orders[i]):
                kind, k = orders[i][position[i]]
                if kind == "F":
                    ready = zero if i == 0 else done.get(("F", i - 1, k))
                    if ready is None:
                        break
                    ready += send_forward[i - 1] if i > 0 else zero
                    duration = forward[i]
                else:
                    ready = done[("F", i, k)] if i == p - 1 else done.get(("B", i + 1, k))
                    if ready is None:
                        break
                    ready += send_backward[i + 1] if i < p - 1 else zero
                    duration = backward[i]
                clock[i] = max(clock[i], ready) + duration
                done[(kind, i, k)] = clock[i]
                position[i] += 1
                left -= 1
                progressed = True
        if not progressed:   # cannot happen for the 1F1B order; guards a future edit
            raise RuntimeError("the 1F1B task graph has a cycle")
    return clock
