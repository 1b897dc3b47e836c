"""Recomputation selection as a MILP (pyomo + HiGHS) and a CP-SAT model; see docs/recompute.md.

Data: stages i with layers L_i, in-flight micro-batches k_i, state S_i, capacity Cap_i, compute
T0_i; units j with kept memory a_j and recompute time r_j; m micro-batches.
Variables: x_ij (layers of stage i whose unit j is recomputed), t_max (bottleneck stage time).
Constraints: memory_fits (local) or pooled_memory (pooled); bottleneck (t_max >= T_i).
Objective: sum_i T_i + (m - 1) t_max.
"""

from __future__ import annotations

import math

from wafopt.problems.recompute.instance import RecomputeInstance
from wafopt.core.numeric import decimal_scale
from wafopt.core.result import MethodResult
from wafopt.core.budget import SolveOptions

# --- shared -----------------------------------------------------------------------------------


def infeasible_result(inst: RecomputeInstance, solver: str) -> MethodResult | None:
    """An `infeasible` result naming the memory shortfall when even full recomputation fails."""
    why = inst.shortfall()
    return MethodResult(None, "infeasible", None, solver, why) if why else None


def start_plan(inst: RecomputeInstance, options: SolveOptions) -> dict | None:
    """The warm start: the given plan, else the dp heuristic's plan (fast)."""
    if options.warm_start is not None:
        return options.warm_start
    from wafopt.heuristics.recompute import dp_plan

    return dp_plan(inst, budget_s=0.5)


def plan_of(x) -> dict:
    return {"x": [[int(v) for v in row] for row in x]}


# --- MILP (pyomo + HiGHS) -----------------------------------------------------------------------


def build_milp(inst: RecomputeInstance):
    import pyomo.environ as pyo

    m = pyo.ConcreteModel("recompute")
    # data
    P = range(len(inst.stages))
    U = range(len(inst.units))
    st, un = inst.stages, inst.units
    mem_unit = max([s.capacity for s in st] + [1e-300])  # memory rows in units of the largest DRAM

    # variables
    m.x = pyo.Var(P, U, domain=pyo.NonNegativeIntegers,  # layers of stage i recomputing unit j
                  bounds=lambda _, i, j: (0, st[i].layers))
    m.t_max = pyo.Var(domain=pyo.NonNegativeReals)        # the bottleneck stage time

    def stage_time(i):
        return st[i].compute + sum(un[j].recompute * m.x[i, j] for j in U)

    def activations(i):
        return st[i].inflight * sum(un[j].mem * (st[i].layers - m.x[i, j]) for j in U) / mem_unit

    # constraints
    if inst.mode == "local":
        m.memory_fits = pyo.Constraint(
            P, rule=lambda _, i: activations(i) <= (st[i].capacity - st[i].state) / mem_unit)
    else:
        m.pooled_memory = pyo.Constraint(
            expr=sum(activations(i) for i in P) <= sum(s.capacity - s.state for s in st) / mem_unit)
    m.bottleneck = pyo.Constraint(P, rule=lambda _, i: m.t_max >= stage_time(i))

    # objective: 1F1B iteration time
    m.iteration_time = pyo.Objective(
        expr=sum(stage_time(i) for i in P) + (inst.microbatches - 1) * m.t_max, sense=pyo.minimize)
    return m


def set_milp_start(model, inst: RecomputeInstance, plan: dict) -> None:
    x = plan["x"]
    for i in range(len(inst.stages)):
        for j in range(len(inst.units)):
            model.x[i, j].value = x[i][j]
    model.t_max.value = max(inst.stage_time(i, x[i]) for i in range(len(inst.stages)))


def decode_milp(model, inst: RecomputeInstance) -> dict:
    return plan_of([[round(model.x[i, j].value or 0) for j in range(len(inst.units))]
                    for i in range(len(inst.stages))])


def solve_milp(inst: RecomputeInstance, options: SolveOptions) -> MethodResult:
    from wafopt.solvers.backends import highs_version, milp_method

    early = infeasible_result(inst, highs_version())
    if early:
        return early
    return milp_method(build_milp(inst), options, start_plan(inst, options),
                       lambda model, plan: set_milp_start(model, inst, plan),
                       lambda model: decode_milp(model, inst))


# --- CP-SAT --------------------------------------------------------------------------------------


def integer_data(inst: RecomputeInstance) -> dict:
    """Integer data for CP-SAT: exact decimal scaling where possible, else conservative rounding.

    Memory: exact scale, or a_j and S_i rounded up and Cap_i down (every model solution stays
    feasible; its bound is then not a bound of the instance). Time: exact scale, or r_j and T0_i
    rounded down with 10^d making the largest value ~1e9 (the model objective never exceeds the
    true one, so the bound stays valid; optimality is then not claimed).
    """
    mem_values = [u.mem for u in inst.units] + [s.state for s in inst.stages] + [s.capacity for s in inst.stages]
    time_values = [u.recompute for u in inst.units] + [s.compute for s in inst.stages]
    mem_scale, time_scale = decimal_scale(mem_values), decimal_scale(time_values)
    exact_mem, exact_time = mem_scale is not None, time_scale is not None
    if not exact_mem:
        mem_scale = 10 ** max(0, 9 - math.ceil(math.log10(max(mem_values + [1e-300]))))
    if not exact_time:
        time_scale = 10 ** max(0, 9 - math.ceil(math.log10(max(time_values + [1e-300]))))
    up = round if exact_mem else math.ceil
    down = round if exact_mem else math.floor
    t_down = round if exact_time else math.floor
    return {"a": [up(u.mem * mem_scale) for u in inst.units],
            "S": [up(s.state * mem_scale) for s in inst.stages],
            "Cap": [down(s.capacity * mem_scale) for s in inst.stages],
            "r": [t_down(u.recompute * time_scale) for u in inst.units],
            "T0": [t_down(s.compute * time_scale) for s in inst.stages],
            "time_scale": time_scale, "exact_mem": exact_mem, "exact_time": exact_time}


def build_cpsat(inst: RecomputeInstance, data: dict):
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    # data
    P, U = range(len(inst.stages)), range(len(inst.units))
    L = [s.layers for s in inst.stages]
    k = [s.inflight for s in inst.stages]
    a, S, Cap, r, T0 = data["a"], data["S"], data["Cap"], data["r"], data["T0"]

    # variables
    x = {(i, j): model.NewIntVar(0, L[i], f"x[{i},{j}]") for i in P for j in U}  # recomputed layers
    t_hi = max(T0[i] + sum(r[j] * L[i] for j in U) for i in P)
    t_max = model.NewIntVar(0, t_hi, "t_max")                                      # bottleneck time
    stage_time = {i: T0[i] + sum(r[j] * x[i, j] for j in U) for i in P}
    activations = {i: k[i] * sum(a[j] * (L[i] - x[i, j]) for j in U) for i in P}

    # constraints
    if inst.mode == "local":
        for i in P:
            model.Add(activations[i] <= Cap[i] - S[i]).WithName(f"memory_fits[{i}]")
    else:
        model.Add(sum(activations.values()) <= sum(Cap) - sum(S)).WithName("pooled_memory")
    for i in P:
        model.Add(t_max >= stage_time[i]).WithName(f"bottleneck[{i}]")

    # objective (the constant sum_i T0_i is added back when decoding the bound)
    model.Minimize(sum(r[j] * x[i, j] for i in P for j in U) + (inst.microbatches - 1) * t_max)
    return model, x


def decode_cpsat(values, x, inst: RecomputeInstance) -> dict:
    return plan_of([[values.Value(x[i, j]) for j in range(len(inst.units))]
                    for i in range(len(inst.stages))])


def solve_cpsat(inst: RecomputeInstance, options: SolveOptions) -> MethodResult:
    from wafopt.solvers.backends import cpsat_version, solve_cpsat as run_cpsat

    early = infeasible_result(inst, cpsat_version())
    if early:
        return early
    data = integer_data(inst)
    model, x = build_cpsat(inst, data)
    start = start_plan(inst, options)
    if start is not None:
        for (i, j), var in x.items():
            model.AddHint(var, start["x"][i][j])
        options.incumbent(start)
    out, solver = run_cpsat(model, options,
                            on_solution=lambda cb: options.incumbent(decode_cpsat(cb, x, inst)))
    if out.status == "infeasible":
        if data["exact_mem"]:
            return MethodResult(None, "infeasible", None, out.solver, out.message)
        return MethodResult(start, "feasible" if start else "unknown", None, out.solver,
                            "memory rounded conservatively and the rounded model is infeasible")
    plan = decode_cpsat(solver, x, inst) if out.has_solution else start
    bound, status, notes = None, out.status, []
    if out.bound is not None and data["exact_mem"]:
        # floor keeps the bound valid when the time data was rounded down
        bound = (math.floor(out.bound + 1e-6) + sum(data["T0"])) / data["time_scale"]
        if data["exact_time"]:
            bound = (round(out.bound) + sum(data["T0"])) / data["time_scale"]
    if not (data["exact_mem"] and data["exact_time"]):
        notes.append("data not exactly scalable to integers: "
                     + ("memory rounded conservatively, no bound; " if not data["exact_mem"] else "")
                     + ("time rounded down (bound valid)" if not data["exact_time"] else ""))
        if status == "optimal":
            status = "feasible"
    if plan is None:
        status = "unknown"
    message = "; ".join([m for m in [out.message] + notes if m])
    return MethodResult(plan, status, bound, out.solver, message,
                        {"time_scale": data["time_scale"], "exact_scaling": data["exact_mem"] and data["exact_time"]})
