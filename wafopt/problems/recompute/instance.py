"""Recomputation selection (problem: recompute), WATOS section IV-B / Alg. 2 (GCMR).

```yaml
problem: recompute
mode: local            # local: every stage fits its own DRAM; pooled: the wafer's DRAM is shared (GCMR)
microbatches: 8
units: [{name: attn_scores, mem: 1.5, recompute: 0.10}, {name: gelu_in, mem: 1.0, recompute: 0.05}]
stages: [{layers: 4, inflight: 4, state: 20.0, capacity: 48.0, compute: 4.0}, ...]
```
The formulation is in docs/recompute.md. Units are free in kernel instances (bytes and seconds
in scenario-derived ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wafopt.costmodel.plan_layout import placement_choice
from wafopt.costmodel.schedule import one_f_one_b
from wafopt.problems.plan.evaluate import evaluate
from wafopt.problems.plan.layouts import default_placement

MODES = ("local", "pooled")

OBJECTIVE = "1F1B iteration time (instance time units)"
SCENARIO_UNIT = "s"   # of the objective of a kernel derived from a scenario (free otherwise)


@dataclass(frozen=True)
class Unit:
    name: str
    mem: float        # a_j: activation bytes kept per layer per micro-batch
    recompute: float  # r_j: extra time per layer per micro-batch when dropped and recomputed


@dataclass(frozen=True)
class Stage:
    layers: int       # L_i
    inflight: int     # k_i: micro-batches whose activations stage i holds at once (1F1B)
    state: float      # S_i: weights + gradients + optimizer state
    capacity: float   # Cap_i: DRAM of the stage
    compute: float    # T0_i: forward + backward time per micro-batch without recomputation


@dataclass(frozen=True)
class RecomputeInstance:
    mode: str
    microbatches: int
    units: tuple[Unit, ...]
    stages: tuple[Stage, ...]

    # --- the formulas of docs/recompute.md, shared by the evaluator, models and heuristics ---
    def memory(self, i: int, x_row) -> float:
        """M_i = S_i + k_i * sum_j a_j (L_i - x_ij)."""
        s = self.stages[i]
        return s.state + s.inflight * sum(u.mem * (s.layers - x) for u, x in zip(self.units, x_row))

    def stage_time(self, i: int, x_row) -> float:
        """T_i = T0_i + sum_j r_j x_ij."""
        return self.stages[i].compute + sum(u.recompute * x for u, x in zip(self.units, x_row))

    def iteration_time(self, times) -> float:
        """1F1B: sum_i T_i + (m - 1) max_i T_i (wafopt.costmodel.schedule)."""
        return one_f_one_b(times, self.microbatches)

    def shortfall(self) -> str | None:
        """Why even full recomputation (M_i = S_i) does not fit, or None if it does."""
        if self.mode == "local":
            over = [(s.state - s.capacity, i) for i, s in enumerate(self.stages) if s.state > s.capacity]
            if over:
                worst = max(over)
                return (f"infeasible: even full recomputation leaves stage {worst[1]} "
                        f"{worst[0]:.6g} over its capacity ({len(over)} stage(s) short; memory "
                        f"shortfall with full recomputation = {worst[0]:.6g})")
            return None
        state = sum(s.state for s in self.stages)
        cap = sum(s.capacity for s in self.stages)
        if state > cap:
            return (f"infeasible: even full recomputation needs {state:.6g} of pooled memory but the "
                    f"stages have {cap:.6g} (memory shortfall = {state - cap:.6g})")
        return None


def generate(seed: int, stages: int, layers: int, units: int, mode: str = "pooled",
             microbatches: int | None = None, tightness: float = 0.55) -> RecomputeInstance:
    """A reproducible random instance: `layers` layers split over `stages` 1F1B stages.

    Unit sizes and recompute times are decimals with at most 2 digits (so CP-SAT and the dp scale
    them exactly). `tightness` sets the DRAM capacity between the state (0) and the state plus all
    activations of the most loaded stage (1); stage 0 holds the most micro-batches in flight.
    """
    rng = np.random.default_rng(seed)
    m = microbatches or 2 * stages
    per = [layers // stages + (1 if i < layers % stages else 0) for i in range(stages)]
    unit_list = tuple(Unit(f"u{j}", float(rng.integers(1, 40)) / 4, float(rng.integers(1, 30)) / 100)
                      for j in range(units))
    act_per_layer = sum(u.mem for u in unit_list)
    state = [float(rng.integers(20, 40)) * L for L in per]
    inflight = [min(stages - i, m) for i in range(stages)]
    worst = max(inflight[i] * per[i] * act_per_layer for i in range(stages))
    cap = round(max(state) + tightness * worst, 2)
    stage_list = tuple(Stage(per[i], inflight[i], state[i], cap,
                             round(float(rng.uniform(0.9, 1.1)) * per[i] * 1.0, 2))
                       for i in range(stages))
    return RecomputeInstance(mode, m, unit_list, stage_list)


def from_scenario(scenario, placement: dict | None = None) -> RecomputeInstance:
    """The pooled recompute kernel of a scenario with fixed (tp, pp, dp), per die, in bytes and
    seconds, on `placement` (default: the canonical serpentine placement, plan.layouts).

    Units are the workload's recomputable operator units; the layer-input checkpoint that full
    recomputation keeps is fixed memory, added to the stage's state. T0_i is the stage's compute
    plus TP and pipeline communication time on that placement. Bytes are rounded to whole bytes
    and seconds to whole nanoseconds, so the exact models scale exactly. Pure: no solver runs.
    """
    placement = placement if placement is not None else default_placement(scenario)
    work = scenario.workload(placement_choice(placement))
    rows = evaluate(scenario, placement).details["stages"]
    # a unit's time: its regeneration with the collectives it repeats, on the slowest stage
    # interleaved 1F1B holds whole chunks in flight (1/v of a stage each): the kernel counts chunks,
    # each unit's bytes / v rounded up, so its memory is never below the evaluator's
    v = work.interleave
    units = tuple(Unit(u.name, float(math.ceil(u.bytes / v) if v > 1 else round(u.bytes)),
                       round(max(r["recompute_unit_s"][j] for r in rows), 9))
                  for j, u in enumerate(work.stages[0].units) if u.recomputable)
    cap = float(round(scenario.wafer.dram_capacity))
    stages = tuple(Stage(s.layers, round(s.inflight * v), float(math.ceil(s.full_recompute_bytes())), cap,
                         round(r["compute_s"] + r["tp_comm_s"] + r["p2p_s"], 9))
                   for s, r in zip(work.stages, rows))
    return RecomputeInstance("pooled", work.microbatches, units, stages)


def plan_recompute(scenario, kernel_x: list[list[int]]) -> list[list[int]]:
    """Kernel x (recomputable units only) -> a plan's x over all workload units (0 for checkpoints)."""
    units = scenario.workload().stages[0].units
    out = []
    for row in kernel_x:
        it = iter(row)
        out.append([next(it) if u.recomputable else 0 for u in units])
    return out


def summary(inst: RecomputeInstance) -> dict:
    return {"mode": inst.mode, "microbatches": inst.microbatches, "stages": len(inst.stages),
            "layers": sum(s.layers for s in inst.stages), "units": len(inst.units),
            "full_recompute_shortfall": inst.shortfall(),
            "no_recompute_memory": [inst.memory(i, [0] * len(inst.units)) for i in range(len(inst.stages))],
            "capacity": [s.capacity for s in inst.stages]}
