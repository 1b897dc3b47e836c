"""Recomputation selection as a MILP (pyomo + HiGHS) and a CP-SAT model; see docs/recompute.md.

Data: stages i with layers L_i, in-flight micro-batches k_i, state S_i, capacity Cap_i, compute
T0_i; units j with kept memory a_j and recompute time r_j; m micro-batches.
Variables: x_ij (layers of stage i whose unit j is recomputed), t_max (bottleneck stage time).
Constraints: memory_fits (local) or pooled_memory (pooled); bottleneck (t_max >= T_i).
Objective: sum_i T_i + (m - 1) t_max.
"""

from __future__ import annotations

import math
from fractions import Fraction

from wafopt.core.budget import SolveOptions
from wafopt.core.numeric import MAX_EXACT, decimal_scale, exact, integral_bound, scaled
from wafopt.core.result import MethodResult
from wafopt.costmodel.schedule import one_f_one_b
from wafopt.problems.recompute.instance import RecomputeInstance
from wafopt.problems.recompute.plans import plan_of
from wafopt.solvers.backends import cpsat_version, milp_method, milp_solver_name
from wafopt.solvers.backends import solve_cpsat as run_cpsat
from wafopt.solvers.reported import Reported

# --- shared -----------------------------------------------------------------------------------


def infeasible_result(inst: RecomputeInstance, solver: str) -> MethodResult | None:
    """An `infeasible` result naming the memory shortfall when even full recomputation fails."""
    why = inst.shortfall()
    return MethodResult(None, "infeasible", None, solver, why) if why else None


def start_plan(inst: RecomputeInstance, options: SolveOptions) -> dict | None:
    """The warm start (wafopt.compose.methods passes the GCMR DP's plan), or None."""
    return options.warm_start


# --- MILP (pyomo + HiGHS) -----------------------------------------------------------------------


def build_milp(inst: RecomputeInstance):
    import pyomo.environ as pyo  # lazy: slow import (docs/architecture.md)

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

    # objective: 1F1B iteration time (wafopt.costmodel.schedule.one_f_one_b, linear through t_max)
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
    early = infeasible_result(inst, milp_solver_name(options))
    if early:
        return early
    return milp_method(build_milp(inst), options, start_plan(inst, options),
                       lambda model, plan: set_milp_start(model, inst, plan),
                       lambda model: decode_milp(model, inst))


# --- CP-SAT --------------------------------------------------------------------------------------


def integer_data(inst: RecomputeInstance) -> dict:
    """Integer data for CP-SAT, scaled from the data's exact decimal places (wafopt.core.numeric).

    Memory: exact when every a_j, S_i and Cap_i scales to an integer and the model's memory sums
    stay within 2^53; else a_j and S_i rounded up and Cap_i down at a scale that makes the largest
    ~1e9 (every model solution stays feasible; its bound is then not a bound of the instance).
    Time: exact likewise; else r_j and T0_i rounded down (the model objective never exceeds the
    true one, so the bound stays valid; optimality is then not claimed).
    """
    P, U = range(len(inst.stages)), range(len(inst.units))
    st, un = inst.stages, inst.units
    mem_values = [u.mem for u in un] + [s.state for s in st] + [s.capacity for s in st]
    time_values = [u.recompute for u in un] + [s.compute for s in st]
    # the largest sums the model forms: all activations and capacities; the 1F1B objective
    mem_reach = sum(st[i].inflight * st[i].layers * exact(un[j].mem) for i in P for j in U) \
        + sum(exact(s.capacity) + exact(s.state) for s in st)
    stage_reach = [exact(st[i].compute) + st[i].layers * sum(exact(u.recompute) for u in un) for i in P]
    time_reach = exact(one_f_one_b(stage_reach, inst.microbatches))

    def scale_of(values, reach) -> tuple[int | Fraction, bool]:
        scale = decimal_scale(values, limit=math.inf)
        if scale is not None and reach * scale <= MAX_EXACT:
            return scale, True
        top = max(abs(exact(v)) for v in values)   # the fallback makes the largest value ~1e9
        return (Fraction(10) ** (9 - math.ceil(math.log10(top))) if top > 0 else 1), False

    mem_scale, exact_mem = scale_of(mem_values, mem_reach)
    time_scale, exact_time = scale_of(time_values, time_reach)

    def up(v, scale, is_exact):
        return scaled(v, scale) if is_exact else math.ceil(exact(v) * scale)

    def down(v, scale, is_exact):
        return scaled(v, scale) if is_exact else math.floor(exact(v) * scale)

    return {"a": [up(u.mem, mem_scale, exact_mem) for u in un],
            "S": [up(s.state, mem_scale, exact_mem) for s in st],
            "Cap": [down(s.capacity, mem_scale, exact_mem) for s in st],
            "r": [down(u.recompute, time_scale, exact_time) for u in un],
            "T0": [down(s.compute, time_scale, exact_time) for s in st],
            "time_scale": time_scale, "exact_mem": exact_mem, "exact_time": exact_time}


def build_cpsat(inst: RecomputeInstance, data: dict):
    from ortools.sat.python import cp_model  # lazy: slow import (docs/architecture.md)

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

    # objective: 1F1B (wafopt.costmodel.schedule.one_f_one_b) less the constant sum_i T0_i,
    # which is added back when decoding the bound
    model.Minimize(sum(r[j] * x[i, j] for i in P for j in U) + (inst.microbatches - 1) * t_max)
    return model, x


def decode_cpsat(values, x, inst: RecomputeInstance) -> dict:
    return plan_of([[values.Value(x[i, j]) for j in range(len(inst.units))]
                    for i in range(len(inst.stages))])


def solve_cpsat(inst: RecomputeInstance, options: SolveOptions) -> MethodResult:
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
    # the model leaves out sum_i T0_i and counts time in 1/time_scale units; rounded time data
    # make its incumbents underestimates, rounded memory its bound no bound of the instance
    reported = Reported(scale=float(data["time_scale"]), offset=sum(data["T0"]),
                        incumbent=data["exact_time"], bound=data["exact_mem"])
    out, solver = run_cpsat(model, options, reported=reported,
                            on_solution=lambda cb: options.incumbent(decode_cpsat(cb, x, inst)))
    if out.status == "infeasible":
        if data["exact_mem"]:
            return MethodResult(None, "infeasible", None, out.solver, out.message)
        return MethodResult(start, "feasible" if start else "unknown", None, out.solver,
                            "memory rounded conservatively and the rounded model is infeasible")
    plan = decode_cpsat(solver, x, inst) if out.has_solution else start
    bound, status, notes = None, out.status, []
    if out.bound is not None and data["exact_mem"]:
        # an integer objective; valid also when the time data were rounded down
        bound = float(Fraction(int(integral_bound(out.bound)) + sum(data["T0"]), data["time_scale"]))
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
                        {"time_scale": float(data["time_scale"]), "exact_scaling": data["exact_mem"] and data["exact_time"]})
