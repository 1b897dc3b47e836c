"""Every shipped instance validates; every committed solution is certified or a solver's claim,
never invalid."""

import json
import subprocess
from pathlib import Path

import pytest

from wafopt.problems import load
from wafopt.run.certify import CERTIFIED, CLAIMED, certify

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = sorted(p for ext in ("yaml", "yml", "json") for p in (ROOT / "instances").rglob(f"*.{ext}"))


def committed_solutions() -> list[Path]:
    """The solutions git tracks: a user's own runs written beside them in solutions/ are not shipped
    (every file there when git cannot tell)."""
    every = sorted((ROOT / "solutions").glob("*.json"))
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", "solutions"], cwd=ROOT, capture_output=True,
                                timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return every
    tracked = {ROOT / name for name in listed.decode().split("\0") if name}
    return [path for path in every if path in tracked] if tracked else every


SOLUTIONS = committed_solutions()


@pytest.mark.parametrize("path", INSTANCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_instance_validates(path, at_root):
    loaded = load(path)
    # kernel instances live under instances/<problem>/; scenarios may sit beside the kernels they feed
    assert loaded.problem in path.parts or loaded.problem == "plan"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_is_certified_or_claimed_never_invalid(path, at_root):
    """Certified (exit 0), or a solver's bound not re-derived here (exit 4); never invalid (exit 5).
    A solution with a plan whose bound carries a certificate must be certified (without a plan,
    its status is the method's claim)."""
    report = certify(str(path))
    assert report.verdict in (CERTIFIED, CLAIMED), "\n".join(report.lines)
    stored = json.loads(path.read_text())
    if stored.get("bound_provenance") == "certificate" and stored.get("plan") is not None:
        assert report.verdict == CERTIFIED, "\n".join(report.lines)


def test_something_is_shipped():
    assert INSTANCES and SOLUTIONS
