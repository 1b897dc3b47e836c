"""Mem_pair DRAM allocation as a MILP, a transportation LP and a CP-SAT model; see docs/mem_pair.md.

Data: senders s needing n_s chunks, helpers h with room c_h chunks, hop counts d_sh (reachable
pairs only), chunk size q, optional K helpers per sender.
Variables: y_sh (chunks of s on h), u_sh (s uses h; only with K).
Constraints: place_all (sum_h y_sh = n_s), helper_room (sum_s y_sh <= c_h), use_link
(y_sh <= min(n_s, c_h) u_sh) and partners (sum_h u_sh <= K) with K.
Objective: q * sum_sh d_sh y_sh.
"""

from __future__ import annotations

from wafopt.core.budget import SolveOptions
from wafopt.core.numeric import integral_bound, tolerance
from wafopt.core.registry import PYOMO_HIGHS, loads
from wafopt.core.result import MethodResult
from wafopt.problems.mem_pair.certificate import transport_lp
from wafopt.problems.mem_pair.instance import MemPairInstance
from wafopt.problems.mem_pair.plans import (
    chunks_of,
    plan_of,
    respects_k,
    transport_chunks,
)
from wafopt.solvers.backends import (
    cpsat_version,
    milp_method,
    milp_solver_name,
    solve_pyomo,
)
from wafopt.solvers.backends import solve_cpsat as run_cpsat
from wafopt.solvers.reported import Reported

# --- shared -----------------------------------------------------------------------------------------


def pairs(inst: MemPairInstance) -> list[tuple[int, int]]:
    """Reachable (sender, helper) pairs that can carry a chunk."""
    return [(s, h) for s in range(len(inst.senders)) for h in range(len(inst.helpers))
            if inst.hops[s][h] is not None and inst.need[s] > 0 and inst.room[h] > 0]


def early_infeasible(inst: MemPairInstance, solver: str) -> MethodResult | None:
    why = inst.infeasibility()
    return MethodResult(None, "infeasible", None, solver, why) if why else None


def start_plan(inst: MemPairInstance, options: SolveOptions) -> dict | None:
    """The warm start: the given plan, else the transportation optimum when it respects K (it is
    then optimal), else none (wafopt.compose.methods passes the greedy plan of Alg. 3 then)."""
    if options.warm_start is not None:
        return options.warm_start
    chunks = transport_chunks(inst)
    return plan_of(inst, chunks) if chunks is not None and respects_k(inst, chunks) else None


# --- MILP and LP (pyomo + HiGHS) ----------------------------------------------------------------------


def build_milp(inst: MemPairInstance, relax: bool = False, with_k: bool = True):
    import pyomo.environ as pyo  # lazy: slow import (docs/architecture.md)

    m = pyo.ConcreteModel("mem_pair")
    # data
    A = pairs(inst)
    n, c, d = inst.need, inst.room, inst.hops
    K = inst.max_helpers_per_sender if with_k else None
    S, H = range(len(inst.senders)), range(len(inst.helpers))

    # variables
    m.y = pyo.Var(A, domain=pyo.NonNegativeReals if relax else pyo.NonNegativeIntegers,  # chunks s -> h
                  bounds=lambda _, s, h: (0, min(n[s], c[h])))
    if K is not None:
        m.u = pyo.Var(A, domain=pyo.Binary)                                              # s uses h

    # constraints
    def row(terms, make):  # senders or helpers without a usable pair have nothing to constrain
        return make(sum(terms)) if terms else pyo.Constraint.Skip

    m.place_all = pyo.Constraint(S, rule=lambda _, s: row([m.y[s, h] for h in H if (s, h) in m.y],
                                                          lambda e: e == n[s]))
    m.helper_room = pyo.Constraint(H, rule=lambda _, h: row([m.y[s, h] for s in S if (s, h) in m.y],
                                                            lambda e: e <= c[h]))
    if K is not None:
        m.use_link = pyo.Constraint(A, rule=lambda _, s, h: m.y[s, h] <= min(n[s], c[h]) * m.u[s, h])
        m.partners = pyo.Constraint(S, rule=lambda _, s: row([m.u[s, h] for h in H if (s, h) in m.u],
                                                             lambda e: e <= K))

    # objective: volume times hops
    m.volume_hops = pyo.Objective(expr=inst.chunk * sum(d[s][h] * m.y[s, h] for s, h in A),
                                  sense=pyo.minimize)
    return m


def set_milp_start(model, inst: MemPairInstance, plan: dict) -> None:
    chunks = chunks_of(inst, plan)
    for key in model.y:
        model.y[key].value = chunks.get(key, 0)
        if hasattr(model, "u"):
            model.u[key].value = 1 if chunks.get(key, 0) > 0 else 0


def decode_milp(model) -> tuple[dict[tuple[int, int], int], bool]:
    """Chunks per pair (rounded), and whether every value was integral (the one tolerance rule at
    the size of the largest value, so solver noise on zeros does not count)."""
    values = {key: model.y[key].value or 0.0 for key in model.y}
    noise = tolerance(*values.values())
    integral = all(abs(v - round(v)) <= noise for v in values.values())
    return {key: int(round(v)) for key, v in values.items() if round(v) > 0}, integral


def solve_milp(inst: MemPairInstance, options: SolveOptions) -> MethodResult:
    early = early_infeasible(inst, milp_solver_name(options))
    if early:
        return early
    return milp_method(build_milp(inst), options, start_plan(inst, options),
                       lambda model, plan: set_milp_start(model, inst, plan),
                       lambda model: plan_of(inst, decode_milp(model)[0]))


@loads(*PYOMO_HIGHS)
def solve_lp(inst: MemPairInstance, options: SolveOptions) -> MethodResult:
    """Transportation LP without K: integral vertices (totally unimodular), so optimal without K;
    with K its value is a lower bound and its plan counts only if it happens to respect K."""
    early = early_infeasible(inst, milp_solver_name(options))
    if early:
        return early
    model = build_milp(inst, relax=True, with_k=False)
    out = solve_pyomo(model, options)
    if out.status == "infeasible":
        return MethodResult(None, "infeasible", None, out.solver, out.message)
    if not out.has_solution:
        return MethodResult(None, "unknown", out.bound, out.solver, out.message)
    chunks, integral = decode_milp(model)
    bound = transport_lp(inst) or out.bound   # the same LP's value, as a dual certificate certify re-checks
    if not integral:
        return MethodResult(None, "unknown", bound, out.solver,
                            "the LP solution is fractional; only its bound is kept")
    plan = plan_of(inst, chunks)
    K = inst.max_helpers_per_sender

    if not respects_k(inst, chunks):
        return MethodResult(None, "unknown", bound, out.solver,
                            f"the LP plan uses more than K = {K} helpers for a sender: only its bound is kept")
    return MethodResult(plan, out.status, bound, out.solver,
                        "transportation LP" + ("" if K is None else " (respects K, hence optimal)"))


# --- CP-SAT ----------------------------------------------------------------------------------------------


def build_cpsat(inst: MemPairInstance):
    from ortools.sat.python import cp_model  # lazy: slow import (docs/architecture.md)

    model = cp_model.CpModel()
    # data (hops and chunk counts are integers: the model is exact in chunk units)
    A = pairs(inst)
    n, c, d = inst.need, inst.room, inst.hops
    K = inst.max_helpers_per_sender
    S, H = range(len(inst.senders)), range(len(inst.helpers))

    # variables
    y = {(s, h): model.NewIntVar(0, min(n[s], c[h]), f"y[{s},{h}]") for s, h in A}  # chunks s -> h
    u = {key: model.NewBoolVar(f"u[{key[0]},{key[1]}]") for key in A} if K is not None else {}  # s uses h

    # constraints
    for s in S:
        model.Add(cp_model.LinearExpr.Sum([y[s, h] for h in H if (s, h) in y]) == n[s]).WithName(f"place_all[{s}]")
    for h in H:
        model.Add(cp_model.LinearExpr.Sum([y[s, h] for s in S if (s, h) in y]) <= c[h]).WithName(f"helper_room[{h}]")
    if K is not None:
        for (s, h), var in y.items():
            model.Add(var <= min(n[s], c[h]) * u[s, h]).WithName(f"use_link[{s},{h}]")
        for s in S:
            model.Add(cp_model.LinearExpr.Sum([u[s, h] for h in H if (s, h) in u]) <= K).WithName(f"partners[{s}]")

    # objective in chunk-hops (times chunk when decoded)
    chunk_hops = cp_model.LinearExpr.WeightedSum([y[key] for key in A], [d[s][h] for s, h in A])
    if K is not None:
        # transportation_bound: the min-cost flow without K is a relaxation, so a valid cut
        relaxed = transport_chunks(inst)
        if relaxed is not None:
            model.Add(chunk_hops >= sum(v * d[s][h] for (s, h), v in relaxed.items())).WithName(
                "transportation_bound")
    model.Minimize(chunk_hops)
    return model, y, u


def decode_cpsat(values, y) -> dict[tuple[int, int], int]:
    return {key: values.Value(var) for key, var in y.items() if values.Value(var) > 0}


def solve_cpsat(inst: MemPairInstance, options: SolveOptions) -> MethodResult:
    early = early_infeasible(inst, cpsat_version())
    if early:
        return early
    model, y, u = build_cpsat(inst)
    start = start_plan(inst, options)
    hint = None if options.warm_start is not None else transport_chunks(inst)
    if hint is None and start is not None:
        hint = chunks_of(inst, start)
    if start is not None:
        options.incumbent(start)
    if hint is not None:
        # the K-free flow optimum guides the search even where it breaks K (a hint need not be feasible)
        chunks = hint
        for key, var in y.items():
            model.AddHint(var, chunks.get(key, 0))
            if key in u:
                model.AddHint(u[key], 1 if chunks.get(key, 0) > 0 else 0)
    out, solver = run_cpsat(model, options, reported=Reported(scale=1 / inst.chunk),   # chunk-hops
                            on_solution=lambda cb: options.incumbent(plan_of(inst, decode_cpsat(cb, y))))
    if out.status == "infeasible":
        return MethodResult(None, "infeasible", None, out.solver, out.message)
    plan = plan_of(inst, decode_cpsat(solver, y)) if out.has_solution else start
    bound = None if out.bound is None else integral_bound(out.bound) * inst.chunk  # whole chunk-hops
    return MethodResult(plan, out.status if plan is not None else "unknown", bound, out.solver, out.message)
