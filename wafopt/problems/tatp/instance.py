"""TATP group mapping (TEMP, WaferLLM): partition healthy dies into G rings of N dies.

Instance fields: `mesh` (wafopt.hardware.schema.MeshSpec), `group_size` N >= 2, `groups` G >= 1.
A plan is `{"groups": [[[r, c] x N in cyclic order] x G]}`; the evaluator is wafopt.problems.tatp.evaluate.
"""

from __future__ import annotations

from dataclasses import dataclass

from wafopt.core.errors import InstanceError
from wafopt.costmodel.rules import busiest_count
from wafopt.hardware.mesh import Mesh

OBJECTIVE = "sum of ring costs (hops)"
UNIT = "hops"   # of the objective, in result lines


@dataclass(frozen=True)
class TatpInstance:
    mesh: Mesh
    group_size: int   # N, dies per TATP ring
    groups: int       # G, number of rings

    @property
    def ring_lower_bound(self) -> int:
        """Cheapest possible ring: 1 hop, or 2 for odd N >= 3 (a grid graph has no odd cycle)."""
        return 2 if self.group_size % 2 == 1 and self.group_size >= 3 else 1

    @property
    def lower_bound(self) -> int:
        return self.groups * self.ring_lower_bound


def make(mesh: Mesh, group_size: int, groups: int, where: str = "") -> TatpInstance:
    """Validated constructor shared by parse and from_scenario."""
    prefix = f"{where}." if where else ""
    if group_size < 2:
        raise InstanceError(f"must be at least 2 (a ring needs two dies), got {group_size}",
                            f"{prefix}group_size")
    healthy = len(mesh.healthy_dies)
    if groups * group_size > healthy:
        raise InstanceError(f"{groups} groups x {group_size} dies = {groups * group_size} dies, but the "
                            f"mesh has only {healthy} healthy dies", f"{prefix}groups")
    mesh.require_connected(f"{prefix}mesh")
    return TatpInstance(mesh, group_size, groups)


def from_scenario(scenario) -> TatpInstance:
    """TATP degree N = tp; one ring per TP group of every stage and replica (G = pp * dp)."""
    par = scenario.parallel_of()   # the TATP degree tp and the number of rings pp * dp
    return make(scenario.wafer.mesh(), par.tp, par.pp * par.dp, "parallel")


def layer_volumes(scenario) -> dict:
    """Bytes and FLOPs of one TATP round of the up-projection (per die)."""
    llm, tr, par = scenario.llm, scenario.training, scenario.parallel_of()
    N, G = par.tp, par.pp * par.dp
    tokens = tr.micro_batch * tr.seq
    elem = tr.activation_bytes
    rows = busiest_count(llm.hidden, N)   # whole rows of the K-split weight, the busiest die's
    own = busiest_count(tokens, N)        # whole tokens of the sequence split, likewise
    sub_weight = rows * llm.ffn_hidden * elem
    sub_input = own * llm.hidden * elem
    ring_bytes = min(sub_weight, sub_input)
    dp_bytes_per_round = sub_weight / N if par.dp > 1 else 0.0
    round_flops = 2.0 * own * rows * llm.ffn_hidden
    return {"N": N, "G": G, "ring_bytes": ring_bytes, "streamed": "weight" if sub_weight <= sub_input
            else "input", "dp_bytes": dp_bytes_per_round,
            "round_compute_s": round_flops / scenario.wafer.die_flops}


def summary(instance: TatpInstance) -> dict:
    m = instance.mesh
    return {"mesh": f"{m.rows} x {m.cols}", "faulty_dies": sorted(map(list, m.faulty_dies)),
            "faulty_links": len(m.faulty_links), "healthy_dies": len(m.healthy_dies),
            "group_size": instance.group_size, "groups": instance.groups,
            "unused_dies": len(m.healthy_dies) - instance.group_size * instance.groups,
            "lower_bound": instance.lower_bound}
