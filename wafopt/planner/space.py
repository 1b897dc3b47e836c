"""The planner's search space: every layout (tp, pp, dp, interleave) and micro-batch size a plan
may choose.

A layout is in the space when tp is legal for the model and the wafer (wafopt.costmodel.rules),
tp * pp * dp <= healthy dies, pp <= layers and dp divides global_batch / b for the micro-batch
size b, restricted to what the scenario's `parallel:` fixes. Interleaved 1F1B with v virtual
stages per device (Narayanan et al. 2021, Sec. 2.2.2) is the scenario's `interleave: v` where it
fixes one, else any v the interleave rule allows (v = 1, or pp * v equal chunks of layers and the
micro-batches of a pipeline in groups of pp; wafopt.costmodel.rules).
Every plan the evaluator accepts has one of these choices; each stage may use either
tensor-parallel scheme, and the plan chooses its contiguous layer split.

A choice's micro-batch size is None when the scenario allows only one size (its key then has no
size either, as in the planner-layouts certificate).
"""

from __future__ import annotations

from wafopt.costmodel.rules import legal_interleaves
from wafopt.costmodel.scenario import Choice, Parallel, Scenario


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _layouts(scenario: Scenario, micro_batch: int) -> list[Parallel]:
    healthy = len(scenario.mesh().healthy_dies)
    fixed = scenario.fixed
    sequences = scenario.training.global_batch // micro_batch
    dps = [fixed.dp] if fixed.dp else [d for d in _divisors(sequences) if d <= healthy]
    out = []
    tps = [t for t in range(1, healthy + 1) if scenario.tp_schemes(t)]
    for tp in ([fixed.tp] if fixed.tp else tps):
        if tp not in tps:
            continue
        for dp in dps:
            if sequences % dp:
                continue
            top = min(scenario.llm.layers, healthy // (tp * dp))
            for pp in ([fixed.pp] if fixed.pp else range(1, top + 1)):
                if 1 <= pp <= top:
                    out += [Parallel(tp, pp, dp, v)
                            for v in legal_interleaves(scenario.llm, pp, sequences // dp, fixed.interleave)]
    return sorted(out, key=_order)


def _order(par: Parallel) -> tuple:
    return par.tp, par.pp, par.dp, par.interleave


def layout_space(scenario: Scenario) -> list[Parallel]:
    """Every layout a plan of this scenario may have (with any of its micro-batch sizes), in
    (tp, pp, dp) order."""
    sizes = scenario.training.micro_batches
    if len(sizes) > 1:
        union = {par for b in sizes for par in _layouts(scenario, b)}
        return sorted(union, key=_order)
    return _layouts(scenario, scenario.training.micro_batch)


def layout_choices(scenario: Scenario) -> list[Choice]:
    """Every (layout, micro-batch size) a plan may choose, in (tp, pp, dp, size) order; the size
    is None when the scenario allows only one."""
    sizes = scenario.training.micro_batches
    if len(sizes) == 1:
        return [Choice(par) for par in _layouts(scenario, scenario.training.micro_batch)]
    out = [Choice(par, micro_batch=b) for b in sizes for par in _layouts(scenario, b)]
    return sorted(out, key=lambda c: _order(c.parallel) + (c.micro_batch,))


def choice_key(choice: Choice) -> tuple:
    """(tp, pp, dp, interleave), and the micro-batch size where the scenario allows several."""
    base = _order(choice.parallel)
    return base if choice.micro_batch is None else base + (choice.micro_batch,)


def plan_key(scenario: Scenario, plan: dict) -> tuple:
    """The key of a plan's choice: (tp, pp, dp, interleave), and its micro-batch size where the
    scenario allows several."""
    key = (plan["tp"], plan["pp"], plan.get("dp", 1), plan.get("interleave", scenario.fixed.interleave or 1))
    if len(scenario.training.micro_batches) > 1:
        key += (plan.get("micro_batch", scenario.training.micro_batch),)
    return key


def choice_size(scenario: Scenario, choice: Choice) -> int:
    """The micro-batch size of a choice (the scenario's where it leaves it open)."""
    return choice.micro_batch or scenario.training.micro_batch


def key_name(key: tuple) -> str:
    """A layout key for people: tp8 pp7 dp1, with v2 where interleaved and mb2 where sized."""
    name = f"tp{key[0]} pp{key[1]} dp{key[2]}" + (f" v{key[3]}" if key[3] > 1 else "")
    return name + (f" mb{key[4]}" if len(key) > 4 else "")
