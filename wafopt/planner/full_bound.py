"""The full tier of the layout bound: the Lagrangian over schedule, task times and pooled memory,
its least value over every layer split by a DP over the stages.

The bound of a layout holds for every plan with it, whatever its layer split, placement, schemes,
recomputation, offloading and routes:

1. Schedule (the evaluator's 1F1B task graph). Stage k runs its 2m tasks one at a time; its first
   forward starts after the forwards of the stages before it, and after its last backward the
   last micro-batch still goes back through the stages before it. So, with F_j and B_j the
   forward and backward task times of stage j, the iteration is at least, for every k,
     g_k = sum_{j<k} (F_j + B_j) + m (F_k + B_k) + O,
     h_k = sum_{j!=k} (F_j + B_j) + m B_k + n_k F_k + O,   n_k = max(1, m - min(p - 1 - k, m)),
   (h_k: micro-batch 0 goes through the later stages and back before stage k's first backward,
   while stage k has run at most its warm-up forwards), O the optimizer step of stage 0. Their
   paths cross pipeline sends, each at least s (one hop, layout_data.send_s): g_k 2k of them, h_k
   2(p - 1) (send_crossings). For weights w >= 0 on these 2p inequalities (sum 1), the iteration
   is at least their weighted sum, O + sends + sum_j (alphaF_j F_j + alphaB_j B_j).
2. Task times. F_j >= Fc_js and B_j >= Bc_js + sum_u r_jsu x_ju for the stage's scheme s: the
   forward and backward compute plus the least time of their collectives on any placement
   (wafopt.costmodel.network.least_collective_s) and the compute of
   regenerating the x_ju layers of unit u it recomputes. Full recomputation counts as recomputing
   every unit in every layer, its per-unit times scaled down when it is the cheaper way.
3. Memory. Offloading moves bytes between dies, so the dies of the stages together fit the pooled
   DRAM of all healthy dies: copies * sum_j M_j <= H * C (copies = tp * dp), with
   M_j >= M0_js - sum_u (a_jsu x_ju - b_jsu [x_ju > 0]) (M0: memory without recomputation; b: bytes
   of the unit per layer and micro-batch, a = b times the stage's in-flight micro-batches; a unit
   dropped in some layer is regenerated for one layer at a time in the backward, the evaluator's
   transient memory). A die keeps at least its state, gradients of one operator and buffers,
   which offloading never moves: a stage that cannot is no arc of any split (layout_data).
4. Lagrangian. With a multiplier mu >= 0 on (3), relaxing the choice of scheme and x:
   LB(w, mu) = O + sum_j min_s [alphaF_j Fc_js + alphaB_j Bc_js + mu copies M0_js
                  + sum_u min(0, L_j (alphaB_j r_jsu - mu copies a_jsu) + mu copies b_jsu)] - mu H C
   (over x_ju in 0..L_j the unit's term is least at 0 or at L_j).
   Any (w, mu) gives a valid bound (weak duality). A forced policy (training.recompute:
   selective | full) fixes x: the min(0, .) becomes the policy's units (LayoutData.forced) in
   every layer.
5. Every split. For fixed (w, mu), LB is O - mu H C plus one term per stage that depends only on
   the contiguous layers the stage holds (role, layer count and kinds). The least LB over all
   splits is a shortest path over the layer boundaries 0..L (stage j: an arc a -> b), found
   exactly by a DP over the stages; that least value is the certified bound. The planner picks
   (w, mu) by a cheap rule for every layout (cheap_weights, best_mu) and by Kelley's cutting planes
   (lp_bound) on this concave function where the bound matters; the certificate stores (w, mu) and `wafopt certify`
   recomputes the least LB(w, mu) from the scenario alone.

6. The split's worst inequality (inequality_bound): the least over splits of max_k (g_k, h_k),
   stages at their least compute over the schemes without recomputation, O the split's own first
   stage's optimizer step; it binds where memory does not and no fixed weighting is tight.
7. Interleaved 1F1B (v model chunks per stage, equal stages): the proven bound of
   wafopt.costmodel.schedule.interleaved_lower_bound, g_k = sum_{j<k} T_j / v + m T_k + O, takes
   the place of step 1 (no h_k); stages hold their interleaved in-flight micro-batches in step 3.
8. The task graph itself (task_graph_bound): the evaluator's iteration is the longest path of the
   (interleaved) 1F1B task graph, which never shortens as a task or a send lengthens. With every
   stage at its least forward and backward times, every send at its least and the first stage's
   own optimizer step after its last backward, the least longest path over every split bounds
   every plan. It is exact in the schedule (the fill and drain that g_k and h_k approximate) and
   runs where the splits are few enough to enumerate (MAX_SPLIT_TASKS), all of them at once as
   arrays. schedule_bound is the larger of steps 6 and 8.

Infeasible (layout_data): under every split, some stage's state exceeds a die's DRAM under every
scheme, or even full recomputation does not fit the pooled DRAM, or the workload cannot be built.
"""

from __future__ import annotations

import numpy as np

from wafopt.costmodel.scenario import Choice, Scenario
from wafopt.costmodel.schedule import pipeline_finish
from wafopt.planner.layout_data import (
    SAFETY,
    LayoutBound,
    LayoutData,
    at_split,
    forward_counts,
    layout_data,
    least_path,
    send_crossings,
)
from wafopt.planner.quick_bound import quick_bound

MAX_SPLIT_TASKS = 400_000   # splits x stages x chunks x micro-batches the task-graph bound (step 8) runs
MU_STEPS = 30        # golden-section steps of the multiplier search (0.618^30: 6e-7 of its range)


def coefficients(w: np.ndarray, p: int, m: int, v: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(alphaF, alphaB): the weight of each stage's F_j and B_j in sum_k wg_k g_k + wh_k h_k.
    Interleaved (v > 1): g_k = sum_{j<k} T_j / v + m T_k (step 7) and no h_k (their weights count
    nothing, a valid bound since every inequality's right-hand side is nonnegative)."""
    wg, wh = w[:p], w[p:]
    G = m * wg + np.concatenate([np.cumsum(wg[::-1])[::-1][1:], [0.0]]) / v   # m wg_j + sum_{k>j} wg_k / v
    if v > 1:
        return G, G
    Wh = wh.sum()
    return G + Wh + (forward_counts(p, m) - 1) * wh, G + Wh + (m - 1) * wh


def weighted_sends(d: LayoutData, w: np.ndarray) -> float:
    """The pipeline sends on the weighted inequalities' paths (step 1), each at its least time."""
    g, h = send_crossings(d.layout.pp, d.layout.interleave)
    return float(d.send_s * (w @ np.concatenate([g, h])))


def normalized_weights(d: LayoutData, w) -> np.ndarray:
    """The weights as an array summing to 1 (ValueError when they cannot be: a certificate's
    weights are checked here)."""
    w = np.asarray(w, dtype=float)
    if w.shape != (2 * d.layout.pp,) or not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
        raise ValueError(f"weights must be {2 * d.layout.pp} non-negative numbers, not all zero")
    return w / w.sum()


def arc_terms(d: LayoutData, w: np.ndarray, mu: float) -> tuple[np.ndarray, float]:
    """The (p, C) term of LB (module docstring, step 4) of every class on every stage, and a bound
    on the terms' magnitude along any split."""
    aF, aB = coefficients(w, d.layout.pp, d.m, d.layout.interleave)
    inf = d.inflight[:, None, None]
    gain = aB[:, None, None, None] * d.r[None] - mu * d.copies * inf[..., None] * d.ub[None]   # per layer
    # dropping a unit in every layer of the class, its one regenerated layer held in the backward
    gain = d.n[None, :, None, None] * gain + mu * d.copies * d.ub[None]
    # the least over dropping it there or nowhere; a forced policy fixes which
    gain = (np.minimum(0.0, gain) if d.forced is None else gain * d.forced).sum(axis=3)   # (p, C, S)
    memory = mu * d.copies * (d.fixed[None] + inf * d.kept[None])
    compute = aF[:, None, None] * d.Fc[None] + aB[:, None, None] * d.Bc[None]
    values = (compute + memory + gain).min(axis=2)
    # O, stage 0's gradient reduction and optimizer step, ends every inequality (weights sum to 1):
    # it is the split's own first stage's, so it goes with stage 0's arc
    values[0] += d.class_optimizer
    magnitude = float((compute + np.abs(memory) + np.abs(gain)).max(axis=(1, 2)).sum() + d.class_optimizer.max())
    return values, magnitude


def lagrangian(d: LayoutData, w, mu: float, with_split: bool = False):
    """LB(w, mu) (module docstring, step 4) at the split that makes it least, lowered by its
    rounding margin; with_split: (value, that split)."""
    w = normalized_weights(d, w)
    mu = max(0.0, float(mu))
    values, magnitude = arc_terms(d, w, mu)
    least, split = least_path(d, values)
    sends = weighted_sends(d, w)
    value = sends + least - mu * d.cap
    value = float(value - SAFETY * (sends + magnitude + mu * d.cap))
    return (value, split) if with_split else value


def mu_high(d: LayoutData, aB) -> float:
    """The multiplier above which every unit is recomputed in every layer (a larger one only
    charges memory)."""
    ratios = []
    for j, (_, _, used) in enumerate(d.arcs):
        n, ub = d.n[used][:, None, None], d.ub[used]
        freed = n * d.inflight[j] - 1.0            # layers' worth of a unit dropping it everywhere frees
        pays = (ub > 0) & (freed > 0)
        ratios.append((aB[j] * d.r[used] * n)[pays] / (d.copies * ub * freed)[pays])
    ratios = np.concatenate(ratios)
    return float(ratios.max()) if ratios.size else 0.0


def best_mu(d: LayoutData, w) -> tuple[float, float]:
    """(LB, mu) with mu maximizing LB(w, .) (concave: a least over splits of concave functions) by
    golden-section search."""
    _, aB = coefficients(normalized_weights(d, w), d.layout.pp, d.m, d.layout.interleave)
    hi = mu_high(d, aB) * 1.01
    lo = 0.0
    best = (lagrangian(d, w, 0.0), 0.0)
    if hi <= 0:
        return best
    phi = (np.sqrt(5) - 1) / 2
    x1, x2 = hi - phi * (hi - lo), lo + phi * (hi - lo)
    f1, f2 = lagrangian(d, w, x1), lagrangian(d, w, x2)
    for _ in range(MU_STEPS):
        if f1 < f2:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + phi * (hi - lo)
            f2 = lagrangian(d, w, x2)
        else:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - phi * (hi - lo)
            f1 = lagrangian(d, w, x1)
    for value, mu in ((f1, x1), (f2, x2)):
        if value > best[0]:
            best = (value, mu)
    return best


def cheap_weights(d: LayoutData) -> list[np.ndarray]:
    """Weights tried for every layout, from the balanced split: the inequality g_k or h_k that is
    largest without recomputation, h of the last stage, and weights on every h_k that make a
    layer cost the same on every stage (so that no split escapes them). Interleaved: the largest
    g_k and the last stage's (the split is fixed, so nothing escapes)."""
    p, m, v = d.layout.pp, d.m, d.layout.interleave
    s = at_split(d, d.balanced)
    F, B = s.Fc.min(axis=1), s.Bc.min(axis=1)
    T = F + B
    prefix = np.concatenate([[0.0], np.cumsum(T)[:-1]])
    g_sends, h_sends = send_crossings(p, v)
    g = prefix / v + m * T + d.send_s * g_sends
    h = T.sum() - T + m * B + forward_counts(p, m) * F + d.send_s * h_sends
    out = []
    largest = int(np.argmax(g)) if v > 1 else int(np.argmax(np.concatenate([g, h])))
    for k in dict.fromkeys([largest, p - 1 if v > 1 else 2 * p - 1]):
        w = np.zeros(2 * p)
        w[k] = 1.0
        out.append(w)
    if p > 1 and v == 1:   # h_k grows by slope_k per layer of stage k: weights 1 / slope_k level them
        slope = ((m - 1) * B + (forward_counts(p, m) - 1) * F) / s.L
        w = np.concatenate([np.zeros(p), 1.0 / np.maximum(slope, 1e-300)])
        out.append(w / w.sum())
    return out


def _fits_below(d: LayoutData, least: tuple, tau: float) -> bool:
    """Whether some split meets, on every stage k, O_0 + g_k = O_0 + sum_{j<k} T_j + m T_k + 2k s
    <= tau and O + h_k >= O + S + (m - 1) B_k + (n_k - 1) F_k + 2(p - 1) s <= tau (O_0: the
    optimizer step of the split's first stage, which follows the pipeline's last task; O the
    least one, S the least total of the stage times over all splits, s the least send). A DP
    over the stages keeps, per layer boundary, the least O_0 plus the stages and sends before it
    (less only makes the later inequalities easier)."""
    T, F, B, total = least
    L, m, v = d.layers, d.m, d.layout.interleave
    counts = forward_counts(d.layout.pp, m)
    _, h_sends = send_crossings(d.layout.pp, v)
    prefix = np.full(L + 1, np.inf)   # O_0 + sum_{j<k} (T_j / v + 2 s) (interleaved: step 7, no h_k)
    prefix[0] = 0.0
    for j, (starts, cls, _) in enumerate(d.arcs):
        drains = d.optimizer + total + d.send_s * h_sends[j] + (m - 1) * B + (counts[j] - 1) * F <= tau
        drained = np.append(drains | (v > 1), False)[cls]
        t = np.append(T, np.inf)[cls]                                   # (starts, L + 1)
        before = prefix[starts][:, None]
        if j == 0:
            before = before + np.append(d.class_optimizer, np.inf)[cls]
        cand = np.where(drained & (before + m * t <= tau), before + t / v + 2 * d.send_s, np.inf)
        prefix = cand.min(axis=0)
    return bool(np.isfinite(prefix[L]))


def schedule_bound(d: LayoutData) -> float:
    """What binds where memory does not (steps 6 and 8): the larger of the split's worst
    inequality and the task graph's longest path, each the least over every split."""
    return max(inequality_bound(d), task_graph_bound(d))


def inequality_bound(d: LayoutData) -> float:
    """The least over splits of max_k (g_k, h_k) plus the optimizer step, every stage at its least
    compute and collectives over the schemes (module docstring, step 1, without the Lagrangian:
    recomputation only adds time; h_k with the least total over splits). The Lagrangian weighs the inequalities
    before choosing the split; this takes the split's worst one after, which is what binds when
    memory does not. Bisection on the threshold: the bound is the largest threshold no split
    meets, lowered by its rounding margin."""
    F, B = d.Fc.min(axis=1), d.Bc.min(axis=1)
    T = (d.Fc + d.Bc).min(axis=1)
    total = least_path(d, [T] * d.layout.pp)[0]
    if not np.isfinite(total):
        return 0.0
    least = (T, F, B, total)
    lo, hi = 0.0, float(d.m * (total + T.max()) + d.class_optimizer.max())   # every split meets it
    if not _fits_below(d, least, hi):
        return 0.0
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if _fits_below(d, least, mid):
            hi = mid
        else:
            lo = mid
    return float(lo - SAFETY * hi)


def task_graph_bound(d: LayoutData) -> float:
    """Step 8: the least over every split of the (interleaved) 1F1B task graph's longest path
    (wafopt.costmodel.schedule.pipeline_finish) with each stage's tasks at their least times
    and every send at its least, the first stage's own optimizer step after its last backward; 0
    where the splits number more than MAX_SPLIT_TASKS allows. The longest path never decreases as a
    task or send lengthens, so no plan with the split runs faster."""
    p, m, v = d.layout.pp, d.m, d.layout.interleave   # legal: m a multiple of p where v > 1 (rules)
    classes = every_split(d, MAX_SPLIT_TASKS // (p * v * m))
    if classes is None:
        return 0.0
    F, B = d.Fc.min(axis=1), d.Bc.min(axis=1)
    sends = [np.full(len(classes), d.send_s)] * p
    ends = pipeline_finish([F[classes[:, j]] / v for j in range(p)], [B[classes[:, j]] / v for j in range(p)],
                           sends, sends, m, v)
    value = np.maximum(ends[0] + d.class_optimizer[classes[:, 0]], np.max(ends, axis=0))
    least = float(value.min())
    return least - SAFETY * least


def every_split(d: LayoutData, most: int) -> np.ndarray | None:
    """The class of each stage under every split (splits, p), or None when there are more than
    `most` (counted first, by the completions of each boundary)."""
    C, L = len(d.n), d.layers
    completions = [np.zeros(L + 1) for _ in range(len(d.arcs) + 1)]   # from boundary b, stages j.. on
    completions[-1][L] = 1.0
    for j in reversed(range(len(d.arcs))):
        starts, cls, _ = d.arcs[j]
        completions[j][starts] = ((cls < C) * completions[j + 1]).sum(axis=1)
    if not 0 < completions[0][0] <= most:
        return None
    at, classes = np.zeros(1, dtype=int), np.zeros((1, 0), dtype=int)
    for j, (starts, cls, _) in enumerate(d.arcs):
        row = np.full(L + 1, -1)
        row[starts] = np.arange(len(starts))
        arcs = cls[row[at]]                                               # (partial splits, L + 1)
        path, at = np.nonzero((arcs < C) & (completions[j + 1] > 0))
        classes = np.column_stack([classes[path], arcs[path, at]])
    return classes


def layout_bound(scenario: Scenario, choice: Choice) -> LayoutBound:
    """The full certified bound of a choice (lp_bound.refine tightens it with the LP's weights)."""
    d = layout_data(scenario, choice)
    if isinstance(d, str):
        return LayoutBound(choice, None, d)
    best = None
    for w in cheap_weights(d):
        value, mu = best_mu(d, w)
        if best is None or value > best[0]:
            best = (value, w, mu)
    floor = max(quick_bound(scenario, choice).value, schedule_bound(d))
    return LayoutBound(choice, max(best[0], floor), "", [float(v) for v in best[1]], best[2], False, d)
