"""Evaluator of stage placements (WATOS Eq. 2), recomputed from the plan alone.

Plan: ``{"tile": [h, w], "assignment": [[a, b] per stage]}`` (tile may be omitted when the
instance has a single candidate shape). Checks: the tile is a candidate shape, one slot per
stage, every slot inside the slot grid and free of faulty dies, no slot used twice.
Objective = base + conflict penalty (see wafopt.problems.placement.instance), distances by
`Mesh.distance`, routes by `Mesh.xy_route`.
"""

from __future__ import annotations

from wafopt.core.errors import PlanError
from wafopt.problems.evaluation import Evaluation
from wafopt.problems.placement.instance import Layout, PlacementInstance


def _slot(value, k: int) -> tuple[int, int]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise PlanError(f"assignment[{k}] must be a slot [a, b] of two integers, got {value!r}")
    return (int(value[0]), int(value[1]))


def evaluate(inst: PlacementInstance, plan: dict) -> Evaluation:
    unknown = set(plan) - {"tile", "assignment"}
    if unknown:
        raise PlanError(f"unknown plan key {sorted(unknown)[0]!r} (allowed: assignment, tile)")
    if "tile" in plan:
        t = plan["tile"]
        if (not isinstance(t, (list, tuple)) or len(t) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in t)):
            raise PlanError(f"tile must be [h, w], got {t!r}")
        tile = (int(t[0]), int(t[1]))
    elif len(inst.tiles) == 1:
        tile = inst.tiles[0]
    else:
        raise PlanError(f"tile missing; the instance allows {[list(t) for t in inst.tiles]}")
    assignment = plan.get("assignment")
    if not isinstance(assignment, list):
        raise PlanError(f"assignment must be a list of slots [a, b], got {assignment!r:.60}")
    slots = [_slot(v, k) for k, v in enumerate(assignment)]

    mesh = inst.mesh
    n = inst.stages
    violations = []
    if tile not in inst.tiles:
        violations.append(f"tile {list(tile)} is not a candidate shape {[list(t) for t in inst.tiles]}")
        return Evaluation(None, False, violations)
    if len(slots) != n:
        violations.append(f"assignment has {len(slots)} slots, the instance has {n} stages")
    geometry = Layout(mesh, tile, ())
    rows, cols = mesh.rows // tile[0], mesh.cols // tile[1]
    owner: dict[tuple[int, int], int] = {}
    for i, s in enumerate(slots):
        if not (0 <= s[0] < rows and 0 <= s[1] < cols):
            violations.append(f"stage {i}: slot {list(s)} outside the {rows} x {cols} slot grid of tile "
                              f"{tile[0]}x{tile[1]}")
            continue
        faulty = [list(d) for d in geometry.dies(s) if not mesh.is_healthy(d)]
        if faulty:
            violations.append(f"stage {i}: slot {list(s)} contains faulty die(s) {faulty}")
        if s in owner:
            violations.append(f"stage {i}: slot {list(s)} already holds stage {owner[s]}")
        else:
            owner[s] = i
    if violations:
        return Evaluation(None, False, violations, {"tile": list(tile)})

    rep = [geometry.representative(s) for s in slots]
    V = inst.flow
    # base: every directed flow volume V[i][j] and every Mem_pair volume times the hop distance
    base = 0.0
    routed = []
    for i in range(n):
        for j in range(n):
            if V[i, j] > 0:
                base += V[i, j] * mesh.distance(rep[i], rep[j])
                routed.append((mesh.xy_route(rep[i], rep[j]), V[i, j]))
    flow_links = {link for path, _ in routed for link in mesh.route_links(path)}
    penalty = 0.0
    pair_details = []
    for s, h, vol in inst.pairs:
        hops = mesh.distance(rep[s], rep[h])
        path = mesh.xy_route(rep[s], rep[h])
        gamma = sum(1 for link in mesh.route_links(path) if link in flow_links)
        base += vol * hops
        penalty += vol * hops * gamma
        routed.append((path, vol))
        pair_details.append({"sender": s, "helper": h, "volume": float(vol), "hops": hops, "gamma": gamma})
    loads = mesh.link_loads(routed)   # per directed link: flows and Mem_pair volumes
    details = {
        "tile": list(tile),
        "base_objective": float(base),
        "conflict_penalty": float(penalty),
        "stage_dies": [[list(d) for d in geometry.dies(s)] for s in slots],
        "representative_dies": [list(d) for d in rep],
        "pairs": pair_details,
        "max_link_load": max(loads.values(), default=0.0),
        "link_loads": [[[list(a), list(b)], load] for (a, b), load in sorted(loads.items())],
    }
    return Evaluation(float(base + penalty), True, [], details)
