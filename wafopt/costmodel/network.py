"""The network of a placed plan: routes (the plan's, else XY), the per-link flow counts of each
concurrency class, and the alpha-beta duration of a communication phase under contention
(WATOS Eq. 1; docs/evaluator.md)."""

from __future__ import annotations

from wafopt.costmodel.rules import busiest_share
from wafopt.costmodel.stage import CommStep
from wafopt.costmodel.tasks import Comm, RoutedFlow
from wafopt.hardware.mesh import Die, Mesh


class Network:
    """Routes (the plan's, else XY) and the per-link flow counts of each concurrency class."""

    def __init__(self, mesh: Mesh, routes: dict, efficiency=None):
        self.mesh, self.routes = mesh, routes
        self._cache: dict = {}
        self.counts: dict[str, dict] = {}     # class -> link -> concurrent flows
        self.loads: dict = {}                 # link -> bytes per iteration
        share = efficiency.intra if efficiency is not None else 1.0
        self.alpha, self.link_bandwidth = mesh.link_latency, mesh.link_bandwidth * share

    def latency(self, route: tuple) -> float:
        """The alpha part of one transfer along `route`: its hops x the link latency."""
        return len(route) * self.alpha

    def bandwidth(self, route: tuple) -> float:
        """Bytes/s one flow gets on `route` alone (every mesh link is alike)."""
        return self.link_bandwidth

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


class SwitchedNetwork(Network):
    """A GPU cluster: every GPU has one port into its node's switch (NVSwitch) and one into the
    inter-node fabric (InfiniBand). A route is the sender's out-port and the receiver's in-port, so
    the contention kappa counts the flows sharing a port; mesh dies are (node, GPU)."""

    def __init__(self, mesh: Mesh, routes: dict, system):
        super().__init__(mesh, {}, system.efficiency)
        eff = system.efficiency
        self.classes = {"switch": (system.link_latency, system.link_bandwidth * eff.intra),
                        "fabric": (system.node_latency, system.node_bandwidth * eff.inter)}

    def route(self, src: Die, dst: Die) -> tuple:
        if src == dst:
            return ()
        cls = "switch" if src[0] == dst[0] else "fabric"
        return ((src, (cls, "out")), (dst, (cls, "in")))

    def _class(self, route: tuple) -> tuple[float, float]:
        return self.classes[route[0][1][0]] if route else (0.0, float("inf"))

    def latency(self, route: tuple) -> float:
        return self._class(route)[0]

    def bandwidth(self, route: tuple) -> float:
        return self._class(route)[1]


def network_of(scenario, routes: dict) -> Network:
    """The network a plan's flows use: the wafer's mesh links, or a cluster's switches."""
    system = scenario.wafer
    if getattr(system, "system", "wafer") == "cluster":
        return SwitchedNetwork(system.mesh(), routes, system)
    return Network(system.mesh(), routes, system.efficiency)


def least_collective_s(step: CommStep, wafer) -> float:
    """The least time a wafer collective can be on the critical path, on any placement: each ring
    step one hop, no contention (kappa 1), less the compute it runs under; `CommCosting.collective`
    is never below it (a lower bound for the planner)."""
    c = step.collective
    bandwidth = wafer.link_bandwidth * wafer.efficiency.intra
    return max(0.0, c.steps * wafer.link_latency + c.flow_bytes / bandwidth - step.hidden_s)


def send_share(p2p_bytes: float, tp: int, tokens: int | None = None) -> float:
    """Bytes one die sends to the next stage per micro-batch: the boundary tensor split over the
    tp dies (Megatron-LM's scatter/gather: die k talks to die k of the next stage). With `tokens`
    (TATP's sequence split) a die sends its whole tokens, the busiest die one more where tp does not
    divide them."""
    return p2p_bytes / tp if tokens is None else p2p_bytes * busiest_share(tokens, tp)


def least_send_s(p2p_bytes: float, tp: int, wafer) -> float:
    """The least time of one pipeline send on any placement: one hop (stages hold distinct dies)
    at the fastest link, no contention (the evaluator's `_send` is never below it)."""
    return wafer.link_latency + send_share(p2p_bytes, tp) / (wafer.link_bandwidth * wafer.efficiency.intra)


def dp_flow_bytes(dp: int, grad_bytes: float, gather_bytes: float) -> float:
    """Bytes one die sends to its ring successor in a stage's data-parallel gradient reduction: a
    ring all-reduce, or with the distributed optimizer a reduce-scatter of the gradients and an
    all-gather of the weights."""
    if gather_bytes:
        return (dp - 1) / dp * (grad_bytes + gather_bytes)
    return 2 * (dp - 1) / dp * grad_bytes


def least_dp_allreduce_s(dp: int, grad_bytes: float, gather_bytes: float, wafer) -> float:
    """The least time of a stage's gradient reduction over dp replicas on any placement: 2 (dp - 1)
    one-hop steps, no contention (the evaluator's `_dp_allreduce` is never below it)."""
    if dp == 1:
        return 0.0
    bandwidth = wafer.link_bandwidth * wafer.efficiency.intra
    return 2 * (dp - 1) * wafer.link_latency + dp_flow_bytes(dp, grad_bytes, gather_bytes) / bandwidth


def least_blocks_comm_s(blocks, wafer) -> float:
    """`least_collective_s` summed over a stage's (steps, repeat) blocks."""
    return sum(count * least_collective_s(step, wafer) for steps, count in blocks
               for step in steps if isinstance(step, CommStep))


class CommCosting:
    """Durations of communication phases on the network's links, with its contention."""

    def __init__(self, net: Network):
        self.net = net

    def latency(self, pairs) -> float:
        """The alpha part of one step of a phase: its slowest route's latency."""
        return max((self.net.latency(self.net.route(a, b)) for a, b in pairs), default=0.0)

    def transfer(self, pairs, nbytes: float, kappa: float = 1) -> float:
        """The beta part: `nbytes` per flow at the slowest route's bandwidth, shared kappa ways."""
        bandwidth = min((self.net.bandwidth(self.net.route(a, b)) for a, b in pairs), default=float("inf"))
        return kappa * nbytes / bandwidth

    def collective(self, step: CommStep, dies: list[Die], kappa: int, name: str) -> Comm:
        """A ring collective: its steps each last as long as the ring's longest route."""
        c = step.collective
        pairs = ring_pairs(dies, c.directions == 2)
        latency = c.steps * self.latency(pairs)
        analytic = max(0.0, latency + self.transfer(pairs, c.flow_bytes, kappa) - step.hidden_s)
        return Comm(name or c.kind, self.net.flows(pairs, c.flow_bytes), latency, analytic, step.hidden_s)
