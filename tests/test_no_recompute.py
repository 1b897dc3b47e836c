"""`training: {recompute: false}` forbids recomputation (WATOS Sec. V-B compares wafers with and
without it): the evaluator rejects any recomputing plan, GCMR and the planner keep every
activation, and the certified layout bound can only rise."""

from pathlib import Path

import pytest
import yaml

import wafopt
from wafopt.core.numeric import at_most
from wafopt.costmodel.scenario import Choice, Parallel
from wafopt.planner.full_bound import layout_bound

ROOT = Path(__file__).resolve().parents[1]


def scenario(name: str, recompute: bool, parallel: dict | None = None) -> dict:
    data = yaml.safe_load((ROOT / "instances" / "plan" / name).read_text())
    data["training"]["recompute"] = recompute
    if parallel is not None:
        data["parallel"] = parallel
    return data


def recomputed_layers(plan: dict) -> int:
    return sum(sum(row) for row in plan.get("recompute") or [] if isinstance(row, list))


def test_the_evaluator_rejects_recomputation_when_forbidden():
    allowed = wafopt.solve(wafopt.load(scenario("gpt3-175b-config3.yaml", True)), "gcmr", time_limit=10)
    assert allowed.plan is not None and recomputed_layers(allowed.plan) > 0   # memory forces it here
    forbidden = wafopt.load(scenario("gpt3-175b-config3.yaml", False))
    for plan in (allowed.plan, dict(allowed.plan, recompute=["full"] * allowed.plan["pp"])):
        ev = wafopt.evaluate(forbidden, plan)
        assert not ev.feasible and any("training.recompute" in v for v in ev.violations), ev.violations
    # the same layout cannot hold every activation, even pooled: GCMR says so instead of recomputing
    res = wafopt.solve(forbidden, "gcmr", time_limit=10)
    assert res.plan is None and "Mem_pair" in res.message


def test_gcmr_and_the_planner_keep_every_activation_and_offload_when_forbidden():
    from wafopt.core.budget import SolveOptions
    from wafopt.planner.compose import pooled_recompute

    layout = {"tp": 8, "pp": 5, "dp": 1}
    forbidden = wafopt.load(scenario("llama3-70b-config3-search.yaml", False, layout))
    res = wafopt.solve(forbidden, "gcmr", time_limit=10)
    assert res.plan is not None and recomputed_layers(res.plan) == 0 and res.plan["offload"]
    assert wafopt.evaluate(forbidden, res.plan).feasible
    placement = {k: v for k, v in res.plan.items() if k not in ("recompute", "offload")}
    rows, how = pooled_recompute(forbidden.instance, placement, 1.0, SolveOptions(time_limit=5).start())
    assert recomputed_layers({"recompute": rows}) == 0 and "forbidden" in how


@pytest.mark.parametrize("tp,pp,dp", [(8, 7, 1), (14, 4, 1), (28, 2, 1), (4, 8, 1)])
def test_forbidding_recomputation_never_lowers_the_certified_bound(tp, pp, dp):
    par = Parallel(tp, pp, dp)
    allowed = layout_bound(wafopt.load(scenario("gpt3-175b-config3-search.yaml", True)).instance, Choice(par))
    forbidden = layout_bound(wafopt.load(scenario("gpt3-175b-config3-search.yaml", False)).instance, Choice(par))
    if forbidden.feasible:
        assert allowed.feasible and at_most(allowed.value, forbidden.value)
    else:
        assert "every activation" in forbidden.reason or not allowed.feasible
