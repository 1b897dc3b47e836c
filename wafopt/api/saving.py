"""Where solutions go: the default file name, never modifying a file git tracks, and never replacing a
better solution."""

from __future__ import annotations

import subprocess
from pathlib import Path

from wafopt.api.solving import Instance, Result
from wafopt.core.errors import InstanceError
from wafopt.core.numeric import close
from wafopt.core.solution import Solution, read_solution

SOLUTIONS_DIR = Path("solutions")
GIT_TIMEOUT_S = 5.0    # asking git whether a file is tracked; a slower git counts as no git


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


def _tracked_by_git(path: Path) -> bool:
    """Whether git tracks this file (a reference shipped with a checkout); False without git."""
    try:
        done = subprocess.run(["git", "ls-files", "--error-unmatch", "--", path.name], cwd=path.parent,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _compared(new: Solution, old: Solution) -> str:
    """'better', 'equal' or 'worse': the new solution against the one it would have replaced."""
    if new.objective is None or old.objective is None:
        return "equal" if new.objective is old.objective else ("worse" if new.objective is None else "better")
    if not close(new.objective, old.objective):
        return "better" if new.objective < old.objective else "worse"
    # the same objective: the stronger bound is the better result
    if new.bound is None or old.bound is None:
        return "equal" if new.bound is old.bound else ("worse" if new.bound is None else "better")
    if not close(new.bound, old.bound):
        return "better" if new.bound > old.bound else "worse"
    return "equal"


def _numbers(solution: Solution) -> str:
    bound = "" if solution.bound is None else f", bound {solution.bound:.10g}"
    return ("no plan" if solution.objective is None else f"objective {solution.objective:.10g}") + bound


def _first_free(target: Path) -> Path:
    k = 1
    while (beside := target.with_name(f"{target.stem}.{k}.json")).exists():
        k += 1
    return beside


def save(result: Result, instance: Instance, out: str | Path | None = None) -> tuple[Path, str]:
    """Write the solution: to `out` (a file, or a directory to write into), else to
    solutions/<default name>. A file tracked by git (a shipped reference) is never modified: this
    run goes beside it as <stem>.new.json, with a note saying whether it is better, equal or worse.
    An existing solution of the same instance with a better objective or a stronger bound is never
    replaced, whether named or found in the target directory: it is kept and this run written beside
    it (<stem>.<k>.json), with a note. Returns (path, note)."""
    name = default_solution_name(instance, result.method)
    explicit = out is not None and not (Path(out).is_dir() or str(out).endswith(("/", "\\")))
    target = Path(out) if explicit else (Path(out) if out is not None else SOLUTIONS_DIR) / name
    notes = []
    if target.is_file() and _tracked_by_git(target):
        old = _same_instance_solution(target, result)
        beside = target.with_name(f"{target.stem}.new.json")
        if old is None:
            verdict = "not comparable (the reference solves another version of the instance)"
        else:
            verdict = f"{_compared(result.solution, old)} ({_numbers(result.solution)}; the reference: " \
                f"{_numbers(old)})"
        notes.append(f"{target} is tracked by git and is kept; this run's result is {verdict}, written beside "
                     f"it as {beside}")
        target = beside
    if target.is_file():
        old = _same_instance_solution(target, result)
        lost = _weaker(result.solution, old) if old is not None else []
        if lost:
            beside = _first_free(target)
            notes.append(f"kept {target} ({' and '.join(lost)}); wrote this run beside it as {beside}")
            target = beside
    return result.write(target), "; ".join(notes)


def _same_instance_solution(path: Path, result: Result) -> Solution | None:
    """The solution in `path` when it solves the same instance and problem as `result`, else None."""
    try:
        old = read_solution(path)
    except InstanceError:
        return None
    same = old.problem == result.problem and old.instance_sha256 == result.solution.instance_sha256
    return old if same else None
