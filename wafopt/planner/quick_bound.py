"""The quick tier of the layout bound: from per-layer compute alone, without a workload.

The schedule bound (full_bound, step 1) with h_k of every stage, each stage's task times at least
its layers' compute (step 2 without recomputation, embedding and LM head), at the split that
makes the largest h_k least; infeasible only when the choice cannot hold the model state at all.
Interleaved 1F1B has no h_k: its equal stages give m (layers / pp) (f + b) (full_bound, step 7).
"""

from __future__ import annotations

import heapq

from wafopt.costmodel.scenario import Choice, Scenario
from wafopt.costmodel.stage_numbers import layer_compute, least_stage_send_s
from wafopt.planner.layout_data import SAFETY, LayoutBound, forward_counts, misfit
from wafopt.planner.space import choice_size


def quick_split(layers: int, slopes) -> list[int]:
    """Layers per stage minimising max_k slope_k n_k (each n_k >= 1): one layer at a time to the
    stage whose value grows least (exact for increasing functions of one stage each)."""
    n = [1] * len(slopes)
    heap = [(2 * s, k) for k, s in enumerate(slopes)]
    heapq.heapify(heap)
    for _ in range(layers - len(slopes)):
        _, k = heapq.heappop(heap)
        n[k] += 1
        heapq.heappush(heap, ((n[k] + 1) * slopes[k], k))
    return n


def quick_bound(scenario: Scenario, choice: Choice) -> LayoutBound:
    """The quick tier's bound of a choice (see the module docstring)."""
    why = misfit(scenario, choice)
    if why:
        return LayoutBound(choice, None, why, tier="quick")
    par = choice.parallel
    size = choice_size(scenario, choice)
    tr = scenario.training_for(Choice(micro_batch=size))
    f, b = layer_compute(scenario, par.tp, size)
    m, p = tr.global_batch // (tr.micro_batch * par.dp), par.pp
    # the pipeline sends on the path of the last stage's g_k or of any h_k: every boundary twice
    sends = 2 * (p - 1) * least_stage_send_s(scenario, par.tp, size)
    if par.interleave > 1:   # equal stages, g_k of the last one: m T_{p-1} >= m L / p (f + b)
        return LayoutBound(choice, (m * scenario.llm.layers / p * (f + b) + sends) * (1 - SAFETY), tier="quick")
    # h_k = (every layer's compute) + n_k ((m - 1) b + (c_k - 1) f): only stage k's layers vary
    slopes = [(m - 1) * b + (c - 1) * f for c in forward_counts(p, m)]
    n = quick_split(scenario.llm.layers, slopes)
    total = scenario.llm.layers * (f + b)
    value = total + max(s * k for s, k in zip(slopes, n)) + sends
    return LayoutBound(choice, value * (1 - SAFETY), tier="quick")
