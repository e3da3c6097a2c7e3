"""Routing as pure functions: X-then-Y mesh routes and endpoint-to-endpoint paths in a pod.

On a chip, a packet goes X first then Y (dimension order, deadlock-free on a mesh). Between
GPUs it leaves through I/O port ``k`` of the source GPU, crosses switch plane ``k`` and enters
through port ``k`` of the destination GPU (rail-optimised Clos: plane ``k`` joins only ports
``k``). Which port an access uses is decided by the address map (:mod:`nuna.topology.address`),
never here: cross-GPU routes take the port as an argument.

These node-level functions are for tests, tools and small callers; the simulator uses the
equivalent precomputed edge paths of :mod:`nuna.topology.geometry`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import networkx as nx

from nuna.errors import TopologyError
from nuna.topology.geometry import chip_geometry
from nuna.topology.nodes import Cu, Hbm, IoPort, Node, Router, Switch
from nuna.topology.spec import TopologySpec

Endpoint = Router | Cu | IoPort | Hbm | Switch


def _check_router(spec: TopologySpec, xy: tuple[int, int]) -> None:
    x, y = xy
    if not (0 <= x < spec.chip.cols and 0 <= y < spec.chip.rows):
        raise TopologyError(f"router ({x}, {y}) is outside the {spec.chip.cols}x{spec.chip.rows} mesh")


def xy_route(spec: TopologySpec, gpu: int, src_xy: tuple[int, int], dst_xy: tuple[int, int]) -> list[Router]:
    """Routers visited from ``src_xy`` to ``dst_xy`` (both included), X first then Y; its
    length is the Manhattan distance plus one."""
    _check_router(spec, src_xy)
    _check_router(spec, dst_xy)
    (x, y), (tx, ty) = src_xy, dst_xy
    out = [Router(gpu, x, y)]
    while x != tx:
        x += 1 if tx > x else -1
        out.append(Router(gpu, x, y))
    while y != ty:
        y += 1 if ty > y else -1
        out.append(Router(gpu, x, y))
    return out


def attached_router(spec: TopologySpec, node: Router | Cu | IoPort | Hbm) -> Router:
    """The mesh router an on-chip endpoint hangs off (a router is its own)."""
    geo = chip_geometry(spec.chip)
    chip = spec.chip
    if isinstance(node, Router):
        _check_router(spec, (node.x, node.y))
        return node
    if isinstance(node, Cu):
        _check_index("CU", node.cu, chip.cus)
        r = int(geo.cu_router[node.cu])
    elif isinstance(node, IoPort):
        _check_index("I/O port", node.port, chip.io_ports)
        r = int(geo.port_router[node.port])
    else:
        _check_index("HBM stack", node.stack, chip.hbm_stacks)
        r = int(geo.stack_router[node.stack])
    x, y = geo.router_xy[r]
    return Router(node.gpu, int(x), int(y))


def _check_index(what: str, index: int, count: int) -> None:
    if not 0 <= index < count:
        raise TopologyError(f"{what} {index} does not exist (the chip has {count})")


def _on_chip(
    spec: TopologySpec, src: Router | Cu | IoPort | Hbm, dst: Router | Cu | IoPort | Hbm
) -> list[Node]:
    if src == dst:
        return [src]
    a, b = attached_router(spec, src), attached_router(spec, dst)
    mesh: list[Node] = list(xy_route(spec, src.gpu, (a.x, a.y), (b.x, b.y)))
    head: list[Node] = [] if isinstance(src, Router) else [src]
    tail: list[Node] = [] if isinstance(dst, Router) else [dst]
    return head + mesh + tail


def route(spec: TopologySpec, src: Endpoint, dst: Endpoint, *, port: int | None = None) -> list[Node]:
    """Nodes from ``src`` to ``dst`` (both included) for any two endpoints of a pod.

    On one GPU the route is on-chip (``port`` must be None). Between GPUs it goes through I/O
    port ``port`` of both GPUs and ``Switch(port)``; when an endpoint is itself an I/O port or
    a switch, ``port`` may be omitted and must agree if given."""
    if not isinstance(src, Endpoint) or not isinstance(dst, Endpoint):
        raise TopologyError(f"route endpoints must be topology nodes, got {src!r} and {dst!r}")
    planes = {n.port for n in (src, dst) if isinstance(n, IoPort)} | {
        n.plane for n in (src, dst) if isinstance(n, Switch)
    }
    if isinstance(src, Switch) and isinstance(dst, Switch):
        if src == dst:
            return [src]
        raise TopologyError("switch planes are not connected to each other (single-level Clos)")
    src_gpu = None if isinstance(src, Switch) else src.gpu
    dst_gpu = None if isinstance(dst, Switch) else dst.gpu
    if src_gpu is not None and src_gpu == dst_gpu:
        if port is not None:
            raise TopologyError("a route inside one GPU takes no port")
        return _on_chip(spec, src, dst)  # type: ignore[arg-type]
    if port is not None:
        planes.add(port)
    if len(planes) > 1:
        raise TopologyError(f"route {src!r} -> {dst!r} names different planes {sorted(planes)}")
    if not planes:
        raise TopologyError(
            f"route {src!r} -> {dst!r} crosses GPUs: give the I/O port (the address map chooses it)"
        )
    k = planes.pop()
    _check_index("I/O port", k, spec.chip.io_ports)
    out: list[Node] = []
    if isinstance(src, Switch):
        out.append(src)
    else:
        out += _on_chip(spec, src, IoPort(src.gpu, k))
        out.append(Switch(k))
    if not isinstance(dst, Switch):
        out += _on_chip(spec, IoPort(dst.gpu, k), dst)
    return out


def _edge_latency_from_spec(spec: TopologySpec, u: Node, v: Node) -> float:
    """Latency of edge ``u -> v`` computed from the spec (raises if there is no such edge)."""
    chip, su = spec.chip, spec.scaleup
    bad = TopologyError(f"no edge {u!r} -> {v!r} in {spec.name}")
    if isinstance(u, Router) and isinstance(v, Router):
        if u.gpu != v.gpu or abs(u.x - v.x) + abs(u.y - v.y) != 1:
            raise bad
        _check_router(spec, (u.x, u.y))
        _check_router(spec, (v.x, v.y))
        same_die = (u.x // chip.die_cols == v.x // chip.die_cols) and (
            u.y // chip.die_rows == v.y // chip.die_rows
        )
        return chip.noc_hop_latency_ns if same_die else chip.die_crossing_latency_ns
    if isinstance(u, IoPort) and isinstance(v, Switch):
        if u.port != v.plane:
            raise bad
        return su.link_latency_ns
    if isinstance(u, Switch) and isinstance(v, IoPort):
        if v.port != u.plane:
            raise bad
        return su.switch_latency_ns + su.link_latency_ns
    router, other = (u, v) if isinstance(u, Router) else (v, u)
    if not isinstance(router, Router) or isinstance(other, Router | Switch) or router.gpu != other.gpu:
        raise bad
    if attached_router(spec, other) != router:
        raise bad
    if isinstance(other, Cu):
        return chip.cu_attach_latency_ns
    if isinstance(other, IoPort):
        return chip.io_port_latency_ns
    return chip.hbm_attach_latency_ns


def path_latency_ns(
    graph_or_spec: nx.DiGraph | TopologySpec, path: Sequence[Node], *, with_memory: bool = False
) -> float:
    """Uncontended latency of ``path``: the sum of its edges' ``latency_ns``, plus (with
    ``with_memory``) the memory access latency once per HBM stack on the path. Raises
    ``TopologyError`` if two consecutive nodes are not joined by an edge."""
    total = 0.0
    if isinstance(graph_or_spec, TopologySpec):
        spec = graph_or_spec
        for u, v in pairwise(path):
            total += _edge_latency_from_spec(spec, u, v)
        memory_ns = spec.chip.memory_access_latency_ns
    else:
        graph = graph_or_spec
        for u, v in pairwise(path):
            data = graph.get_edge_data(u, v)
            if data is None:
                raise TopologyError(f"no edge {u!r} -> {v!r} in the graph")
            total += float(data["latency_ns"])
        memory_ns = float(graph.graph.get("memory_access_latency_ns", 0.0))
    if with_memory:
        total += memory_ns * sum(isinstance(n, Hbm) for n in path)
    return total
