"""Evaluator of TATP group mappings: disjoint rings of healthy dies, objective = sum of ring costs.

Ring cost of a group (TEMP Sec. V, WaferLLM Sec. 5.2; `Mesh.ring_cost`): the longest hop, in the
healthy mesh, between consecutive dies of its cyclic order (last back to first). A physical ring
costs 1.
"""

from __future__ import annotations

from wafopt.core.errors import PlanError
from wafopt.hardware.mesh import Die
from wafopt.problems.evaluation import Evaluation


def read_groups(plan: dict) -> list[list[Die]]:
    """The plan's rings as lists of die tuples, or PlanError if the structure is unreadable."""
    groups = plan.get("groups")
    if not isinstance(groups, list):
        raise PlanError(f"'groups' must be a list of rings, got {groups!r:.60}")
    out = []
    for g, ring in enumerate(groups):
        if not isinstance(ring, list):
            raise PlanError(f"groups[{g}] must be a list of dies, got {ring!r:.60}")
        dies = []
        for k, d in enumerate(ring):
            if (not isinstance(d, (list, tuple)) or len(d) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in d)):
                raise PlanError(f"groups[{g}][{k}] must be a die [row, col], got {d!r}")
            dies.append((d[0], d[1]))
        out.append(dies)
    return out


def evaluate(instance, plan: dict) -> Evaluation:
    mesh, N, G = instance.mesh, instance.group_size, instance.groups
    groups = read_groups(plan)
    violations = []
    if len(groups) != G:
        violations.append(f"plan has {len(groups)} groups, the instance asks for {G}")
    owner: dict[Die, int] = {}
    for g, ring in enumerate(groups):
        if len(ring) != N:
            violations.append(f"group {g} has {len(ring)} dies, the group size is {N}")
        for die in ring:
            if not mesh.contains(die):
                violations.append(f"group {g}: die {list(die)} lies outside the {mesh.rows} x {mesh.cols} mesh")
            elif not mesh.is_healthy(die):
                violations.append(f"group {g}: die {list(die)} is faulty")
            elif die in owner:
                where = "twice in the same group" if owner[die] == g else f"also in group {owner[die]}"
                violations.append(f"group {g}: die {list(die)} is {where}")
            else:
                owner[die] = g
    if violations:
        return Evaluation(None, False, violations)
    costs = [mesh.ring_cost(ring) for ring in groups]
    details = {"ring_costs": costs, "physical_rings": sum(c == 1 for c in costs),
               "tail_hops": max(costs), "lower_bound": instance.lower_bound,
               "unused_dies": len(mesh.healthy_dies) - len(owner)}
    return Evaluation(float(sum(costs)), True, [], details)
