"""Every shipped instance validates; every committed solution certifies."""

from pathlib import Path

import pytest

from wafopt.compose.certify import certify
from wafopt.problems import load

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = sorted(p for ext in ("yaml", "yml", "json") for p in (ROOT / "instances").rglob(f"*.{ext}"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.json"))


@pytest.mark.parametrize("path", INSTANCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_instance_validates(path, at_root):
    loaded = load(path)
    # kernel instances live under instances/<problem>/; scenarios may sit beside the kernels they feed
    assert loaded.problem in path.parts or loaded.problem == "plan"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_certifies(path, at_root):
    report = certify(str(path))
    assert report.certified, "\n".join(report.lines)


def test_something_is_shipped():
    assert INSTANCES and SOLUTIONS
