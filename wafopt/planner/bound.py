"""The planner's search space and its certified lower bound per layout (WATOS Alg. 1's early
pruning, made exact).

Space: every layout (tp, pp, dp) and micro-batch size b of the scenario's list with
tp * pp * dp <= healthy dies, pp <= layers, and dp dividing global_batch / b, restricted to what
the scenario's `parallel:` fixes. Every plan the evaluator accepts has one of these; each stage
may use either tensor-parallel scheme, and the plan chooses its contiguous layer split.

The bound of a layout holds for every plan with it, whatever its layer split, placement, schemes,
recomputation, offloading and routes:

1. Schedule (the evaluator's 1F1B task graph). Stage k runs its 2m tasks one at a time; its first
   forward starts after the forwards of the stages before it, and after its last backward the
   last micro-batch still goes back through the stages before it. So, with F_j and B_j the
   forward and backward task times of stage j, the iteration is at least, for every k,
     g_k = sum_{j<k} (F_j + B_j) + m (F_k + B_k) + O,
     h_k = sum_{j!=k} (F_j + B_j) + m B_k + n_k F_k + O,   n_k = max(1, m - min(p - 1 - k, m)),
   (h_k: micro-batch 0 goes through the later stages and back before stage k's first backward,
   while stage k has run at most its warm-up forwards), O the optimizer step of stage 0. For
   weights w >= 0 on these 2p inequalities (sum 1), the iteration is at least their weighted sum,
   O + sum_j (alphaF_j F_j + alphaB_j B_j).
2. Task times. F_j >= Fc_js and B_j >= Bc_js + sum_u r_jsu x_ju for the stage's scheme s: the
   forward and backward compute (communication left out: it is never negative) and the compute of
   regenerating the x_ju layers of unit u it recomputes. Full recomputation counts as recomputing
   every unit in every layer, its per-unit times scaled down when it is the cheaper way.
3. Memory. Offloading moves bytes between dies, so the dies of the stages together fit the pooled
   DRAM of all healthy dies: copies * sum_j M_j <= H * C (copies = tp * dp), with
   M_j >= M0_js - sum_u a_jsu x_ju (M0: memory without recomputation; a: in-flight bytes of the
   unit per layer; recomputation's transient memory only adds). A die keeps at least its state,
   gradients of one operator and buffers.
4. Lagrangian. With a multiplier mu >= 0 on (3), relaxing the choice of scheme and x:
   LB(w, mu) = O + sum_j min_s [alphaF_j Fc_js + alphaB_j Bc_js + mu copies M0_js
                                + L_j sum_u min(0, alphaB_j r_jsu - mu copies a_jsu)] - mu H C.
   Any (w, mu) gives a valid bound (weak duality).
5. Every split. For fixed (w, mu), LB is O - mu H C plus one term per stage that depends only on
   the contiguous layers the stage holds (role, layer count and kinds). The least LB over all
   splits is a shortest path over the layer boundaries 0..L (stage j: an arc a -> b), found
   exactly by a DP over the stages; that least value is the certified bound. The planner picks
   (w, mu) by a cheap rule for every layout and by Kelley's cutting planes (HiGHS) on this concave
   function where the bound matters; the certificate stores (w, mu) and `wafopt certify`
   recomputes the least LB(w, mu) from the scenario alone.

Infeasible: under every split, some stage's state exceeds a die's DRAM under every scheme, or even
full recomputation does not fit the pooled DRAM, or the workload cannot be built.

Floats: LB is computed in floating point and lowered by SAFETY times the sum of the absolute
values of its terms, far above the rounding error of these sums (n * 2^-53 for n < 10^6 terms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from wafopt.core.errors import InstanceError
from wafopt.costmodel.scenario import Parallel, Scenario

SAFETY = 1e-9        # relative margin (of the terms' magnitude) that makes the float sum a lower bound
MEMORY_SLACK = 2e-9  # twice the evaluator's relative slack on a die's DRAM (float sums)
MU_STEPS = 30        # golden-section steps of the multiplier search (0.618^30: 6e-7 of its range)
KELLEY_ROUNDS = 60   # cutting-plane rounds of the refinement
GB = 1e9


@dataclass
class LayoutData:
    """The numbers of one layout the bound needs (per die, per micro-batch), for every split.

    A split is a path of `pp` arcs over the layer boundaries 0..layers: stage j's arc from boundary
    `starts[j][a]` to boundary b holds the layers in between, whose numbers are those of its class
    `cls[j][a, b]` (role first/middle/last and layer kinds; in-flight counts are per stage; the
    class index C, one past the last, marks an impossible arc).
    """
    layout: Parallel
    schemes: tuple[str, ...]
    m: int
    copies: int
    cap: float            # H * C (with the evaluator's slack)
    optimizer: float      # O: the least optimizer step of a first stage
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


@dataclass
class LayoutBound:
    layout: Parallel
    value: float | None          # the certified lower bound, None when infeasible
    reason: str = ""             # why the layout is infeasible
    w: list | None = None        # the weights and multiplier that prove `value`
    mu: float = 0.0
    refined: bool = False        # (w, mu) from the LP relaxation
    data: LayoutData | None = field(default=None, repr=False)
    tier: str = "full"           # "quick": from per-layer compute alone; "full": with memory (steps 1-4)
    micro_batch: int | None = None   # None: the scenario's only size

    @property
    def feasible(self) -> bool:
        return self.value is not None

    def key(self) -> tuple:
        """(tp, pp, dp), and the micro-batch size where the scenario allows several."""
        base = (self.layout.tp, self.layout.pp, self.layout.dp)
        return base if self.micro_batch is None else base + (self.micro_batch,)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layout_choices(scenario: Scenario) -> list[tuple[Parallel, int | None]]:
    """Every (layout, micro-batch size) a plan may choose, in (tp, pp, dp, size) order; the size
    is None when the scenario allows only one."""
    sizes = scenario.training.micro_batches
    if len(sizes) == 1:
        return [(par, None) for par in layout_space(scenario)]
    out = [(par, b) for b in sizes for par in layout_space(scenario, b)]
    return sorted(out, key=lambda t: (t[0].tp, t[0].pp, t[0].dp, t[1]))


def layout_space(scenario: Scenario, micro_batch: int | None = None) -> list[Parallel]:
    """Every layout a plan of this scenario may have (with this micro-batch size; default: any of
    the scenario's), in (tp, pp, dp) order."""
    if micro_batch is None and len(scenario.training.micro_batches) > 1:
        union = {par for b in scenario.training.micro_batches for par in layout_space(scenario, b)}
        return sorted(union, key=lambda p: (p.tp, p.pp, p.dp))
    healthy = len(scenario.mesh().healthy_dies)
    fixed = scenario.fixed
    sequences = scenario.training.global_batch // (micro_batch or scenario.training.micro_batch)
    dps = [fixed.dp] if fixed.dp else [d for d in _divisors(sequences) if d <= healthy]
    out = []
    for tp in ([fixed.tp] if fixed.tp else range(1, healthy + 1)):
        for dp in dps:
            if sequences % dp:
                continue
            top = min(scenario.llm.layers, healthy // (tp * dp))
            for pp in ([fixed.pp] if fixed.pp else range(1, top + 1)):
                if 1 <= pp <= top:
                    out.append(Parallel(tp, pp, dp))
    return sorted(out, key=lambda p: (p.tp, p.pp, p.dp))


def _schemes() -> tuple[str, ...]:
    from wafopt.costmodel.operators import SCHEMES

    return tuple(SCHEMES)


def _state_floor(scenario: Scenario, par: Parallel) -> float:
    """Least model state of the busiest die: the stages' parameters cover the model at least once."""
    tr = scenario.training
    states = tr.states
    shard = par.dp if tr.distributed_optimizer else 1
    per_param = states.weights + states.grads + states.optimizer / shard
    return scenario.llm.total_params / (par.tp * par.pp) * per_param


_ROLE_STAGE = {"only": (1, 0), "first": (2, 0), "middle": (3, 1), "last": (2, 1)}   # (pp, index) of a role


def _role(j: int, p: int) -> str:
    return "only" if p == 1 else "first" if j == 0 else "last" if j == p - 1 else "middle"


def _training(scenario: Scenario, micro_batch: int | None):
    from dataclasses import replace

    tr = scenario.training
    return tr if micro_batch in (None, tr.micro_batch) else replace(tr, micro_batch=micro_batch)


@lru_cache(maxsize=1 << 16)
def _stage_numbers(scenario: Scenario, tp: int, dp: int, micro_batch: int | None, role: str, first: int, n: int,
                   scheme: str) -> tuple:
    """(Fc, Bc, fixed, kept, unit bytes, unit seconds, optimizer) of a stage with this role holding
    layers first .. first + n - 1 (the cost model's own stage, as in any split)."""
    from wafopt.costmodel.model import stage_workload

    tr = _training(scenario, micro_batch)
    pp, index = _ROLE_STAGE[role]
    st = stage_workload(scenario.llm, tr, scenario.wafer, tp, pp, dp, index, first, n, scheme)
    drop = [u.recomputable and tr.recompute for u in st.units]   # else dropping it saves no memory
    ub = [u.bytes if ok else 0.0 for u, ok in zip(st.units, drop)]
    r = [u.recompute_s if ok else 0.0 for u, ok in zip(st.units, drop)]
    every = n * sum(r)
    if every > 0 and st.full_recompute_s < every:   # full recomputation is the cheaper way
        r = [v * st.full_recompute_s / every for v in r]
    return (st.fwd_s, st.bwd_s, st.state_bytes + st.transient_bytes(None), st.kept_bytes(None), ub, r,
            st.optimizer_s)


def _numbers(scenario: Scenario, tp: int, dp: int, micro_batch: int | None, role: str, first: int, n: int,
             scheme: str) -> tuple:
    """_stage_numbers; for a model of one layer kind, every number of a stage is affine in its
    layers (sums over layers, plus the embedding or head), so two stages give them all (float
    rounding ~1e-16 relative, far inside SAFETY)."""
    if n <= 2 or _kind_prefix(scenario.llm)[-1] not in (0, scenario.llm.layers):
        return _stage_numbers(scenario, tp, dp, micro_batch, role, first, n, scheme)
    one = _stage_numbers(scenario, tp, dp, micro_batch, role, 0, 1, scheme)
    two = _stage_numbers(scenario, tp, dp, micro_batch, role, 0, 2, scheme)
    k = n - 1
    out = []
    for a, b in zip(one, two):
        if isinstance(a, list):
            out.append([x + k * (y - x) for x, y in zip(a, b)])
        else:
            out.append(a + k * (b - a))
    return tuple(out)


@lru_cache(maxsize=64)
def _kind_prefix(llm) -> list[int]:
    """MoE layers before each layer boundary (a stage's numbers depend on its role and kind counts)."""
    out = [0]
    for i in range(llm.layers):
        out.append(out[-1] + bool(llm.is_moe_layer(i)))
    return out


def _path(d: LayoutData, values: list, reduce=np.add) -> tuple[float, list[int]]:
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


def layout_data(scenario: Scenario, par: Parallel, micro_batch: int | None = None) -> LayoutData | str:
    """The bound's numbers of layout `par` (and micro-batch size) over every layer split, or why no
    plan with it fits whatever its split."""
    healthy = len(scenario.mesh().healthy_dies)
    capacity = scenario.wafer.dram_capacity
    tr = _training(scenario, micro_batch)
    L, p = scenario.llm.layers, par.pp
    if par.dies > healthy:
        return f"needs {par.dies} dies, {healthy} healthy"
    if p > L or tr.global_batch % (tr.micro_batch * par.dp):
        return "cannot be modelled: pp above the layers or batch not divisible"
    if _state_floor(scenario, par) > capacity * (1 + MEMORY_SLACK):
        return (f"model state at least {_state_floor(scenario, par) / GB:.1f} GB per die, more than the die's "
                f"{capacity / GB:.1f} GB")
    schemes = _schemes()
    m = tr.global_batch // (tr.micro_batch * par.dp)
    moe = _kind_prefix(scenario.llm)
    dp_key = par.dp if tr.distributed_optimizer else 1   # dp changes a stage only through the sharded optimizer
    classes: dict[tuple, int] = {}
    rows: list[list[tuple]] = []
    arcs = []
    for j in range(p):
        role = _role(j, p)
        starts = [0] if j == 0 else list(range(j, L - (p - j) + 1))
        cls = np.full((len(starts), L + 1), -1)
        for k, a in enumerate(starts):
            for b in ([L] if j == p - 1 else range(a + 1, L - (p - 1 - j) + 1)):
                key = (role, b - a, moe[b] - moe[a])
                if key not in classes:
                    try:
                        rows.append([_numbers(scenario, par.tp, dp_key, micro_batch, role, a, b - a, s)
                                     for s in schemes])
                    except InstanceError as exc:
                        return f"cannot be modelled: {exc}"
                    classes[key] = len(rows) - 1
                cls[k, b] = classes[key]
        arcs.append((np.array(starts), cls, np.unique(cls[cls >= 0])))
    for _, cls, _ in arcs:
        cls[cls < 0] = len(rows)   # the impossible arc
    Fc = np.array([[v[0] for v in row] for row in rows])
    Bc = np.array([[v[1] for v in row] for row in rows])
    fixed = np.array([[v[2] for v in row] for row in rows])
    kept = np.array([[v[3] for v in row] for row in rows])
    ub = np.array([[v[4] for v in row] for row in rows])
    r = np.array([[v[5] for v in row] for row in rows])
    n = np.array([float(k[1]) for k in classes])
    inflight = np.array([min(p - j, m) for j in range(p)], dtype=float)
    optimizer = min(v[6] for key, c in classes.items() if key[0] in ("first", "only") for v in rows[c])
    copies = par.tp * par.dp
    cap = healthy * capacity * (1 + MEMORY_SLACK)
    d = LayoutData(par, schemes, m, copies, cap, optimizer, Fc, Bc, fixed, kept, ub, r, n, inflight, arcs, L, [])
    die = capacity * (1 + MEMORY_SLACK)
    fits = fixed.min(axis=1) <= die
    if not np.isfinite(_path(d, [np.where(fits, 0.0, np.inf)] * p)[0]):
        return (f"every split leaves a stage that keeps more than the die's {capacity / GB:.1f} GB per die "
                f"(state, gradients, buffers)")
    least = [copies * (fixed + inflight[j] * (kept - n[:, None] * ub.sum(axis=2))).min(axis=1) for j in range(p)]
    need = _path(d, least)[0]
    if need > cap:
        how = "even full recomputation" if tr.recompute else "keeping every activation"
        return (f"{how} needs {need / GB:.1f} GB with its best split, the wafer's pooled "
                f"DRAM is {healthy * capacity / GB:.1f} GB")
    busiest = [(Fc + Bc).min(axis=1)] * p
    d.balanced = _path(d, busiest, np.maximum)[1]
    return d


def at_split(d: LayoutData, split: list[int]) -> SimpleNamespace:
    """The per-stage arrays of one split (what the LP relaxation of a fixed split needs)."""
    idx, at = [], 0
    for (starts, cls, _), k in zip(d.arcs, split):
        idx.append(int(cls[int(np.nonzero(starts == at)[0][0]), at + k]))
        at += k
    idx = np.array(idx)
    inf = d.inflight[:, None]
    M0 = d.fixed[idx] + inf * d.kept[idx]
    return SimpleNamespace(layout=d.layout, m=d.m, copies=d.copies, cap=d.cap, optimizer=d.optimizer,
                           Fc=d.Fc[idx], Bc=d.Bc[idx], M0=M0, a=inf[:, :, None] * d.ub[idx], r=d.r[idx],
                           L=d.n[idx])


def forward_counts(p: int, m: int) -> np.ndarray:
    """n_k = max(1, m - min(p - 1 - k, m)): forwards stage k still runs from its first backward on
    (plus the first one)."""
    return np.array([max(1, m - min(p - 1 - k, m)) for k in range(p)], dtype=float)


def coefficients(w: np.ndarray, p: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(alphaF, alphaB): the weight of each stage's F_j and B_j in sum_k wg_k g_k + wh_k h_k."""
    wg, wh = w[:p], w[p:]
    G = m * wg + np.concatenate([np.cumsum(wg[::-1])[::-1][1:], [0.0]])   # m wg_j + sum_{k>j} wg_k
    Wh = wh.sum()
    return G + Wh + (forward_counts(p, m) - 1) * wh, G + Wh + (m - 1) * wh


def _weights(d: LayoutData, w) -> np.ndarray:
    w = np.asarray(w, dtype=float)
    if w.shape != (2 * d.layout.pp,) or not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
        raise ValueError(f"weights must be {2 * d.layout.pp} non-negative numbers, not all zero")
    return w / w.sum()


def _arc_terms(d: LayoutData, w: np.ndarray, mu: float) -> tuple[np.ndarray, float]:
    """The (p, C) term of LB (module docstring, step 4) of every class on every stage, and a bound
    on the terms' magnitude along any split."""
    aF, aB = coefficients(w, d.layout.pp, d.m)
    inf = d.inflight[:, None, None]
    gain = np.minimum(0.0, aB[:, None, None, None] * d.r[None] - mu * d.copies * inf[..., None] * d.ub[None])
    gain = gain.sum(axis=3)                                                    # (p, C, S)
    memory = mu * d.copies * (d.fixed[None] + inf * d.kept[None])
    compute = aF[:, None, None] * d.Fc[None] + aB[:, None, None] * d.Bc[None]
    values = (compute + memory + d.n[None, :, None] * gain).min(axis=2)
    magnitude = float((compute + np.abs(memory) - d.n[None, :, None] * gain).max(axis=(1, 2)).sum())
    return values, magnitude


def lagrangian(d: LayoutData, w, mu: float, with_split: bool = False):
    """LB(w, mu) (module docstring, step 4) at the split that makes it least, lowered by its
    rounding margin; with_split: (value, that split)."""
    w = _weights(d, w)
    mu = max(0.0, float(mu))
    values, magnitude = _arc_terms(d, w, mu)
    least, split = _path(d, values)
    value = d.optimizer + least - mu * d.cap
    value = float(value - SAFETY * (d.optimizer + magnitude + mu * d.cap))
    return (value, split) if with_split else value


def _mu_high(d: LayoutData, aB) -> float:
    """The multiplier above which every unit is recomputed in every layer (a larger one only
    charges memory)."""
    ratios = [(aB[j] * d.r[a[2]])[d.ub[a[2]] > 0] / (d.copies * d.inflight[j] * d.ub[a[2]][d.ub[a[2]] > 0])
              for j, a in enumerate(d.arcs)]
    ratios = np.concatenate(ratios)
    return float(ratios.max()) if ratios.size else 0.0


def best_mu(d: LayoutData, w) -> tuple[float, float]:
    """(LB, mu) with mu maximizing LB(w, .) (concave: a least over splits of concave functions) by
    golden-section search."""
    _, aB = coefficients(_weights(d, w), d.layout.pp, d.m)
    hi = _mu_high(d, aB) * 1.01
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
    layer cost the same on every stage (so that no split escapes them)."""
    p, m = d.layout.pp, d.m
    s = at_split(d, d.balanced)
    F, B = s.Fc.min(axis=1), s.Bc.min(axis=1)
    T = F + B
    prefix = np.concatenate([[0.0], np.cumsum(T)[:-1]])
    g = prefix + m * T
    h = T.sum() - T + m * B + forward_counts(p, m) * F
    out = []
    for k in dict.fromkeys([int(np.argmax(np.concatenate([g, h]))), 2 * p - 1]):
        w = np.zeros(2 * p)
        w[k] = 1.0
        out.append(w)
    if p > 1:   # h_k grows by slope_k per layer of stage k: weights 1 / slope_k level them
        slope = ((m - 1) * B + (forward_counts(p, m) - 1) * F) / s.L
        w = np.concatenate([np.zeros(p), 1.0 / np.maximum(slope, 1e-300)])
        out.append(w / w.sum())
    return out


@lru_cache(maxsize=1024)
def layer_compute(scenario: Scenario, tp: int, micro_batch: int | None = None) -> tuple[float, float]:
    """(forward, backward) compute seconds of one layer per micro-batch, the least over the TP
    schemes and layer kinds (the operators' rooflines of the workload's layer tables)."""
    from wafopt.costmodel.operators import build_layer, op_seconds

    wafer, llm = scenario.wafer, scenario.llm
    flops = wafer.die_flops * wafer.compute_efficiency
    kinds = {llm.is_moe_layer(i) for i in range(llm.layers)}
    f = b = math.inf
    for scheme in _schemes():
        for moe in kinds:
            t = build_layer(llm, _training(scenario, micro_batch), tp, moe, scheme)
            f = min(f, sum(op_seconds(t.op(n).fwd, flops, wafer.dram_bandwidth) for n in t.forward if isinstance(n, str)))
            b = min(b, sum(op_seconds(t.op(n).bwd, flops, wafer.dram_bandwidth) for n in t.backward if isinstance(n, str)))
    return f, b


def quick_split(layers: int, slopes) -> list[int]:
    """Layers per stage minimising max_k slope_k n_k (each n_k >= 1): one layer at a time to the
    stage whose value grows least (exact for increasing functions of one stage each)."""
    import heapq

    n = [1] * len(slopes)
    heap = [(2 * s, k) for k, s in enumerate(slopes)]
    heapq.heapify(heap)
    for _ in range(layers - len(slopes)):
        _, k = heapq.heappop(heap)
        n[k] += 1
        heapq.heappush(heap, ((n[k] + 1) * slopes[k], k))
    return n


def quick_bound(scenario: Scenario, par: Parallel, micro_batch: int | None = None) -> LayoutBound:
    """The quick tier: the schedule bound (step 1) with h_k of every stage, each stage's task times
    at least its layers' compute (step 2 without recomputation, embedding and LM head), at the
    split that makes the largest h_k least; infeasible only when the model state alone overflows a
    die. Needs no workload."""
    healthy = len(scenario.mesh().healthy_dies)
    capacity = scenario.wafer.dram_capacity
    tr = _training(scenario, micro_batch)
    if par.dies > healthy:
        return LayoutBound(par, None, f"needs {par.dies} dies, {healthy} healthy", tier="quick", micro_batch=micro_batch)
    if par.pp > scenario.llm.layers or tr.global_batch % (tr.micro_batch * par.dp):
        return LayoutBound(par, None, "cannot be modelled: pp above the layers or batch not divisible", tier="quick",
                           micro_batch=micro_batch)
    if _state_floor(scenario, par) > capacity * (1 + MEMORY_SLACK):
        return LayoutBound(par, None, f"model state at least {_state_floor(scenario, par) / GB:.1f} GB per die, more "
                                      f"than the die's {capacity / GB:.1f} GB", tier="quick", micro_batch=micro_batch)
    f, b = layer_compute(scenario, par.tp, micro_batch)
    m, p = tr.global_batch // (tr.micro_batch * par.dp), par.pp
    # h_k = (every layer's compute) + n_k ((m - 1) b + (c_k - 1) f): only stage k's layers vary
    slopes = [(m - 1) * b + (c - 1) * f for c in forward_counts(p, m)]
    n = quick_split(scenario.llm.layers, slopes)
    total = scenario.llm.layers * (f + b)
    value = total + max(s * k for s, k in zip(slopes, n))
    return LayoutBound(par, value * (1 - SAFETY), tier="quick", micro_batch=micro_batch)


def layout_bound(scenario: Scenario, par: Parallel, micro_batch: int | None = None) -> LayoutBound:
    """The full certified bound of layout `par` (refine() tightens it with the LP's weights)."""
    d = layout_data(scenario, par, micro_batch)
    if isinstance(d, str):
        return LayoutBound(par, None, d, micro_batch=micro_batch)
    best = None
    for w in cheap_weights(d):
        value, mu = best_mu(d, w)
        if best is None or value > best[0]:
            best = (value, w, mu)
    quick = quick_bound(scenario, par, micro_batch).value
    return LayoutBound(par, max(best[0], quick), "", [float(v) for v in best[1]], best[2], False, d,
                       micro_batch=micro_batch)


def _supergradient(d: LayoutData, w: np.ndarray, mu: float, split: list[int]) -> tuple[np.ndarray, float]:
    """At the split, schemes and recomputation that make LB(w, mu) least: the 2p schedule
    inequalities' right-hand sides (g_k, h_k with O) and the pooled memory's excess over H * C.
    LB(w, mu) = w . G + mu * excess there, a supergradient of the concave LB (Kelley's cuts)."""
    p, m = d.layout.pp, d.m
    aF, aB = coefficients(w, p, m)
    s = at_split(d, split)
    F, B, M = np.zeros(p), np.zeros(p), 0.0
    for j in range(p):
        drop = aB[j] * s.r[j] - mu * d.copies * s.a[j] < 0                 # (S, U): recompute every layer
        per = aF[j] * s.Fc[j] + aB[j] * s.Bc[j] + mu * d.copies * s.M0[j] + \
            s.L[j] * np.where(drop, aB[j] * s.r[j] - mu * d.copies * s.a[j], 0.0).sum(axis=1)
        k = int(np.argmin(per))
        F[j] = s.Fc[j, k]
        B[j] = s.Bc[j, k] + s.L[j] * (s.r[j, k] * drop[k]).sum()
        M += s.M0[j, k] - s.L[j] * (s.a[j, k] * drop[k]).sum()
    T = F + B
    g = d.optimizer + np.concatenate([[0.0], np.cumsum(T)[:-1]]) + m * T
    h = d.optimizer + T.sum() - T + m * B + forward_counts(p, m) * F
    return np.concatenate([g, h]), d.copies * M - d.cap


def cutting_planes(d: LayoutData, starts: list, rounds: int = KELLEY_ROUNDS) -> tuple[np.ndarray, float] | None:
    """(w, mu) maximising LB over the weights and the multiplier by Kelley's cutting planes: every
    evaluation's supergradient is a cut of the concave LB; the LP over the cuts (HiGHS) proposes the
    next point. The LP is only a guide: the certified value is LB(w, mu) itself."""
    from scipy.optimize import linprog

    p2 = 2 * d.layout.pp
    hi = _mu_high(d, np.full(d.layout.pp, 2.0 * d.m + 2.0))   # aB_j <= 2 m + 2 for any weights
    if hi <= 0:
        hi = 1e-30   # nothing can be recomputed: memory has no price worth paying
    cuts, best = [], None
    points = list(starts)
    for _ in range(rounds):
        if not points:
            break
        w, mu = points.pop(0)
        w = _weights(d, w)
        value, split = lagrangian(d, w, mu, with_split=True)
        if best is None or value > best[0]:
            best = (value, w, mu)
        G, excess = _supergradient(d, w, mu, split)
        cuts.append(np.concatenate([G, [excess * hi]]))   # mu = hi * nu, nu in [0, 1]
        if not points:
            n = p2 + 2   # w, nu, t; maximise t <= cut . (w, nu)
            A = np.array([np.concatenate([-c, [1.0]]) for c in cuts])
            scale = np.abs(A).max(axis=1, keepdims=True)
            res = linprog(np.concatenate([np.zeros(n - 1), [-1.0]]), A_ub=A / scale, b_ub=np.zeros(len(cuts)),
                          A_eq=np.concatenate([np.ones(p2), [0.0, 0.0]])[None, :], b_eq=[1.0],
                          bounds=[(0, None)] * p2 + [(0, 1), (None, None)], method="highs")
            if res.status != 0 or not res.x[-1] > best[0] * (1 + 1e-7):
                break   # the cuts promise no more than is proven
            points.append((np.maximum(res.x[:p2], 0.0), float(res.x[p2]) * hi))
    return None if best is None else (best[1], best[2])


def refine(bound: LayoutBound) -> LayoutBound:
    """The bound with (w, mu) from cutting planes over the weights and the multiplier (the dual of
    the LP relaxation over every split), when that proves more."""
    if not bound.feasible or bound.refined or bound.data is None:
        return bound
    d = bound.data
    starts = [(w, best_mu(d, w)[1]) for w in cheap_weights(d)]
    if bound.w is not None:
        starts.insert(0, (np.asarray(bound.w), bound.mu))
    found = cutting_planes(d, starts)
    if found is not None:
        value, mu = best_mu(d, found[0])    # the multiplier polished for the certified value
        if lagrangian(d, found[0], found[1]) > value:
            value, mu = lagrangian(d, found[0], found[1]), found[1]
        if value > bound.value:
            bound.value = value
            bound.w, bound.mu = [float(v) for v in found[0]], mu
    bound.refined = True
    return bound


def space_bounds(scenario: Scenario, stopped=lambda: False) -> list[LayoutBound]:
    """The quick bound of every layout of the space (stops early, returning what it has, when
    `stopped()` turns true); tighten() upgrades the ones that matter."""
    out = []
    for par, size in layout_choices(scenario):
        if stopped():
            break
        out.append(quick_bound(scenario, par, size))
    return out


def upgrade(scenario: Scenario, bounds: list[LayoutBound], k: int) -> None:
    """One tier up for bounds[k]: quick -> full -> LP-refined."""
    b = bounds[k]
    if b.tier == "quick":
        bounds[k] = layout_bound(scenario, b.layout, b.micro_batch)
    elif not b.refined:
        refine(b)


def tighten(scenario: Scenario, bounds: list[LayoutBound], stopped=lambda: False) -> int:
    """Upgrade the least bound until the least one is LP-refined (or stopped): the plan-level bound
    can only rise. Returns how many upgrades were made."""
    done = 0
    while not stopped():
        feasible = [k for k, b in enumerate(bounds) if b.feasible]
        if not feasible:
            break
        k = min(feasible, key=lambda i: (bounds[i].value, bounds[i].key()))
        if bounds[k].tier == "full" and bounds[k].refined:
            break
        upgrade(scenario, bounds, k)
        done += 1
    return done


def plan_bound(bounds: list[LayoutBound]) -> LayoutBound | None:
    """The layout with the least bound among the feasible ones (the plan-level bound), or None."""
    feasible = [b for b in bounds if b.feasible]
    return min(feasible, key=lambda b: (b.value, b.key())) if feasible else None


def certified_value(scenario: Scenario, par: Parallel, tier: str, w=None, mu: float | None = None,
                    micro_batch: int | None = None) -> tuple[float | None, str]:
    """What certify re-derives for one layout at the certificate's tier: the quick bound, or the
    full one, and LB(w, mu) where the certificate gives weights."""
    bound = quick_bound(scenario, par, micro_batch) if tier == "quick" else layout_bound(scenario, par, micro_batch)
    if not bound.feasible:
        return None, bound.reason
    value = bound.value
    if w is not None:
        value = max(value, lagrangian(bound.data, w, mu or 0.0))
    return value, ""


# --- the certificate -------------------------------------------------------------------------------

def certificate_data(bounds: list[LayoutBound]) -> dict:
    """Every layout of the space with its bound (null: infeasible) and, where the LP refined it,
    the weights and multiplier that prove it."""
    rows = []
    for b in bounds:
        row = list(b.key()) + [b.value]   # [tp, pp, dp, (micro-batch,) bound]
        if b.tier == "full":   # six items: the full tier, with the LP's weights where refined
            row += [b.w, b.mu] if b.feasible and b.refined else [None, None]
        rows.append(row)
    return {"layouts": rows}


def check_certificate(scenario: Scenario, data: dict) -> float:
    """Re-derive the planner's bound from the scenario: every layout of the space must be listed,
    each listed bound must be one the scenario proves, and the value is the least bound over the
    feasible layouts (raises CertificateError otherwise)."""
    from wafopt.core.errors import CertificateError

    rows = data.get("layouts")
    if not isinstance(rows, list):
        raise CertificateError("the planner-layouts certificate needs a list `layouts`")
    multi = len(scenario.training.micro_batches) > 1
    head = 4 if multi else 3   # [tp, pp, dp, (micro-batch,) bound, (w, mu)]
    listed: dict[tuple, list] = {}
    for k, row in enumerate(rows):
        if (not isinstance(row, list) or len(row) not in (head + 1, head + 3)
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in row[:head])):
            what = "tp, pp, dp, micro_batch" if multi else "tp, pp, dp"
            raise CertificateError(f"layouts[{k}] must be [{what}, bound] or [{what}, bound, w, mu]")
        listed[tuple(row[:head])] = row[:3] + row[head:]   # [tp, pp, dp, bound, (w, mu)]
    space = layout_choices(scenario)
    keys = {(p.tp, p.pp, p.dp) + ((b,) if multi else ()) for p, b in space}
    if set(listed) != keys:
        missing = sorted(keys - set(listed))[:3]
        extra = sorted(set(listed) - keys)[:3]
        raise CertificateError(f"the certificate lists {len(listed)} layouts, the space has {len(keys)}"
                               + (f"; missing {missing}" if missing else "") + (f"; not in the space {extra}" if extra else ""))
    least = None
    for par, size in space:
        row = listed[(par.tp, par.pp, par.dp) + ((size,) if multi else ())]
        w, mu = (row[4], row[5]) if len(row) == 6 else (None, None)
        if w is not None and (not isinstance(w, list) or not isinstance(mu, (int, float)) or isinstance(mu, bool)):
            raise CertificateError(f"layout tp{par.tp} pp{par.pp} dp{par.dp}: weights must be a list and mu a number")
        try:
            value, reason = certified_value(scenario, par, "full" if len(row) == 6 else "quick", w, mu, size)
        except ValueError as exc:
            raise CertificateError(f"layout tp{par.tp} pp{par.pp} dp{par.dp}: {exc}") from None
        stated = row[3]
        if value is None:
            continue   # infeasible whatever the certificate says: it bounds no plan
        if stated is None:
            raise CertificateError(f"layout tp{par.tp} pp{par.pp} dp{par.dp} is listed as infeasible, but it fits")
        if not isinstance(stated, (int, float)) or isinstance(stated, bool) or not math.isfinite(stated):
            raise CertificateError(f"layout tp{par.tp} pp{par.pp} dp{par.dp}: bound {stated!r:.40} is not a number")
        from wafopt.core.numeric import at_most

        if not at_most(stated, value):
            raise CertificateError(f"layout tp{par.tp} pp{par.pp} dp{par.dp}: stated bound {stated:.10g}, the scenario "
                                   f"proves {value:.10g}")
        least = value if least is None else min(least, value)
    if least is None:
        raise CertificateError("no layout of the space fits the wafer: there is no plan to bound")
    return least
