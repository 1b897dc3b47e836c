"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml) are kept, no
two top-level parts of the package import each other, and no module imports itself back through
others (imports inside functions count: grimp reads them too).

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


IMPORTS = """
import json, grimp
graph = grimp.build_graph("wafopt", cache_dir=None)
print(json.dumps({m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}))
"""


def import_cycles(imports: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or one importing itself
    (Tarjan's algorithm, iterative: the package is deeper than Python's recursion is safe for)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(imports):
        if root in order:
            continue
        work = [(root, iter(sorted(imports.get(root, ()))))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            for target in targets:
                if target not in order:
                    order[target] = low[target] = len(order)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(imports.get(target, ())))))
                    break
                if target in on_stack:
                    low[module] = min(low[module], order[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == order[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1 or module in imports.get(module, ()):
                        cycles.append(sorted(component))
    return sorted(cycles)


def test_import_cycles_are_found_however_they_are_nested():
    imports = {"a": ["b"], "b": ["c", "d"], "c": ["a"], "d": ["e"], "e": ["d"], "f": ["f"], "g": ["a"]}
    assert import_cycles(imports) == [["a", "b", "c"], ["d", "e"], ["f"]]
    assert import_cycles({"a": ["b"], "b": ["c"], "c": []}) == []


@needs_import_linter
def test_no_import_cycles_between_modules(package_tree):
    out = subprocess.run([sys.executable, "-c", IMPORTS], cwd=package_tree, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    imports = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"wafopt.planner.search", "wafopt.costmodel.plan", "wafopt.api", "wafopt.cli"} <= set(imports)
    assert import_cycles(imports) == []
