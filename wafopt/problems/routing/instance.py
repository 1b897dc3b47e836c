"""Traffic-conscious routing (TEMP's TCME): one path per flow, minimize the peak link load.

Instance fields: `mesh`, `flows: [{src: [r, c], dst: [r, c], volume: v}]`, `paths: minimal` (each
flow takes a shortest healthy path) or `paths: {detour: k}` (simple paths up to k hops longer).
A plan is `{"routes": [[[r, c], ...] per flow]}`; the evaluator is wafopt.problems.routing.evaluate.
"""

from __future__ import annotations

from dataclasses import dataclass

from wafopt.core.errors import InstanceError
from wafopt.hardware.mesh import Die, Mesh
from wafopt.problems.tatp.instance import layer_volumes

OBJECTIVE = "peak directed-link load / bandwidth (s per iteration, or instance units)"
SCENARIO_UNIT = "s"   # of the objective of a kernel derived from a scenario (free otherwise)


@dataclass(frozen=True)
class Flow:
    src: Die
    dst: Die
    volume: float
    label: str = ""   # e.g. "ring g3" or "dp k2": where the flow comes from (for reports)


@dataclass(frozen=True)
class RoutingInstance:
    mesh: Mesh
    flows: tuple[Flow, ...]
    detour: int = 0   # 0 = minimal paths only

    def max_hops(self, flow: Flow) -> int:
        return self.mesh.distance(flow.src, flow.dst) + self.detour


def make(mesh: Mesh, flows: list[Flow], detour: int, where: str = "") -> RoutingInstance:
    prefix = f"{where}." if where else ""
    mesh.require_connected(f"{prefix}mesh")
    if not flows:
        raise InstanceError("needs at least one flow", f"{prefix}flows")
    for k, fl in enumerate(flows):
        for end in ("src", "dst"):
            die = getattr(fl, end)
            if not mesh.contains(die):
                raise InstanceError(f"die {list(die)} lies outside the {mesh.rows} x {mesh.cols} mesh",
                                    f"{prefix}flows[{k}].{end}")
            if not mesh.is_healthy(die):
                raise InstanceError(f"die {list(die)} is faulty", f"{prefix}flows[{k}].{end}")
        if fl.src == fl.dst:
            raise InstanceError(f"src and dst are the same die {list(fl.src)}", f"{prefix}flows[{k}]")
        if not fl.volume > 0:
            raise InstanceError(f"must be positive, got {fl.volume!r}", f"{prefix}flows[{k}].volume")
    return RoutingInstance(mesh, tuple(flows), detour)


def flows_for_groups(mesh: Mesh, groups: list[list[Die]], ring_bytes: float,
                     dp_bytes: float = 0.0) -> list[Flow]:
    """The flows of one TATP round plus the concurrent DP traffic of a group mapping.

    Ring P2P: every die sends `ring_bytes` to both ring neighbours (TEMP's bidirectional relay,
    Sec. V). DP all-reduce: the k-th dies of the G groups form a ring (in group order) and each
    sends the ring all-reduce volume 2 (G-1)/G * dp_bytes to its successor.
    """
    flows: list[Flow] = []
    for g, ring in enumerate(groups):
        n = len(ring)
        for k in range(n):
            a, b = tuple(ring[k]), tuple(ring[(k + 1) % n])
            if n == 2 and k == 1:
                break  # a 2-ring has one neighbour pair
            flows.append(Flow(a, b, ring_bytes, f"ring g{g}"))
            flows.append(Flow(b, a, ring_bytes, f"ring g{g}"))
    G = len(groups)
    if dp_bytes > 0 and G > 1:
        volume = 2.0 * (G - 1) / G * dp_bytes
        for k in range(len(groups[0])):
            for g in range(G):
                a, b = tuple(groups[g][k]), tuple(groups[(g + 1) % G][k])
                if G == 2 and g == 1:
                    break
                flows.append(Flow(a, b, volume, f"dp k{k}"))
                if G == 2:
                    flows.append(Flow(b, a, volume, f"dp k{k}"))
    return flows


def from_scenario(scenario, groups: list) -> RoutingInstance:
    """Flows of the scenario's TATP rings `groups` (each a list of dies in ring order) and their DP
    traffic: ring bytes and DP bytes of one TATP round of the up-projection (per die)."""
    vol = layer_volumes(scenario)
    mesh = scenario.wafer.mesh()
    return make(mesh, flows_for_groups(mesh, groups, vol["ring_bytes"], vol["dp_bytes"]), 0, "parallel")


def summary(instance: RoutingInstance) -> dict:
    m = instance.mesh
    total = sum(f.volume for f in instance.flows)
    return {"mesh": f"{m.rows} x {m.cols}", "faulty_dies": sorted(map(list, m.faulty_dies)),
            "faulty_links": len(m.faulty_links), "link_bandwidth": m.link_bandwidth,
            "flows": len(instance.flows), "total_volume": total,
            "paths": "minimal" if instance.detour == 0 else {"detour": instance.detour}}
