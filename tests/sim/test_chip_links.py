"""The per-chip-link table of a replay (``SimResult.chip_links``, JSON ``chip_links``): it covers
every physical chip edge once, its bytes add up to the per-class and per-port figures measured
elsewhere in the result, utilisation is a fraction, its heads' waits add up to the per-class
and per-port ones, and a link carries traffic exactly when a route of the run crosses it."""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna.plan.generate import generate
from nuna.plan.ir import Buffer, ChunkPlacement, Placement, TbPlacement
from nuna.plan.xml import loads
from nuna.sim import simulate
from nuna.sim.result import PORT_WAIT_CLASSES, SimResult
from nuna.topology import Cu, Hbm, IoPort, Node, build_gpu, load_topology, route
from nuna.topology.address import io_port, physical_address
from nuna.topology.render import parse_node
from nuna.topology.spec import TopologySpec
from tests.sim.test_replay import ONE_SEND

CHIP_KINDS = ("noc", "die_crossing", "cu", "io", "hbm")


@pytest.fixture(scope="module")
def spec() -> TopologySpec:
    return load_topology("nuna-4die")


@pytest.fixture(scope="module")
def res2(spec: TopologySpec) -> SimResult:
    """A 2-GPU direct allgather with two threadblocks per peer."""
    return simulate(generate("allgather", 2, tbs_per_peer=2), spec, 64 * 1024)


@pytest.fixture(scope="module")
def ag2(res2: SimResult) -> dict[str, Any]:
    return res2.to_json()


def _links(rows: list[dict[str, Any]]) -> list[tuple[Node, Node]]:
    return [(parse_node(r["src"]), parse_node(r["dst"])) for r in rows]


def test_table_covers_every_physical_chip_edge_once(spec: TopologySpec, ag2: dict[str, Any]) -> None:
    graph = build_gpu(spec)
    rows = ag2["chip_links"]
    links = _links(rows)
    assert len(links) == len(set(links)) == graph.number_of_edges()
    assert set(links) == set(graph.edges())
    for (u, v), row in zip(links, rows, strict=True):
        assert row["kind"] == graph.edges[u, v]["kind"]
        assert (repr(u), repr(v)) == (row["src"], row["dst"])  # names round-trip
    # no scale-up cable or switch: those belong to the pod
    assert all(r["kind"] in CHIP_KINDS for r in rows)


def test_table_is_sorted_and_json_shaped(spec: TopologySpec, ag2: dict[str, Any]) -> None:
    rows = ag2["chip_links"]
    assert all(set(r) == {"src", "dst", "kind", "bytes", "utilization_mean", "utilization_max",
                          "queueing_ns_mean"} for r in rows)
    assert all(isinstance(r["bytes"], int) for r in rows)
    # sorted by source then destination, in the chip graph's node order (routers, CUs, ports, stacks)
    position = {node: i for i, node in enumerate(build_gpu(spec).nodes)}
    keys = [(position[u], position[v]) for u, v in _links(rows)]
    assert keys == sorted(keys)


def test_bytes_add_up_to_the_class_and_port_totals(ag2: dict[str, Any]) -> None:
    by_kind: dict[str, int] = defaultdict(int)
    for row in ag2["chip_links"]:
        by_kind[row["kind"]] += row["bytes"]
    for kind in CHIP_KINDS:
        assert by_kind[kind] == ag2["links"].get(kind, {}).get("bytes", 0), kind
    # every byte through Router -> IoPort k leaves on scale-up link k, and enters likewise
    for row in ag2["chip_links"]:
        u, v = parse_node(row["src"]), parse_node(row["dst"])
        if row["kind"] == "io":
            port = v.port if isinstance(v, IoPort) else u.port  # type: ignore[union-attr]
            side = "egress_bytes" if isinstance(v, IoPort) else "ingress_bytes"
            assert row["bytes"] == sum(p[side] for p in ag2["io_ports"] if p["port"] == port)
    assert by_kind["io"] == 2 * sum(p["egress_bytes"] for p in ag2["io_ports"]) > 0


def test_utilisation_is_a_fraction_consistent_with_bytes(ag2: dict[str, Any]) -> None:
    n = ag2["ngpus"]
    for row in ag2["chip_links"]:
        mean, peak = row["utilization_mean"], row["utilization_max"]
        assert 0.0 <= mean <= peak <= 1.0
        assert peak <= n * mean + 1e-12  # the max of n non-negative values is at most their sum
        assert (row["bytes"] > 0) == (peak > 0)
    for kind in CHIP_KINDS:
        rows = [r for r in ag2["chip_links"] if r["kind"] == kind]
        summary = ag2["links"][kind]
        assert max(r["utilization_max"] for r in rows) == pytest.approx(summary["utilization_max"])
        mean = sum(r["utilization_mean"] for r in rows) / len(rows)
        assert mean == pytest.approx(summary["utilization_mean"])


def test_idle_links_are_zero(ag2: dict[str, Any]) -> None:
    rows = ag2["chip_links"]
    idle = [r for r in rows if r["bytes"] == 0]
    # two threadblocks per GPU: almost every CU's links are idle
    assert len([r for r in idle if r["kind"] == "cu"]) >= 2 * (1008 - 2 * 2)
    assert all(r["utilization_mean"] == r["utilization_max"] == r["queueing_ns_mean"] == 0.0 for r in idle)


def _port_link_grants(result: dict[str, Any], port: dict[str, Any], cls: str) -> int:
    """Grants of one port link in a replay of 256-byte flits: every packet on a port's links is
    one stored line."""
    side = "egress_bytes" if cls in ("mesh_to_port", "port_to_switch") else "ingress_bytes"
    assert result["packet_bytes"] == 256
    return port[side] // 256


@pytest.mark.parametrize(("gpus", "queued"), [(2, "mesh_to_port"), (4, "switch_to_port")])
def test_port_waits_add_up_to_the_wait_classes(spec: TopologySpec, gpus: int, queued: str) -> None:
    # the per-edge waits behind the port rows and the per-class totals are summed apart; with 4
    # GPUs senders converge on a switch output, so a port's up and down links cannot be swapped
    res = simulate(generate("allgather", gpus, tbs_per_peer=2), spec, 64 * 1024 * gpus // 2).to_json()
    for cls in PORT_WAIT_CLASSES:
        total = sum(p["queueing_ns_mean"][cls] * _port_link_grants(res, p, cls) for p in res["io_ports"])
        assert total == pytest.approx(res["queueing_ns"][cls]["total"], rel=1e-9, abs=1e-5), cls
    assert res["queueing_ns"][queued]["total"] > 0  # the case queues where the test can see it


def test_an_io_link_row_waits_as_its_ports_do(ag2: dict[str, Any]) -> None:
    # Router -> IoPort k is the link a port row calls mesh_to_port, IoPort k -> Router port_to_mesh;
    # the table weighs the GPUs by their grants
    checked = 0
    for row in ag2["chip_links"]:
        u, v = parse_node(row["src"]), parse_node(row["dst"])
        if row["kind"] != "io" or row["bytes"] == 0:
            continue
        cls, k = ("mesh_to_port", v.port) if isinstance(v, IoPort) else ("port_to_mesh", u.port)  # type: ignore[union-attr]
        ports = [p for p in ag2["io_ports"] if p["port"] == k]
        grants = [_port_link_grants(ag2, p, cls) for p in ports]
        wait = sum(p["queueing_ns_mean"][cls] * g for p, g in zip(ports, grants, strict=True))
        # each side rounds its sums to 1e-6 ns (residues of zero waits) before dividing
        assert row["queueing_ns_mean"] == pytest.approx(wait / sum(grants), rel=1e-9, abs=1e-6)
        checked += 1
    assert checked == 2 * 12


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cu=st.integers(0, 1007), src_stack=st.integers(0, 15), dst_stack=st.integers(0, 15))
def test_a_link_carries_bytes_exactly_when_a_route_crosses_it(
        spec: TopologySpec, cu: int, src_stack: int, dst_stack: int) -> None:
    # one flit: GPU 0's CU loads it from src_stack, stores it into dst_stack of GPU 1
    placement = Placement(threadblocks=(TbPlacement(0, 0, cu),),
                          chunks=(ChunkPlacement(0, Buffer.OUTPUT, 0, src_stack),
                                  ChunkPlacement(1, Buffer.OUTPUT, 1, dst_stack)))
    res = simulate(dataclasses.replace(loads(ONE_SEND), placement=placement), spec, 512)
    port = io_port(spec, physical_address(spec, dst_stack, 0, 256), None)
    paths = [route(spec, Cu(0, cu), Hbm(0, src_stack)), route(spec, Hbm(0, src_stack), Cu(0, cu)),
             route(spec, Cu(0, cu), IoPort(0, port)), route(spec, IoPort(1, port), Hbm(1, dst_stack))]
    crossed = {(u._replace(gpu=0), v._replace(gpu=0))  # type: ignore[union-attr]
               for path in paths for u, v in itertools.pairwise(path)}
    rows = [r.to_json() for r in res.chip_links]
    used = {link for link, r in zip(_links(rows), rows, strict=True) if r["bytes"] > 0}
    assert used == crossed



def test_the_table_can_be_left_out(res2: SimResult, ag2: dict[str, Any]) -> None:
    short = res2.to_json(chip_links=False)
    assert set(ag2) - set(short) == {"chip_links"}
    assert {k: v for k, v in ag2.items() if k not in ("chip_links", "wall_s")} == \
        {k: v for k, v in short.items() if k != "wall_s"}


def test_a_lone_flit_waits_nowhere(spec: TopologySpec) -> None:
    res = simulate(loads(ONE_SEND), spec, 512)
    assert res.longest_port_wait() is None
    assert all(link.queueing_ns_mean == 0.0 for link in res.chip_links)


def test_the_longest_port_wait_is_the_largest_port_row(res2: SimResult, ag2: dict[str, Any]) -> None:
    hot = res2.longest_port_wait()
    assert hot is not None
    gpu, port, link, wait_ns = hot
    row = next(p for p in ag2["io_ports"] if (p["gpu"], p["port"]) == (gpu, port))
    assert row["queueing_ns_mean"][link] == wait_ns == max(
        w for p in ag2["io_ports"] for w in p["queueing_ns_mean"].values())
