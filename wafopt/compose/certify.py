"""Independent re-check of a solution file (`wafopt certify`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from wafopt.problems import evaluate
from wafopt.compose.derive import derive
from wafopt.problems import parse_instance
from wafopt.core.files import read_mapping
from wafopt.core.solution import read_solution
from wafopt.core.numeric import relative_gap

TOLERANCE = 1e-6  # relative agreement required between stored and re-evaluated objective


@dataclass
class Report:
    certified: bool
    gap: float | None = None
    lines: list[str] = field(default_factory=list)


def certify(solution_path: str, instance_path: str | None = None) -> Report:
    """Passes only if: the instance hash matches, the plan is feasible, the stored objective equals
    the re-evaluated one (relative 1e-6), and bound <= objective. The gap is recomputed."""
    sol = read_solution(solution_path)
    lines: list[str] = [f"solution {solution_path}: {sol.problem} by {sol.method} ({sol.solver}), "
                        f"status {sol.status}"]
    failures: list[str] = []
    path = instance_path or sol.instance
    if path is None:
        return Report(False, None, lines + ["NOT CERTIFIED: the solution names no instance; pass --instance"])
    resolved = Path(path)
    if not resolved.exists() and not Path(path).is_absolute():
        # solutions store paths relative to the directory they were solved from (the repo root)
        candidate = Path(solution_path).resolve().parent.parent / path
        resolved = candidate if candidate.exists() else resolved
    data, digest = read_mapping(resolved)
    if sol.instance_sha256 and digest != sol.instance_sha256:
        failures.append(f"instance {path} has changed since it was solved (sha256 {digest[:12]}... "
                        f"!= stored {sol.instance_sha256[:12]}...)")
    loaded = parse_instance(data, str(path), digest)
    if sol.derived_from or loaded.problem != sol.problem:
        loaded = derive(loaded, sol.problem)
    if sol.plan is None:
        failures.append(f"no plan to certify (status {sol.status})")
        ev = None
    else:
        ev = evaluate(loaded.problem, loaded.instance, sol.plan)
        if not ev.feasible:
            failures.append("plan is infeasible: " + "; ".join(ev.violations[:5]))
        elif sol.objective is None or ev.objective is None or \
                abs(ev.objective - sol.objective) > TOLERANCE * max(1.0, abs(ev.objective)):
            failures.append(f"stored objective {sol.objective} != re-evaluated {ev.objective}")
        lines.append(f"re-evaluated objective {ev.objective}")
    gap = None
    if ev is not None and ev.objective is not None and sol.bound is not None:
        if sol.bound > ev.objective + TOLERANCE * max(1.0, abs(ev.objective)):
            failures.append(f"bound {sol.bound} exceeds the objective {ev.objective}")
        gap = relative_gap(ev.objective, sol.bound)
        lines.append(f"bound {sol.bound}; certified gap {gap:.6%}" if gap is not None else f"bound {sol.bound}")
    elif ev is not None:
        lines.append("no proven bound: the plan is certified feasible, its gap is unknown")
    if sol.status == "optimal" and (gap is None or gap > TOLERANCE):
        failures.append("status optimal but the bound does not close the gap")
    if failures:
        lines += [f"NOT CERTIFIED: {f}" for f in failures]
        return Report(False, gap, lines)
    lines.append("CERTIFIED" + (" optimal" if gap == 0 else ""))
    return Report(True, gap, lines)

