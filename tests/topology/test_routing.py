"""Routing: X-then-Y routes, endpoint routes in a pod, path latencies, precomputed edge paths."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import TopologyError
from nuna.topology import (
    Cu,
    Hbm,
    IoPort,
    Router,
    Switch,
    build_pod,
    chip_geometry,
    default_topology,
    path_latency_ns,
    route,
    xy_route,
)
from nuna.topology.build import local_node

SPEC = default_topology()
POD = build_pod(SPEC, 3)
GEO = chip_geometry(SPEC.chip)
CHIP = SPEC.chip

xs = st.integers(0, CHIP.cols - 1)
ys = st.integers(0, CHIP.rows - 1)
gpus = st.integers(0, 2)


def endpoints() -> st.SearchStrategy[object]:
    return st.one_of(
        st.builds(Router, gpus, xs, ys),
        st.builds(Cu, gpus, st.integers(0, CHIP.cus - 1)),
        st.builds(IoPort, gpus, st.integers(0, CHIP.io_ports - 1)),
        st.builds(Hbm, gpus, st.integers(0, CHIP.hbm_stacks - 1)),
        st.builds(Switch, st.integers(0, CHIP.io_ports - 1)),
    )


@given(xs, ys, xs, ys)
def test_xy_route_is_x_then_y_with_manhattan_length(x0: int, y0: int, x1: int, y1: int) -> None:
    path = xy_route(SPEC, 0, (x0, y0), (x1, y1))
    assert len(path) == abs(x0 - x1) + abs(y0 - y1) + 1
    assert path[0] == Router(0, x0, y0)
    assert path[-1] == Router(0, x1, y1)
    turned = False
    for a, b in itertools.pairwise(path):
        assert abs(a.x - b.x) + abs(a.y - b.y) == 1
        if a.y != b.y:
            turned = True
        else:
            assert not turned, "moved in x after moving in y"
    assert all(POD.has_edge(a, b) for a, b in itertools.pairwise(path))


@settings(max_examples=300)
@given(endpoints(), endpoints(), st.integers(0, CHIP.io_ports - 1))
def test_random_routes_are_valid_paths_in_the_pod(src: object, dst: object, port: int) -> None:
    fixed = {n.port for n in (src, dst) if isinstance(n, IoPort)} | {
        n.plane for n in (src, dst) if isinstance(n, Switch)
    }
    same_gpu = not isinstance(src, Switch) and not isinstance(dst, Switch) and src.gpu == dst.gpu  # type: ignore[union-attr]
    kwargs = {} if same_gpu or fixed else {"port": port}
    try:
        path = route(SPEC, src, dst, **kwargs)  # type: ignore[arg-type]
    except TopologyError:
        # only impossible requests: two different planes, or two switches
        assert len(fixed) > 1 or (isinstance(src, Switch) and isinstance(dst, Switch))
        return
    assert path[0] == src
    assert path[-1] == dst
    assert all(POD.has_edge(a, b) for a, b in itertools.pairwise(path))
    assert len(set(path)) == len(path)  # simple path
    assert path_latency_ns(SPEC, path) == pytest.approx(path_latency_ns(POD, path))
    # on-chip segments are X-then-Y: routers never revisit a column after a turn
    if same_gpu:
        assert not any(isinstance(n, Switch) for n in path)
    else:
        assert sum(isinstance(n, Switch) for n in path) == 1


def test_cross_gpu_route_needs_a_port() -> None:
    with pytest.raises(TopologyError, match="give the I/O port"):
        route(SPEC, Cu(0, 5), Hbm(1, 7))
    path = route(SPEC, Cu(0, 5), Hbm(1, 7), port=9)
    assert IoPort(0, 9) in path
    assert Switch(9) in path
    assert IoPort(1, 9) in path
    with pytest.raises(TopologyError, match="different planes"):
        route(SPEC, IoPort(0, 1), IoPort(1, 2))
    with pytest.raises(TopologyError, match="takes no port"):
        route(SPEC, Cu(0, 5), Hbm(0, 7), port=3)
    with pytest.raises(TopologyError, match="does not exist"):
        route(SPEC, Cu(0, 5000), Hbm(0, 7))


def test_path_latency_rejects_non_edges_and_adds_memory() -> None:
    with pytest.raises(TopologyError, match="no edge"):
        path_latency_ns(SPEC, [Router(0, 0, 0), Router(0, 2, 0)])
    with pytest.raises(TopologyError, match="no edge"):
        path_latency_ns(POD, [Cu(0, 0), Hbm(0, 0)])
    path = route(SPEC, Cu(0, 0), Hbm(0, 0))
    assert path_latency_ns(SPEC, path, with_memory=True) == pytest.approx(
        path_latency_ns(SPEC, path) + CHIP.memory_access_latency_ns
    )


def test_die_crossing_costs_more_than_a_hop() -> None:
    within = path_latency_ns(SPEC, [Router(0, 4, 0), Router(0, 5, 0)])
    across = path_latency_ns(SPEC, [Router(0, 5, 0), Router(0, 6, 0)])
    assert within == CHIP.noc_hop_latency_ns
    assert across == CHIP.die_crossing_latency_ns > within


@settings(max_examples=200)
@given(st.integers(0, CHIP.cus - 1), st.integers(0, CHIP.io_ports - 1), st.integers(0, CHIP.hbm_stacks - 1))
def test_precomputed_paths_match_node_routes(cu: int, port: int, stack: int) -> None:
    for table, src, dst in (
        (GEO.cu_port, Cu(0, cu), IoPort(0, port)),
        (GEO.port_cu, IoPort(0, port), Cu(0, cu)),
        (GEO.cu_stack, Cu(0, cu), Hbm(0, stack)),
        (GEO.stack_cu, Hbm(0, stack), Cu(0, cu)),
        (GEO.port_stack, IoPort(0, port), Hbm(0, stack)),
        (GEO.stack_port, Hbm(0, stack), IoPort(0, port)),
    ):
        i = {Cu: cu, IoPort: port, Hbm: stack}[type(src)]
        j = {Cu: cu, IoPort: port, Hbm: stack}[type(dst)]
        edges = table.path(i, j)
        nodes = [local_node(GEO, 0, int(GEO.edge_src[e])) for e in edges] + [
            local_node(GEO, 0, int(GEO.edge_dst[edges[-1]]))
        ]
        assert nodes == route(SPEC, src, dst)
        assert table.latency_ns[i, j] == pytest.approx(path_latency_ns(SPEC, nodes))
        assert table.hops[i, j] == len(nodes) - 3


def test_geometry_is_cached_and_read_only() -> None:
    assert chip_geometry(SPEC.chip) is GEO
    with pytest.raises(ValueError, match="read-only"):
        GEO.edge_latency_ns[0] = 1.0
    assert np.all(GEO.cu_port.latency_ns > 0)
