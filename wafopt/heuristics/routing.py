"""Routing heuristics: `xy` (dimension-order baseline) and `tcme` (TEMP's traffic-conscious
communication optimizer, Sec. VI-B: reroute the flows of the most loaded link along the least
loaded alternative, identical transfers moved together, until the peak stops improving).
"""

from __future__ import annotations

import time

from wafopt.core.budget import SolveOptions, never
from wafopt.core.numeric import close
from wafopt.core.result import MethodResult
from wafopt.hardware.mesh import Die, Link
from wafopt.problems.routing.certificate import endpoint
from wafopt.problems.routing.evaluate import evaluate
from wafopt.problems.routing.plans import routes_plan, xy_routes

MAX_ITERATIONS = 10_000   # TCME iteration cap (one accepted reroute per iteration)


def _result(instance, routes, options: SolveOptions, message: str, stats: dict | None = None) -> MethodResult:
    """The plan with the endpoint bound; the runner calls it optimal when the bound meets it."""
    plan = routes_plan(routes)
    bound = endpoint(instance)   # a certificate: certify re-derives it from the instance
    options.incumbent(plan, bound)
    return MethodResult(plan, "feasible", bound, "heuristic", message, stats or {})


def xy(instance, options: SolveOptions) -> MethodResult:
    """Every flow on its dimension-order route (columns first), faults bypassed by the mesh."""
    return _result(instance, xy_routes(instance), options, "dimension-order (XY) routes")


# --- TCME -----------------------------------------------------------------------------------------------
class Loads:
    """Directed link loads with the score TCME minimizes: (peak, links at the peak, sum of squares).

    The two tie-breakers let the loop progress when several links share the peak."""

    def __init__(self, mesh):
        self.mesh = mesh
        self.load: dict[Link, float] = {link: 0.0 for link in mesh.directed_links}

    def add(self, path: list[Die], volume: float) -> None:
        for a, b in zip(path, path[1:]):
            self.load[(a, b)] += volume

    def score(self) -> tuple[float, int, float]:
        values = self.load.values()
        peak = max(values)
        return (peak, sum(1 for v in values if close(v, peak)), sum(v * v for v in values))

    def hottest(self) -> Link:
        return max(self.load, key=lambda link: (self.load[link], link))


def improves(new: tuple[float, int, float], old: tuple[float, int, float]) -> bool:
    """Lexicographic (peak, links at the peak, sum of squares), loads equal under the one rule."""
    if not close(new[0], old[0]):
        return new[0] < old[0]
    if new[1] != old[1]:
        return new[1] < old[1]
    return new[2] < old[2] and not close(new[2], old[2])


def least_loaded_path(instance, src: Die, dst: Die, volume: float, loads: Loads) -> list[Die]:
    """Within the flow's candidate set (at most shortest + detour hops), the path whose busiest
    link after adding `volume` is least loaded, ties broken by the summed load.

    Label-setting over (die, hops) layers keeps one label per state (a heuristic for the
    tie-breaker, exact for the min-max part on minimal paths); loops are cut from the walk.
    """
    mesh = instance.mesh
    budget = mesh.distance(src, dst) + instance.detour
    to_dst = mesh.distance_matrix[:, mesh.index(dst)]
    layer: dict[Die, tuple[float, float, list[Die]]] = {src: (0.0, 0.0, [src])}
    best = None
    for hops in range(budget):
        nxt: dict[Die, tuple[float, float, list[Die]]] = {}
        for u, (peak, total, path) in layer.items():
            for v in mesh.neighbours(u):
                if hops + 1 + to_dst[mesh.index(v)] > budget or v in path:
                    continue
                after = loads.load[(u, v)] + volume
                label = (max(peak, after), total + after, path + [v])
                if v not in nxt or label[:2] < nxt[v][:2]:
                    nxt[v] = label
        if dst in nxt and (best is None or nxt[dst][:2] < best[:2]):
            best = nxt.pop(dst)
        nxt.pop(dst, None)
        layer = nxt
    return best[2]


def tcme_routes(instance, routes: list[list[Die]], deadline: float, stop=never) -> tuple[list[list[Die]], int]:
    """TEMP's five phases: (1) start from the given routes, (2) find the most loaded link,
    (3) the flows crossing it, (4) reroute them, identical transfers (same src, dst, path) merged
    into one bundle, each along its least loaded alternative, kept only if the score improves,
    bundles split into single flows when no bundle move helps, (5) repeat until no move improves
    the score or the iteration cap / deadline is reached."""
    flows = instance.flows
    routes = [list(p) for p in routes]
    loads = Loads(instance.mesh)
    for f, p in zip(flows, routes):
        loads.add(p, f.volume)
    current = loads.score()
    iterations = 0
    while iterations < MAX_ITERATIONS and time.monotonic() < deadline and not stop():
        iterations += 1
        a, b = loads.hottest()
        crossing = [k for k, p in enumerate(routes) if any(x == a and y == b for x, y in zip(p, p[1:]))]
        bundles: dict[tuple, list[int]] = {}
        for k in crossing:
            bundles.setdefault((flows[k].src, flows[k].dst, tuple(routes[k])), []).append(k)
        merged = sorted(bundles.values(), key=lambda ks: -sum(flows[k].volume for k in ks))
        single = [[k] for ks in merged if len(ks) > 1 for k in ks]
        moved = False
        for bundle in merged + single:
            volume = sum(flows[k].volume for k in bundle)
            old = routes[bundle[0]]
            loads.add(old, -volume)
            new = least_loaded_path(instance, flows[bundle[0]].src, flows[bundle[0]].dst, volume, loads)
            loads.add(new, volume)
            score = loads.score()
            if new != old and improves(score, current):
                for k in bundle:
                    routes[k] = list(new)
                current, moved = score, True
                break
            loads.add(new, -volume)
            loads.add(old, volume)
        if not moved:
            break
    return routes, iterations


def tcme(instance, options: SolveOptions) -> MethodResult:
    deadline = time.monotonic() + options.search_seconds()
    start = xy_routes(instance)
    if options.warm_start is not None:
        if evaluate(instance, options.warm_start).feasible:
            start = [[tuple(d) for d in p] for p in options.warm_start["routes"]]
    routes, iterations = tcme_routes(instance, start, deadline, options.stopped)
    return _result(instance, routes, options, f"TCME, {iterations} iterations", {"iterations": iterations})
