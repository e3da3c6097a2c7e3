"""The replay's network: every edge of a pod as an engine resource, and the path segments flits
travel, built from the topology's compact chip geometry (:mod:`nuna.topology.geometry`).

Edges of GPU ``g`` are numbered ``g * E + e`` with a per-GPU block of ``E`` local ids:

- the chip's edges (mesh links, die crossings, CU, I/O-port and HBM attachments), as numbered by
  the geometry, with their latency and bandwidth;
- per CU a memory-issue queue (a virtual source: the CU's in-order load/store pipeline), an ALU
  queue and the ALU itself (bandwidth = the CU's reduction rate, no latency);
- per HBM stack its access (the spec's memory access latency, no bandwidth limit: the stack's
  rate is on its two attachment edges);
- per I/O port the scale-up up-link ``IoPort -> Switch`` and the down-link
  ``Switch -> IoPort`` of this GPU (cable and switch latency, the slower of link and switch
  port bandwidth).

Buffers. Edges into a router (mesh links, die crossings, and the CU, I/O-port and HBM edges
towards the mesh) end in an input-queued router port: the router model validated against
BookSim 2 (:mod:`nuna.sim.noc`), ``vcs`` virtual channels per port, credit flow control. Each
virtual channel holds at least ``vc_buffer_flits`` flits and at least the edge's credit round
trip (bandwidth x (latency + credit delay)), so a long die-crossing link can still run at its
bandwidth. Edges into endpoints (CU, port, stack, switch) end in unbounded queues without
head-of-line order: endpoints always sink what reaches them, which also keeps the network
deadlock-free (X-then-Y routes inside the mesh, no cycle through an endpoint). Router cycles
are ``noc_hop_latency_ns / 5`` (BookSim's 5-cycle hop).

Segments (CSR of local edge ids, offset by a GPU's block at run time): load requests
``CU -> stack``, read data ``stack -> CU``, local stores ``CU -> stack``, the sending half of a
remote store ``CU -> port -> switch`` and its receiving half ``switch -> port -> stack``, and
the ALU of each CU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from nuna.errors import TopologyError
from nuna.sim import engine as eng
from nuna.topology.geometry import ChipGeometry, PathTable, chip_geometry, pod_layout
from nuna.topology.nodes import EDGE_CODE
from nuna.topology.spec import ROUTER_KEYS, RouterSpec, TopologySpec, router_value_problem

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]

#: BookSim's per-hop cycles (4 router stages + 1 link), to express router parameters in ns.
CYCLES_PER_HOP = 5.0

#: Segment kinds, in the order of :attr:`PodNet.seg_start`.
SEG_KINDS: tuple[str, ...] = ("load_request", "read_data", "local_store", "remote_out", "remote_in", "alu")

#: Edge classes for reports (``PodNet.edge_class`` codes).
EDGE_CLASSES: tuple[str, ...] = ("noc", "die_crossing", "cu", "io", "hbm", "scaleup", "virtual")

#: Where a packet's head waits for its next edge (``PodNet.wait_class`` codes), named by that
#: edge: "cu_to_mesh" is the CU's in-order issue queue and its link into the mesh, "mesh" a
#: router waiting for a mesh link, "mesh_to_port" the last router before an I/O port,
#: "switch_to_port" the switch's output port, "alu" the CU's reduction queue.
WAIT_CLASSES: tuple[str, ...] = (
    "cu_to_mesh", "mesh", "die_crossing", "mesh_to_port", "port_to_switch", "switch_to_port",
    "port_to_mesh", "mesh_to_hbm", "hbm_access", "hbm_to_mesh", "mesh_to_cu", "alu",
)


_BOOKSIM = RouterSpec()


@dataclass(frozen=True, slots=True)
class RouterParams:
    """Input-queued router parameters, shared by the replay's NoC and the synthetic mode.
    Defaults: :class:`~nuna.topology.spec.RouterSpec`'s, the BookSim 2 setting of the NoC
    validation. The replay takes them from the topology's ``[router]`` table
    (:meth:`from_topology`) unless it is given others."""

    vcs: int = _BOOKSIM.vcs
    vc_buffer_flits: int = _BOOKSIM.vc_buffer_flits
    credit_delay_cycles: float = _BOOKSIM.credit_delay_cycles
    head_setup_cycles: float = _BOOKSIM.head_setup_cycles
    input_queued: bool = True  # False: ideal output queues everywhere (for comparison)

    @classmethod
    def from_topology(cls, spec: TopologySpec, input_queued: bool = True) -> RouterParams:
        r = spec.router
        return cls(r.vcs, r.vc_buffer_flits, r.credit_delay_cycles, r.head_setup_cycles, input_queued)


def router_params_problem(params: object) -> str | None:
    """Why ``params`` cannot be a replay's or the synthetic mode's routers, or None: a
    :class:`RouterParams` whose values keep the rule a topology file's ``[router]`` table is
    held to (the kernels trust them: ``vcs=0`` replayed without a word)."""
    if not isinstance(params, RouterParams):
        return f"router must be a RouterParams, got {params!r}"
    for key in ROUTER_KEYS:
        problem = router_value_problem(key, getattr(params, key))
        if problem is not None:
            return f"router.{key}: {problem}"
    return None


@dataclass(frozen=True, eq=False)
class PodNet:
    """Engine network of ``ngpus`` GPUs plus the ids needed to address it."""

    ngpus: int
    geo: ChipGeometry
    net: Any  # engine.Net
    block: int  # edges per GPU
    cusrc: int  # local id of CU 0's issue queue (CU c: cusrc + c)
    alusrc: int
    alu: int
    access: int  # local id of stack 0's access edge
    up: int  # local id of port 0's up-link
    down: int
    seg_start: tuple[int, ...]  # first segment id of each kind in SEG_KINDS
    seg_hops: I32  # mesh links (die crossings included) on each segment
    edge_class: npt.NDArray[np.int8]  # per local edge id, codes into EDGE_CLASSES
    wait_class: npt.NDArray[np.int8]  # per local edge id, codes into WAIT_CLASSES
    edge_bw: F64  # per local edge id, bytes per ns (inf: unlimited)
    edge_lat: F64  # per local edge id, ns
    reduce_bytes_per_ns: float

    def seg_request(self, cu: int, stack: int) -> int:
        return self.seg_start[0] + cu * self.geo.spec.hbm_stacks + stack

    def seg_read(self, stack: int, cu: int) -> int:
        return self.seg_start[1] + stack * self.geo.spec.cus + cu

    def seg_store(self, cu: int, stack: int) -> int:
        return self.seg_start[2] + cu * self.geo.spec.hbm_stacks + stack

    def seg_out(self, cu: int, port: int) -> int:
        return self.seg_start[3] + cu * self.geo.spec.io_ports + port

    def seg_in(self, port: int, stack: int) -> int:
        return self.seg_start[4] + port * self.geo.spec.hbm_stacks + stack

    def seg_alu(self, cu: int) -> int:
        return self.seg_start[5] + cu


def _wrap(table: PathTable, prefix: I64 | None, suffix: I64 | None) -> tuple[I64, I64]:
    """Segments of ``table`` (row-major over (src, dst)) with an optional edge before each
    source's paths and after each destination's: returns (lengths, edges)."""
    n = table.nsrc * table.ndst
    core_len = np.diff(table.indptr).astype(np.int64)
    src_of = np.repeat(np.arange(table.nsrc), table.ndst)
    dst_of = np.tile(np.arange(table.ndst), table.nsrc)
    pre = 0 if prefix is None else 1
    suf = 0 if suffix is None else 1
    lengths = core_len + pre + suf
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_ptr[1:])
    edges = np.empty(int(out_ptr[-1]), dtype=np.int64)
    if prefix is not None:
        edges[out_ptr[:-1]] = prefix[src_of]
    if suffix is not None:
        edges[out_ptr[1:] - 1] = suffix[dst_of]
    # copy every core path to its place after the prefix
    core_pos = np.repeat(out_ptr[:-1] + pre - table.indptr[:-1], core_len) + np.arange(table.edges.shape[0])
    edges[core_pos] = table.edges
    return lengths, edges


def build_pod_net(spec: TopologySpec, ngpus: int, router: RouterParams | None = None,
                  element_bytes: int = 4, issue_queue: int = 4) -> PodNet:
    """Engine network of a pod of ``ngpus`` GPUs of ``spec`` (see the module docstring)."""
    prm = router or RouterParams.from_topology(spec)
    chip = spec.chip
    geo = chip_geometry(chip)
    layout = pod_layout(spec, ngpus)
    C, S, P = chip.cus, chip.hbm_stacks, chip.io_ports
    E0 = geo.num_edges
    cusrc, alusrc, alu = E0, E0 + C, E0 + 2 * C
    access = E0 + 3 * C
    up = access + S
    down = up + P
    block = down + P

    lat = np.zeros(block)
    bw = np.full(block, np.inf)
    lat[:E0] = geo.edge_latency_ns
    bw[:E0] = geo.edge_bandwidth_gbps
    reduce_rate = chip.cu_vector_gflops * element_bytes  # one flop per element of the result
    bw[alu:alu + C] = reduce_rate
    lat[access:access + S] = chip.memory_access_latency_ns
    lat[up:up + P] = layout.edge_latency_ns[[layout.up_edge(0, k) for k in range(P)]]
    bw[up:up + P] = layout.edge_bandwidth_gbps[[layout.up_edge(0, k) for k in range(P)]]
    lat[down:down + P] = layout.edge_latency_ns[[layout.down_edge(0, k) for k in range(P)]]
    bw[down:down + P] = layout.edge_bandwidth_gbps[[layout.down_edge(0, k) for k in range(P)]]

    edge_class = np.full(block, EDGE_CLASSES.index("virtual"), dtype=np.int8)
    kind_map = {EDGE_CODE[k]: EDGE_CLASSES.index(k) for k in ("noc", "die_crossing", "cu", "io", "hbm")}
    edge_class[:E0] = [kind_map[int(k)] for k in geo.edge_kind]
    edge_class[up:down + P] = EDGE_CLASSES.index("scaleup")

    # input-queued router ports at the downstream end of edges that enter a router
    nrouters = chip.routers
    into_router = np.zeros(block, dtype=bool)
    into_router[:E0] = geo.edge_dst < nrouters

    wc = {name: i for i, name in enumerate(WAIT_CLASSES)}
    wait_class = np.zeros(block, dtype=np.int8)
    for kind, (towards, away) in {"noc": ("mesh", "mesh"), "die_crossing": ("die_crossing", "die_crossing"),
                                  "cu": ("cu_to_mesh", "mesh_to_cu"), "io": ("port_to_mesh", "mesh_to_port"),
                                  "hbm": ("hbm_to_mesh", "mesh_to_hbm")}.items():
        sel = np.flatnonzero(geo.edge_kind == EDGE_CODE[kind])
        wait_class[sel] = np.where(into_router[sel], wc[towards], wc[away])
    wait_class[cusrc:cusrc + C] = wc["cu_to_mesh"]  # sources: packets start there, never granted
    wait_class[alusrc:alu + C] = wc["alu"]
    wait_class[access:access + S] = wc["hbm_access"]
    wait_class[up:up + P] = wc["port_to_switch"]
    wait_class[down:down + P] = wc["switch_to_port"]
    cap = np.full(block, -1, dtype=np.int64)
    nvc = np.ones(block, dtype=np.int32)
    cdelay = np.zeros(block)
    setup = np.zeros(block)
    fifo = np.zeros(block, dtype=np.uint8)
    fifo[cusrc:cusrc + C] = 1  # a CU issues its memory operations in order
    fifo[alusrc:alusrc + C] = 1
    notify = np.zeros(block, dtype=np.int64)
    notify[cusrc:cusrc + C] = issue_queue  # the replay starts more jobs when the queue is short
    if prm.input_queued:
        cycle_ns = chip.noc_hop_latency_ns / CYCLES_PER_HOP
        cd = prm.credit_delay_cycles * cycle_ns
        finite_bw = np.where(np.isinf(bw), 0.0, bw)
        with np.errstate(over="ignore"):  # a bandwidth near the float limit: inf, refused below
            round_trip = np.ceil(finite_bw * (lat + cd))
        vc_bytes = np.maximum(float(prm.vc_buffer_flits * chip.flit_bytes), round_trip)
        most = float(vc_bytes[into_router].max()) if into_router.any() else 0.0
        if most >= 2.0**31:  # the engine's int32 columns
            raise TopologyError(f"{spec.name}: a router buffer would hold {most:.4g} bytes per virtual "
                                f"channel (vc_buffer_flits, or a link's bandwidth x (latency + credit "
                                f"delay)), more than 2**31: lower it, or give the link an inf bandwidth "
                                f"(ideal)")
        cap[into_router] = vc_bytes[into_router].astype(np.int64)
        nvc[into_router] = prm.vcs
        cdelay[into_router] = cd
        setup[into_router] = prm.head_setup_cycles * cycle_ns
        fifo[into_router] = 1

    # segments
    cu_ids = np.arange(C, dtype=np.int64)
    st_ids = np.arange(S, dtype=np.int64)
    pt_ids = np.arange(P, dtype=np.int64)
    parts = [
        _wrap(geo.cu_stack, cusrc + cu_ids, None),
        _wrap(geo.stack_cu, access + st_ids, None),
        _wrap(geo.cu_stack, cusrc + cu_ids, access + st_ids),
        _wrap(geo.cu_port, cusrc + cu_ids, up + pt_ids),
        _wrap(geo.port_stack, down + pt_ids, access + st_ids),
        (np.full(C, 2, dtype=np.int64), np.stack([alusrc + cu_ids, alu + cu_ids], axis=1).ravel()),
    ]
    hops = [geo.cu_stack.hops.ravel(), geo.stack_cu.hops.ravel(), geo.cu_stack.hops.ravel(),
            geo.cu_port.hops.ravel(), geo.port_stack.hops.ravel(), np.zeros(C, dtype=np.int32)]
    counts = [p[0].shape[0] for p in parts]
    seg_start = tuple(int(x) for x in np.concatenate([[0], np.cumsum(counts)[:-1]]))
    lengths = np.concatenate([p[0] for p in parts])
    seg_ptr = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=seg_ptr[1:])
    seg_edge = np.concatenate([p[1] for p in parts]).astype(np.int32)

    tile = ngpus
    net = eng.make_net(np.tile(lat, tile), np.tile(bw, tile), np.tile(cap, tile), np.tile(nvc, tile),
                       np.tile(cdelay, tile), np.tile(fifo, tile), np.tile(setup, tile), seg_ptr, seg_edge,
                       chip.flit_bytes, np.tile(notify, tile))
    return PodNet(ngpus, geo, net, block, cusrc, alusrc, alu, access, up, down, seg_start,
                  np.concatenate(hops).astype(np.int32), edge_class, wait_class, bw, lat, reduce_rate)
