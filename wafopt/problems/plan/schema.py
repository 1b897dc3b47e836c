"""A scenario instance file (problem: plan): its schema, the Scenario it builds and its checks, and
the document of a Scenario.

`wafer` and `model` are a preset name or a mapping ({preset: NAME, <overrides>} or every field
inline) and `training` a mapping: their records (wafopt.hardware.catalog.WaferSpec and LLMSpec,
wafopt.costmodel.training.TrainingSpec) define and check their fields once presets are merged
with overrides; the reader's limits (finite numbers, depth, size) apply to them like to every value.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from wafopt.core import schema
from wafopt.core.errors import InstanceError
from wafopt.costmodel.scenario import Fixed, Parallel, Scenario
from wafopt.costmodel.training import TrainingSpec, parse_training
from wafopt.hardware.catalog import LLMSpec, WaferSpec, resolve_llm, resolve_wafer
from wafopt.hardware.cluster import ClusterSpec, resolve_cluster
from wafopt.problems.plan.instance import check_fits, check_rules


class ParallelSpec(schema.Spec):
    """tp and pp given fix the layout (dp default 1); a partial one fixes what it gives."""

    tp: schema.DieCount | None = None
    pp: schema.DieCount | None = None
    dp: schema.DieCount | None = None
    interleave: schema.DieCount | None = None   # virtual stages per device (interleaved 1F1B)
    tp_scheme: Literal["megatron", "tatp"] | None = None   # fixes the scheme of every stage (default: megatron)

    def layout(self) -> tuple[Parallel | None, Fixed]:
        """tp and pp given: a fixed layout (dp and interleave default 1); otherwise what is given
        is fixed and the planner searches the rest."""
        if self.tp is not None and self.pp is not None:
            par = Parallel(self.tp, self.pp, self.dp or 1, self.interleave or 1)
            return par, Fixed(par.tp, par.pp, par.dp, self.interleave, self.tp_scheme)
        return None, Fixed(self.tp, self.pp, self.dp, self.interleave, self.tp_scheme)


class PlanDocument(schema.Document):
    """A wafer, an LLM, a training setup and optionally the (tp, pp, dp) layout (WATOS)."""

    problem: Literal["plan"]
    wafer: schema.Name | dict[str, Any] | None = Field(
        default=None,
        description="a wafer preset name, {preset: NAME, <overrides>}, or every field inline: rows, cols, "
                    "die_tflops, dram_gb, dram_bw_tbps, link_bw_tbps, link_latency_us, faulty_dies, "
                    "parallel_rules, efficiency, ...")
    cluster: schema.Name | dict[str, Any] | None = Field(
        default=None,
        description="instead of wafer: a GPU cluster preset name, {preset: NAME, nodes: N}, or every field "
                    "inline: nodes, gpus_per_node, gpu_tflops, hbm_gb, hbm_tbps, nvlink_gbps, network_gbps, ...")
    model: schema.Name | dict[str, Any] = Field(
        description="an LLM preset name, {preset: NAME, <overrides>}, or every field inline: layers, hidden, "
                    "heads, kv_heads, ffn_hidden, vocab, mlp, experts, top_k, moe_every, ...")
    training: dict[str, Any] = Field(description="seq, micro_batch (a size, or the list of sizes a plan may "
                                                 "choose from, at most 16), global_batch and the optional "
                                                 "training settings of the cost model")
    parallel: ParallelSpec | None = None

    def to_instance(self, where: str) -> Scenario:
        at = lambda key: schema.field_at(where, key)  # noqa: E731
        if (self.wafer is None) == (self.cluster is None):
            raise InstanceError("give wafer or cluster (exactly one)", at("wafer" if self.cluster is None else "cluster"))
        wafer = (resolve_wafer(self.wafer, at("wafer")) if self.cluster is None
                 else resolve_cluster(self.cluster, at("cluster")))
        llm = resolve_llm(self.model, at("model"))
        training = parse_training(self.training, at("training"))
        if llm.max_positions and training.seq > llm.max_positions:   # a learned table has no row beyond
            raise InstanceError(f"sequence {training.seq} is longer than the model's {llm.max_positions} learned "
                                "positions (model.max_positions)", schema.field_at(at("training"), "seq"))
        if self.parallel is None and "parallel" in self.model_fields_set:
            raise InstanceError("missing required field", at("parallel"))   # null: not a partial layout
        parallel, fixed = self.parallel.layout() if self.parallel is not None else (None, Fixed())
        check_rules(llm, wafer, training, fixed, where)
        scenario = Scenario(wafer, llm, training, parallel, fixed)
        check_fits(scenario)
        return scenario

    @classmethod
    def keys_of(cls, scenario: Scenario) -> dict:
        system = ({"cluster": ClusterSpec.of(scenario.wafer).dump()} if scenario.wafer.system == "cluster"
                  else {"wafer": WaferSpec.of(scenario.wafer).dump()})
        keys = {**system, "model": LLMSpec.of(scenario.llm).dump(),
                "training": TrainingSpec.of(scenario.training).dump()}
        fixed = {k: v for k, v in vars(scenario.fixed).items() if v is not None}
        if fixed:
            keys["parallel"] = ParallelSpec.model_construct(**fixed)
        return keys
