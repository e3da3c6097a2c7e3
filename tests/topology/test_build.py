"""Structural invariants of the chip and pod graphs, in the networkx test style."""

from __future__ import annotations

import io
from collections import Counter

import networkx as nx
import numpy as np
import pytest

from nuna.errors import TopologyError
from nuna.topology import (
    EDGE_KINDS,
    Cu,
    Hbm,
    IoPort,
    Router,
    Switch,
    build_gpu,
    build_pod,
    chip_geometry,
    default_topology,
    load_topology,
    pod_layout,
    to_graphml,
)
from nuna.topology.build import local_node

SPEC = default_topology()
GPU = build_gpu(SPEC)


def _of(graph: nx.DiGraph, kind: type) -> list:
    return [n for n in graph if isinstance(n, kind)]


def test_counts() -> None:
    chip = SPEC.chip
    assert len(_of(GPU, Router)) == chip.cols * chip.rows == 144
    assert len(_of(GPU, Cu)) == 1008
    assert len(_of(GPU, IoPort)) == 12
    assert len(_of(GPU, Hbm)) == 16
    assert not _of(GPU, Switch)
    assert all(
        GPU.nodes[n]["kind"] == {Router: "router", Cu: "cu", IoPort: "io", Hbm: "hbm"}[type(n)] for n in GPU
    )


def test_node_keys_of_different_kinds_are_distinct() -> None:
    # Cu(0, 5), IoPort(0, 5) and Hbm(0, 5) are equal as plain tuples; they must be three nodes.
    assert Cu(0, 5) in GPU
    assert IoPort(0, 5) in GPU
    assert Hbm(0, 5) in GPU
    assert len({Cu(0, 5), IoPort(0, 5), Hbm(0, 5)}) == 3
    assert GPU.nodes[Cu(0, 5)]["kind"] == "cu"
    assert GPU.nodes[IoPort(0, 5)]["kind"] == "io"


def test_mesh_degree_histogram() -> None:
    chip = SPEC.chip
    mesh = GPU.subgraph(_of(GPU, Router))
    degrees = Counter(d for _, d in mesh.out_degree())
    cols, rows = chip.cols, chip.rows
    assert degrees == {2: 4, 3: 2 * (cols - 2) + 2 * (rows - 2), 4: (cols - 2) * (rows - 2)}
    # mesh links are bidirectional with identical attributes both ways
    for u, v, data in mesh.edges(data=True):
        assert mesh.edges[v, u] == data


def test_die_crossings_sit_between_dies() -> None:
    crossings = {(min(u.x, v.x), max(u.x, v.x)) for u, v, k in GPU.edges(data="kind") if k == "die_crossing"}
    assert crossings == {(5, 6), (11, 12), (17, 18)}
    count = sum(1 for *_, k in GPU.edges(data="kind") if k == "die_crossing")
    assert count == 3 * 6 * 2
    dies = {GPU.nodes[r]["die"] for r in _of(GPU, Router)}
    assert dies == {0, 1, 2, 3}
    assert all(GPU.nodes[r]["die"] == r.x // 6 for r in _of(GPU, Router))


def test_every_edge_has_the_contract_attributes() -> None:
    for u, v, data in GPU.edges(data=True):
        assert set(data) == {"latency_ns", "bandwidth_gbps", "kind"}, (u, v)
        assert data["kind"] in EDGE_KINDS
        assert data["latency_ns"] >= 0
        assert data["bandwidth_gbps"] > 0


def _attached(graph: nx.DiGraph, node: object) -> Router:
    (router,) = [n for n in graph.successors(node) if isinstance(n, Router)]
    assert graph.has_edge(router, node)
    return router


@pytest.mark.parametrize("name", ["nuna-4die", "mi210-like", "mi355x-like", "mi300x-like"])
def test_ports_on_short_edges_and_stacks_on_long_edges(name: str) -> None:
    spec = load_topology(name)
    graph = build_gpu(spec)
    chip = spec.chip
    port_routers = [_attached(graph, p) for p in sorted(_of(graph, IoPort))]
    stack_routers = [_attached(graph, s) for s in sorted(_of(graph, Hbm))]
    assert all(r.x in (0, chip.cols - 1) for r in port_routers)
    assert all(r.y in (0, chip.rows - 1) for r in stack_routers)
    assert len(set(port_routers)) == chip.io_ports
    assert len(set(stack_routers)) == chip.hbm_stacks
    # half the ports on each short edge, half the stacks on each long edge
    assert Counter(r.x for r in port_routers) == {
        0: (chip.io_ports + 1) // 2,
        chip.cols - 1: chip.io_ports // 2,
    }
    assert Counter(r.y for r in stack_routers) == {
        chip.rows - 1: (chip.hbm_stacks + 1) // 2,
        0: chip.hbm_stacks // 2,
    }
    # consecutive port indices are perimeter neighbours: clockwise, up the left edge, down the right
    left = [r.y for r in port_routers if r.x == 0]
    right = [r.y for r in port_routers if r.x == chip.cols - 1]
    assert port_routers[: len(left)] == [r for r in port_routers if r.x == 0]
    assert left == sorted(left)
    assert right == sorted(right, reverse=True)
    # every die has the same number of stacks on each long edge
    for edge_y in (0, chip.rows - 1):
        per_die = Counter(r.x // chip.die_cols for r in stack_routers if r.y == edge_y)
        assert len(set(per_die.values())) == 1
        assert len(per_die) == chip.dies_x


def test_nuna_4die_port_and_stack_positions() -> None:
    ports = [_attached(GPU, IoPort(0, k)) for k in range(12)]
    assert [(r.x, r.y) for r in ports[:6]] == [(0, y) for y in range(6)]
    assert [(r.x, r.y) for r in ports[6:]] == [(23, y) for y in range(5, -1, -1)]
    stacks = [_attached(GPU, Hbm(0, s)) for s in range(16)]
    assert sorted(r.x for r in stacks if r.y == 5) == [1, 4, 7, 10, 13, 16, 19, 22]
    assert sorted(r.x for r in stacks if r.y == 0) == [1, 4, 7, 10, 13, 16, 19, 22]


def test_cus_seven_per_router_grouped_by_die() -> None:
    per_router = Counter(_attached(GPU, c) for c in _of(GPU, Cu))
    assert set(per_router.values()) == {7}
    assert len(per_router) == 144
    geo = chip_geometry(SPEC.chip)
    assert np.array_equal(geo.cu_die, np.repeat(np.arange(4), 252))


@pytest.mark.parametrize("ngpus", [2, 5])
def test_pod_rail_wiring(ngpus: int) -> None:
    pod = build_pod(SPEC, ngpus)
    switches = _of(pod, Switch)
    assert sorted(switches) == [Switch(k) for k in range(12)]
    for k in range(12):
        assert set(pod.successors(Switch(k))) == {IoPort(g, k) for g in range(ngpus)}
        assert set(pod.predecessors(Switch(k))) == {IoPort(g, k) for g in range(ngpus)}
        for g in range(ngpus):
            up, down = pod.edges[IoPort(g, k), Switch(k)], pod.edges[Switch(k), IoPort(g, k)]
            assert up["kind"] == down["kind"] == "scaleup"
            assert down["latency_ns"] - up["latency_ns"] == pytest.approx(SPEC.scaleup.switch_latency_ns)
    assert pod.number_of_nodes() == ngpus * GPU.number_of_nodes() + 12
    assert pod.number_of_edges() == ngpus * GPU.number_of_edges() + 2 * 12 * ngpus
    assert nx.is_strongly_connected(pod)


def test_pod_layout_matches_the_graph() -> None:
    layout = pod_layout(SPEC, 3)
    pod = build_pod(SPEC, 3)
    geo = layout.chip
    assert layout.num_edges == pod.number_of_edges()

    def key(n: int) -> object:
        g, local = divmod(n, geo.num_nodes)
        return local_node(geo, g, local) if g < 3 else Switch(n - 3 * geo.num_nodes)

    rng = np.random.default_rng(1)
    for e in rng.choice(layout.num_edges, size=400, replace=False).tolist() + list(
        range(layout.scaleup_base, layout.num_edges)
    ):
        data = pod.edges[key(int(layout.edge_src[e])), key(int(layout.edge_dst[e]))]
        assert data["latency_ns"] == layout.edge_latency_ns[e]
        assert data["bandwidth_gbps"] == layout.edge_bandwidth_gbps[e]
        assert data["kind"] == EDGE_KINDS[layout.edge_kind[e]]


def test_remote_write_edges_form_a_connected_path() -> None:
    layout = pod_layout(SPEC, 2)
    edges = layout.remote_write_edges(0, 517, 7, 1, 3)
    assert np.array_equal(layout.edge_dst[edges[:-1]], layout.edge_src[edges[1:]])
    geo = layout.chip
    assert local_node(geo, 0, int(layout.edge_src[edges[0]])) == Cu(0, 517)
    assert local_node(geo, 1, int(layout.edge_dst[edges[-1]]) - geo.num_nodes) == Hbm(1, 3)


def test_flat_chip_has_free_on_chip_edges() -> None:
    spec = load_topology("flat-switch")
    pod = build_pod(spec, 4)
    for _, _, data in pod.edges(data=True):
        if data["kind"] == "scaleup":
            assert data["latency_ns"] == 1000.0
        else:
            assert data["latency_ns"] == 0.0
            assert data["bandwidth_gbps"] == float("inf")


def test_bad_gpu_counts() -> None:
    for bad in (0, -1, 5000):
        with pytest.raises(TopologyError, match="number of GPUs"):
            build_pod(SPEC, bad)


def test_graphml_round_trip_keeps_attributes() -> None:
    spec = load_topology("mi210-like")
    graph = build_pod(spec, 2)
    back = nx.read_graphml(io.BytesIO(to_graphml(graph)))
    assert back.number_of_nodes() == graph.number_of_nodes()
    assert back.number_of_edges() == graph.number_of_edges()
    u, v = IoPort(1, 2), Switch(2)
    assert back.edges[repr(u), repr(v)]["latency_ns"] == graph.edges[u, v]["latency_ns"]
    assert back.nodes[repr(Router(0, 3, 1))]["kind"] == "router"
    assert to_graphml(graph) == to_graphml(build_pod(spec, 2))  # deterministic bytes
