"""The formulations' methods by problem (`--method NAME`) that run without a heuristic start;
the others are composed with their starts in wafopt.compose.methods. Gathered by
wafopt.run.methods."""

from __future__ import annotations

from wafopt.models import mem_pair, placement, placement_qpb

METHODS = {
    "placement": {"glb": placement.glb, "pb": placement_qpb.pb, "qpb": placement_qpb.qpb},
    "mem_pair": {"lp": mem_pair.solve_lp},
}
