"""The network of a placed plan: routes (the plan's, else XY), the per-link flow counts of each
concurrency class, and the alpha-beta duration of a communication phase under contention
(WATOS Eq. 1; docs/evaluator.md)."""

from __future__ import annotations

from wafopt.costmodel.stage import CommStep
from wafopt.costmodel.tasks import Comm, RoutedFlow
from wafopt.hardware.mesh import Die, Mesh


class Network:
    """Routes (the plan's, else XY) and the per-link flow counts of each concurrency class."""

    def __init__(self, mesh: Mesh, routes: dict):
        self.mesh, self.routes = mesh, routes
        self._cache: dict = {}
        self.counts: dict[str, dict] = {}     # class -> link -> concurrent flows
        self.loads: dict = {}                 # link -> bytes per iteration

    def route(self, src: Die, dst: Die) -> tuple:
        key = (src, dst)
        if key not in self._cache:
            path = self.routes.get(key) or self.mesh.xy_route(src, dst)
            self._cache[key] = tuple(Mesh.route_links(list(path)))
        return self._cache[key]

    def register(self, cls: str, pairs) -> None:
        counts = self.counts.setdefault(cls, {})
        for src, dst in pairs:
            for link in self.route(src, dst):
                counts[link] = counts.get(link, 0) + 1

    def add_loads(self, comm: Comm | None, times: float) -> None:
        """Bytes per iteration: `comm` occurs `times` times."""
        if comm is None:
            return
        for flow in comm.flows:
            for link in flow.route:
                self.loads[link] = self.loads.get(link, 0.0) + flow.bytes * times

    def kappa(self, cls: str, pairs) -> int:
        counts = self.counts.get(cls, {})
        return max((counts.get(link, 1) for src, dst in pairs for link in self.route(src, dst)), default=1)

    def flows(self, pairs, nbytes: float) -> tuple[RoutedFlow, ...]:
        return tuple(RoutedFlow(src, dst, nbytes, self.route(src, dst)) for src, dst in pairs)


def ring_pairs(dies: list[Die], both_ways: bool) -> list[tuple[Die, Die]]:
    if len(dies) < 2:
        return []
    pairs = list(zip(dies, dies[1:] + dies[:1]))
    if len(dies) == 2:          # a 2-ring is one link each way
        pairs = pairs[:1]
        both_ways = True
    return pairs + [(b, a) for a, b in pairs] if both_ways else pairs


class CommCosting:
    """Durations of communication phases on the mesh's links, with the network's contention."""

    def __init__(self, mesh: Mesh, net: Network):
        self.alpha, self.bandwidth, self.net = mesh.link_latency, mesh.link_bandwidth, net

    def collective(self, step: CommStep, dies: list[Die], kappa: int, name: str) -> Comm:
        """A ring collective: its steps each last as long as the ring's longest route."""
        c = step.collective
        pairs = ring_pairs(dies, c.directions == 2)
        hops = max((len(self.net.route(a, b)) for a, b in pairs), default=0)
        latency = c.steps * hops * self.alpha
        analytic = max(0.0, latency + kappa * c.flow_bytes / self.bandwidth - step.hidden_s)
        return Comm(name or c.kind, self.net.flows(pairs, c.flow_bytes), latency, analytic, step.hidden_s)
