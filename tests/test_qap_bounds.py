"""Eigenvalue bounds of placement (`pb`, `qpb`): never above the brute-force optimum on random tiny
instances (faults, Mem_pair flows, tile shapes), QPB never below PB, and their certificates
re-derive while a raised bound, a perturbed certificate number or a swapped instance does not."""

import copy
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_helpers import brute_force, loaded

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import CertificateError, InstanceError
from wafopt.problems import load
from wafopt.problems.placement import projected
from wafopt.problems.placement.certificate import check, gilmore_lawler_tile
from wafopt.run.certify import INVALID, certify
from wafopt.run.runner import run

QAPLIB = Path(__file__).resolve().parents[1] / "instances" / "placement" / "qaplib"
PROPERTY = settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def tiny_instances(draw):
    """2-5 stages on a small mesh, with a faulty die or none, Mem_pairs or none, one or two tile shapes."""
    rows, cols = draw(st.sampled_from([(2, 3), (3, 3), (2, 4), (3, 4)]))
    tiles = draw(st.sampled_from([[[1, 1]], [[1, 1], [1, 2]], [[1, 2], [2, 1]]]))
    fault = draw(st.booleans())
    mesh = {"rows": rows, "cols": cols}
    if fault:
        mesh["faulty_dies"] = [[draw(st.integers(0, rows - 1)), draw(st.integers(0, cols - 1))]]
    n = draw(st.integers(2, 5))
    flows = [[i, j, float(draw(st.integers(0, 9)))] for i in range(n) for j in range(n) if i != j
             and draw(st.booleans())]
    flows = [f for f in flows if f[2] > 0] or [[0, 1, 1.0]]
    pairs = []
    if draw(st.booleans()) and n >= 3:
        pairs = [[0, n - 1, float(draw(st.integers(1, 5)))]]
    try:
        return loaded(mesh=mesh, tile=tiles, stages=n, flows=flows, pairs=pairs)
    except InstanceError:      # the stages do not fit the shapes: the whole healthy mesh then
        return loaded(mesh={"rows": rows, "cols": cols}, tile=[[1, 1]], stages=n, flows=flows, pairs=pairs)


def bounds(lo):
    pb = run(lo, "pb", SolveOptions(quiet=True))
    qpb = run(lo, "qpb", SolveOptions(quiet=True))
    return pb, qpb


@PROPERTY
@given(tiny_instances())
def test_eigenvalue_bounds_never_exceed_the_optimum(lo):
    base = brute_force(lo.instance, full=False)   # the base optimum: at most the full Eq. 2 one
    pb, qpb = bounds(lo)
    assert pb.bound <= base + 1e-6
    assert qpb.bound <= base + 1e-6
    assert qpb.bound >= pb.bound - 1e-6          # QPB starts where PB is, and keeps the better
    for sol in (pb, qpb):
        assert sol.bound_provenance == "certificate"
        assert check(lo.instance, sol.bound_kind, json.loads(json.dumps(sol.certificate))) >= sol.bound - 1e-9


@PROPERTY
@given(tiny_instances(), st.integers(0, 2 ** 31))
def test_the_bound_of_any_point_is_valid(lo, seed):
    """The linearization bound holds at any point, not only at Frank-Wolfe's (its proof needs no
    optimality), with linear costs too, as branch and bound uses it."""
    inst = lo.instance
    rng = np.random.default_rng(seed)
    for lay in inst.layouts:
        A, B = projected.tile_matrices(inst.weights, lay.distance)
        m = len(A)
        L = rng.integers(0, 5, size=(m, m)).astype(float)
        point = rng.random((m, m)) * 2 - 0.5
        theta = rng.random(max(m - 2, 0))
        value = projected.trace_bound(A, B, L, projected.spectral(A, B, theta), point)
        if m > 7:
            continue
        perms = np.array(list(itertools.permutations(range(m))))
        t = np.einsum("pij,pij->p", A[None, :, :], B[perms[:, :, None], perms[:, None, :]]) + L[np.arange(m), perms].sum(1)
        assert float(value) <= t.min() + 1e-7


def test_pb_and_qpb_on_nug12():
    lo = load(QAPLIB / "nug12.yaml")
    pb, qpb = bounds(lo)
    gl = float(gilmore_lawler_tile(lo.instance, lo.instance.layouts[0]))
    assert pb.bound == 472.0                       # Hadley, Rendl and Wolkowicz (1992): 472
    assert gl == 493.0 and pb.bound < qpb.bound <= 578.0     # Anstreicher and Brixius (2001): QPB 482
    assert pb.plan is not None and pb.status == "feasible"
    for result in (pb, qpb):     # weaker than Gilmore-Lawler here: said, the bound stays the method's
        assert "the Gilmore-Lawler bound (--method glb) is stronger here: 493" in result.message


@pytest.fixture(scope="module")
def nug12_solutions(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("qpb")
    out = {}
    for method in ("pb", "qpb"):
        sol = run(load(QAPLIB / "nug12.yaml"), method, SolveOptions(quiet=True))
        out[method] = str(sol.write(tmp / f"nug12.{method}.json"))
    return out


def edit(path, tmp: Path, change) -> str:
    data = json.loads(Path(path).read_text())
    change(data)
    target = tmp / f"edited-{Path(path).name}"
    target.write_text(json.dumps(data))
    return str(target)


@pytest.mark.parametrize("method", ["pb", "qpb"])
def test_certify_rejects_tampering(nug12_solutions, tmp_path, method, at_root):
    path = nug12_solutions[method]
    assert certify(path).certified

    def raised(d):
        d["bound"] += 5
        d["gap"] = (d["objective"] - d["bound"]) / d["objective"]

    assert certify(edit(path, tmp_path, raised)).verdict == INVALID

    def perturbed(d):
        d["certificate"]["tiles"]["1x1"]["value"] += 0.5

    report = certify(edit(path, tmp_path, perturbed))
    assert report.verdict == INVALID and "re-derives" in report.invalid[0]


def test_certify_rejects_a_perturbed_point_and_theta(nug12_solutions):
    inst = load(QAPLIB / "nug12.yaml").instance
    good = json.loads(Path(nug12_solutions["qpb"]).read_text())["certificate"]
    assert check(inst, "qpb", good) > 0
    A, B = projected.tile_matrices(inst.weights, inst.layouts[0].distance)
    spec = projected.spectral(A, B, good["tiles"]["1x1"]["theta"])
    moving, inert = int(np.argmax(spec.step_weight)), np.flatnonzero(spec.inert)
    for key, index, value, error in (("point", 17, None, "re-derives"), ("point", 0, None, "re-derives"),
                                     ("theta", moving, None, "re-derives"), ("theta", moving, 0.5, "0 or 1"),
                                     ("theta", int(inert[0]) if len(inert) else moving, None, "canonical|re-derives")):
        bad = copy.deepcopy(good)
        numbers = bad["tiles"]["1x1"][key]
        numbers[index] = (1 - numbers[index] if key == "theta" else numbers[index] + 1e-3) if value is None else value
        with pytest.raises(CertificateError, match=error):
            check(inst, "qpb", bad)
    for huge in (1e300, -1.0, 1.5):   # a Frank-Wolfe point mixes permutations: entries in [0, 1]
        bad = copy.deepcopy(good)
        bad["tiles"]["1x1"]["point"][3] = huge
        with pytest.raises(CertificateError, match=r"\[0, 1\]"):
            check(inst, "qpb", bad)
    bad = copy.deepcopy(good)
    bad["tiles"]["1x1"]["point"] = bad["tiles"]["1x1"]["point"][:-1]
    with pytest.raises(CertificateError):
        check(inst, "qpb", bad)
    with pytest.raises(CertificateError, match="no point"):
        check(inst, "projected-eigenvalue", good)


@pytest.mark.parametrize("method, kind", [("pb", "projected-eigenvalue"), ("qpb", "qpb")])
def test_a_swapped_instance_does_not_prove_the_bound(nug12_solutions, method, kind):
    data = json.loads(Path(nug12_solutions[method]).read_text())["certificate"]
    other = load(QAPLIB / "scr12.yaml").instance             # same size, other flows and grid
    with pytest.raises(CertificateError):
        check(other, kind, data)


def test_convexity_margin_is_proven_and_small():
    lo = load(QAPLIB / "nug12.yaml")
    A, B = projected.tile_matrices(lo.instance.weights, lo.instance.layouts[0].distance)
    spec = projected.spectral(A, B)
    mu = projected.convexity_margin(A, B, spec.S, spec.T)
    assert 0 < mu < 1e-6
    zero = np.zeros_like(A)                        # without S and T the form is far from convex
    assert projected.convexity_margin(A, B, zero, zero) > 1


def test_a_stopped_qpb_keeps_gilmore_lawler_tiles_that_certify():
    """Ctrl-C before a tile's exact proof: the tile keeps its Gilmore-Lawler bound (the proof takes
    seconds on 40 slots), marked so, and the certificate still re-derives."""
    ld = load(Path(__file__).resolve().parents[1] / "instances/placement/qaplib/nug12.yaml")
    options = SolveOptions(quiet=True)
    options.interrupted = True
    result = run(ld, "qpb", options)
    tiles = result.certificate["tiles"]
    assert tiles and all(entry["from"] == "gilmore-lawler" for entry in tiles.values())
    value = check(ld.instance, "qpb", result.certificate)
    assert value == pytest.approx(result.bound)
    assert value == min(float(gilmore_lawler_tile(ld.instance, lay)) for lay in ld.instance.layouts)
