"""Branch and bound for stage placement (WATOS Eq. 2), exact for the full objective.

Nodes fix stages to slots one at a time; a node's bound (Gilmore-Lawler over the free stages plus
the exact cost and routing-conflict penalty of the fixed ones) and the symmetry rule live in
wafopt.problems.placement.branch_bound, which also re-derives the certificate. Here: the search.

- Best first, in batches: the open nodes are kept per depth; the depth holding the least open
  bound gives up to BATCH of its best nodes (within BATCH_SPREAD of its best bound), whose children
  are bounded together (numpy over the batch). Beyond open_cap() open nodes (as many as half the
  memory available at the start holds) the search goes depth first (BATCH siblings at a time), so
  memory stays bounded.
- Strong branching (with sparse flows, see SPARSE): a node tries the CANDIDATES free stages with
  the most weight to the fixed stages (then the most weight overall; at the root the heaviest
  stage, as in the MILP's symmetry breaking) on the cheap bounds of their children, and branches
  on the one leaving the fewest children below the incumbent, over one free slot per orbit of the
  grid symmetries that fix the used slots.
- A child is bounded in three steps, each only if the last cannot prune it: a screen shared by all
  children of a node, the row-minimum bound of its assignment problem, then the assignment problem
  itself (compiled Hungarian method), with sparse flows solved only for children within LAZY_MARGIN of the tree's
  least bound; the others stay open with their row-minimum bound (`settle` gives them the full
  one when the best-first search reaches them, which it rarely does).
- Every solved assignment problem completes its child into a plan; the best completion of each
  batch is improved by exact swap descent on the base objective and offered as incumbent (after
  DESCENT_PATIENCE descents in a row that found nothing better, only a completion better than every
  earlier one is descended from: on a sparse pipeline with an optimal start, 900 descents of
  0.5 ms found nothing). A warm start (`options.warm_start`, e.g. a local-search plan) is the first incumbent.
- A child's bound is at least its parent's. A child whose bound cannot beat the incumbent is
  pruned (with integer data: cannot reach incumbent - 1).
- Integer tiles whose root PB is above Gilmore-Lawler (TileSpace.qpb_pays): nodes with at least
  three free stages also get their convex quadratic programming bound (QPB after NODE_FW_STEPS
  pairwise Frank-Wolfe steps, theta refitted after THETA_STEPS, proven in floats by
  TileSpace.qpb_children_batch) when they are popped (`settle`, a batch of one depth at a time):
  most kept children are never popped. The same QPB with each free stage fixed to each free slot
  bounds the node's children (its assignment problem's reduced costs); the node branches on the
  stage they favour (plan_branches) and its children keep these bounds, only the least of them
  also solving its assignment problem for a completion. Down to STRONG_DEPTH, while within a
  budget (strong_wanted), a node instead gives every candidate branch's children their own QPB
  and branches on the stage whose children these leave fewest below the incumbent
  (strong_branch); its children keep their QPBs. QPB stays on at a depth while a trial of
  QPB_TRIAL popped nodes finds it QPB_GAIN above the bound the node has without it at least
  QPB_KEEP of the time. Nothing is stored: the checker computes the QPB of every node that needs
  it, with the same deterministic steps.
- Every tile shape is searched in turn with the same incumbent; the bound is the least over them.
- With workers (`options.workers` > 1), subtrees in waves: the search runs here until
  4 x WAVE_GROUPS nodes are open; then each wave deals the WAVE_GROUPS x WAVE_ROOTS lowest open
  nodes (by bound, round robin; the others wait here) into WAVE_GROUPS groups, each searched best
  first on a forked process for WAVE_EXPANSIONS expansions (batches) from the wave's incumbent.
  The groups send back what they did to their subtrees, which is replayed into this process's
  tree in group order, with the best incumbent (the first group's on a tie). Since
  the groups depend on neither timing nor the number of processes, every run with workers gives
  the same tree, plan and certificate (`waves_in_process` runs the same waves here); the optimum
  and its proof are those of the search without waves, the plan among equal optima may differ.
On a time limit or Ctrl-C the open nodes are the frontier: the bound is the least over the leaves of
the tree (open, pruned or complete), and the tree is written as the certificate (kind
"bnb-frontier", with the lowest open nodes listed; a tree over MAX_TREE_TOKENS, or whose packed
text passes TREE_TEXT_BYTES, is cut at the largest bound at which it fits, TileSearch.cut_for).
"""

from __future__ import annotations

import heapq
import itertools
import math
import multiprocessing
import time
from dataclasses import dataclass, field

import numpy as np
from wafopt.models.placement_qpb import QPB_STEPS, qpb_search

from wafopt.core.budget import SolveOptions
from wafopt.core.machine import available_memory
from wafopt.core.numeric import at_most, tolerance
from wafopt.core.parking import park
from wafopt.core.result import CERTIFICATE, Bound, MethodResult
from wafopt.core.workers import WorkerPool, one_blas_thread
from wafopt.problems.placement.branch_bound import (
    MAX_TREE_TOKENS,
    TREE_TEXT_BYTES,
    TileSpace,
    encode_tree,
    free_slots,
    root_bound,
)
from wafopt.problems.placement.instance import PlacementInstance
from wafopt.problems.placement.projected import (
    MAX_SLOTS,
    bound_at_point,
    spectral,
    tile_matrices,
)
from wafopt.solvers.reported import expect_parts, report

FRONTIER_LISTED = 100      # open nodes listed (with their bounds) in the certificate
INTERRUPTED_TREE_TOKENS = 400_000   # the certificate's tree after Ctrl-C (cut and written at about 0.9 s a million)
WRITE_S_TOKEN = 7e-7       # seconds to write the certificate and the solution per tree token, and per
WRITE_S_NODE = 4e-6        # expanded node when the tree must be cut (cut_for; measured on nug20/21: about
                           # 6.4e-7 a token at 6 and 16 million): the search stops this much before its deadline,
WRITE_SAFETY = 2.0         # ... times this (nug22 after an hour on a slower machine: 29 s for an estimated 20 s)
MAX_OPEN: int | None = None   # open nodes kept best first (None: open_cap()); beyond them the search goes
                           # depth first, BATCH siblings at a time
OPEN_NODE_BYTES = 1100     # the process's memory per open node, its share of the tree included (peaks of
                           # 1.6 GB at 1.27 million open on nug20, 4.1 and 4.7 GB at 4 and 5.6 million on nug22)
OPEN_MEMORY_SHARE = 0.5    # of the memory available when the search starts, for its open nodes
MIN_OPEN = 100_000         # open nodes kept best first however little memory is available
UNKNOWN_MEMORY_OPEN = 4_000_000   # ... where the available memory is unknown
BATCH = 32                 # open nodes of one depth bounded together (numpy over the batch)
BATCH_SPREAD = 1.0         # ... whose bounds are at most this above the level's best
LAZY_MARGIN = 2.0          # children this far above the tree's bound keep their row-minimum bound
CANDIDATES = 2             # stages a node tries to branch on (strong branching)
DESCENT_PATIENCE = 64      # descents in a row from completions that may leave the incumbent as it was;
                           # after that, only from a completion better than every earlier one
SPARSE = 0.25              # strong branching and lazy assignment problems only up to this share of
                           # stage pairs with flow (pipelines; on dense QAPs they cost more than they save)
PROGRESS_EVERY_S = 1.0
ROOT_QPB_SHARE = 0.1       # of the time limit, at most, for the root's convex quadratic programming bound
QPB_TRIAL = 200            # nodes of one depth given their QPB before judging it:
QPB_KEEP = 0.5             # ... it stays on at that depth while at least this share is above the bound
                           # the node has without it (Gilmore-Lawler or its parent's)
QPB_GAIN = 0.005           # ... by this share of the incumbent
STRONG_DEPTH = 2           # nodes down to this depth choose their branch by their children's own QPBs
STRONG_SHARE = 0.2         # ... while those QPBs stay within this share of the other QPBs computed
STRONG_PER_S = 50          # ... plus this many a second of the time limit (without one, all it wants: it
                           # pays over a long search, nug20's proof, and costs a short one on nug30)
WAVE_GROUPS = 4            # with workers: open nodes dealt into this many groups per wave (fixed, so
                           # the answer is the same for any number of workers)
WAVE_EXPANSIONS = 200      # expansions of one group in one wave
WAVE_ROOTS = BATCH * WAVE_EXPANSIONS   # open nodes dealt to one group: as many as it can pop; the
                           # others wait here (shipping the whole open set each wave costs more than the wave)
POLL_S = 0.1               # how often a wave's wait checks for Ctrl-C
REPLAY_POLL = 16           # expansions replayed between two looks at the wave's workers


@dataclass
class Incumbent:
    value: float = math.inf
    plan: dict | None = None


@dataclass
class TileSearch:
    """The search tree of one tile shape."""

    space: TileSpace
    stages: list = field(default_factory=list)     # node id -> fixed stages (in fixing order)
    slots: list = field(default_factory=list)      # node id -> their slots
    branch: dict = field(default_factory=dict)     # expanded node id -> stage it branches on
    children: dict = field(default_factory=dict)   # expanded node id -> its kids' node ids in slot order (-1: pruned)
    bound: dict = field(default_factory=dict)      # expanded node id -> its bound
    levels: dict = field(default_factory=dict)     # depth -> heap of open (bound, node id)
    dive: list = field(default_factory=list)       # depth-first stack (bound, -depth, id), once open_cap() are open
    lazy: set = field(default_factory=set)         # open nodes kept with a weaker bound than their full one
    qpb_due: set = field(default_factory=set)      # open nodes whose QPB waits for their pop
    planned: dict = field(default_factory=dict)    # open node id -> (branch stage, its kids' bounds from the node's QPB)
    closed_least: float = math.inf                 # least bound of a pruned or complete leaf
    away: float = math.inf                         # least bound of the open nodes dealt out in a wave
    queued: int = 0                                # open nodes in `levels`
    expanded: int = 0
    bounded: int = 0                               # children bounded

    def flags(self, node: int) -> int:
        """What an open node still waits for: 1 its assignment problem (lazy), 2 its QPB (qpb_due)."""
        return (node in self.lazy) | 2 * (node in self.qpb_due)

    def set_flags(self, node: int, flags: int) -> None:
        for wanted, kept in ((flags & 1, self.lazy), (flags & 2, self.qpb_due)):
            if wanted:
                kept.add(node)
            else:
                kept.discard(node)

    def open_entries(self) -> list[tuple[float, int]]:
        return [e for heap in self.levels.values() for e in heap] + [(b, node) for b, _, node in self.dive]

    def lowest(self, count: int) -> list[tuple[float, int]]:
        """The `count` open nodes of least (bound, id), ascending, reading only as much of each heap."""
        dive = heapq.nsmallest(count, ((b, node) for b, _, node in self.dive))
        return list(itertools.islice(heapq.merge(dive, *map(_ascending, self.levels.values())), count))

    def least(self) -> float:
        """The bound the tree proves so far: the least over its leaves (open, pruned, complete)."""
        return min([self.closed_least, self.away] + [heap[0][0] for heap in self.levels.values() if heap]
                   + [b for b, _, _ in self.dive])

    def pop_lowest(self, count: int) -> list[tuple[float, int]]:
        """Take the `count` open nodes of least (bound, id) out of the tree (the depth-first stack
        first joins the heaps), ascending."""
        for bound, _, node in self.dive:
            heapq.heappush(self.levels.setdefault(len(self.stages[node]), []), (bound, node))
        self.queued += len(self.dive)
        self.dive = []
        taken = self.lowest(count)
        for _, node in taken:        # each heap's share of them is its smallest entries
            heapq.heappop(self.levels[len(self.stages[node])])
        self.queued -= len(taken)
        return taken

    def pending(self) -> int:
        return self.queued + len(self.dive)

    def writing_s(self) -> float:
        """How long writing the certificate of the tree may take (WRITE_S_TOKEN, WRITE_S_NODE, with
        WRITE_SAFETY for a slower machine)."""
        tokens = 1 + self.bounded
        if tokens <= MAX_TREE_TOKENS:
            return WRITE_SAFETY * WRITE_S_TOKEN * tokens
        return WRITE_SAFETY * (WRITE_S_TOKEN * MAX_TREE_TOKENS + WRITE_S_NODE * self.expanded)

    def best_level(self) -> int | None:
        """The depth whose best open node has the least bound (the deeper one on a tie)."""
        tops = [(heap[0][0], -depth) for depth, heap in self.levels.items() if heap]
        return -min(tops)[1] if tops else None

    def tokens(self, cut: float = math.inf) -> list[int]:
        """The tree in preorder: an expanded node's branch stage then its children; n for a leaf.
        An expanded node whose bound (or an ancestor's) is at least `cut` is written as a leaf."""
        n = self.space.n
        out: list[int] = []
        stack = [0]
        while stack:
            node = stack.pop()
            if node not in self.branch or self.bound[node] >= cut:
                out.append(n)
                continue
            out.append(self.branch[node])
            stack.extend(reversed(self.children[node]))
        return out

    def cut_for(self, limit: int) -> float:
        """The largest bound `cut` at which tokens(cut) has at most `limit` tokens (inf: the whole tree
        fits). A node stays expanded while its bound and its ancestors' are below the cut, so the
        expanded nodes are taken by their largest bound on the path, least first (a child's is at
        least its parent's), until the next one's kids do not fit: only the part below the cut is read."""
        if not self.branch or 1 + self.bounded <= limit:     # every kid of an expanded node is a token
            return math.inf
        total, heap = 1, [(self.bound[0], 0)]
        while heap:
            key, node = heapq.heappop(heap)
            kids = self.children[node]
            if total + len(kids) > limit:      # the nodes at this key and above become leaves
                return key
            total += len(kids)
            for child in kids:
                if child in self.branch:
                    heapq.heappush(heap, (max(key, self.bound[child]), child))
        return math.inf

    def certificate(self, threshold: float, limit: int = MAX_TREE_TOKENS) -> dict:
        """The tree (if it has more than `limit` nodes, cut at the largest bound at which it fits:
        the expanded nodes at or above the cut become leaves with their own bounds), its least leaf
        bound, and the lowest open nodes. Pruned leaves are at least the final `threshold` (the
        incumbent only improves)."""
        frontier = [[[[int(i), int(k)] for i, k in zip(self.stages[node], self.slots[node])], float(b)]
                    for b, node in self.lowest(FRONTIER_LISTED)]
        cut = self.cut_for(limit)
        tokens = self.tokens(cut)
        tree = encode_tree(tokens)
        while len(tree) > TREE_TEXT_BYTES:    # a tree that packs badly is cut further, to fit the file limit
            cut = self.cut_for(int(0.9 * len(tokens) * TREE_TEXT_BYTES / len(tree)))
            tokens = self.tokens(cut)
            tree = encode_tree(tokens)
        bound = min(self.least(), cut)
        return {"bound": float(bound), "tree": tree, "open_nodes": self.pending(),
                "frontier": frontier,
                **({"cut_at_bound": cut} if math.isfinite(cut) else {})}


def open_cap() -> int:
    """How many open nodes the search keeps best first: MAX_OPEN if set, else as many as
    OPEN_MEMORY_SHARE of the memory available now holds at OPEN_NODE_BYTES each (at least MIN_OPEN)."""
    if MAX_OPEN is not None:
        return MAX_OPEN
    available = available_memory()
    if available is None:
        return UNKNOWN_MEMORY_OPEN
    return max(MIN_OPEN, int(OPEN_MEMORY_SHARE * available / OPEN_NODE_BYTES))


def _ascending(heap: list):
    """A heap's entries in ascending order, without changing it (a heap of the heap's positions)."""
    frontier = [(heap[0], 0)] if heap else []
    while frontier:
        entry, i = heapq.heappop(frontier)
        yield entry
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(heap):
                heapq.heappush(frontier, (heap[child], child))


def _prune_threshold(space: TileSpace, upper: float) -> float:
    """A bound at or above which a node holds no plan better than the incumbent `upper` under the
    tolerance rule: `upper` itself, or with integer objectives just above upper - 1 (its rounded
    value is then upper)."""
    if not math.isfinite(upper):
        return math.inf
    if space.integral:
        value = upper - 1.0 + 2 * tolerance(upper)
        if at_most(upper, space.rounded(value)):
            return value
    return upper


def branch_stages(space: TileSpace, stages: np.ndarray, total: np.ndarray, count: int = 1) -> np.ndarray:
    """For each node (row of fixed stages), up to `count` free stages by most weight to the fixed
    stages, then most weight overall (at the root: the heaviest stage, whose slot the grid
    symmetries restrict most); a node without a stage tied to its fixed ones gets one. (B, count)"""
    B = stages.shape[0]
    fixed = np.zeros((B, space.n), dtype=bool)
    fixed[np.arange(B)[:, None], stages] = True
    to_fixed = np.where(fixed, -np.inf, fixed.astype(float) @ space.C)
    order = np.lexsort((-np.broadcast_to(total, to_fixed.shape), -to_fixed), axis=1)[:, :count]
    tied = np.take_along_axis(to_fixed, order, axis=1) > 0
    tied[:, 0] = True
    return np.where(tied, order, order[:, :1])


class BranchAndBound:
    def __init__(self, inst: PlacementInstance, options: SolveOptions):
        self.inst, self.options = inst, options
        self.best = Incumbent()
        self.threshold = math.inf           # children bounded at or above it are pruned
        self.log: list | None = None        # a wave task's record of its tree's changes
        self.waves_run = 0
        self.wave_setup_s = 0.0             # seconds the last wave took to deal its nodes into groups
        self.replay_s = 0.0                 # ... and to replay its groups here
        self.qpb_depth = 0                  # children down to this depth get their QPB when popped
        self.qpb_counts: dict = {}          # depth -> [QPBs computed, clearly above the bound without it, pruned by it]
        self.qpb_off: frozenset = frozenset()  # depths where QPB did not pay in an earlier wave
        self.qpb_before = 0                 # QPBs computed before this process's qpb_counts (a wave group)
        self.strong = [0, 0]                # strong branching: [nodes, their children's QPBs]
        self.strong_free = math.inf if options.time_limit is None else STRONG_PER_S * options.time_limit
        self.laps = 0                       # assignment problems solved for children's bounds
        self.failed_descents = 0            # descents in a row that left the incumbent as it was
        self.best_start = math.inf          # the best completion descended from (or passed over)
        self.max_open = open_cap()          # open nodes kept best first
        self.started = time.monotonic()
        self._last_progress = 0.0

    # --- incumbent -----------------------------------------------------------------------------
    def better(self, value: float) -> bool:
        """Better than the incumbent beyond the tolerance rule."""
        return value < self.best.value and (math.isinf(self.best.value) or not at_most(self.best.value, value))

    def offer(self, space: TileSpace, slot_of_stage: np.ndarray, value: float | None = None) -> None:
        fit = space.fit
        if value is None:
            value = fit.one(slot_of_stage)
        if self.better(value):
            self.best = Incumbent(float(value), space.layout.plan(slot_of_stage))
            self.options.incumbent(self.best.plan)

    def improve(self, space: TileSpace, slot_of_stage: np.ndarray) -> None:
        """Exact swap descent on the base objective from a completion (kept if the full objective
        improves on the incumbent)."""
        fit = space.fit
        used = set(int(k) for k in slot_of_stage)
        perm = np.array(list(slot_of_stage) + [k for k in range(space.m) if k not in used])
        perm = fit.base_descent(perm, stop=self.options.stopped)
        before = self.best.value
        self.offer(space, perm[:space.n])
        self.failed_descents = 0 if self.best.value < before else self.failed_descents + 1

    def warm_start(self, spaces: list[TileSpace]) -> None:
        plan = self.options.warm_start
        if not plan:
            return
        tile = tuple(plan.get("tile", self.inst.tiles[0]))
        for space in spaces:
            if space.layout.tile == tile:
                try:
                    slots = np.array([space.layout.index[tuple(s)] for s in plan["assignment"]])
                except (KeyError, TypeError):
                    return
                if len(slots) == space.n and len(set(slots.tolist())) == space.n:
                    self.offer(space, slots)
                return

    # --- one tile shape ------------------------------------------------------------------------
    def search(self, space: TileSpace, deadline: float | None, closed: bool = False, index: int = 0,
               pool=None) -> TileSearch:
        """The tree of one tile shape (closed: the root's QPB already reaches the incumbent, the
        tree is the root alone), in this process or, with a pool, in waves."""
        tree = TileSearch(space)
        tree.stages.append(())
        tree.slots.append(())
        self.waves_run = 0
        self.qpb_depth, self.qpb_counts, self.laps, self.strong = node_qpb_depth(space), {}, 0, [0, 0]
        if closed:
            tree.closed_least = root_bound(space)
            return tree
        tree.levels[0] = [(root_bound(space), 0)]
        tree.queued = 1
        self.threshold = _prune_threshold(space, self.best.value)
        if pool is None:
            self.run(space, tree, deadline)
        else:
            self.waves(space, tree, index, deadline, pool)
        return tree

    def run(self, space: TileSpace, tree: TileSearch, deadline: float | None, until_open: int | None = None,
            expansions: int | None = None) -> None:
        """Search the tree's open nodes best first until none is left, the deadline, `until_open`
        open nodes or `expansions` expansions."""
        total = space.C.sum(axis=1)
        while tree.pending():
            if self.options.stopped() or (deadline is not None and time.monotonic() >= deadline - tree.writing_s()):
                break
            if (until_open is not None and tree.pending() >= until_open) or expansions == 0:
                break
            if tree.dive:
                nodes, depth = [], tree.dive[-1][1]     # the top's siblings, bounded in one batch
                while tree.dive and len(nodes) < BATCH and tree.dive[-1][1] == depth:
                    bound, _, node = tree.dive.pop()
                    if self.still_open(tree, node, bound):
                        nodes.append(node)
                nodes = self.settle(space, tree, nodes)
            else:
                heap = tree.levels[tree.best_level()]
                nodes, within = [], heap[0][0] + BATCH_SPREAD     # not the level's far worse nodes
                while heap and len(nodes) < BATCH and heap[0][0] <= within:
                    bound, node = heapq.heappop(heap)
                    tree.queued -= 1
                    if self.still_open(tree, node, bound):
                        nodes.append(node)
                nodes = self.settle(space, tree, nodes)
            if nodes:
                self.expand(space, tree, nodes, total)
                expansions = None if expansions is None else expansions - 1
            self._progress(space, tree)

    def still_open(self, tree: TileSearch, node: int, bound: float) -> bool:
        """A node popped with a bound the incumbent has reached since is a pruned leaf."""
        if bound < self.threshold:
            tree.bound[node] = bound
            return True
        self.close(tree, node, bound)
        return False

    def close(self, tree: TileSearch, node: int, bound: float) -> None:
        """An open node the incumbent prunes becomes a leaf."""
        tree.closed_least = min(tree.closed_least, bound)
        tree.planned.pop(node, None)
        if self.log is not None:
            self.log.append(("close", node, bound))

    def settle(self, space: TileSpace, tree: TileSearch, nodes: list[int]) -> list[int]:
        """Of popped nodes of one depth, those to expand now: a node kept with a weaker bound first
        gets its full one (its assignment problem, then its QPB); pruned by
        it, it is a leaf; raised by it, it goes back to the heap."""
        lazy = [node for node in nodes if node in tree.lazy]
        if lazy:
            stages = np.array([tree.stages[node] for node in lazy], dtype=int)
            slots = np.array([tree.slots[node] for node in lazy], dtype=int)
            bounds, _, _ = space.children_batch(stages[:, :-1], slots[:, :-1], stages[:, -1], slots[:, -1:], self.threshold)
            tree.lazy.difference_update(lazy)
            nodes = self._raise(tree, nodes, lazy, bounds[:, 0].tolist())
        due = [node for node in nodes if node in tree.qpb_due]
        if due:
            tree.qpb_due.difference_update(due)
            depth = len(tree.stages[due[0]])
            if self.qpb_wanted(depth):
                qpbs, below = space.qpb_children_batch([
                    (tree.stages[node][:-1], tree.slots[node][:-1], tree.stages[node][-1], tree.slots[node][-1:])
                    for node in due], fixing=True)
                qpbs = np.concatenate(qpbs)
                before = np.array([tree.bound[node] for node in due])   # Gilmore-Lawler or the parent's
                counts = self.qpb_counts.setdefault(depth, [0, 0, 0])
                counts[0] += len(due)
                counts[1] += int((qpbs > before + QPB_GAIN * abs(self.threshold)).sum())
                counts[2] += int((qpbs >= self.threshold).sum())
                open_ = np.flatnonzero(qpbs < self.threshold)
                if len(open_):
                    plans = self.plan_branches(space, [due[k] for k in open_], tree, np.stack([below[k][0] for k in open_]))
                    tree.planned.update(zip((due[k] for k in open_), plans))
                nodes = self._raise(tree, nodes, due, qpbs.tolist())
        return nodes

    def plan_branches(self, space: TileSpace, nodes: list[int], tree: TileSearch, bounds: np.ndarray) -> list:
        """The branches of open nodes of one depth from their QPB's bounds of their children (B x
        free stages x free slots): each node's free stage whose kids are least often below the
        incumbent (Anstreicher, Brixius, Goux and Linderoth 2002, Sec. 3), then as branch_stages
        (the most weight to the fixed stages, then overall: on nug16b this proves in 4 400
        expansions, where the highest sum of the kids' bounds takes 7 500), or where strong
        branching is wanted (strong_wanted) as strong_branch; (stage, its kids' bounds in kids
        order) each."""
        stages = np.array([tree.stages[node] for node in nodes], dtype=int).reshape(len(nodes), -1)
        slots = np.array([tree.slots[node] for node in nodes], dtype=int).reshape(len(nodes), -1)
        fixed = np.zeros((len(nodes), space.n), dtype=bool)
        fixed[np.arange(len(nodes))[:, None], stages] = True
        free_stages = np.nonzero(~fixed)[1].reshape(len(nodes), -1)
        to_fixed, total = fixed.astype(float) @ space.C, space.C.sum(axis=1)
        symmetric = space.symmetric(slots)
        plans = []
        for k in range(len(nodes)):
            kid_bounds, kids = bounds[k], None
            if symmetric[k]:      # one kid per orbit
                kids = space.kids(list(stages[k]), list(slots[k]))
                kid_bounds = kid_bounds[:, space.kid_columns(slots[k], kids)]
            if self.strong_wanted(stages.shape[1], kid_bounds.size):
                kids = free_slots(space.m, slots[k:k + 1])[0] if kids is None else kids
                row, kid_bounds = self.strong_branch(space, stages[k], slots[k], free_stages[k], kids, kid_bounds)
            else:
                below = (kid_bounds < self.threshold).sum(axis=1)
                row = int(np.lexsort((-total[free_stages[k]], -to_fixed[k, free_stages[k]], below))[0])
            plans.append((int(free_stages[k, row]), kid_bounds[row]))
        return plans

    def strong_wanted(self, depth: int, cost: int) -> bool:
        """Whether a popped node at `depth` branches by strong_branch, `cost` QPBs: down to
        STRONG_DEPTH, while strong branching's QPBs stay within STRONG_SHARE of the others plus
        STRONG_PER_S a second of the time limit (counts, not times: a wave's groups decide as one
        process would)."""
        if depth > STRONG_DEPTH or not math.isfinite(self.threshold):
            return False
        return self.strong[1] + cost <= STRONG_SHARE * self.qpbs_computed() + self.strong_free

    def qpbs_computed(self) -> int:
        """Node QPBs computed in the tile's tree so far (in a wave group: with those before the wave)."""
        return self.qpb_before + sum(counts[0] for counts in self.qpb_counts.values())

    def strong_branch(self, space: TileSpace, stages: np.ndarray, slots: np.ndarray, free: np.ndarray,
                      kids: np.ndarray, kid_bounds: np.ndarray) -> tuple[int, np.ndarray]:
        """Strong branching: every free stage's kids get their own QPB, and the node branches on
        the stage whose kids are least often below the incumbent, then whose squared gaps to it
        sum least (the kids' QPBs judge the branches far better than their parent's reduced costs:
        with it down to depth 2, nug15 proves in about 1 700 expansions instead of 2 610). Returns the
        stage's row and its kids' bounds, each the larger of the two (the checker computes every
        kid's QPB that its claim needs)."""
        qpbs = space.qpb_children_batch([(list(stages), list(slots), int(stage), kids) for stage in free])
        raised = np.maximum(kid_bounds, np.stack(qpbs))
        gaps = np.maximum(0.0, self.threshold - raised)
        row = int(np.lexsort((np.square(gaps).sum(axis=1), (gaps > 0).sum(axis=1)))[0])
        self.strong[0] += 1
        self.strong[1] += raised.size
        return row, raised

    def _raise(self, tree: TileSearch, nodes: list[int], settled: list[int], bounds: list[float]) -> list[int]:
        """Popped nodes given a stronger bound: pruned by it, a leaf; raised by it, back to the heap;
        `nodes` less both."""
        later = set()
        for node, bound in zip(settled, bounds):
            if bound >= self.threshold:
                self.close(tree, node, bound)
            elif bound > tree.bound[node]:
                heapq.heappush(tree.levels.setdefault(len(tree.stages[node]), []), (bound, node))
                tree.queued += 1
            else:
                continue
            later.add(node)
            del tree.bound[node]
        return [node for node in nodes if node not in later]

    def expand(self, space: TileSpace, tree: TileSearch, nodes: list[int], total: np.ndarray) -> None:
        """Expand open nodes of one depth: each branches on its stage (branch_stages) over its kids
        (TileSpace.kids); the nodes whose kids are all their free slots are bounded in one batch. The
        children's completions are offered as incumbents before any child is kept or pruned."""
        stages = np.array([tree.stages[node] for node in nodes], dtype=int).reshape(len(nodes), -1)
        slots = np.array([tree.slots[node] for node in nodes], dtype=int).reshape(len(nodes), -1)
        for node in nodes:
            tree.stages[node] = tree.slots[node] = None      # an expanded node lives on in the tree only
        sparse = np.count_nonzero(space.C) <= SPARSE * space.n * (space.n - 1)
        candidates = branch_stages(space, stages, total, CANDIDATES if sparse else 1)
        symmetric = space.symmetric(slots)
        kids = [space.kids(list(stages[k]), list(slots[k])) if symmetric[k] else None for k in range(len(nodes))]
        full = np.flatnonzero(~symmetric)
        free = free_slots(space.m, slots[full]) if len(full) else None
        for j, k in enumerate(full):
            kids[k] = free[j]
        branches = candidates[:, 0].copy()
        plans = [tree.planned.pop(node, None) for node in nodes]   # a node with a QPB: its branch and kids' bounds
        planned = np.array([plan is not None for plan in plans])
        floors = [plan[1] if plan else None for plan in plans]
        branches[planned] = [plan[0] for plan in plans if plan]
        depth = stages.shape[1] + 1      # of the children (the nodes of one batch have one depth)
        qpb_due = self.qpb_wanted(depth)
        lazy = tree.least() + LAZY_MARGIN if sparse else math.inf
        tries = (candidates != candidates[:, :1]) & ~symmetric[:, None] & ~planned[:, None]
        results, tried = {}, []
        if tries.any() and math.isfinite(self.threshold):
            # strong branching, all candidates in one batch: the stage leaving the fewest children
            # below the incumbent (then the highest least bound)
            tries[:, 0] = ~symmetric & ~planned
            node, column = np.nonzero(tries)
            bounds, exact, completions = space.children_batch(stages[node], slots[node], candidates[node, column],
                                                              np.array([kids[k] for k in node]), self.threshold, lazy)
            order = np.lexsort((-bounds.min(axis=1), (bounds < self.threshold).sum(axis=1), node))
            first = order[np.r_[True, node[order][1:] != node[order][:-1]]]
            branches[node[first]] = candidates[node[first], column[first]]
            results = {int(node[j]): (bounds[j], exact[j], completions[j]) for j in first}
            tried = completions
        rest = [k for k in range(len(nodes)) if k not in results]
        if rest:
            more = self._children(space, stages, slots, branches, kids, symmetric, floors, rest, assign_below=lazy)
            results.update(more)
            tried = list(tried) + [c for _, _, c in more.values()]
        completed = [c for row in tried for c in row if c is not None]
        self.laps += len(completed) if stages.shape[1] < space.n - 1 else 0     # the last stage needs none
        if completed:   # a completion costs at least its child's bound: only these can improve
            P = np.array(completed)
            values = space.fit(P)
            a = int(np.argmin(values))
            self.offer(space, P[a], float(values[a]))
            if self.failed_descents < DESCENT_PATIENCE or values[a] < self.best_start:
                self.improve(space, P[a])       # descent from the batch's best completion, kept if better
            self.best_start = min(self.best_start, float(values[a]))
            self.threshold = _prune_threshold(space, self.best.value)
        for k, node in enumerate(nodes):
            bounds, exact = results[k][:2]
            raised = np.maximum(bounds, tree.bound[node])     # a child's plans are among its parent's
            self.record(tree, node, list(stages[k]), list(slots[k]), int(branches[k]), kids[k], raised, exact,
                        qpb_due=qpb_due)

    def qpb_wanted(self, depth: int) -> bool:
        """Whether nodes at `depth` get their QPB when popped: down to qpb_depth, and after QPB_TRIAL
        of them only while at least QPB_KEEP of those were above the bound without it."""
        if depth > self.qpb_depth or depth in self.qpb_off:
            return False
        counts = self.qpb_counts.get(depth)
        return counts is None or counts[0] < QPB_TRIAL or counts[1] >= QPB_KEEP * counts[0]

    def _children(self, space: TileSpace, stages: np.ndarray, slots: np.ndarray, branches: np.ndarray, kids: list,
                  symmetric: np.ndarray, floors: list, todo: list, assign_below: float = math.inf) -> dict:
        """TileSpace.children_batch for the nodes `todo` branching on `branches` with their kids'
        `floors` (None: none): the nodes whose kids are all their free slots in one batch, the
        others one by one."""
        out = {}
        batch = [k for k in todo if not symmetric[k]]
        if batch:
            floor = np.array([np.full(len(kids[k]), -np.inf) if floors[k] is None else floors[k] for k in batch])
            result = space.children_batch(stages[batch], slots[batch], branches[batch], np.array([kids[k] for k in batch]),
                                          self.threshold, assign_below, floor, floor_only=True)
            for j, k in enumerate(batch):
                out[k] = (result[0][j], result[1][j], result[2][j])
        for k in todo:
            if symmetric[k]:                                   # symmetry leaves fewer kids
                out[k] = space.children(list(stages[k]), list(slots[k]), branches[k], kids[k], self.threshold,
                                        assign_below, floors[k], floor_only=True)
        return out

    def record(self, tree: TileSearch, node: int, stages: list, slots: list, branch: int, kids: np.ndarray,
               bounds: np.ndarray, exact: np.ndarray, keep: np.ndarray | None = None, enqueue: bool = True,
               qpb_due: bool = False) -> list:
        """Enter an expanded node's children in the tree: those that may hold a better plan (or
        `keep`, replaying another process's expansion) as open nodes (best first, or depth first
        beyond the open-node cap; not `enqueue`: left to the caller), the others as closed leaves; `qpb_due`:
        the kept children get their QPB when popped (settle). Returns the kept children's (bound, id)."""
        n = tree.space.n
        tree.expanded += 1
        tree.bounded += len(kids)
        tree.branch[node] = branch
        depth = len(stages) + 1
        if keep is None:
            keep = bounds < self.threshold if depth < n else np.zeros(len(kids), dtype=bool)
        if self.log is not None:
            self.log.append(("expand", node, tree.bound[node], branch, kids, bounds, exact, keep))
        if not keep.all():
            tree.closed_least = min(tree.closed_least, float(bounds[~keep].min()))
        child_stages, slots = tuple(stages) + (branch,), tuple(slots)    # one tuple for all children
        kept, ids = [], [-1] * len(kids)
        for at, k, b, full in zip(np.flatnonzero(keep).tolist(), kids[keep].tolist(), bounds[keep].tolist(),
                                  exact[keep].tolist()):
            child = len(tree.stages)
            if not full:
                tree.lazy.add(child)
            if qpb_due:
                tree.qpb_due.add(child)
            tree.stages.append(child_stages)
            tree.slots.append(slots + (k,))
            ids[at] = child
            kept.append((b, child))
        tree.children[node] = ids
        if not enqueue:
            return kept
        if tree.dive or tree.pending() + len(kept) > self.max_open:
            tree.dive.extend(sorted(((b, -depth, child) for b, child in kept), reverse=True))
        else:
            heap = tree.levels.setdefault(depth, [])
            for entry in kept:
                heapq.heappush(heap, entry)
            tree.queued += len(kept)
        return kept

    # --- subtrees in parallel ------------------------------------------------------------------
    def waves(self, space: TileSpace, tree: TileSearch, index: int, deadline: float | None, pool) -> None:
        """Search the tree in waves over a process pool (module doc)."""
        self.run(space, tree, deadline, until_open=4 * WAVE_GROUPS)
        # a wave starts only with time left for its groups beyond dealing, replaying and writing
        # (each as long as in the last wave); its groups stop in time for the replays and writing
        while tree.pending() and not self.options.stopped() and (deadline is None or time.monotonic() < deadline
                                                                   - tree.writing_s() - self.wave_setup_s - self.replay_s):
            dealing = time.monotonic()
            dive = tree.pending() > self.max_open
            entries = tree.pop_lowest(WAVE_GROUPS * WAVE_ROOTS)
            tree.away = entries[0][0] if entries else math.inf
            groups = [entries[g::WAVE_GROUPS] for g in range(WAVE_GROUPS)]
            groups = [g for g in groups if g]
            off = frozenset(d for d in range(1, self.qpb_depth + 1) if not self.qpb_wanted(d))
            stop_at = None if deadline is None else deadline - tree.writing_s() - self.replay_s
            tasks = [(index, self.best, self.threshold, stop_at, off, dive, (self.failed_descents, self.best_start),
                      (self.qpbs_computed(), self.strong[1], self.strong_free),
                      [(tree.stages[node], tree.slots[node], bound, tree.flags(node), tree.planned.get(node))
                       for bound, node in group])
                     for group in groups]
            replayed, replaying = 0, 0.0
            self.wave_setup_s = time.monotonic() - dealing
            between = (lambda: pool.wait(0)) if isinstance(pool, WorkerPool) else None
            for result in run_wave(pool, tasks, self.options):   # in group order: the same for any pool size
                group = groups[replayed]
                began = time.monotonic()
                self._replay(tree, [node for _, node in group], result, between)
                replaying += time.monotonic() - began
                value, plan = result["best"]
                if self.better(value):
                    self.best = Incumbent(value, plan)
                    self.options.incumbent(plan)
                replayed += 1
            tree.away = math.inf
            self.replay_s = replaying
            if replayed < len(groups):   # interrupted: the other groups' nodes stay open with their bounds
                self._reopen(tree, [(bound, node, tree.flags(node), tree.planned.get(node))
                                    for group in groups[replayed:] for bound, node in group])
                break
            self.threshold = _prune_threshold(space, self.best.value)
            self.waves_run += 1
            self._progress(space, tree)
        else:   # too little time left for a wave: this process searches on alone
            self.run(space, tree, deadline)

    def _replay(self, tree: TileSearch, roots: list[int], result: dict, between=None) -> None:
        """A wave task's changes entered in this tree: its nodes are numbered 0.. from `roots` in
        the order the task made them; `between()` every REPLAY_POLL expansions (the pool hands a
        finished worker its next group meanwhile)."""
        ids = list(roots)
        log = result["log"]
        tree.closed_least = min(tree.closed_least, log["closed_least"])
        self.laps += result["laps"]
        failed, start = result["descents"]
        self.failed_descents, self.best_start = min(self.failed_descents, failed), min(self.best_start, start)
        for depth, counts in result["qpb"].items():
            mine = self.qpb_counts.setdefault(depth, [0, 0, 0])
            mine[:] = [a + b for a, b in zip(mine, counts)]
        self.strong = [a + b for a, b in zip(self.strong, result["strong"])]
        ends = np.cumsum(log["sizes"])
        for e, (local, bound, branch) in enumerate(zip(log["node"].tolist(), log["bound"].tolist(),
                                                       log["branch"].tolist())):
            part = slice(ends[e] - log["sizes"][e], ends[e])
            node = ids[local]
            tree.bound[node] = bound
            stages, slots = list(tree.stages[node]), list(tree.slots[node])
            tree.stages[node] = tree.slots[node] = None
            ids += [child for _, child in self.record(tree, node, stages, slots, branch, log["kids"][part],
                                                      log["bounds"][part], log["exact"][part], log["keep"][part],
                                                      enqueue=False)]
            tree.set_flags(node, 0)   # expanded: no longer open
            if between is not None and e % REPLAY_POLL == REPLAY_POLL - 1:
                between()
        for root in roots:                   # closed or still open (then flagged again below)
            tree.set_flags(root, 0)
            tree.planned.pop(root, None)
        self._reopen(tree, [(bound, ids[local], flags, plan) for bound, local, flags, plan in result["open"]])

    @staticmethod
    def _reopen(tree: TileSearch, entries: list) -> None:
        for bound, node, flags, plan in entries:
            heapq.heappush(tree.levels.setdefault(len(tree.stages[node]), []), (bound, node))
            tree.queued += 1
            tree.set_flags(node, flags)
            if plan is not None:
                tree.planned[node] = plan

    def _progress(self, space: TileSpace, tree: TileSearch) -> None:
        now = time.monotonic()
        if now - self._last_progress < PROGRESS_EVERY_S:
            return
        self._last_progress = now
        capped = tree.dive or tree.pending() > self.max_open
        report(self.options, f"bnb {_name(space)}", self.best.value, space.rounded(tree.least()), _name(space),
               extra=f"{tree.expanded} nodes, {tree.pending()} open"
                     + (f", depth first (over the cap of {self.max_open} open)" if capped else ""))


def root_qpb(space: TileSpace, options: SolveOptions, search: BranchAndBound) -> tuple | None:
    """The convex quadratic programming bound of the whole tile shape, when it can pay for itself:
    dense flows (on sparse pipelines the eigenvalue bounds are far below Gilmore-Lawler, which the
    tree improves fast) and at most MAX_SLOTS slots; (bound, certificate entry, seconds) or None.
    At most ROOT_QPB_SHARE of the time limit."""
    n, m = space.n, space.m
    if n < 3 or m > MAX_SLOTS or np.count_nonzero(space.C) <= SPARSE * n * (n - 1) or options.stopped():
        return None
    started = time.monotonic()
    left = options.remaining()
    deadline = None if left is None else started + ROOT_QPB_SHARE * left
    A, B = tile_matrices(space.C, space.D)
    _, point, spec, _ = qpb_search(A, B, None, spectral(A, B), QPB_STEPS, deadline, options.stopped)
    value, entry, _ = bound_at_point(A, B, None, point, spec)
    value /= 2
    entry["value"] = float(value)
    seconds = round(time.monotonic() - started, 3)
    shown = space.rounded(float(value))    # as the tile's bound counts it (integer data: rounded up)
    report(options, f"bnb {_name(space)} root", search.best.value, shown, _name(space),
           extra=f"qpb {shown:.10g} vs Gilmore-Lawler {space.rounded(root_bound(space)):.10g} ({seconds} s)")
    return float(value), entry, seconds


_SPACES: list = []   # the run's tile shapes, inherited by the forked wave workers
IN_PROCESS = "in-process"   # a wave "pool" that runs the groups one after another here


def wave_pool(workers: int):
    """A process pool for the waves (forked: the workers inherit the tile shapes), or None (the
    search in one process, without waves) for one worker or where processes cannot fork."""
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    return WorkerPool(min(workers, WAVE_GROUPS), "fork", initializer=one_blas_thread)


def wave_task(index: int, best: Incumbent, threshold: float, deadline: float | None, qpb_off: frozenset,
              dive: bool, descents: tuple, qpbs: tuple, roots: list) -> dict:
    """One group of one wave: best first (`dive`: depth first, the tree holding more than
    its cap of open nodes) from `roots` (stages, slots, bound, flags, plan) for WAVE_EXPANSIONS
    expansions, from the wave's incumbent, `descents` (failed_descents, best_start) and `qpbs`
    (QPBs computed, strong branching's QPBs and its allowance); returns the tree's changes, its
    open nodes, its incumbent, its descents and its QPB counts."""
    space = _SPACES[index]
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    search = BranchAndBound(space.inst, SolveOptions(time_limit=left, quiet=True).start())
    search.best, search.threshold, search.log = best, threshold, []
    search.failed_descents, search.best_start = descents
    search.qpb_depth, search.qpb_off = node_qpb_depth(space), qpb_off
    search.qpb_before, search.strong, search.strong_free = qpbs[0], [0, qpbs[1]], qpbs[2]
    tree = TileSearch(space)
    for stages, slots, bound, flags, plan in roots:
        node = len(tree.stages)
        tree.stages.append(stages)
        tree.slots.append(slots)
        if dive:
            tree.dive.append((bound, -len(stages), node))
        else:
            heapq.heappush(tree.levels.setdefault(len(stages), []), (bound, node))
            tree.queued += 1
        tree.set_flags(node, flags)
        if plan is not None:
            tree.planned[node] = plan
    tree.dive.sort(reverse=True)   # the least bound (then the deepest) on top
    search.run(space, tree, deadline, expansions=WAVE_EXPANSIONS)
    return {"log": _pack(search.log),
            "open": [(bound, node, tree.flags(node), tree.planned.get(node)) for bound, node in tree.open_entries()],
            "best": (search.best.value, search.best.plan), "qpb": search.qpb_counts, "laps": search.laps,
            "strong": (search.strong[0], search.strong[1] - qpbs[1]),
            "descents": (search.failed_descents, search.best_start)}


def _pack(log: list) -> dict:
    """A task's log as a few arrays (one pickle each, not one per expansion): the least closed
    bound, and per expansion in order its node, bound, branch and number of kids, with the kids'
    slots, bounds, exact flags and kept flags end to end."""
    closed = [e[2] for e in log if e[0] == "close"]
    grown = [e for e in log if e[0] == "expand"]
    def joined(k, dtype):
        return np.concatenate([np.asarray(e[k], dtype=dtype) for e in grown]) if grown else np.zeros(0, dtype)
    return {"closed_least": min(closed, default=math.inf),
            "node": np.array([e[1] for e in grown], dtype=np.int64), "bound": np.array([e[2] for e in grown]),
            "branch": np.array([e[3] for e in grown], dtype=np.int64),
            "sizes": np.array([len(e[4]) for e in grown], dtype=np.int64),
            "kids": joined(4, np.int64), "bounds": joined(5, float), "exact": joined(6, bool), "keep": joined(7, bool)}


def run_wave(pool, tasks: list, options: SolveOptions):
    """The wave's results in task order, each as soon as it and those before it are done (so they
    are replayed while later ones run); on an interrupt the pool's workers are stopped and the
    results end early."""
    if pool == IN_PROCESS:
        yield from (wave_task(*task) for task in tasks)
        return
    numbers = [pool.submit(wave_task, *task) for task in tasks]
    for number in numbers:
        while not pool.done(number):
            if options.interrupted:
                pool.stop()
                return
            pool.wait(POLL_S)
        yield pool.result(number)


def _name(space: TileSpace) -> str:
    return f"{space.layout.tile[0]}x{space.layout.tile[1]}"


def node_qpb_depth(space: TileSpace) -> int:
    """Children down to this depth get their QPB when popped (TileSpace.qpb_pays): every node with
    at least three free stages; the per-depth trial turns it off where it does not pay."""
    return space.n - 3 if space.qpb_pays else 0


def _search_tiles(search: BranchAndBound, spaces: list, order: list, roots: list, strong: list,
                  options: SolveOptions, pool, tiles: dict, stats: dict) -> None:
    """Every tile shape in turn, best root bound first, each with its share of the time left;
    its certificate entry into `tiles`, its numbers into `stats`. The trees are parked (freeing
    millions of nodes would hold up the plan's writing after Ctrl-C)."""
    trees: list = []
    park((spaces, trees))
    for position, k in enumerate(order):
        space = spaces[k]
        name = _name(space)
        if options.stopped():
            break
        left = options.remaining()
        deadline = None if left is None else time.monotonic() + left / (len(order) - position)
        proven_at_root = bool(strong[k]) and roots[k] >= search.threshold
        tree = search.search(space, deadline, closed=proven_at_root, index=k, pool=pool)
        trees.append(tree)
        limit = INTERRUPTED_TREE_TOKENS if options.interrupted else MAX_TREE_TOKENS   # Ctrl-C: out within 2 s
        tiles[name] = tree.certificate(search.threshold, limit)
        if strong[k]:
            tiles[name]["root"] = strong[k][1]
            tiles[name]["bound"] = max(tiles[name]["bound"], roots[k])
        stats[name] = {"root_bounds": {"gilmore-lawler": space.rounded(root_bound(space)),
                                       **({"qpb": space.rounded(strong[k][0]), "qpb_s": strong[k][2]} if strong[k] else {}),
                                       "used": "qpb" if strong[k] and strong[k][0] > root_bound(space) else "gilmore-lawler"},
                       "node_qpb": {"depth": search.qpb_depth,
                                   "by_depth": {str(d): dict(zip(("computed", "raised", "pruned"), c))
                                                for d, c in sorted(search.qpb_counts.items())},
                                   "strong_branching": dict(zip(("nodes", "qpbs"), search.strong))},
                       "nodes": tree.expanded, "bounded": tree.bounded, "assignment_problems": search.laps,
                       "open": tree.pending(), "open_cap": search.max_open, "root_bound": space.rounded(roots[k]),
                       "bound": space.rounded(tiles[name]["bound"]), "proven": not tree.pending(),
                       **({"waves": search.waves_run, "wave_groups": WAVE_GROUPS} if pool is not None else {})}


def bnb(inst: PlacementInstance, options: SolveOptions, waves_in_process: bool = False) -> MethodResult:
    """Branch and bound over stage-to-slot assignments with Gilmore-Lawler and convex quadratic
    programming bounds (see module doc).
    With `options.workers` > 1 the search runs in waves on a process pool; `waves_in_process` runs
    the same waves here, one group after another (the same answer)."""
    search = BranchAndBound(inst, options)
    spaces = [TileSpace(inst, lay) for lay in inst.layouts]
    search.warm_start(spaces)
    roots = [root_bound(space) for space in spaces]
    expect_parts(options, {_name(space): root for space, root in zip(spaces, roots)})   # a tile's bound bounds its plans only
    strong = [root_qpb(space, options, search) for space in spaces]
    roots = [max(gl, s[0]) if s else gl for gl, s in zip(roots, strong)]
    order = sorted(range(len(spaces)), key=lambda k: roots[k])
    tiles, stats = {}, {}
    _SPACES[:] = spaces
    pool = IN_PROCESS if waves_in_process else wave_pool(options.workers)
    try:
        _search_tiles(search, spaces, order, roots, strong, options, pool, tiles, stats)
    finally:
        _SPACES.clear()
        if isinstance(pool, WorkerPool):
            pool.close()
    # a tile shape not searched (time ran out) keeps its root Gilmore-Lawler bound
    values = [space.rounded(tiles[name]["bound"] if name in tiles else root)
              for space, name, root in zip(spaces, (_name(s) for s in spaces), roots)]
    bound = min(values) if values else None
    if search.best.plan is not None and bound is not None:
        bound = min(bound, search.best.value)
    proven = len(tiles) == len(spaces) and all(s["proven"] for s in stats.values())
    status = "optimal" if proven and search.best.plan is not None else (
        "feasible" if search.best.plan is not None else "unknown")
    certificate = Bound(bound, CERTIFICATE, "bnb-frontier", {"tiles": tiles}) if bound is not None else None
    options.incumbent(search.best.plan, certificate)
    return MethodResult(search.best.plan, status, certificate,
                        "wafopt bnb (Gilmore-Lawler and convex quadratic programming bounds)",
                        stats={"layouts": stats, "time_s": round(time.monotonic() - search.started, 3)})
