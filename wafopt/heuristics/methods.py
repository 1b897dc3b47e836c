"""The heuristics' methods by problem (`--method NAME`), gathered by wafopt.run.methods."""

from __future__ import annotations

from wafopt.heuristics import megatron, mem_pair, placement, recompute, routing, tatp

METHODS = {
    "placement": {"serpentine": placement.serpentine, "rowmajor": placement.rowmajor,
                  "local": placement.local, "ga": placement.ga},
    "recompute": {"dp": recompute.solve_dp, "uniform": recompute.solve_uniform,
                  "full": recompute.solve_full, "none": recompute.solve_none},
    "mem_pair": {"greedy": mem_pair.solve_greedy},
    "tatp": {"tiles": tatp.tiles, "snake": tatp.snake, "ga": tatp.ga},
    "routing": {"xy": routing.xy, "tcme": routing.tcme},
    "plan": {"megatron": megatron.solve_megatron, "mg-wafer": megatron.solve_mg_wafer},
}
