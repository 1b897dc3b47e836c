"""QAPLIB instances whose distance matrix is a row-major grid, as placement instances.

A QAPLIB file NAME.dat holds n, matrix A and matrix B (n x n); the cost of a permutation p
(1-based in NAME.sln) is sum_{i,j} A[i][j] * B[p(i)][p(j)]. When one matrix is exactly the
Manhattan distance of a rows x cols grid numbered row-major, the other is a flow matrix and the
instance is a placement instance with tile [1, 1] on a healthy rows x cols mesh.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from wafopt.core.errors import InstanceError

OPEN_INSTANCES = {"tho40"}  # QAPLIB lists a best known value, not a proven optimum


def _integers(path: Path) -> list[int]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InstanceError(f"cannot read: {exc.strerror}", str(path)) from None
    try:
        return [int(t) for t in text.split()]
    except ValueError as exc:
        raise InstanceError(f"QAPLIB files hold integers only: {exc}", str(path)) from None


def read_dat(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) of a QAPLIB .dat file."""
    p = Path(path)
    values = _integers(p)
    if not values or values[0] <= 0:
        raise InstanceError("expected n > 0 as the first number", str(p))
    n = values[0]
    if len(values) != 1 + 2 * n * n:
        raise InstanceError(f"expected n = {n} followed by two {n} x {n} matrices ({2 * n * n} numbers), "
                            f"found {len(values) - 1} numbers", str(p))
    body = np.array(values[1:], dtype=float)
    return body[:n * n].reshape(n, n), body[n * n:].reshape(n, n)


def read_sln(path: str | Path) -> tuple[int, float, list[int]]:
    """(n, value, permutation 1-based) of a QAPLIB .sln file."""
    p = Path(path)
    values = _integers(p)
    if len(values) < 2 or len(values) != 2 + values[0]:
        raise InstanceError("expected n, the objective value and a permutation of 1..n", str(p))
    n, value, perm = values[0], float(values[1]), values[2:]
    if sorted(perm) != list(range(1, n + 1)):
        raise InstanceError(f"the solution is not a permutation of 1..{n}", str(p))
    return n, value, perm


def grid_shape(M: np.ndarray) -> tuple[int, int] | None:
    """(rows, cols) if M is the Manhattan distance of a rows x cols grid numbered row-major."""
    n = M.shape[0]
    for rows in range(1, n + 1):
        if n % rows:
            continue
        cols = n // rows
        r, c = np.divmod(np.arange(n), cols)
        if np.array_equal(np.abs(r[:, None] - r[None, :]) + np.abs(c[:, None] - c[None, :]), M):
            return rows, cols
    return None


def convert(dat_path: str | Path, sln_path: str | Path | None = None) -> dict:
    """The placement instance mapping of a grid QAPLIB instance (known_optimum from the .sln)."""
    dat = Path(dat_path)
    A, B = read_dat(dat)
    n = A.shape[0]
    shape_a, shape_b = grid_shape(A), grid_shape(B)
    if shape_a is None and shape_b is None:
        raise InstanceError("neither matrix is the Manhattan distance of a row-major grid", str(dat))
    grid_is_a = shape_a is not None
    rows, cols = shape_a if grid_is_a else shape_b
    flow = B if grid_is_a else A
    name = dat.stem
    out = {
        "problem": "placement",
        "name": name,
        "description": f"QAPLIB {name}: {n} facilities on a {rows} x {cols} grid "
                       f"(matrix {'A' if grid_is_a else 'B'} is the grid distance), as stage placement",
        "source": f"QAPLIB (Burkard, Karisch, Rendl), {dat.name}; converted by wafopt import-qaplib",
        "mesh": {"rows": rows, "cols": cols},
        "tile": [1, 1],
        "flow_matrix": [[int(v) if float(v).is_integer() else float(v) for v in row] for row in flow],
    }
    if sln_path is not None:
        sln = Path(sln_path)
        _, value, _ = read_sln(sln)
        solution_slots(A, B, sln)  # checks the permutation reproduces the stated value
        out["known_optimum"] = {"value": value, "source": f"QAPLIB {sln.name}",
                                "proven": name not in OPEN_INSTANCES}
    return out


def solution_slots(A: np.ndarray, B: np.ndarray, sln_path: str | Path) -> np.ndarray:
    """Grid location (row-major index) of each stage in the .sln permutation.

    QAPLIB's convention is location i holds facility p(i); a few files (e.g. tho30) list the
    inverse permutation, so both readings are tried and the one reproducing the value is used.
    """
    n_sln, value, perm = read_sln(sln_path)
    n = A.shape[0]
    if n_sln != n:
        raise InstanceError(f"solution has n = {n_sln}, the instance n = {n}", str(sln_path))
    p = np.array(perm) - 1
    grid_is_a = grid_shape(A) is not None
    costs = []
    for q in (p, np.argsort(p)):
        costs.append(float((A * B[np.ix_(q, q)]).sum()))
        if costs[-1] == value:
            # A is the grid: facility (stage) f sits at location q^-1(f); else item i sits at q(i)
            return np.argsort(q) if grid_is_a else q
    raise InstanceError(f"the permutation costs {costs[0]:g} (inverse: {costs[1]:g}), the file states "
                        f"{value:g}", str(sln_path))


def known_plan(dat_path: str | Path, sln_path: str | Path) -> dict:
    """The .sln permutation as a placement plan (stage -> [row, col])."""
    A, B = read_dat(dat_path)
    rows, cols = grid_shape(A) or grid_shape(B)
    return {"tile": [1, 1], "assignment": [[int(k) // cols, int(k) % cols]
                                           for k in solution_slots(A, B, sln_path)]}


def write_instance(dat: str | Path, sln: str | Path | None = None, out_dir: str | Path = ".") -> Path:
    """Convert and write OUT_DIR/NAME.yaml; returns the path."""
    mapping = convert(dat, sln)
    out = Path(out_dir) / f"{Path(dat).stem}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(mapping, sort_keys=False, default_flow_style=None, width=200))
    return out
