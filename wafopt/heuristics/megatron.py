"""Megatron-LM baselines for a fixed (tp, pp, dp) layout.

- `megatron`: Megatron-LM as practised today (Korthikanti et al. 2022; Narayanan et al. 2021):
  sequence parallelism (unless the scenario fixes it), the least recomputation that fits (none,
  else selective, else full; or what `training.recompute` forces),
  FlashAttention where the scenario enables it, Megatron TP (TATP where the scenario's
  `parallel.tp_scheme` fixes it), and interleaved 1F1B (Narayanan
  et al. 2021, Sec. 2.2.2) as `parallel.interleave` fixes it, else when it helps: every legal
  number of virtual stages v (the layers split into pp x v equal chunks, micro-batches a multiple
  of pp; wafopt.costmodel.rules) is tried and the fastest kept, and so is every micro-batch size
  the scenario allows (`training.micro_batch` as a list). On a cluster its ranks are
  Megatron's order (tp fastest, then dp, then pp); on a wafer each tile shape's serpentine
  placement is tried.
- `mg-wafer`: WATOS's MG-wafer baseline (WATOS Sec. V-A): every tile shape h x w = tp, stages on
  the aligned tiles in serpentine order (WATOS Fig. 11a), no sequence parallelism, no
  recomputation unless memory forces full recomputation of every layer, no offloading; what the
  scenario forces (sequence parallelism, a recomputation policy, `tp_scheme`) it follows.
"""

from __future__ import annotations

import time
from dataclasses import replace

from wafopt.core.budget import SolveOptions
from wafopt.core.result import MethodResult
from wafopt.costmodel.rules import legal_interleaves, sequence_parallel_violation
from wafopt.costmodel.scenario import Choice, Scenario
from wafopt.problems import evaluate
from wafopt.problems.plan.layouts import serpentine_plans


def megatron_ranks(scenario: Scenario) -> list:
    """Pipelines [replica][stage] -> GPUs [node, gpu] in Megatron-LM's rank order (tp fastest, then
    dp, then pp): tensor-parallel groups stay inside a node when tp divides the GPUs per node."""
    par, per_node = scenario.parallel, scenario.wafer.cols
    return [[[[(tp + par.tp * (dp + par.dp * pp)) // per_node, (tp + par.tp * (dp + par.dp * pp)) % per_node]
              for tp in range(par.tp)] for pp in range(par.pp)] for dp in range(par.dp)]


def _placements(scenario: Scenario):
    """(label, plan) of every placement the baseline tries (plan None: the shape does not fit)."""
    par = scenario.parallel
    if scenario.wafer.system == "cluster":
        if par.dies > scenario.wafer.dies:
            yield "ranks", None
            return
        yield "ranks", {"tp": par.tp, "pp": par.pp, "dp": par.dp, "pipelines": megatron_ranks(scenario),
                        **scenario.plan_fields()}
        return
    for (h, w), plan in serpentine_plans(scenario):
        yield f"{h}x{w}", plan


def _idle_note(scenario: Scenario) -> str:
    """What the fixed layout leaves unused, if anything (a cluster's GPUs, a wafer's healthy dies)."""
    idle = scenario.wafer.healthy_die_count - scenario.parallel.dies
    return (f"; {idle} of {scenario.wafer.healthy_devices} idle (tp x pp x dp = {scenario.parallel.dies})"
            if idle > 0 else "")


def _recompute(scenario: Scenario, choice: Choice):
    """The recompute rows: forced, else the least recomputation that fits (none, selective, full)."""
    training = scenario.training
    work = scenario.workload(choice)
    if training.recompute_policy is not None:
        return work.policy_rows(training.recompute_policy), training.recompute_policy
    if not training.recompute:
        return None, "no recomputation (forbidden)"
    for policy, what in (("none", "no recomputation (it fits)"), ("selective", "selective recomputation (none does not fit)")):
        rows = work.policy_rows(policy)
        if work.fits(rows):
            return rows, what
    return work.policy_rows("full"), "full recomputation (selective does not fit)"


def _best(scenario: Scenario, options: SolveOptions, candidates) -> tuple[dict | None, list[str]]:
    """The fastest feasible candidate plan by the evaluator; stops early on Ctrl-C or the limit."""
    best, best_time, tried, longest = None, None, [], 0.0
    for label, plan in candidates:
        left = options.remaining()
        if best is not None and (options.stopped() or (left is not None and left < 2 * longest)):
            tried.append(f"{label} and later: not tried (stopped)")
            break
        if plan is None:
            tried.append(f"{label}: does not fit the system")
            continue
        started = time.monotonic()
        ev = evaluate("plan", scenario, plan)
        longest = max(longest, time.monotonic() - started)
        tried.append(f"{label}: " + ('%.4g s' % ev.objective if ev.feasible
                                      else f"infeasible ({ev.violations[0][:100] if ev.violations else 'no reason'})"))
        if ev.feasible and (best_time is None or ev.objective < best_time):
            best, best_time = plan, ev.objective
            options.incumbent(plan)
    return best, tried


def solve_megatron(scenario: Scenario, options: SolveOptions) -> MethodResult:
    par, training = scenario.parallel_of(needed_by="megatron"), scenario.training
    sp = training.sequence_parallel if training.sequence_parallel_fixed else \
        par.tp > 1 and sequence_parallel_violation(training.seq, par.tp) is None
    scheme = scenario.fixed.tp_scheme or "megatron"
    dividing = [b for b in training.micro_batches if training.global_batch % (b * par.dp) == 0]
    # (micro-batch size, virtual stages) -> (recompute rows, what they are): every setting a user would try
    settings = {(b, v): _recompute(scenario, Choice(replace(par, interleave=v), micro_batch=b, sequence_parallel=sp))
                for b in dividing
                for v in legal_interleaves(scenario.llm, par.pp, training.global_batch // (b * par.dp),
                                           scenario.fixed.interleave)}
    several_sizes = len(training.micro_batches) > 1
    sizes = sorted({b for b, _ in settings})     # those with a legal interleave

    def label(b: int, v: int, placement: str) -> str:
        return " ".join(([f"mb{b}"] if len(sizes) > 1 else []) + ([f"v{v}"] if len(settings) > len(sizes) else [])
                        + [placement])

    def candidates():
        for (b, v), (rows, _) in settings.items():
            for placement, plan in _placements(scenario):
                if plan is not None:
                    plan = dict(plan, interleave=v, sequence_parallel=sp, tp_scheme=scheme)
                    if several_sizes:
                        plan["micro_batch"] = b
                    if rows is not None:
                        plan["recompute"] = rows
                yield label(b, v, placement), plan

    best, tried = _best(scenario, options, candidates())
    if best is None:
        return MethodResult(None, "unknown", message=f"megatron baseline found no plan ({'; '.join(tried)})")
    b, v = best.get("micro_batch", training.micro_batch), best["interleave"]
    interleaves = sorted({w for (c, w) in settings if c == b})
    chosen = f"interleave {v}" + (f" (fastest of {', '.join(map(str, interleaves))})" if len(interleaves) > 1 else "")
    if several_sizes:
        chosen = f"micro-batch {b}" + (f" (fastest of {', '.join(map(str, sizes))})" if len(sizes) > 1 else
                                       " (the only allowed size that divides the batch per pipeline)") + f", {chosen}"
    return MethodResult(best, "feasible", None, "heuristic",
                        f"sequence parallelism {'on' if sp else 'off'}, {settings[b, v][1]}, {chosen}; "
                        f"tried: {'; '.join(tried)}{_idle_note(scenario)}")


def solve_mg_wafer(scenario: Scenario, options: SolveOptions) -> MethodResult:
    scenario.parallel_of(needed_by="mg-wafer")
    training = scenario.training
    sp = training.sequence_parallel if training.sequence_parallel_fixed else False
    work = scenario.workload(Choice(sequence_parallel=sp))
    policy = training.recompute_policy
    if policy is None:
        policy = "full" if not work.fits(work.policy_rows("none")) and training.recompute else "none"
    rows = None if policy == "none" else work.policy_rows(policy)

    def candidates():
        for label, plan in _placements(scenario):
            if plan is not None:
                plan = dict(plan, sequence_parallel=sp, tp_scheme=scenario.fixed.tp_scheme or "megatron")
                if rows is not None:
                    plan["recompute"] = rows
            yield label, plan

    best, tried = _best(scenario, options, candidates())
    if best is None:
        reason = ("even full recomputation does not fit every die" if policy == "full" else
                  "no placement is feasible" if scenario.wafer.system == "cluster" else "no tile shape fits")
        # a baseline that finds no plan proves nothing: unknown, not infeasible
        return MethodResult(None, "unknown", message=f"mg-wafer baseline found no plan: {reason} ({'; '.join(tried)})")
    note = {"full": "full recomputation", "none": "no recomputation"}.get(policy, f"{policy} recomputation")
    if training.recompute_policy is None and policy == "full":
        note += " (memory forces it)"
    return MethodResult(best, "feasible", None, "heuristic",
                        f"{note}; tile shapes tried: {'; '.join(tried)}{_idle_note(scenario)}")
