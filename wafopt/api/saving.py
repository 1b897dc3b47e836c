"""Where solutions go: the default file name, and never replacing a better solution silently."""

from __future__ import annotations

from pathlib import Path

from wafopt.api.solving import Instance, Result
from wafopt.core.errors import InstanceError
from wafopt.core.numeric import close
from wafopt.core.solution import Solution, read_solution

SOLUTIONS_DIR = Path("solutions")


def default_solution_name(instance: Instance, method: str) -> str:
    """<instance-stem>[.<problem> if derived from a scenario].<method>.json"""
    stem = Path(instance.path).stem if instance.path else instance.name
    derived = f".{instance.problem}" if instance.derived_from else ""
    return f"{stem}{derived}.{method}.json"


def _weaker(new: Solution, old: Solution) -> list[str]:
    """What the existing solution has that the new one would lose."""
    lost = []
    if old.objective is not None and (new.objective is None or
                                      (new.objective > old.objective and not close(new.objective, old.objective))):
        lost.append(f"a better objective ({old.objective:.10g})")
    if old.bound is not None and (new.bound is None or
                                  (new.bound < old.bound and not close(new.bound, old.bound))):
        lost.append(f"a stronger bound ({old.bound:.10g})")
    return lost


def save(result: Result, instance: Instance, out: str | Path | None = None) -> tuple[Path, str]:
    """Write the solution: to `out` (a file, or a directory to write into), else to
    solutions/<default name>. An existing solution of the same instance with a better objective
    or a stronger bound is never replaced silently: the default and directory targets keep it and
    write beside it; an explicit file is replaced with a note. Returns (path, note)."""
    name = default_solution_name(instance, result.method)
    explicit = out is not None and not (Path(out).is_dir() or str(out).endswith(("/", "\\")))
    target = Path(out) if explicit else (Path(out) if out is not None else SOLUTIONS_DIR) / name
    note = ""
    if target.is_file():
        try:
            old = read_solution(target)
        except InstanceError:
            old = None
        same = old is not None and old.problem == result.problem and old.instance_sha256 == \
            result.solution.instance_sha256
        lost = _weaker(result.solution, old) if same else []
        if lost and explicit:
            note = f"replaced {target}, which had {' and '.join(lost)}"
        elif lost:
            k = 1
            while (beside := target.with_name(f"{target.stem}.{k}.json")).exists():
                k += 1
            note = f"kept {target} ({' and '.join(lost)}); wrote this run beside it"
            target = beside
    return result.write(target), note
