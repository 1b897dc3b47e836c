"""The numbers the bound of one layout needs, over every contiguous layer split, and the bound's
result type.

A split is a path of `pp` arcs over the layer boundaries 0..layers; stage j's arc a -> b holds the
layers in between. Every tier of the bound (quick_bound, full_bound, lp_bound) minimises over
these paths, so no split escapes it. The stage numbers come from the cost model
(wafopt.costmodel.stage_numbers).

Floats: a bound is computed in floating point and lowered by SAFETY times the sum of the absolute
values of its terms, far above the rounding error of these sums (n * 2^-53 for n < 10^6 terms).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from wafopt.core.errors import InstanceError
from wafopt.costmodel.scenario import Choice, Parallel, Scenario
from wafopt.costmodel.schedule import inflight_microbatches
from wafopt.costmodel.stage_numbers import (
    kind_prefix,
    least_stage_send_s,
    least_tail_s,
    scheme_settings,
    stage_numbers,
    stage_role,
    state_floor,
)
from wafopt.planner.space import choice_key, choice_size

SAFETY = 1e-9        # relative margin (of the terms' magnitude) that makes the float sum a lower bound
MEMORY_SLACK = 2e-9  # twice the evaluator's relative slack on a die's DRAM (float sums)
GB = 1e9


@dataclass
class LayoutData:
    """The numbers of one layout the bound needs (per die, per micro-batch), for every split.

    Stage j's arc from boundary `starts[j][a]` to boundary b holds the layers in between, whose
    numbers are those of its class `cls[j][a, b]` (role first/middle/last and layer kinds;
    in-flight counts are per stage; the class index C, one past the last, marks an impossible arc).
    """
    layout: Parallel
    variants: tuple[tuple, ...]   # the S columns: (tensor-parallel scheme, sequence parallelism or None)
    m: int
    copies: int
    cap: float            # H * C (with the evaluator's slack)
    optimizer: float      # O: the least gradient reduction + optimizer step of a first stage
    Fc: np.ndarray        # (C, S) forward compute seconds of a class
    Bc: np.ndarray        # (C, S) backward compute seconds
    fixed: np.ndarray     # (C, S) state + gradients of one operator + buffers: never offloaded
    kept: np.ndarray      # (C, S) activations of one micro-batch without recomputation
    ub: np.ndarray        # (C, S, U) bytes of a unit per layer and micro-batch (0: cannot be dropped)
    r: np.ndarray         # (C, S, U) seconds per recomputed layer of a unit
    n: np.ndarray         # (C,) layers
    inflight: np.ndarray  # (p,) micro-batches a stage holds
    arcs: list            # per stage: (starts, cls, the classes it uses)
    layers: int
    balanced: list        # the split minimising the busiest stage's compute (ties: the first found)
    class_optimizer: np.ndarray | None = None   # (C,) O of a class as the first stage (least over schemes)
    send_s: float = 0.0   # the least pipeline send between two stages, one way, per micro-batch
    forced: np.ndarray | None = None   # (U,) 1 for the units every layer recomputes when the scenario
                                       # forces a policy (training.recompute: selective | full), else None


@dataclass
class LayoutBound:
    """The certified lower bound of every plan with one choice of layout and micro-batch size."""
    choice: Choice               # layout and micro-batch size (None: the scenario's only size)
    value: float | None          # the certified lower bound, None when infeasible
    reason: str = ""             # why the layout is infeasible
    w: list | None = None        # the weights and multiplier that prove `value`
    mu: float = 0.0
    refined: bool = False        # (w, mu) from the LP relaxation
    data: LayoutData | None = field(default=None, repr=False)
    tier: str = "full"           # "quick": from per-layer compute alone; "full": with memory

    @property
    def layout(self) -> Parallel:
        return self.choice.parallel

    @property
    def feasible(self) -> bool:
        return self.value is not None

    def key(self) -> tuple:
        """(tp, pp, dp), and the micro-batch size where the scenario allows several."""
        return choice_key(self.choice)


def misfit(scenario: Scenario, choice: Choice) -> str | None:
    """Why no plan with this choice can exist whatever its split (too many dies, a batch that does
    not divide, model state over a die's DRAM), or None."""
    par = choice.parallel
    healthy = len(scenario.mesh().healthy_dies)
    capacity = scenario.wafer.dram_capacity
    tr = scenario.training_for(Choice(micro_batch=choice_size(scenario, choice)))
    if par.dies > healthy:
        return f"needs {par.dies} dies, {healthy} healthy"
    if par.pp > scenario.llm.layers or tr.global_batch % (tr.micro_batch * par.dp):
        return "cannot be modelled: pp above the layers or batch not divisible"
    if state_floor(scenario, par) > capacity * (1 + MEMORY_SLACK):
        return (f"model state at least {state_floor(scenario, par) / GB:.1f} GB per die, more than the die's "
                f"{capacity / GB:.1f} GB")
    return None


def send_crossings(p: int, v: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Pipeline sends on the paths of g_k and h_k (full_bound, step 1): g_k crosses the k
    boundaries before stage k twice (the first micro-batch in, the last one back), h_k every
    boundary twice (micro-batch 0 goes through every stage and back). Interleaved: g_k as plain
    1F1B (the first chunk in, the last backward of chunk 0 back), no h_k."""
    g = 2.0 * np.arange(p)
    h = np.full(p, 2.0 * (p - 1)) if v == 1 else np.zeros(p)
    return g, h


def forward_counts(p: int, m: int) -> np.ndarray:
    """n_k = max(1, m - min(p - 1 - k, m)): forwards stage k still runs from its first backward on
    (plus the first one)."""
    return np.array([max(1, m - min(p - 1 - k, m)) for k in range(p)], dtype=float)


def least_path(d: LayoutData, values: list, reduce=np.add) -> tuple[float, list[int]]:
    """The least path value over all splits, `values[j]` the (C,) value of each class on stage j
    (reduce: add for sums, maximum for the busiest stage), and the layers per stage of one least
    split (ties: the earliest boundaries)."""
    L = d.layers
    best = np.full(L + 1, np.inf)
    best[0] = 0.0 if reduce is np.add else -np.inf
    back = []
    for (starts, cls, _), vals in zip(d.arcs, values):
        table = np.append(np.asarray(vals, dtype=float), np.inf)[cls]      # (starts, L + 1)
        cand = reduce(best[starts][:, None], table)
        k = np.argmin(cand, axis=0)
        best = cand[k, np.arange(L + 1)]
        back.append(starts[k])
    split, at = [], L
    if np.isfinite(best[L]):
        for came in reversed(back):
            split.append(at - int(came[at]))
            at = int(came[at])
        split.reverse()
    return float(best[L]), split


def layout_data(scenario: Scenario, choice: Choice) -> LayoutData | str:
    """The bound's numbers of a choice (layout and micro-batch size) over every layer split, or
    why no plan with it fits whatever its split."""
    why = misfit(scenario, choice)
    if why:
        return why
    par = choice.parallel
    healthy = len(scenario.mesh().healthy_dies)
    capacity = scenario.wafer.dram_capacity
    size = choice_size(scenario, choice)
    tr = scenario.training_for(Choice(micro_batch=size))
    L, p = scenario.llm.layers, par.pp
    schemes = scenario.tp_schemes(par.tp)
    # a stage's numbers per scheme and sequence-parallel setting; the bound takes the least over
    # them per stage (a relaxation: a plan sets sequence parallelism once for all its stages)
    variants = scheme_settings(scenario, par.tp)
    m = tr.global_batch // (tr.micro_batch * par.dp)
    moe = kind_prefix(scenario.llm)
    dp_key = par.dp if tr.distributed_optimizer else 1   # dp changes a stage only through the sharded optimizer
    classes: dict[tuple, int] = {}
    rows: list[list] = []
    arcs = []
    v = par.interleave
    for j in range(p):
        role = stage_role(j, p)
        if v > 1:   # interleaved: equal stages only (wafopt.costmodel.rules)
            starts = [j * L // p]
        else:
            starts = [0] if j == 0 else list(range(j, L - (p - j) + 1))
        cls = np.full((len(starts), L + 1), -1)
        for k, a in enumerate(starts):
            ends = [(j + 1) * L // p] if v > 1 else [L] if j == p - 1 else range(a + 1, L - (p - 1 - j) + 1)
            for b in ends:
                key = (role, b - a, moe[b] - moe[a])
                if key not in classes:
                    try:
                        rows.append([stage_numbers(scenario, par.tp, dp_key, size, role, a, b - a, s, sp)
                                     for s, sp in variants])
                    except InstanceError as exc:
                        return f"cannot be modelled: {exc}"
                    classes[key] = len(rows) - 1
                cls[k, b] = classes[key]
        arcs.append((np.array(starts), cls, np.unique(cls[cls >= 0])))
    for _, cls, _ in arcs:
        cls[cls < 0] = len(rows)   # the impossible arc
    Fc = np.array([[v.forward_s for v in row] for row in rows])
    Bc = np.array([[v.backward_s for v in row] for row in rows])
    fixed = np.array([[v.fixed_bytes for v in row] for row in rows])
    kept = np.array([[v.kept_bytes for v in row] for row in rows])
    ub = np.array([[v.unit_bytes for v in row] for row in rows])
    r = np.array([[v.unit_seconds for v in row] for row in rows])
    n = np.array([float(k[1]) for k in classes])
    inflight = np.array([inflight_microbatches(p, j, m, v) for j in range(p)], dtype=float)
    wafer = scenario.wafer
    # what follows stage 0's last backward: its gradient reduction (least time) and optimizer step
    tails = [[least_tail_s(v, par.dp, wafer) for v in row] for row in rows]
    copies = par.tp * par.dp
    cap = healthy * capacity * (1 + MEMORY_SLACK)
    class_optimizer = np.array([min(t) for t in tails])
    send = least_stage_send_s(scenario, par.tp, size) if p > 1 else 0.0
    forced = None
    if tr.recompute_policy is not None:   # every plan recomputes exactly these units in every layer
        row = scenario.stage_workload(Choice(par, schemes[0], size), 0, 0, 1).policy_row(tr.recompute_policy)
        forced = np.array([1.0 if x else 0.0 for x in row]) if isinstance(row, list) else np.ones(ub.shape[2])   # full
    # a die keeps its state, gradients and buffers whatever it offloads: a stage that cannot is no arc
    fits = np.append(fixed.min(axis=1) <= capacity * (1 + MEMORY_SLACK), False)
    arcs = [(starts, np.where(fits[cls], cls, len(rows)), np.unique(cls[fits[cls]])) for starts, cls, _ in arcs]
    optimizer = min((min(tails[c]) for c in arcs[0][2]), default=0.0)
    d = LayoutData(par, tuple(variants), m, copies, cap, optimizer, Fc, Bc, fixed, kept, ub, r, n, inflight, arcs, L, [],
                   class_optimizer, send, forced)
    if not np.isfinite(least_path(d, [np.zeros(len(rows))] * p)[0]):
        return (f"every split leaves a stage that keeps more than the die's {capacity / GB:.1f} GB per die "
                f"(state, gradients, buffers)")
    dropped = ub.sum(axis=2) if forced is None else (ub * forced).sum(axis=2)
    least = [copies * (fixed + inflight[j] * (kept - n[:, None] * dropped)).min(axis=1) for j in range(p)]
    need = least_path(d, least)[0]
    if need > cap:
        how = "even full recomputation" if tr.recompute else "keeping every activation"
        return (f"{how} needs {need / GB:.1f} GB with its best split, the wafer's pooled "
                f"DRAM is {healthy * capacity / GB:.1f} GB")
    busiest = [(Fc + Bc).min(axis=1)] * p
    d.balanced = least_path(d, busiest, np.maximum)[1]
    return d


def at_split(d: LayoutData, split: list[int]) -> SimpleNamespace:
    """The per-stage arrays of one split (what the LP relaxation of a fixed split needs), and O of
    its first stage."""
    idx, at = [], 0
    for (starts, cls, _), k in zip(d.arcs, split):
        idx.append(int(cls[int(np.nonzero(starts == at)[0][0]), at + k]))
        at += k
    idx = np.array(idx)
    inf = d.inflight[:, None]
    M0 = d.fixed[idx] + inf * d.kept[idx]
    return SimpleNamespace(layout=d.layout, m=d.m, copies=d.copies, cap=d.cap, optimizer=d.class_optimizer[idx[0]],
                           Fc=d.Fc[idx], Bc=d.Bc[idx], M0=M0, a=inf[:, :, None] * d.ub[idx], ub=d.ub[idx], r=d.r[idx],
                           L=d.n[idx])
