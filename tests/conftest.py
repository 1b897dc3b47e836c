from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def at_root(monkeypatch):
    """Run from the repository root, where instance paths in solution files are relative to."""
    monkeypatch.chdir(ROOT)
    return ROOT
