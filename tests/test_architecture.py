"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml) are kept, and
no two top-level parts of the package import each other.

The formulations live in the top-level `models/` directory and are shipped as `wafopt.models`, so
the checks run on a tree of symlinks that puts them where the installed package has them.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

needs_import_linter = pytest.mark.skipif(
    shutil.which("lint-imports") is None or importlib.util.find_spec("grimp") is None,
    reason="import-linter is not installed (pip install -e '.[test]')")


@pytest.fixture(scope="module")
def package_tree(tmp_path_factory) -> Path:
    """tmp/wafopt with every entry of the source package plus `models` as wafopt/models."""
    top = tmp_path_factory.mktemp("tree")
    (top / "wafopt").mkdir()
    for entry in (ROOT / "wafopt").iterdir():
        if entry.name not in ("__pycache__", "models"):   # a checkout may link models there itself
            (top / "wafopt" / entry.name).symlink_to(entry)
    (top / "wafopt" / "models").symlink_to(ROOT / "models")
    return top


@needs_import_linter
def test_import_linter_contracts_are_kept(package_tree):
    out = subprocess.run(["lint-imports", "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                         cwd=package_tree, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "BROKEN" not in out.stdout and "broken" in out.stdout   # "Contracts: N kept, 0 broken."


CYCLES = """
import json, grimp
graph = grimp.build_graph("wafopt", cache_dir=None)
parts = sorted(m for m in graph.find_children("wafopt"))
both_ways = []
for k, a in enumerate(parts):
    for b in parts[k + 1:]:
        there = graph.find_shortest_chain(a, b, as_packages=True)
        back = graph.find_shortest_chain(b, a, as_packages=True)
        if there and back:
            both_ways.append([list(there), list(back)])
print(json.dumps({"parts": parts, "cycles": both_ways}))
"""


@needs_import_linter
def test_no_import_cycles_between_top_level_parts(package_tree):
    out = subprocess.run([sys.executable, "-c", CYCLES], cwd=package_tree, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"wafopt.core", "wafopt.models", "wafopt.heuristics", "wafopt.compose"} <= set(report["parts"])
    assert report["cycles"] == [], "\n".join(" -> ".join(there) + "  and back:  " + " -> ".join(back)
                                             for there, back in report["cycles"])
