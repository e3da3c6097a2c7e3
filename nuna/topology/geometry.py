"""Compact array form of a chip: where every CU, I/O port and HBM stack sits, every directed
edge with its latency and bandwidth, and precomputed X-then-Y edge paths between them.

This is the single source of truth for a chip: the networkx builders
(:mod:`nuna.topology.build`) are made from these arrays, and the simulator precomputes its
flit paths from them. :func:`chip_geometry` is a pure function of a frozen :class:`ChipSpec`,
cached, so every caller shares one copy; the arrays are read-only.

Numbering (all 0-based):

- routers, die by die (die ``dy * dies_x + dx``), inside a die x-major then y; CU ``c`` sits
  on router ``c // cus_per_router``, so CUs are grouped by die;
- I/O ports clockwise from the bottom-left corner: up the left edge (x = 0), then down the
  right edge (x = cols-1); consecutive ports are neighbours along the perimeter;
- HBM stacks clockwise too: left to right along the top edge (y = rows-1), then right to left
  along the bottom edge (y = 0);
- local nodes: routers, then CUs, then ports, then stacks (``node_base``);
- local edges: mesh links (both directions, router order), then per CU ``Cu->Router`` and
  ``Router->Cu``, per port ``Router->IoPort`` and ``IoPort->Router``, per stack
  ``Router->Hbm`` and ``Hbm->Router``.

A pod of ``n`` GPUs (:func:`pod_layout`) numbers GPU ``g``'s local edge ``e`` as
``g * chip_edges + e`` and then appends, per ``(g, k)``, the scale-up up-link
``IoPort(g,k)->Switch(k)`` and down-link ``Switch(k)->IoPort(g,k)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from nuna.errors import TopologyError
from nuna.topology.nodes import EDGE_CODE
from nuna.topology.spec import ChipSpec, ScaleUpSpec, TopologySpec

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
I8 = npt.NDArray[np.int8]

#: Mesh directions in the order of ``ChipGeometry.router_out_edge`` columns.
DIRECTIONS: tuple[tuple[int, int], ...] = ((1, 0), (-1, 0), (0, 1), (0, -1))


_A = TypeVar("_A", bound=np.ndarray)


def _readonly(array: _A) -> _A:
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class PathTable:
    """Edge paths between two endpoint sets, CSR: the path from source ``i`` to destination
    ``j`` is ``edges[indptr[i * ndst + j] : indptr[i * ndst + j + 1]]`` (local edge ids, in
    order). ``latency_ns[i, j]`` is the sum of the path's edge latencies and ``hops[i, j]`` its
    number of mesh links (die crossings included)."""

    nsrc: int
    ndst: int
    indptr: I64
    edges: I32
    latency_ns: F64
    hops: I32

    def path(self, src: int, dst: int) -> I32:
        if not (0 <= src < self.nsrc and 0 <= dst < self.ndst):
            raise TopologyError(f"path ({src}, {dst}) out of range ({self.nsrc} x {self.ndst})")
        k = src * self.ndst + dst
        return self.edges[self.indptr[k] : self.indptr[k + 1]]


@dataclass(frozen=True, eq=False)
class ChipGeometry:
    """Array form of one chip (see the module docstring for the numbering)."""

    spec: ChipSpec
    router_xy: I32  # (R, 2) global mesh coordinates
    router_die: I32  # (R,)
    router_at: I32  # (cols, rows) -> router index
    cu_router: I32  # (C,)
    port_router: I32  # (P,)
    stack_router: I32  # (S,)
    node_base: tuple[int, int, int, int]  # first local node id of routers, CUs, ports, stacks
    num_nodes: int
    edge_src: I32  # (E,) local node ids
    edge_dst: I32
    edge_kind: I8  # codes into nodes.EDGE_KINDS
    edge_latency_ns: F64
    edge_bandwidth_gbps: F64
    router_out_edge: I32  # (R, 4) mesh edge leaving a router in each of DIRECTIONS, -1 if none
    cu_up_edge: I32  # (C,) Cu -> Router
    cu_down_edge: I32  # (C,) Router -> Cu
    port_in_edge: I32  # (P,) Router -> IoPort
    port_out_edge: I32  # (P,) IoPort -> Router
    stack_in_edge: I32  # (S,) Router -> Hbm
    stack_out_edge: I32  # (S,) Hbm -> Router
    cu_port: PathTable  # Cu -> ... -> IoPort
    port_cu: PathTable  # IoPort -> ... -> Cu
    port_stack: PathTable  # IoPort -> ... -> Hbm
    stack_port: PathTable  # Hbm -> ... -> IoPort
    cu_stack: PathTable  # Cu -> ... -> Hbm (load requests, local stores)
    stack_cu: PathTable  # Hbm -> ... -> Cu (read data)

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])

    @property
    def cu_die(self) -> I32:
        return self.router_die[self.cu_router]

    def mesh_route(self, src_router: int, dst_router: int) -> list[int]:
        """Local edge ids of the X-then-Y route between two routers."""
        return _xy_edges(self, src_router, dst_router)


def _xy_edges(geo: ChipGeometry, src: int, dst: int) -> list[int]:
    x, y = (int(v) for v in geo.router_xy[src])
    tx, ty = (int(v) for v in geo.router_xy[dst])
    out: list[int] = []
    r = src
    while x != tx:
        d = 0 if tx > x else 1
        out.append(int(geo.router_out_edge[r, d]))
        x += 1 if d == 0 else -1
        r = int(geo.router_at[x, y])
    while y != ty:
        d = 2 if ty > y else 3
        out.append(int(geo.router_out_edge[r, d]))
        y += 1 if d == 2 else -1
        r = int(geo.router_at[x, y])
    return out


def _spread(count: int, length: int) -> list[int]:
    """``count`` positions evenly spread over ``0..length-1`` (centre of equal segments)."""
    return [int((i + 0.5) * length / count) for i in range(count)]


def port_positions(chip: ChipSpec) -> list[tuple[int, int]]:
    """Router coordinates of each I/O port (clockwise from the bottom-left corner)."""
    left = chip.ports_left
    right = chip.io_ports - left
    out = [(0, y) for y in _spread(left, chip.rows)]
    out += [(chip.cols - 1, y) for y in reversed(_spread(right, chip.rows))] if right else []
    return out


def stack_positions(chip: ChipSpec) -> list[tuple[int, int]]:
    """Router coordinates of each HBM stack (top edge left to right, bottom edge right to left)."""
    top = chip.stacks_top
    bottom = chip.hbm_stacks - top
    out = [(x, chip.rows - 1) for x in _spread(top, chip.cols)]
    out += [(x, 0) for x in reversed(_spread(bottom, chip.cols))] if bottom else []
    return out


class _EdgeList:
    def __init__(self) -> None:
        self.src: list[int] = []
        self.dst: list[int] = []
        self.kind: list[int] = []
        self.lat: list[float] = []
        self.bw: list[float] = []

    def add(self, u: int, v: int, kind: str, latency_ns: float, bandwidth_gbps: float) -> int:
        self.src.append(u)
        self.dst.append(v)
        self.kind.append(EDGE_CODE[kind])
        self.lat.append(latency_ns)
        self.bw.append(bandwidth_gbps)
        return len(self.src) - 1


def _path_table(geo_edges: F64, pieces: list[tuple[list[int], int]], nsrc: int, ndst: int) -> PathTable:
    """Build a PathTable from per-pair edge lists (row-major) and their mesh hop counts."""
    lengths = np.fromiter((len(p) for p, _ in pieces), dtype=np.int64, count=len(pieces))
    indptr = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    edges = np.fromiter((e for p, _ in pieces for e in p), dtype=np.int32, count=int(indptr[-1]))
    lat = np.add.reduceat(geo_edges[edges], indptr[:-1]) if edges.size else np.zeros(len(pieces))
    hops = np.fromiter((h for _, h in pieces), dtype=np.int32, count=len(pieces))
    return PathTable(
        nsrc,
        ndst,
        _readonly(indptr),
        _readonly(edges),
        _readonly(lat.reshape(nsrc, ndst).astype(np.float64)),
        _readonly(hops.reshape(nsrc, ndst)),
    )


@functools.cache
def chip_geometry(chip: ChipSpec) -> ChipGeometry:
    """The array form of ``chip`` (cached: the same object for equal specs)."""
    cols, rows = chip.cols, chip.rows
    nr = chip.routers
    router_xy = np.zeros((nr, 2), dtype=np.int32)
    router_die = np.zeros(nr, dtype=np.int32)
    router_at = np.full((cols, rows), -1, dtype=np.int32)
    r = 0
    for dy in range(chip.dies_y):
        for dx in range(chip.dies_x):
            for lx in range(chip.die_cols):
                for ly in range(chip.die_rows):
                    x, y = dx * chip.die_cols + lx, dy * chip.die_rows + ly
                    router_xy[r] = (x, y)
                    router_die[r] = dy * chip.dies_x + dx
                    router_at[x, y] = r
                    r += 1
    nc, npt_, ns = chip.cus, chip.io_ports, chip.hbm_stacks
    base = (0, nr, nr + nc, nr + nc + npt_)
    cu_router = (np.arange(nc, dtype=np.int32) // chip.cus_per_router).astype(np.int32)
    port_router = np.array([router_at[x, y] for x, y in port_positions(chip)], dtype=np.int32)
    stack_router = np.array([router_at[x, y] for x, y in stack_positions(chip)], dtype=np.int32)

    el = _EdgeList()
    router_out = np.full((nr, 4), -1, dtype=np.int32)
    for r in range(nr):
        x, y = (int(v) for v in router_xy[r])
        for d, (ddx, ddy) in ((0, DIRECTIONS[0]), (2, DIRECTIONS[2])):  # +x and +y neighbours
            nx_, ny_ = x + ddx, y + ddy
            if nx_ >= cols or ny_ >= rows:
                continue
            q = int(router_at[nx_, ny_])
            crossing = router_die[q] != router_die[r]
            kind = "die_crossing" if crossing else "noc"
            lat = chip.die_crossing_latency_ns if crossing else chip.noc_hop_latency_ns
            bw = chip.die_crossing_bandwidth_gbps if crossing else chip.noc_link_bandwidth_gbps
            router_out[r, d] = el.add(r, q, kind, lat, bw)
            router_out[q, d + 1] = el.add(q, r, kind, lat, bw)
    cu_up = np.array(
        [
            el.add(
                base[1] + c, int(cu_router[c]), "cu", chip.cu_attach_latency_ns, chip.cu_link_bandwidth_gbps
            )
            for c in range(nc)
        ],
        dtype=np.int32,
    )
    cu_down = np.array(
        [
            el.add(
                int(cu_router[c]), base[1] + c, "cu", chip.cu_attach_latency_ns, chip.cu_link_bandwidth_gbps
            )
            for c in range(nc)
        ],
        dtype=np.int32,
    )
    port_in = np.zeros(npt_, dtype=np.int32)
    port_out = np.zeros(npt_, dtype=np.int32)
    for k in range(npt_):
        port_in[k] = el.add(
            int(port_router[k]), base[2] + k, "io", chip.io_port_latency_ns, chip.io_port_bandwidth_gbps
        )
        port_out[k] = el.add(
            base[2] + k, int(port_router[k]), "io", chip.io_port_latency_ns, chip.io_port_bandwidth_gbps
        )
    stack_in = np.zeros(ns, dtype=np.int32)
    stack_out = np.zeros(ns, dtype=np.int32)
    for s in range(ns):
        stack_in[s] = el.add(
            int(stack_router[s]),
            base[3] + s,
            "hbm",
            chip.hbm_attach_latency_ns,
            chip.hbm_stack_bandwidth_gbps,
        )
        stack_out[s] = el.add(
            base[3] + s,
            int(stack_router[s]),
            "hbm",
            chip.hbm_attach_latency_ns,
            chip.hbm_stack_bandwidth_gbps,
        )
    edge_lat = np.array(el.lat, dtype=np.float64)

    partial = ChipGeometry(
        spec=chip,
        router_xy=router_xy,
        router_die=router_die,
        router_at=router_at,
        cu_router=cu_router,
        port_router=port_router,
        stack_router=stack_router,
        node_base=base,
        num_nodes=nr + nc + npt_ + ns,
        edge_src=np.array(el.src, dtype=np.int32),
        edge_dst=np.array(el.dst, dtype=np.int32),
        edge_kind=np.array(el.kind, dtype=np.int8),
        edge_latency_ns=edge_lat,
        edge_bandwidth_gbps=np.array(el.bw, dtype=np.float64),
        router_out_edge=router_out,
        cu_up_edge=cu_up,
        cu_down_edge=cu_down,
        port_in_edge=port_in,
        port_out_edge=port_out,
        stack_in_edge=stack_in,
        stack_out_edge=stack_out,
        cu_port=_EMPTY,
        port_cu=_EMPTY,
        port_stack=_EMPTY,
        stack_port=_EMPTY,
        cu_stack=_EMPTY,
        stack_cu=_EMPTY,
    )
    # Mesh routes are shared by every CU of a router: compute each router pair once.
    route_cache: dict[tuple[int, int], list[int]] = {}

    def mesh(a: int, b: int) -> list[int]:
        key = (a, b)
        if key not in route_cache:
            route_cache[key] = _xy_edges(partial, a, b)
        return route_cache[key]

    def table(srcs: list[tuple[int, int]], dsts: list[tuple[int, int]]) -> PathTable:
        """Paths from each (router, attach edge) source to each (router, attach edge) sink."""
        pieces: list[tuple[list[int], int]] = []
        for s_router, s_edge in srcs:
            for d_router, d_edge in dsts:
                hops = mesh(s_router, d_router)
                pieces.append(([s_edge, *hops, d_edge], len(hops)))
        return _path_table(edge_lat, pieces, len(srcs), len(dsts))

    cu_src = [(int(cu_router[c]), int(cu_up[c])) for c in range(nc)]
    cu_dst = [(int(cu_router[c]), int(cu_down[c])) for c in range(nc)]
    port_src = [(int(port_router[k]), int(port_out[k])) for k in range(npt_)]
    port_dst = [(int(port_router[k]), int(port_in[k])) for k in range(npt_)]
    stack_src = [(int(stack_router[s]), int(stack_out[s])) for s in range(ns)]
    stack_dst = [(int(stack_router[s]), int(stack_in[s])) for s in range(ns)]
    tables = {
        "cu_port": table(cu_src, port_dst),
        "port_cu": table(port_src, cu_dst),
        "port_stack": table(port_src, stack_dst),
        "stack_port": table(stack_src, port_dst),
        "cu_stack": table(cu_src, stack_dst),
        "stack_cu": table(stack_src, cu_dst),
    }
    for array in (
        router_xy,
        router_die,
        router_at,
        cu_router,
        port_router,
        stack_router,
        partial.edge_src,
        partial.edge_dst,
        partial.edge_kind,
        edge_lat,
        partial.edge_bandwidth_gbps,
        router_out,
        cu_up,
        cu_down,
        port_in,
        port_out,
        stack_in,
        stack_out,
    ):
        _readonly(array)
    return ChipGeometry(**{**{f: getattr(partial, f) for f in _FIELDS}, **tables})


_EMPTY = PathTable(
    0,
    0,
    np.zeros(1, dtype=np.int64),
    np.zeros(0, dtype=np.int32),
    np.zeros((0, 0)),
    np.zeros((0, 0), dtype=np.int32),
)
_FIELDS = tuple(ChipGeometry.__dataclass_fields__)


# --- pod -----------------------------------------------------------------------------------

MAX_GPUS = 1024


@dataclass(frozen=True, eq=False)
class PodLayout:
    """Global edge numbering of ``ngpus`` copies of a chip joined by the rail Clos.

    Nodes: GPU ``g``'s local node ``n`` is ``g * chip.num_nodes + n``; switch ``k`` is
    ``ngpus * chip.num_nodes + k``. Edges: local edge ``e`` of GPU ``g`` is
    ``g * chip.num_edges + e``; the up-link of ``(g, k)`` is ``scaleup_base + 2 * (g * P + k)``
    and its down-link the next id. Arrays cover every edge of the pod."""

    ngpus: int
    chip: ChipGeometry
    scaleup: ScaleUpSpec
    edge_src: I64
    edge_dst: I64
    edge_kind: I8
    edge_latency_ns: F64
    edge_bandwidth_gbps: F64

    @property
    def scaleup_base(self) -> int:
        return self.ngpus * self.chip.num_edges

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])

    @property
    def num_nodes(self) -> int:
        return self.ngpus * self.chip.num_nodes + self.chip.spec.io_ports

    def up_edge(self, gpu: int, port: int) -> int:
        """Global id of ``IoPort(gpu, port) -> Switch(port)``."""
        return self.scaleup_base + 2 * (gpu * self.chip.spec.io_ports + port)

    def down_edge(self, gpu: int, port: int) -> int:
        """Global id of ``Switch(port) -> IoPort(gpu, port)``."""
        return self.up_edge(gpu, port) + 1

    def remote_write_edges(self, src_gpu: int, cu: int, port: int, dst_gpu: int, stack: int) -> I64:
        """Global edge ids of a remote store: ``Cu(src_gpu, cu)`` through port ``port`` of both
        GPUs into ``Hbm(dst_gpu, stack)``."""
        e = self.chip.num_edges
        local = self.chip.cu_port.path(cu, port).astype(np.int64) + src_gpu * e
        remote = self.chip.port_stack.path(port, stack).astype(np.int64) + dst_gpu * e
        links = np.array([self.up_edge(src_gpu, port), self.down_edge(dst_gpu, port)], dtype=np.int64)
        return np.concatenate([local, links, remote])


def check_ngpus(ngpus: int) -> None:
    if not isinstance(ngpus, int) or isinstance(ngpus, bool) or not 1 <= ngpus <= MAX_GPUS:
        raise TopologyError(f"number of GPUs must be an integer from 1 to {MAX_GPUS}, got {ngpus!r}")


@functools.lru_cache(maxsize=8)
def pod_layout(spec: TopologySpec, ngpus: int) -> PodLayout:
    """Global arrays of a pod of ``ngpus`` GPUs (the last few are cached: a 1,024-GPU pod is
    tens of MB)."""
    check_ngpus(ngpus)
    geo = chip_geometry(spec.chip)
    su = spec.scaleup
    n, p = geo.num_nodes, spec.chip.io_ports
    gpu_off = (np.arange(ngpus, dtype=np.int64) * n)[:, None]
    src = (geo.edge_src.astype(np.int64)[None, :] + gpu_off).ravel()
    dst = (geo.edge_dst.astype(np.int64)[None, :] + gpu_off).ravel()
    g_idx, k_idx = np.divmod(np.arange(ngpus * p, dtype=np.int64), p)
    port_node = g_idx * n + geo.node_base[2] + k_idx
    switch_node = ngpus * n + k_idx
    up_dn_src = np.stack([port_node, switch_node], axis=1).ravel()
    up_dn_dst = np.stack([switch_node, port_node], axis=1).ravel()
    # Both directions of a cable end in a switch port, so each is limited by the slower of the two.
    bw = min(su.switch_port_bandwidth_gbps, su.link_bandwidth_gbps)
    su_lat = np.tile([su.link_latency_ns, su.switch_latency_ns + su.link_latency_ns], ngpus * p)
    su_bw = np.full(2 * ngpus * p, bw)
    layout = PodLayout(
        ngpus=ngpus,
        chip=geo,
        scaleup=su,
        edge_src=np.concatenate([src, up_dn_src]),
        edge_dst=np.concatenate([dst, up_dn_dst]),
        edge_kind=np.concatenate(
            [np.tile(geo.edge_kind, ngpus), np.full(2 * ngpus * p, EDGE_CODE["scaleup"], dtype=np.int8)]
        ),
        edge_latency_ns=np.concatenate([np.tile(geo.edge_latency_ns, ngpus), su_lat]),
        edge_bandwidth_gbps=np.concatenate([np.tile(geo.edge_bandwidth_gbps, ngpus), su_bw]),
    )
    for array in (
        layout.edge_src,
        layout.edge_dst,
        layout.edge_kind,
        layout.edge_latency_ns,
        layout.edge_bandwidth_gbps,
    ):
        _readonly(array)
    return layout
