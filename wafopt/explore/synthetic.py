"""A closed-form stand-in for the fidelity ladder, with injected model errors.

It answers every fidelity from a simple first-order wafer model (WATOS Sec. V: time =
max(compute, DRAM access) + communication / D2D bandwidth) and "simulates" by multiplying the
analytic value by 1 + delta, with delta in [-error, error] drawn per design and workload from a
hash. It exists to test the exploration's guarantee (the optimum under F3 survives pruning for
any model error up to epsilon) and its bookkeeping (store, resume, workers) quickly, without the
planner; `wafopt explore` uses wafopt.explore.fidelity.
"""

from __future__ import annotations

import hashlib

LOWER = 0.9   # F0 is this fraction of the analytic value: a valid, loose bound
FAST = 1.15   # F1's plan is this much slower than F2's


def analytic(design: dict, workload: dict) -> float:
    size = float(workload["data"].get("size", 1.0))
    dies = design["rows"] * design["cols"]
    compute = size * 1e3 / (dies * design["die_tflops"])
    memory = size * 40.0 / (dies * design["dram_tbps"]) if design["dram_gb"] * dies >= size * 200 else 1e3
    comm = size * 2.0 / design["link_tbps"] / (design["rows"] + design["cols"])
    return max(compute, memory) + comm


def delta(design: dict, workload: dict, error: float) -> float:
    h = hashlib.sha256(f"{design['id']}|{workload['name']}".encode()).digest()
    return error * (2 * int.from_bytes(h[:8], "big") / 2 ** 64 - 1)


def evaluate(task: dict, error: float = 0.1) -> dict:
    design, workload, fidelity = task["design"], task["workload"], task["fidelity"]
    value = analytic(design, workload)
    if value >= 1e3:
        return {"feasible": False, "bound": None, "value": None, "plan": None, "note": "does not fit"}
    if fidelity == "F0":
        return {"feasible": True, "bound": LOWER * value, "value": None, "plan": None, "note": ""}
    if fidelity == "F1":
        return {"feasible": True, "bound": LOWER * value, "value": FAST * value,
                "plan": {"design": design["id"], "fast": True}, "note": ""}
    if fidelity == "F2":
        return {"feasible": True, "bound": LOWER * value, "value": value, "plan": {"design": design["id"]},
                "note": ""}
    planned = FAST * value if task["plan"].get("fast") else value   # the analytic value of the plan simulated
    return {"feasible": True, "bound": None, "value": planned * (1 + delta(design, workload, error)),
            "plan": None, "note": ""}


class WithError:
    """evaluate() with a fixed injected error, picklable for Dask workers."""

    def __init__(self, error: float):
        self.error = error

    def __call__(self, task: dict) -> dict:
        return evaluate(task, self.error)
