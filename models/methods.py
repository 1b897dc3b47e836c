"""The formulations' methods by problem (`--method NAME`) that run without a heuristic start;
the others are composed with their starts in wafopt.compose.methods. Gathered by
wafopt.run.methods: references to the functions, imported when a method runs
(wafopt.core.registry.References)."""

from __future__ import annotations

METHODS = {
    "placement": {"glb": "wafopt.models.placement:glb", "pb": "wafopt.models.placement_qpb:pb",
                  "qpb": "wafopt.models.placement_qpb:qpb"},
    "mem_pair": {"lp": "wafopt.models.mem_pair:solve_lp"},
}
