"""networkx builders of a chip and of a pod of chips joined by a rail-optimised Clos.

The graphs are views of :mod:`nuna.topology.geometry` (same nodes, same edges, same numbers),
for inspection, export and structural tests. Node keys are the typed NamedTuples of
:mod:`nuna.topology.nodes`; every node has a ``kind`` attribute (``router``, ``cu``, ``io``,
``hbm``, ``switch``) and every directed edge has ``latency_ns``, ``bandwidth_gbps`` and ``kind``
(``noc``, ``die_crossing``, ``cu``, ``io``, ``scaleup``, ``hbm``).

The cost rule the simulator applies, and that every number here is chosen for:

- every directed edge is a FIFO resource: a flit occupies it for ``flit_bytes / bandwidth_gbps``
  ns (GB/s = bytes per ns) and arrives ``latency_ns`` after it starts;
- a path's uncontended latency is the sum of its edges' ``latency_ns``, plus the chip's
  ``memory_access_latency_ns`` once for every HBM stack the path reads or writes;
- so fixed costs live on edges: the I/O port (controller and PHY) on ``Router->IoPort`` and
  ``IoPort->Router``, a cable on ``IoPort->Switch``, the switch's port-to-port latency plus a
  cable on ``Switch->IoPort``, the stack's attachment on ``Router->Hbm`` (requests and writes)
  and ``Hbm->Router`` (read data), the CU's attachment on ``Cu->Router`` and ``Router->Cu``;
  bandwidths likewise: an I/O port's rate on its two ``io`` edges, a switch port's on the two
  ``scaleup`` edges of its cable, an HBM stack's on its two ``hbm`` edges (each direction gets
  the full stack rate: read/write turnaround is not modelled);
- mesh links are bidirectional (two directed edges); a link joining two dies has kind
  ``die_crossing`` and the die-to-die latency and bandwidth instead of the hop's.
"""

from __future__ import annotations

import io

import networkx as nx

from nuna.topology.geometry import ChipGeometry, check_ngpus, chip_geometry, pod_layout
from nuna.topology.nodes import EDGE_KINDS, NODE_KIND, Cu, Hbm, IoPort, Node, Router, Switch
from nuna.topology.spec import TopologySpec


def local_node(geo: ChipGeometry, gpu: int, n: int) -> Node:
    """Node key of local node id ``n`` of GPU ``gpu``."""
    _, c0, p0, s0 = geo.node_base
    if n < c0:
        x, y = geo.router_xy[n]
        return Router(gpu, int(x), int(y))
    if n < p0:
        return Cu(gpu, n - c0)
    if n < s0:
        return IoPort(gpu, n - p0)
    return Hbm(gpu, n - s0)


def _graph_attrs(spec: TopologySpec, ngpus: int) -> dict[str, object]:
    chip = spec.chip
    return {
        "name": f"{spec.name} x{ngpus}" if ngpus > 1 else spec.name,
        "topology": spec.name,
        "ngpus": ngpus,
        "memory_access_latency_ns": chip.memory_access_latency_ns,
        "flit_bytes": chip.flit_bytes,
    }


def _add_gpu(graph: nx.DiGraph, geo: ChipGeometry, gpu: int) -> None:
    keys = [local_node(geo, gpu, n) for n in range(geo.num_nodes)]
    for n, key in enumerate(keys):
        attrs: dict[str, object] = {"kind": NODE_KIND[type(key)]}
        if isinstance(key, Router):
            attrs["die"] = int(geo.router_die[n])
        graph.add_node(key, **attrs)
    for e in range(geo.num_edges):
        graph.add_edge(
            keys[geo.edge_src[e]],
            keys[geo.edge_dst[e]],
            latency_ns=float(geo.edge_latency_ns[e]),
            bandwidth_gbps=float(geo.edge_bandwidth_gbps[e]),
            kind=EDGE_KINDS[geo.edge_kind[e]],
        )


def build_gpu(spec: TopologySpec, gpu: int = 0) -> nx.DiGraph:
    """One GPU's on-chip graph: routers, CUs, I/O ports and HBM stacks (no switches)."""
    graph = nx.DiGraph(**_graph_attrs(spec, 1))
    _add_gpu(graph, chip_geometry(spec.chip), gpu)
    return graph


def build_pod(spec: TopologySpec, ngpus: int) -> nx.DiGraph:
    """``ngpus`` GPUs joined by the rail-optimised Clos: ``IoPort(g, k) <-> Switch(k)``."""
    check_ngpus(ngpus)
    layout = pod_layout(spec, ngpus)
    graph = nx.DiGraph(**_graph_attrs(spec, ngpus))
    for gpu in range(ngpus):
        _add_gpu(graph, layout.chip, gpu)
    for k in range(spec.chip.io_ports):
        graph.add_node(Switch(k), kind="switch")
    for gpu in range(ngpus):
        for k in range(spec.chip.io_ports):
            up, down = layout.up_edge(gpu, k), layout.down_edge(gpu, k)
            for e, (u, v) in ((up, (IoPort(gpu, k), Switch(k))), (down, (Switch(k), IoPort(gpu, k)))):
                graph.add_edge(
                    u,
                    v,
                    latency_ns=float(layout.edge_latency_ns[e]),
                    bandwidth_gbps=float(layout.edge_bandwidth_gbps[e]),
                    kind="scaleup",
                )
    return graph


def to_graphml(graph: nx.DiGraph) -> bytes:
    """GraphML bytes of ``graph`` with node keys stringified (``'Router(gpu=0, x=3, y=1)'``)
    and the key's fields kept as node attributes."""
    out = nx.DiGraph()
    out.graph.update(graph.graph)
    for node, attrs in graph.nodes(data=True):
        out.add_node(repr(node), **attrs, **node._asdict())
    for u, v, attrs in graph.edges(data=True):
        out.add_edge(repr(u), repr(v), **attrs)
    buffer = io.BytesIO()
    nx.write_graphml(out, buffer)
    return buffer.getvalue()
