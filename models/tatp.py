"""TATP group mapping, exact: the methods `cpsat` and `milp`. Both open with the ring-column model
(wafopt.models.tatp_rings); when its enumeration is too large they fall back to per-group models
here: CP-SAT (a circuit per group) and MILP (pyomo + HiGHS, flow-based subtour elimination).
Formulations in docs/tatp.md, in the same order as here: data, variables, constraints, objective,
solve, decode.
"""

from __future__ import annotations

import time

from wafopt.models.tatp_rings import (
    COMPLETE_S,
    ColumnSearch,
    Complete,
    RingData,
    build_data,
    canonical,
    column_phase,
    groups_cost,
    method_result,
    ring_arcs,
    rings_from_arcs,
    solve_columns_cpsat,
    solve_columns_milp,
)

from wafopt.core.budget import SolveOptions
from wafopt.core.numeric import integral_floor
from wafopt.core.result import MethodResult
from wafopt.hardware.mesh import Die
from wafopt.problems.tatp.plans import groups_plan
from wafopt.solvers.backends import cpsat_version, milp_solver_name, solve_pyomo
from wafopt.solvers.backends import solve_cpsat as run_cpsat
from wafopt.solvers.reported import SILENT


# --- CP-SAT -------------------------------------------------------------------------------------------
def build_cpsat(data: RingData, packing: bool = False):
    """The mapping model; with packing=True the rings are optional, use only hops <= floor, and the
    objective maximizes how many there are (the most rings that can reach the floor cost)."""
    from ortools.sat.python import cp_model  # lazy: slow import (docs/architecture.md)

    m = cp_model.CpModel()
    P, groups = data.positions, range(data.G)
    # active[g]: ring g exists (always, unless packing)
    active = [m.NewBoolVar(f"active_{g}") for g in groups]
    # member[g, d]: die d belongs to ring g
    member = {(g, d): m.NewBoolVar(f"member_{g}_{d}") for g in groups for d in P}
    # arc[g, u, v]: ring g goes from die u to die v
    arc = {(g, u, v): m.NewBoolVar(f"arc_{g}_{u}_{v}") for g in groups for u, v in data.arcs}
    # cost[g]: longest hop of ring g
    cost = [m.NewIntVar(data.floor, data.max_ring, f"cost_{g}") for g in groups]
    # first[g, d]: d is the lowest-index die of ring g; lowest[g] its index (symmetry breaking)
    first = {(g, d): m.NewBoolVar(f"first_{g}_{d}") for g in groups for d in P}
    lowest = [m.NewIntVar(0, len(data.dies) - 1, f"lowest_{g}") for g in groups]

    for d in P:  # one_ring_per_die
        m.Add(sum(member[g, d] for g in groups) <= 1)
    for g in groups:
        m.Add(sum(member[g, d] for d in P) == data.N * active[g])  # ring_size
        if not packing:
            m.Add(active[g] == 1)
        # ring_is_one_cycle: a circuit through the members, self-loops on the other dies
        m.AddCircuit([(u, v, arc[g, u, v]) for u, v in data.arcs]
                     + [(d, d, member[g, d].Not()) for d in P])
        for u, v in data.arcs:  # hop_within_cost
            if data.dist[u, v] > data.floor:
                m.Add(cost[g] >= int(data.dist[u, v])).OnlyEnforceIf(arc[g, u, v])
        # lowest_member: first picks one member, no member lies below it
        m.Add(sum(first[g, d] for d in P) == active[g])
        for d in P:
            m.AddImplication(first[g, d], member[g, d])
            m.Add(lowest[g] <= d).OnlyEnforceIf(member[g, d])
        m.Add(lowest[g] == sum(d * first[g, d] for d in P))
    for g in range(data.G - 1):  # rings_sorted_by_lowest_die (active rings first)
        m.AddImplication(active[g + 1], active[g])
        m.Add(lowest[g] < lowest[g + 1]).OnlyEnforceIf(active[g + 1])
    if packing:
        m.Maximize(sum(active))  # rings at the floor cost
    else:
        m.Minimize(sum(cost))  # total ring cost
    return m, {"member": member, "arc": arc, "cost": cost, "first": first, "lowest": lowest,
               "active": active}


def hint_cpsat(m, data: RingData, v: dict, rings: list[list[int]]) -> None:
    used = {(g, a, b) for g, ring in enumerate(rings) for a, b in ring_arcs(ring)}
    for (g, d), var in v["member"].items():
        m.AddHint(var, d in rings[g])
        m.AddHint(v["first"][g, d], d == min(rings[g]))
    for key, var in v["arc"].items():
        m.AddHint(var, key in used)
    for g, ring in enumerate(rings):
        m.AddHint(v["cost"][g], max(data.floor, max(int(data.dist[a, b]) for a, b in ring_arcs(ring))))
        m.AddHint(v["lowest"][g], min(ring))


def decode_cpsat(data: RingData, v: dict, value) -> list[list[Die]]:
    groups = []
    for g in range(data.G):
        members = [d for d in data.positions if value(v["member"][g, d])]
        succ = {u: w for (h, u, w), var in v["arc"].items() if h == g and value(var)}
        groups.append(rings_from_arcs(data, members, succ))
    return groups


def floor_ring_bound(instance, options: SolveOptions, time_limit: float | None,
                     complete: Complete | None = None):
    """G * floor + (G - P): at most P disjoint rings can cost the floor (P from the packing model,
    or its proven upper bound when it stops early), every other ring costs at least floor + 1.

    Also returns a mapping built from the packing (with `complete`): its rings plus rings grown
    from the rest."""
    data = build_data(instance, instance.lower_bound)  # arcs with hops <= floor only
    model, v = build_cpsat(data, packing=True)
    outcome, solver = run_cpsat(model, options, None, time_limit, reported=SILENT)   # counts rings, maximizes
    mapping = None
    if outcome.has_solution and complete is not None:
        packed = [ring for ring in decode_cpsat(data, v, solver.Value) if ring]
        left = options.remaining()
        deadline = time.monotonic() + (COMPLETE_S if left is None else min(COMPLETE_S, left))
        mapping = complete(instance.mesh, packed, data.G, data.N, data.floor, deadline)
    if outcome.status == "optimal":
        most = round(solver.ObjectiveValue())
    elif outcome.bound is not None:
        most = integral_floor(outcome.bound)   # a maximization: its bound rounded down
    else:
        return instance.lower_bound, "packing bound not available", mapping
    most = min(most, data.G)
    return instance.lower_bound + (data.G - most), f"at most {most} rings can cost {data.floor}", mapping


def solve_cpsat(instance, options: SolveOptions, complete: Complete | None = None) -> MethodResult:
    """Ring-column model (CP-SAT) first; the circuit model only when the enumeration is too large."""
    search, stats, done = column_phase(instance, options, solve_columns_cpsat, cpsat_version(), complete)
    return done or circuit_cpsat(instance, options, search, stats, complete)


def circuit_cpsat(instance, options: SolveOptions, search: ColumnSearch,
                  stats: dict, complete: Complete | None = None) -> MethodResult:
    """Fallback: the circuit model from the column search's best plan and bound (plus the
    packing bound when not even the rings of floor cost could be enumerated)."""
    start, bound, why = search.groups, search.bound, search.message
    if search.last_K is None and options.export is None:
        share = None if options.time_limit is None else 0.3 * options.remaining()
        packing_bound, packing_why, packed = floor_ring_bound(instance, options, share, complete)
        if packing_bound > bound:
            bound, why = packing_bound, f"{why}; {packing_why}"
        if packed is not None and groups_cost(instance, packed) < groups_cost(instance, start):
            start = packed
    start_cost = groups_cost(instance, start)
    data = build_data(instance, start_cost)
    model, v = build_cpsat(data)
    model.Add(sum(v["cost"]) >= bound)  # proven above: helps CP-SAT close the gap
    hint_cpsat(model, data, v, canonical(data, start))
    options.incumbent(groups_plan(start), bound)

    def on_solution(cb):
        options.incumbent(groups_plan(decode_cpsat(data, v, cb.Value)))

    outcome, solver = run_cpsat(model, options, on_solution, options.remaining())
    groups = decode_cpsat(data, v, solver.Value) if outcome.has_solution else start
    stats.update({"arcs_per_ring": len(data.arcs), "max_ring_cost": data.max_ring, "floor_ring_bound": bound})
    best = max(bound, outcome.bound) if outcome.bound is not None else bound
    message = "; ".join(x for x in (outcome.message, why) if x)
    return method_result(instance, groups, outcome.status, best, outcome.solver, message, stats)


# --- MILP ---------------------------------------------------------------------------------------------
def build_milp(data: RingData):
    import pyomo.environ as pyo  # lazy: slow import (docs/architecture.md)

    m = pyo.ConcreteModel("tatp")
    m.G = pyo.RangeSet(0, data.G - 1)
    m.D = pyo.RangeSet(0, len(data.dies) - 1)
    m.A = pyo.Set(initialize=data.arcs, dimen=2)
    n = len(data.dies)
    # member[g, d]: die d belongs to ring g
    m.member = pyo.Var(m.G, m.D, domain=pyo.Binary)
    # arc[g, u, v]: ring g goes from die u to die v
    m.arc = pyo.Var(m.G, m.A, domain=pyo.Binary)
    # flow[g, u, v]: commodity sent from ring g's lowest die along its arcs (connectivity)
    m.flow = pyo.Var(m.G, m.A, domain=pyo.NonNegativeReals, bounds=(0, data.N - 1))
    # first[g, d]: d is the lowest-index die of ring g
    m.first = pyo.Var(m.G, m.D, domain=pyo.Binary)
    # cost[g]: longest hop of ring g
    m.cost = pyo.Var(m.G, bounds=(data.floor, data.max_ring))

    out_arcs = {d: [] for d in range(n)}
    in_arcs = {d: [] for d in range(n)}
    for u, v in data.arcs:
        out_arcs[u].append(v)
        in_arcs[v].append(u)

    m.one_ring_per_die = pyo.Constraint(m.D, rule=lambda m, d: sum(m.member[g, d] for g in m.G) <= 1)
    m.ring_size = pyo.Constraint(m.G, rule=lambda m, g: sum(m.member[g, d] for d in m.D) == data.N)
    m.leave_once = pyo.Constraint(m.G, m.D, rule=lambda m, g, d:
                                  sum(m.arc[g, d, v] for v in out_arcs[d]) == m.member[g, d])
    m.enter_once = pyo.Constraint(m.G, m.D, rule=lambda m, g, d:
                                  sum(m.arc[g, u, d] for u in in_arcs[d]) == m.member[g, d])
    # one_cycle: the lowest die sends N-1 units, every other member keeps one
    m.flow_on_arcs = pyo.Constraint(m.G, m.A, rule=lambda m, g, u, v:
                                    m.flow[g, u, v] <= (data.N - 1) * m.arc[g, u, v])
    m.flow_balance = pyo.Constraint(m.G, m.D, rule=lambda m, g, d:
                                    sum(m.flow[g, u, d] for u in in_arcs[d])
                                    - sum(m.flow[g, d, v] for v in out_arcs[d])
                                    == m.member[g, d] - data.N * m.first[g, d])
    m.first_is_member = pyo.Constraint(m.G, m.D, rule=lambda m, g, d: m.first[g, d] <= m.member[g, d])
    m.one_first = pyo.Constraint(m.G, rule=lambda m, g: sum(m.first[g, d] for d in m.D) == 1)
    # lowest_member: no member has a lower index than first (symmetry breaking needs it)
    m.lowest_member = pyo.Constraint(m.G, m.D, rule=lambda m, g, d:
                                     sum(k * m.first[g, k] for k in m.D) <= d + n * (1 - m.member[g, d]))
    m.rings_sorted = pyo.Constraint(pyo.RangeSet(0, data.G - 2) if data.G > 1 else [], rule=lambda m, g:
                                    sum(k * m.first[g, k] for k in m.D) + 1
                                    <= sum(k * m.first[g + 1, k] for k in m.D))
    long_arcs = [(u, v) for u, v in data.arcs if data.dist[u, v] > data.floor]
    m.hop_within_cost = pyo.Constraint(m.G, long_arcs, rule=lambda m, g, u, v:
                                       m.cost[g] >= int(data.dist[u, v]) * m.arc[g, u, v])
    m.total_cost = pyo.Objective(expr=sum(m.cost[g] for g in m.G), sense=pyo.minimize)
    return m


def warm_start_milp(m, data: RingData, rings: list[list[int]]) -> None:
    used = {(g, a, b) for g, ring in enumerate(rings) for a, b in ring_arcs(ring)}
    for g, ring in enumerate(rings):
        for d in range(len(data.dies)):
            m.member[g, d].value = int(d in ring)
            m.first[g, d].value = int(d == min(ring))
        # flow along the ring order starting at the lowest die: N-1, N-2, ..., 1
        k0 = ring.index(min(ring))
        order = ring[k0:] + ring[:k0]
        load = {(order[k], order[(k + 1) % len(order)]): len(order) - 1 - k for k in range(len(order))}
        for u, v in data.arcs:
            m.arc[g, u, v].value = int((g, u, v) in used)
            m.flow[g, u, v].value = load.get((u, v), 0) if (g, u, v) in used else 0
        m.cost[g].value = max(data.floor, max(int(data.dist[a, b]) for a, b in ring_arcs(ring)))


def decode_milp(m, data: RingData) -> list[list[Die]]:
    groups = []
    for g in range(data.G):
        members = [d for d in data.positions if m.member[g, d].value > 0.5]
        succ = {u: v for u, v in data.arcs if m.arc[g, u, v].value > 0.5}
        groups.append(rings_from_arcs(data, members, succ))
    return groups


def solve_milp(instance, options: SolveOptions, complete: Complete | None = None) -> MethodResult:
    """Ring-column model (HiGHS) first; the flow MILP only when the enumeration is too large."""
    search, stats, done = column_phase(instance, options, solve_columns_milp, milp_solver_name(options),
                                       complete)
    if done:
        return done
    start, start_cost = search.groups, groups_cost(instance, search.groups)
    data = build_data(instance, start_cost)
    model = build_milp(data)
    warm_start_milp(model, data, canonical(data, start))
    outcome = solve_pyomo(model, options, warm_start=True, time_limit=options.remaining())
    groups = decode_milp(model, data) if outcome.has_solution else start
    stats.update({"arcs_per_ring": len(data.arcs), "max_ring_cost": data.max_ring})
    if groups_cost(instance, groups) > start_cost:
        groups = start
    bound = max(search.bound, outcome.bound) if outcome.bound is not None else search.bound
    message = "; ".join(x for x in (outcome.message, search.message) if x)
    return method_result(instance, groups, outcome.status, bound, outcome.solver, message, stats)
