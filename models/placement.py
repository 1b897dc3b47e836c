"""Exact placement models (docs/placement.md): pyomo MILP (HiGHS), CP-SAT, Gilmore-Lawler bound,
RLT-1 LP bound (highspy interior point).

All of them minimize (or bound) the base objective sum_{i<j} C[i][j] * D(slot i, slot j) on each candidate tile
shape (Layout); it is a proven lower bound of the full Eq. 2 objective. Shared pieces:
- Gilmore-Lawler values L[i][k] (the cheapest way stage i in slot k can talk to all other stages)
  give the GL bound and the per-stage "star" cuts  sum_{j} C[i][j] d_ij >= sum_k L[i][k] x_ik;
- symmetry breaking: the heaviest stage is restricted to one slot per orbit of the grid
  symmetries that preserve D (reflections, and transpositions of a square slot grid);
- warm start: the given plan, else serpentine improved by the local search the composition layer
  injects (`LocalSearch`); with Mem_pairs, a plan whose full objective meets the proven base bound
  is optimal for Eq. 2.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import numpy as np

from wafopt.core.budget import SolveOptions, never
from wafopt.core.numeric import (
    MAX_EXACT,
    at_most,
    decimal_scale,
    exact,
    integral_bound,
    scaled,
)
from wafopt.core.registry import loads
from wafopt.core.result import MethodResult
from wafopt.problems.placement import KERNELS
from wafopt.problems.placement.branch_bound import symmetry_group
from wafopt.problems.placement.certificate import (
    Rlt1Lp,
    anchor,
    build_rlt1,
    gilmore_lawler,
    gilmore_lawler_bound,
    lagrangian_bound,
    linear_assignment,
    rlt1_certificate,
    stored_duals,
)
from wafopt.problems.placement.fitness import Fitness
from wafopt.problems.placement.instance import (
    Layout,
    PlacementInstance,
    orbit_representatives,
)
from wafopt.solvers.backends import (
    build_unless_stopped,
    cpsat_version,
    highs_version,
    milp_solver_name,
    not_started,
    solve_cpsat,
    solve_pyomo,
    stop_highs_when_stopped,
    time_left,
)
from wafopt.solvers.reported import Reported, expect_parts, report

EDGE_LINEARIZATION_MAX_VARS = 60_000  # above this the MILP uses the compact Manhattan model
CPSAT_SCALE_DIGITS = 9                # volumes are scaled by 10^k (k <= 9) to integers when exact


# --- data shared by the models -----------------------------------------------------------------

def edges(C: np.ndarray) -> list[tuple[int, int, float]]:
    n = C.shape[0]
    return [(i, j, float(C[i, j])) for i in range(n) for j in range(i + 1, n) if C[i, j] > 0]


def canonical(symmetries: list[np.ndarray], perm: np.ndarray, stage: int) -> np.ndarray:
    """Apply the symmetry that maps stage's slot to its orbit representative (same objective)."""
    target = min(int(g[perm[stage]]) for g in symmetries)
    for g in symmetries:
        if g[perm[stage]] == target:
            return g[perm]
    return perm


def best_symmetric(fit: Fitness, lay: Layout, perm: np.ndarray) -> np.ndarray:
    """Among the symmetric images of perm (equal base objective) the one with the least full objective."""
    images = np.array([g[perm] for g in lay.symmetries])
    return images[int(np.argmin(fit(images)))]


class LocalSearch(Protocol):
    """The local search an exact method may use (injected by wafopt.compose.placement): `start`
    improves the serpentine placement of a tile shape that has no warm start, `polish` improves a
    model's plan on the full objective when the model ignores routing conflicts."""

    def start(self, fit: Fitness, perm: np.ndarray, options: SolveOptions) -> np.ndarray: ...

    def polish(self, fit: Fitness, perm: np.ndarray, options: SolveOptions) -> np.ndarray: ...


def start_perm(inst: PlacementInstance, lay: Layout, fit: Fitness, options: SolveOptions,
               search: LocalSearch | None) -> np.ndarray:
    """Warm start on this layout: the given plan if it uses this tile, else the serpentine
    placement (improved by the local search when one is given)."""
    plan = options.warm_start
    if plan and tuple(plan.get("tile", inst.tiles[0])) == lay.tile:
        try:
            used = [lay.index[tuple(s)] for s in plan["assignment"]]
            if len(used) == inst.stages and len(set(used)) == len(used):
                free = [k for k in range(len(lay.slots)) if k not in set(used)]
                return np.array(used + free)
        except (KeyError, TypeError):
            pass
    perm = np.array(lay.order(True))
    return search.start(fit, perm, options) if search is not None else perm


def _solve_layouts(inst: PlacementInstance, options: SolveOptions, solve_one, solver_name: str,
                   search: LocalSearch | None = None, full_objective: bool = False) -> MethodResult:
    """Run `solve_one(lay, fit, L, start, time_limit) -> (perm|None, status, bound)` per tile shape;
    combine: bound = min over shapes, plan = best full objective. Claims optimal only when every
    shape is proven and the models minimize the full objective (`full_objective`, or no
    Mem_pairs); the runner settles the status from the evaluated objective and the bound."""
    best_value, best_base, best_plan, bounds, statuses, stats = np.inf, np.inf, None, [], [], {}
    layouts = inst.layouts
    gilmore = [gilmore_lawler(inst.weights, lay.distance) for lay in layouts]
    gl_values = [linear_assignment(L)[0] / 2 for L in gilmore]
    expect_parts(options, {lay.tile: value for lay, value in zip(layouts, gl_values)})   # progress: bound per tile

    def keep(lay, fit, perm):
        nonlocal best_value, best_base, best_plan
        value = fit.one(perm)
        if best_plan is None or not at_most(best_value, value):
            best_value, best_base = value, float(fit.base(perm[None, :inst.stages])[0])
            best_plan = lay.plan(perm[:inst.stages])
            options.incumbent(best_plan)
            report(options, "placement", incumbent=best_value)

    for k, (lay, L, glb_value) in enumerate(zip(layouts, gilmore, gl_values)):
        remaining = options.remaining()
        share = None if remaining is None else max(0.5, remaining / (len(layouts) - k))
        fit = Fitness(inst, lay)
        keep(lay, fit, np.array(lay.order(True)))   # a plan at once, for a Ctrl-C during the start search
        start = start_perm(inst, lay, fit, options, search)
        keep(lay, fit, start)
        # once stopped, the remaining shapes keep their Gilmore-Lawler bound and build no model
        perm, status, bound = (None, "unknown", None) if options.stopped() else solve_one(lay, fit, L, start, share)
        bound = max(glb_value, bound) if bound is not None else glb_value
        if perm is not None:
            perm = best_symmetric(fit, lay, perm)
            if fit.pairs and not full_objective and search is not None:
                perm = search.polish(fit, perm, options)   # the model ignores routing conflicts
            keep(lay, fit, perm)
        bounds.append(bound)
        report(options, "placement", bound=bound, part=lay.tile)
        statuses.append(status)
        stats[f"{lay.tile[0]}x{lay.tile[1]}"] = {"status": status, "bound": float(bound), "gl_bound": glb_value}
    bound = min(bounds)
    proven = all(s == "optimal" for s in statuses)
    status = "optimal" if proven and (full_objective or not inst.pairs) else "feasible"
    message = ""
    if proven and not full_objective and best_value > best_base:
        message = (f"base objective proven optimal; the plan pays a routing-conflict penalty of "
                   f"{best_value - best_base:.6g} (Eq. 2 gamma) that the model does not minimize")
    options.incumbent(best_plan, bound)
    return MethodResult(best_plan, status, bound, solver_name, message, {"layouts": stats})


# --- MILP (pyomo + HiGHS) -----------------------------------------------------------------------------

def build_milp(inst: PlacementInstance, lay: Layout, L: np.ndarray):
    """Assignment MILP; distances by the compact Manhattan model or by the edge linearization."""
    import pyomo.environ as pyo  # lazy: slow import (docs/architecture.md)

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


def milp(inst: PlacementInstance, options: SolveOptions, search: LocalSearch | None = None) -> MethodResult:
    def solve_one(lay, fit, L, start, limit):
        n, m = inst.stages, len(lay.slots)
        M = build_unless_stopped(options, build_milp, inst, lay, L)
        if M is None:
            return None, "unknown", None
        start = canonical(lay.symmetries, start, M._anchor)
        warm_start_milp(M, lay, start, n)
        # the base objective bounds the tile's Eq. 2 objective; with Mem_pairs its incumbent is not a plan's
        out = solve_pyomo(M, options, warm_start=True, time_limit=limit,
                          reported=Reported(incumbent=not inst.pairs, part=lay.tile))
        perm = decode_milp(M, n, m) if out.has_solution else None
        # every objective is a whole number of 1/grid units: round the bound up to that grid
        bound = out.bound if out.bound is None or grid is None else integral_bound(out.bound, grid)
        return perm, out.status, bound

    grid = volume_scale(inst)
    return _solve_layouts(inst, options, solve_one, milp_solver_name(options), search)


# --- CP-SAT ----------------------------------------------------------------------------------------------

def volume_scale(inst: PlacementInstance) -> Fraction | None:
    """The smallest scale 10^d / g that makes every flow and Mem_pair volume an integer (g the gcd
    of the scaled volumes), decided on each value's exact decimal form, never on float sums; None
    when a volume needs more than CPSAT_SCALE_DIGITS decimals. Every objective (volumes times hop
    counts) is then a whole number of 1/scale units."""
    values = [float(v) for v in inst.flow[inst.flow > 0]] + [v for _, _, v in inst.pairs if v > 0]
    if not values:
        return Fraction(1)
    power = decimal_scale(values, CPSAT_SCALE_DIGITS, limit=math.inf)
    if power is None:
        return None
    return Fraction(power, math.gcd(*(scaled(v, power) for v in values)))


@dataclass
class IntegerVolumes:
    """CP-SAT weights: W[i][j] = scale x C[i][j] (base objective), pair[p] = scale x volume of
    Mem_pair p (conflict penalty); one objective unit is `scale` model units."""

    W: np.ndarray
    pair: list[int]
    scale: Fraction
    exact: bool
    note: str = ""


def integer_volumes(inst: PlacementInstance) -> IntegerVolumes:
    """Exact when `volume_scale` exists and the largest objective the model can reach stays within
    2^53 (so CP-SAT's sums and its LP relaxation stay exact): W summed in integers from each
    volume's exact decimal value. Otherwise volumes are floored at scale 10^6 / largest volume: the
    model's optimum is then a valid lower bound, and optimality is not claimed."""
    n = inst.stages
    V = [[exact(float(inst.flow[i, j])) for j in range(n)] for i in range(n)]
    pairs = [(s, h, exact(v)) for s, h, v in inst.pairs]
    dmax = max((int(lay.distance.max()) for lay in inst.layouts if len(lay.slots) > 1), default=0)
    links = len(inst.mesh.directed_links)

    def weights(scale: Fraction, rounding) -> tuple[np.ndarray, list[int]]:
        C = [[V[i][j] + V[j][i] for j in range(n)] for i in range(n)]
        for s, h, v in pairs:
            C[s][h] += v
            C[h][s] += v
        W = np.array([[0 if i == j else rounding(C[i][j] * scale) for j in range(n)] for i in range(n)],
                     dtype=object)
        return W, [rounding(v * scale) for _, _, v in pairs]

    def reach(W, pair) -> int:   # the largest objective any placement can have, in model units
        return dmax * (int(np.triu(W, 1).sum()) + sum(pair) * links)

    scale = volume_scale(inst)
    note = f"volumes need more than {CPSAT_SCALE_DIGITS} decimals"
    if scale is not None:
        W, pair = weights(scale, int)   # exact: every product is an integer
        if reach(W, pair) <= MAX_EXACT:
            return IntegerVolumes(W.astype(np.int64), pair, scale, True)
        note = f"volumes x {scale} would exceed 2^53 in the objective"
    largest = max([max(abs(v) for row in V for v in row)] + [v for _, _, v in pairs] + [Fraction(1, 10 ** 9)])
    scale = Fraction(10 ** 6) / largest
    W, pair = weights(scale, math.floor)
    return IntegerVolumes(W.astype(np.int64), pair, scale, False,
                          f"{note}: volumes floored at scale {float(scale):.6g}, so the bound is valid but "
                          "optimality is not claimed")


def build_cpsat(inst: PlacementInstance, lay: Layout, volumes: IntegerVolumes, conflicts: Fitness | None = None,
                lower: int | None = None, stop=never):
    """x[i,k] booleans with one slot per stage / one stage per slot; distances by |drow| + |dcol|
    (Manhattan) or element on the distance table; integer weights (integer_volumes). With
    `conflicts` (and Mem_pairs) the objective is the full Eq. 2 objective, else the base one."""
    from ortools.sat.python import cp_model  # lazy: slow import (docs/architecture.md)

    C, D = inst.weights, lay.distance
    n, m = inst.stages, len(lay.slots)
    W = volumes.W
    E = [(i, j, int(W[i, j])) for i, j, _ in edges(C)]
    L = np.rint(gilmore_lawler(W.astype(float), D)).astype(np.int64)   # integers below 2^53: exact
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
    symmetries = symmetry_group(conflicts) if conflicts is not None else lay.symmetries
    reps = set(orbit_representatives(symmetries, m))
    for k in range(m):
        if k not in reps:
            model.Add(x[a][k] == 0)                                             # symmetry breaking
    objective = sum(w * d[e] for e, (_, _, w) in enumerate(E))
    if conflicts is not None and inst.pairs:
        penalty = conflict_penalty(model, conflicts, slot, d, E, dmax, volumes.pair, stop)
        if penalty is None:
            return None   # stopped while building (the penalty terms are the slow part)
        objective += penalty
    if lower is not None:
        model.Add(objective >= lower)                                           # proven base bound
    model.Minimize(objective)
    return model, x, slot, a, symmetries


def conflict_penalty(model, fit: Fitness, slot, d, E, dmax: int, pair_weights: list[int], stop=never):
    """Exact Eq. 2 penalty sum_p weight_p * D_p * gamma_p: the XY route of a slot pair is
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
        if stop():
            return None
        union[link] = model.NewBoolVar(f"U{link}")
        for i, j in zip(fit.flow_i, fit.flow_j):
            model.AddImplication(route_use(int(i), int(j), link, f"u{i}_{j}_{link}"), union[link])
    edge_of = {(i, j): e for e, (i, j, _) in enumerate(E)}
    penalty = 0
    for p, ((s, h, _), weight) in enumerate(zip(fit.pairs, pair_weights)):
        if weight == 0:
            continue
        if stop():
            return None
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


def cpsat(inst: PlacementInstance, options: SolveOptions, search: LocalSearch | None = None) -> MethodResult:
    volumes = integer_volumes(inst)
    scale = float(volumes.scale)

    def solve_model(lay, fit, start, limit, conflicts, lower=None):
        n, m = inst.stages, len(lay.slots)
        built = build_unless_stopped(options, build_cpsat, inst, lay, volumes, conflicts, lower, stop=options.stopped)
        if built is None:
            return None, not_started(options, cpsat_version())
        model, x, slot, a, symmetries = built
        start = canonical(symmetries, start, a)
        for i in range(n):
            model.AddHint(slot[i], int(start[i]))
            for k in range(m):
                model.AddHint(x[i][k], int(start[i] == k))

        def decode(values) -> np.ndarray:
            used = [int(values.Value(slot[i])) for i in range(n)]
            return np.array(used + [k for k in range(m) if k not in set(used)])

        def on_solution(cb):
            options.incumbent(lay.plan(decode(cb)[:n]))

        # integer volumes x scale; the base model (Mem_pairs, phase 1) and floored volumes bound the
        # tile's Eq. 2 objective but their incumbents are not a plan's
        full = conflicts is not None or not inst.pairs
        reported = Reported(scale=scale, incumbent=full and volumes.exact, part=lay.tile)
        out, solver = solve_cpsat(model, options, on_solution=on_solution, time_limit=limit, reported=reported)
        return (decode(solver) if out.has_solution else None), out

    def solve_one(lay, fit, L, start, limit):
        lower = None
        if inst.pairs:   # phase 1: the base model (fast) proves a bound the full model starts from
            started = time.monotonic()
            perm, out = solve_model(lay, fit, start, None if limit is None else limit / 3, None)
            if perm is not None and fit.one(perm) < fit.one(start):
                start = perm
            if out.bound is not None:
                lower = int(integral_bound(out.bound))
            if limit is not None:
                limit = max(0.5, limit - (time.monotonic() - started))
        perm, out = solve_model(lay, fit, start, limit, fit if inst.pairs else None, lower)
        bound = integral_bound(out.bound) if out.bound is not None else lower   # an integer objective
        bound = float(Fraction(int(bound)) / volumes.scale) if bound is not None else None
        status = out.status if volumes.exact or out.status != "optimal" else "feasible"
        return perm, status, bound

    result = _solve_layouts(inst, options, solve_one, cpsat_version(), search, full_objective=volumes.exact)
    if volumes.note:
        result.message = "; ".join(m for m in (result.message, volumes.note) if m)
    result.stats["weight_scale"] = scale
    result.stats["exact_scaling"] = volumes.exact
    return result


# --- Gilmore-Lawler bound -----------------------------------------------------------------------------------

@loads(*KERNELS)
def glb(inst: PlacementInstance, options: SolveOptions) -> MethodResult:
    """The Gilmore-Lawler bound (min over tile shapes) of the base objective; the plan returned is the
    assignment of the linear assignment problem that yields it (feasible, not optimized)."""
    best_value, best_plan = np.inf, None
    for lay in inst.layouts:
        fit = Fitness(inst, lay)
        col = linear_assignment(gilmore_lawler(inst.weights, lay.distance))[1]
        objective = fit.one(np.asarray(col))
        if objective < best_value:
            best_value, best_plan = objective, lay.plan(col)
    bound = gilmore_lawler_bound(inst)   # a certificate: certify re-derives it from the instance
    return MethodResult(best_plan, "feasible", bound, "gilmore-lawler", stats={"bounds": bound.data["tiles"]})



# --- RLT-1 (Adams-Johnson) LP bound ---------------------------------------------------------------------

def solve_rlt1(lp: Rlt1Lp, options: SolveOptions, time_limit: float | None) -> dict:
    """HiGHS interior point without crossover; the bound is the Lagrangian bound of its row duals
    (valid whether or not HiGHS reached optimality), rounded up when the data are integral."""
    import highspy  # lazy: slow import (docs/architecture.md)

    h = highspy.Highs()
    stop_highs_when_stopped(h, options)
    h.setOptionValue("output_flag", False)
    h.setOptionValue("solver", "ipm")
    h.setOptionValue("run_crossover", "off")
    h.setOptionValue("random_seed", int(options.seed) % 2147483647)
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
    time_limit = time_left(options, time_limit)   # passing the model counts against the limit
    if time_limit is not None:
        h.setOptionValue("time_limit", max(1e-3, float(time_limit)))
    started = time.monotonic()
    h.run()
    out = {"highs_status": h.modelStatusToString(h.getModelStatus()), "solve_s": round(time.monotonic() - started, 2),
           "lp_objective": None, "lagrangian_bound": None, "bound": None}
    solution = h.getSolution()
    if solution.dual_valid:
        out["lp_objective"] = float(h.getInfo().objective_function_value)
        out["duals"] = stored_duals(solution.row_dual)   # the certificate: any duals prove their bound
        bound = lagrangian_bound(lp, out["duals"])
        out["lagrangian_bound"] = bound
        out["bound"] = float(math.ceil(bound)) if lp.integral else bound
    return out


def rlt1(inst: PlacementInstance, options: SolveOptions, search: LocalSearch | None = None) -> MethodResult:
    """The RLT-1 LP bound (min over tile shapes, never below Gilmore-Lawler) of the base objective, with
    the plan of the warm start (the runner calls it optimal when the bound meets it)."""
    report, fallback, duals = {}, [], {}

    def solve_one(lay, fit, L, start, limit):
        tile = f"{lay.tile[0]}x{lay.tile[1]}"
        remaining = options.remaining()
        limit = remaining if limit is None else min(limit, remaining if remaining is not None else limit)
        built = time.monotonic()
        lp = build_unless_stopped(options, build_rlt1, inst, lay)
        if lp is None:   # stopped while building: this shape keeps its Gilmore-Lawler bound
            return None, "unknown", None
        build_s = time.monotonic() - built
        if limit is not None:
            limit -= build_s
        options.progress(f"rlt1 tile {tile}: LP {lp.shape[0]} rows x {lp.shape[1]} columns, interior point",
                         force=True)
        out = solve_rlt1(lp, options, limit) if limit is None or limit > 0 else {
            "highs_status": "not started (time limit)", "bound": None}
        if out.get("duals") is not None:
            duals[tile] = out.pop("duals")
        report[tile] = {"rows": lp.shape[0], "columns": lp.shape[1], "nonzeros": len(lp.value),
                        "build_s": round(build_s, 2), **out}
        bound = out["bound"]
        if bound is None or out["highs_status"] != "Optimal":
            fallback.append(f"{tile}: {out['highs_status']}")
        return None, "feasible", bound

    result = _solve_layouts(inst, options, solve_one, f"{highs_version()} ipm", search)
    result.bound = rlt1_certificate(inst, duals)   # certify re-checks the duals by weak duality
    for tile, stats in result.stats["layouts"].items():
        stats["rlt1"] = report.get(tile)
        if tile not in report:   # stopped (time limit or Ctrl-C) before this shape's LP
            fallback.append(f"{tile}: not started")
    if fallback:
        note = ("RLT-1 LP not solved to optimality (" + "; ".join(fallback) + "): the bound is "
                "max(Gilmore-Lawler, Lagrangian bound of the IPM's last duals) there")
        result.message = f"{result.message}; {note}" if result.message else note
    return result
