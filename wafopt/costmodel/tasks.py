"""The task graph of one training iteration of a plan: what the simulator reads.

`wafopt.costmodel.plan.plan_tasks(scenario, plan)` builds it (`wafopt.costmodel.assemble`);
the evaluator takes the longest path of the same graph, the simulator (`wafopt.simulate`)
replays it.

Units: seconds, bytes, FLOPs; dies are (row, col); a link is a directed pair of neighbour dies.

The 1F1B task graph (the analytic iteration time is its longest path with the `analytic_s`
durations; the simulator with contention off replays exactly this graph):

- Stage i (0-based of p) of replica r runs micro-batches k = 0..m-1 in Megatron's 1F1B order:
  warm-up forwards F_0..F_{w-1} with w = min(p-1-i, m); steady state F_{w+j}, B_j for
  j = 0..m-w-1; cool-down B_{m-w}..B_{m-1}. A stage runs one task at a time; its TP dies work in
  lockstep, so a task occupies all of them.
- F(r,i,k) = the `forward` steps in order; B(r,i,k) = the `recompute` steps, then the `backward`
  steps. Steps inside a task run one after the other (TP collectives are on the critical path).
- F(r,i,k) also waits for `send_forward` of stage i-1 for micro-batch k, which starts when
  F(r,i-1,k) ends; B(r,i,k) also waits for `send_backward` of stage i+1 for micro-batch k, which
  starts when B(r,i+1,k) ends. Sends do not occupy the sending stage.
- When stage i has finished its last backward in every replica, `dp_allreduce[i]` runs (if any),
  then the stage's optimizer step (`optimizer_s`, on every die of stage i in every replica).
- The iteration ends with the last task.

Memory per die over time (`die_capacity` is the limit; exceeding it is an error):
`state_bytes` always; `activation_bytes` for every micro-batch from the start of its forward to
the end of its backward; `transient_bytes` during each backward. An `Offload` moves
`bytes_per_microbatch` of each in-flight micro-batch's activations from the sender into the
helper's DRAM over the same interval (the share streams to the helper as it is produced, in place
of the DRAM write it replaces; WATOS Sec. IV-C.2); the transfers themselves are `Comm` steps in
the sender stage's forward (store) and recompute/backward (load) phases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

Die = tuple[int, int]
Link = tuple[Die, Die]


@dataclass(frozen=True)
class RoutedFlow:
    src: Die
    dst: Die
    bytes: float                 # bytes carried in one occurrence of its communication
    route: tuple[Link, ...]      # directed links in order from src to dst (empty if src == dst)


@dataclass(frozen=True)
class Comm:
    """A communication phase: its flows start together; it ends when the last one has arrived."""
    name: str                    # e.g. "tp_allreduce", "p2p_forward", "offload_store", "dp_allreduce"
    flows: tuple[RoutedFlow, ...]
    latency_s: float             # fixed alpha part (hops x link latency x sequential ring steps), seconds
    analytic_s: float            # the analytic model's duration of this phase, seconds (used with contention off)
    hidden_s: float = 0.0        # seconds of the transfer overlapped with work already counted elsewhere:
    #                              the phase lasts max(0, latency_s + transfer - hidden_s)


@dataclass(frozen=True)
class Compute:
    name: str                    # e.g. "attention", "mlp", "lm_head", "recompute"
    seconds: float               # on every die of the stage
    flops: float = 0.0           # per die


Step = Union[Compute, Comm]


@dataclass(frozen=True)
class Block:
    """`steps` run in order, the whole sequence `repeat` times (e.g. one block per layer kind)."""
    steps: tuple[Step, ...]
    repeat: int = 1


@dataclass(frozen=True)
class StageTasks:
    index: int                   # stage i, 0-based
    replica: int                 # data-parallel replica r
    dies: tuple[Die, ...]        # the TP group, in ring order
    forward: tuple[Block, ...]   # one micro-batch's forward pass
    recompute: tuple[Block, ...]  # one micro-batch's recomputation, run at the start of its backward
    backward: tuple[Block, ...]  # one micro-batch's backward pass
    send_forward: Comm | None    # activations to stage i+1 per micro-batch (None on the last stage)
    send_backward: Comm | None   # activation gradients to stage i-1 per micro-batch (None on stage 0)
    optimizer_s: float           # optimizer step on each die after the gradients are reduced, seconds
    state_bytes: float           # per die: weights, gradients, optimizer states
    activation_bytes: float      # per die per in-flight micro-batch, before offloading
    transient_bytes: float       # per die during a backward: recomputed activations, gradients, workspace


@dataclass(frozen=True)
class Offload:
    sender: Die
    helper: Die
    bytes_per_microbatch: float  # of each in-flight micro-batch of the sender's stage


@dataclass(frozen=True)
class PlanTasks:
    microbatches: int            # m per pipeline replica
    pipelines: tuple[tuple[StageTasks, ...], ...]   # [replica][stage]
    dp_allreduce: tuple[Comm | None, ...]           # per stage: gradient all-reduce over replicas (None if dp = 1)
    offloads: tuple[Offload, ...]
    die_capacity: float          # DRAM bytes per die
    link_bandwidth: float        # bytes/s per directed link: the capacity flows share
    die_flops: float             # peak FLOP/s per die
    interleave: int = 1          # chunks per stage (interleaved 1F1B): stage passes describe one chunk

    @property
    def pp(self) -> int:
        return len(self.pipelines[0])

    @property
    def dp(self) -> int:
        return len(self.pipelines)


def analytic_seconds(blocks: tuple[Block, ...]) -> float:
    """Duration of a phase with every communication at its analytic duration."""
    return sum(block.repeat * sum(step.seconds if isinstance(step, Compute) else step.analytic_s
                                  for step in block.steps) for block in blocks)


def compute_seconds(blocks: tuple[Block, ...]) -> float:
    """Compute time of a phase (communication excluded)."""
    return sum(block.repeat * sum(step.seconds for step in block.steps if isinstance(step, Compute))
               for block in blocks)
