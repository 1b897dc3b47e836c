"""Recomputation plans: `{"x": [[x_ij per unit] per stage]}`, x_ij the layers of stage i whose
unit j is recomputed (read back by wafopt.problems.recompute.evaluate.read_x)."""

from __future__ import annotations


def plan_of(x) -> dict:
    return {"x": [[int(v) for v in row] for row in x]}
