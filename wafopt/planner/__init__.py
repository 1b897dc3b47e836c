"""The joint planner (`--method plan`): the layout space and its certified bounds, the search over
it, the kernels' composition per layout, the global GA, parallel composition, and the ablation.

Modules: space (the choices a plan may make), layout_data / quick_bound / full_bound / lp_bound
(the bound's tiers), tighten (which bounds to raise), certificate (what `wafopt certify`
re-derives), search (the method), compose, ga_operators / ga, parallel, design (the planner for
one design of the exploration), ablation.
"""

from wafopt.planner.ablation import ablation
from wafopt.planner.search import solve_planner

METHODS = {"plan": {"plan": solve_planner}}   # gathered by wafopt.run.methods

__all__ = ["METHODS", "ablation", "solve_planner"]
