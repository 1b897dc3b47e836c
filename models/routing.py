"""Traffic-conscious routing, exact: arc-flow MILP (pyomo + HiGHS) and CP-SAT.
Formulation in docs/routing.md, in the same order: data, variables, constraints, objective,
solve, decode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from wafopt.core.budget import SolveOptions
from wafopt.core.numeric import MAX_EXACT, decimal_scale, exact, integral_bound, scaled
from wafopt.core.result import MethodResult
from wafopt.hardware.mesh import Die, Link
from wafopt.problems.routing.certificate import endpoint
from wafopt.problems.routing.evaluate import evaluate
from wafopt.problems.routing.plans import routes_plan, xy_routes
from wafopt.solvers.backends import solve_cpsat as run_cpsat
from wafopt.solvers.backends import solve_pyomo
from wafopt.solvers.reported import Reported

VOLUME_DIGITS = 6  # CP-SAT: volumes scale exactly when they have at most this many decimals


# --- data ---------------------------------------------------------------------------------------------
@dataclass
class RoutingData:
    links: list[Link]                  # healthy directed links
    arcs: list[list[Link]]             # per flow: links that lie on some candidate path
    budget: list[int]                  # per flow: most hops allowed (shortest + detour)
    volume: list[float]
    src: list[Die]
    dst: list[Die]
    bandwidth: float
    detour: int


def build_data(instance) -> RoutingData:
    """A link (u, v) can carry flow f only if dist(src, u) + 1 + dist(v, dst) <= shortest + detour.
    With detour 0 these links form the DAG of shortest paths, so every src-dst path in it is a
    candidate; with a detour the path length is bounded explicitly."""
    mesh = instance.mesh
    arcs, budget = [], []
    for f in instance.flows:
        limit = instance.max_hops(f)
        d_src = mesh.distance_matrix[mesh.index(f.src)]
        d_dst = mesh.distance_matrix[:, mesh.index(f.dst)]
        arcs.append([(u, v) for u, v in mesh.directed_links
                     if d_src[mesh.index(u)] + 1 + d_dst[mesh.index(v)] <= limit])
        budget.append(limit)
    return RoutingData(list(mesh.directed_links), arcs, budget, [f.volume for f in instance.flows],
                [f.src for f in instance.flows], [f.dst for f in instance.flows], mesh.link_bandwidth,
                instance.detour)


def start_routes(instance, options: SolveOptions) -> list[list[Die]]:
    """The warm start if feasible (wafopt.compose.methods passes TCME's routing), else XY."""
    if options.warm_start is not None and evaluate(instance, options.warm_start).feasible:
        return [[tuple(d) for d in p] for p in options.warm_start["routes"]]
    return xy_routes(instance)


def nodes_of(arcs: list[Link]) -> set[Die]:
    return {d for link in arcs for d in link}


def supply(data: RoutingData, f: int, die: Die) -> int:
    return 1 if die == data.src[f] else -1 if die == data.dst[f] else 0


def walk(data: RoutingData, f: int, used: set[Link]) -> list[Die]:
    """The path from src along used links (cycles disjoint from it are dropped)."""
    nxt = {u: v for u, v in used}
    path = [data.src[f]]
    while path[-1] != data.dst[f]:
        path.append(nxt[path[-1]])
    return path


def _result(instance, routes, status, bound, solver, message, stats) -> MethodResult:
    plan = routes_plan(routes)
    floor = endpoint(instance)   # a certificate; a solver bound above it stays the solver's claim
    return MethodResult(plan, status, bound if bound is not None and bound > floor.value else floor, solver,
                        message, stats)


# --- MILP ---------------------------------------------------------------------------------------------
def build_milp(data: RoutingData):
    """Pyomo flattens tuple indices, so links are indexed by their position in data.links and
    dies by a running number."""
    import pyomo.environ as pyo  # lazy: slow import (docs/architecture.md)

    m = pyo.ConcreteModel("routing")
    F = range(len(data.arcs))
    link_id = {link: k for k, link in enumerate(data.links)}
    die_id = {d: k for k, d in enumerate(sorted(nodes_of(data.links)))}
    m.FA = pyo.Set(initialize=[(f, link_id[a]) for f in F for a in data.arcs[f]], dimen=2)
    # use[f, l]: flow f crosses directed link l
    m.use = pyo.Var(m.FA, domain=pyo.Binary)
    # peak: the largest link load in units of the largest volume
    m.peak = pyo.Var(domain=pyo.NonNegativeReals)

    out_arcs = {(f, die_id[d]): [] for f in F for d in nodes_of(data.arcs[f])}
    in_arcs = {(f, die_id[d]): [] for f in F for d in nodes_of(data.arcs[f])}
    users: dict[int, list] = {}
    for f in F:
        for u, v in data.arcs[f]:
            out_arcs[f, die_id[u]].append((f, link_id[u, v]))
            in_arcs[f, die_id[v]].append((f, link_id[u, v]))
            users.setdefault(link_id[u, v], []).append(f)
    die_of = {k: d for d, k in die_id.items()}
    FN = list(out_arcs)
    m.conservation = pyo.Constraint(FN, rule=lambda m, f, d: sum(m.use[a] for a in out_arcs[f, d])
                                    - sum(m.use[a] for a in in_arcs[f, d]) == supply(data, f, die_of[d]))
    m.leave_once = pyo.Constraint(FN, rule=lambda m, f, d: sum(m.use[a] for a in out_arcs[f, d]) <= 1
                                  if out_arcs[f, d] else pyo.Constraint.Skip)
    m.path_length = pyo.Constraint(F, rule=lambda m, f: (sum(m.use[f, link_id[a]] for a in data.arcs[f])
                                                         <= data.budget[f]) if data.detour else
                                   pyo.Constraint.Skip)
    # volumes in units of the largest one keep HiGHS' absolute tolerances meaningful (bytes over
    # bytes/s would give objectives around 1e-6); the bound is scaled back in solve_milp
    unit = max(data.volume)
    m.link_load = pyo.Constraint(sorted(users), rule=lambda m, l: sum(
        data.volume[f] / unit * m.use[f, l] for f in users[l]) <= m.peak)
    m.peak_load = pyo.Objective(expr=m.peak, sense=pyo.minimize)
    m.link_id = link_id
    return m


def warm_start_milp(m, data: RoutingData, routes: list[list[Die]]) -> None:
    used = {(f, m.link_id[a, b]) for f, p in enumerate(routes) for a, b in zip(p, p[1:])}
    for key in m.FA:
        m.use[key].value = int(key in used)
    loads: dict[int, float] = {}
    for f, l in used:
        loads[l] = loads.get(l, 0.0) + data.volume[f]
    m.peak.value = max(loads.values()) / max(data.volume)


def decode_milp(m, data: RoutingData) -> list[list[Die]]:
    return [walk(data, f, {a for a in data.arcs[f] if m.use[f, m.link_id[a]].value > 0.5})
            for f in range(len(data.arcs))]


def solve_milp(instance, options: SolveOptions) -> MethodResult:
    start = start_routes(instance, options)
    options.incumbent(routes_plan(start))
    data = build_data(instance)
    model = build_milp(data)
    warm_start_milp(model, data, start)
    outcome = solve_pyomo(model, options, warm_start=True, time_limit=options.remaining(),
                          reported=Reported(scale=data.bandwidth / max(data.volume)))   # loads in largest volumes
    routes = decode_milp(model, data) if outcome.has_solution else start
    bound = None if outcome.bound is None else outcome.bound * max(data.volume) / data.bandwidth
    grid = decimal_scale(data.volume, max_digits=VOLUME_DIGITS, limit=math.inf)
    if bound is not None and grid is not None:   # every peak load is a whole number of 1/grid units
        bound = integral_bound(bound * data.bandwidth, grid) / data.bandwidth
    return _result(instance, routes, outcome.status, bound, outcome.solver, outcome.message,
                   {"binaries": len(model.FA)})


# --- CP-SAT -------------------------------------------------------------------------------------------
def integer_volumes(volumes: list[float]) -> tuple[list[int], Fraction, bool]:
    """Volumes as integers: exact with the power-of-ten scale of their decimal places when there
    are at most VOLUME_DIGITS and all volumes together stay within 2^53 (no link load can exceed
    their sum), else floored at scale 1e6 / max volume, which makes the model's optimum a lower
    bound only. Returns (integer volumes, scale, exact)."""
    scale = decimal_scale(volumes, max_digits=VOLUME_DIGITS, limit=MAX_EXACT, total=True)
    if scale is not None:
        return [scaled(v, scale) for v in volumes], Fraction(scale), True
    scale = Fraction(10 ** 6) / exact(max(volumes))
    return [math.floor(exact(v) * scale) for v in volumes], scale, False


def build_cpsat(data: RoutingData, weights: list[int]):
    from ortools.sat.python import cp_model  # lazy: slow import (docs/architecture.md)

    m = cp_model.CpModel()
    F = range(len(data.arcs))
    # use[f, u, v]: flow f crosses directed link u -> v
    use = {(f, u, v): m.NewBoolVar(f"use_{f}") for f in F for u, v in data.arcs[f]}
    # peak: the largest scaled link load
    peak = m.NewIntVar(0, sum(weights), "peak")
    for f in F:
        for d in nodes_of(data.arcs[f]):
            out = [use[f, u, v] for u, v in data.arcs[f] if u == d]
            into = [use[f, u, v] for u, v in data.arcs[f] if v == d]
            m.Add(sum(out) - sum(into) == supply(data, f, d))  # conservation
            m.AddAtMostOne(out)                                   # leave_once
        if data.detour:
            m.Add(sum(use[f, u, v] for u, v in data.arcs[f]) <= data.budget[f])  # path_length
    users: dict[Link, list] = {}
    for (f, u, v), var in use.items():
        users.setdefault((u, v), []).append((weights[f], var))
    for link, terms in users.items():  # link_load
        m.Add(sum(w * var for w, var in terms) <= peak)
    m.Minimize(peak)
    return m, use, peak


def decode_cpsat(data: RoutingData, use: dict, value) -> list[list[Die]]:
    return [walk(data, f, {(u, v) for u, v in data.arcs[f] if value(use[f, u, v])})
            for f in range(len(data.arcs))]


def solve_cpsat(instance, options: SolveOptions) -> MethodResult:
    start = start_routes(instance, options)
    options.incumbent(routes_plan(start))
    data = build_data(instance)
    weights, scale, is_exact = integer_volumes(data.volume)
    model, use, peak = build_cpsat(data, weights)
    used = {(f, a, b) for f, p in enumerate(start) for a, b in zip(p, p[1:])}
    for key, var in use.items():
        model.AddHint(var, key in used)

    def on_solution(cb):
        options.incumbent(routes_plan(decode_cpsat(data, use, cb.Value)))

    # loads in integer volumes x scale; floored volumes make incumbents underestimates
    reported = Reported(scale=float(scale) * data.bandwidth, incumbent=is_exact)
    outcome, solver = run_cpsat(model, options, on_solution, options.remaining(), reported=reported)
    routes = decode_cpsat(data, use, solver.Value) if outcome.has_solution else start
    # an integer model objective: its bound rounded up, then in evaluator units
    bound = None if outcome.bound is None else \
        float(Fraction(int(integral_bound(outcome.bound))) / scale / exact(data.bandwidth))
    status = outcome.status if is_exact else ("feasible" if outcome.has_solution else outcome.status)
    message = outcome.message if is_exact else (outcome.message + "; volumes floored to integers, the bound "
                                             "is valid but optimality is not claimed").lstrip("; ")
    return _result(instance, routes, status, bound, outcome.solver, message,
                   {"scale": float(scale), "exact_scaling": is_exact})
