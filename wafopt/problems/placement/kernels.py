"""The compiled placement kernels made ready before a method's clock starts (the runner imports
this module first: KERNELS in this package's __init__).

numba keeps each compiled kernel in a disk cache beside its module. Where the cache lacks one (the
first run after installing, or after numba or the kernel's source changed), importing this module
compiles them all, about 10 s, and says so on stderr: compiling inside a method would overrun its
time limit and hold off Ctrl-C, since numba's compiler cannot be interrupted. Where the cache holds
them all, importing costs a few index reads; each kernel then loads on its first call (0.05-0.2 s).
"""

from __future__ import annotations

import sys

import numpy as np

from wafopt.hardware.mesh import Mesh
from wafopt.problems.placement import compiled
from wafopt.problems.placement.assignment import sibling_assignment_columns
from wafopt.problems.placement.branch_bound import TileSpace
from wafopt.problems.placement.instance import PlacementInstance
from wafopt.problems.placement.walks import best_walk, compiled_walk_steps


def kernels() -> list:
    """The kernels compiled on first use (compiled.assignments is compiled when compiled.py is imported)."""
    return [compiled.steps_batch, compiled.theta_steps, compiled.pair_penalties, compiled.sibling_assignments,
            compiled_walk_steps()]


def in_cache(kernel) -> bool:
    """Whether numba's disk cache holds a current build of `kernel` (its index names one for this
    source and numba version); True where numba keeps no cache (nothing to prepare ahead)."""
    index = getattr(getattr(kernel, "_cache", None), "_cache_file", None)
    return index is None or bool(index._load_index())


def compile_kernels() -> None:
    """Run every kernel once on a tiny pipeline with one Mem_pair (5 stages on 2 x 3 dies), through
    the functions that call them in the search, so each is compiled for the argument types it gets
    there: the children of a node with both ends of the pair fixed (Gilmore-Lawler with the
    routing-conflict penalty; their QPB's Frank-Wolfe steps and theta, asked for even though a
    search would not use it on this tile), the pipeline walks, and the kids' assignment problems
    of a QAP-shaped node (one row short of square, which this tile's are not)."""
    flow = np.zeros((5, 5))
    for i in range(4):
        flow[i, i + 1] = flow[i + 1, i] = i + 1
    inst = PlacementInstance(Mesh.build(2, 3), [(1, 1)], flow, [(0, 4, 1.0)])
    space = TileSpace(inst, inst.layouts[0])
    space.children([0], [0], 4, np.array([5]))
    space.qpb_children_batch([([0], [0], 4, [5])], fixing=True)
    best_walk(space.fit, nodes=100)
    sibling_assignment_columns(np.zeros((2, 1, 2)), np.zeros(2, dtype=np.int64))


def prepare() -> None:
    """Compile the kernels the cache lacks, saying so (module doc)."""
    if all(in_cache(kernel) for kernel in kernels()):
        return
    print("wafopt: compiling the placement kernels into numba's cache (once after installing, about 10 s)",
          file=sys.stderr, flush=True)
    compile_kernels()


prepare()
