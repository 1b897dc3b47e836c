"""Mem_pair DRAM allocation (problem: mem_pair), WATOS section IV-C.2 / Alg. 3 and Eq. 2 pair term.

```yaml
problem: mem_pair
mesh: {rows: 4, cols: 4, faulty_dies: [], faulty_links: []}
senders: [{die: [0, 0], overflow: 10.0}, {die: [0, 1], overflow: 4.0}]
helpers: [{die: [3, 3], spare: 8.0}, {die: [2, 3], spare: 9.0}]
chunk: 1.0                    # allocation granularity
max_helpers_per_sender: 2     # optional
```
Sender s needs ceil(overflow_s / chunk) chunks placed; helper h takes at most
floor(spare_h / chunk). Cost: chunks * chunk * hops in the healthy mesh. See docs/mem_pair.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from wafopt.core.errors import InstanceError
from wafopt.costmodel.plan import die_memory
from wafopt.costmodel.plan_layout import placement_choice
from wafopt.hardware.mesh import UNREACHABLE, Die, Mesh

OBJECTIVE = "offloaded volume x hops (instance volume units x hops)"

ROUNDING = 1e-9  # overflow/chunk and spare/chunk within this of an integer count as that integer


@dataclass(frozen=True)
class Sender:
    die: Die
    overflow: float


@dataclass(frozen=True)
class Helper:
    die: Die
    spare: float


@dataclass(frozen=True)
class MemPairInstance:
    mesh: Mesh
    senders: tuple[Sender, ...]
    helpers: tuple[Helper, ...]
    chunk: float
    max_helpers_per_sender: int | None = None

    @cached_property
    def need(self) -> list[int]:
        """Chunks each sender must place: ceil(overflow / chunk)."""
        return [math.ceil(s.overflow / self.chunk - ROUNDING) for s in self.senders]

    @cached_property
    def room(self) -> list[int]:
        """Chunks each helper can take: floor(spare / chunk)."""
        return [math.floor(h.spare / self.chunk + ROUNDING) for h in self.helpers]

    @cached_property
    def hops(self) -> list[list[int | None]]:
        """hops[s][h] in the healthy mesh; None when the dies are not connected."""
        dist = self.mesh.distance_matrix
        out = []
        for s in self.senders:
            row = []
            for h in self.helpers:
                d = int(dist[self.mesh.index(s.die), self.mesh.index(h.die)])
                row.append(None if d == UNREACHABLE else d)
            out.append(row)
        return out

    def infeasibility(self) -> str | None:
        """A reason no allocation exists that does not need a solver, else None."""
        total_over = sum(s.overflow for s in self.senders)
        total_spare = sum(h.spare for h in self.helpers)
        need, room = sum(self.need), sum(self.room)
        if need > room:
            return (f"infeasible: total overflow {total_over:.6g} ({need} chunks of {self.chunk:g}) "
                    f"exceeds total spare {total_spare:.6g} ({room} chunks)")
        for s, sender in enumerate(self.senders):
            reach = sum(self.room[h] for h in range(len(self.helpers)) if self.hops[s][h] is not None)
            if reach < self.need[s]:
                return (f"infeasible: sender {list(sender.die)} needs {self.need[s]} chunks but the helpers "
                        f"it can reach have {reach}")
            K = self.max_helpers_per_sender
            if K is not None and self.need[s] > 0:
                top = sorted((self.room[h] for h in range(len(self.helpers)) if self.hops[s][h] is not None),
                             reverse=True)[:K]
                if sum(top) < self.need[s]:
                    return (f"infeasible: sender {list(sender.die)} needs {self.need[s]} chunks but its "
                            f"{K} largest reachable helpers have {sum(top)}")
        return None


def generate(seed: int, rows: int, cols: int, senders: int, helpers: int, chunk: float = 1.0,
             max_chunks: int = 12, slack: float = 1.15, faulty_dies: int = 0,
             max_helpers_per_sender: int | None = None) -> MemPairInstance:
    """A reproducible random instance on a rows x cols mesh (senders + helpers + faults <= dies).

    Overflows are whole chunks in 1..max_chunks; spares are integers scaled so that the total
    spare is `slack` times the total overflow.
    """
    rng = np.random.default_rng(seed)
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    order = rng.permutation(len(cells))
    faults = [cells[k] for k in order[:faulty_dies]]
    mesh = Mesh.build(rows, cols, faults)
    free = [cells[k] for k in order[faulty_dies:]]
    if senders + helpers > len(free):
        raise InstanceError(f"{senders} senders + {helpers} helpers do not fit {len(free)} healthy dies")
    over = rng.integers(1, max_chunks + 1, size=senders) * chunk
    weights = rng.uniform(0.5, 1.5, size=helpers)
    spare = np.floor(weights / weights.sum() * over.sum() * slack / chunk) * chunk + chunk
    return MemPairInstance(mesh, tuple(Sender(free[k], float(over[k])) for k in range(senders)),
                           tuple(Helper(free[senders + k], float(spare[k])) for k in range(helpers)),
                           float(chunk), max_helpers_per_sender)


CHUNKS_PER_SENDER = 64  # scenario kernels: the largest overflow split into this many chunks


def from_scenario(scenario, placement: dict, recompute: list[list[int]]) -> MemPairInstance:
    """The Mem_pair kernel of a plan's placement and recomputation (x over all workload units):
    dies over the DRAM capacity are Senders (their overflow), every other healthy die of the
    wafer, idle ones included, a Helper (its spare). Pure: the recompute decision is an input.

    Chunks are small enough that rounding (up per sender, down per helper) keeps a fit that the
    pooled recomputation left with little slack, and at most 1/CHUNKS_PER_SENDER of an overflow.
    """
    senders, helpers = sender_helper_split(scenario, placement, recompute)
    mesh = scenario.mesh()
    biggest = max((o for _, o in senders), default=1.0)
    slack = sum(sp for _, sp in helpers) - sum(o for _, o in senders)
    chunk = min(biggest / CHUNKS_PER_SENDER, max(slack, 0.0) / (len(senders) + len(helpers) + 1))
    chunk = float(max(1, math.floor(chunk)))
    return MemPairInstance(mesh, tuple(Sender(d, float(o)) for d, o in senders),
                           tuple(Helper(d, float(sp)) for d, sp in helpers), chunk)


def sender_helper_split(scenario, placement: dict, x) -> tuple[list, list]:
    """(die, overflow) of every Sender and (die, spare) of every Helper, in bytes."""
    work = scenario.workload(placement_choice(placement))
    cap = scenario.wafer.dram_capacity
    pipelines = [[[tuple(d) for d in dies] for dies in pipe] for pipe in placement["pipelines"]]
    used, movable, _ = die_memory(work.stages, pipelines, x)
    senders = [(d, m - cap) for d, m in used.items() if m > cap]
    for d, over in senders:
        if over > movable[d]:      # the evaluator's rule: a die offloads only activation checkpoints
            raise InstanceError(f"{scenario.wafer.device} {list(d)} is {over / 1e9:.3f} GB over its DRAM but holds only "
                                f"{movable[d] / 1e9:.3f} GB of checkpoints, the only bytes offloading moves")
    helpers = [(d, cap - used.get(d, 0.0)) for d in scenario.mesh().healthy_dies if used.get(d, 0.0) < cap]
    return senders, helpers


def summary(inst: MemPairInstance) -> dict:
    return {"mesh": f"{inst.mesh.rows} x {inst.mesh.cols}", "faulty_dies": len(inst.mesh.faulty_dies),
            "faulty_links": len(inst.mesh.faulty_links), "senders": len(inst.senders),
            "helpers": len(inst.helpers), "chunk": inst.chunk,
            "chunks_needed": sum(inst.need), "chunks_room": sum(inst.room),
            "max_helpers_per_sender": inst.max_helpers_per_sender,
            "infeasibility": inst.infeasibility()}
