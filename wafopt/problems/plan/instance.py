"""Scenario instances (problem: plan): a wafer, an LLM, a training setup, optionally (tp, pp, dp).

```yaml
problem: plan
wafer: watos-config3            # preset name, {preset: NAME, <overrides>}, or all fields inline
model: gpt3-175b                # preset name or mapping
training: {seq: 2048, micro_batch: 1, global_batch: 64}
parallel: {tp: 8, pp: 7, dp: 1} # optional; absent means "search" (later work)
```
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from wafopt.core.errors import InstanceError
from wafopt.core.fields import Fields

METHODS = {
    "megatron": "wafopt.heuristics.megatron:solve_megatron",
    "uniform": "wafopt.compose.gcmr:solve_uniform",
    "gcmr": "wafopt.compose.gcmr:solve_gcmr",
}
DEFAULT_METHODS = ["megatron", "uniform", "gcmr"]
OBJECTIVE = "1F1B iteration time (s)"

GB = 1e9


@dataclass(frozen=True)
class Parallel:
    tp: int
    pp: int
    dp: int = 1

    @property
    def dies(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class Scenario:
    wafer: object      # wafopt.hardware.catalog.Wafer
    llm: object        # wafopt.hardware.catalog.LLM
    training: object   # wafopt.workload.model.Training
    parallel: Parallel | None

    def mesh(self):
        return self.wafer.mesh()

    def workload(self, parallel: Parallel | None = None):
        parallel = parallel or self.parallel
        if parallel is None:
            raise InstanceError("this needs a parallel layout: add parallel: {tp, pp, dp}", "parallel")
        return _workload(self, parallel)


@lru_cache(maxsize=64)
def _workload(scenario: Scenario, parallel: Parallel):
    from wafopt.workload.model import build_workload

    return build_workload(scenario.llm, scenario.training, scenario.wafer, parallel.tp, parallel.pp,
                          parallel.dp)


def parse_parallel(f: Fields) -> Parallel:
    par = Parallel(f.integer("tp", positive=True), f.integer("pp", positive=True),
                   f.integer("dp", default=1, positive=True))
    f.finish()
    return par


def parse(f: Fields) -> Scenario:
    from wafopt.hardware.catalog import resolve_llm, resolve_wafer
    from wafopt.workload.model import parse_training

    wafer = resolve_wafer(f.raw("wafer"), f.path("wafer"))
    llm = resolve_llm(f.raw("model"), f.path("model"))
    training = parse_training(f.raw("training"), f.path("training"))
    parallel = parse_parallel(f.mapping("parallel")) if f.has("parallel") else None
    scenario = Scenario(wafer, llm, training, parallel)
    check_fits(scenario)
    return scenario


def check_fits(scenario: Scenario) -> None:
    """Reject layouts larger than the healthy wafer and models that cannot fit at all."""
    mesh = scenario.mesh()
    healthy = len(mesh.healthy_dies)
    capacity = scenario.wafer.dram_capacity
    par = scenario.parallel
    if par is None:
        state = scenario.llm.total_params * scenario.training.state_bytes_per_param
        if state > healthy * capacity:
            raise InstanceError(f"model {scenario.llm.name} needs {state / GB:.1f} GB of model state, more than "
                                f"the {healthy} healthy dies hold ({healthy * capacity / GB:.1f} GB)", "model")
        return
    if par.dies > healthy:
        raise InstanceError(f"tp*pp*dp = {par.tp}*{par.pp}*{par.dp} = {par.dies} dies, but the wafer has only "
                            f"{healthy} healthy dies", "parallel")
    work = scenario.workload()
    need = sum(s.full_recompute_bytes() for s in work.stages) * par.tp * par.dp
    have = par.dies * capacity
    if need > have:
        worst = max(work.stages, key=lambda s: s.full_recompute_bytes())
        raise InstanceError(
            f"model {scenario.llm.name} cannot fit with tp={par.tp}, pp={par.pp}, dp={par.dp} even with full "
            f"recomputation: it needs {need / GB:.1f} GB on {par.dies} dies holding {have / GB:.1f} GB "
            f"(stage {worst.index} alone needs {worst.full_recompute_bytes() / GB:.1f} GB per die, "
            f"capacity {capacity / GB:.1f} GB)", "parallel")


def summary(scenario: Scenario) -> dict:
    w, m = scenario.wafer, scenario.llm
    out = {
        "wafer": {"name": w.name, "rows": w.rows, "cols": w.cols, "die_tflops": w.die_flops / 1e12,
                  "dram_gb": w.dram_capacity / GB, "dram_bw_tbps": w.dram_bandwidth / 1e12,
                  "link_bw_tbps": w.link_bandwidth / 1e12, "faulty_dies": sorted(map(list, w.faulty_dies))},
        "model": {"name": m.name, "layers": m.layers, "hidden": m.hidden, "heads": m.heads,
                  "params": m.total_params},
        "training": {k: getattr(scenario.training, k) for k in scenario.training.__dataclass_fields__},
    }
    if scenario.parallel is None:
        return out
    work = scenario.workload()
    out["parallel"] = {"tp": work.tp, "pp": work.pp, "dp": work.dp, "microbatches": work.microbatches}
    out["workload"] = {
        "p2p_bytes": work.p2p_bytes, "tp_allreduce_bytes": work.tp_allreduce_bytes,
        "model_flops_per_iteration": work.model_flops_per_iteration,
        "stages": [{"index": s.index, "layers": s.layers, "inflight": s.inflight, "params": s.params,
                    "state_bytes": s.state_bytes, "activation_bytes": s.activation_bytes,
                    "fwd_s": s.fwd_s, "bwd_s": s.bwd_s,
                    "units": [{"name": u.name, "bytes": u.bytes, "recompute_s": u.recompute_s}
                              for u in s.units]} for s in work.stages],
    }
    return out
