"""Both solvers in one process (ortools 9.15 breaks highspy 1.15: or-tools #5246; 1.14 is pinned)."""

import pyomo.environ as pyo
import pytest
from ortools.sat.python import cp_model

from wafopt.core.budget import SolveOptions
from wafopt.solvers.backends import solve_cpsat, solve_pyomo


def _tiny_model():
    """min 3x + 2y, x + y >= 2.5, x binary, y integer in [0, 5]: optimum x=0, y=3 -> 6"""
    m = pyo.ConcreteModel()
    m.x = pyo.Var(domain=pyo.Binary)
    m.y = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0, 5))
    m.cover = pyo.Constraint(expr=m.x + m.y >= 2.5)
    m.cost = pyo.Objective(expr=3 * m.x + 2 * m.y)
    return m


def test_highs_and_cpsat_in_one_process():
    import highspy  # noqa: F401  (imported after ortools on purpose)

    m = _tiny_model()   # optimum x=0, y=3 -> 6
    out = solve_pyomo(m, SolveOptions(quiet=True))
    assert out.status == "optimal" and abs(out.bound - 6) < 1e-9
    assert round(pyo.value(m.y)) == 3 and round(pyo.value(m.x)) == 0

    cp = cp_model.CpModel()
    x = cp.NewBoolVar("x")
    y = cp.NewIntVar(0, 5, "y")
    cp.Add(2 * x + 2 * y >= 5)
    cp.Minimize(3 * x + 2 * y)
    out, solver = solve_cpsat(cp, SolveOptions(quiet=True))
    assert out.status == "optimal" and out.bound == 6
    assert solver.Value(y) == 3


def _cover_model(rng_seed: int = 1):
    import random

    rng = random.Random(rng_seed)
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(0, 59)
    w = {i: rng.randint(10, 60) for i in m.I}
    m.x = pyo.Var(m.I, domain=pyo.Binary)
    m.cap = pyo.Constraint(expr=sum(w[i] * m.x[i] for i in m.I) >= 701)
    m.cost = pyo.Objective(expr=sum((w[i] + rng.random()) * m.x[i] for i in m.I))
    return m


def test_time_limited_highs_never_claims_more_than_it_proved():
    exact = _cover_model()
    out = solve_pyomo(exact, SolveOptions(quiet=True))
    assert out.status == "optimal"
    optimum = pyo.value(exact.cost)
    assert abs(out.bound - optimum) <= 1e-9 * optimum   # zero gap: HiGHS' default 1e-4 is overridden
    rushed = _cover_model()
    out = solve_pyomo(rushed, SolveOptions(quiet=True, time_limit=0.001))
    if out.bound is not None:
        assert out.bound <= optimum + 1e-9
    if out.has_solution:
        assert pyo.value(rushed.cost) >= optimum - 1e-9
    if out.status == "optimal":
        assert abs(pyo.value(rushed.cost) - optimum) <= 1e-9 * optimum


# --- --solver: the solver asked for is the one used and reported ---------------------------------------

def test_absent_solver_is_a_clear_input_error():
    from wafopt.core.errors import InstanceError

    with pytest.raises(InstanceError) as err:
        solve_pyomo(_tiny_model(), SolveOptions(quiet=True, solver="no-such-milp-solver"))
    assert "'no-such-milp-solver' is not installed" in str(err.value) and "--solver" in str(err.value)


def _installed(name: str) -> bool:
    from wafopt.core.errors import InstanceError
    from wafopt.solvers.backends import pyomo_solver

    try:
        pyomo_solver(name)
    except InstanceError:
        return False
    return True


# appsi_highs is HiGHS through pyomo's SolverFactory (installed with wafopt): the --solver path
OTHER_SOLVERS = [pytest.param(name, marks=pytest.mark.skipif(not _installed(name), reason=f"{name} not installed"))
                 for name in ("appsi_highs", "glpk", "cbc", "scip")]


@pytest.mark.parametrize("name", OTHER_SOLVERS)
def test_other_solver_solves_and_is_reported(name):
    m = _tiny_model()
    out = solve_pyomo(m, SolveOptions(quiet=True, solver=name))
    assert out.status == "optimal" and out.solver == f"{name} (pyomo)"
    assert round(pyo.value(m.cost)) == 6


@pytest.mark.parametrize("name", OTHER_SOLVERS)
def test_tatp_milp_reports_the_solver_asked_for(name):
    """Even when the start plan is optimal and no MILP is solved, the result names the asked solver."""
    from wafopt.problems import parse_instance
    from wafopt.run.runner import run

    lo = parse_instance({"problem": "tatp", "mesh": {"rows": 2, "cols": 4}, "group_size": 4, "groups": 2}, "t.yaml")
    result = run(lo, "milp", SolveOptions(quiet=True, solver=name))
    assert result.status == "optimal" and result.objective == 2.0
    assert result.solver == f"{name} (pyomo)"
    assert run(lo, "milp", SolveOptions(quiet=True)).solver.startswith("highs ")
