"""The compiled placement kernels are made ready before a method's clock: on a cold numba cache (a
fresh install) they are compiled first, said once, and a time limit holds for the solve itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMPILING = "compiling the placement kernels"


def solve(instance: str, method: str, out: Path, cache: Path) -> subprocess.CompletedProcess:
    # numba keeps its cache in NUMBA_CACHE_DIR when set: an empty one is a fresh install's
    return subprocess.run([sys.executable, "-m", "wafopt", "solve", instance, "--method", method,
                           "--time-limit", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "NUMBA_CACHE_DIR": str(cache)})


@pytest.mark.parametrize("instance, method", [("instances/placement/pl-sparse-12.yaml", "local"),
                                              ("instances/placement/qaplib/nug12.yaml", "qpb")])
def test_a_cold_cache_compiles_before_the_clock_and_says_so_once(tmp_path, instance, method):
    """The local search on a pipeline (its compiled walk) and the QPB: the first run compiles every
    kernel, the next run of another method compiles none."""
    cache = tmp_path / "numba"
    first = solve(instance, method, tmp_path / "first.json", cache)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count(COMPILING) == 1
    # the compiling (about 10 s) is not the method's: its reported time stays within the limit
    assert json.loads((tmp_path / "first.json").read_text())["time_s"] <= 1.5
    assert any(cache.rglob("*.nbi"))
    again = solve("instances/placement/pl-sparse-16.yaml", "bnb", tmp_path / "again.json", cache)
    assert again.returncode == 0, again.stderr
    assert COMPILING not in again.stderr


def test_kernels_load_before_the_clock_only_where_a_method_uses_them():
    """The local search loads numba before its clock on a pipeline (its walk start), not on a QAPLIB
    instance, whose start has no walk (a run there loads no numba at all)."""
    from wafopt.heuristics.placement import on_a_pipeline
    from wafopt.problems import load

    assert on_a_pipeline(load(ROOT / "instances/placement/pl-sparse-12.yaml").instance)
    assert not on_a_pipeline(load(ROOT / "instances/placement/qaplib/nug12.yaml").instance)
    code = ("import sys; from wafopt.core.registry import load_libraries; from wafopt.heuristics.placement import local; "
            "from wafopt.problems import load; load_libraries(local, load(sys.argv[1]).instance); "
            "print('numba' in sys.modules)")
    for path, expected in (("instances/placement/qaplib/nug12.yaml", "False"),
                           ("instances/placement/pl-sparse-12.yaml", "True")):
        done = subprocess.run([sys.executable, "-c", code, path], cwd=ROOT, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.stdout.strip() == expected, done.stderr


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
