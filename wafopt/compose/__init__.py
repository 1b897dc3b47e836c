"""Kernels chained on a scenario (derive), GCMR (gcmr), and exact models started by heuristics
(placement; methods: the other problems', starts: the budget of a start).

METHODS: `--method NAME` of each problem that this layer owns, gathered by wafopt.run.methods:
references to the functions, imported when a method runs (wafopt.core.registry.References).
"""

METHODS = {
    "placement": {"rlt1": "wafopt.compose.placement:placement_rlt1", "milp": "wafopt.compose.placement:placement_milp",
                  "cpsat": "wafopt.compose.placement:placement_cpsat", "bnb": "wafopt.compose.placement:placement_bnb"},
    "recompute": {"milp": "wafopt.compose.methods:recompute_milp", "cpsat": "wafopt.compose.methods:recompute_cpsat"},
    "mem_pair": {"milp": "wafopt.compose.methods:mem_pair_milp", "cpsat": "wafopt.compose.methods:mem_pair_cpsat"},
    "tatp": {"cpsat": "wafopt.compose.methods:tatp_cpsat", "milp": "wafopt.compose.methods:tatp_milp"},
    "routing": {"milp": "wafopt.compose.methods:routing_milp", "cpsat": "wafopt.compose.methods:routing_cpsat"},
    "plan": {"uniform": "wafopt.compose.gcmr:solve_uniform", "gcmr": "wafopt.compose.gcmr:solve_gcmr"},
}
