"""Exact placement models (docs/placement.md): pyomo MILP (HiGHS), CP-SAT, Gilmore-Lawler bound,
RLT-1 LP bound (highspy interior point).

All of them minimize (or bound) the base objective sum_{i<j} C[i][j] * D(slot i, slot j) on each candidate tile
shape (Layout); it is a proven lower bound of the full Eq. 2 objective. Shared pieces:
- Gilmore-Lawler values L[i][k] (the cheapest way stage i in slot k can talk to all other stages)
  give the GL bound and the per-stage "star" cuts  sum_{j} C[i][j] d_ij >= sum_k L[i][k] x_ik;
- symmetry breaking: the heaviest stage is restricted to one slot per orbit of the grid
  symmetries that preserve D (reflections, and transpositions of a square slot grid);
- warm start: the given plan, or a short iterated local search (full objective) from serpentine;
  with Mem_pairs, a plan whose full objective meets the proven base bound is optimal for Eq. 2.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from wafopt.heuristics.placement import Fitness, descend, iterated_descent
from wafopt.problems.placement.instance import Layout, PlacementInstance
from wafopt.core.result import MethodResult
from wafopt.core.budget import SolveOptions

EDGE_LINEARIZATION_MAX_VARS = 60_000  # above this the MILP uses the compact Manhattan model
WARM_START_S = 2.0                    # budget of the local-search warm start (when none is given)
CPSAT_SCALE_DIGITS = 9                # volumes are scaled by 10^k (k <= 9) to integers when exact


# --- data shared by the models -----------------------------------------------------------------

def gilmore_lawler(C: np.ndarray, D: np.ndarray) -> np.ndarray:
    """L[i][k] = min over placements of the other stages in slots other than k of sum_j C[i][j] D[k][l_j]
    = sorted(C[i, j != i], descending) . sorted(D[k, l != k], ascending)[:n-1]  (rearrangement)."""
    n, m = C.shape[0], D.shape[0]
    flows = np.sort(np.where(np.eye(n, dtype=bool), -np.inf, C), axis=1)[:, ::-1][:, :n - 1]   # (n, n-1)
    dists = np.sort(np.where(np.eye(m, dtype=bool), np.inf, D), axis=1)[:, :n - 1]             # (m, n-1)
    return flows @ dists.T


def linear_assignment(cost: np.ndarray) -> tuple[float, np.ndarray]:
    """Minimum-cost assignment of rows to distinct columns (rows <= columns): shortest augmenting
    paths with potentials (Hungarian method, O(n^2 m)). Returns (cost, column of each row)."""
    n, m = cost.shape
    INF = np.inf
    u, v = np.zeros(n + 1), np.zeros(m + 1)
    row_of = np.zeros(m + 1, dtype=int)          # row_of[col] (1-based rows, 0 = free)
    way = np.zeros(m + 1, dtype=int)
    for i in range(1, n + 1):
        row_of[0] = i
        j0 = 0
        minv = np.full(m + 1, INF)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = row_of[j0]
            free = ~used[1:]
            reduced = cost[i0 - 1] - u[i0] - v[1:]
            better = free & (reduced < minv[1:])
            minv[1:][better] = reduced[better]
            way[1:][better] = j0
            cand = np.where(free, minv[1:], INF)
            j1 = int(np.argmin(cand)) + 1
            delta = cand[j1 - 1]
            u[row_of[used]] += delta
            v[used] -= delta
            minv[1:][free] -= delta
            j0 = j1
            if row_of[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            row_of[j0] = row_of[j1]
            j0 = j1
    col = np.zeros(n, dtype=int)
    for j in range(1, m + 1):
        if row_of[j]:
            col[row_of[j] - 1] = j - 1
    return float(cost[np.arange(n), col].sum()), col


def edges(C: np.ndarray) -> list[tuple[int, int, float]]:
    n = C.shape[0]
    return [(i, j, float(C[i, j])) for i in range(n) for j in range(i + 1, n) if C[i, j] > 0]


def anchor(C: np.ndarray) -> int:
    """The stage symmetry breaking fixes: the one with the largest total weight."""
    return int(np.argmax(C.sum(axis=1)))


def orbit_representatives(symmetries: list[np.ndarray], m: int) -> list[int]:
    """One slot per orbit of the symmetry group (the smallest index)."""
    return sorted({min(int(g[k]) for g in symmetries) for k in range(m)})


def canonical(symmetries: list[np.ndarray], perm: np.ndarray, stage: int) -> np.ndarray:
    """Apply the symmetry that maps stage's slot to its orbit representative (same objective)."""
    target = min(int(g[perm[stage]]) for g in symmetries)
    for g in symmetries:
        if g[perm[stage]] == target:
            return g[perm]
    return perm


def route_symmetries(fit: Fitness, lay: Layout) -> list[np.ndarray]:
    """The D-preserving symmetries g that also map routes to routes: some link bijection sigma has
    route(g(k), g(l)) = sigma(route(k, l)) for all slot pairs, so every gamma is unchanged (grid
    reflections qualify; a transposition turns XY routes into YX routes and does not)."""
    m = fit.m
    signature = {}
    for link in range(fit.R.shape[2]):
        pairs = frozenset(zip(*np.nonzero(fit.R[:, :, link])))
        if pairs:
            signature[pairs] = link
    out = []
    for g in lay.symmetries:
        images = [frozenset((int(g[k]), int(g[l])) for k, l in pairs) for pairs in signature]
        if all(img in signature for img in images):
            out.append(g)
    return out


def best_symmetric(fit: Fitness, lay: Layout, perm: np.ndarray) -> np.ndarray:
    """Among the symmetric images of perm (equal base objective) the one with the least full objective."""
    images = np.array([g[perm] for g in lay.symmetries])
    return images[int(np.argmin(fit(images)))]


def start_perm(inst: PlacementInstance, lay: Layout, fit: Fitness, options: SolveOptions) -> np.ndarray:
    """Warm start on this layout: the given plan if it uses this tile, else a descent from serpentine."""
    plan = options.warm_start
    if plan and tuple(plan.get("tile", inst.tiles[0])) == lay.tile:
        try:
            used = [lay.index[tuple(s)] for s in plan["assignment"]]
            if len(used) == inst.stages and len(set(used)) == len(used):
                free = [k for k in range(len(lay.slots)) if k not in set(used)]
                return np.array(used + free)
        except (KeyError, TypeError):
            pass
    budget = WARM_START_S if options.time_limit is None else min(WARM_START_S, 0.1 * options.time_limit)
    rng = np.random.default_rng(options.seed)
    return iterated_descent(fit, np.array(lay.order(True)), rng, time.monotonic() + budget, max_stall=50)[0]


def _solve_layouts(inst: PlacementInstance, options: SolveOptions, solve_one, solver_name: str) -> MethodResult:
    """Run `solve_one(lay, fit, L, start, time_limit) -> (perm|None, status, bound)` per tile shape;
    combine: bound = min over shapes, plan = best full objective, optimal only if every shape is
    proven and the best plan's full objective equals the bound."""
    started = time.monotonic()
    best_value, best_plan, bounds, statuses, stats = np.inf, None, [], [], {}
    layouts = inst.layouts
    for k, lay in enumerate(layouts):
        remaining = options.remaining(started)
        share = None if remaining is None else max(0.5, remaining / (len(layouts) - k))
        fit = Fitness(inst, lay)
        L = gilmore_lawler(inst.weights, lay.distance)
        glb_value = linear_assignment(L)[0] / 2
        start = start_perm(inst, lay, fit, options)
        start_value = fit.one(start)
        if start_value < best_value:
            best_value, best_plan = start_value, lay.plan(start[:inst.stages])
            options.incumbent(best_plan)
        perm, status, bound = solve_one(lay, fit, L, start, share)
        bound = max(glb_value, bound) if bound is not None else glb_value
        if perm is not None:
            perm = best_symmetric(fit, lay, perm)
            if fit.pairs:  # the model ignores routing conflicts: polish on the full objective
                perm = descend(fit, perm, time.monotonic() + 2.0)[0]
            value = fit.one(perm)
            if value < best_value - 1e-9:
                best_value, best_plan = value, lay.plan(perm[:inst.stages])
                options.incumbent(best_plan)
        bounds.append(bound)
        statuses.append(status)
        stats[f"{lay.tile[0]}x{lay.tile[1]}"] = {"status": status, "bound": bound, "gl_bound": glb_value}
    bound = min(bounds)
    proven = all(s == "optimal" for s in statuses)
    status = "optimal" if proven and best_value <= bound * (1 + 1e-9) + 1e-9 else "feasible"
    message = ""
    if proven and status != "optimal":
        message = "base objective proven optimal; the plan pays a routing-conflict penalty (Eq. 2 gamma)"
    options.incumbent(best_plan, bound)
    return MethodResult(best_plan, status, bound, solver_name, message, {"layouts": stats})


# --- MILP (pyomo + HiGHS) -----------------------------------------------------------------------------

def build_milp(inst: PlacementInstance, lay: Layout, L: np.ndarray):
    """Assignment MILP; distances by the compact Manhattan model or by the edge linearization."""
    import pyomo.environ as pyo

    C, D = inst.weights, lay.distance
    n, m = inst.stages, len(lay.slots)
    E = edges(C)
    xy = lay.coordinates
    off = D[~np.eye(m, dtype=bool)]
    dmin = float(off.min()) if off.size else 0.0
    compact = lay.is_manhattan and len(E) * m * (m - 1) > EDGE_LINEARIZATION_MAX_VARS

    M = pyo.ConcreteModel("placement")
    M.I, M.K, M.E = pyo.RangeSet(0, n - 1), pyo.RangeSet(0, m - 1), pyo.RangeSet(0, len(E) - 1)
    M.x = pyo.Var(M.I, M.K, domain=pyo.Binary)            # x[i,k] = 1: stage i in slot k
    M.d = pyo.Var(M.E, domain=pyo.NonNegativeReals)       # d[e]: hop distance of flow edge e
    M.one_slot = pyo.Constraint(M.I, rule=lambda M, i: sum(M.x[i, k] for k in M.K) == 1)
    M.one_stage = pyo.Constraint(M.K, rule=lambda M, k: sum(M.x[i, k] for i in M.I) <= 1)
    if compact:
        M.dx = pyo.Var(M.E, domain=pyo.NonNegativeReals)  # |row_i - row_j| of edge e
        M.dy = pyo.Var(M.E, domain=pyo.NonNegativeReals)  # |col_i - col_j| of edge e
        coord = lambda i, a: sum(float(xy[k, a]) * M.x[i, k] for k in M.K)
        M.dx_pos = pyo.Constraint(M.E, rule=lambda M, e: M.dx[e] >= coord(E[e][0], 0) - coord(E[e][1], 0))
        M.dx_neg = pyo.Constraint(M.E, rule=lambda M, e: M.dx[e] >= coord(E[e][1], 0) - coord(E[e][0], 0))
        M.dy_pos = pyo.Constraint(M.E, rule=lambda M, e: M.dy[e] >= coord(E[e][0], 1) - coord(E[e][1], 1))
        M.dy_neg = pyo.Constraint(M.E, rule=lambda M, e: M.dy[e] >= coord(E[e][1], 1) - coord(E[e][0], 1))
        M.distance = pyo.Constraint(M.E, rule=lambda M, e: M.d[e] == M.dx[e] + M.dy[e])
        M.distinct = pyo.Constraint(M.E, rule=lambda M, e: M.d[e] >= dmin)   # stages never share a slot
    else:
        M.KL = pyo.Set(initialize=[(k, l) for k in range(m) for l in range(m) if k != l], dimen=2)
        M.y = pyo.Var(M.E, M.KL, domain=pyo.NonNegativeReals)  # y[e,k,l] = x[i,k] * x[j,l] for e = (i, j)
        M.from_i = pyo.Constraint(M.E, M.K, rule=lambda M, e, k: sum(
            M.y[e, k, l] for l in M.K if l != k) == M.x[E[e][0], k])
        M.to_j = pyo.Constraint(M.E, M.K, rule=lambda M, e, l: sum(
            M.y[e, k, l] for k in M.K if k != l) == M.x[E[e][1], l])
        M.distance = pyo.Constraint(M.E, rule=lambda M, e: M.d[e] == sum(
            float(D[k, l]) * M.y[e, k, l] for k, l in M.KL))
    incident = {i: [e for e, (a, b, _) in enumerate(E) if i in (a, b)] for i in range(n)}
    M.star = pyo.Constraint(M.I, rule=lambda M, i: sum(E[e][2] * M.d[e] for e in incident[i]) >= sum(
        float(L[i, k]) * M.x[i, k] for k in M.K) if incident[i] else pyo.Constraint.Skip)
    a = anchor(C)
    reps = set(orbit_representatives(lay.symmetries, m))
    for k in range(m):
        if k not in reps:
            M.x[a, k].fix(0)                                  # symmetry breaking
    M.cost = pyo.Objective(expr=sum(w * M.d[e] for e, (_, _, w) in enumerate(E)), sense=pyo.minimize)
    M._edges, M._compact, M._anchor = E, compact, a
    return M


def warm_start_milp(M, lay: Layout, perm: np.ndarray, n: int) -> None:
    xy, D = lay.coordinates, lay.distance
    slot = [int(k) for k in perm[:n]]
    for (i, k) in M.x:
        if not M.x[i, k].fixed:
            M.x[i, k].set_value(1 if slot[i] == k else 0)
    for e, (i, j, _) in enumerate(M._edges):
        M.d[e].set_value(float(D[slot[i], slot[j]]))
        if M._compact:
            M.dx[e].set_value(abs(float(xy[slot[i], 0] - xy[slot[j], 0])))
            M.dy[e].set_value(abs(float(xy[slot[i], 1] - xy[slot[j], 1])))
        else:
            for (k, l) in M.KL:
                M.y[e, k, l].set_value(1.0 if (k, l) == (slot[i], slot[j]) else 0.0)


def decode_milp(M, n: int, m: int) -> np.ndarray:
    slot = [max(range(m), key=lambda k: M.x[i, k].value or 0.0) for i in range(n)]
    return np.array(slot + [k for k in range(m) if k not in set(slot)])


def milp(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    from wafopt.solvers.backends import highs_version, solve_pyomo

    def solve_one(lay, fit, L, start, limit):
        n, m = inst.stages, len(lay.slots)
        M = build_milp(inst, lay, L)
        start = canonical(lay.symmetries, start, M._anchor)
        warm_start_milp(M, lay, start, n)
        out = solve_pyomo(M, options, warm_start=True, time_limit=limit)
        perm = decode_milp(M, n, m) if out.has_solution else None
        return perm, out.status, out.bound

    return _solve_layouts(inst, options, solve_one, highs_version())


# --- CP-SAT ----------------------------------------------------------------------------------------------

def integer_scale(values: np.ndarray) -> tuple[float, bool]:
    """A factor s = 10^k / g making every value an integer exactly (exact=True), else s with
    max(value) * s ~ 1e6 and the caller floors (a conservative bound)."""
    from wafopt.core.numeric import decimal_scale

    values = values[values > 0]
    if values.size == 0:
        return 1.0, True
    scale = decimal_scale(values.tolist(), CPSAT_SCALE_DIGITS, limit=2.0 ** 40)
    if scale is not None:
        g = int(np.gcd.reduce(np.round(values * scale).astype(np.int64)))
        return scale / g, True
    return 1e6 / values.max(), False


def build_cpsat(inst: PlacementInstance, lay: Layout, scale: float, conflicts: Fitness | None = None,
                lower: int | None = None):
    """x[i,k] booleans with one slot per stage / one stage per slot; distances by |drow| + |dcol|
    (Manhattan) or element on the distance table; integer weights floor(scale * C). With
    `conflicts` (and Mem_pairs) the objective is the full Eq. 2 objective, else the base one."""
    from ortools.sat.python import cp_model

    C, D = inst.weights, lay.distance
    n, m = inst.stages, len(lay.slots)
    W = np.floor(C * scale + 1e-9).astype(np.int64)
    E = [(i, j, int(W[i, j])) for i, j, _ in edges(C)]
    L = np.floor(gilmore_lawler(W.astype(float), D) + 1e-9).astype(np.int64)
    Dint = D.astype(np.int64)
    dmax = int(Dint.max()) if m > 1 else 0
    off = Dint[~np.eye(m, dtype=bool)]
    dmin = int(off.min()) if off.size else 0
    xy = lay.coordinates.astype(np.int64)

    model = cp_model.CpModel()
    x = [[model.NewBoolVar(f"x{i}_{k}") for k in range(m)] for i in range(n)]   # stage i in slot k
    slot = [model.NewIntVar(0, m - 1, f"slot{i}") for i in range(n)]           # slot index of stage i
    d = [model.NewIntVar(dmin, dmax, f"d{e}") for e in range(len(E))]          # hop distance of edge e
    for i in range(n):
        model.AddExactlyOne(x[i])
        model.Add(slot[i] == sum(k * x[i][k] for k in range(m)))
    for k in range(m):
        model.AddAtMostOne(x[i][k] for i in range(n))
    model.AddAllDifferent(slot)
    if lay.is_manhattan:
        rows = [model.NewIntVar(int(xy[:, 0].min()), int(xy[:, 0].max()), f"row{i}") for i in range(n)]
        cols = [model.NewIntVar(int(xy[:, 1].min()), int(xy[:, 1].max()), f"col{i}") for i in range(n)]
        for i in range(n):
            model.Add(rows[i] == sum(int(xy[k, 0]) * x[i][k] for k in range(m)))
            model.Add(cols[i] == sum(int(xy[k, 1]) * x[i][k] for k in range(m)))
        for e, (i, j, _) in enumerate(E):
            dr = model.NewIntVar(0, dmax, f"dr{e}")
            dc = model.NewIntVar(0, dmax, f"dc{e}")
            model.AddAbsEquality(dr, rows[i] - rows[j])
            model.AddAbsEquality(dc, cols[i] - cols[j])
            model.Add(d[e] == dr + dc)
    else:
        flat = [int(v) for v in Dint.ravel()]
        for e, (i, j, _) in enumerate(E):
            index = model.NewIntVar(0, m * m - 1, f"pair{e}")
            model.Add(index == m * slot[i] + slot[j])
            model.AddElement(index, flat, d[e])
    for i in range(n):                                                          # Gilmore-Lawler star cuts
        inc = [(e, w) for e, (a, b, w) in enumerate(E) if i in (a, b)]
        if inc:
            model.Add(sum(w * d[e] for e, w in inc) >= sum(int(L[i, k]) * x[i][k] for k in range(m)))
    a = anchor(C)
    symmetries = route_symmetries(conflicts, lay) if conflicts is not None and inst.pairs else lay.symmetries
    reps = set(orbit_representatives(symmetries, m))
    for k in range(m):
        if k not in reps:
            model.Add(x[a][k] == 0)                                             # symmetry breaking
    objective = sum(w * d[e] for e, (_, _, w) in enumerate(E))
    if conflicts is not None and inst.pairs:
        objective += conflict_penalty(model, conflicts, slot, d, E, dmax, scale)
    if lower is not None:
        model.Add(objective >= lower)                                           # proven base bound
    model.Minimize(objective)
    return model, x, slot, a, symmetries


def conflict_penalty(model, fit: Fitness, slot, d, E, dmax: int, scale: float):
    """Exact Eq. 2 penalty sum_p floor(scale * vol_p) * D_p * gamma_p: the XY route of a slot pair is
    a table R[k, l, link]; per link, flow use u (element on the table), the union U >= u, pair use a,
    conflict c >= a + U - 1 (minimization keeps U and c at their least values), gamma_p = sum c."""
    m = fit.m
    R = fit.R
    links = np.nonzero(R.any(axis=(0, 1)))[0]
    index = {}

    def route_use(i, j, link, name):
        if (i, j) not in index:
            index[i, j] = model.NewIntVar(0, m * m - 1, f"route{i}_{j}")
            model.Add(index[i, j] == m * slot[i] + slot[j])
        use = model.NewBoolVar(name)
        model.AddElement(index[i, j], [int(v) for v in R[:, :, link].ravel()], use)
        return use

    union = {}
    for link in links:                                                      # U[link]: some flow uses it
        union[link] = model.NewBoolVar(f"U{link}")
        for i, j in zip(fit.flow_i, fit.flow_j):
            model.AddImplication(route_use(int(i), int(j), link, f"u{i}_{j}_{link}"), union[link])
    edge_of = {(i, j): e for e, (i, j, _) in enumerate(E)}
    penalty = 0
    for p, (s, h, vol) in enumerate(fit.pairs):
        weight = int(np.floor(vol * scale + 1e-9))
        if weight == 0:
            continue
        conflict = []
        for link in links:
            c = model.NewBoolVar(f"c{p}_{link}")
            model.AddBoolOr([route_use(s, h, link, f"a{p}_{link}").Not(), union[link].Not(), c])
            conflict.append(c)
        gamma = model.NewIntVar(0, len(links), f"gamma{p}")
        model.Add(gamma == sum(conflict))
        product = model.NewIntVar(0, dmax * len(links), f"penalty{p}")
        model.AddMultiplicationEquality(product, [d[edge_of[min(s, h), max(s, h)]], gamma])
        penalty += weight * product
    return penalty


def cpsat(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    from wafopt.solvers.backends import cpsat_version, solve_cpsat

    volumes = np.concatenate([np.triu(inst.weights, 1).ravel(), [v for _, _, v in inst.pairs]])
    scale, exact = integer_scale(volumes)

    def solve_model(lay, fit, start, limit, conflicts, lower=None):
        n, m = inst.stages, len(lay.slots)
        model, x, slot, a, symmetries = build_cpsat(inst, lay, scale, conflicts, lower)
        start = canonical(symmetries, start, a)
        for i in range(n):
            model.AddHint(slot[i], int(start[i]))
            for k in range(m):
                model.AddHint(x[i][k], int(start[i] == k))

        def decode(values) -> np.ndarray:
            used = [int(values.Value(slot[i])) for i in range(n)]
            return np.array(used + [k for k in range(m) if k not in set(used)])

        objective = "Eq. 2" if conflicts is not None else "base"

        def on_solution(cb):
            options.incumbent(lay.plan(decode(cb)[:n]))
            options.progress(f"cp-sat tile {lay.tile[0]}x{lay.tile[1]}, {objective} objective: incumbent "
                             f"{cb.ObjectiveValue() / scale:.6g}, bound {cb.BestObjectiveBound() / scale:.6g}")

        out, solver = solve_cpsat(model, options, on_solution=on_solution, time_limit=limit)
        return (decode(solver) if out.has_solution else None), out

    def solve_one(lay, fit, L, start, limit):
        lower = None
        if inst.pairs:   # phase 1: the base model (fast) proves a bound the full model starts from
            started = time.monotonic()
            perm, out = solve_model(lay, fit, start, None if limit is None else limit / 3, None)
            if perm is not None and fit.one(perm) < fit.one(start):
                start = perm
            if out.bound is not None:
                lower = int(np.ceil(out.bound - 1e-6))
            if limit is not None:
                limit = max(0.5, limit - (time.monotonic() - started))
        perm, out = solve_model(lay, fit, start, limit, fit if inst.pairs else None, lower)
        bound = out.bound if out.bound is not None else lower
        bound = bound / scale if bound is not None else None   # floored weights: conservative
        status = out.status if exact or out.status != "optimal" else "feasible"
        return perm, status, bound

    result = _solve_layouts(inst, options, solve_one, cpsat_version())
    result.stats["weight_scale"] = scale
    result.stats["exact_scaling"] = exact
    return result


# --- Gilmore-Lawler bound -----------------------------------------------------------------------------------

def glb(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    """The Gilmore-Lawler bound (min over tile shapes) of the base objective; the plan returned is the
    assignment of the linear assignment problem that yields it (feasible, not optimized)."""
    best_value, best_plan, bounds = np.inf, None, {}
    for lay in inst.layouts:
        fit = Fitness(inst, lay)
        value, col = linear_assignment(gilmore_lawler(inst.weights, lay.distance))
        bounds[f"{lay.tile[0]}x{lay.tile[1]}"] = value / 2
        objective = fit.one(np.asarray(col))
        if objective < best_value:
            best_value, best_plan = objective, lay.plan(col)
    bound = min(bounds.values())
    status = "optimal" if best_value <= bound * (1 + 1e-9) + 1e-9 else "feasible"
    return MethodResult(best_plan, status, bound, "gilmore-lawler", stats={"bounds": bounds})



# --- RLT-1 (Adams-Johnson) LP bound ---------------------------------------------------------------------

RLT1_MARGIN = 1e-9      # relative safety margin on the floating-point Lagrangian bound


@dataclass
class Rlt1Lp:
    """The RLT-1 LP of one tile shape as arrays: min cost . z subject to row_lower <= A z <= row_upper
    and col_lower <= z <= col_upper, A column-wise (CSC: start, index, value)."""

    cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray
    start: np.ndarray
    index: np.ndarray
    value: np.ndarray
    pairs: int            # stage pairs with product variables
    integral: bool        # integer C and D: every base objective value is an integer

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.row_lower), len(self.cost)


def rlt1_pairs(C: np.ndarray, all_pairs: bool) -> tuple[np.ndarray, np.ndarray]:
    """Stage pairs i < j that get product variables: all of them, or only those with C[i][j] > 0."""
    iu, ju = np.triu_indices(C.shape[0], 1)
    if all_pairs:
        return iu, ju
    keep = C[iu, ju] > 0
    return iu[keep], ju[keep]


def build_rlt1(inst: PlacementInstance, lay: Layout, all_pairs: bool = False) -> Rlt1Lp:
    """LP relaxation of the Adams-Johnson RLT-1 model of the base objective (docs/placement.md)."""
    # data
    C, D = inst.weights, lay.distance
    n, m = inst.stages, len(lay.slots)
    pi, pj = rlt1_pairs(C, all_pairs)
    P = len(pi)
    qk, ql = np.nonzero(~np.eye(m, dtype=bool))       # ordered slot pairs q = (k, l), k != l, row-major
    Q = len(qk)
    q_reverse = ql * (m - 1) + qk - (qk > ql)         # index of (l, k)
    degree = np.bincount(np.concatenate([pi, pj]), minlength=n)

    # variables
    nx = n * m                                        # x[i,k] (column i*m + k): stage i in slot k
    yp, yq = np.divmod(np.arange(P * Q), Q)           # y[p,q] (column nx + p*Q + q) = x[i_p, k_q] x[j_p, l_q]
    ncol = nx + P * Q
    cost = np.concatenate([np.zeros(nx), C[pi[yp], pj[yp]] * D[qk[yq], ql[yq]]])
    col_lower, col_upper = np.zeros(ncol), np.ones(ncol)
    a = anchor(C)
    reps = orbit_representatives(lay.symmetries, m)
    col_upper[a * m + np.setdiff1d(np.arange(m), reps)] = 0.0   # symmetry breaking

    # constraints: (first row, count, lower, upper) per family, then the entries (row, column, coefficient)
    one_slot, one_stage = 0, n                        # sum_k x[i,k] = 1;  sum_i x[i,k] <= 1 (= 1 if m == n)
    from_i = n + m                                    # sum_l y[p,(k,l)] = x[i_p, k]
    to_j = from_i + P * m                             # sum_k y[p,(k,l)] = x[j_p, l]
    stage_sum = to_j + P * m                          # sum_{j != i} y(i at k, j at l) <= x[i,k] (= if complete)
    nrow = stage_sum + n * Q
    complete = (degree == n - 1) & (m == n)           # every partner of stage i has a y and every slot is used
    row_lower = np.concatenate([np.ones(n), np.ones(m) if m == n else np.full(m, -np.inf),
                                np.zeros(2 * P * m), np.where(np.repeat(complete, Q), 0.0, -np.inf)])
    row_upper = np.concatenate([np.ones(n + m), np.zeros(2 * P * m + n * Q)])

    xi, xk = np.divmod(np.arange(nx), m)
    pm, km = np.divmod(np.arange(P * m), m)
    iq, qq = np.divmod(np.arange(n * Q), Q)
    ycol = nx + np.arange(P * Q)
    rows = [one_slot + xi, one_stage + xk, from_i + pm * m + km, to_j + pm * m + km, stage_sum + iq * Q + qq,
            from_i + yp * m + qk[yq], to_j + yp * m + ql[yq],
            stage_sum + pi[yp] * Q + yq, stage_sum + pj[yp] * Q + q_reverse[yq]]
    cols = [np.arange(nx), np.arange(nx), pi[pm] * m + km, pj[pm] * m + km, iq * m + qk[qq],
            ycol, ycol, ycol, ycol]
    vals = [1.0, 1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0]
    row = np.concatenate(rows)
    col = np.concatenate(cols)
    val = np.concatenate([np.full(len(r), v) for r, v in zip(rows, vals)])
    order = np.argsort(col, kind="stable")
    start = np.concatenate([[0], np.cumsum(np.bincount(col, minlength=ncol))])
    integral = bool(np.all(C == np.round(C)) and np.all(D == np.round(D)) and C.sum() * D.max() < 2.0 ** 52)
    return Rlt1Lp(cost, col_lower, col_upper, row_lower, row_upper, start.astype(np.int32),
                  row[order].astype(np.int32), val[order], P, integral)


def lagrangian_bound(lp: Rlt1Lp, row_dual: np.ndarray) -> float:
    """Weak duality for ANY row prices pi (no optimality or feasibility of the LP solution needed):
    min c.z >= min_{r in [row_lower, row_upper]} pi.r + min_{z in [col_lower, col_upper]} (c - A^T pi).z.
    Prices that would need an infinite row bound are set to 0; the sum is exact (fsum) and reduced by
    RLT1_MARGIN times the sum of the magnitudes of its terms (the rounding of c - A^T pi)."""
    pi = np.array(row_dual, dtype=float)
    pi[(pi > 0) & ~np.isfinite(lp.row_lower)] = 0.0
    pi[(pi < 0) & ~np.isfinite(lp.row_upper)] = 0.0
    row_term = np.where(pi > 0, pi * np.nan_to_num(lp.row_lower, neginf=0.0),
                        pi * np.nan_to_num(lp.row_upper, posinf=0.0))
    column = np.repeat(np.arange(len(lp.cost)), np.diff(lp.start))
    reduced = lp.cost - np.bincount(column, weights=lp.value * pi[lp.index], minlength=len(lp.cost))
    col_term = np.where(reduced > 0, reduced * lp.col_lower, reduced * lp.col_upper)
    terms = np.concatenate([row_term, col_term])
    return math.fsum(terms) - RLT1_MARGIN * math.fsum(np.abs(terms))


def solve_rlt1(lp: Rlt1Lp, options: SolveOptions, time_limit: float | None) -> dict:
    """HiGHS interior point without crossover; the bound is the Lagrangian bound of its row duals
    (valid whether or not HiGHS reached optimality), rounded up when the data are integral."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("solver", "ipm")
    h.setOptionValue("run_crossover", "off")
    h.setOptionValue("random_seed", int(options.seed) % 2147483647)
    if time_limit is not None:
        h.setOptionValue("time_limit", max(1e-3, float(time_limit)))
    nrow, ncol = lp.shape
    model = highspy.HighsLp()
    model.num_col_, model.num_row_ = ncol, nrow
    model.col_cost_, model.col_lower_, model.col_upper_ = lp.cost, lp.col_lower, lp.col_upper
    model.row_lower_, model.row_upper_ = lp.row_lower, lp.row_upper
    matrix = model.a_matrix_
    matrix.format_, matrix.num_col_, matrix.num_row_ = highspy.MatrixFormat.kColwise, ncol, nrow
    matrix.start_, matrix.index_, matrix.value_ = lp.start, lp.index, lp.value
    model.a_matrix_ = matrix
    h.passModel(model)
    started = time.monotonic()
    h.run()
    out = {"highs_status": h.modelStatusToString(h.getModelStatus()), "solve_s": round(time.monotonic() - started, 2),
           "lp_objective": None, "lagrangian_bound": None, "bound": None}
    solution = h.getSolution()
    if solution.dual_valid:
        out["lp_objective"] = float(h.getInfo().objective_function_value)
        bound = lagrangian_bound(lp, np.asarray(solution.row_dual))
        out["lagrangian_bound"] = bound
        out["bound"] = float(math.ceil(bound)) if lp.integral else bound
    return out


def rlt1(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    """The RLT-1 LP bound (min over tile shapes, never below Gilmore-Lawler) of the base objective, with
    the local-search plan of the warm start; `optimal` only when the bound meets that plan."""
    from wafopt.solvers.backends import highs_version

    started = time.monotonic()
    report, fallback = {}, []

    def solve_one(lay, fit, L, start, limit):
        tile = f"{lay.tile[0]}x{lay.tile[1]}"
        remaining = options.remaining(started)
        limit = remaining if limit is None else min(limit, remaining if remaining is not None else limit)
        built = time.monotonic()
        lp = build_rlt1(inst, lay)
        build_s = time.monotonic() - built
        if limit is not None:
            limit -= build_s
        options.progress(f"rlt1 tile {tile}: LP {lp.shape[0]} rows x {lp.shape[1]} columns, interior point",
                         force=True)
        out = solve_rlt1(lp, options, limit) if limit is None or limit > 0 else {
            "highs_status": "not started (time limit)", "bound": None}
        report[tile] = {"rows": lp.shape[0], "columns": lp.shape[1], "nonzeros": len(lp.value),
                        "build_s": round(build_s, 2), **out}
        bound = out["bound"]
        if bound is None or out["highs_status"] != "Optimal":
            fallback.append(f"{tile}: {out['highs_status']}")
        if bound is None:
            return None, "feasible", None
        base = float(fit.base(start[None, :inst.stages])[0])
        return None, "optimal" if bound >= base - 1e-9 * max(1.0, abs(base)) else "feasible", bound

    result = _solve_layouts(inst, options, solve_one, f"{highs_version()} ipm")
    for tile, stats in result.stats["layouts"].items():
        stats["rlt1"] = report.get(tile)
    if fallback:
        note = ("RLT-1 LP not solved to optimality (" + "; ".join(fallback) + "): the bound is "
                "max(Gilmore-Lawler, Lagrangian bound of the IPM's last duals) there")
        result.message = f"{result.message}; {note}" if result.message else note
    return result
