"""The planner's search space: every layout (tp, pp, dp) and micro-batch size a plan may choose.

A layout is in the space when tp is legal for the model and the wafer (wafopt.costmodel.rules),
tp * pp * dp <= healthy dies, pp <= layers and dp divides global_batch / b for the micro-batch
size b, restricted to what the scenario's `parallel:` fixes. A scenario that fixes `interleave: v`
runs interleaved 1F1B in every layout: pp must then split the layers into pp * v equal chunks and
the micro-batches of a pipeline into groups of pp (the interleave rule of wafopt.costmodel.rules).
Every plan the evaluator accepts has one of these choices; each stage may use either
tensor-parallel scheme, and the plan chooses its contiguous layer split.

A choice's micro-batch size is None when the scenario allows only one size (its key then has no
size either, as in the planner-layouts certificate).
"""

from __future__ import annotations

from wafopt.costmodel.rules import interleave_violation
from wafopt.costmodel.scenario import Choice, Parallel, Scenario


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _layouts(scenario: Scenario, micro_batch: int) -> list[Parallel]:
    healthy = len(scenario.mesh().healthy_dies)
    fixed = scenario.fixed
    sequences = scenario.training.global_batch // micro_batch
    dps = [fixed.dp] if fixed.dp else [d for d in _divisors(sequences) if d <= healthy]
    v = fixed.interleave or 1
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
                if 1 <= pp <= top and not interleave_violation(scenario.llm, pp, v, sequences // dp):
                    out.append(Parallel(tp, pp, dp, v))
    return sorted(out, key=lambda p: (p.tp, p.pp, p.dp))


def layout_space(scenario: Scenario) -> list[Parallel]:
    """Every layout a plan of this scenario may have (with any of its micro-batch sizes), in
    (tp, pp, dp) order."""
    sizes = scenario.training.micro_batches
    if len(sizes) > 1:
        union = {par for b in sizes for par in _layouts(scenario, b)}
        return sorted(union, key=lambda p: (p.tp, p.pp, p.dp))
    return _layouts(scenario, scenario.training.micro_batch)


def layout_choices(scenario: Scenario) -> list[Choice]:
    """Every (layout, micro-batch size) a plan may choose, in (tp, pp, dp, size) order; the size
    is None when the scenario allows only one."""
    sizes = scenario.training.micro_batches
    if len(sizes) == 1:
        return [Choice(par) for par in _layouts(scenario, scenario.training.micro_batch)]
    out = [Choice(par, micro_batch=b) for b in sizes for par in _layouts(scenario, b)]
    return sorted(out, key=lambda c: (c.parallel.tp, c.parallel.pp, c.parallel.dp, c.micro_batch))


def choice_key(choice: Choice) -> tuple:
    """(tp, pp, dp), and the micro-batch size where the scenario allows several."""
    par = choice.parallel
    base = (par.tp, par.pp, par.dp)
    return base if choice.micro_batch is None else base + (choice.micro_batch,)


def plan_key(scenario: Scenario, plan: dict) -> tuple:
    """The key of a plan's choice: (tp, pp, dp), and its micro-batch size where the scenario
    allows several."""
    key = (plan["tp"], plan["pp"], plan.get("dp", 1))
    if len(scenario.training.micro_batches) > 1:
        key += (plan.get("micro_batch", scenario.training.micro_batch),)
    return key


def choice_size(scenario: Scenario, choice: Choice) -> int:
    """The micro-batch size of a choice (the scenario's where it leaves it open)."""
    return choice.micro_batch or scenario.training.micro_batch
