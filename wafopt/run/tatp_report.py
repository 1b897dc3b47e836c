"""TATP + routing on a scenario (problem: plan with parallel {tp: N, pp, dp}): map the TATP
groups, route one round of their traffic, and time one TATP linear layer (alpha-beta model).

`report(scenario)` compares a sequential mapping with dimension-order routes (`snake` + `xy`)
against Hamiltonian blocks (`tiles`, optionally proven by `cpsat`) with TCME routes; the lead can
print it from `wafopt show` or a CLI subcommand.

The layer is the MLP up-projection (hidden x ffn) of the scenario's LLM on one micro-batch. TATP
(TEMP Sec. V) splits it over the N dies of a group in N rounds; per round each die computes one
partial sub-output (2 * ceil(b s / N) * ceil(h / N) * ffn FLOPs: whole tokens and weight rows, the
busiest die's) while streaming the smaller of its sub-weight and sub-input (TEMP's selective
transfer policy) to both ring neighbours (bidirectional relay). The
same layer's sub-weight gradient is all-reduced between same-position dies of the G groups (data
parallelism), spread evenly over the N rounds, so it competes with the ring traffic (TEMP
Fig. 11). One round lasts max(compute, tail_hops * alpha + busiest-link bytes / bandwidth)
(WATOS Eq. 1 with the contention of the busiest link); the layer lasts N rounds.
"""

from __future__ import annotations

import time

from wafopt.core.budget import SolveOptions
from wafopt.problems.routing.evaluate import evaluate as evaluate_routes
from wafopt.problems.routing.instance import RoutingInstance, flows_for_groups, make
from wafopt.problems.tatp import instance as tatp_schema
from wafopt.problems.tatp.evaluate import evaluate as evaluate_groups
from wafopt.problems.tatp.evaluate import read_groups
from wafopt.problems.tatp.instance import layer_volumes
from wafopt.run.methods import method_function


def map_groups(instance, mapper: str, time_limit: float) -> list:
    """Groups by one TATP method ("snake", "tiles" or "cpsat")."""
    result = method_function("tatp", mapper)(instance, SolveOptions(time_limit=time_limit, quiet=True))
    return [[tuple(d) for d in ring] for ring in read_groups(result.plan)]


def routing_instance(mesh, groups, vol: dict, detour: int = 0) -> RoutingInstance:
    return make(mesh, flows_for_groups(mesh, groups, vol["ring_bytes"], vol["dp_bytes"]), detour)


def evaluate_combo(scenario, mapper: str, router: str, time_limit: float = 10.0, detour: int = 0) -> dict:
    """Map, route and time one combination."""
    instance = tatp_schema.from_scenario(scenario)
    vol = layer_volumes(scenario)
    started = time.perf_counter()
    groups = map_groups(instance, mapper, time_limit)
    mapping = evaluate_groups(instance, {"groups": [[list(d) for d in r] for r in groups]})
    routes_instance = routing_instance(instance.mesh, groups, vol, detour)
    result = method_function("routing", router)(routes_instance, SolveOptions(time_limit=time_limit,
                                                                                  quiet=True))
    routing = evaluate_routes(routes_instance, result.plan)
    elapsed = time.perf_counter() - started
    mesh = instance.mesh
    tail = mapping.details["tail_hops"]
    comm_s = tail * mesh.link_latency + routing.objective   # routing objective: busiest link seconds
    round_s = max(vol["round_compute_s"], comm_s)
    return {"mapping": mapper, "routing": router, "ring_cost": mapping.objective,
            "physical_rings": mapping.details["physical_rings"], "groups": instance.groups,
            "tail_hops": tail, "flows": len(routes_instance.flows),
            "peak_link_bytes": routing.details["peak_load"], "peak_link_s": routing.objective,
            "round_compute_s": vol["round_compute_s"], "round_comm_s": comm_s,
            "layer_time_s": vol["N"] * round_s, "time_s": round(elapsed, 3),
            "plan": {"groups": [[list(d) for d in r] for r in groups], "routes": result.plan["routes"]}}


def report(scenario, combos=(("snake", "xy"), ("tiles", "xy"), ("tiles", "tcme")), time_limit: float = 10.0,
           detour: int = 0) -> dict:
    """The comparison table of the coupled scenario (one row per mapping + routing)."""
    vol = layer_volumes(scenario)
    rows = [evaluate_combo(scenario, m, r, time_limit, detour) for m, r in combos]
    return {"N": vol["N"], "G": vol["G"], "streamed": vol["streamed"], "ring_bytes": vol["ring_bytes"],
            "dp_bytes_per_round": vol["dp_bytes"], "rows": rows}
