"""Minimum-cost assignment with its dual potentials: what the placement certificates check
their assignment-problem bounds with (weak duality holds for any potentials)."""

from __future__ import annotations

import numpy as np


def hungarian(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimum-cost assignment of rows to distinct columns (rows <= columns): shortest augmenting
    paths with potentials (Hungarian method, O(n^2 m); compiled.assignment from a cold start).
    Returns (column of each row, row potentials u, column potentials v <= 0) with
    u_i + v_k <= cost[i, k] up to rounding."""
    from wafopt.problems.placement.compiled import assignment  # lazy: numba

    cost = np.ascontiguousarray(cost, dtype=float)
    n, m = cost.shape
    col, u, v = np.zeros(n, dtype=np.int64), np.zeros(max(n, 1)), np.zeros(m + 1)
    scratch = (np.empty(m + 1, dtype=np.int64), np.empty(m + 1, dtype=np.int64), np.empty(m + 1),
               np.empty(m + 1, dtype=np.bool_))
    if not assignment(cost, col, v, False, u, *scratch):
        raise ValueError("the assignment problem has a cost that is not finite")
    return col, u[:n], v[1:]


def assignment_columns(costs: np.ndarray) -> np.ndarray:
    """(S, n): the column of each row in a minimum-cost assignment of each of the problems
    `costs` (S, n, m), n <= m (Hungarian method, compiled; infinite entries are barred)."""
    return _assignments(costs)[0]


def sibling_assignment_columns(costs: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """assignment_columns, each problem warm-started from the one before it where both have one
    group (`groups` (S,): consecutive problems on the same columns, such as the children of one
    node): the same optimal values, 1.4 times as fast on ste36a's children. Only for problems
    one row short of square (QAP children): the warm start needs square problems, and padding
    more rows costs more than it saves (1.75 times as slow on pl-sparse-24's children, 6-7 rows
    short), so those are solved from cold."""
    from wafopt.problems.placement.compiled import sibling_assignments  # lazy: numba

    if costs.shape[2] - costs.shape[1] > 1:
        return assignment_columns(costs)
    costs = np.ascontiguousarray(costs, dtype=float)
    cols = np.zeros(costs.shape[:2], dtype=np.int64)
    if not sibling_assignments(costs, np.ascontiguousarray(groups, dtype=np.int64), cols):
        raise ValueError("an assignment problem has no assignment of finite cost")
    return cols


def column_potentials(costs: np.ndarray) -> np.ndarray:
    """(S, m): the column potentials v of each square problem `costs` (S, m, m) that `hungarian`
    gives it (the same steps, in one compiled call)."""
    return _assignments(costs)[1][:, 1:]


def _assignments(costs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from wafopt.problems.placement.compiled import assignments  # lazy: numba

    costs = np.ascontiguousarray(costs, dtype=float)
    cols = np.zeros(costs.shape[:2], dtype=np.int64)
    potentials = np.zeros((costs.shape[0], costs.shape[2] + 1))
    if not assignments(costs, cols, potentials):
        raise ValueError("an assignment problem has no assignment of finite cost")
    return cols, potentials
