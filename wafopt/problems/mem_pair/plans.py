"""Mem_pair plans as chunk counts: the plan encoding, the K-helpers check, and the transportation
optimum without K (a relaxation: its cost bounds every plan; with K it is a plan when it respects K).

Chunks are indexed by (sender index, helper index); a plan is
`{"allocations": [{"sender": [r, c], "helper": [r, c], "amount": chunks x chunk}]}`.
"""

from __future__ import annotations

from wafopt.problems.mem_pair.evaluate import read_chunks
from wafopt.problems.mem_pair.instance import MemPairInstance

Chunks = dict[tuple[int, int], int]


def plan_of(inst: MemPairInstance, chunks: Chunks) -> dict:
    return {"allocations": [{"sender": list(inst.senders[s].die), "helper": list(inst.helpers[h].die),
                             "amount": c * inst.chunk} for (s, h), c in sorted(chunks.items()) if c > 0]}


def chunks_of(inst: MemPairInstance, plan: dict) -> Chunks:
    """Whole chunks per (sender, helper) of a plan, read as the evaluator reads it."""
    return read_chunks(inst, plan)[0]


def respects_k(inst: MemPairInstance, chunks: Chunks) -> bool:
    K = inst.max_helpers_per_sender
    if K is None:
        return True
    partners = [0] * len(inst.senders)
    for s, _ in chunks:
        partners[s] += 1
    return max(partners, default=0) <= K


def transport_chunks(inst: MemPairInstance) -> Chunks | None:
    """The transportation optimum without K by min-cost flow (networkx network simplex), or None
    when no allocation exists. Integral (the network matrix is totally unimodular)."""
    import networkx as nx  # lazy: slow import (docs/architecture.md)

    g = nx.DiGraph()
    for s, n in enumerate(inst.need):
        g.add_node(("s", s), demand=-n)
    for h, c in enumerate(inst.room):
        g.add_node(("h", h), demand=0)
        g.add_edge(("h", h), ("t", 0), capacity=c, weight=0)
    g.add_node(("t", 0), demand=sum(inst.need))
    for s in range(len(inst.senders)):
        for h in range(len(inst.helpers)):
            if inst.hops[s][h] is not None:
                g.add_edge(("s", s), ("h", h), capacity=inst.need[s], weight=inst.hops[s][h])
    try:
        flow = nx.network_simplex(g)[1]
    except nx.NetworkXUnfeasible:
        return None
    return {(node[1], head[1]): int(v) for node, out in flow.items() if node[0] == "s"
            for head, v in out.items() if v > 0}
