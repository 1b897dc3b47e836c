"""A command imports what it uses: the tables of methods, schemas and checkers are References
(wafopt.core.registry), which import what they name on first lookup."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wafopt.core.registry import PROBLEMS, References
from wafopt.problems import DOCUMENTS, EVALUATORS, INSTANCE_MODULES
from wafopt.run.certify import CERTIFICATES
from wafopt.run.methods import METHODS, methods
from wafopt.run.runner import SOLVE_TIME_BOUNDS

ROOT = Path(__file__).resolve().parents[1]

# what a placement command never needs: the planner, the cost model, the explorer, the simulator,
# pymoo (the GA loads it when it runs), the other problems and the scenario kernels' heuristics
NOT_FOR_PLACEMENT = ("wafopt.planner.", "wafopt.costmodel", "wafopt.explore", "wafopt.simulate", "pymoo",
                     "wafopt.problems.plan.", "wafopt.problems.recompute", "wafopt.problems.mem_pair",
                     "wafopt.problems.tatp", "wafopt.problems.routing", "wafopt.heuristics.recompute",
                     "wafopt.heuristics.tatp", "wafopt.compose.methods")

PROBE = """
import json, sys
import wafopt.cli.app
from wafopt.run.methods import method_function, methods
names = list(methods("placement"))
started = sorted(sys.modules)
from wafopt.problems import load
load(sys.argv[1])
method_function("placement", "bnb")
print(json.dumps({"names": names, "started": started, "bnb": sorted(sys.modules)}))
"""


def test_the_command_line_and_a_placement_method_load_no_other_layer_or_problem(tmp_path):
    instance = str(ROOT / "instances" / "placement" / "pl-sparse-24.yaml")
    out = subprocess.run([sys.executable, "-c", PROBE, instance], capture_output=True, text=True, check=True,
                         cwd=tmp_path)
    seen = json.loads(out.stdout)
    assert {"local", "ga", "bnb", "cpsat", "milp"} <= set(seen["names"])
    for stage in ("started", "bnb"):
        loaded = [m for m in seen[stage] if m.startswith(NOT_FOR_PLACEMENT)]
        assert not loaded, f"{stage}: {loaded}"
    assert "wafopt.compose.placement" in seen["bnb"] and "wafopt.compose.placement" not in seen["started"]


def test_references_import_on_first_lookup_only(tmp_path, monkeypatch):
    (tmp_path / "wafopt_reference_probe.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "wafopt_reference_probe", raising=False)
    refs = References({"value": "wafopt_reference_probe:VALUE", "module": "wafopt_reference_probe"})
    assert list(refs) == ["value", "module"] and len(refs) == 2
    assert "value" in refs and "other" not in refs
    assert "wafopt_reference_probe" not in sys.modules
    assert refs["value"] == 42
    assert refs["module"] is sys.modules["wafopt_reference_probe"]
    with pytest.raises(KeyError):
        refs["other"]
    assert refs.get("other") is None


def test_every_reference_of_the_tables_resolves():
    for problem in PROBLEMS:
        assert all(callable(fn) for fn in methods(problem).values()), problem
        assert DOCUMENTS[problem].__name__.endswith("Document")
        assert hasattr(INSTANCE_MODULES[problem], "summary") and callable(EVALUATORS[problem])
        assert callable(CERTIFICATES[problem].check)
    assert set(METHODS) == set(PROBLEMS) and callable(SOLVE_TIME_BOUNDS["plan"])
