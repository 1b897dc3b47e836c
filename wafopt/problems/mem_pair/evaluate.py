"""Evaluator of Mem_pair allocations: `{"allocations": [{"sender": [r, c], "helper": [r, c], "amount": a}]}`.

`amount` is in the instance's memory units and must be a whole number of chunks. The objective is
sum amount * hops(sender, helper) in the healthy mesh (docs/mem_pair.md).
"""

from __future__ import annotations

import math

from wafopt.core.errors import PlanError
from wafopt.problems.evaluation import Evaluation
from wafopt.problems.mem_pair.instance import ROUNDING, MemPairInstance


def _die(value, where):
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise PlanError(f"{where} must be a die [row, col], got {value!r}")
    return (value[0], value[1])


def read_chunks(inst: MemPairInstance, plan: dict) -> tuple[dict[tuple[int, int], int], list[str]]:
    """Chunks per (sender index, helper index) and violations found while reading."""
    allocations = plan.get("allocations")
    if not isinstance(allocations, list):
        raise PlanError(f"'allocations' must be a list of {{sender, helper, amount}}, got {allocations!r:.80}")
    s_index = {s.die: k for k, s in enumerate(inst.senders)}
    h_index = {h.die: k for k, h in enumerate(inst.helpers)}
    chunks: dict[tuple[int, int], int] = {}
    violations = []
    for n, a in enumerate(allocations):
        if not isinstance(a, dict) or not {"sender", "helper", "amount"} <= set(a):
            raise PlanError(f"allocations[{n}] must be a mapping with sender, helper, amount; got {a!r:.80}")
        s, h = _die(a["sender"], f"allocations[{n}].sender"), _die(a["helper"], f"allocations[{n}].helper")
        amount = a["amount"]
        if not isinstance(amount, (int, float)) or isinstance(amount, bool) or not math.isfinite(amount):
            raise PlanError(f"allocations[{n}].amount must be a number, got {amount!r}")
        if s not in s_index:
            violations.append(f"allocations[{n}]: {list(s)} is not a sender")
            continue
        if h not in h_index:
            violations.append(f"allocations[{n}]: {list(h)} is not a helper")
            continue
        count = amount / inst.chunk
        if amount <= 0 or abs(count - round(count)) > max(ROUNDING, 1e-12 * count):
            violations.append(f"allocations[{n}]: amount {amount!r} is not a positive whole number of "
                              f"chunks of {inst.chunk:g}")
            continue
        key = (s_index[s], h_index[h])
        chunks[key] = chunks.get(key, 0) + int(round(count))
    return chunks, violations


def evaluate(inst: MemPairInstance, plan: dict) -> Evaluation:
    chunks, violations = read_chunks(inst, plan)
    S, H = inst.senders, inst.helpers
    placed = [0] * len(S)
    used = [0] * len(H)
    partners = [0] * len(S)
    cost = 0.0
    routed = []
    for (s, h), c in sorted(chunks.items()):
        hops = inst.hops[s][h]
        if hops is None:
            violations.append(f"sender {list(S[s].die)} and helper {list(H[h].die)} are not connected "
                              "in the healthy mesh")
            continue
        placed[s] += c
        used[h] += c
        partners[s] += 1
        cost += c * inst.chunk * hops
        routed.append((inst.mesh.xy_route(S[s].die, H[h].die), c * inst.chunk))
    for s, sender in enumerate(S):
        if placed[s] != inst.need[s]:
            violations.append(f"sender {list(sender.die)} places {placed[s]} chunks, needs exactly "
                              f"{inst.need[s]} (overflow {sender.overflow:g}, chunk {inst.chunk:g})")
        K = inst.max_helpers_per_sender
        if K is not None and partners[s] > K:
            violations.append(f"sender {list(sender.die)} uses {partners[s]} helpers, at most {K} allowed")
    for h, helper in enumerate(H):
        if used[h] > inst.room[h]:
            violations.append(f"helper {list(helper.die)} receives {used[h]} chunks, room for "
                              f"{inst.room[h]} (spare {helper.spare:g})")
    loads = inst.mesh.link_loads(routed)
    volume = sum(c for c in chunks.values()) * inst.chunk
    details = {"volume_hops": cost, "volume": volume,
               "mean_hops": cost / volume if volume else 0.0,
               "helpers_per_sender": partners,
               "helper_used": [u * inst.chunk for u in used],
               "max_link_load_xy": max(loads.values(), default=0.0),
               "link_loads_xy": {f"{list(a)}->{list(b)}": v for (a, b), v in sorted(loads.items())}}
    return Evaluation(cost, not violations, violations, details)
