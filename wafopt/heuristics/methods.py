"""The heuristics' methods by problem (`--method NAME`), gathered by wafopt.run.methods: references
to the functions, imported when a method runs (wafopt.core.registry.References)."""

from __future__ import annotations

METHODS = {
    "placement": {"serpentine": "wafopt.heuristics.placement:serpentine",
                  "rowmajor": "wafopt.heuristics.placement:rowmajor",
                  "local": "wafopt.heuristics.placement:local", "ga": "wafopt.heuristics.placement:ga"},
    "recompute": {"dp": "wafopt.heuristics.recompute:solve_dp", "uniform": "wafopt.heuristics.recompute:solve_uniform",
                  "full": "wafopt.heuristics.recompute:solve_full", "none": "wafopt.heuristics.recompute:solve_none"},
    "mem_pair": {"greedy": "wafopt.heuristics.mem_pair:solve_greedy"},
    "tatp": {"tiles": "wafopt.heuristics.tatp:tiles", "snake": "wafopt.heuristics.tatp:snake",
             "ga": "wafopt.heuristics.tatp:ga"},
    "routing": {"xy": "wafopt.heuristics.routing:xy", "tcme": "wafopt.heuristics.routing:tcme"},
    "plan": {"megatron": "wafopt.heuristics.megatron:solve_megatron",
             "mg-wafer": "wafopt.heuristics.megatron:solve_mg_wafer"},
}
