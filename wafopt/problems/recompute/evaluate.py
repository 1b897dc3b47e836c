"""Evaluator of recomputation plans: `{"x": [[x_ij per unit] per stage]}`.

Recomputes every stage's memory M_i and time T_i from x alone and the 1F1B iteration time
sum_i T_i + (m - 1) max_i T_i (docs/recompute.md).
"""

from __future__ import annotations

from wafopt.core.errors import PlanError
from wafopt.problems.evaluation import Evaluation
from wafopt.problems.recompute.instance import RecomputeInstance

MEMORY_TOLERANCE = 1e-9  # relative to the capacity compared against (float sums of exact data)


def read_x(inst: RecomputeInstance, plan: dict) -> list[list[int]]:
    """The x matrix of a plan, checked for shape and integrality (PlanError otherwise)."""
    if "x" not in plan:
        raise PlanError("missing 'x' (a list with one row of recomputed-layer counts per stage)")
    x = plan["x"]
    p, n = len(inst.stages), len(inst.units)
    if not isinstance(x, list) or len(x) != p:
        raise PlanError(f"'x' must be a list of {p} rows (one per stage), got {x!r:.80}")
    rows = []
    for i, row in enumerate(x):
        if not isinstance(row, list) or len(row) != n:
            raise PlanError(f"x[{i}] must be a list of {n} integers (one per unit), got {row!r:.80}")
        out = []
        for j, v in enumerate(row):
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if not isinstance(v, int) or isinstance(v, bool):
                raise PlanError(f"x[{i}][{j}] must be an integer, got {v!r}")
            out.append(v)
        rows.append(out)
    return rows


def fits(used: float, capacity: float) -> bool:
    return used <= capacity + MEMORY_TOLERANCE * max(1.0, abs(capacity))


def evaluate(inst: RecomputeInstance, plan: dict) -> Evaluation:
    x = read_x(inst, plan)
    violations = []
    for i, (row, s) in enumerate(zip(x, inst.stages)):
        for j, v in enumerate(row):
            if not 0 <= v <= s.layers:
                violations.append(f"x[{i}][{j}] = {v} is outside 0..{s.layers} (layers of stage {i})")
    if violations:
        return Evaluation(None, False, violations)
    p = len(inst.stages)
    memory = [inst.memory(i, x[i]) for i in range(p)]
    times = [inst.stage_time(i, x[i]) for i in range(p)]
    caps = [s.capacity for s in inst.stages]
    objective = inst.iteration_time(times)
    recompute_time = [t - s.compute for t, s in zip(times, inst.stages)]
    details = {"stage_memory": memory, "stage_capacity": caps, "stage_time": times,
               "bottleneck_stage": max(range(p), key=lambda i: times[i]),
               "recompute_time_per_microbatch": recompute_time,
               "recompute_share": sum(recompute_time) / max(1e-300, sum(times)),
               "iteration_time": objective}
    if inst.mode == "local":
        for i in range(p):
            if not fits(memory[i], caps[i]):
                violations.append(f"stage {i} memory {memory[i]:.9g} exceeds its capacity {caps[i]:.9g} "
                                  f"by {memory[i] - caps[i]:.6g}")
    else:
        total, cap = sum(memory), sum(caps)
        if not fits(total, cap):
            violations.append(f"pooled memory {total:.9g} exceeds the total capacity {cap:.9g} "
                              f"by {total - cap:.6g}")
        details["senders"] = [{"stage": i, "overflow": memory[i] - caps[i]}
                              for i in range(p) if memory[i] > caps[i]]
        details["helpers"] = [{"stage": i, "spare": caps[i] - memory[i]}
                              for i in range(p) if memory[i] < caps[i]]
    return Evaluation(objective, not violations, violations, details)
