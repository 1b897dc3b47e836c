"""The joint planner (`--method plan`): brute force on tiny scenarios, the certified layout bound
against random feasible plans, pruning, workers, faults, and its certificate."""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import wafopt
from wafopt.core.budget import SolveOptions
from wafopt.core.numeric import at_most, close
from wafopt.costmodel.rules import legal_schemes
from wafopt.costmodel.scenario import Choice, Fixed, Parallel
from wafopt.planner.full_bound import layout_bound
from wafopt.planner.ga_operators import (
    INFEASIBLE,
    Plans,
    mutate,
    omega_survivors,
    op0_layout_change,
    op1_recompute,
    op2_recompute_crossover,
    op3_placement,
    op4_mem_pair,
    op5_mem_pair_crossover,
    op6_move_layer,
    recombine,
    shifted,
)
from wafopt.planner.layout_data import layout_data
from wafopt.planner.lp_bound import refine
from wafopt.planner.quick_bound import quick_bound
from wafopt.planner.space import layout_choices, layout_space
from wafopt.problems import evaluate, load, parse_instance
from wafopt.problems.plan.layouts import serpentine_slots, tile_dies, tile_shapes

ROOT = Path(__file__).resolve().parent.parent

# A 4-layer model on a 2 x 4 wafer: global batch 11 (prime) leaves dp = 1.
TINY = {"problem": "plan", "name": "tiny-2x4",
        "wafer": {"rows": 2, "cols": 4, "die_tflops": 100, "dram_gb": 0.04, "dram_bw_tbps": 1, "link_bw_tbps": 0.5},
        "model": {"layers": 4, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 1000},
        "training": {"seq": 128, "micro_batch": 1, "global_batch": 11}}


def tiny(**parallel):
    data = copy.deepcopy(TINY)
    if parallel:
        data["parallel"] = parallel
    return parse_instance(data)


def solve(instance, **kwargs):
    return wafopt.solve(instance, "plan", **kwargs)


# --- brute force ------------------------------------------------------------------------------------

def tile_plans(scenario, par):
    """Every plan of the planner's tile space for `par`: each tile shape, each assignment of the
    stages to usable tiles, each TP scheme, no recomputation, no offloading."""
    mesh = scenario.mesh()
    legal = legal_schemes(scenario.llm, par.tp, scenario.wafer.parallel_rules)
    for h, w in tile_shapes(par.tp, mesh):
        slots = serpentine_slots(mesh, h, w)
        for chosen in itertools.permutations(slots, par.pp * par.dp):
            it = iter(chosen)
            pipes = [[[list(d) for d in tile_dies(next(it), h, w)] for _ in range(par.pp)] for _ in range(par.dp)]
            for schemes in itertools.product(legal, repeat=par.pp):   # one scheme per stage
                yield {"tp": par.tp, "pp": par.pp, "dp": par.dp, "tile": [h, w], "pipelines": pipes,
                       "tp_scheme": list(schemes)}


def ring_plans(scenario, par):
    """pp = dp = 1: every set of tp healthy dies in every cyclic order (up to rotation and reversal)."""
    mesh = scenario.mesh()
    for dies in itertools.combinations(sorted(mesh.healthy_dies), par.tp):
        first, rest = dies[0], dies[1:]
        for order in itertools.permutations(rest):
            if order and order[0] > order[-1]:
                continue   # the reversed ring is the same ring
            ring = [list(first)] + [list(d) for d in order]
            for scheme in legal_schemes(scenario.llm, par.tp, scenario.wafer.parallel_rules):
                yield {"tp": par.tp, "pp": 1, "dp": 1, "pipelines": [[ring]], "tp_scheme": scheme}


def compositions(layers: int, parts: int):
    """Every split of `layers` into `parts` contiguous stages of at least one layer."""
    for cuts in itertools.combinations(range(1, layers), parts - 1):
        bounds = (0,) + cuts + (layers,)
        yield [b - a for a, b in zip(bounds, bounds[1:])]


def brute_force(scenario, splits: bool = False):
    """{layout: least evaluated objective} over the brute-force space of every layout (and
    micro-batch size, where the scenario allows several); `splits`: every layer split too."""
    best = {}
    for choice in layout_choices(scenario):
        par, size = choice.parallel, choice.micro_batch
        plans = tile_plans(scenario, par) if tile_shapes(par.tp, scenario.mesh()) else (
            ring_plans(scenario, par) if par.pp * par.dp == 1 else iter(()))
        key = (par.tp, par.pp, par.dp, par.interleave) + (() if size is None else (size,))
        extra = ({} if size is None else {"micro_batch": size}) | ({"interleave": par.interleave}
                                                                  if par.interleave > 1 else {})
        for plan in plans:
            for layers in (compositions(scenario.llm.layers, par.pp) if splits else [None]):
                candidate = dict(plan, **extra, **({} if layers is None else {"layers": layers}))
                ev = evaluate("plan", scenario, candidate)
                if ev.feasible and (key not in best or ev.objective < best[key]):
                    best[key] = ev.objective
    return best


def check_against_brute_force(loaded, splits: bool = False):
    best = brute_force(loaded.instance, splits)
    assert best, "the brute force found no feasible plan"
    optimum_layout = min(best, key=best.get)
    result = solve(loaded, seed=0)
    assert result.objective is not None
    assert close(result.objective, best[optimum_layout]), (result.objective, best[optimum_layout], optimum_layout)
    assert at_most(result.bound.value, result.objective)
    rows = {(r["tp"], r["pp"], r["dp"], r["interleave"]) + ((r["micro_batch"],) if "micro_batch" in r else ()): r
            for r in result.solution.stats["candidates"]}
    for key, value in best.items():   # every layout bound is below every plan of that layout
        assert rows[key]["bound"] is not None and at_most(rows[key]["bound"], value), (key, rows[key], value)
    row = rows[optimum_layout]        # pruning never removes the optimum's layout
    assert row["status"] in ("solved", "optimal for its layout") or at_most(result.objective, row["bound"])
    return result


def test_brute_force_agrees_on_a_2x4_wafer_with_tp_fixed():
    result = check_against_brute_force(tiny(tp=2))
    assert {r["tp"] for r in result.solution.stats["candidates"]} == {2}


@pytest.mark.slow
def test_brute_force_agrees_on_the_whole_space_of_a_2x4_wafer():
    check_against_brute_force(tiny())


# 5 layers whose last stage also carries the LM head of a large vocabulary: the even split is not
# the best one; two micro-batch sizes.
SPLITS = {"problem": "plan", "name": "tiny-splits-2x4",
          "wafer": {"rows": 2, "cols": 4, "die_tflops": 100, "dram_gb": 0.05, "dram_bw_tbps": 1, "link_bw_tbps": 0.5},
          "model": {"layers": 5, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 12000},
          "training": {"seq": 128, "micro_batch": [1, 2], "global_batch": 6},
          "parallel": {"tp": 2}}


def splits_scenario(rows: int = 2, cols: int = 3, tmp_path=None):
    data = copy.deepcopy(SPLITS)
    data["wafer"].update(rows=rows, cols=cols)
    if tmp_path is None:
        return parse_instance(data)
    (tmp_path / "splits.yaml").write_text(json.dumps(data))
    return load(tmp_path / "splits.yaml")


def test_brute_force_over_splits_and_micro_batch_sizes_agrees_and_certifies(tmp_path):
    loaded = splits_scenario(tmp_path=tmp_path)   # 2 x 3: a few seconds
    best_even = brute_force(loaded.instance)
    result = check_against_brute_force(loaded, splits=True)
    assert result.objective < min(best_even.values()) * 0.99   # the split matters here
    assert result.plan["layers"] != [2, 2, 1] and "micro_batch" in result.plan
    assert {r["micro_batch"] for r in result.solution.stats["candidates"]} == {1, 2}

    path = result.solution.write(tmp_path / "splits.plan.json")
    report = wafopt.certify(path)
    assert report.verdict == "certified", report.lines
    rows = json.loads(path.read_text())["certificate"]["layouts"]
    assert {len(r) for r in rows} <= {6, 8} and {r[4] for r in rows} == {1, 2}   # [tp, pp, dp, v, mb, bound, ...]
    for tamper in ("raise", "drop"):
        forged = json.loads(path.read_text())
        rows = forged["certificate"]["layouts"]
        k = min((i for i, r in enumerate(rows) if r[5] is not None), key=lambda i: rows[i][5])
        if tamper == "raise":
            rows[k][5] *= 1.5
        else:
            del rows[k]
        (tmp_path / "forged.json").write_text(json.dumps(forged))
        assert wafopt.certify(tmp_path / "forged.json").verdict == "invalid", tamper


@pytest.mark.slow
def test_brute_force_over_splits_and_micro_batch_sizes_agrees_on_a_2x4_wafer():
    check_against_brute_force(splits_scenario(2, 4), splits=True)


def test_brute_force_agrees_on_an_interleaved_scenario():
    """parallel: {interleave: 2, tp: 2} leaves pp and dp to the planner: only layouts that split the
    layers into pp x 2 equal chunks and the micro-batches into groups of pp; the bound (the
    interleaved schedule's, with its in-flight chunks) stays below every plan."""
    data = copy.deepcopy(TINY)
    data["training"]["global_batch"] = 8
    data["wafer"]["dram_gb"] = 1.0
    data["parallel"] = {"interleave": 2, "tp": 2}
    loaded = parse_instance(data)
    assert {(c.parallel.pp, c.parallel.interleave) for c in layout_choices(loaded.instance)} == {(2, 2)}
    result = check_against_brute_force(loaded)
    assert result.solution.plan.get("interleave") == 2


def test_a_stage_never_frees_more_activation_memory_than_it_keeps():
    # the bound's numbers per scheme and sequence-parallel setting come from one stage each: the
    # bytes recomputation frees (every unit in every layer) are part of what that stage keeps, at
    # 16K tokens too, where sequence parallelism changes the activations fourfold
    scenario = load(ROOT / "instances" / "findings" / "temp-gpt3-175b-16k-search.yaml").instance
    for par in (Parallel(8, 6, 1), Parallel(16, 3, 1)):
        d = layout_data(scenario, Choice(par))
        assert {sp for _, sp in d.variants} == {False, True, None}
        assert (d.n[:, None] * d.ub.sum(axis=2) <= d.kept * (1 + 1e-9)).all()


def seven_layers_over_three_stages():
    """SPLITS with 7 layers and room for every split: (scenario, layout data of tp 2, pp 3)."""
    data = copy.deepcopy(SPLITS)
    data["model"]["layers"] = 7
    data["wafer"]["dram_gb"] = 1.0
    scenario = parse_instance(dict(data, parallel={"tp": 2, "pp": 3})).instance
    return scenario, layout_data(scenario, Choice(Parallel(2, 3, 1), micro_batch=1))


def test_schedule_bound_is_the_least_worst_inequality_over_every_split():
    """The DP + bisection of schedule_bound against enumerating every split of a layout: the
    least over splits of max_k (g_k, h_k) with the split's own first-stage optimizer step."""
    from wafopt.planner.full_bound import inequality_bound
    from wafopt.planner.layout_data import at_split, forward_counts, least_path

    _, d = seven_layers_over_three_stages()
    T = (d.Fc + d.Bc).min(axis=1)
    total = least_path(d, [T] * 3)[0]
    n = forward_counts(3, d.m)
    values = []
    for split in compositions(7, 3):
        idx, at = [], 0
        for (starts, cls, _), k in zip(d.arcs, split):
            idx.append(int(cls[int(np.nonzero(starts == at)[0][0]), at + k]))
            at += k
        s = at_split(d, split)
        t, f, b = T[idx], s.Fc.min(axis=1), s.Bc.min(axis=1)
        # with the pipeline sends: 2k on g_k's path, every boundary twice on h_k's
        g = np.concatenate([[0.0], np.cumsum(t)[:-1]]) + d.m * t + d.class_optimizer[idx[0]] + 2 * np.arange(3) * d.send_s
        h = d.optimizer + total + (d.m - 1) * b + (n - 1) * f + 2 * 2 * d.send_s
        values.append(max(g.max(), h.max()))
    assert min(values) > 0 and d.send_s > 0
    assert close(inequality_bound(d), min(values)) and inequality_bound(d) <= min(values)


def test_the_task_graph_bound_is_below_every_split_and_at_least_the_inequalities():
    """Step 8: the least longest path over every split, stages at their least times, is never
    above a plan of any split (tile plans without recomputation) and never below the worst
    inequality of step 6."""
    from wafopt.planner.full_bound import (
        every_split,
        inequality_bound,
        schedule_bound,
        task_graph_bound,
    )

    scenario, d = seven_layers_over_three_stages()
    par = d.layout
    classes = every_split(d, 10**6)
    assert classes.shape == (15, 3) and every_split(d, 14) is None     # C(6, 2) splits of 7 layers
    bound = task_graph_bound(d)
    assert bound > inequality_bound(d) > 0 and schedule_bound(d) == bound
    objectives = []
    for plan in itertools.islice(tile_plans(scenario, par), 4):
        for layers in compositions(7, 3):
            ev = evaluate("plan", scenario, dict(plan, layers=layers, micro_batch=1))
            if ev.feasible:
                objectives.append(ev.objective)
                assert at_most(bound, ev.objective), (layers, bound, ev.objective)
    assert len(objectives) > 30
    assert min(objectives) <= bound * 1.2   # and it is near the best of them


def test_a_stage_that_cannot_keep_its_own_state_is_no_arc_of_the_bound():
    # offloading moves activation checkpoints only: GPT-3 175B at tp 8 keeps at most 17 layers'
    # state on a 72 GB die, so the Lagrangian's least split never gives a stage more
    from wafopt.planner.full_bound import lagrangian
    from wafopt.planner.layout_data import MEMORY_SLACK

    scenario = load(ROOT / "instances" / "findings" / "temp-gpt3-175b-16k-search.yaml").instance
    bound = refine(layout_bound(scenario, Choice(Parallel(8, 6, 1))))
    d = bound.data
    die = scenario.wafer.dram_capacity * (1 + MEMORY_SLACK)
    assert all((d.fixed[used].min(axis=1) <= die).all() for _, _, used in d.arcs)
    assert (d.fixed.min(axis=1) > die).any()      # the longer stages exist, as no arc
    _, split = lagrangian(d, bound.w, bound.mu, with_split=True)
    assert sum(split) == 96 and max(split) <= 17


def test_infeasible_layouts_are_proven_and_never_composed(tiny_serial):
    _, result = tiny_serial
    rows = result.stats["candidates"]
    infeasible = [r for r in rows if r["status"] == "infeasible"]
    assert infeasible and all(r["bound"] is None and r["note"] for r in infeasible)
    assert all(r["objective"] is None for r in infeasible)
    # tp = pp = 1 cannot hold the model state on one 40 MB die
    assert any((r["tp"], r["pp"]) == (1, 1) for r in infeasible)


def test_partial_parallel_fixes_what_it_names():
    loaded = tiny(pp=2)
    assert loaded.instance.parallel is None and loaded.instance.fixed == Fixed(None, 2, None)
    result = solve(loaded)
    assert result.plan["pp"] == 2
    assert all(r["pp"] == 2 for r in result.solution.stats["candidates"])
    other = dict(result.plan, pp=1, pipelines=[[result.plan["pipelines"][0][0]]], recompute=None, offload=[])
    ev = evaluate("plan", loaded.instance, other)
    assert not ev.feasible and any("fixes pp=2" in v for v in ev.violations)
    full = tiny(tp=2, pp=2)   # tp and pp given: a fixed layout, as before
    assert full.instance.parallel is not None and (full.instance.parallel.tp, full.instance.parallel.pp) == (2, 2)


# --- the bound against random feasible plans --------------------------------------------------------

SHIPPED = ["gpt3-175b-config3", "gpt3-6.7b-config3-dp", "llama3-70b-config3", "llama3-70b-config3-faulty",
           "gpt3-175b-config3-mbs"]


def free(name):
    loaded = load(ROOT / "instances" / "plan" / f"{name}.yaml")
    return replace(loaded.instance, parallel=None, fixed=Fixed())


def random_split(layers: int, pp: int, rng) -> list[int]:
    cuts = sorted(int(c) + 1 for c in rng.choice(layers - 1, pp - 1, replace=False))
    bounds = [0] + cuts + [layers]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def random_plan(scenario, par, rng, micro_batch=None, split=None):
    """A random plan of layout `par` (and micro-batch size): random tiles or scattered dies in
    random order, half the time the layer split `split` (default: a random one), a random scheme
    and random recomputation per stage (the scenario's forced policy where it has one), and the
    overflow paired with random helpers."""
    mesh = scenario.mesh()
    healthy = list(mesh.healthy_dies)
    shapes = [(h, w) for h, w in tile_shapes(par.tp, mesh) if len(serpentine_slots(mesh, h, w)) >= par.pp * par.dp]
    if shapes and rng.random() < 0.7:   # random tiles in random order (scattered dies cost more to evaluate)
        h, w = shapes[int(rng.integers(len(shapes)))]
        slots = serpentine_slots(mesh, h, w)
        chosen = iter(rng.permutation(len(slots))[:par.pp * par.dp])
        pipes = [[[list(d) for d in tile_dies(slots[int(next(chosen))], h, w)] for _ in range(par.pp)]
                 for _ in range(par.dp)]
    else:
        order = iter(rng.permutation(len(healthy))[:par.dies])
        pipes = [[[list(healthy[int(next(order))]) for _ in range(par.tp)] for _ in range(par.pp)]
                 for _ in range(par.dp)]
    legal = legal_schemes(scenario.llm, par.tp, scenario.wafer.parallel_rules)
    if rng.random() < 0.1:   # mixed schemes (each mix builds its own workload: kept rare for speed)
        schemes = [legal[int(rng.integers(len(legal)))] for _ in range(par.pp)]
    else:
        schemes = [legal[int(rng.integers(len(legal)))]] * par.pp
    layers = (split or random_split(scenario.llm.layers, par.pp, rng)) if rng.random() < 0.5 else None
    if par.interleave > 1:   # interleaved stages are equal: the even split
        layers = None
    # sequence parallelism on or off where the scenario leaves it open and the sequence splits over tp
    sp = None
    if not scenario.training.sequence_parallel_fixed and par.tp > 1 and scenario.training.seq % par.tp == 0:
        sp = bool(rng.random() < 0.5)
    work = scenario.workload(Choice(par, tuple(schemes), micro_batch, layers, sequence_parallel=sp))
    recompute = []
    for st in work.stages:
        if scenario.training.recompute_policy is not None:
            recompute.append(st.policy_row(scenario.training.recompute_policy))
        elif rng.random() < 0.15:
            recompute.append("full")
        else:
            dense = rng.random()
            recompute.append([int(rng.integers(0, st.layers + 1)) if u.recomputable and rng.random() < dense else 0
                              for u in st.units])
    capacity = scenario.wafer.dram_capacity
    used = {}
    for pipe in pipes:
        for i, stage in enumerate(pipe):
            for d in stage:
                used[tuple(d)] = work.stages[i].memory_bytes(recompute[i])
    spare = {d: capacity - used.get(d, 0.0) for d in mesh.healthy_dies}
    offload = []
    for sender, mem in sorted(used.items()):
        over = mem - capacity
        if over <= 0:
            continue
        for k in rng.permutation(len(healthy)):
            helper = healthy[k]
            if helper == sender or spare[helper] <= 0:
                continue
            moved = min(over, spare[helper] * 0.999)
            offload.append({"sender": list(sender), "helper": list(helper), "bytes": moved})
            spare[helper] -= moved
            over -= moved
            if over <= 0:
                break
    plan = {"tp": par.tp, "pp": par.pp, "dp": par.dp, "pipelines": pipes, "tp_scheme": schemes,
            "recompute": recompute, "offload": offload}
    if layers is not None:
        plan["layers"] = layers
    if micro_batch is not None:
        plan["micro_batch"] = micro_batch
    if par.interleave > 1:
        plan["interleave"] = par.interleave
    if sp is not None:
        plan["sequence_parallel"] = sp
    return plan


def random_layouts(scenario, rng, count: int) -> list:
    """`count` random (layout, micro-batch size) of the scenario's space that the bound does not
    prove infeasible."""
    space = layout_choices(scenario)
    out = []
    for k in rng.permutation(len(space)):
        choice = space[int(k)]
        par, size = choice.parallel, choice.micro_batch
        bound = layout_bound(scenario, choice)
        if bound.feasible:   # one random split per layout keeps the workloads few (and cached)
            out.append((par, size, bound, random_split(scenario.llm.layers, par.pp, rng)))
            if len(out) == count:
                break
    return out


def random_feasible_plans(count: int, seed: int, layouts_per_scenario: int = 12):
    """`count` random plans the evaluator accepts, on random layouts of the shipped scenarios
    (a plan that does not fit is drawn again with full recomputation where a die overflows), each
    with its evaluation and its layout's full bound."""
    rng = np.random.default_rng(seed)
    pools = [(scenario, random_layouts(scenario, rng, layouts_per_scenario))
             for scenario in (free(name) for name in SHIPPED)]
    checked = 0
    while checked < count:
        scenario, pool = pools[int(rng.integers(len(pools)))]
        par, size, bound, split = pool[int(rng.integers(len(pool)))]
        plan = random_plan(scenario, par, rng, size, split)
        ev = evaluate("plan", scenario, plan)
        if not ev.feasible:
            continue
        checked += 1
        yield scenario, par, size, plan, ev, bound


@pytest.fixture(scope="module")
def random_feasible_sample():
    """One sample for the bound and the communication checks: drawing and evaluating the plans is
    most of their time (400 plans: 66 split, 16 with micro-batches > 1, 204 interleaved)."""
    return list(random_feasible_plans(400, seed=7))


def test_no_random_feasible_plan_is_below_the_certified_layout_bound(random_feasible_sample):
    count = 0
    refined = {}
    splits = sizes = interleaved = 0
    for scenario, par, size, plan, ev, bound in random_feasible_sample:
        objective = ev.objective
        assert at_most(bound.value, objective), (par, size, bound.value, objective)     # full tier
        assert at_most(quick_bound(scenario, Choice(par, micro_batch=size)).value, objective), par          # quick tier
        key = (id(scenario), par, size)
        if key not in refined:   # the LP-refined tier, on the first plan of each layout (of a copy:
            refined[key] = refine(copy.copy(bound)).value   # refine raises the bound it is given in place)
        assert at_most(refined[key], objective), (par, size, refined[key], objective)
        count += 1
        splits += "layers" in plan and par.pp > 1
        sizes += size is not None and size > 1
        interleaved += par.interleave > 1
    assert count == 400 and splits > 40 and sizes > 0 and interleaved > 20, (splits, sizes, interleaved)


def test_the_least_communication_is_never_above_a_plans_exposed_communication(random_feasible_sample):
    """The plan bound's communication terms (wafopt.costmodel.network: each collective one hop
    per ring step without contention, the DP reduction and the pipeline sends likewise) against
    the evaluator's exposed TP communication, DP all-reduce and sends of every stage of random
    feasible plans, faulty wafer included."""
    from wafopt.costmodel.network import least_blocks_comm_s, least_dp_allreduce_s
    from wafopt.costmodel.stage_numbers import least_stage_send_s

    checked = sends = 0
    for scenario, par, size, plan, ev, bound in random_feasible_sample:
        details = ev.details
        sp = plan.get("sequence_parallel")
        choice = Choice(par, schemes=details["tp_scheme"], micro_batch=size, sequence_parallel=sp)
        first = 0
        for i, row in enumerate(details["stages"]):
            st = scenario.stage_workload(choice, i, first, row["layers"])
            first += row["layers"]
            least = least_blocks_comm_s(st.forward, scenario.wafer) + min(
                least_blocks_comm_s(st.backward, scenario.wafer),
                least_blocks_comm_s(st.backward_after_full, scenario.wafer))
            assert at_most(least, row["tp_comm_s"]), (par, i, least, row["tp_comm_s"])
            dp_least = least_dp_allreduce_s(par.dp, st.grad_bytes, st.dp_gather_bytes, scenario.wafer)
            assert at_most(dp_least, row["dp_allreduce_s"]), (par, i, dp_least, row["dp_allreduce_s"])
            checked += (least > 0) + (dp_least > 0)
        send = least_stage_send_s(scenario, par.tp, size or scenario.training.micro_batch)
        wrap = par.interleave > 1   # the last stage also sends to the first
        for i, row in enumerate(details["stages"]):
            if i < par.pp - 1 or wrap:
                assert at_most(send, row["send_forward_s"]), (par, i, send, row["send_forward_s"])
            if i > 0 or wrap:
                assert at_most(send, row["send_backward_s"]), (par, i, send, row["send_backward_s"])
            sends += par.pp > 1
    assert checked > 50 and sends > 50   # the terms are not all zero


@pytest.mark.slow
def test_no_random_feasible_plan_is_below_the_certified_layout_bound_long():
    for scenario, par, size, plan, ev, bound in random_feasible_plans(5000, seed=11):
        assert at_most(bound.value, ev.objective), (par, bound.value, ev.objective)


def test_layouts_that_cannot_fit_even_pooled_are_infeasible_for_every_plan():
    scenario = free("gpt3-175b-config3")
    rng = np.random.default_rng(3)
    tried = 0
    for par in layout_space(scenario):
        if tried == 12 or layout_bound(scenario, Choice(par)).feasible:
            continue
        tried += 1
        plan = random_plan(scenario, par, rng)   # not even full recomputation fits such a layout
        plan["recompute"] = ["full"] * par.pp
        assert not evaluate("plan", scenario, plan).feasible
    assert tried == 12


# --- workers, faults, certificate -------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_serial(tmp_path_factory):
    """TINY from a file (as `certify` reads it) planned on one process, seed 3: the reference of the
    worker and Dask runs, and the plan the candidate and certificate tests read (one run for all)."""
    from wafopt.run.runner import run

    path = tmp_path_factory.mktemp("tiny") / "tiny.yaml"
    path.write_text(json.dumps(TINY))
    loaded = load(path)
    return loaded, run(loaded, "plan", SolveOptions(seed=3, quiet=True, workers=1))


def test_one_and_two_workers_give_the_same_result(tiny_serial):
    from wafopt.run.runner import run

    loaded, one = tiny_serial
    two = run(loaded, "plan", SolveOptions(seed=3, quiet=True, workers=2))
    assert one.plan == two.plan and one.objective == two.objective and one.bound == two.bound
    assert [(r["layout"], r["status"], r["objective"]) for r in one.stats["candidates"]] == \
        [(r["layout"], r["status"], r["objective"]) for r in two.stats["candidates"]]


def test_the_best_layouts_row_shows_the_reported_plan(tiny_serial):
    """The candidates table after the GA's improvements: the best layout's row holds the reported
    objective, and no row is below it; a layout's row shows a plan the GA improved after its
    composition, saying so."""
    from types import SimpleNamespace

    from wafopt.planner.search import LayoutSearch
    from wafopt.planner.space import key_name
    from wafopt.planner.tighten import space_bounds

    _, one = tiny_serial
    rows = {r["layout"]: r for r in one.stats["candidates"]}
    assert close(rows[one.stats["best_layout"]]["objective"], one.objective)
    assert all(r["objective"] is None or at_most(one.objective, r["objective"]) for r in rows.values())
    scenario = tiny().instance
    options = SolveOptions(quiet=True).start()
    bounds = space_bounds(scenario, options.stopped)
    search = LayoutSearch(scenario, options, bounds)
    layout = min((b for b in bounds if b.feasible), key=lambda b: b.value)
    composed = SimpleNamespace(objective=2 * layout.value, plan={"composed": 1}, how="composed", notes=[], seconds=1.0)
    search.settle(layout.key(), composed)
    assert search.offer({"improved": 1}, 1.5 * layout.value, layout.key(), "GA")
    row = next(r for r in search.table() if r["layout"] == key_name(layout.key()))
    assert close(row["objective"], 1.5 * layout.value) and row["note"] == "composed; then GA"


def test_a_short_limit_still_ends_with_a_plan():
    # Llama3-405B on 16 x 16: no layout's composition finishes in 3 s, the Megatron baseline on
    # the least-bound layout does; the plan is the evaluator's, above the certified bound
    loaded = load(ROOT / "instances/plan/llama3-405b-16x16.yaml")
    result = solve(loaded, time_limit=3.0, workers=1)
    assert result.status.value == "feasible" and result.plan is not None
    ev = evaluate("plan", loaded.instance, result.plan)
    assert ev.feasible and close(ev.objective, result.objective)
    assert at_most(result.bound.value, result.objective)
    rows = [r for r in result.solution.stats["candidates"] if r["objective"] is not None]
    assert rows and all(at_most(r["bound"], r["objective"]) for r in rows)


def test_the_first_plan_is_the_megatron_baseline_on_a_least_bound_layout():
    from wafopt.planner.search import FIRST_PLAN_LAYOUTS, LayoutSearch, first_plan
    from wafopt.planner.tighten import space_bounds, tighten

    scenario = load(ROOT / "instances/plan/llama3-405b-16x16.yaml").instance
    options = SolveOptions(quiet=True).start()
    bounds = space_bounds(scenario, options.stopped)
    tighten(scenario, bounds, options.stopped)
    search = LayoutSearch(scenario, options, bounds)
    first_plan(scenario, bounds, search, options, 10.0)
    assert search.plan is not None and search.best_layout in search.first
    ev = evaluate("plan", scenario, search.plan)
    assert ev.feasible and close(ev.objective, search.objective)
    ranked = sorted((b for b in bounds if b.feasible), key=lambda b: (b.value, b.key()))
    assert search.best_layout in [b.key() for b in ranked[:FIRST_PLAN_LAYOUTS]]
    chosen = next(b for b in bounds if b.key() == search.best_layout)
    assert at_most(chosen.value, search.objective)
    row = next(r for r in search.table() if "first plan" in r["note"])
    assert close(row["objective"], search.objective)


def test_workers_cut_at_the_deadline_end_cleanly(tmp_path):
    # the 2-worker pool is terminated mid-wave at the limit: the run keeps its plan and bound, and
    # nothing leaks (no resource-tracker warning about the workers' semaphores, no traceback)
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "wafopt", "solve", "instances/plan/llama3-405b-16x16.yaml",
                           "--time-limit", "4", "--workers", "2", "--quiet", "--json", "--out", str(tmp_path)],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 3), done.stderr
    assert "leaked" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    solution = json.loads(done.stdout)
    assert solution["time_s"] < 4 + 2.0
    assert any(r["status"] == "timed out" for r in solution["stats"]["candidates"])


FAULTY = {"problem": "plan", "name": "tiny-faulty-3x3",
          "wafer": {"rows": 3, "cols": 3, "die_tflops": 100, "dram_gb": 0.04, "dram_bw_tbps": 1,
                    "link_bw_tbps": 0.5, "faulty_dies": [[1, 1]], "faulty_links": [[[0, 0], [0, 1]]]},
          "model": {"layers": 6, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 1000},
          "training": {"seq": 128, "micro_batch": 1, "global_batch": 11}}


def test_a_faulty_wafer_is_planned_around_its_faults():
    loaded = parse_instance(copy.deepcopy(FAULTY))
    result = solve(loaded, time_limit=60)
    assert result.status.value in ("feasible", "optimal")
    used = {tuple(d) for pipe in result.plan["pipelines"] for stage in pipe for d in stage}
    assert (1, 1) not in used
    assert evaluate("plan", loaded.instance, result.plan).feasible
    assert at_most(result.bound.value, result.objective)


def test_certify_rederives_the_plan_bound_and_rejects_tampering(tiny_serial, tmp_path):
    _, solution = tiny_serial
    path = solution.write(tmp_path / "tiny.plan.json")
    report = wafopt.certify(path)
    assert report.verdict == "certified", report.lines
    assert close(report.certified_bound, solution.bound)

    data = json.loads(path.read_text())
    raised = copy.deepcopy(data)   # a bound above what the layouts prove
    raised["bound"] = data["bound"] * 1.01
    (tmp_path / "raised.json").write_text(json.dumps(raised))
    assert wafopt.certify(tmp_path / "raised.json").verdict == "invalid"

    forged = copy.deepcopy(data)   # one layout's bound raised inside the certificate
    rows = forged["certificate"]["layouts"]
    k = next(i for i, r in enumerate(rows) if r[4] is not None)
    rows[k][4] *= 1.5
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    assert wafopt.certify(tmp_path / "forged.json").verdict == "invalid"

    dropped = copy.deepcopy(data)  # the least layout left out of the certificate
    least = min((r for r in dropped["certificate"]["layouts"] if r[4] is not None), key=lambda r: r[4])
    dropped["certificate"]["layouts"].remove(least)
    (tmp_path / "dropped.json").write_text(json.dumps(dropped))
    assert wafopt.certify(tmp_path / "dropped.json").verdict == "invalid"

    hidden = copy.deepcopy(data)   # a feasible layout claimed infeasible
    rows = hidden["certificate"]["layouts"]
    rows[k][4] = None
    (tmp_path / "hidden.json").write_text(json.dumps(hidden))
    assert wafopt.certify(tmp_path / "hidden.json").verdict == "invalid"


def test_cli_plans_a_scenario_without_parallel_and_prints_the_candidates(tmp_path, capsys):
    from wafopt.cli import main

    instance_file = tmp_path / "tiny.yaml"
    instance_file.write_text(json.dumps(TINY))
    out = tmp_path / "tiny.plan.json"
    code = main(["solve", str(instance_file), "--out", str(out), "--quiet", "--workers", "1",
                 "--plot", str(tmp_path / "conv.png")])
    assert code == 0
    text = capsys.readouterr().out
    assert "candidates" in text and "pruned by bound" in text and "infeasible" in text
    assert (tmp_path / "conv.png").stat().st_size > 0
    stats = json.loads(out.read_text())["stats"]
    assert stats["convergence"] and stats["candidates"]
    assert main(["solve", str(instance_file), "--workers", "0", "--quiet", "--out", str(out)]) == 2
    for share in ("1.5", "nan", "-0.1"):
        assert main(["solve", str(instance_file), "--elite-share", share, "--quiet", "--out", str(out)]) == 2


@pytest.fixture(scope="module")
def fixed_layout_plans():
    """TINY on tp 2, pp 4 planned (seed 3) with each elite share, 0.5 the default: the knob's test
    and the comparison with the baselines read the same runs."""
    from wafopt.run.runner import run

    loaded = tiny(tp=2, pp=4)
    return loaded, {share: run(loaded, "plan", SolveOptions(quiet=True, seed=3, elite_share=share))
                    for share in (0.0, 0.5, 1.0)}


def test_the_elite_share_is_a_knob_and_every_share_keeps_the_planners_guarantees(fixed_layout_plans):
    loaded, plans = fixed_layout_plans
    results = {}
    for share, result in plans.items():
        assert result.objective is not None and at_most(result.bound, result.objective)
        results[share] = result.objective
    megatron = wafopt.solve(loaded, "megatron").objective
    assert all(megatron is None or at_most(v, megatron) for v in results.values())


def test_planner_is_never_worse_than_megatron_or_gcmr_on_a_fixed_layout(fixed_layout_plans):
    loaded, plans = fixed_layout_plans
    planned = plans[0.5]   # the default elite share
    for method in ("megatron", "gcmr"):
        base = wafopt.solve(loaded, method)
        if base.objective is not None:
            assert at_most(planned.objective, base.objective), method


def test_a_dask_cluster_gives_the_same_result_as_a_serial_run(tiny_serial):
    distributed = pytest.importorskip("distributed")
    from wafopt.run.runner import run

    loaded, serial = tiny_serial
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = run(loaded, "plan", SolveOptions(seed=3, quiet=True, scheduler=cluster.scheduler_address))
    assert remote.plan == serial.plan and remote.objective == serial.objective and remote.bound == serial.bound
    assert remote.stats["workers"] == 1 and [r["status"] for r in remote.stats["candidates"]] == \
        [r["status"] for r in serial.stats["candidates"]]


def test_ctrl_c_stops_the_planner_within_2_s_and_writes_a_certifiable_plan(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    out = tmp_path / "plan.json"
    proc = subprocess.Popen([sys.executable, "-m", "wafopt", "solve", str(ROOT / "instances" / "plan" /
                                                                            "gpt3-175b-config3-search.yaml"),
                             "--workers", "2", "--out", str(out), "--time-limit", "300"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = threading.Event()
    lines: list[str] = []

    def watch():
        for line in proc.stderr:
            lines.append(line)
            if "gap" in line:   # the first composed plan with its bound
                seen.set()

    threading.Thread(target=watch, daemon=True).start()
    assert seen.wait(240), "".join(lines[-5:])
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    proc.wait(30)
    assert time.monotonic() - sent < 2.0 + 1.0   # 2 s, and the interpreter's exit
    assert proc.returncode == 130
    report = wafopt.certify(out)
    assert report.verdict == "certified", report.lines


@pytest.fixture(scope="module")
def ablation_run(tmp_path_factory):
    """One `wafopt ablation` for the ablation tests (its eight steps are most of their time), on
    TINY with 12 samples (the +DP step finds more) and `interleave: 1` fixed: the exit code, the
    table, the rows the steps gave and what each step's solver was given fixed beyond the layout."""
    import contextlib
    import io

    import wafopt.api.scenarios as api_scenarios
    import wafopt.planner.ablation as module
    from wafopt.cli import main

    seen, rows = [], []

    def spy(method):
        def run(scenario, options, **kwargs):
            seen.append((scenario.fixed.interleave, scenario.fixed.tp_scheme))
            return method(scenario, options, **kwargs)
        return run

    def keep(ablation):
        def run(scenario, options):
            rows.extend(ablation(scenario, options))
            return rows
        return run

    data = copy.deepcopy(TINY)
    data["training"]["global_batch"] = 12
    data["parallel"] = {"interleave": 1}
    path = tmp_path_factory.mktemp("ablation") / "tiny.yaml"
    path.write_text(json.dumps(data))
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        for name in ("solve_planner", "solve_megatron", "solve_mg_wafer", "solve_gcmr"):
            patch.setattr(module, name, spy(getattr(module, name)))
        patch.setattr(api_scenarios, "planner_ablation", keep(api_scenarios.planner_ablation))
        code = main(["ablation", str(path), "--time-limit", "40", "--quiet"])
    return code, out.getvalue(), rows, seen


def test_ablation_steps_never_lose_what_the_steps_before_found(ablation_run):
    from wafopt.planner.ablation import STEPS

    code, out, rows, _ = ablation_run
    assert code == 0 and "+search" in out
    assert [r.step for r in rows] == list(STEPS)
    values = [r.objective for r in rows]
    assert all(v is not None for v in values) and values == sorted(values, reverse=True)
    assert rows[0].ratio == 1.0 and all(at_most(1.0, r.ratio) for r in rows)


@pytest.mark.slow
def test_splits_and_micro_batch_sizes_give_the_same_result_with_two_workers(tmp_path):
    from wafopt.run.runner import run

    loaded = splits_scenario()
    one = run(loaded, "plan", SolveOptions(seed=3, quiet=True, workers=1))
    two = run(loaded, "plan", SolveOptions(seed=3, quiet=True, workers=2))
    assert one.plan == two.plan and one.objective == two.objective and one.bound == two.bound


# --- the GA operators -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ga_plans():
    """The GA's evaluator on a shipped fixed-layout scenario and its GCMR plan (tp 8, pp 7: partial
    recomputation per stage, offloads from many senders), made explicit for the operators."""
    scenario = load(ROOT / "instances/plan/gpt3-175b-config3.yaml").instance
    shipped = json.loads((ROOT / "solutions/gpt3-175b-config3.gcmr.json").read_text())["plan"]
    plans = Plans(scenario)
    parent = plans.explicit(shipped)
    assert plans.objective(parent) < INFEASIBLE
    return plans, parent


def rng(seed: int):
    return np.random.default_rng(seed)


def changed(a: list, b: list) -> list:
    return [k for k, (x, y) in enumerate(zip(a, b)) if x != y]


def senders(plan: dict) -> dict:
    out = {}
    for o in plan["offload"]:
        out[tuple(o["sender"])] = out.get(tuple(o["sender"]), 0.0) + o["bytes"]
    return out


def test_explicit_plans_spell_out_full_and_absent_recomputation(ga_plans):
    plans, _ = ga_plans
    megatron = json.loads((ROOT / "solutions/gpt3-175b-config3.mg-wafer.json").read_text())["plan"]
    work = plans.fs(megatron).workload()
    rows = plans.explicit(megatron)["recompute"]
    assert rows == [[st.layers if u.recomputable else 0 for u in st.units] for st in work.stages]
    assert plans.objective(plans.explicit(megatron)) < INFEASIBLE   # every unit in every layer still fits
    bare = {k: v for k, v in megatron.items() if k not in ("recompute", "offload")}
    assert plans.explicit(bare)["recompute"] == [[0] * len(st.units) for st in work.stages]


def test_op0_copies_one_of_the_seed_plans():
    layouts = [{"tp": 1, "pp": 1, "dp": 1, "id": k} for k in range(5)]
    child = op0_layout_change(layouts, rng(4))
    assert child in layouts and all(child is not p for p in layouts)
    assert child == op0_layout_change(layouts, rng(4))
    assert {op0_layout_change(layouts, rng(s))["id"] for s in range(60)} == set(range(5))


def test_op1_changes_the_recomputation_of_one_unit_of_one_stage(ga_plans):
    plans, parent = ga_plans
    for seed in range(3):
        child = op1_recompute(plans, parent, rng(seed))
        assert child == op1_recompute(plans, parent, rng(seed))
        assert plans.objective(child) < INFEASIBLE and evaluate("plan", plans.scenario, child).feasible
        stages = changed(parent["recompute"], child["recompute"])
        assert len(stages) == 1
        assert len(changed(parent["recompute"][stages[0]], child["recompute"][stages[0]])) == 1
        assert {k: v for k, v in child.items() if k not in ("recompute", "offload")} == \
            {k: v for k, v in parent.items() if k not in ("recompute", "offload")}


def test_op2_takes_the_other_parents_recomputation_beyond_a_unit(ga_plans):
    plans, parent = ga_plans
    other = next(o for o in (shifted(parent, rng(s)) for s in range(50))
                 if len(changed(parent["recompute"], o["recompute"])) == 2)   # two stages swapped their rows
    i, k = changed(parent["recompute"], other["recompute"])
    assert other["recompute"][i] == parent["recompute"][k] and other["recompute"][k] == parent["recompute"][i]
    layers = [st.layers for st in plans.fs(parent).workload().stages]
    made = crossed = 0
    for seed in range(6):
        child = op2_recompute_crossover(plans, parent, other, rng(seed))
        assert child == op2_recompute_crossover(plans, parent, other, rng(seed))
        if child is None:
            continue   # no offloading fits this recomputation: the GA keeps the parent
        made += 1
        assert evaluate("plan", plans.scenario, child).feasible
        for i, (mine, theirs, got) in enumerate(zip(parent["recompute"], other["recompute"], child["recompute"])):
            if got != mine:   # one stage: a prefix of its own units, then the other parent's (clamped)
                crossed += 1
                j = next(k for k in range(len(got)) if got[k:] == [min(v, layers[i]) for v in theirs[k:]])
                assert got[:j] == mine[:j]
    assert made >= 3 and crossed >= 2
    moved = dict(parent, tp=parent["tp"] // 2)
    assert op2_recompute_crossover(plans, parent, moved, rng(0)) is None   # different layouts do not mix


def test_op3_swaps_the_die_groups_of_two_stages(ga_plans):
    plans, parent = ga_plans
    for seed in range(3):
        child = op3_placement(plans, parent, rng(seed))
        assert child == op3_placement(plans, parent, rng(seed))
        assert evaluate("plan", plans.scenario, child).feasible
        old, new = parent["pipelines"][0], child["pipelines"][0]
        i, k = changed(old, new)
        assert new[i] == old[k] and new[k] == old[i]
        assert child["recompute"] == parent["recompute"]


def test_op4_moves_part_of_an_offload_to_a_new_helper(ga_plans):
    plans, parent = ga_plans
    for seed in range(3):
        child = op4_mem_pair(plans, parent, rng(seed))
        assert child == op4_mem_pair(plans, parent, rng(seed))
        assert evaluate("plan", plans.scenario, child).feasible
        assert len(child["offload"]) == len(parent["offload"]) + 1
        new = child["offload"][-1]
        assert tuple(new["helper"]) not in {tuple(o["helper"]) for o in parent["offload"]
                                            if o["sender"] == new["sender"]}
        before, after = senders(parent), senders(child)
        assert before.keys() == after.keys() and all(close(before[s], after[s]) for s in before)


def test_op5_makes_two_senders_exchange_their_helpers(ga_plans):
    plans, parent = ga_plans
    for seed in range(3):
        child = op5_mem_pair_crossover(plans, parent, rng(seed))
        assert child == op5_mem_pair_crossover(plans, parent, rng(seed))
        swapped = [(a, b) for a, b in zip(parent["offload"], child["offload"]) if a["sender"] != b["sender"]]
        pairs = {(tuple(a["sender"]), tuple(b["sender"])) for a, b in swapped}
        assert len(pairs) == 2 and {(y, x) for x, y in pairs} == pairs   # a's helpers go to b, b's to a
        assert all(a["helper"] == b["helper"] for a, b in swapped)
        before, after = senders(parent), senders(child)
        assert all(close(before[s], after[s]) for s in before)   # each sender still offloads its own need
        repaired = plans.reoffload(child)   # the repair the GA applies when such a child does not fit
        assert repaired is not None and evaluate("plan", plans.scenario, repaired).feasible


def test_op6_moves_one_layer_to_a_neighbouring_stage(ga_plans):
    plans, parent = ga_plans
    before = [st.layers for st in plans.fs(parent).workload().stages]
    for seed in range(3):
        child = op6_move_layer(plans, parent, rng(seed))
        assert child == op6_move_layer(plans, parent, rng(seed))
        assert evaluate("plan", plans.scenario, child).feasible
        after = child["layers"]
        i, k = changed(before, after)
        assert k == i + 1 and sorted([after[i] - before[i], after[k] - before[k]]) == [-1, 1]
        assert all(v <= n for row, n in zip(child["recompute"], after) for v in row)
    assert op6_move_layer(plans, dict(parent, pp=1), rng(0)) is None


def test_a_mutation_is_an_accepted_plan_or_its_parent(ga_plans):
    plans, parent = ga_plans
    layouts = [parent]
    for seed in range(6):
        counts = {f"op{k}": 0 for k in range(7)} | {"repaired": 0, "dropped": 0}
        child = mutate(plans, parent, layouts, rng(seed), counts)
        again = mutate(plans, parent, layouts, rng(seed), dict(counts))
        assert child == again and sum(counts[f"op{k}"] for k in range(7)) == 1
        assert evaluate("plan", plans.scenario, child).feasible
        assert (child is parent) == (counts["dropped"] == 1)
    assert mutate(plans, parent, layouts, rng(0), counts, stopped=lambda: True) is parent
    assert recombine(plans, parent, parent, rng(0), stopped=lambda: True) == parent


def test_omega_survival_keeps_the_elites_and_fills_by_tournament():
    F = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 0.5, 7.0])
    keep = omega_survivors(F, 4, 0.5, rng(2))
    assert keep[:2] == [6, 1] and len(set(keep)) == 4 and keep == omega_survivors(F, 4, 0.5, rng(2))
    assert omega_survivors(F, 4, 0.0, rng(2))[0] == 6   # at least one elite
    assert sorted(omega_survivors(F, 8, 0.25, rng(2))) == list(range(8))


def test_candidates_text_counts_the_layouts_it_does_not_show_by_their_own_status():
    from wafopt.present.planner import candidates_text

    rows = ([{"layout": f"tp{t}", "bound": 1.0 + t, "objective": 2.0 + t, "status": "solved", "note": ""}
             for t in range(3)]
            + [{"layout": f"pp{p}", "bound": 9.0 + p, "objective": None, "status": "pruned", "note": ""}
               for p in range(5)]
            + [{"layout": "big", "bound": None, "objective": None, "status": "infeasible",
                "note": "model state over DRAM"}])
    text = candidates_text({"candidates": rows, "counts": {"solved": 30, "pruned": 50, "infeasible": 70}}, limit=4)
    assert "... 4 more layouts (4 pruned)" in text
    assert "infeasible: 1 x" in text


def test_ablation_steps_keep_what_the_scenario_fixes_beyond_the_layout(ablation_run):
    # WATOS runs plain 1F1B: a scenario's `interleave: 1` holds in every step, the searches included
    from wafopt.planner.ablation import STEPS

    *_, seen = ablation_run
    assert len(seen) == len(STEPS) and all(interleave == 1 for interleave, _ in seen)


@pytest.mark.parametrize("method", ["gcmr", "uniform", "megatron", "mg-wafer"])
def test_a_fixed_layout_baseline_without_a_layout_is_bad_input(method, tmp_path, capsys):
    from wafopt.cli import main

    path = tmp_path / "open.yaml"
    path.write_text(json.dumps(TINY))
    out = tmp_path / "out.json"
    assert main(["solve", str(path), "--method", method, "--quiet", "--out", str(out)]) == 2
    assert f"{method} needs a fixed layout" in capsys.readouterr().err and not out.exists()


def test_megatron_recomputes_only_what_memory_needs():
    """A 7B GQA model on 32 GPUs fits without recomputation: the baseline keeps none (as a
    practitioner would), so it is no slower than MG-wafer or than any recomputation it could force."""
    scenario = {"problem": "plan", "cluster": {"preset": "dgx-a100-80g", "nodes": 4},
                "model": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "vocab": 32000, "mlp": "swiglu"},
                "training": {"seq": 4096, "micro_batch": 1, "global_batch": 128}, "parallel": {"tp": 8, "pp": 1, "dp": 4}}
    chosen = wafopt.solve(wafopt.load(scenario), "megatron")
    assert "no recomputation" in chosen.message
    forced = {policy: wafopt.solve(wafopt.load(dict(scenario, training=dict(scenario["training"], recompute=policy))),
                                   "megatron").objective for policy in ("none", "selective", "full")}
    assert chosen.objective == forced["none"] < forced["selective"] < forced["full"]
    assert chosen.objective <= wafopt.solve(wafopt.load(scenario), "mg-wafer").objective
    # a 32K sequence does not fit without it: the least recomputation that does
    longer = dict(scenario, training={"seq": 32768, "micro_batch": 1, "global_batch": 128})
    assert "selective recomputation (none does not fit)" in wafopt.solve(wafopt.load(longer), "megatron").message


def test_megatron_names_only_the_micro_batch_sizes_it_tried():
    # 16 / 8 = 2 micro-batches: not a multiple of pp 4, so interleave 2 rules size 8 out
    scenario = {"problem": "plan", "cluster": {"preset": "dgx-a100-80g", "nodes": 4},
                "model": {"layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000},
                "training": {"seq": 2048, "micro_batch": [1, 2, 8], "global_batch": 16},
                "parallel": {"tp": 8, "pp": 4, "dp": 1, "interleave": 2}}
    message = wafopt.solve(wafopt.load(scenario), "megatron").message
    assert "(fastest of 1, 2)" in message and "mb8" not in message


@pytest.mark.parametrize("policy", ["selective", "full"])
def test_a_forced_recomputation_is_composed_on_a_ring_no_tile_fits(policy):
    """Two faulty dies leave no aligned tile of 10 on a 3 x 4 wafer, only the ring around them: the
    baselines cannot seed a plan there, so the planner's own composition must honour the forced
    policy (it ranked placements without recomputation, which the scenario forbids)."""
    scenario = {"problem": "plan", "wafer": {"preset": "watos-config3", "rows": 3, "cols": 4,
                                             "faulty_dies": [[1, 1], [1, 2]]},
                "model": {"layers": 4, "hidden": 4000, "heads": 40, "kv_heads": 8, "vocab": 32000,
                          "ffn_hidden": 10000, "mlp": "swiglu"},
                "training": {"seq": 4000, "micro_batch": 1, "global_batch": 8, "recompute": policy},
                "parallel": {"tp": 10, "pp": 1, "dp": 1, "tp_scheme": "tatp"}}
    loaded = wafopt.load(scenario)
    result = wafopt.solve(loaded, "plan", time_limit=30, seed=0)
    assert result.plan is not None and result.status in ("feasible", "optimal")
    ev = evaluate("plan", loaded.instance, result.plan)
    assert ev.feasible and ev.objective == pytest.approx(result.objective)
    work = loaded.instance.workload()
    assert result.plan["recompute"] == [s.policy_row(policy) for s in work.stages]
    assert result.bound.value <= result.objective


def test_gcmr_says_why_when_a_stage_overflows_by_more_than_its_checkpoints():
    """One die per stage and a tied 50K-token embedding on stage 0: its model state alone overflows
    the die by more than the checkpoints it could move, so Mem_pair has nothing to offload. GCMR
    says so; the planner, free to choose the micro-batch size, still finds a plan."""
    scenario = {"problem": "plan", "wafer": {"rows": 2, "cols": 3, "die_tflops": 708, "dram_gb": 80,
                                             "dram_bw_tbps": 2, "link_bw_tbps": 4},
                "model": {"layers": 6, "hidden": 12288, "heads": 96, "vocab": 50257, "max_positions": 2048,
                          "tied_embeddings": True},
                "training": {"seq": 2048, "micro_batch": [1, 2, 4], "global_batch": 12},
                "parallel": {"tp": 1, "pp": 3, "dp": 1}}
    loaded = wafopt.load(scenario)
    gcmr = wafopt.solve(loaded, "gcmr")
    assert gcmr.plan is None and "holds only" in gcmr.message and "checkpoints" in gcmr.message
    assert wafopt.solve(loaded, "plan", time_limit=30, seed=0).plan is not None


@pytest.mark.parametrize("policy", ["selective", "full"])
def test_a_forced_recomputation_bound_is_below_every_plan_that_recomputes_so(policy):
    """With training.recompute fixed, the bound recomputes exactly the forced units (not the least
    over recomputing or not): random feasible plans of random layouts, splits, schemes, tiles and
    offloads, every one recomputing as forced, never fall below its full or LP-refined tier."""
    rng = np.random.default_rng(11)
    checked = raised = 0
    for name in ("gpt3-175b-config3", "llama3-70b-config3-faulty", "gpt3-6.7b-config3-dp"):
        base = free(name)
        scenario = replace(base, training=replace(base.training, recompute=True, recompute_policy=policy))
        for par, size, bound, split in random_layouts(scenario, rng, 6):
            refined = refine(copy.copy(bound)).value   # a copy: refine raises the bound it is given in place
            free_bound = layout_bound(base, Choice(par, micro_batch=size)).value   # the least over recomputing
            assert bound.value >= free_bound - 1e-9 * abs(free_bound)
            raised += bound.value > free_bound * (1 + 1e-6)
            for _ in range(12):
                plan = random_plan(scenario, par, rng, size, split)
                ev = evaluate("plan", scenario, plan)
                if ev.feasible:
                    assert at_most(bound.value, ev.objective), (name, par, bound.value, ev.objective)
                    assert at_most(refined, ev.objective), (name, par, refined, ev.objective)
                    checked += 1
    assert checked > 50 and raised > 0, (checked, raised)
