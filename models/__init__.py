"""Exact formulations (pyomo + HiGHS MILP, OR-Tools CP-SAT), one module per problem.

Shipped as the subpackage `wafopt.models`. Each module builds a model from an instance, solves
it with the helpers in `wafopt.solvers.backends`, and decodes a plan; the runner evaluates it.
"""
