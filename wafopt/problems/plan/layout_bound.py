"""The planner's search space and its certified lower bound per layout (WATOS Alg. 1's early
pruning, made exact).

Space: every layout (tp, pp, dp) with tp * pp * dp <= healthy dies, pp <= layers, and dp dividing
global_batch / micro_batch, restricted to what the scenario's `parallel:` fixes. Every plan the
evaluator accepts has one of these layouts; each stage may use either tensor-parallel scheme.

The bound of a layout holds for every plan with it, whatever its placement, schemes,
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
   Any (w, mu) gives a valid bound (weak duality); the planner picks them by a cheap rule for every
   layout and by the LP relaxation (HiGHS) where the bound matters; the certificate stores (w, mu)
   and `wafopt certify` recomputes LB(w, mu) from the scenario alone.

Infeasible: the state of a stage exceeds a die's DRAM under every scheme, or even full
recomputation does not fit the pooled DRAM, or the workload cannot be built.

Floats: LB is computed in floating point and lowered by SAFETY times the sum of the absolute
values of its terms, far above the rounding error of these sums (n * 2^-53 for n < 10^6 terms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from wafopt.core.errors import InstanceError
from wafopt.problems.plan.instance import Parallel, Scenario

SAFETY = 1e-9        # relative margin (of the terms' magnitude) that makes the float sum a lower bound
MEMORY_SLACK = 2e-9  # twice the evaluator's relative slack on a die's DRAM (float sums)
MU_STEPS = 80        # golden-section steps of the multiplier search
GB = 1e9


@dataclass
class LayoutData:
    """The numbers of one layout the bound needs (per die, per micro-batch)."""
    layout: Parallel
    schemes: tuple[str, ...]
    m: int
    copies: int
    cap: float            # H * C (with the evaluator's slack)
    optimizer: float      # O
    Fc: np.ndarray        # (p, S) forward compute seconds
    Bc: np.ndarray        # (p, S) backward compute seconds
    M0: np.ndarray        # (p, S) memory without recomputation
    a: np.ndarray         # (p, S, U) bytes freed per recomputed layer of a unit
    r: np.ndarray         # (p, S, U) seconds per recomputed layer of a unit
    L: np.ndarray         # (p,) layers


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

    @property
    def feasible(self) -> bool:
        return self.value is not None

    def key(self) -> tuple[int, int, int]:
        return (self.layout.tp, self.layout.pp, self.layout.dp)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layout_space(scenario: Scenario) -> list[Parallel]:
    """Every layout a plan of this scenario may have, in (tp, pp, dp) order."""
    healthy = len(scenario.mesh().healthy_dies)
    fixed = scenario.fixed
    sequences = scenario.training.global_batch // scenario.training.micro_batch
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
    from wafopt.workload.operators import SCHEMES

    return tuple(SCHEMES)


def _state_floor(scenario: Scenario, par: Parallel) -> float:
    """Least model state of the busiest die: the stages' parameters cover the model at least once."""
    tr = scenario.training
    states = tr.states
    shard = par.dp if tr.distributed_optimizer else 1
    per_param = states.weights + states.grads + states.optimizer / shard
    return scenario.llm.total_params / (par.tp * par.pp) * per_param


def layout_data(scenario: Scenario, par: Parallel) -> LayoutData | str:
    """The bound's numbers of layout `par`, or why no plan with it fits."""
    healthy = len(scenario.mesh().healthy_dies)
    capacity = scenario.wafer.dram_capacity
    if par.dies > healthy:
        return f"needs {par.dies} dies, {healthy} healthy"
    if _state_floor(scenario, par) > capacity * (1 + MEMORY_SLACK):
        return (f"model state at least {_state_floor(scenario, par) / GB:.1f} GB per die, more than the die's "
                f"{capacity / GB:.1f} GB")
    schemes = _schemes()
    works = []
    for scheme in schemes:
        try:
            works.append(scenario.workload(par, (scheme,) * par.pp))
        except InstanceError as exc:
            return f"cannot be modelled: {exc}"
    p, S, U = par.pp, len(schemes), len(works[0].stages[0].units)
    Fc, Bc, M0, least = np.zeros((p, S)), np.zeros((p, S)), np.zeros((p, S)), np.zeros((p, S))
    a, r = np.zeros((p, S, U)), np.zeros((p, S, U))
    keep = np.zeros((p, S))
    for s, work in enumerate(works):
        for j, st in enumerate(work.stages):
            Fc[j, s], Bc[j, s] = st.fwd_s, st.bwd_s
            M0[j, s] = st.memory_bytes(None)
            keep[j, s] = st.state_bytes + st.gradient_bytes + st.buffer_bytes
            for u, unit in enumerate(st.units):
                if unit.recomputable and scenario.training.recompute:   # else it saves no memory
                    a[j, s, u] = st.inflight * unit.bytes
                    r[j, s, u] = unit.recompute_s
            every = st.layers * r[j, s].sum()
            if every > 0 and st.full_recompute_s < every:   # full recomputation is the cheaper way
                r[j, s] *= st.full_recompute_s / every
            least[j, s] = M0[j, s] - st.layers * a[j, s].sum()
    if np.all(keep > capacity * (1 + MEMORY_SLACK), axis=1).any():
        j = int(np.argmax(np.all(keep > capacity * (1 + MEMORY_SLACK), axis=1)))
        return (f"stage {j} keeps at least {keep[j].min() / GB:.1f} GB per die (state, gradients, buffers), "
                f"more than the die's {capacity / GB:.1f} GB")
    copies = par.tp * par.dp
    cap = healthy * capacity * (1 + MEMORY_SLACK)
    if copies * least.min(axis=1).sum() > cap:
        how = "even full recomputation" if scenario.training.recompute else "keeping every activation"
        return (f"{how} needs {copies * least.min(axis=1).sum() / GB:.1f} GB, the wafer's pooled "
                f"DRAM is {healthy * capacity / GB:.1f} GB")
    w0 = works[0]
    return LayoutData(par, schemes, w0.microbatches, copies, cap, w0.stages[0].optimizer_s, Fc, Bc, M0, a, r,
                      np.array([st.layers for st in w0.stages], dtype=float))


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


def lagrangian(d: LayoutData, w, mu: float) -> float:
    """LB(w, mu) (module docstring, step 4), lowered by its rounding margin."""
    w = _weights(d, w)
    mu = max(0.0, float(mu))
    aF, aB = coefficients(w, d.layout.pp, d.m)
    aF, aB = aF[:, None], aB[:, None]                                     # (p, 1)
    gain = np.minimum(0.0, aB[:, :, None] * d.r - mu * d.copies * d.a)    # (p, S, U)
    per_scheme = aF * d.Fc + aB * d.Bc + mu * d.copies * d.M0 + d.L[:, None] * gain.sum(axis=2)
    value = d.optimizer + per_scheme.min(axis=1).sum() - mu * d.cap
    magnitude = d.optimizer + (aF * d.Fc + aB * d.Bc).sum() + mu * d.copies * np.abs(d.M0).sum() + \
        (d.L[:, None, None] * np.abs(gain)).sum() + mu * d.cap
    return float(value - SAFETY * magnitude)


def best_mu(d: LayoutData, w) -> tuple[float, float]:
    """(LB, mu) with mu maximizing LB(w, .) (concave) by golden-section search."""
    _, aB = coefficients(_weights(d, w), d.layout.pp, d.m)
    ratios = (aB[:, None, None] * d.r)[d.a > 0] / (d.copies * d.a[d.a > 0])
    hi = float(ratios.max()) * 1.01 if ratios.size else 0.0
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
    """Weights tried for every layout: the inequality g_k or h_k that is largest without
    recomputation, and h of the last stage."""
    p, m = d.layout.pp, d.m
    F, B = d.Fc.min(axis=1), d.Bc.min(axis=1)
    T = F + B
    prefix = np.concatenate([[0.0], np.cumsum(T)[:-1]])
    g = prefix + m * T
    h = T.sum() - T + m * B + forward_counts(p, m) * F
    out = []
    for k in dict.fromkeys([int(np.argmax(np.concatenate([g, h]))), 2 * p - 1]):
        w = np.zeros(2 * p)
        w[k] = 1.0
        out.append(w)
    return out


@lru_cache(maxsize=1024)
def layer_compute(scenario: Scenario, tp: int) -> tuple[float, float]:
    """(forward, backward) compute seconds of one layer per micro-batch, the least over the TP
    schemes and layer kinds (the operators' rooflines of the workload's layer tables)."""
    from wafopt.workload.operators import build_layer, op_seconds

    wafer, llm = scenario.wafer, scenario.llm
    flops = wafer.die_flops * wafer.compute_efficiency
    kinds = {llm.is_moe_layer(i) for i in range(llm.layers)}
    f = b = math.inf
    for scheme in _schemes():
        for moe in kinds:
            t = build_layer(llm, scenario.training, tp, moe, scheme)
            f = min(f, sum(op_seconds(t.op(n).fwd, flops, wafer.dram_bandwidth) for n in t.forward if isinstance(n, str)))
            b = min(b, sum(op_seconds(t.op(n).bwd, flops, wafer.dram_bandwidth) for n in t.backward if isinstance(n, str)))
    return f, b


def quick_bound(scenario: Scenario, par: Parallel) -> LayoutBound:
    """The quick tier: the schedule bound (step 1) with h of the first and of the last stage, each
    stage's task times at least its layers' compute (step 2 without recomputation, embedding and
    LM head); infeasible only when the model state alone overflows a die. Needs no workload."""
    from wafopt.workload.model import split_layers

    healthy = len(scenario.mesh().healthy_dies)
    capacity = scenario.wafer.dram_capacity
    tr = scenario.training
    if par.dies > healthy:
        return LayoutBound(par, None, f"needs {par.dies} dies, {healthy} healthy", tier="quick")
    if par.pp > scenario.llm.layers or tr.global_batch % (tr.micro_batch * par.dp):
        return LayoutBound(par, None, "cannot be modelled: pp above the layers or batch not divisible", tier="quick")
    if _state_floor(scenario, par) > capacity * (1 + MEMORY_SLACK):
        return LayoutBound(par, None, f"model state at least {_state_floor(scenario, par) / GB:.1f} GB per die, more "
                                      f"than the die's {capacity / GB:.1f} GB", tier="quick")
    f, b = layer_compute(scenario, par.tp)
    m, p = tr.global_batch // (tr.micro_batch * par.dp), par.pp
    n = split_layers(scenario.llm.layers, p)
    total = sum(n) * (f + b)
    last = total + (m - 1) * n[-1] * (f + b)                                          # h_{p-1}
    first = total - n[0] * (f + b) + m * n[0] * b + max(1, m - min(p - 1, m)) * n[0] * f   # h_0
    return LayoutBound(par, max(first, last) * (1 - SAFETY), tier="quick")


def layout_bound(scenario: Scenario, par: Parallel) -> LayoutBound:
    """The full certified bound of layout `par` (refine() tightens it with the LP's weights)."""
    d = layout_data(scenario, par)
    if isinstance(d, str):
        return LayoutBound(par, None, d)
    best = None
    for w in cheap_weights(d):
        value, mu = best_mu(d, w)
        if best is None or value > best[0]:
            best = (value, w, mu)
    quick = quick_bound(scenario, par).value
    return LayoutBound(par, max(best[0], quick), "", [float(v) for v in best[1]], best[2], False, d)


def lp_weights(d: LayoutData) -> tuple[np.ndarray, float] | None:
    """(w, mu): the duals of the LP relaxation min z s.t. z >= g_k, z >= h_k (all k), pooled
    memory, x_ju <= L_j y_js, a convex combination y of schemes per stage (scipy's HiGHS); None
    if the LP fails. Only a guide: the certified value is LB(w, mu) whatever the LP returns."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    p, S, U = d.a.shape
    m = d.m
    nx, ny = p * S * U, p * S
    iF, iB, iz = nx + ny, nx + ny + p, nx + ny + 2 * p   # F_j, B_j, z
    n = iz + 1
    xi = (np.arange(p)[:, None, None] * S + np.arange(S)[None, :, None]) * U + np.arange(U)[None, None, :]
    yi = nx + np.arange(p)[:, None] * S + np.arange(S)[None, :]
    ub_r, ub_c, ub_v, b_ub = [], [], [], []

    def add(row, cols, vals):
        ub_r.extend([row] * len(cols))
        ub_c.extend(cols)
        ub_v.extend(vals)

    row = 0
    counts = forward_counts(p, m)
    for k in range(p):   # g_k - z <= -O
        cols = [iF + j for j in range(k + 1)] + [iB + j for j in range(k + 1)] + [iz]
        vals = [1.0] * k + [float(m)] + [1.0] * k + [float(m)] + [-1.0]
        add(row, cols, vals)
        b_ub.append(-d.optimizer)
        row += 1
    for k in range(p):   # h_k - z <= -O
        cols = [iF + j for j in range(p)] + [iB + j for j in range(p)] + [iz]
        vals = [counts[k] if j == k else 1.0 for j in range(p)] + [float(m) if j == k else 1.0 for j in range(p)] + [-1.0]
        add(row, cols, vals)
        b_ub.append(-d.optimizer)
        row += 1
    scale = 1.0 / GB
    mask = d.a > 0   # pooled memory: copies * sum (M0 y - a x) <= cap
    add(row, list(yi.ravel()), list((d.copies * d.M0 * scale).ravel()))
    add(row, list(xi[mask]), list((-d.copies * d.a * scale)[mask]))
    b_ub.append(d.cap * scale)
    row += 1
    for j in range(p):   # x_jsu <= L_j y_js
        for s in range(S):
            for u in range(U):
                add(row, [int(xi[j, s, u]), int(yi[j, s])], [1.0, -float(d.L[j])])
                b_ub.append(0.0)
                row += 1
    eq_r, eq_c, eq_v = [], [], []
    for j in range(p):   # sum_s y = 1; F_j = sum_s Fc y; B_j = sum_s (Bc y + r x)
        for s in range(S):
            eq_r += [j, p + j, 2 * p + j]
            eq_c += [int(yi[j, s])] * 3
            eq_v += [1.0, -float(d.Fc[j, s]), -float(d.Bc[j, s])]
            for u in range(U):
                if d.r[j, s, u] > 0:
                    eq_r.append(2 * p + j)
                    eq_c.append(int(xi[j, s, u]))
                    eq_v.append(-float(d.r[j, s, u]))
        eq_r += [p + j, 2 * p + j]
        eq_c += [iF + j, iB + j]
        eq_v += [1.0, 1.0]
    b_eq = np.concatenate([np.ones(p), np.zeros(2 * p)])
    cost = np.zeros(n)
    cost[iz] = 1.0
    bounds = [(0, None)] * (n - 1) + [(None, None)]
    res = linprog(cost, A_ub=coo_matrix((ub_v, (ub_r, ub_c)), shape=(row, n)).tocsr(), b_ub=np.array(b_ub),
                  A_eq=coo_matrix((eq_v, (eq_r, eq_c)), shape=(3 * p, n)).tocsr(), b_eq=b_eq, bounds=bounds,
                  method="highs")
    if res.status != 0:
        return None
    duals = -np.asarray(res.ineqlin.marginals)
    w = np.maximum(duals[:2 * p], 0.0)
    if not w.sum() > 0:
        return None
    return w / w.sum(), max(0.0, float(duals[2 * p])) * scale


def refine(bound: LayoutBound) -> LayoutBound:
    """The bound with (w, mu) from the LP relaxation, when that proves more."""
    if not bound.feasible or bound.refined or bound.data is None:
        return bound
    found = lp_weights(bound.data)
    if found is None:
        bound.refined = True
        return bound
    w, _ = found
    value, mu = best_mu(bound.data, w)    # the LP's mu, polished for the certified value
    if value > bound.value:
        bound.value = value
    bound.w, bound.mu = [float(v) for v in w], mu
    bound.refined = True
    return bound


def space_bounds(scenario: Scenario, stopped=lambda: False) -> list[LayoutBound]:
    """The quick bound of every layout of the space (stops early, returning what it has, when
    `stopped()` turns true); tighten() upgrades the ones that matter."""
    out = []
    for par in layout_space(scenario):
        if stopped():
            break
        out.append(quick_bound(scenario, par))
    return out


def upgrade(scenario: Scenario, bounds: list[LayoutBound], k: int) -> None:
    """One tier up for bounds[k]: quick -> full -> LP-refined."""
    b = bounds[k]
    if b.tier == "quick":
        bounds[k] = layout_bound(scenario, b.layout)
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


def certified_value(scenario: Scenario, par: Parallel, tier: str, w=None, mu: float | None = None
                    ) -> tuple[float | None, str]:
    """What certify re-derives for one layout at the certificate's tier: the quick bound, or the
    full one, and LB(w, mu) where the certificate gives weights."""
    bound = quick_bound(scenario, par) if tier == "quick" else layout_bound(scenario, par)
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
        row = [b.layout.tp, b.layout.pp, b.layout.dp, b.value]
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
    listed: dict[tuple[int, int, int], list] = {}
    for k, row in enumerate(rows):
        if (not isinstance(row, list) or len(row) not in (4, 6)
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in row[:3])):
            raise CertificateError(f"layouts[{k}] must be [tp, pp, dp, bound] or [tp, pp, dp, bound, w, mu]")
        listed[tuple(row[:3])] = row
    space = layout_space(scenario)
    keys = {(p.tp, p.pp, p.dp) for p in space}
    if set(listed) != keys:
        missing = sorted(keys - set(listed))[:3]
        extra = sorted(set(listed) - keys)[:3]
        raise CertificateError(f"the certificate lists {len(listed)} layouts, the space has {len(keys)}"
                               + (f"; missing {missing}" if missing else "") + (f"; not in the space {extra}" if extra else ""))
    least = None
    for par in space:
        row = listed[(par.tp, par.pp, par.dp)]
        w, mu = (row[4], row[5]) if len(row) == 6 else (None, None)
        if w is not None and (not isinstance(w, list) or not isinstance(mu, (int, float)) or isinstance(mu, bool)):
            raise CertificateError(f"layout tp{par.tp} pp{par.pp} dp{par.dp}: weights must be a list and mu a number")
        try:
            value, reason = certified_value(scenario, par, "full" if len(row) == 6 else "quick", w, mu)
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
