from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def at_root(monkeypatch):
    """Run from the repository root, where instance paths in solution files are relative to."""
    monkeypatch.chdir(ROOT)
    return ROOT


def pytest_sessionstart(session):
    """Compile the placement kernels before any test runs (numba caches them beside their modules,
    as a method's runner does before its clock: wafopt.problems.placement.kernels), so no test in
    process pays for compiling them and no CLI run under test says it compiles."""
    import wafopt.problems.placement.kernels  # noqa: F401
