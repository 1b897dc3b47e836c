"""GPU clusters as a system kind: nodes of GPUs on a switch, nodes joined by a fabric.

A scenario gives `cluster:` instead of `wafer:` to run the same cost model where measured
training runs exist (docs/fidelity.md). A cluster is built as a `Wafer` of system "cluster" with
one row per node and one column per GPU, so plans name GPUs as [node, gpu]; the communication
model is the switched one of `wafopt.costmodel.network.SwitchedNetwork`. Presets live in
wafopt/data/clusters.yaml (human units: TFLOPS, GB, TB/s, GB/s, microseconds). An inline cluster
without `efficiency:` takes the GPU figures of DEFAULT_EFFICIENCY_PRESET: no GPU reaches its peak,
so ideal efficiency must be asked for (`efficiency: {}`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from wafopt.core.errors import InstanceError
from wafopt.core.limits import MAX_GPUS
from wafopt.core.schema import Record, count, field_at, quantity, text, validate
from wafopt.hardware.catalog import GB, TB_PER_S, TFLOPS, US, Wafer, _load, _merged_spec
from wafopt.hardware.efficiency import EfficiencySpec, parse_efficiency

GB_PER_S = 1e9
MAX_NODES = MAX_GPUS
DEFAULT_EFFICIENCY_PRESET = "dgx-a100-80g"   # published A100 figures (docs/workload.md, "Efficiency")


class ClusterSpec(Record):
    """A cluster mapping: a preset merged with overrides (`nodes: N`), or every field inline."""

    null_is_missing: ClassVar[bool] = True
    keys_after_fields: ClassVar[bool] = True

    name: text() = "custom"
    nodes: count(positive=True, maximum=MAX_NODES)
    gpus_per_node: count(positive=True, maximum=64)
    gpu_tflops: quantity(positive=True)      # dense FP16/BF16 peak per GPU
    hbm_gb: quantity(positive=True)
    hbm_tbps: quantity(positive=True)
    nvlink_gbps: quantity(positive=True)     # intra-node bandwidth per GPU per direction
    network_gbps: quantity(positive=True)    # inter-node bandwidth per GPU per direction
    nvlink_latency_us: quantity(nonnegative=True) = 1.0
    network_latency_us: quantity(nonnegative=True) = 5.0
    efficiency: dict[str, Any] | None = None
    source: text() = "user-defined"

    def build(self, where: str) -> Wafer:
        if self.nodes * self.gpus_per_node > MAX_GPUS:
            raise InstanceError(f"{self.nodes} nodes x {self.gpus_per_node} GPUs = {self.nodes * self.gpus_per_node:,} "
                                f"GPUs, more than the limit of {MAX_GPUS:,}", field_at(where, "nodes"))
        efficiency = self.efficiency
        if efficiency is None:
            efficiency = _load("clusters.yaml")[DEFAULT_EFFICIENCY_PRESET]["efficiency"]
        return Wafer(self.name, self.nodes, self.gpus_per_node, self.gpu_tflops * TFLOPS, self.hbm_gb * GB,
                     self.hbm_tbps * TB_PER_S, self.nvlink_gbps * GB_PER_S, self.nvlink_latency_us * US,
                     source=self.source, parallel_rules="megatron",
                     efficiency=parse_efficiency(efficiency, field_at(where, "efficiency")),
                     system="cluster", node_bandwidth=self.network_gbps * GB_PER_S,
                     node_latency=self.network_latency_us * US)

    @classmethod
    def of(cls, system: Wafer) -> "ClusterSpec":
        return cls.model_construct(
            name=system.name, nodes=system.rows, gpus_per_node=system.cols, gpu_tflops=system.die_flops / TFLOPS,
            hbm_gb=system.dram_capacity / GB, hbm_tbps=system.dram_bandwidth / TB_PER_S,
            nvlink_gbps=system.link_bandwidth / GB_PER_S, network_gbps=system.node_bandwidth / GB_PER_S,
            nvlink_latency_us=system.link_latency / US, network_latency_us=system.node_latency / US,
            efficiency=EfficiencySpec.of(system.efficiency).dump(), source=system.source)


def require_mesh(system: Wafer, what: str, where: str) -> None:
    """InstanceError naming `what` unless `system` is a wafer: `what` models a die mesh."""
    if system.system == "cluster":
        raise InstanceError(f"{what} does not apply to a cluster scenario: it models a die mesh (on a cluster: "
                            "solve --method megatron or mg-wafer, evaluate, workload, fidelity)", where)


def cluster_presets() -> list[str]:
    return list(_load("clusters.yaml"))


def resolve_cluster(spec: Any, where: str = "cluster") -> Wafer:
    """Preset name, {preset: NAME, nodes: N, ...} or an inline mapping -> a cluster system."""
    data, where = _merged_spec(spec, _load("clusters.yaml"), where, sizing=("nodes",))
    return validate(ClusterSpec, data, where).value
