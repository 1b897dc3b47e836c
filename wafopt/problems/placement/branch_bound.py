"""Branch and bound over stage-to-slot assignments: the bound of a node, the symmetries that may
prune, and the search tree as a certificate (WATOS Eq. 2 placement; Gilmore-Lawler and
convex quadratic programming bounds).

A node fixes some stages to slots of one tile shape. Its bound is
    fixed cost      sum over fixed pairs {i, j} of C[i][j] D(slot i, slot j)            (exact)
  + LAP over the free stages i and free slots k of
        M[i][k] = sum_{j fixed} C[i][j] D(k, slot j) + 1/2 GL[i][k]
    GL[i][k] = sorted(C[i, other free stages], descending) . sorted(D[k, other free slots],
               ascending)[:free stages - 1]   (rearrangement: the cheapest way i at k can talk to
               the other free stages; halved because each free pair is counted from both ends)
  + routing-conflict penalty among the fixed stages (Eq. 2 gamma): the union of the flows' routes
    only grows as stages are fixed, so the penalty of a pair whose ends are both fixed, counted
    against the routes of the fixed flows, never decreases.
Where proven (integer data: TileSpace.qpb_valid) a child's bound may also be its convex quadratic
programming bound after a fixed number of Frank-Wolfe steps (qpb_children_batch): the checker
runs the same steps for every node whose Gilmore-Lawler bound is below the claimed value, on the
tile shapes where a search may have used them (TileSpace.qpb_may_pay). That
QPB with one more stage fixed (its assignment problem's reduced cost added) bounds the node's own
children too.
A complete assignment's bound is its full Eq. 2 objective. A node also inherits its parent's
bound (its plans are among its parent's), so a bound is the largest along the node's path. With
integer weights, distances and Mem_pair volumes every objective is an integer and bounds are
rounded up.

Two weaker bounds spare most assignment problems: the row-minimum bound (each free stage at its
cheapest slot), and before it a screen computed once for all children of a node: its rows are the
parent's (GL over the parent's free stages and slots, the branch stage still free), which bound
every child's rows from below, since C[i, branch] D(kid, k) + GL_child[i][k] is one way i at k can
talk to the parent's free stages.

Symmetry (orbital branching): the slot permutations g that preserve D (grid reflections and
rotations that map usable slots onto usable slots; a faulty die breaks the ones that move it) and,
with Mem_pairs, map routes onto routes (so every gamma is unchanged). At a node only those g that
fix every used slot act; of the free slots a branch may use, one per orbit is kept, since g maps
every completion in an omitted child onto one of equal objective in the kept child.

The tree (certificate kind "bnb-frontier"): in preorder, an expanded node is the stage it
branches on, followed by its children (the orbit representatives among its free slots, ascending);
any other child is a leaf (pruned, open or complete), token `n`. Every assignment lies under
exactly one leaf or one leaf's symmetric image, so min over the leaves of their bounds is a lower
bound of every plan. The checker re-derives the symmetries from the instance, walks the tree and
re-derives the bound of every node, expanded or leaf (one whose screen or row-minimum bound already
clears the claimed value needs no assignment problem), and checks that no listed frontier node's
bound exceeds its re-derived one (a node may be listed with its row-minimum bound).
"""

from __future__ import annotations

import base64
import gc
import math
import multiprocessing
import os
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from wafopt.core.errors import CertificateError
from wafopt.core.limits import MAX_FILE_BYTES
from wafopt.core.numeric import MAX_EXACT, at_most, integral_bound
from wafopt.core.workers import WorkerPool, one_blas_thread
from wafopt.problems.certificates import DEFAULT_CHECK, CheckOptions, float_down
from wafopt.problems.placement.assignment import (
    assignment_columns,
    sibling_assignment_columns,
)
from wafopt.problems.placement.fitness import Fitness
from wafopt.problems.placement.instance import Layout, PlacementInstance
from wafopt.problems.placement.projected import (
    entry_value,
    node_qpbs,
    nodes_problems,
    pb_float,
    tile_matrices,
)

FLOAT_ERROR = 1e-9    # relative error of a float bound's sums (far below the rule's REL_TOL)
MAX_TREE_TOKENS = 40_000_000  # a certificate's tree beyond this is refused (nug21's proof has 20.3 million)
TREE_TEXT_BYTES = MAX_FILE_BYTES * 3 // 4   # a packed tree beyond this is cut further: the solution file stays readable
WALK_BATCH = 64              # expanded nodes the checker bounds together (fixed: the bounds never depend on workers)
PARALLEL_NODES = 2_000       # expanded nodes from which the checker bounds its batches on worker processes
BATCHES_AHEAD = 4            # ... with this many batches per worker handed out ahead


def symmetry_group(fit: Fitness) -> list[np.ndarray]:
    """Slot permutations preserving the full objective: D-preserving grid symmetries of the layout
    (Layout.symmetries) that, with Mem_pairs, also map XY routes onto routes through one link
    bijection (reflections do; a transposition turns XY routes into YX routes and does not)."""
    group = list(fit.layout.symmetries)
    if not fit.pairs:
        return group
    start, end, link = np.nonzero(fit.R)                      # every (route, link it uses)
    counts = np.bincount(link)
    ends = np.cumsum(counts)[counts > 0]                       # where each used link's routes end
    offset = link * fit.m * fit.m                              # sorts by link first

    def link_uses(slot_map):
        """Each used link's set of routes, with their slots mapped, as bytes of sorted pair indices."""
        pairs = np.sort(offset + slot_map[start] * fit.m + slot_map[end]) - np.sort(offset)  # by link, then pair
        return {part.tobytes() for part in np.split(pairs, ends[:-1])}

    own = link_uses(np.arange(fit.m))
    return [g for g in group if link_uses(np.asarray(g)) == own]


@dataclass
class TileSpace:
    """The assignments of one tile shape and what bounding them needs."""

    inst: PlacementInstance
    layout: Layout
    fit: Fitness = field(init=False)

    def __post_init__(self):
        self.fit = Fitness(self.inst, self.layout)
        self.C = self.inst.weights
        self.D = self.layout.distance
        self.n, self.m = self.inst.stages, len(self.layout.slots)
        if self.inst.pairs:
            self.flow_i, self.flow_j = self.fit.flow_i, self.fit.flow_j
            self.pair_s, self.pair_h, self.pair_v = self.fit.pair_s, self.fit.pair_h, self.fit.pair_v

    @cached_property
    def integral(self) -> bool:
        """Every full objective is an integer (integer weights, distances and Mem_pair volumes)."""
        values = np.concatenate([self.C.ravel(), self.D.ravel(), [v for _, _, v in self.inst.pairs]])
        return bool(np.all(values == np.round(values)) and self.C.sum() * max(1.0, self.D.max()) < MAX_EXACT)

    @cached_property
    def nonnegative(self) -> bool:
        """No negative weight (instance files; the truncated GL sums rely on it)."""
        return bool((self.C >= 0).all())

    @cached_property
    def group(self) -> list[np.ndarray]:
        return symmetry_group(self.fit)

    def rounded(self, value: float) -> float:
        """A float bound made safe: rounded up when every objective is an integer (integer data below
        2^53 is exact in floats), else less a relative margin for float summation error."""
        return integral_bound(value) if self.integral else value - FLOAT_ERROR * abs(value)

    def kids(self, stages: list[int], slots: list[int]) -> np.ndarray:
        """The free slots a branch at this node tries: one per orbit of the symmetries fixing every
        used slot (all free slots when no symmetry survives), ascending."""
        used = np.zeros(self.m, dtype=bool)
        used[slots] = True
        free = np.flatnonzero(~used)
        acting = self._fixes[:, slots].all(axis=1) if len(slots) else np.ones(len(self.group), dtype=bool)
        if acting.sum() <= 1:
            return free
        images = self._group[acting][:, free]
        return free[images.min(axis=0) == free]

    def kid_columns(self, slots, kids) -> np.ndarray:
        """Where a node's kids sit among its free slots (ascending), e.g. in the columns of its
        children's bounds from qpb_children_batch with fixing."""
        return np.searchsorted(free_slots(self.m, np.asarray([slots], dtype=int).reshape(1, -1))[0], kids)

    def symmetric(self, slots: np.ndarray) -> np.ndarray:
        """For nodes with used slots (B, d): whether a symmetry other than the identity fixes
        every used slot (then `kids` keeps one slot per orbit; else every free slot is a kid)."""
        if len(self.group) <= 1:
            return np.zeros(len(slots), dtype=bool)
        return self._fixes[:, slots].all(axis=2).sum(axis=0) > 1

    @cached_property
    def _group(self) -> np.ndarray:
        return np.array(self.group).reshape(len(self.group), self.m)

    @cached_property
    def _fixes(self) -> np.ndarray:
        """(symmetries, m): whether each symmetry maps each slot onto itself."""
        return self._group == np.arange(self.m)[None, :]

    def children(self, stages: list[int], slots: list[int], branch: int, kids,
                 cutoff: float = math.inf, assign_below: float = math.inf,
                 floor: np.ndarray | None = None, floor_only: bool = False) -> tuple[np.ndarray, np.ndarray, list]:
        """Bounds of the children of one node that fix stage `branch` to each slot of `kids`.

        Returns (bound, exact, completion): the child's bound (unrounded); whether it is the full
        Gilmore-Lawler bound (False: a weaker one, the screen or the assignment problem's row-minimum
        bound, which already reached `cutoff` or `assign_below`); and for exact children the
        assignment problem's completion (a feasible plan: slot of each stage) or None for the others.
        """
        bound, exact, completion = self.children_batch(
            np.asarray([stages], dtype=int).reshape(1, -1), np.asarray([slots], dtype=int).reshape(1, -1),
            np.asarray([branch]), np.asarray([kids], dtype=int).reshape(1, -1), cutoff, assign_below,
            None if floor is None else np.asarray(floor, dtype=float).reshape(1, -1), floor_only)
        return bound[0], exact[0], completion[0]

    def children_batch(self, stages: np.ndarray, slots: np.ndarray, branch: np.ndarray, kids: np.ndarray,
                       cutoff: float = math.inf, assign_below: float = math.inf,
                       floor: np.ndarray | None = None, floor_only: bool = False) -> tuple[np.ndarray, np.ndarray, list]:
        """`children` for B nodes with the same number of fixed stages and of kids at once:
        stages, slots (B, d), branch (B,), kids (B, c); returns arrays (B, c) and B lists. An
        assignment problem is solved only where the row-minimum bound is below both `cutoff` and
        `assign_below` (-inf: none, every bound the screen or the row-minimum one). `floor` (B, c):
        bounds the children are known to have (their parent's QPB with the kid fixed): every
        returned bound is at least it, and a child it prunes gets no assignment problem. With
        `floor_only`, of a node's children with a floor only the one with the least gets one (for
        its completion: where QPB pays, the floor is above the Gilmore-Lawler bound); the floors of
        the others count as their exact bounds."""
        n, m, C, D = self.n, self.m, self.C, self.D
        B, d = stages.shape
        c = kids.shape[1]
        rows = np.arange(B)[:, None]
        slot_of = np.full((B, n), -1)
        slot_of[rows, stages] = slots
        free = free_slots(m, slots)                                  # each node's free slots, ascending
        mf = m - d
        is_fixed = slot_of >= 0
        is_fixed[np.arange(B), branch] = True
        rest = np.nonzero(~is_fixed)[1].reshape(B, n - d - 1)       # the children's free stages
        r = rest.shape[1]
        # exact part: fixed pairs, the branch stage at its kid to the fixed stages (conflicts below)
        fixed = (C[stages[:, :, None], stages[:, None, :]] * D[slots[:, :, None], slots[:, None, :]]).sum(axis=(1, 2)) / 2
        to_branch = np.einsum("bd,bdc->bc", C[branch[:, None], stages], D[slots[:, :, None], kids[:, None, :]])
        bound = fixed[:, None] + to_branch
        exact = np.ones((B, c), dtype=bool)
        completion: list = [[None] * c for _ in range(B)]
        floor = np.full((B, c), -np.inf) if floor is None else floor
        if r == 0:
            bound += self._penalty(slot_of, branch, np.repeat(np.arange(B), c), kids.ravel()).reshape(B, c)
            bound = np.maximum(bound, floor)
            complete = np.repeat(slot_of[:, None, :], c, axis=1)
            complete[np.arange(B)[:, None], np.arange(c)[None, :], branch[:, None]] = kids
            return bound, exact, [list(complete[b]) for b in range(B)]
        # the screen (module doc), one per node
        linear = np.matmul(C[rest[:, :, None], stages[:, None, :]], D[slots[:, :, None], free[:, None, :]])
        Cr = C[rest[:, :, None], rest[:, None, :]]
        Cr[:, np.arange(r), np.arange(r)] = -np.inf
        # a free stage talks to at most q others: the sorted flows' other columns are zeros, which
        # add nothing (sparse pipelines: q is 2-4 of 20 free stages)
        q = max(1, int((Cr > 0).sum(axis=2).max())) if self.nonnegative else r
        Dk = D[free[:, :, None], free[:, None, :]]
        Dk[:, np.arange(mf), np.arange(mf)] = np.inf
        near = np.sort(Dk, axis=2)[:, :, :min(r, q + 1)]          # (B, mf, .): distances to the nearest others
        to_branch_stage = C[rest, branch[:, None]]                                         # (B, r)
        flows_parent = -np.sort(-np.concatenate([Cr, to_branch_stage[:, :, None]], axis=2), axis=2)[:, :, :near.shape[2]]
        parent = linear + 0.5 * np.matmul(flows_parent, near.transpose(0, 2, 1))          # (B, r, mf)
        screened = bound + parent.min(axis=2).sum(axis=1)[:, None]
        sb, sa = np.nonzero(np.maximum(screened, floor) < cutoff)
        penalty = self._penalty(slot_of, branch, sb, kids[sb, sa])
        bound[sb, sa] += penalty
        screened[sb, sa] += penalty
        screened = np.maximum(screened, floor)    # a floor holds the parent's penalty: taken after it
        keep = screened[sb, sa] < cutoff
        sb, sa = sb[keep], sa[keep]
        if len(sb):
            # the children's assignment problems: free stages `rest` onto the free slots, the kid's
            # column barred (infinite)
            kid = kids[sb, sa]
            slots_free = free[sb]                                                          # (S, mf)
            M = linear[sb] + to_branch_stage[sb][:, :, None] * D[kid[:, None], slots_free][:, None, :]   # (S, r, mf)
            if r > 1:
                # GL: sorted flows to the other free stages against sorted distances to the other
                # free slots less the kid's (one entry of the kid's distance dropped from the nearest)
                flows = -np.sort(-Cr, axis=2)[:, :, :min(r - 1, q)]                         # (B, r, <= q)
                closer = (near[sb] < D[slots_free, kid[:, None]][:, :, None]).sum(axis=2)   # (S, mf)
                step = np.arange(flows.shape[2])
                nearest = near[sb[:, None, None], np.arange(mf)[None, :, None], step + (step >= closer[:, :, None])]
                M += 0.5 * np.matmul(flows[sb], nearest.transpose(0, 2, 1))
            M[np.arange(len(sb)), :, (slots_free < kid[:, None]).sum(axis=1)] = np.inf
            cheap = np.maximum(bound[sb, sa] + M.min(axis=2).sum(axis=1), floor[sb, sa])
            screened[sb, sa] = cheap
            wanted = cheap < min(cutoff, assign_below)
            if floor_only:                          # the least floor still gets a completion
                wanted &= ~np.isfinite(floor[sb, sa]) | (sa == floor.argmin(axis=1)[sb])
            solved = np.flatnonzero(wanted)
            if len(solved):
                # rows r < columns: each solution's rows are 0..r-1 in order, only its columns vary;
                # a node's kids share their columns, each starting from the one before
                cols = sibling_assignment_columns(M[solved], sb[solved])                        # (L, r)
                b, a = sb[solved], sa[solved]
                bound[b, a] += np.take_along_axis(M[solved], cols[:, :, None], axis=2)[:, :, 0].sum(axis=1)
                full = slot_of[b]
                full[np.arange(len(solved)), branch[b]] = kids[b, a]
                full[np.arange(len(solved))[:, None], rest[b]] = np.take_along_axis(slots_free[solved], cols, axis=1)
                for s, (bs, as_) in enumerate(zip(b.tolist(), a.tolist())):
                    completion[bs][as_] = full[s]
                screened[b, a] = -np.inf
        cheap_only = screened > -np.inf
        bound[cheap_only], exact[cheap_only] = screened[cheap_only], floor_only & np.isfinite(floor[cheap_only])
        return np.maximum(bound, floor), exact, completion

    @cached_property
    def qpb_valid(self) -> bool:
        """Whether a node's QPB is proven in floats here (qpb_nodes, which takes the node problem's
        matrices as exact): integer data (then nodes_problems is exact) and symmetric distances."""
        return self.integral and self.n >= 3 and np.array_equal(self.D, self.D.T)

    @cached_property
    def qpb_pays(self) -> bool:
        """Whether the search gives nodes their QPB: proven here, and the root's projected eigenvalue
        bound above Gilmore-Lawler (on instances whose flows lack the spectral structure the
        eigenvalue bounds rely on, such as scr20 and ste36a, it is far below)."""
        return self.qpb_valid and self.root_pb > root_bound(self)

    @cached_property
    def qpb_may_pay(self) -> bool:
        """Whether a search may have given nodes their QPB: qpb_pays with a margin for the float
        spectra of another machine. The checker computes node QPBs only then (the tile shapes of
        sparse pipelines, scr20 and ste36a have none); computing fewer bounds, it can only refuse
        more, never accept a bound the tree does not prove."""
        if not self.qpb_valid:
            return False
        root = root_bound(self)
        return self.root_pb > root - 1.0 - FLOAT_ERROR * abs(root)

    @cached_property
    def root_pb(self) -> float:
        """The tile shape's projected eigenvalue bound (floats, base objective's scale: halved)."""
        return pb_float(*tile_matrices(self.C, self.D)) / 2

    def qpb_children_batch(self, nodes: list, fixing: bool = False):
        """The convex quadratic programming bound (base objective, unrounded) of the children of
        several nodes with as many fixed stages, (stages, slots, branch, kids) each: the QPB of the
        free stages on the free slots with the cost of talking to the fixed ones at the point and
        theta of NODE_FW_STEPS Frank-Wolfe steps (node_points, qpb_nodes: proven in floats), plus
        the fixed stages' own cost, halved, plus the routing-conflict penalty among the fixed
        stages. It is at least the projected eigenvalue bound (Frank-Wolfe starts at P, where the
        bound is PB). With `fixing`, also each node's bounds of its children's own children (a list
        of (kids, free stages, free slots) arrays, both ascending: the QPB inequality with that
        stage fixed to that slot, qpb_nodes), a child's plans being among them. Needs qpb_valid."""
        counts = [len(kids) for _, _, _, kids in nodes]
        group = np.repeat(np.arange(len(nodes)), counts)
        kid = np.concatenate([np.asarray(kids, dtype=int) for _, _, _, kids in nodes])
        stages = np.array([list(stages) + [branch] for stages, _, branch, _ in nodes], dtype=int)
        slots = np.array([list(slots) for _, slots, _, _ in nodes], dtype=int).reshape(len(nodes), -1)
        places = np.concatenate([slots[group], kid[:, None]], axis=1)
        A, which, B, L, K = nodes_problems(self.C, self.D, stages[group], places)
        A = (A + np.swapaxes(A, 1, 2))[which] / 2       # tr(A X B X^T) = tr(As X B X^T), B symmetric
        t = node_qpbs(A, B, L, fixing=fixing)
        slot_of = np.full((len(nodes), self.n), -1)
        slot_of[np.arange(len(nodes))[:, None], stages[:, :-1]] = slots
        penalty = self._penalty(slot_of, stages[:, -1], group, kid)
        ends = np.cumsum(counts)[:-1]
        if not fixing:
            return np.split((t + K) / 2 + penalty, ends)
        t, fixed = t
        free = self.n - stages.shape[1]           # the children's free stages: the first rows
        below = (fixed[:, :free, :] + K[:, None, None]) / 2 + penalty[:, None, None]
        return np.split((t + K) / 2 + penalty, ends), np.split(below, ends)

    def _penalty(self, slot_of: np.ndarray, branch: np.ndarray, node: np.ndarray, kid: np.ndarray) -> np.ndarray:
        """Routing-conflict penalty among the fixed stages of children (slot_of: (B, n) the parents'
        slots, -1 where free; child s adds branch[node[s]] at kid[s]): a lower bound of every
        completion's penalty, since the union of the flows' routes only grows. Routes are the bit
        sets of Fitness (64 links a word)."""
        out = np.zeros(len(node))
        if not self.inst.pairs:
            return out
        # only children with both ends of some Mem_pair fixed can have a penalty
        placed_s = (slot_of[node][:, self.pair_s] >= 0) | (self.pair_s[None, :] == branch[node][:, None])
        placed_h = (slot_of[node][:, self.pair_h] >= 0) | (self.pair_h[None, :] == branch[node][:, None])
        some = np.flatnonzero((placed_s & placed_h).any(axis=1))
        if len(some):
            from wafopt.problems.placement.compiled import pair_penalties  # lazy: numba

            part = np.zeros(len(some))
            pair_penalties(self.fit.route_bits, *map(_int64, (self.flow_i, self.flow_j, self.pair_s, self.pair_h)),
                           np.ascontiguousarray(self.pair_v, dtype=float), np.ascontiguousarray(self.D, dtype=float),
                           *map(_int64, (slot_of, branch, node[some], kid[some])), part)
            out[some] = part
        return out


def _int64(a) -> np.ndarray:
    """An index array as the compiled kernels take it (one signature, one compilation)."""
    return np.ascontiguousarray(a, dtype=np.int64)


def free_slots(m: int, slots: np.ndarray) -> np.ndarray:
    """(B, m - d): each row's slots not in `slots` (B, d), ascending."""
    used = np.zeros((len(slots), m), dtype=bool)
    used[np.arange(len(slots))[:, None], slots] = True
    return np.nonzero(~used)[1].reshape(len(slots), m - slots.shape[1])


# --- the tree as a certificate ----------------------------------------------------------------

def _packed(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")   # 9 packs a tree 15% smaller, 9x slower


def _unpacked(text, limit: int, what: str) -> bytes:
    """The bytes of _packed text, at most `limit` of them read (a zlib bomb stops there)."""
    try:
        return zlib.decompressobj().decompress(base64.b64decode(text.encode("ascii"), validate=True), limit)
    except (ValueError, zlib.error, UnicodeError, AttributeError):
        raise CertificateError(f"{what} is not base64 zlib data") from None


def encode_tree(tokens: list[int]) -> str:
    """Preorder tokens (a branching stage, or n for a leaf) as base64 of zlib-packed uint16."""
    return _packed(np.asarray(tokens, dtype="<u2").tobytes())


def decode_tree(text: str, n: int, limit: int = MAX_TREE_TOKENS) -> np.ndarray:
    raw = _unpacked(text, 2 * limit, "bnb-frontier tree")
    if len(raw) % 2 or len(raw) >= 2 * limit:
        raise CertificateError(f"bnb-frontier tree is broken or longer than {limit} nodes")
    tokens = np.frombuffer(raw, dtype="<u2").astype(np.int64)
    if tokens.size == 0 or tokens.max() > n:
        raise CertificateError("bnb-frontier tree holds a token that is no stage")
    return tokens


def walk(space: TileSpace, tokens: np.ndarray, claimed: float, options: CheckOptions = DEFAULT_CHECK) -> float:
    """Re-derive the least leaf bound of a preorder tree, exactly where it is below `claimed`
    (a node whose row-minimum bound clears `claimed` is counted at `claimed`). A node's bound is the
    larger of its own (Gilmore-Lawler, then its QPB where proven and still needed) and its
    parent's: its plans are among its parent's.
    Raises CertificateError on a malformed tree. The tree is read first; then, depth by depth, the
    children of nodes with as many fixed stages and kids are bounded in batches (bound_batch), on
    `options.workers` processes for a tree of PARALLEL_NODES expanded nodes or more, with a
    progress line for `options.progress` after each batch."""
    n = space.n
    position = 0

    def expand(stages):
        nonlocal position
        if position >= len(tokens):
            raise CertificateError("bnb-frontier tree ends early")
        token = int(tokens[position])
        position += 1
        if token == n:
            return None
        if token in stages:
            raise CertificateError(f"bnb-frontier tree branches twice on stage {token}")
        return token

    root = expand([])
    if root is None:   # the whole space is one leaf: its bound is the plain Gilmore-Lawler bound
        return root_bound(space)
    # expanded nodes: (stages, slots, branch, kids, each kid's expanded node index or -1)
    nodes: list = []
    by_depth: dict[int, dict[int, list[int]]] = {}    # fixed stages -> number of kids -> node indices
    pending: list = []   # (node index, kids not yet read)

    def open_node(stages, slots, branch):
        kids = space.kids(stages, slots).tolist()
        nodes.append((stages, slots, branch, kids, []))
        by_depth.setdefault(len(stages), {}).setdefault(len(kids), []).append(len(nodes) - 1)
        pending.append((len(nodes) - 1, list(kids)))

    open_node([], [], root)
    while pending:
        index, kids = pending[-1]
        if not kids:
            pending.pop()
            continue
        stages, slots, branch, _, below = nodes[index]
        k = kids.pop(0)
        child_stages, child_slots = stages + [branch], slots + [k]
        token = expand(child_stages)
        if token is None:
            below.append(-1)
        elif len(child_stages) == n:
            raise CertificateError("bnb-frontier tree branches below a complete assignment")
        else:
            below.append(len(nodes))
            open_node(child_stages, child_slots, token)
    if position != len(tokens):
        raise CertificateError("bnb-frontier tree has tokens after its last node")
    inherited = np.full(len(nodes), -math.inf)      # each expanded node's bound, passed to its kids
    inherited[0] = root_bound(space)
    floors: dict[int, np.ndarray] = {}     # expanded node -> its kids' bounds from its own QPB
    least = math.inf
    bounded = 0
    with _batch_runner(space, options.workers if len(nodes) >= PARALLEL_NODES else 1) as bound_batches:
        for d in sorted(by_depth):
            parts = [indices[start:start + WALK_BATCH] for indices in by_depth[d].values()
                     for start in range(0, len(indices), WALK_BATCH)]
            tasks = ((np.array([nodes[i][0] for i in part], dtype=int).reshape(len(part), d),
                      np.array([nodes[i][1] for i in part], dtype=int).reshape(len(part), d),
                      np.array([nodes[i][2] for i in part]), np.array([nodes[i][3] for i in part]),
                      np.array([floors.pop(i) if i in floors else np.full(len(nodes[i][3]), -np.inf) for i in part]),
                      inherited[part], np.array([nodes[i][4] for i in part]) >= 0, claimed)
                     for part in parts)
            for part, (raised, grand) in zip(parts, bound_batches(tasks)):
                for (b, a), kid_bounds in grand.items():
                    child = nodes[part[b]][4][a]
                    floors[child] = fixed_kids(space, nodes[child], kid_bounds)
                for b, i in enumerate(part):
                    below = np.asarray(nodes[i][4])
                    leaves = below < 0
                    if leaves.any():
                        least = min(least, float(raised[b][leaves].min()))
                    inherited[below[~leaves]] = raised[b][~leaves]
                bounded += len(part)
                if options.progress is not None:
                    options.progress(f"{bounded:,} of {len(nodes):,} expanded nodes' children bounded "
                                     f"(depth {d + 1} of at most {max(by_depth) + 1})")
    return least


def bound_batch(space: TileSpace, stages: np.ndarray, slots: np.ndarray, branch: np.ndarray, kids: np.ndarray,
                floor: np.ndarray, inherited: np.ndarray, expanded: np.ndarray, claimed: float) -> tuple:
    """The walk's bounds of the kids of a batch of expanded nodes with as many fixed stages and
    kids (B x kids; each at least its node's inherited bound and its floor, the node's QPB with
    the kid fixed; a kid whose weaker bounds clear `claimed` counted at `claimed`), and for each
    expanded kid (`expanded`) that needed its QPB, {(b, kid): the bounds of its free stages at its
    free slots}, which bound its own kids."""
    d = stages.shape[1]
    bound, exact, _ = space.children_batch(stages, slots, branch, kids, cutoff=claimed, floor=floor)
    raised = np.where(exact, bound, np.maximum(bound, claimed))
    raised = np.maximum(raised, inherited[:, None])
    grand_bounds: dict[tuple[int, int], np.ndarray] = {}
    if space.qpb_may_pay and d + 1 < space.n:   # a kid below the claim may hold by QPB
        shorts = [np.flatnonzero(row < claimed) for row in raised]
        todo = [b for b, short in enumerate(shorts) if len(short)]
        if todo:
            qpbs, below = space.qpb_children_batch([(stages[b].tolist(), slots[b].tolist(), int(branch[b]), kids[b][shorts[b]])
                                                    for b in todo], fixing=True)
            for b, qpb, grand in zip(todo, qpbs, below):
                raised[b, shorts[b]] = np.maximum(raised[b, shorts[b]], qpb)
                for a, kid_bounds in zip(shorts[b], grand):
                    if expanded[b, a]:
                        grand_bounds[(b, int(a))] = kid_bounds
    return raised, grand_bounds


_WALKED: list = []   # the tile shape a walk bounds, inherited by its forked workers


def _bound_batch_here(*task) -> tuple:
    """bound_batch in a worker, its exception returned (the parent raises it as the serial walk would)."""
    try:
        return True, bound_batch(_WALKED[0], *task)
    except Exception as exc:   # noqa: BLE001 - re-raised in the parent
        return False, exc


def _raised(results):
    for ok, value in results:
        if not ok:
            raise value
        yield value


@contextmanager
def _batch_runner(space: TileSpace, workers: int):
    """A function mapping an iterable of bound_batch tasks to their results in order: on `workers`
    forked processes (one when they cannot fork); every batch is bounded alone, so the results
    do not depend on the number of processes."""
    workers = min(workers, os.cpu_count() or 1)     # more processes than cores only add forks
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield lambda tasks: (bound_batch(space, *task) for task in tasks)
        return
    _WALKED[:] = [space]
    pool = WorkerPool(workers, "fork", initializer=one_blas_thread)
    gc.freeze()      # the forked workers never touch the tree: no collection may copy its pages
    try:
        yield lambda tasks: _raised(pool.ordered(_bound_batch_here, tasks, ahead=BATCHES_AHEAD * workers))
    finally:
        gc.unfreeze()
        pool.close()
        _WALKED.clear()


def fixed_kids(space: TileSpace, node, bounds: np.ndarray) -> np.ndarray:
    """The bounds of a node's kids (in kids order) from the bounds of its free stage at each free
    slot (qpb_children_batch with fixing: free stages by free slots, both ascending)."""
    stages, slots, branch, kids = node[:4]
    row = branch - sum(1 for s in stages if s < branch)
    return bounds[row, space.kid_columns(slots, kids)]


def root_bound(space: TileSpace) -> float:
    """The Gilmore-Lawler bound of the whole tile shape (no stage fixed)."""
    n, C, D = space.n, space.C, space.D
    if n < 2:
        return 0.0
    Cd = C.copy()
    np.fill_diagonal(Cd, -np.inf)
    Dd = D.copy()
    np.fill_diagonal(Dd, np.inf)
    flows = -np.sort(-Cd, axis=1)[:, :n - 1]
    dists = np.sort(Dd, axis=1)[:, :n - 1]
    L = 0.5 * flows @ dists.T
    col = assignment_columns(L[None])[0]
    return float(L[np.arange(n), col].sum())


def node_bound(space: TileSpace, stages: list[int], slots: list[int]) -> float:
    """The bound of one node (its last fixed stage is the branch from its parent): Gilmore-Lawler,
    or its QPB where the checker computes one (qpb_may_pay) and it is higher."""
    return _node_bounds(space, stages, slots)[0]


def _node_bounds(space: TileSpace, stages: list[int], slots: list[int]) -> tuple[float, np.ndarray | None]:
    """node_bound, and where the QPB is computed the bounds of the node's children (free stages by
    free slots; qpb_children_batch with fixing)."""
    if not stages:
        return root_bound(space), None
    bound, _, _ = space.children(stages[:-1], slots[:-1], stages[-1], np.asarray(slots[-1:]))
    if space.qpb_may_pay and len(stages) < space.n:
        qpb, below = space.qpb_children_batch([(stages[:-1], slots[:-1], stages[-1], slots[-1:])], fixing=True)
        return max(float(bound[0]), float(qpb[0][0])), below[0][0]
    return float(bound[0]), None


def path_bound(space: TileSpace, stages: list[int], slots: list[int]) -> float:
    """The bound of a node as the walk derives it: the largest on its path from the root (each
    node's plans are among its parent's) of each node's node_bound and its parent's QPB with it
    fixed."""
    best = -math.inf
    for d in range(len(stages) + 1):
        bound, below = _node_bounds(space, stages[:d], slots[:d])
        best = max(best, bound)
        if below is not None and d < len(stages):
            best = max(best, float(fixed_kids(space, (stages[:d], slots[:d], stages[d], [slots[d]]), below)[0]))
    return best


def check_bnb_frontier(inst: PlacementInstance, data: dict, options: CheckOptions = DEFAULT_CHECK) -> float:
    """The bound a branch-and-bound tree proves: per tile shape the least leaf bound of its tree
    (re-derived), or the root Gilmore-Lawler bound for a tile shape without a tree, or the tile's
    root QPB (`root`: a qpb certificate entry) where that is stronger; then the least over the
    tile shapes. Listed frontier nodes must re-derive to their stored bounds. The trees are walked
    as `options` say (workers, progress lines naming the tile shape)."""
    tiles = data.get("tiles")
    if not isinstance(tiles, dict):
        raise CertificateError("a bnb-frontier certificate needs tiles: {shape: {tree, bound, frontier}}")
    spaces = {f"{lay.tile[0]}x{lay.tile[1]}": TileSpace(inst, lay) for lay in inst.layouts}
    unknown = sorted(set(tiles) - set(spaces))
    if unknown:
        raise CertificateError(f"bnb-frontier certificate for tile shape {unknown[0]}, which the instance does not use")
    values = []
    progress = options.progress
    for name, space in spaces.items():
        entry = tiles.get(name)
        if entry is None:
            values.append(space.rounded(root_bound(space)))
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("tree"), str):
            raise CertificateError(f"bnb-frontier tiles.{name} needs a tree (base64 text)")
        claimed = entry.get("bound")
        if not isinstance(claimed, (int, float)) or isinstance(claimed, bool) or not math.isfinite(claimed):
            raise CertificateError(f"bnb-frontier tiles.{name}.bound must be a finite number")
        shown = CheckOptions(options.workers, None if progress is None else
                             lambda text, name=name: progress(f"certify bnb-frontier {name}: {text}"))
        least = walk(space, decode_tree(entry["tree"], space.n), float(claimed), shown)
        if "root" in entry:     # a convex quadratic programming bound of the whole tile shape
            root = entry_value(space.C, space.D, entry["root"], True, f"bnb-frontier tiles.{name}.root")
            least = max(least, float(math.ceil(root)) if space.integral else float_down(root))
        proven = space.rounded(least) if space.integral else least
        above = claimed > proven if space.integral else not at_most(claimed, proven)   # integers: exactly
        if above:
            raise CertificateError(f"bnb-frontier tiles.{name}.bound {claimed!r} is above what its tree proves "
                                   f"({proven!r})")
        for k, node in enumerate(entry.get("frontier") or []):
            stages, slots, value = _frontier_node(node, space, f"tiles.{name}.frontier[{k}]")
            derived = path_bound(space, stages, slots)
            if not at_most(value, derived):       # a node may be listed with a weaker bound than GL
                raise CertificateError(f"bnb-frontier tiles.{name}.frontier[{k}] bound {value} re-derives "
                                       f"as {derived}")
        values.append(space.rounded(least))
    return min(values)


def _frontier_node(node, space: TileSpace, where: str) -> tuple[list[int], list[int], float]:
    if not isinstance(node, list) or len(node) != 2 or not isinstance(node[0], list):
        raise CertificateError(f"{where} must be [[[stage, slot], ...], bound]")
    stages, slots = [], []
    for pair in node[0]:
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
                or not (0 <= pair[0] < space.n and 0 <= pair[1] < space.m)):
            raise CertificateError(f"{where} holds {pair!r:.40}, not a [stage, slot] of the tile shape")
        stages.append(pair[0])
        slots.append(pair[1])
    if len(set(stages)) != len(stages) or len(set(slots)) != len(slots):
        raise CertificateError(f"{where} uses a stage or a slot twice")
    value = node[1]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise CertificateError(f"{where} bound must be a finite number")
    return stages, slots, float(value)
