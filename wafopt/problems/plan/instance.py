"""Scenario instances (problem: plan): a wafer, an LLM, a training setup, optionally (tp, pp, dp).

```yaml
problem: plan
wafer: watos-config3            # preset name, {preset: NAME, <overrides>}, or all fields inline
model: gpt3-175b                # preset name or mapping
training: {seq: 2048, micro_batch: 1, global_batch: 64}   # micro_batch: [1, 2, 4] lets plans choose
parallel: {tp: 8, pp: 7, dp: 1} # optional: tp and pp given fix the layout (dp default 1);
                                # absent or partial ({tp: 8}, {dp: 2}) the planner searches the rest
```
"""

from __future__ import annotations

import math
from dataclasses import asdict

from wafopt.core.errors import InstanceError
from wafopt.core.schema import field_at
from wafopt.costmodel.rules import (
    interleave_violation,
    sequence_parallel_violation,
    system_violation,
    tp_violation,
)
from wafopt.costmodel.scenario import Choice, Fixed, Scenario
from wafopt.hardware.cluster import ClusterSpec

OBJECTIVE = "1F1B iteration time (s)"
UNIT = "s"   # of the objective, in result lines

GB = 1e9


def check_rules(llm, wafer, training, fixed: Fixed, where: str) -> None:
    """A fixed `parallel:` (and forced sequence parallelism) must be a layout its scheme can run on
    the system (wafopt.costmodel.rules): InstanceError naming the rule and the numbers otherwise.
    `where`: the document's path."""
    at = lambda key: field_at(where, key)  # noqa: E731
    scheme = fixed.tp_scheme or "megatron"   # a fixed tp is Megatron's unless the scenario fixes tp_scheme: tatp
    why = system_violation(wafer, fixed.tp or 1, scheme)
    if why:
        raise InstanceError(why, at("parallel.tp_scheme" if scheme == "tatp" else "parallel.tp"))
    why = tp_violation(llm, fixed.tp, wafer.parallel_rules, scheme) if fixed.tp is not None else None
    if why:
        raise InstanceError(why, at("parallel.tp"))
    if fixed.pp is not None and fixed.pp > llm.layers:
        raise InstanceError(f"must be <= the {llm.layers} layers of {llm.name} (a stage holds at least one), "
                            f"got {fixed.pp}", at("parallel.pp"))
    if fixed.tp is not None and training.sequence_parallel_fixed and training.sequence_parallel:
        why = sequence_parallel_violation(training.seq, fixed.tp)
        if why:
            raise InstanceError(why, at("training.sequence_parallel"))
    if fixed.interleave not in (None, 1) and fixed.pp is not None:   # else the planner picks a pp that can
        counts = {training.global_batch // (b * fixed.dp) for b in training.micro_batches
                  if fixed.dp is not None and training.global_batch % (b * fixed.dp) == 0}
        why = interleave_violation(llm, fixed.pp, fixed.interleave, min(counts) if len(counts) == 1 else None)
        if why:
            raise InstanceError(why, at("parallel.interleave"))


def leanest_policy(training) -> str:
    """The recomputation policy that leaves the least memory among those `training` allows."""
    return training.recompute_policy or ("full" if training.recompute else "none")


def check_fits(scenario: Scenario) -> None:
    """Reject layouts larger than the healthy wafer and layouts no plan can fit in DRAM.

    Offloading moves only activation checkpoints, to helper dies (WATOS Sec. IV-C.2), so with
    (tp, pp, dp) fixed a layout fits only if
    1. per die: each stage's model state and working memory, which never leave its dies, fit
       one die's DRAM (the leanest plan: nothing recomputed, every checkpoint offloaded);
    2. pooled: with full recomputation the wafer's healthy dies together hold every stage's
       memory (checkpoints may go to any healthy die, idle ones included, as in the layout bound).
    Both are tested on every contiguous layer split and allowed micro-batch size a plan may choose.
    A GPU cluster offloads nothing: there each stage's whole memory under the leanest recomputation
    the scenario allows (full, unless `training.recompute` forbids or fixes it) fits one GPU.
    """
    system = scenario.wafer
    healthy = system.healthy_die_count
    capacity = system.dram_capacity
    par = scenario.parallel
    if par is None:
        state = scenario.llm.total_params * scenario.training.state_bytes_per_param
        if state > healthy * capacity:
            raise InstanceError(f"model {scenario.llm.name} needs {state / GB:.1f} GB of model state, more than "
                                f"the {system.healthy_devices} hold ({healthy * capacity / GB:.1f} GB)", "model")
        return
    if par.dies > healthy:
        raise InstanceError(f"tp*pp*dp = {par.tp}*{par.pp}*{par.dp} = {par.dies} {system.device}s, but the "
                            f"{system.system} has only {system.healthy_devices}", "parallel")
    shortfall = _even_split_shortfall(scenario)
    if shortfall is not None and not _some_split_fits(scenario):
        raise InstanceError(shortfall, "parallel")


def _sequence_parallel_options(scenario: Scenario) -> list[bool | None]:
    """The sequence-parallel settings a plan may choose (None: the scenario fixes it)."""
    training, tp = scenario.training, scenario.parallel.tp
    if training.sequence_parallel_fixed or tp == 1:
        return [None]
    return [False] + ([True] if sequence_parallel_violation(training.seq, tp) is None else [])


def _least_bytes(scenario: Scenario, stages) -> tuple[float, float]:
    """(own, pooled) for one stage under each setting a plan may choose, least of each: `own`, what
    never leaves its devices (condition 1; on a cluster the whole stage under the leanest allowed
    recomputation), `pooled`, its full-recomputation bytes (condition 2)."""
    if scenario.wafer.system == "cluster":
        policy = leanest_policy(scenario.training)
        own = min(st.memory_bytes(st.policy_row(policy)) for st in stages)
    else:
        own = min(st.memory_bytes() - st.inflight_bytes() for st in stages)
    return own, min(st.full_recompute_bytes() for st in stages)


def _even_split_shortfall(scenario: Scenario) -> str | None:
    """Why conditions 1 and 2 fail on the even layer split (default micro-batch size), or None."""
    par, system = scenario.parallel, scenario.wafer
    capacity = system.dram_capacity
    works = [scenario.workload(Choice(sequence_parallel=sp)) for sp in _sequence_parallel_options(scenario)]
    least = [_least_bytes(scenario, stages) for stages in zip(*(w.stages for w in works))]
    layout = f"model {scenario.llm.name} cannot fit with tp={par.tp}, pp={par.pp}, dp={par.dp}"
    for index, (own, _) in enumerate(least):
        if own <= capacity:
            continue
        if system.system == "cluster":
            policy = leanest_policy(scenario.training)
            return (f"{layout} {'without' if policy == 'none' else f'even with {policy}'} recomputation: stage "
                    f"{index} needs {own / GB:.1f} GB per GPU, capacity {capacity / GB:.1f} GB (a cluster offloads "
                    "nothing; training.recompute says what may be recomputed)")
        return (f"{layout} even with full recomputation: stage {index}'s model state and working memory, which "
                f"stay on its own {system.device}s, need {own / GB:.1f} GB per {system.device}, capacity "
                f"{capacity / GB:.1f} GB (offloading moves only activation checkpoints)")
    if system.system == "cluster":
        return None
    need = sum(pooled for _, pooled in least) * par.tp * par.dp
    have = system.healthy_die_count * capacity
    if need > have:
        worst = max(range(len(least)), key=lambda i: least[i][1])
        return (f"{layout} even with full recomputation: it needs {need / GB:.1f} GB, the {system.system}'s "
                f"{system.healthy_devices} hold {have / GB:.1f} GB (stage {worst} alone needs "
                f"{least[worst][1] / GB:.1f} GB per {system.device}, capacity {capacity / GB:.1f} GB)")
    return None


FIT_DP_STEPS = 2_000_000   # (stage, first, last layer) steps the split search may take (~1 s)


def _some_split_fits(scenario: Scenario) -> bool:
    """Conditions 1 and 2 for some contiguous layer split, allowed micro-batch size and sequence
    parallelism (a plan may choose all three). Stage memory depends only on the stage, its layers
    and their kinds, so a DP over stages finds the least pooled memory (2) among the splits whose
    every stage passes (1)."""
    par, llm, capacity = scenario.parallel, scenario.llm, scenario.wafer.dram_capacity
    cluster = scenario.wafer.system == "cluster"
    L, p = llm.layers, par.pp
    if p * (L - p + 1) ** 2 > 2 * FIT_DP_STEPS:
        return False   # too large to search at validation: the even split's verdict stands
    moe = [0]
    for i in range(L):
        moe.append(moe[-1] + llm.is_moe_layer(i))
    for micro_batch in scenario.training.micro_batches:
        choices = [Choice(par, micro_batch=micro_batch, sequence_parallel=sp)
                   for sp in _sequence_parallel_options(scenario)]
        if p > L or scenario.training.global_batch % (micro_batch * par.dp):
            continue
        m = scenario.training.global_batch // (micro_batch * par.dp)
        memory: dict = {}

        def pooled(j: int, a: int, n: int) -> float:
            """Stage j's full-recomputation bytes on layers a .. a + n - 1; inf if (1) fails."""
            key = (j, n, moe[a + n] - moe[a])   # the stage's memory depends on nothing else
            if key not in memory:
                own, least = _least_bytes(scenario, [scenario.stage_workload(c, j, a, n, m) for c in choices])
                memory[key] = least if own <= capacity else math.inf
            return memory[key]

        least = [0.0] + [math.inf] * L   # least pooled bytes of stages before j over layers 0 .. a - 1
        for j in range(p):
            nxt = [math.inf] * (L + 1)
            for a in range(j, L - (p - j) + 1):
                if least[a] == math.inf:
                    continue
                for b in ([L] if j == p - 1 else range(a + 1, L - (p - 1 - j) + 1)):
                    nxt[b] = min(nxt[b], least[a] + pooled(j, a, b - a))
            least = nxt
        if least[L] < math.inf and (cluster or least[L] * par.tp * par.dp <= scenario.wafer.healthy_die_count
                                    * capacity):
            return True
    return False


def summary(scenario: Scenario) -> dict:
    w, m = scenario.wafer, scenario.llm
    system = ({"cluster": {k: v for k, v in ClusterSpec.of(w).dump().items() if k not in ("efficiency", "source")}}
              if w.system == "cluster" else
              {"wafer": {"name": w.name, "rows": w.rows, "cols": w.cols, "die_tflops": w.die_flops / 1e12,
                         "dram_gb": w.dram_capacity / GB, "dram_bw_tbps": w.dram_bandwidth / 1e12,
                         "link_bw_tbps": w.link_bandwidth / 1e12, "faulty_dies": sorted(map(list, w.faulty_dies))}})
    out = {
        **system,
        "model": {"name": m.name, "layers": m.layers, "hidden": m.hidden, "heads": m.heads,
                  "params": m.total_params},
        "training": asdict(scenario.training),
    }
    if scenario.parallel is None:
        return out
    work = scenario.workload()
    out["parallel"] = {"tp": work.tp, "pp": work.pp, "dp": work.dp, "microbatches": work.microbatches}
    out["workload"] = {
        "p2p_bytes": work.p2p_bytes, "tp_bytes_per_layer": work.stages[0].tp_bytes_per_layer(),
        "model_flops_per_iteration": work.model_flops_per_iteration,
        "stages": [{"index": s.index, "layers": s.layers, "inflight": s.inflight, "params": s.params,
                    "state_bytes": s.state_bytes, "activation_bytes": s.activation_bytes,
                    "transient_bytes": s.transient_bytes(), "fwd_s": s.fwd_s, "bwd_s": s.bwd_s,
                    "units": [{"name": u.name, "bytes": u.bytes, "recompute_s": u.recompute_s}
                              for u in s.units]} for s in work.stages],
    }
    return out
