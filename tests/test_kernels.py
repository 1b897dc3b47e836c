"""The compiled placement kernels are made ready before a method's clock: on a cold numba cache (a
fresh install) they are compiled first, said once, and a time limit holds for the solve itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPILING = "compiling the placement kernels"


def solve(method: str, out: Path, cache: Path) -> subprocess.CompletedProcess:
    # numba keeps its cache in NUMBA_CACHE_DIR when set: an empty one is a fresh install's
    return subprocess.run([sys.executable, "-m", "wafopt", "solve", "instances/placement/qaplib/nug12.yaml",
                           "--method", method, "--time-limit", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "NUMBA_CACHE_DIR": str(cache)})


def test_a_cold_cache_compiles_before_the_clock_and_says_so_once(tmp_path):
    cache = tmp_path / "numba"
    first = solve("qpb", tmp_path / "first.json", cache)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count(COMPILING) == 1
    # the compiling (about 10 s) is not the method's: its reported time stays within the limit
    assert json.loads((tmp_path / "first.json").read_text())["time_s"] <= 1.5
    assert any(cache.rglob("*.nbi"))
    again = solve("bnb", tmp_path / "again.json", cache)
    assert again.returncode == 0, again.stderr
    assert COMPILING not in again.stderr


def test_prepare_compiles_only_what_the_cache_lacks(monkeypatch, capsys):
    from wafopt.problems.placement import kernels

    calls = []
    monkeypatch.setattr(kernels, "compile_kernels", lambda: calls.append(1))
    monkeypatch.setattr(kernels, "in_cache", lambda kernel: True)
    kernels.prepare()
    assert not calls and COMPILING not in capsys.readouterr().err
    missing = kernels.kernels()[1]
    monkeypatch.setattr(kernels, "in_cache", lambda kernel: kernel is not missing)
    kernels.prepare()
    assert calls == [1] and COMPILING in capsys.readouterr().err


def test_every_kernel_is_in_the_cache_after_the_test_session_started():
    """conftest imports wafopt.problems.placement.kernels, which compiles what the cache lacks:
    every kernel is then cached for the argument types its callers give it."""
    from wafopt.problems.placement import kernels

    assert all(kernels.in_cache(kernel) for kernel in kernels.kernels())
