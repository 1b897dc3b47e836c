"""The joint planner (`--method plan`): the layout space and its certified bounds, the search over
it, the kernels' composition per layout, the global GA, parallel composition, and the ablation.

Modules: space (the choices a plan may make), layout_data / quick_bound / full_bound / lp_bound
(the bound's tiers), tighten (which bounds to raise), certificate (what `wafopt certify`
re-derives), search (the method), compose, ga_operators / ga, parallel, design (the planner for
one design of the exploration), ablation.

METHODS is gathered by wafopt.run.methods: a reference to the method, imported when it runs
(wafopt.core.registry.References), so that importing this package imports none of the planner.
"""

METHODS = {"plan": {"plan": "wafopt.planner.search:solve_planner"}}

__all__ = ["METHODS"]
