"""Mesh distances, XY routes and link loads on small meshes, checked by hand."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wafopt.core.errors import InstanceError
from wafopt.hardware.mesh import UNREACHABLE, Mesh


def test_manhattan_without_faults():
    m = Mesh.build(3, 4)
    assert m.distance((0, 0), (2, 3)) == 5
    assert m.distance((1, 2), (1, 2)) == 0
    assert len(m.healthy_dies) == 12
    assert len(m.directed_links) == 2 * (3 * 3 + 2 * 4)  # 17 physical links, both directions


def test_faulty_die_forces_detour():
    # 3 x 3 with the centre dead: (1, 0) -> (1, 2) must go around, 4 hops instead of 2
    m = Mesh.build(3, 3, faulty_dies=[[1, 1]])
    assert m.distance((1, 0), (1, 2)) == 4
    assert m.distance((0, 0), (2, 2)) == 4
    route = m.xy_route((1, 0), (1, 2))
    assert route[0] == (1, 0) and route[-1] == (1, 2) and len(route) == 5
    assert (1, 1) not in route


def test_faulty_link_forces_detour():
    m = Mesh.build(2, 2, faulty_links=[[[0, 0], [0, 1]]])
    assert m.distance((0, 0), (0, 1)) == 3
    assert m.xy_route((0, 0), (0, 1)) == [(0, 0), (1, 0), (1, 1), (0, 1)]


@st.composite
def faulty_meshes(draw):
    rows, cols = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    dies = [(r, c) for r in range(rows) for c in range(cols)]
    links = [((r, c), (r, c + 1)) for r, c in dies if c + 1 < cols] + \
            [((r, c), (r + 1, c)) for r, c in dies if r + 1 < rows]
    faulty_dies = draw(st.lists(st.sampled_from(dies), max_size=len(dies) // 3, unique=True))
    faulty_links = draw(st.lists(st.sampled_from(links), max_size=len(links) // 3, unique=True)) if links else []
    return Mesh.build(rows, cols, faulty_dies=faulty_dies, faulty_links=faulty_links)


@given(faulty_meshes())
@settings(max_examples=200, deadline=None)
def test_distance_matrix_equals_breadth_first_search_from_each_die(mesh):
    # the vectorized all-pairs search against a plain queue BFS, faults and disconnected parts included
    for a in mesh.healthy_dies:
        reached = mesh._bfs(a)
        for r in range(mesh.rows):
            for c in range(mesh.cols):
                expected = reached.get((r, c), UNREACHABLE)
                assert mesh.distance_matrix[mesh.index(a), mesh.index((r, c))] == expected
    for d in mesh.faulty_dies:
        assert (mesh.distance_matrix[mesh.index(d)] == UNREACHABLE).all()


def test_xy_route_goes_along_the_row_first():
    m = Mesh.build(3, 3)
    assert m.xy_route((0, 0), (2, 2)) == [(0, 0), (0, 1), (0, 2), (1, 2), (2, 2)]
    assert m.xy_route((2, 2), (0, 0)) == [(2, 2), (2, 1), (2, 0), (1, 0), (0, 0)]



@given(faulty_meshes(), st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None)
def test_xy_link_table_holds_each_route_xy_route_takes(mesh, rng):
    # the numpy table against xy_route one pair at a time, detours around faults included; dies in
    # any order, only pairs the healthy mesh connects
    dies = [d for d in mesh.healthy_dies if rng.random() < 0.8]
    rng.shuffle(dies)
    connected = [d for d in dies if not dies or mesh.distance_matrix[mesh.index(dies[0]), mesh.index(d)] != UNREACHABLE]
    table = mesh.xy_link_table(connected)
    links = mesh.directed_links
    assert table.shape == (len(connected), len(connected), len(links))
    for a, src in enumerate(connected):
        for b, dst in enumerate(connected):
            used = {links[k] for k in map(int, table[a, b].nonzero()[0])}
            assert used == set(mesh.route_links(mesh.xy_route(src, dst)))

def test_link_loads_are_directed():
    m = Mesh.build(1, 3)
    loads = m.link_loads([([(0, 0), (0, 1), (0, 2)], 2.0), ([(0, 2), (0, 1)], 5.0), ([(0, 0), (0, 1)], 1.0)])
    assert loads == {((0, 0), (0, 1)): 3.0, ((0, 1), (0, 2)): 2.0, ((0, 2), (0, 1)): 5.0}


def test_paths_with_detour():
    m = Mesh.build(2, 2)
    assert len(m.paths((0, 0), (1, 1))) == 2            # two minimal paths
    assert len(m.paths((0, 0), (0, 1), detour=2)) == 2  # direct, and around the square
    assert all(len(p) - 1 <= 3 for p in m.paths((0, 0), (0, 1), detour=2))


def test_disconnected_mesh():
    m = Mesh.build(1, 3, faulty_dies=[[0, 1]])
    assert not m.is_connected()
    with pytest.raises(InstanceError, match="not connected"):
        m.distance((0, 0), (0, 2))
    with pytest.raises(InstanceError, match="connected"):
        m.require_connected()


def test_alpha_beta_time():
    m = Mesh.build(2, 2, link_bandwidth=4.0, link_latency=0.5)
    assert m.transfer_time(8.0, hops=3) == pytest.approx(3 * 0.5 + 8.0 / 4.0)
    assert m.transfer_time(0.0, hops=3) == 0.0


@pytest.mark.parametrize("kwargs, message", [
    (dict(rows=0, cols=3), "rows: must be a positive integer, got 0"),
    (dict(rows=2, cols=2, faulty_dies=[[2, 0]]), "faulty_dies[0]: die [2, 0] lies outside the 2 x 2 mesh"),
    (dict(rows=2, cols=2, faulty_links=[[[0, 0], [1, 1]]]), "not mesh neighbours"),
])
def test_bad_mesh(kwargs, message):
    with pytest.raises(InstanceError) as exc:
        Mesh.build(**kwargs)
    assert message in str(exc.value)


def test_boustrophedon():
    assert list(Mesh.build(2, 3).boustrophedon()) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0)]
