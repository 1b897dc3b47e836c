"""Interleaved 1F1B (virtual pipeline stages, Narayanan et al. 2021 Sec. 2.2.2): the order of each
device, the longest path of its task graph against an explicit-graph brute force, the closed form
and the certified lower bound, and the simulator replaying an interleaved PlanTasks."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wafopt.costmodel.schedule import (
    interleaved_iteration,
    interleaved_lower_bound,
    one_f_one_b,
    one_f_one_b_finish,
    one_f_one_b_order,
    pipeline_finish,
    pipeline_order,
)
from wafopt.costmodel.tasks import (
    Block,
    Comm,
    Compute,
    PlanTasks,
    RoutedFlow,
    StageTasks,
)
from wafopt.simulate.engine import simulate

CASES = [(p, v, m) for p in range(1, 5) for v in range(1, 4) for m in range(p, 9, p)]
HYPO = settings(max_examples=60, deadline=None, derandomize=True)


# --------------------------------------------------------------------------------------------
# references: the plain 1F1B code as it was before interleaving, and an explicit task graph
# --------------------------------------------------------------------------------------------
def _reference_order(stage, stages, microbatches):
    warmup = min(stages - 1 - stage, microbatches)
    order = [("F", k) for k in range(warmup)]
    for j in range(microbatches - warmup):
        order += [("F", warmup + j), ("B", j)]
    return order + [("B", k) for k in range(microbatches - warmup, microbatches)]


def _reference_finish(forward, backward, send_forward, send_backward, microbatches):
    p = len(forward)
    zero = forward[0] * 0
    orders = [_reference_order(i, p, microbatches) for i in range(p)]
    done, clock, position = {}, [zero] * p, [0] * p
    left = sum(len(o) for o in orders)
    while left:
        for i in range(p):
            while position[i] < len(orders[i]):
                kind, k = orders[i][position[i]]
                if kind == "F":
                    ready = zero if i == 0 else done.get(("F", i - 1, k))
                    if ready is None:
                        break
                    ready += send_forward[i - 1] if i > 0 else zero
                    duration = forward[i]
                else:
                    ready = done[("F", i, k)] if i == p - 1 else done.get(("B", i + 1, k))
                    if ready is None:
                        break
                    ready += send_backward[i + 1] if i < p - 1 else zero
                    duration = backward[i]
                clock[i] = max(clock[i], ready) + duration
                done[(kind, i, k)] = clock[i]
                position[i] += 1
                left -= 1
    return clock


def _task_times(forward, backward, send_forward, send_backward, m, v):
    """(kind, device, chunk, k) -> (start, end) by the longest path over explicit edges: the device
    order, and the virtual-stage chain c p + i with its sends (recursion, not the event loop)."""
    p = len(forward)
    zero = forward[0] * 0
    preds = {}   # task -> [(predecessor, extra delay)]
    for i in range(p):
        order = pipeline_order(i, p, m, v)
        for n, (kind, c, k) in enumerate(order):
            deps = [((order[n - 1][0], i) + order[n - 1][1:], zero)] if n else []
            s = p * c + i   # virtual stage
            if kind == "F" and s > 0:
                deps.append((("F", (s - 1) % p, (s - 1) // p, k), send_forward[(s - 1) % p]))
            if kind == "B":
                if s < p * v - 1:
                    deps.append((("B", (s + 1) % p, (s + 1) // p, k), send_backward[(s + 1) % p]))
                else:
                    deps.append((("F", i, c, k), zero))
            preds[(kind, i, c, k)] = deps

    @cache
    def end(task):
        start = max((end(a) + d for a, d in preds[task]), default=zero)
        return start + (forward if task[0] == "F" else backward)[task[1]]

    return {t: (end(t) - (forward if t[0] == "F" else backward)[t[1]], end(t)) for t in preds}


def _brute_finish(forward, backward, send_forward, send_backward, m, v):
    times = _task_times(forward, backward, send_forward, send_backward, m, v)
    return [max(e for (kind, i, _, _), (_, e) in times.items() if i == d) for d in range(len(forward))]


# --------------------------------------------------------------------------------------------
# the order
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("p,v,m", CASES)
def test_every_task_once_forward_before_backward(p, v, m):
    for i in range(p):
        order = pipeline_order(i, p, m, v)
        expected = {(kind, c, k) for kind in "FB" for c in range(v) for k in range(m)}
        assert len(order) == len(expected) == 2 * m * v and set(order) == expected
        at = {task: n for n, task in enumerate(order)}
        for c in range(v):
            for k in range(m):
                assert at[("F", c, k)] < at[("B", c, k)]
        # a micro-batch meets its chunks in model order forward and in reverse order backward
        for c in range(v - 1):
            for k in range(m):
                assert at[("F", c, k)] < at[("F", c + 1, k)] and at[("B", c + 1, k)] < at[("B", c, k)]


def test_megatron_order_two_devices_two_chunks_four_microbatches():
    # Megatron's table for p = 2, v = 2: forward steps 0..7 run (chunk, k) = 00 01 10 11 02 03 12 13;
    # backward steps the same micro-batches with chunks reversed. Warm-up: 2 (p-i-1) + (v-1) p = 4, 2.
    def parse(text):
        return [(w[0], int(w[1]), int(w[2])) for w in text.split()]

    assert pipeline_order(0, 2, 4, 2) == parse("F00 F01 F10 F11 F02 B10 F03 B11 F12 B00 F13 B01 B12 B13 B02 B03")
    assert pipeline_order(1, 2, 4, 2) == parse("F00 F01 F10 B10 F11 B11 F02 B00 F03 B01 F12 B12 F13 B13 B02 B03")


@pytest.mark.parametrize("p", range(1, 5))
@pytest.mark.parametrize("m", range(1, 9))
def test_plain_order_is_unchanged(p, m):
    for i in range(p):
        assert one_f_one_b_order(i, p, m) == _reference_order(i, p, m)
        assert pipeline_order(i, p, m) == [(kind, 0, k) for kind, k in _reference_order(i, p, m)]


def test_interleaving_needs_microbatches_a_multiple_of_stages():
    with pytest.raises(ValueError, match="multiple of the pipeline stages"):
        pipeline_order(0, 4, 6, 2)
    with pytest.raises(ValueError, match="multiple"):
        pipeline_finish([1.0] * 3, [2.0] * 3, [0.0] * 3, [0.0] * 3, 4, 2)
    with pytest.raises(ValueError, match="at least 1"):
        pipeline_order(0, 2, 2, 0)
    assert len(pipeline_order(0, 4, 6, 1)) == 12   # plain 1F1B has no such rule


# --------------------------------------------------------------------------------------------
# the longest path
# --------------------------------------------------------------------------------------------
def test_hand_case_two_devices_two_chunks_two_microbatches():
    # chunk forward 1, chunk backward 2 on both devices, free sends; virtual stages
    # 0 = (d0, c0), 1 = (d1, c0), 2 = (d0, c1), 3 = (d1, c1). Warm-up: d0 all 4 forwards (2 + 2 = 4),
    # d1 2 forwards. Tasks as chunk/micro-batch:
    #   d0: F00 [0,1]  F01 [1,2]  F10 [2,3]  F11 [3,4]  B10 [6,8]  B11 [9,11]  B00 [11,13] B01 [13,15]
    #   d1: F00 [1,2]  F01 [2,3]  F10 [3,4]  B10 [4,6]  F11 [6,7]  B11 [7,9]   B00 [9,11]  B01 [11,13]
    # d0's F10 waits for d1's F00 (wrap-around, ends 2); d1's B00 waits for d0's B10 (wrap, ends 8) and
    # for d1 itself (free at 9). Iteration 15 = (m + (p-1)/v) T with T = v (1 + 2) = 6; plain 1F1B of
    # the same stages (one chunk of 6 per device): (m + p - 1) T = 18.
    spans = {
        (0, "F", 0, 0): (0, 1), (0, "F", 0, 1): (1, 2), (0, "F", 1, 0): (2, 3), (0, "F", 1, 1): (3, 4),
        (0, "B", 1, 0): (6, 8), (0, "B", 1, 1): (9, 11), (0, "B", 0, 0): (11, 13), (0, "B", 0, 1): (13, 15),
        (1, "F", 0, 0): (1, 2), (1, "F", 0, 1): (2, 3), (1, "F", 1, 0): (3, 4), (1, "B", 1, 0): (4, 6),
        (1, "F", 1, 1): (6, 7), (1, "B", 1, 1): (7, 9), (1, "B", 0, 0): (9, 11), (1, "B", 0, 1): (11, 13)}
    times = _task_times([1, 1], [2, 2], [0, 0], [0, 0], 2, 2)
    assert {(i, kind, c, k): se for (kind, i, c, k), se in times.items()} == spans
    assert pipeline_finish([1, 1], [2, 2], [0, 0], [0, 0], 2, 2) == [15, 13]
    assert max(pipeline_finish([3, 3], [3, 3], [0, 0], [0, 0], 2, 1)) == 18
    assert interleaved_iteration([6, 6], 2, 2) == interleaved_lower_bound([6, 6], 2, 2) == 15
    # a wrap-around send of 1 each way delays d0's F10 to [3,4] and d1's B00 by the backward wrap
    assert pipeline_finish([1, 1], [2, 2], [0, 1], [1, 0], 2, 2) == [17, 15]
    assert _brute_finish([1, 1], [2, 2], [0, 1], [1, 0], 2, 2) == [17, 15]


@pytest.mark.parametrize("p,v,m", CASES)
def test_equal_chunks_free_sends_give_the_closed_form(p, v, m):
    T = Fraction(7, 3)    # per micro-batch over all chunks of a device
    chunk = T / v
    zeros = [Fraction(0)] * p
    for f in (chunk / 3, chunk / 2, chunk, Fraction(0)):   # any forward/backward split
        finish = pipeline_finish([f] * p, [chunk - f] * p, zeros, zeros, m, v)
        assert all(isinstance(x, Fraction) for x in finish)
        assert max(finish) == (m + Fraction(p - 1, v)) * T
        assert max(finish) == interleaved_iteration([T] * p, m, v) == interleaved_lower_bound([T] * p, m, v)


fractions = st.fractions(min_value=0, max_value=5, max_denominator=12)


@st.composite
def graphs(draw, v_max=3):
    p = draw(st.integers(1, 4))
    v = draw(st.integers(1, v_max))
    m = p * draw(st.integers(1, 8 // p))
    forward = [draw(fractions) for _ in range(p)]
    backward = [draw(fractions) for _ in range(p)]
    free = draw(st.booleans())   # free sends: where a too-high bound shows
    sends = [[Fraction(0) if free else draw(fractions) for _ in range(p)] for _ in range(2)]
    return p, v, m, forward, backward, sends[0], sends[1]


@HYPO
@given(graphs(v_max=1))
def test_plain_finish_is_unchanged(case):
    _, _, m, forward, backward, send_forward, send_backward = case
    expected = _reference_finish(forward, backward, send_forward, send_backward, m)
    assert one_f_one_b_finish(forward, backward, send_forward, send_backward, m) == expected
    assert pipeline_finish(forward, backward, send_forward, send_backward, m) == expected


@pytest.mark.parametrize("p", range(1, 5))
@pytest.mark.parametrize("m", range(1, 9))
def test_plain_finish_is_unchanged_for_any_microbatches(p, m):
    forward = [1.0 + 0.25 * i for i in range(p)]
    backward = [2.0 - 0.125 * i for i in range(p)]
    sends = [0.5] * p
    assert one_f_one_b_finish(forward, backward, sends, sends, m) == _reference_finish(forward, backward, sends,
                                                                                       sends, m)


@HYPO
@given(graphs())
def test_finish_is_the_longest_path_of_the_explicit_graph(case):
    _, v, m, forward, backward, send_forward, send_backward = case
    assert pipeline_finish(forward, backward, send_forward, send_backward, m, v) == \
        _brute_finish(forward, backward, send_forward, send_backward, m, v)


# --------------------------------------------------------------------------------------------
# closed form and lower bound
# --------------------------------------------------------------------------------------------
@HYPO
@given(graphs())
def test_lower_bound_never_exceeds_the_longest_path(case):
    _, v, m, forward, backward, send_forward, send_backward = case
    device_times = [v * (f + b) for f, b in zip(forward, backward)]   # T_i: chunk time x v
    bound = interleaved_lower_bound(device_times, m, v)
    finish = pipeline_finish(forward, backward, send_forward, send_backward, m, v)
    assert bound <= finish[0] <= max(finish)   # the bound's path ends on device 0
    # with free sends and equal stages it is reached (see the closed-form test); a slowest last device
    # makes it the closed form
    if device_times[-1] == max(device_times):
        assert bound == interleaved_iteration(device_times, m, v)


def test_the_closed_form_is_not_a_lower_bound_for_unequal_stages():
    # a slow first device, a nearly free second: the second's fill hides under the first's work
    e = Fraction(1, 100)
    for v in (1, 2, 3):
        finish = pipeline_finish([Fraction(1), e], [Fraction(1), e], [0, 0], [0, 0], 2, v)
        T = [Fraction(2 * v), 2 * v * e]
        assert max(finish) == 2 * T[0] == interleaved_lower_bound(T, 2, v)
        assert interleaved_iteration(T, 2, v) == 2 * T[0] + T[1] / v > max(finish)
    assert one_f_one_b([2, 2 * e], 2) > max(pipeline_finish([1, e], [1, e], [0, 0], [0, 0], 2))


def test_closed_forms_by_hand_and_on_arrays():
    assert interleaved_iteration([2.0, 5.0, 3.0], 4, 1) == one_f_one_b([2.0, 5.0, 3.0], 4) == 25.0
    # (10 + (4*2 - 1) 5) / 2 = 22.5; bound: max(0 + 4*2, 2/2 + 20, 7/2 + 12) = 21
    assert interleaved_iteration([2.0, 5.0, 3.0], 4, 2) == 22.5
    assert interleaved_lower_bound([2.0, 5.0, 3.0], 4, 2) == 21.0
    assert interleaved_lower_bound([Fraction(2), Fraction(5), Fraction(3)], 4, 2) == Fraction(21)
    rows = np.array([[2.0, 5.0, 3.0], [4.0, 1.0, 1.0]])
    for v in (1, 2, 3):
        assert interleaved_iteration(rows, 4, v).tolist() == [interleaved_iteration(r, 4, v) for r in rows.tolist()]
        assert interleaved_lower_bound(rows, 4, v).tolist() == [interleaved_lower_bound(r, 4, v)
                                                                for r in rows.tolist()]


# --------------------------------------------------------------------------------------------
# the simulator
# --------------------------------------------------------------------------------------------
def _interleaved(tasks: PlanTasks, v: int) -> PlanTasks:
    """`tasks` with interleave v (PlanTasks gains the field `interleave`; before it does, the
    simulator reads the attribute with getattr)."""
    if "interleave" in {f.name for f in dataclasses.fields(PlanTasks)}:
        return dataclasses.replace(tasks, interleave=v)
    object.__setattr__(tasks, "interleave", v)
    return tasks


def _send(src, dst, seconds):
    return Comm("p2p", (RoutedFlow(src, dst, 8.0, ((src, dst),)),), 0.0, seconds)


def test_simulator_replays_the_interleaved_graph():
    p, v, m = 3, 2, 6
    dies = [(0, 0), (0, 1), (0, 2)]
    fwd, rec, bwd = [0.5, 0.75, 0.25], [0.25, 0.0, 0.125], [1.0, 1.5, 0.75]
    send_f = [0.125, 0.25, 0.375]   # entry 2: the last stage to stage 0 (wrap-around)
    send_b = [0.5, 0.125, 0.25]     # entry 0: stage 0 to the last stage (wrap-around)
    state, act, transient, opt = 100.0, 10.0, 3.0, 0.5
    stages = []
    for i, d in enumerate(dies):
        nxt, prv = dies[(i + 1) % p], dies[(i - 1) % p]
        stages.append(StageTasks(
            i, 0, (d,), (Block((Compute("f", fwd[i], 1.0),)),),
            (Block((Compute("r", rec[i], 1.0),)),) if rec[i] else (),
            (Block((Compute("b", bwd[i] / 2, 1.0),), repeat=2),),
            _send(d, nxt, send_f[i]), _send(d, prv, send_b[i]), opt, state, act, transient))
    plain = PlanTasks(m, (tuple(stages),), (None,) * p, (), 1e18, 100.0, 1.0)
    tasks = _interleaved(plain, v)
    sim = simulate(tasks, contention=False)

    finish = pipeline_finish(fwd, [r + b for r, b in zip(rec, bwd)], send_f, send_b, m, v)
    assert sim.iteration_s == pytest.approx(max(finish) + opt, rel=1e-12)
    assert sim.iteration_s != pytest.approx(max(pipeline_finish(fwd, [r + b for r, b in zip(rec, bwd)],
                                                                send_f, send_b, m)) + opt)
    # every chunk-task once, with its chunk; stage ends as the longest path says
    spans = {(iv.stage, iv.kind, iv.chunk, iv.microbatch): iv for iv in sim.intervals if iv.kind != "optimizer"}
    assert len([s for s in spans if s[1] == "forward"]) == p * v * m
    assert {s[2] for s in spans} == {0, 1}
    for i in range(p):
        assert max(iv.end for s, iv in spans.items() if s[0] == i) == pytest.approx(finish[i], rel=1e-12)
    # compute: m v chunk-tasks plus the optimizer; sends: every micro-batch crosses each of the
    # p v - 1 virtual-stage boundaries once each way (the wrap-around ones v - 1 times)
    for i, d in enumerate(dies):
        assert sim.compute_s[d] == pytest.approx(m * v * (fwd[i] + rec[i] + bwd[i]) + opt)
        assert sim.link_bytes[(d, dies[(i + 1) % p])] == 8.0 * m * (v - 1 if i == p - 1 else v)
        assert sim.link_bytes[(d, dies[(i - 1) % p])] == 8.0 * m * (v - 1 if i == 0 else v)
    # memory: activations of every chunk in flight (from the device order), transient in a backward
    for i, d in enumerate(dies):
        alive, peak = 0, 0.0
        for kind, _, _ in pipeline_order(i, p, m, v):
            if kind == "F":
                alive += 1
                peak = max(peak, alive * act)
            else:
                peak = max(peak, alive * act + transient)
                alive -= 1
        assert sim.peak_memory[d] == pytest.approx(state + peak)
    # device 0 after its warm-up of 2 (p-1) + (v-1) p forwards and one more: 8 chunks in flight
    assert sim.peak_memory[dies[0]] == pytest.approx(state + 8 * act + transient)


def test_simulator_hand_case_intervals():
    # the hand case above, replayed: chunk forward 1, backward 2, free sends, optimizer 0
    dies = [(0, 0), (0, 1)]
    stages = tuple(StageTasks(i, 0, (d,), (Block((Compute("f", 1.0),)),), (), (Block((Compute("b", 2.0),)),),
                              None, None, 0.0, 0.0, 1.0, 0.0) for i, d in enumerate(dies))
    tasks = _interleaved(PlanTasks(2, (stages,), (None, None), (), 1e18, 100.0, 1.0), 2)
    sim = simulate(tasks, contention=True)
    got = {(iv.stage, iv.kind[0].upper(), iv.chunk, iv.microbatch): (iv.start, iv.end) for iv in sim.intervals
           if iv.kind != "optimizer"}
    times = _task_times([1, 1], [2, 2], [0, 0], [0, 0], 2, 2)
    assert got == {(i, kind, c, k): se for (kind, i, c, k), se in times.items()}
    assert sim.iteration_s == 15.0
    # device 0 holds all four chunk-micro-batches after its warm-up; device 1 three (F00 F01 F10)
    assert sim.peak_memory == {dies[0]: 4.0, dies[1]: 3.0}


@HYPO
@given(st.lists(graphs(), min_size=1, max_size=4).filter(lambda cases: len({c[:3] for c in cases}) == 1))
def test_arrays_of_pipelines_finish_as_each_one_alone(cases):
    # one pipeline per array entry (the plan bound runs every layer split at once)
    _, v, m = cases[0][:3]
    columns = [[np.array([float(c[k][i]) for c in cases]) for i in range(len(cases[0][3]))] for k in range(3, 7)]
    together = pipeline_finish(*columns, m, v)
    for n, case in enumerate(cases):
        alone = pipeline_finish(*[[float(t) for t in times] for times in case[3:]], m, v)
        assert [float(f[n]) for f in together] == alone
