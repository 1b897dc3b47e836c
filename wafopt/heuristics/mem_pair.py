"""Location-aware DRAM allocation (WATOS Alg. 3): each sender in turn takes the nearest helpers.

Senders are served in descending overflow (Alg. 2, line 12). A sender's queue holds the helpers it
reaches, ordered by hops (Eq. 2 pair term: cost = volume x hops), then larger remaining room, then
input order; it pops the head, takes as many chunks as the helper has room for, and a helper with
room left stays available to later senders. With K helpers per sender, the K-th helper must take
the whole remainder: the nearest helper with enough room is chosen, and the greedy fails when
there is none.
"""

from __future__ import annotations

from wafopt.core.budget import SolveOptions
from wafopt.core.result import MethodResult
from wafopt.problems.mem_pair.instance import MemPairInstance
from wafopt.problems.mem_pair.plans import plan_of


def greedy_chunks(inst: MemPairInstance) -> dict[tuple[int, int], int] | None:
    """Chunks per (sender, helper) of Alg. 3, or None when the greedy gets stuck."""
    room = list(inst.room)
    K = inst.max_helpers_per_sender
    chunks: dict[tuple[int, int], int] = {}
    order = sorted(range(len(inst.senders)), key=lambda s: (-inst.need[s], s))
    for s in order:
        left = inst.need[s]
        used = 0
        while left > 0:
            queue = sorted((inst.hops[s][h], -room[h], h) for h in range(len(inst.helpers))
                           if inst.hops[s][h] is not None and room[h] > 0 and (s, h) not in chunks)
            if K is not None and used == K - 1:
                queue = [q for q in queue if room[q[2]] >= left]
            if not queue:
                return None
            h = queue[0][2]
            take = min(room[h], left)
            chunks[(s, h)] = take
            room[h] -= take
            left -= take
            used += 1
    return chunks


def solve_greedy(inst: MemPairInstance, options: SolveOptions) -> MethodResult:
    why = inst.infeasibility()
    if why:
        return MethodResult(None, "infeasible", None, "greedy", why)
    chunks = greedy_chunks(inst)
    if chunks is None:
        return MethodResult(None, "unknown", None, "greedy",
                            "the greedy ran out of reachable helpers for a sender "
                            "(the instance may still be feasible: try milp or cpsat)")
    plan = plan_of(inst, chunks)
    options.incumbent(plan)
    return MethodResult(plan, "feasible", None, "greedy", "WATOS Alg. 3 (nearest helpers first)")
