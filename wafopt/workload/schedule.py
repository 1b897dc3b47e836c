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

    `stage_times` is a sequence of per-micro-batch stage times (a float is returned), or a numpy
    array whose last axis runs over stages (an array over the other axes is returned, e.g. one
    iteration time per candidate plan)."""
    if isinstance(stage_times, np.ndarray) and stage_times.ndim > 1:
        return stage_times.sum(axis=-1) + (microbatches - 1) * stage_times.max(axis=-1)
    times = [float(t) for t in stage_times]
    if not times:
        raise ValueError("a pipeline needs at least one stage time")
    return sum(times) + (microbatches - 1) * max(times)
