from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def at_root(monkeypatch):
    """Run from the repository root, where instance paths in solution files are relative to."""
    monkeypatch.chdir(ROOT)
    return ROOT


def pytest_sessionstart(session):
    """Compile the placement QPB's Frank-Wolfe steps before any test runs (numba caches them beside
    the module), so no timed or interrupted CLI run under test pays for compiling them."""
    import numpy as np

    from wafopt.problems.placement.projected import frank_wolfe

    one = np.ones((1, 2, 2))
    frank_wolfe(one, one, None, one, one, 1)
