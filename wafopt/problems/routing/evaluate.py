"""Evaluator of routings: one healthy simple path per flow within the candidate set;
objective = max over directed links of (sum of the volumes crossing it) / link bandwidth."""

from __future__ import annotations

from wafopt.core.errors import PlanError
from wafopt.hardware.mesh import Die
from wafopt.problems.evaluation import Evaluation


def read_routes(plan: dict, n_flows: int) -> list[list[Die]]:
    routes = plan.get("routes")
    if not isinstance(routes, list):
        raise PlanError(f"'routes' must be a list of die sequences, got {routes!r:.60}")
    if len(routes) != n_flows:
        raise PlanError(f"plan has {len(routes)} routes for {n_flows} flows")
    out = []
    for k, route in enumerate(routes):
        if not isinstance(route, list):
            raise PlanError(f"routes[{k}] must be a list of dies, got {route!r:.60}")
        path = []
        for d in route:
            if (not isinstance(d, (list, tuple)) or len(d) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in d)):
                raise PlanError(f"routes[{k}] holds {d!r}, not a die [row, col]")
            path.append((d[0], d[1]))
        out.append(path)
    return out


def evaluate(instance, plan: dict) -> Evaluation:
    mesh = instance.mesh
    routes = read_routes(plan, len(instance.flows))
    violations = []
    for k, (flow, path) in enumerate(zip(instance.flows, routes)):
        problem = mesh.check_route(path, flow.src, flow.dst)
        if problem:
            violations.append(f"flow {k}: {problem}")
        elif len(set(path)) != len(path):
            violations.append(f"flow {k}: route visits a die twice")
        elif len(path) - 1 > instance.max_hops(flow):
            violations.append(f"flow {k}: route has {len(path) - 1} hops, at most "
                              f"{instance.max_hops(flow)} allowed (shortest {mesh.distance(flow.src, flow.dst)}"
                              f" + detour {instance.detour})")
    if violations:
        return Evaluation(None, False, violations)
    loads = mesh.link_loads(zip(routes, (f.volume for f in instance.flows)))
    peak_link, peak = max(loads.items(), key=lambda kv: (kv[1], kv[0]))
    objective = peak / mesh.link_bandwidth
    top = sorted(loads.items(), key=lambda kv: -kv[1])[:8]
    details = {"peak_link": [list(peak_link[0]), list(peak_link[1])], "peak_load": peak,
               "links_at_peak": sum(abs(v - peak) <= 1e-9 * peak for v in loads.values()),
               "links_used": len(loads), "total_hops": sum(len(p) - 1 for p in routes),
               "busiest_links": [[list(a), list(b), v] for (a, b), v in top]}
    return Evaluation(objective, True, [], details)
