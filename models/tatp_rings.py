"""TATP group mapping, exact: the data every TATP formulation shares, and the ring-column model
(every ring of cost <= K enumerated as a column, wildcards for the others; solved by CP-SAT or
HiGHS) with its search over K. Formulation in docs/tatp.md ("Ring-column model"), in the same
order as here: data, variables, constraints, objective, solve, decode. The per-group fallbacks and
the methods' entry points are in wafopt.models.tatp.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from wafopt.core.budget import SolveOptions, never
from wafopt.core.numeric import integral_bound
from wafopt.core.result import MethodResult
from wafopt.hardware.mesh import Die, Mesh
from wafopt.problems.tatp.certificate import ring_floor
from wafopt.problems.tatp.evaluate import evaluate, read_groups
from wafopt.problems.tatp.plans import groups_plan, snake_groups, total_cost
from wafopt.solvers.backends import solve_cpsat as run_cpsat
from wafopt.solvers.backends import solve_pyomo
from wafopt.solvers.reported import Reported

# Completes a partial mapping: (mesh, rings, G, N, floor, deadline) -> G rings. Injected by
# wafopt.compose.methods (the tiles repair of wafopt.heuristics.tatp); without it, relaxed
# solutions that leave rings out are not turned into plans.
Complete = Callable[[Mesh, list[list[Die]], int, int, int, float], list[list[Die]]]
COMPLETE_S = 2.0          # budget of one completion
MAX_COLUMNS = 150_000     # ring-column model: most enumerated rings before falling back
MAX_ENUM_NODES = 3_000_000  # DFS nodes of one ring enumeration before falling back
FEW_COLUMNS = 2_000       # a stage with fewer rings is skipped for the next threshold's ...
NEXT_COLUMNS = 30_000     # ... when that one has at most this many
# the column models' wildcard rings cost at least K + 1 each: their objective bounds a plan's, their
# incumbents are not plans (the search completes them)
COLUMNS = Reported(incumbent=False)


# --- data ---------------------------------------------------------------------------------------------
@dataclass
class RingData:
    dies: list[Die]              # healthy dies, row-major; position k is the die's model index
    dist: np.ndarray             # hop distances between model indices
    N: int
    G: int
    floor: int                   # ring lower bound (1, or 2 for odd N)
    max_ring: int                # no ring of an optimal mapping costs more (from the start plan)
    arcs: list[tuple[int, int]]  # ordered pairs (u, v) with dist <= max_ring

    @property
    def positions(self):
        return range(len(self.dies))


def build_data(instance, start_cost: int) -> RingData:
    """Arcs longer than UB - (G-1) * floor cannot be used by a plan at least as good as the start
    plan (every other ring costs >= floor), so dropping them keeps the model exact."""
    mesh = instance.mesh
    dies = mesh.healthy_dies
    idx = [mesh.index(d) for d in dies]
    dist = mesh.distance_matrix[np.ix_(idx, idx)]
    floor, G = instance.ring_lower_bound, instance.groups
    max_ring = max(floor, start_cost - (G - 1) * floor)
    short = (dist <= max_ring) & ~np.eye(len(dies), dtype=bool)
    arcs = [(int(u), int(v)) for u, v in zip(*np.nonzero(short))]
    return RingData(dies, dist, instance.group_size, G, floor, max_ring, arcs)


def start_plan(instance, options: SolveOptions) -> list[list[Die]]:
    """The warm start if it is a feasible plan of this instance (wafopt.compose.methods passes
    the tiles mapping), else the serpentine chunks."""
    if options.warm_start is not None:
        ev = evaluate(instance, options.warm_start)
        if ev.feasible:
            return read_groups(options.warm_start)
    return snake_groups(instance.mesh, instance.group_size, instance.groups)


def canonical(data: RingData, groups: list[list[Die]]) -> list[list[int]]:
    """Groups as model indices, sorted by their lowest index (the symmetry-breaking order)."""
    pos = {d: k for k, d in enumerate(data.dies)}
    rings = [[pos[tuple(d)] for d in ring] for ring in groups]
    return sorted(rings, key=min)


def ring_arcs(ring: list[int]) -> list[tuple[int, int]]:
    return [(ring[k], ring[(k + 1) % len(ring)]) for k in range(len(ring))] if len(ring) > 1 else []


def rings_from_arcs(data: RingData, members: list[int], succ: dict[int, int]) -> list[Die]:
    """Follow successor arcs from the lowest member to recover the cyclic order."""
    if not members:
        return []
    ring = [min(members)]
    while len(ring) < len(members):
        ring.append(succ[ring[-1]])
    return [data.dies[k] for k in ring]


def method_result(instance, groups, outcome_status, bound, solver, message, stats) -> MethodResult:
    plan = groups_plan(groups)
    if bound is not None:
        bound = float(max(instance.lower_bound, integral_bound(bound)))  # costs are integers
    else:
        bound = float(instance.lower_bound)
    status = "optimal" if outcome_status == "optimal" else "feasible"
    if bound <= instance.lower_bound:   # nothing beyond the ring floor: a certificate, not a solver claim
        bound = ring_floor(instance)
    return MethodResult(plan, status, bound, solver, message, stats)


# --- ring columns: every ring of cost <= K, and wildcards for the others ------------------------------
@dataclass
class Columns:
    K: int                    # every die set whose best cyclic order costs <= K is a column
    rings: list[list[int]]    # that best cyclic order (model indices)
    costs: list[int]          # its ring cost


def enumerate_rings(data: RingData, K: int, max_columns: int | None = None,
                    max_nodes: int | None = None, stop=never) -> Columns | None:
    """All die sets with ring cost <= K, each with its cheapest cyclic order; None when the
    enumeration passes the column or DFS-node limit (the caller then falls back).

    DFS over cyclic orders that start at their lowest die and end above their second die (one
    direction per cycle), every hop <= K, pruned by the distance back to the start. Every order
    with hops <= K is visited, so each set's cost is its exact best (bottleneck) ring cost."""
    max_columns = MAX_COLUMNS if max_columns is None else max_columns
    nodes = [MAX_ENUM_NODES if max_nodes is None else max_nodes]
    n, N = len(data.dies), data.N
    dist = data.dist.tolist()   # plain ints: numpy scalar indexing dominated the DFS
    near = [[v for v in range(n) if v != u and dist[u][v] <= K] for u in range(n)]
    best: dict[frozenset, tuple[int, tuple]] = {}
    path, on = [], [False] * n

    def extend(hop: int) -> bool:  # False: a limit was hit
        u, first = path[-1], path[0]
        if len(path) == N:
            cost = max(hop, dist[u][first])
            if cost <= K and cost < best.get(frozenset(path), (K + 1,))[0]:
                best[frozenset(path)] = (cost, tuple(path))
            return len(best) <= max_columns
        nodes[0] -= 1
        if nodes[0] < 0 or (nodes[0] % 4096 == 0 and stop()):
            return False
        hops_back = N - len(path)  # from the next die back to the first one
        for v in near[u]:
            if v <= first or on[v] or dist[v][first] > K * hops_back:
                continue
            if len(path) == N - 1 and N > 2 and v < path[1]:
                continue
            path.append(v)
            on[v] = True
            ok = extend(max(hop, dist[u][v]))
            path.pop()
            on[v] = False
            if not ok:
                return False
        return True

    for u in range(n):
        path.append(u)
        on[u] = True
        ok = extend(0)
        path.pop()
        on[u] = False
        if not ok:
            return None
    found = sorted(best.values(), key=lambda b: (b[0], b[1]))
    return Columns(K, [list(order) for _, order in found], [cost for cost, _ in found])


def stage_lp(data: RingData, cols: Columns, upper: int) -> tuple[float, np.ndarray, bool] | None:
    """LP relaxation of the stage's column model (HiGHS): (lower bound of the stage, the columns that
    can be in a solution of cost <= upper, whether wildcards can), or None without an LP optimum.

    Any die prices y <= 0 and ring-count price z give, for every solution x of the stage,
    cost(x) >= sum(y) + z G + sum_j rc_j x_j with rc = c - A'y - z (Lagrange), and x holds G units,
    so one unit of column s costs at least L + rc_s + (G - 1) min(0, min rc), L = sum(y) + z G: a
    column (or wildcard) above `upper` by this is in no such solution (reduced-cost fixing). The
    prices are HiGHS' duals, clipped to their sign, so float noise only weakens the bound."""
    import highspy  # lazy: slow import (docs/architecture.md)

    S, n = len(cols.rings), len(data.dies)
    cost = np.array(cols.costs + [cols.K + 1], dtype=float)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = S + 1, n + 1
    lp.col_cost_ = cost
    lp.col_lower_, lp.col_upper_ = np.zeros(S + 1), np.full(S + 1, highspy.kHighsInf)  # rows bound them
    lp.row_lower_ = np.concatenate([np.full(n, -highspy.kHighsInf), [data.G]])  # one_ring_per_die
    lp.row_upper_ = np.concatenate([np.ones(n), [data.G]])                        # ring_count
    rows = np.array(cols.rings, dtype=np.int32).reshape(S, data.N)
    index = np.column_stack([rows, np.full(S, n, dtype=np.int32)]).ravel()       # + the ring_count row
    matrix = lp.a_matrix_
    matrix.format_, matrix.num_col_, matrix.num_row_ = highspy.MatrixFormat.kColwise, S + 1, n + 1
    matrix.start_ = np.concatenate([np.arange(0, (data.N + 1) * S + 1, data.N + 1), [(data.N + 1) * S + 1]]).astype(np.int32)
    matrix.index_ = np.concatenate([index, [n]]).astype(np.int32)
    matrix.value_ = np.ones((data.N + 1) * S + 1)
    lp.a_matrix_ = matrix
    solver = highspy.Highs()
    solver.setOptionValue("output_flag", False)
    solver.setOptionValue("threads", 1)
    solver.setOptionValue("presolve", "off")   # its presolve took 20 s on 9 547 columns, the simplex 0.1 s
    solver.passModel(lp)
    solver.run()
    if solver.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    dual = np.asarray(solver.getSolution().row_dual)
    y, z = np.minimum(dual[:n], 0.0), float(dual[n])
    rc = cost - z
    rc[:S] -= y[rows].sum(axis=1)
    low = float(y.sum()) + z * data.G
    worst = min(0.0, float(rc.min()))
    reach = low + rc + (data.G - 1) * worst          # least cost of a solution using that column
    keep = reach <= upper + 1e-6 * max(1.0, abs(upper))
    return low + data.G * worst, keep[:S], bool(keep[S])


def reduced(cols: Columns, keep: np.ndarray) -> tuple[Columns, list[int]]:
    """The columns kept, and their indices in `cols`."""
    index = [s for s in range(len(cols.rings)) if keep[s]]
    return Columns(cols.K, [cols.rings[s] for s in index], [cols.costs[s] for s in index]), index


def column_covers(data: RingData, cols: Columns) -> list[list[int]]:
    """For each die, the columns that contain it."""
    covers: list[list[int]] = [[] for _ in data.positions]
    for s, ring in enumerate(cols.rings):
        for d in ring:
            covers[d].append(s)
    return covers


def column_start(cols: Columns, rings: list[list[int]]) -> tuple[set[int], int]:
    """A plan as (columns picked, wildcards): its rings of cost <= K are columns, the rest wild."""
    index = {frozenset(r): s for s, r in enumerate(cols.rings)}
    picked = {index[frozenset(r)] for r in rings if frozenset(r) in index}
    return picked, len(rings) - len(picked)


def build_columns_cpsat(data: RingData, cols: Columns, upper: int | None = None, wild_max: int | None = None):
    """upper: only solutions of total cost <= upper (better than the incumbent); wild_max: at most
    this many wildcards (0 when reduced-cost fixing excluded them)."""
    from ortools.sat.python import cp_model  # lazy: slow import (docs/architecture.md)

    m = cp_model.CpModel()
    # pick[s]: column s is one of the rings
    pick = [m.NewBoolVar(f"pick_{s}") for s in range(len(cols.rings))]
    # wild: rings outside the enumeration; each costs at least K + 1
    wild = m.NewIntVar(0, data.G if wild_max is None else wild_max, "wild")
    for members in column_covers(data, cols):  # one_ring_per_die
        if len(members) > 1:
            m.AddAtMostOne(pick[s] for s in members)
    m.Add(sum(pick) + wild == data.G)  # ring_count
    total = sum(c * p for c, p in zip(cols.costs, pick)) + (cols.K + 1) * wild
    if upper is not None:
        m.Add(total <= upper)  # better_than_incumbent
    m.Minimize(total)  # total_cost
    return m, {"pick": pick, "wild": wild}


def solve_columns_cpsat(data: RingData, cols: Columns, rings: list[list[int]], options: SolveOptions,
                        time_limit: float | None, upper: int | None = None, wild_max: int | None = None):
    """Solve the column model warm-started from `rings`. Returns (SolverOutcome, picked columns, wild)."""
    model, v = build_columns_cpsat(data, cols, upper, wild_max)
    picked, wild = column_start(cols, rings)
    for s, var in enumerate(v["pick"]):
        model.AddHint(var, s in picked)
    model.AddHint(v["wild"], wild)
    # One worker at linearization level 2, every row in the LP from the start: the LP relaxation
    # of the at-most-one-ring-per-die rows drives the bound (the default 2-worker portfolio keeps
    # it at G * floor on tatp-8x8-f3-n4; lazy rows took 1.5-2x as long to prove it).
    outcome, solver = run_cpsat(model, options, time_limit=time_limit, workers=1, reported=COLUMNS,
                                parameters={"linearization_level": 2, "add_lp_constraints_lazily": False})
    if not outcome.has_solution:
        return outcome, [], data.G
    return (outcome, [s for s, var in enumerate(v["pick"]) if solver.Value(var)],
            int(solver.Value(v["wild"])))


def build_columns_milp(data: RingData, cols: Columns, upper: int | None = None, wild_max: int | None = None):
    import pyomo.environ as pyo  # lazy: slow import (docs/architecture.md)

    m = pyo.ConcreteModel("tatp_columns")
    m.S = pyo.RangeSet(0, len(cols.rings) - 1)
    # pick[s]: column s is one of the rings
    m.pick = pyo.Var(m.S, domain=pyo.Binary)
    # wild: rings outside the enumeration; each costs at least K + 1
    m.wild = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0, data.G if wild_max is None else wild_max))
    covers = [members for members in column_covers(data, cols) if len(members) > 1]
    m.one_ring_per_die = pyo.Constraint(range(len(covers)), rule=lambda m, k:
                                        sum(m.pick[s] for s in covers[k]) <= 1)
    m.ring_count = pyo.Constraint(expr=sum(m.pick[s] for s in m.S) + m.wild == data.G)
    total = sum(cols.costs[s] * m.pick[s] for s in m.S) + (cols.K + 1) * m.wild
    if upper is not None:
        m.better_than_incumbent = pyo.Constraint(expr=total <= upper)
    m.total_cost = pyo.Objective(expr=total, sense=pyo.minimize)
    return m


def solve_columns_milp(data: RingData, cols: Columns, rings: list[list[int]], options: SolveOptions,
                       time_limit: float | None, upper: int | None = None, wild_max: int | None = None):
    model = build_columns_milp(data, cols, upper, wild_max)
    picked, wild = column_start(cols, rings)
    for s in model.S:
        model.pick[s].value = int(s in picked)
    model.wild.value = wild
    # the start is no solution under the cut (it costs upper + 1): no MIP start then. Under the cut
    # the model only asks whether a better plan exists, so HiGHS' feasibility-jump heuristic, which
    # runs before the root LP, is skipped (0.3 s instead of 0.45 s on tatp-8x8-f3-n4's stage)
    outcome = solve_pyomo(model, options, warm_start=upper is None, time_limit=time_limit, reported=COLUMNS,
                          highs_options=None if upper is None else {"mip_heuristic_run_feasibility_jump": False})
    if not outcome.has_solution:
        return outcome, [], data.G
    return (outcome, [s for s in model.S if model.pick[s].value > 0.5],
            int(round(model.wild.value)))


@dataclass
class ColumnSearch:
    groups: list[list[Die]]   # best plan found (the start plan or better)
    bound: int                # proven lower bound of the problem
    enumerated: bool          # False: a ring enumeration hit its limit (fall back)
    last_K: int | None        # largest K whose column model was solved
    message: str
    solver: str


def column_search(instance, start: list[list[Die]], options: SolveOptions,
                  solve_stage, complete: Complete | None = None) -> ColumnSearch:
    """Solve the column model for K = floor, floor + 1, ... until its bound meets the best plan.

    Soundness: mapping a plan to (its rings of cost <= K as columns, the others as wildcards)
    never raises its cost, so every stage's bound is a lower bound of the problem. A stage
    solution without wildcards is a plan. At K = UB - (G - 1) * floor a wildcard alone pushes the
    total above UB, so that stage is exact; the loop stops there at the latest."""
    mesh, G, floor = instance.mesh, instance.groups, instance.ring_lower_bound
    best, best_cost = start, groups_cost(instance, start)
    bound, K, last_K, message, solver = instance.lower_bound, floor, None, "", ""
    data = build_data(instance, best_cost)
    while bound < best_cost and K <= best_cost - (G - 1) * floor and not options.stopped():
        cols = enumerate_rings(data, K, stop=options.stopped)
        if cols is None and options.stopped():
            break
        if cols is None:
            return ColumnSearch(best, bound, False, last_K,
                                f"more than {MAX_COLUMNS} rings of cost <= {K}", solver)
        # stage bounds grow with K (a stage-(K+1) solution is one of stage K, its rings of cost K + 1
        # as wildcards): skip a stage of few rings for the next one while that stays small
        while len(cols.rings) < FEW_COLUMNS and K < best_cost - (G - 1) * floor and not options.stopped():
            bigger = enumerate_rings(data, K + 1, max_columns=NEXT_COLUMNS, stop=options.stopped)
            if bigger is None:
                break
            K, cols = K + 1, bigger
        # only solutions better than the best plan matter: the LP's reduced costs drop the columns
        # that cannot be in one, and a stage without such a solution proves the best plan optimal
        lp = stage_lp(data, cols, best_cost - 1)
        if lp is not None and (integral_bound(lp[0]) >= best_cost or not (lp[1].any() or lp[2])):
            bound = best_cost
            message = f"ring-column LP up to cost {K} ({len(cols.rings)} rings)"
            break
        keep, index = (cols, list(range(len(cols.rings)))) if lp is None else reduced(cols, lp[1])
        outcome, picked, wild = solve_stage(data, keep, canonical(data, best), options, options.remaining(),
                                            best_cost - 1, None if lp is None or lp[2] else 0)
        picked = [index[s] for s in picked]
        solver = outcome.solver
        if outcome.status == "infeasible":   # no stage solution below the best plan's cost
            bound = best_cost
        elif outcome.bound is not None:
            bound = max(bound, int(integral_bound(outcome.bound)))
        if outcome.has_solution and (not wild or complete is not None):
            rings = [[data.dies[d] for d in cols.rings[s]] for s in picked]
            if wild:  # a relaxed solution: complete it into a plan from the free dies
                left = options.remaining()
                deadline = time.monotonic() + (COMPLETE_S if left is None else min(COMPLETE_S, left))
                rings = complete(mesh, rings, G, instance.group_size, floor, deadline)
            if groups_cost(instance, rings) < best_cost:
                best, best_cost = rings, groups_cost(instance, rings)
                options.incumbent(groups_plan(best), bound)
        options.progress(f"ring columns K={K}: {len(cols.rings)} rings ({len(keep.rings)} after the LP), "
                         f"bound {bound}, best {best_cost}")
        message = f"ring-column model up to cost {K} ({len(cols.rings)} rings)"
        if outcome.status not in ("optimal", "infeasible"):
            message += f": {outcome.message}"
            break
        last_K, K = K, K + 1
    return ColumnSearch(best, bound, True, last_K, message, solver)


def groups_cost(instance, groups: list[list[Die]]) -> int:
    return total_cost(instance.mesh, groups)


def column_phase(instance, options: SolveOptions, solve_columns, solver: str, complete: Complete | None = None):
    """The opening both exact methods share: a start plan, then the ring-column search.

    Returns (search, stats, result); result is set when the columns settled it."""
    start = start_plan(instance, options)
    options.incumbent(groups_plan(start), instance.lower_bound)
    if options.export is not None:   # export the self-contained model, not stages that depend on the incumbent
        search = ColumnSearch(start, instance.lower_bound, False, None, "", "")
        return search, {"start_cost": groups_cost(instance, start)}, None
    search = column_search(instance, start, options, solve_columns, complete)
    stats = {"start_cost": groups_cost(instance, start), "columns_up_to_cost": search.last_K}
    done = None
    if search.enumerated or search.bound >= groups_cost(instance, search.groups):
        done = method_result(instance, search.groups, "feasible", search.bound, search.solver or solver,
                       search.message, stats)
    return search, stats, done
