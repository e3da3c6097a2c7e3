"""The replay: a plan's DAG executed on a pod of multi-die GPUs, packet by packet, on the flit
engine (:mod:`nuna.sim.engine`).

Model (``docs/simulator.md`` has the full description and its validation):

- every threadblock runs on a CU (:mod:`nuna.sim.layout`); a step starts when its control
  predecessors are done (program order and ``depid``), a receive-type step also waits until the
  data matched to it has landed;
- a step's bytes are cut into packets of at most ``packet_bytes`` (by default one flit of the
  topology, 256 bytes on every shipped chip); each packet is a job on the CU: load its source
  lines (a request to the HBM stack of the page, the memory access latency, the data back over
  the NoC), reduce on the CU's ALU for reducing steps, then store: locally into the stack
  holding the destination page, or remotely through the I/O port the address map picks for the
  destination physical address, the scale-up link, the switch, the remote port and the remote
  NoC into the remote stack (direct remote stores, the model the paper evaluates; a plain
  ``r`` moves nothing and completes when its data has landed; fused receives take their data
  in a receive buffer);
- each CU keeps at most ``max_outstanding_requests_per_cu`` lines in flight; a line's slot is
  freed when its store has been written;
- a send step completes when all its stores are written (as a fence would require).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numba
import numpy as np
import numpy.typing as npt

from nuna.errors import SimulationError, UsageError
from nuna.plan.dag import NONE, FlatPlan, ReplayDag, build_dag, finish_times, flatten
from nuna.plan.flow import credit_sources, flow_control_depth, flow_rule_text
from nuna.plan.fusion import reduce_fusion
from nuna.plan.generate import generate
from nuna.plan.ir import Plan, Protocol
from nuna.plan.slices import Slicing, executor_slicing
from nuna.plan.verify import SizeFit, gpu_count_mismatch, self_peer_message, self_peer_threadblocks, size_fit
from nuna.plan.wire import SIMPLE_WIRE, Wire, protocol_wire
from nuna.sim import engine as eng
from nuna.sim import fastforward
from nuna.sim.fastforward import FastForward
from nuna.sim.layout import MemoryLayout, memory_layout, threadblock_cus
from nuna.sim.network import (
    EDGE_CLASSES,
    WAIT_CLASSES,
    PodNet,
    RouterParams,
    build_pod_net,
    router_params_problem,
)
from nuna.sim.result import PORT_WAIT_CLASSES, ChipLinkTable, LatencyStats, SimResult, Skip
from nuna.sim.slicing import SlicedNodes, executor_nodes, piece_label
from nuna.topology.address import nar_port_table, stack_domains, store_domains_by_cu
from nuna.topology.build import local_node
from nuna.topology.fit import MAX_PACKET_BYTES, packet_cap_problem, packet_problem
from nuna.topology.geometry import ChipGeometry
from nuna.topology.spec import TopologySpec

I64 = npt.NDArray[np.int64]

PacketBytes = int | Literal["auto"]


#: ``SimOptions.line_setups`` -> the engine's rule
LINE_SETUP_RULES = {"one": eng.LINE_SETUP_ONE, "series": eng.LINE_SETUP_SERIES,
                    "overlap": eng.LINE_SETUP_OVERLAP}
DEFAULT_LINE_SETUPS = "overlap"
#: ``SimOptions.packet_credit_lines``' default (docs/simulator.md §5)
DEFAULT_PACKET_CREDIT_LINES = 2


@dataclass(frozen=True, slots=True)
class SimOptions:
    """Model parameters the topology file does not carry (each documented in docs/simulator.md)."""

    request_bytes: int = 64  # a read request: command and address, a quarter flit
    element_bytes: int = 4  # fp32, the nccl-tests default type: sets the CU's reduction rate
    router: RouterParams | None = None  # None: the topology's [router] table
    auto_max_jobs: int = 1_500_000  # "auto" grows packets until about this many remain
    # the largest packet "auto" picks (a power-of-two multiple of the flit): packets of several
    # lines are coarse (nuna.sim.result.COARSE_PACKET_BYTES); a lower cap trades run time for fidelity
    max_packet_bytes: int = 1 << 16
    hist_bin_ns: float = 1.0
    hist_bins: int = 1 << 16
    credit_ring: int = 4
    issue_queue: int = 4  # packets a CU's issue queue holds before it stops starting new jobs (0: no limit)
    trace_samples: int = 512
    # one event queue per GPU, run in windows of the shortest cross-GPU lookahead (docs/simulator.md
    # §6): the same model, equal-time events of a GPU after its own, by posting GPU. True: always (an error
    # with a trace, which samples every GPU at one time, or on a topology that cannot be windowed);
    # False: one queue; None: windowed from WINDOWED_FROM_GPUS GPUs with packets smaller than
    # WINDOWED_BELOW_PACKET_BYTES where it can be, one queue else
    windowed: bool | None = None
    # threads a windowed replay runs its GPUs' windows on (None: numba's default, every core);
    # the result does not depend on it. A sweep's workers run one each (they fill the cores)
    threads: int | None = None
    # skip the middle of steady states, replay their ends (nuna.sim.fastforward; None: off)
    fast_forward: FastForward | None = None
    # router head set-ups behind a packet of m lines (LINE_SETUP_RULES; docs/simulator.md §5,
    # "Head set-ups per line"): "overlap" (the default since 0.9.0) the next head waits until
    # the m one-line packets of the 256-byte reference could have left, one per input time and
    # set-up in each of the port's channels with room; "series" m set-ups after the packet;
    # "one" one (nuna <= 0.8.0). Flits replay the same under every rule
    line_setups: str = DEFAULT_LINE_SETUPS
    # flits of credit a packet of several takes on entering a buffer, at most its size
    # (engine._need; docs/simulator.md §5, "Two lines of credit per packet"): 2, the default
    # since 0.16.0, the two lines of a stream in a buffer while they pass; 1 (nuna <= 0.15.0)
    # hides back-pressure where load responses converge on a stack. Simple's flits replay the
    # same; an LL or LL128 line, a wire packet of two flits (nuna.plan.wire), takes both
    packet_credit_lines: int = DEFAULT_PACKET_CREDIT_LINES
    # replay chains of re steps as the executors run them, one fused pass each (nuna.plan.fusion;
    # docs/simulator.md §3); False: each re on its own (nuna <= 0.9.0), to measure what fusion buys
    reduce_fusion: bool = True
    # run each threadblock's steps once per slice of the plan's protocol, and steps of many
    # chunks as several primitive calls, as the MSCCL executors do (nuna.plan.slices,
    # docs/simulator.md §3); False (the default, the paper's model): every step once on its chunks
    executor_slices: bool = False
    # "plan": the plan's protocol on the wire (LL twice the payload, LL128 16/15, in remote
    # stores and in the loads of what they stored) and LL/LL128 sends that do not wait for their
    # stores (nuna.plan.wire; docs/simulator.md §3); "simple": every plan as Simple (nuna <= 0.11.0)
    protocol_model: str = "plan"
    # the executors' flow control (nuna.plan.flow; docs/simulator.md §3): a send-type step
    # starts only once the receive-type step 2 (Simple) or 8 (LL, LL128) sends earlier on its
    # connection has ended and its credit has come back; False: senders never wait for
    # receivers (nuna <= 0.12.0)
    flow_control: bool = True


#: ``SimOptions.protocol_model`` choices, the default first
PROTOCOL_MODELS = ("plan", "simple")


def replay_wire(plan: Plan, opts: SimOptions) -> Wire:
    """The wire format a replay of ``plan`` uses (:mod:`nuna.plan.wire`)."""
    return protocol_wire(plan.protocol) if opts.protocol_model == "plan" else SIMPLE_WIRE


#: GPUs from which ``SimOptions(windowed=None)`` replays windowed: where a pod's engine state
#: outgrows the cache (docs/simulator.md §6, the loop by pod size, three runs each: 1.14-1.76x at 16-64
#: GPUs in 8 of 9 runs, one 0.78x at 32; 0.78-1.17x at 2-8 GPUs)
WINDOWED_FROM_GPUS = 16

#: ... with packets smaller than this: coarser ones replay faster with one queue (docs/simulator.md
#: §6, Fig 9 points at 16-64 GPUs, windowed / one-queue CPU time in alternating pairs: 32-64 KiB
#: packets 1.06-1.36 at 7 of 8 points, 0.80-0.90 at one; 512 B-16 KiB 0.53-1.01)
WINDOWED_BELOW_PACKET_BYTES = 32 * 1024


@functools.lru_cache(maxsize=4)
def _pod_net(spec: TopologySpec, ngpus: int, router: RouterParams | None, element_bytes: int,
             issue_queue: int) -> PodNet:
    return build_pod_net(spec, ngpus, router, element_bytes, issue_queue)


def _check_operands(flat: FlatPlan, plan: Plan, n_gpu: I64) -> None:
    """Every operand a step reads or writes must lie inside its buffer (executors do not check
    ``off + cnt``; the simulator must, or it would read another buffer's pages). The first step
    out of bounds, reads before writes, is reported. The plan's GPU ids are 0..n-1 (``_prepare``
    checks it first), so a GPU's id is its row of buffer sizes."""
    limits = np.zeros((len(plan.gpus), 3), dtype=np.int64)
    for g in plan.gpus:
        limits[g.id] = (g.input_chunks, g.output_chunks, g.scratch_chunks)
    uses_src = [eng.T_SEND, eng.T_RRC, eng.T_RRS, eng.T_RRCS, eng.T_CPY, eng.T_RE]
    uses_dst = [eng.T_RECV, eng.T_RCS, eng.T_RRC, eng.T_RRCS, eng.T_CPY, eng.T_RE]
    code = flat.code
    for which, buf_arr, off_arr, types in (("reads", flat.src_buf, flat.src_off, uses_src),
                                           ("writes", flat.dst_buf, flat.dst_off, uses_dst)):
        sel = np.flatnonzero(np.isin(code, types) & (flat.count > 0))
        b, off, cnt = buf_arr[sel], off_arr[sel], flat.count[sel]
        limit = np.where(b >= 0, limits[n_gpu[sel], np.clip(b, 0, 2)], 0)
        # off > limit - cnt, not off + cnt > limit: a plan's 64-bit offset may not overflow here
        bad = (b < 0) | (off == NONE) | (off < 0) | (off > limit - cnt)
        if bad.any():
            n = int(sel[int(np.argmax(bad))])
            bn, offn, cntn = int(buf_arr[n]), int(off_arr[n]), int(flat.count[n])
            size = int(limits[n_gpu[n], bn]) if bn >= 0 else 0
            where = f"{'ios'[bn]}[{offn}..{offn + cntn})" if bn >= 0 and offn != NONE else "no buffer"
            raise SimulationError(f"{flat.step_name(n)} {which} {where}, outside its buffer of "
                                  f"{size} chunks")


def _check_peers(flat: FlatPlan, plan: Plan) -> None:
    """No threadblock sends to or receives from its own GPU: an executor has no connection from
    a GPU to itself, and the replay would move the data as remote stores through the GPU's own
    ports and the switch (``nuna validate`` reports it the same way, as an error)."""
    for role, own in self_peer_threadblocks(flat):
        if own.size:
            t = int(own[0])
            more = f" (and {own.size - 1} more threadblocks)" if own.size > 1 else ""
            raise SimulationError(f"plan {plan.name}: gpu {int(flat.tb_gpu[t])} tb {int(flat.tb_id[t])}: "
                                  f"{self_peer_message(flat, role, t)}{more}")


def _addresses(flat: FlatPlan, dag: ReplayDag, layout: MemoryLayout, n_gpu: I64) -> tuple[I64, I64]:
    """Per node: the four base addresses of its lines (load 0, load 1, local store, remote
    store) and the peer its remote stores go to."""
    page = layout.page_bytes
    cb = layout.chunk_bytes

    def va(buf: I64, off: I64) -> I64:
        ok = (buf >= 0) & (off != NONE)
        b = np.where(ok, buf, 0)
        o = np.where(ok, off, 0)
        return np.where(ok, layout.buffer_page[n_gpu, b] * page + o * cb, -1)

    src = va(flat.src_buf, flat.src_off)
    dst = va(flat.dst_buf, flat.dst_off)
    recv = np.where(layout.node_recv_page >= 0, layout.node_recv_page * page + layout.node_recv_off, -1)
    m = dag.match_recv.astype(np.int64)
    has_m = m >= 0
    mm = np.where(has_m, m, 0)
    remote = np.where(has_m, np.where(flat.code[mm] == eng.T_RECV, dst[mm], recv[mm]), -1)
    peer = np.where(has_m, n_gpu[mm], -1)
    code = flat.code
    addr = np.full((code.shape[0], 4), -1, dtype=np.int64)
    none = np.full(code.shape[0], -1, dtype=np.int64)
    table = {
        eng.T_SEND: (src, none, none, remote),
        eng.T_RCS: (recv, none, dst, remote),
        eng.T_RRC: (recv, src, dst, none),
        eng.T_RRS: (recv, src, none, remote),
        eng.T_RRCS: (recv, src, dst, remote),
        eng.T_CPY: (src, none, dst, none),
        eng.T_RE: (src, dst, dst, none),
    }
    for t, cols in table.items():
        sel = code == t
        for k in range(4):
            addr[sel, k] = cols[k][sel]
    return addr, peer.astype(np.int64)


def _fuse_reduces(flat: FlatPlan, n_addr: I64, n_bytes: I64) -> tuple[I64, I64]:
    """``(n_addr, n_bytes)`` with the executors' fused ``re`` passes (:mod:`nuna.plan.fusion`): a
    group's first step loads every source of the group (its further loads: address columns 4
    on) and stores once; the others move nothing (no address, no bytes) and complete as soon as
    they may start, right after it in program order."""
    head = reduce_fusion(flat).head
    cont = np.flatnonzero(head >= 0)
    if cont.shape[0] == 0:
        return n_addr, n_bytes
    h = head[cont]
    # a continuation's place among its group's further sources: 0, 1, ... in program order
    start = np.flatnonzero(np.concatenate(([True], h[1:] != h[:-1])))
    place = np.arange(cont.shape[0]) - np.repeat(start, np.diff(np.append(start, cont.shape[0])))
    out = np.full((n_addr.shape[0], 4 + int(place.max()) + 1), -1, dtype=np.int64)
    out[:, :4] = n_addr
    out[h, 4 + place] = n_addr[cont, 0]  # a re's load 0 is its source
    out[cont, :] = -1
    nbytes = n_bytes.copy()
    nbytes[cont] = 0
    return out, nbytes


def auto_packet_bytes(total_lines: int, line_bytes: int, options: SimOptions) -> int:
    """``--packet-bytes auto``: the flit while the replay has at most ``auto_max_jobs`` lines,
    else the smallest power-of-two multiple of the flit that brings it down to about that
    many packets (capped at ``max_packet_bytes``). Large transfers are bandwidth-bound, and the
    error this costs is measured by ``benchmarks/bench_sim.py``."""
    size = line_bytes
    while total_lines * line_bytes > options.auto_max_jobs * size and size < options.max_packet_bytes:
        size *= 2
    return size


@dataclass(frozen=True, slots=True)
class _Shortest:
    """The shortest of each access over all CUs, stacks and ports (memory access included),
    and the best-connected CU's links: what no placement or routing can beat."""

    load_ns: float  # CU -> stack, access, stack -> CU
    local_store_ns: float  # CU -> stack, access
    remote_store_ns: float  # CU -> port, up-link, down-link, port -> stack, access
    to_port_ns: float  # CU -> port alone (any port)
    cables_ns: float  # up-link + down-link (any port)
    port_stack_ns: float  # port -> stack alone (any pair)
    cu_in_bytes_per_ns: float  # all the links into one CU from the mesh together
    cu_out_bytes_per_ns: float  # all the links out of one CU into the mesh together


def _cu_link_bandwidth(net: PodNet, tables: tuple[Any, ...], cu_is_src: bool) -> float:
    """Total bandwidth of the distinct first (``cu_is_src``) or last edges of the CU's paths in
    ``tables``, for the CU where it is largest."""
    nedges = net.edge_bw.shape[0]
    keys = []  # cu * nedges + edge: one int per (CU, link) pair
    for t in tables:
        nonempty = np.diff(t.indptr) > 0
        pos = np.flatnonzero(nonempty)
        edges = t.edges[t.indptr[:-1][nonempty]] if cu_is_src else t.edges[t.indptr[1:][nonempty] - 1]
        cu = pos // t.ndst if cu_is_src else pos % t.ndst
        keys.append(cu * nedges + edges.astype(np.int64))
    uniq = np.unique(np.concatenate(keys))
    if uniq.shape[0] == 0:  # no CU paths at all: nothing to bound
        return math.inf
    return float(np.bincount(uniq // nedges, weights=net.edge_bw[uniq % nedges]).max())


def _remote_store_zero_load(net: PodNet, access_ns: float, cu: I64, port: I64, stack: I64,
                            lines: I64) -> dict[str, float]:
    """A remote store's latency without any wait, part by part, over the routes the jobs took
    (weighted by lines, as the hops are; one entry per job with a remote store: its CU, its
    port, the remote stack): the sender's chip (CU to I/O port), the scale-up network (the
    port's cable up to its switch plane and down to the receiver's port of that plane), the
    receiver's chip (port to HBM stack) and the memory write. What the measured mean adds to
    their sum is waiting (``queueing`` says where heads waited). Empty without remote stores."""
    w = lines.astype(np.float64)
    if w.sum() <= 0:
        return {}
    geo = net.geo
    parts = {"sender_chip": geo.cu_port.latency_ns[cu, port],
             "scale_up": net.edge_lat[net.up + port] + net.edge_lat[net.down + port],
             "receiver_chip": geo.port_stack.latency_ns[port, stack]}
    out = {name: float((v * w).sum() / w.sum()) for name, v in parts.items()}
    out["memory_write"] = float(access_ns)
    out["total"] = out["sender_chip"] + out["scale_up"] + out["receiver_chip"] + out["memory_write"]
    return out


def _from_port_ns(spec: TopologySpec, net: PodNet) -> npt.NDArray[np.float64]:
    """Per I/O port, the shortest way on from it to a remote stack: the port's two cables (up
    to its switch plane, down to the receiver's port of that plane) and that port's nearest
    stack, without the memory access."""
    P = spec.chip.io_ports
    cables = net.edge_lat[net.up:net.up + P] + net.edge_lat[net.down:net.down + P]
    return cables + net.geo.port_stack.latency_ns.min(axis=1)


def _shortest(spec: TopologySpec, net: PodNet) -> _Shortest:
    geo = net.geo
    chip = spec.chip
    access = chip.memory_access_latency_ns
    up = net.up + np.arange(chip.io_ports)
    down = net.down + np.arange(chip.io_ports)
    to_port = geo.cu_port.latency_ns.min(axis=0)  # per port, from the nearest CU
    from_port = _from_port_ns(spec, net)
    return _Shortest(
        load_ns=float((geo.cu_stack.latency_ns + geo.stack_cu.latency_ns.T).min()) + access,
        local_store_ns=float(geo.cu_stack.latency_ns.min()) + access,
        remote_store_ns=float((to_port + from_port).min()) + access,
        to_port_ns=float(to_port.min()),
        cables_ns=float((net.edge_lat[up] + net.edge_lat[down]).min()),
        port_stack_ns=float(geo.port_stack.latency_ns.min()),
        cu_in_bytes_per_ns=_cu_link_bandwidth(net, (geo.stack_cu,), cu_is_src=False),
        cu_out_bytes_per_ns=_cu_link_bandwidth(net, (geo.cu_stack, geo.cu_port), cu_is_src=True),
    )


def _bounds(spec: TopologySpec, net: PodNet, short: _Shortest, sent: I64,
            loads_first: bool) -> tuple[float, float]:
    """``(lower bound, placement floor)`` of a replay that sends ``sent`` bytes between GPUs.

    Lower bound (alpha-beta): the shortest remote store (CU to port, scale-up, port to stack,
    memory write) plus the busiest GPU's bytes over its total port bandwidth (egress or
    ingress), less one flit (the last flit's own serialization is inside the latency).

    Placement floor: what no placement or routing can beat when every sent byte is loaded from
    its sender's memory first (``loads_first``; else the lower bound). The first byte reaches
    a port no earlier than the shortest load round trip (CU to stack, access, back) and the
    shortest CU-to-port path; the busiest GPU's ports (egress, or ingress after the cables)
    then pass its bytes at their total bandwidth; the last byte still needs the shortest way
    from a port to a remote stack. Each shortest path is taken over all ports on its own, so
    their sum is at most the lower bound's alpha. (:func:`_step_floor_ns` adds the plan's
    dependencies.)"""
    if int(sent.sum()) == 0:
        return 0.0, 0.0
    geo = net.geo
    chip = spec.chip
    up = net.up + np.arange(chip.io_ports)
    down = net.down + np.arange(chip.io_ports)
    bw_in_port = net.edge_bw[geo.port_in_edge]  # Router -> IoPort
    bw_out_port = net.edge_bw[geo.port_out_edge]
    egress_bw = float(np.minimum(bw_in_port, net.edge_bw[up]).sum())
    ingress_bw = float(np.minimum(net.edge_bw[down], bw_out_port).sum())
    slowest = float(min(np.minimum(bw_in_port, net.edge_bw[up]).min(),
                        np.minimum(net.edge_bw[down], bw_out_port).min()))
    beta = max(float(sent.sum(axis=1).max()) / egress_bw, float(sent.sum(axis=0).max()) / ingress_bw)
    beta = max(0.0, beta - (chip.flit_bytes / slowest if math.isfinite(slowest) else 0.0))
    lower = short.remote_store_ns + beta
    if not loads_first:
        return lower, lower
    # the cables before the receiver's ports (the first byte's) and the way from a port to a
    # stack (the last byte's) may be different ports' too
    return lower, max(lower, short.load_ns + short.to_port_ns + short.cables_ns + short.port_stack_ns
                      + chip.memory_access_latency_ns + beta)


def _load_column_ids(j_cls: npt.NDArray[Any]) -> tuple[int, ...]:
    """Which columns of ``eng.build_jobs``' route classes are loads' stacks: the first two,
    then a fused pass's further loads from column 5 on."""
    return (0, 1, *range(5, j_cls.shape[1]))


def _load_columns(j_cls: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The load columns (:func:`_load_column_ids`) of the route classes, as one array."""
    return j_cls[:, list(_load_column_ids(j_cls))]


def _step_floor_ns(spec: TopologySpec, net: PodNet, short: _Shortest, dag: ReplayDag, code: I64,
                   n_bytes: I64, n_job_ptr: I64, j_cls: npt.NDArray[np.int64], packet_bytes: int,
                   fenced: bool = True) -> float:
    """The plan's critical path when every step takes the least time any placement allows.

    A step starts when its dependencies are done (and a receive-type step when its data has
    landed: the send is done); it then needs, whatever its CU, stacks and ports: the shortest
    line of its kind (load round trip, reduction, the slower of its stores) and, after the
    first line, (a) its other lines through its CU's links (loads in, stores out) and its
    reductions through the CU's vector unit, (b) as many further line latencies as its lines
    fill the CU's request window (``max_outstanding_requests_per_cu``, plus half a packet: a
    packet may start while half of it fits; a slot is held until its line's store has landed).
    Control and data edges as in :func:`nuna.plan.dag.finish_times`; 0 if the DAG has a cycle
    (the replay reports it). With sends that do not wait for their stores (``fenced`` False:
    LL, LL128) a step that stores remotely is done once its last line's remote store is issued
    (and its local store, if any, has landed): its remote stores count in the window's rounds,
    whose slots they hold, but not in its first line nor in its CU's outgoing stream."""
    chip = spec.chip
    line = chip.flit_bytes
    nn = code.shape[0]
    njobs = np.diff(n_job_ptr)
    node_of = np.repeat(np.arange(nn), njobs)
    cls = j_cls  # one row per job
    n_loads = np.zeros(nn, dtype=np.int64)
    np.maximum.at(n_loads, node_of, (_load_columns(cls) >= 0).sum(axis=1))
    # passes of the ALU per line: one per source beyond the first (a fused re has several)
    passes = np.ones(nn, dtype=np.int64)
    np.maximum.at(passes, node_of, 1 + (cls[:, 5:] >= 0).sum(axis=1))
    local = np.bincount(node_of[cls[:, 2] >= 0], minlength=nn) > 0
    remote = np.bincount(node_of[cls[:, 3] >= 0], minlength=nn) > 0
    alu = np.isin(code, (eng.T_RRC, eng.T_RRS, eng.T_RRCS, eng.T_RE)) & (njobs > 0)
    alu_ns = float(net.edge_lat[net.alu])

    def line_ns(remote_stores: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
        return ((n_loads > 0) * short.load_ns + alu * alu_ns
                + np.maximum(local * short.local_store_ns, remote_stores * short.remote_store_ns))

    first_line_ns = line_ns(remote)
    # what the step waits for itself: its remote stores too unless sends are unfenced
    waited = remote if fenced else np.zeros(nn, dtype=bool)
    own_line_ns = line_ns(waited)
    nbytes = n_bytes.astype(np.float64)
    first = np.minimum(nbytes, line)
    stream_ns = np.maximum.reduce([
        (n_loads * nbytes - first) / short.cu_in_bytes_per_ns,
        ((local.astype(np.int64) + waited) * nbytes - first) / short.cu_out_bytes_per_ns,
        alu * (passes * nbytes - first) / net.reduce_bytes_per_ns,
        np.zeros(nn),
    ])
    packet_lines = max(1, packet_bytes // line)
    window = chip.max_outstanding_requests_per_cu + (packet_lines + 1) // 2
    # a line holds a request slot per two loads (engine ``_slots_per_line``)
    slots = (n_loads + 1) // 2 if cls.shape[1] > 5 else np.ones(nn, dtype=np.int64)
    rounds = -(-(np.maximum(slots, 1) * ((n_bytes + line - 1) // line)) // window)
    duration = np.where(njobs > 0, own_line_ns + np.maximum(stream_ns, (rounds - 1) * first_line_ns), 0.0)
    finish = finish_times(dag, duration)
    return 0.0 if np.isnan(finish).any() else float(finish.max(initial=0.0))


def _latency_stats(hist: npt.NDArray[np.float64], bin_ns: float, total_w: float, sum_lat: float,
                   max_lat: float, sum_ready: float) -> LatencyStats:
    if total_w <= 0:
        return LatencyStats(0, 0.0, 0.0, 0.0, 0.0, 10.0, ())
    cum = np.cumsum(hist)

    def quantile(q: float) -> float:
        return (float(np.searchsorted(cum, q * cum[-1], side="left")) + 0.5) * bin_ns

    coarse = 10.0
    per = max(1, round(coarse / bin_ns))
    nb = int(max_lat // (per * bin_ns)) + 1
    end = min(nb * per, hist.shape[0])
    counts = np.add.reduceat(hist[:end], np.arange(0, end, per))
    return LatencyStats(int(total_w), sum_lat / total_w, quantile(0.5), quantile(0.99), max_lat, per * bin_ns,
                        tuple(round(float(c)) for c in counts), sum_ready / total_w)


def _edge_name(net: PodNet, gpu: int, local: int) -> str:
    geo = net.geo
    if local < geo.num_edges:
        u = local_node(geo, gpu, int(geo.edge_src[local]))
        v = local_node(geo, gpu, int(geo.edge_dst[local]))
        return f"{u!r}->{v!r}"
    p = geo.spec.io_ports
    if net.up <= local < net.up + p:
        k = local - net.up
        return f"IoPort(gpu={gpu}, port={k})->Switch(plane={k})"
    if net.down <= local < net.down + p:
        k = local - net.down
        return f"Switch(plane={k})->IoPort(gpu={gpu}, port={k})"
    return f"virtual({gpu}, {local})"


def _deadlock_message(flat: FlatPlan, dag: ReplayDag, R: Any, credit: I64, rule: str,
                      nodes: SlicedNodes | None) -> str:
    """Which threadblocks a replay that stopped short left blocked, and on what; ``rule``: the
    flow-control rule to cite, ``nodes``: the pieces of steps the replay ran, if any."""

    def name(n: int) -> str:
        return flat.step_name(n) + ("" if nodes is None else piece_label(nodes, n))

    state = R.n_state
    undone = np.flatnonzero(state != eng.N_DONE)
    # control predecessors of every node
    ptr = np.asarray(dag.ctrl_indptr, dtype=np.int64)
    src = np.repeat(np.arange(dag.num_nodes), ptr[1:] - ptr[:-1])
    dst = dag.ctrl_indices.astype(np.int64)
    blocked: list[str] = []
    credits = False
    tbs = np.unique(flat.node_tb[undone])
    for t in tbs.tolist():
        lo, hi = int(flat.tb_indptr[t]), int(flat.tb_indptr[t + 1])
        n = lo + int(np.argmax(state[lo:hi] != eng.N_DONE))
        if R.n_indeg[n] > 0:
            preds = src[(dst == n) & (state[src] != eng.N_DONE)]
            what = [name(int(p)) for p in preds[:3]]
            c = int(credit[n])
            if c >= 0 and state[c] != eng.N_DONE:
                what.append(f"the flow-control credit of {name(c)}")
                credits = True
            blocked.append(f"{name(n)} waits for {', '.join(what)}")
        elif state[n] == eng.N_DATA:
            s = int(dag.match_send[n])
            blocked.append(f"{name(n)} waits for data from {name(s)}")
        else:
            blocked.append(f"{name(n)} is stuck moving data")
    more = f" (and {len(blocked) - 6} more)" if len(blocked) > 6 else ""
    count = f"{len(tbs)} threadblock{'s' * (len(tbs) != 1)}"
    why = f" (flow control: {rule}; --no-flow-control replays without it)" if credits else ""
    return f"deadlock: {count} cannot finish: " + "; ".join(blocked[:6]) + more + why


@dataclass(frozen=True, eq=False)
class _Prepared:
    """A plan laid out for a replay: its DAG, memory, jobs and pod network, and the bounds no
    replay of it can beat (:func:`_bounds`, :func:`_step_floor_ns`)."""

    dag: ReplayDag
    flat: FlatPlan
    n_gpu: I64
    tb_cu: I64
    layout: MemoryLayout
    n_addr: I64
    n_peer: I64
    n_bytes: I64
    psize: int
    n_job_ptr: I64
    njobs: int
    j_bytes: I64
    j_cls: npt.NDArray[np.int64]
    net: PodNet
    lb_sent: I64
    lower_ns: float
    floor_ns: float
    slicing: Slicing | None  # with SimOptions.executor_slices
    sliced: SlicedNodes | None  # None: a node per plan step
    wire: Wire  # the protocol's wire format (SimOptions.protocol_model)
    # per node, the receive-type node whose end frees the buffer step it writes (nuna.plan.flow),
    # whether or not the replay waits for it (SimOptions.flow_control), and how many sends a
    # sender may run ahead of its receiver on a connection
    credit_source: I64
    flow_depth: int


#: ``SimOptions`` counts: (least, most). The upper bounds keep a replay's allocations and int64 byte
#: sums in range, each far above any useful value: ``hist_bins`` per event domain (64 domains of
#: 1 Mi bins: 512 MiB; at 1-ns bins, a millisecond of store latency), ``credit_ring`` per virtual
#: channel (526,336 channels at 64 GPUs, 64 slots: 546 MiB), ``trace_samples`` per traced port
#: edge, ``request_bytes`` as a packet (``fit.MAX_PACKET_BYTES``), ``element_bytes`` beyond any
#: number type, ``issue_queue`` and ``auto_max_jobs`` as the most jobs a replay could hold,
#: ``packet_credit_lines`` far above any packet's lines (a packet's credit is at most its size).
_OPTION_COUNTS: dict[str, tuple[int, int]] = {
    "credit_ring": (1, 64), "issue_queue": (0, 1 << 40), "request_bytes": (1, MAX_PACKET_BYTES),
    "element_bytes": (1, 1 << 10), "auto_max_jobs": (1, 1 << 40), "trace_samples": (2, 1 << 16),
    "hist_bins": (1, 1 << 20), "threads": (1, 1 << 16), "packet_credit_lines": (1, 1 << 20)}


def _check_options(opts: SimOptions) -> None:
    """``UsageError`` for a :class:`SimOptions` the replay cannot run with, before any of it is
    used (the kernels index and divide without checks: engine._JIT_OPTIONS)."""
    for name, (least, most) in _OPTION_COUNTS.items():
        value = getattr(opts, name)
        if name == "threads" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            raise UsageError(f"SimOptions.{name} must be an integer from {least:,} to {most:,}, "
                             f"got {value!r}")
    if not (isinstance(opts.hist_bin_ns, (int, float)) and math.isfinite(opts.hist_bin_ns)
            and opts.hist_bin_ns > 0.0):
        raise UsageError(f"the latency histogram needs bins of a positive finite width, got "
                         f"{opts.hist_bin_ns!r} ns")
    if opts.line_setups not in LINE_SETUP_RULES:
        raise UsageError(f"head set-ups per packet must be one of {', '.join(sorted(LINE_SETUP_RULES))}, "
                         f"got {opts.line_setups!r}")
    if opts.protocol_model not in PROTOCOL_MODELS:
        raise UsageError(f"SimOptions.protocol_model must be one of {', '.join(PROTOCOL_MODELS)}, "
                         f"got {opts.protocol_model!r}")
    for name in ("reduce_fusion", "executor_slices", "flow_control"):
        if not isinstance(getattr(opts, name), bool):
            raise UsageError(f"SimOptions.{name} must be True or False, got {getattr(opts, name)!r}")
    problem = None if opts.router is None else router_params_problem(opts.router)
    if problem is not None:
        raise UsageError(f"SimOptions.{problem}")


def _prepare(plan: Plan, topology_spec: TopologySpec, size_bytes: int, packet_bytes: PacketBytes | None,
             opts: SimOptions) -> _Prepared:
    """Everything :func:`simulate` sets up before its replay loop (errors as there)."""
    spec = topology_spec
    chip = spec.chip
    line = chip.flit_bytes
    if packet_bytes is None:
        packet_bytes = line
    problem = packet_problem(packet_bytes, line)
    if problem is not None:
        raise UsageError(problem)
    _check_options(opts)
    problem = packet_cap_problem(opts.max_packet_bytes, line) if packet_bytes == "auto" else None
    if problem is not None:
        raise UsageError(problem)
    ngpus = plan.ngpus
    mismatch = gpu_count_mismatch(plan)  # first: a huge ngpus must not be expanded into a list
    if mismatch is not None:
        raise SimulationError(f"plan {plan.name}: {mismatch}")
    if sorted(g.id for g in plan.gpus) != list(range(ngpus)):
        raise SimulationError(f"plan {plan.name}: GPU ids must be 0..{ngpus - 1}")
    flat = flatten(plan)
    _check_peers(flat, plan)
    dag = build_dag(plan)
    nn = flat.num_nodes
    n_gpu = flat.tb_gpu[flat.node_tb].astype(np.int64)
    _check_operands(flat, plan, n_gpu)
    tb_cu = threadblock_cus(plan, spec, flat)
    layout = memory_layout(plan, spec, size_bytes, flat, dag.match_send)
    cb = layout.chunk_bytes
    n_addr, n_peer = _addresses(flat, dag, layout, n_gpu)
    n_bytes = flat.count.astype(np.int64) * cb
    n_bytes[flat.code == eng.T_NOP] = 0
    if opts.reduce_fusion:
        n_addr, n_bytes = _fuse_reduces(flat, n_addr, n_bytes)
    slicing = executor_slicing(plan, cb, opts.element_bytes) if opts.executor_slices else None
    sliced: SlicedNodes | None = None
    if slicing is None:
        credit = credit_sources(dag, flow_control_depth(plan.protocol))
    else:
        sliced, credit = executor_nodes(flat, dag, n_addr, n_bytes, n_peer, cb, slicing, plan.protocol,
                                        opts.element_bytes)
    if sliced is not None:
        flat, dag, n_addr, n_peer = sliced.flat, sliced.dag, sliced.n_addr, sliced.n_peer
        n_bytes = sliced.n_bytes
        nn = flat.num_nodes
        n_gpu = flat.tb_gpu[flat.node_tb].astype(np.int64)

    # jobs
    g_nar = plan.placement.nar_granularity or 1
    owner = stack_domains(spec, g_nar)
    dom_ports = nar_port_table(spec, g_nar)
    # the NAR domain of each step's remote stores: by destination address (-1) or by its CU
    n_domain = np.full(nn, -1, dtype=np.int64)
    by_cu = store_domains_by_cu(spec, g_nar)
    if by_cu is not None:
        n_domain = np.asarray(by_cu, dtype=np.int64)[tb_cu[flat.node_tb]]
    moving = (n_addr >= 0).any(axis=1)
    total_lines = int(((n_bytes + line - 1) // line)[moving].sum())
    psize = auto_packet_bytes(total_lines, line, opts) if packet_bytes == "auto" else int(packet_bytes)
    n_job_ptr = np.zeros(nn + 1, dtype=np.int64)
    args = (n_bytes, n_gpu.astype(np.int32), n_peer.astype(np.int32), n_addr, layout.page_base,
            layout.page_stack, layout.page_phys, layout.page_bytes, chip.address_hash_granularity_bytes,
            owner, dom_ports, n_domain, line, psize)
    # room for twice the jobs of full packets, never more than one per line (exact for flits)
    full = int(((n_bytes + psize - 1) // psize)[moving].sum())
    capacity = total_lines if psize <= line else min(total_lines, 2 * full)
    njobs, j_bytes, j_cls = eng.build_jobs(*args, n_job_ptr, capacity)
    njobs = int(njobs)
    j_bytes, j_cls = j_bytes[: max(1, njobs)], j_cls[: max(1, njobs)]

    net = _pod_net(spec, ngpus, opts.router, opts.element_bytes, opts.issue_queue)
    lb_sent = np.zeros((ngpus, ngpus), dtype=np.int64)
    sends = np.flatnonzero(n_addr[:, 3] >= 0)
    np.add.at(lb_sent, (n_gpu[sends], n_peer[sends]), n_bytes[sends])
    # the placement floor counts a load before every remote store (true of every replay step
    # that stores remotely: sends and forwards read their data from memory first)
    remote = j_cls[:njobs, 3] >= 0
    loads = np.any(_load_columns(j_cls[:njobs]) >= 0, axis=1)
    loads_first = bool(np.all(loads[remote]))
    short = _shortest(spec, net)
    wire = replay_wire(plan, opts)
    # every sent byte crosses the ports as the protocol puts it on the wire (at least this many
    # bytes: each store rounds its own up)
    lower, floor = _bounds(spec, net, short, lb_sent * wire.num // wire.den, loads_first)
    floor = max(floor, _step_floor_ns(spec, net, short, dag, flat.code, n_bytes, n_job_ptr, j_cls[:njobs],
                                      psize, fenced=wire.fenced))
    depth = flow_control_depth(plan.protocol)
    return _Prepared(dag, flat, n_gpu, tb_cu, layout, n_addr, n_peer, n_bytes, psize, n_job_ptr, njobs,
                     j_bytes, j_cls, net, lb_sent, lower, floor, slicing, sliced, wire, credit, depth)


def placement_bounds(plan: Plan, topology_spec: TopologySpec, size_bytes: int, *,
                     packet_bytes: PacketBytes | None = None,
                     options: SimOptions | None = None) -> tuple[float, float]:
    """``(lower_bound_ns, placement_floor_ns)`` as :func:`simulate` reports them, without the
    replay: for a headroom study of results whose floors an older nuna computed, or before a
    long run. The floor does not depend on the plan's placement annotations."""
    pre = _prepare(plan, topology_spec, size_bytes, packet_bytes, options or SimOptions())
    return pre.lower_ns, pre.floor_ns


def simulate(plan: Plan, topology_spec: TopologySpec, size_bytes: int, *,
             packet_bytes: PacketBytes | None = None, seed: int = 0, trace: bool = False,
             options: SimOptions | None = None) -> SimResult:
    """Replay ``plan`` for a collective of ``size_bytes`` (nccl-tests convention) on a pod of
    ``plan.ngpus`` GPUs of ``topology_spec``.

    ``packet_bytes``: a multiple of the flit size, or ``"auto"`` (see :func:`auto_packet_bytes`);
    ``None`` (the default) is one flit of the topology.
    ``seed`` is recorded in the result; the model itself makes no random choices. ``trace``
    keeps per-port byte counters over time for :func:`nuna.sim.trace.chrome_trace`. Raises
    ``UsageError`` for a bad size or packet size, ``PlanError`` for a plan without a replay DAG
    and ``SimulationError`` when it cannot run or finish (deadlock)."""
    started = time.perf_counter()
    opts = options or SimOptions()
    if opts.fast_forward is not None:
        if not isinstance(opts.fast_forward, fastforward.FastForward):  # True: an AttributeError below
            raise UsageError(f"SimOptions.fast_forward must be a FastForward (its parameters) or None, "
                             f"got {opts.fast_forward!r}")
        if trace:
            raise UsageError("fast-forward cannot record a trace (the skipped time has no events)")
        opts.fast_forward.check()
    spec = topology_spec
    chip = spec.chip
    line = chip.flit_bytes
    ngpus = plan.ngpus
    pre = _prepare(plan, spec, size_bytes, packet_bytes, opts)
    dag, flat, net, layout, tb_cu = pre.dag, pre.flat, pre.net, pre.layout, pre.tb_cu
    n_gpu, n_peer, n_bytes, n_job_ptr = pre.n_gpu, pre.n_peer, pre.n_bytes, pre.n_job_ptr
    psize, njobs, j_bytes, j_cls, lb_sent = pre.psize, pre.njobs, pre.j_bytes, pre.j_cls, pre.lb_sent
    lower, floor = pre.lower_ns, pre.floor_ns
    nn = flat.num_nodes
    limit = chip.max_outstanding_requests_per_cu
    n_cu = tb_cu[flat.node_tb].astype(np.int64)
    window_ns = _window_for(opts.windowed, ngpus, trace, net, spec, psize)
    domains = ngpus if window_ns > 0.0 else 1
    credit = pre.credit_source if opts.flow_control else np.full(nn, -1, dtype=np.int64)
    indeg = dag.ctrl_indegree.astype(np.int64) + (credit >= 0)
    # each receive-type node's end gives its credit to at most one send (the one flow_depth
    # later on its connection)
    waits = np.flatnonzero(credit >= 0)
    n_credit = np.full(nn, -1, dtype=np.int64)
    n_credit[credit[waits]] = waits
    credit_ns = _credit_ns(spec, net)[n_cu]
    pools = _pools(n_gpu, n_cu, n_job_ptr, indeg, chip.cus, limit, njobs, domains, opts.hist_bins,
                   psize // line, len(_load_column_ids(j_cls)))
    if waits.size and pools.slots + nn >= eng.MAX_EVENT_ID:
        raise SimulationError(f"plan {plan.name}: too many steps and job slots for flow-control credits "
                              f"({pools.slots + nn:,}); replay it with --no-flow-control")
    packets = pools.packets
    margin = 16 * limit + 16 * 1024
    heap = packets + 2 * margin if domains == 1 else 2 * margin + 4 * packets // domains
    # a packet of m lines holds m request slots: about packets / m are in flight at once
    in_flight = packets // max(1, psize // line)
    # packets of several lines pile up behind a waiting head (docs/simulator.md §5); one-line
    # packets are flits, for which the rule changes nothing, so their replays skip it. A line's
    # remote store with LL's or LL128's flags is a packet of two flits (nuna.plan.wire), whose
    # second piles up behind its head as a wormhole router's body flit does
    st = eng.make_state(net.net, packets, heap, opts.credit_ring, domains, net.block, in_flight,
                        pileup=pre.wire.wire_bytes(psize) > line, ring_events=pools.ring_events,
                        line_setup=LINE_SETUP_RULES[opts.line_setups] if psize > line else eng.LINE_SETUP_ONE,
                        credit_lines=opts.packet_credit_lines)

    m_send = dag.match_send.astype(np.int64)
    n_land = np.where(m_send >= 0, n_bytes[np.maximum(m_send, 0)], 0).astype(np.int64)
    ncu_total = ngpus * chip.cus
    up_ids = (np.arange(ngpus)[:, None] * net.block + net.up + np.arange(chip.io_ports)[None, :]).ravel()
    down_ids = (np.arange(ngpus)[:, None] * net.block + net.down + np.arange(chip.io_ports)[None, :]).ravel()
    tr_edges = np.concatenate([up_ids, down_ids]) if trace else np.zeros(0, dtype=np.int64)
    nsamples = opts.trace_samples if trace else 1
    par_f = np.array([opts.hist_bin_ns, max(1.0, lower / 200.0) if trace else 0.0, window_ns, np.inf, 0.0],
                     dtype=np.float64)
    stat_f = np.zeros(8, dtype=np.float64)
    slots = pools.slots
    R = eng.Replay(
        flat.code.astype(np.int8), n_gpu.astype(np.int32), n_cu.astype(np.int32), n_peer.astype(np.int32),
        dag.ctrl_indptr.astype(np.int64), dag.ctrl_indices.astype(np.int64), dag.match_recv.astype(np.int64),
        n_job_ptr, n_credit, credit_ns,
        np.zeros(nn, dtype=np.int8), indeg, n_land, n_job_ptr[:-1].copy(), np.diff(n_job_ptr),
        np.full(nn, np.nan), np.full(nn, np.nan), np.full(nn, np.nan), np.full(nn, -1, dtype=np.int64),
        j_bytes, j_cls,
        np.zeros(ncu_total, dtype=np.int64), np.full(ncu_total, -1, dtype=np.int64),
        np.full(ncu_total, -1, dtype=np.int64),
        np.zeros(slots, dtype=np.int64), np.zeros(slots, dtype=np.int64), np.zeros(slots, dtype=np.int64),
        np.zeros(slots, dtype=np.int8), np.zeros(slots, dtype=np.float64), np.zeros(slots, dtype=np.float64),
        np.zeros(slots, dtype=np.float64), np.zeros(slots, dtype=np.int64), pools.js_free,
        pools.pk_free,
        pools.ready,
        np.zeros(opts.hist_bins, dtype=np.float64), stat_f, np.zeros((ngpus, ngpus), dtype=np.int64),
        tr_edges.astype(np.int64), np.zeros(nsamples, dtype=np.float64),
        np.zeros((nsamples, tr_edges.shape[0]), dtype=np.float64),
        _response_ns_by_segment(spec, net),
        np.array([chip.cus, limit, opts.request_bytes, net.block, *net.seg_start, chip.hbm_stacks,
                  chip.io_ports, line, net.cusrc, opts.issue_queue, pre.wire.num, pre.wire.den,
                  0 if pre.wire.fenced else 1], dtype=np.int64),
        par_f,
        pools.rc, np.zeros(1, dtype=np.int64),
        pools.d_rc, pools.d_ready, pools.d_js_free, pools.d_pk_free, pools.d_hist, pools.d_stat_f,
        pools.d_defer,
    )
    loop_started = time.perf_counter()
    with _threads(opts.threads if domains > 1 else None):
        st, skips = fastforward.run(net.net, st, R, n_job_ptr, opts.fast_forward)
    loop_s = time.perf_counter() - loop_started
    if st.ctr[eng.C_FOREIGN] or R.rc[eng.R_LATE]:
        raise SimulationError(f"internal error: windowed scheduling was not exact "
                              f"({int(st.ctr[eng.C_FOREIGN])} grants outside their GPU's window, "
                              f"{int(R.rc[eng.R_LATE])} events posted into a finished window)")
    if R.rc[eng.R_DONE] < nn:
        rule = flow_rule_text(plan.protocol, by_steps=pre.sliced is not None and pre.sliced.in_parts)
        raise SimulationError(_deadlock_message(flat, dag, R, credit, rule, pre.sliced))
    # sends the credit held back: ready only when it came (exact in the engine's clock, before
    # fast-forward's shift)
    held = int(np.count_nonzero(R.n_t_ready[waits] == R.n_t_end[credit[waits]] + credit_ns[credit[waits]]))
    for times in (R.n_t_ready, R.n_t_start, R.n_t_end):
        fastforward.shift_times(times, skips)
    res = _result(plan, spec, size_bytes, psize, seed, flat, dag, net, st, R, layout, tb_cu, (lower, floor),
                  lb_sent, njobs, (started, loop_s), trace, size_fit(plan, size_bytes, opts.element_bytes),
                  window_ns, None if opts.fast_forward is None else skips, pre.slicing, pre.sliced)
    waiting = int(np.count_nonzero(pre.credit_source >= 0))
    if waiting:
        res = dataclasses.replace(res, flow_control={
            "depth": pre.flow_depth, "waiting_sends": waiting, "modelled": opts.flow_control,
            **({"held_sends": held} if opts.flow_control else {})})
    if plan.protocol is not Protocol.SIMPLE:
        res = dataclasses.replace(res, protocol={"name": plan.protocol.value, "model": opts.protocol_model,
                                                 **pre.wire.to_json()})
    if trace and opts.windowed is None and _window_for(None, ngpus, False, net, spec, psize) > 0.0:
        res = dataclasses.replace(res, one_queue_for_trace=True)
    return res


def load_kernels(topology_spec: TopologySpec) -> None:
    """Compile every replay kernel, or load it from numba's cache, by replaying a tiny 2-GPU
    allgather once with each loop: the one-queue loop and the windowed loop are separate compiled
    functions, and a replay compiles or loads only the one it runs (``docs/simulator.md`` §6). A
    replay timed after this call times the replay alone, whichever loop it takes."""
    plan = generate("allgather", 2)
    for windowed in (False, True):
        simulate(plan, topology_spec, 4096, options=SimOptions(windowed=windowed, threads=1))


@dataclass(frozen=True)
class _Pools:
    """The replay's pools of job and packet slots and its ready-step stack: one of each, or
    with windowed scheduling a share per GPU (the ``d_`` arrays of ``eng.Replay``), as the
    domains may run on several threads."""

    slots: int
    packets: int
    ring_events: int
    js_free: I64
    pk_free: I64
    ready: I64
    rc: I64
    d_rc: I64
    d_ready: I64
    d_js_free: I64
    d_pk_free: I64
    d_hist: npt.NDArray[np.float64]
    d_stat_f: npt.NDArray[np.float64]
    d_defer: I64


def _pools(n_gpu: I64, n_cu: I64, n_job_ptr: I64, indeg: I64, cus: int, limit: int, njobs: int,
           domains: int, bins: int, lines_per_packet: int, loads_per_job: int) -> _Pools:
    """Pools sized for the jobs in flight at once: a CU holds at most ``limit`` request slots,
    so at most ``min(jobs, CUs x limit)`` jobs; a job has at most two packets in flight. With
    windowed scheduling (``domains`` GPUs) each GPU has its own share, and a remote store's
    packet stays out of its pool until the window after both sides of its landing (see
    ``eng._free_landed``), possibly after its job slot is in use again: four per job slot.

    A fused ``re``'s job has up to ``loads_per_job`` packets (its loads) but holds a request
    slot per two loads of each line (``eng._slots_per_line``): a CU's jobs then have at most
    two packets per slot they hold, and they hold at most ``limit`` plus the last job's
    (its start overshoots by at most half of it, ``eng._issue``); windowed, the remote stores
    waiting for a window's end come on top, at most two per job slot as above.

    The event rings are sized for two packets per job a CU's request slots can hold (a job of
    ``lines_per_packet`` lines takes as many slots). Not a bound: windowed, other GPUs' stores
    arrive in a GPU's rings too. The most arrivals one delay class held at once was 0.14-0.56 of
    it in the replays measured (docs/simulator.md §6), and a ring that fills up leaves its
    events to the heap, in the same order."""
    nn = n_gpu.shape[0]
    has_jobs = np.diff(n_job_ptr) > 0
    per_cu = -(-limit // lines_per_packet)
    per_job = max(2, loads_per_job)
    fused_held = lines_per_packet * ((per_job + 1) // 2)  # the most slots one fused job holds
    ready0 = np.flatnonzero(indeg == 0)[::-1]  # popped from the end: in step order
    rc = np.zeros(eng.NRC, dtype=np.int64)
    if domains == 1:
        cus_used = np.unique((n_gpu * cus + n_cu)[has_jobs]).shape[0]
        slots = int(min(njobs, cus_used * limit)) + 1
        packets = 2 * slots + 2
        if per_job > 2:
            packets = min(per_job * slots, 2 * cus_used * (limit + fused_held)) + 2
        ring_events = 2 * int(min(njobs, cus_used * per_cu))
        ready = np.zeros(max(1, nn), dtype=np.int64)
        ready[:ready0.shape[0]] = ready0
        rc[[eng.R_JS_FREE, eng.R_PK_FREE, eng.R_READY]] = slots, packets, ready0.shape[0]
        return _Pools(slots, packets, ring_events, np.arange(slots, dtype=np.int64),
                      np.arange(packets, dtype=np.int64), ready, rc, np.zeros((1, eng.NRC), dtype=np.int64),
                      # one queue uses the replay's own lists: the per-GPU ones are placeholders
                      np.zeros((1, 1), dtype=np.int64), np.zeros((1, 1), dtype=np.int64),
                      np.zeros((1, 1), dtype=np.int64), np.zeros((1, bins)), np.zeros((1, 8)),
                      np.zeros((1, 1), dtype=np.int64))
    G = domains
    g_jobs = np.bincount(n_gpu, weights=np.diff(n_job_ptr), minlength=G).astype(np.int64)
    used = np.unique((n_gpu * cus + n_cu)[has_jobs])
    g_cus = np.bincount(used // cus, minlength=G)
    g_slots = np.minimum(g_jobs, g_cus * limit) + 1
    g_packets = 4 * g_slots + 2
    if per_job > 2:
        g_packets = np.minimum(2 * per_job * g_slots, 2 * g_cus * (limit + fused_held) + 2 * g_slots) + 2
    ring_events = 2 * int(np.minimum(g_jobs, g_cus * per_cu).max())
    g_nodes = np.bincount(n_gpu, minlength=G)
    d_rc = np.zeros((G, eng.NRC), dtype=np.int64)
    d_js_free = np.zeros((G, int(g_slots.max())), dtype=np.int64)
    d_pk_free = np.zeros((G, int(g_packets.max())), dtype=np.int64)
    d_ready = np.zeros((G, max(1, int(g_nodes.max()))), dtype=np.int64)
    s0 = np.concatenate([[0], np.cumsum(g_slots)])
    p0 = np.concatenate([[0], np.cumsum(g_packets)])
    for g in range(G):
        d_js_free[g, :g_slots[g]] = np.arange(s0[g], s0[g + 1])
        d_pk_free[g, :g_packets[g]] = np.arange(p0[g], p0[g + 1])
        mine = ready0[n_gpu[ready0] == g]
        d_ready[g, :mine.shape[0]] = mine
        d_rc[g, [eng.R_JS_FREE, eng.R_PK_FREE, eng.R_READY]] = g_slots[g], g_packets[g], mine.shape[0]
    # the replay's own lists are unused (each domain has its share): distinct placeholders
    js_unused, pk_unused, ready_unused = (np.zeros(1, dtype=np.int64) for _ in range(3))
    return _Pools(int(s0[-1]), int(p0[-1]), ring_events, js_unused, pk_unused, ready_unused, rc, d_rc,
                  d_ready, d_js_free, d_pk_free, np.zeros((G, bins)), np.zeros((G, 8)),
                  # np.zeros, not zeros_like (which writes every zero): the rows' unused
                  # tails then stay unmapped (103 MiB at 64 GPUs, 100 MiB fused allreduce)
                  np.zeros(d_pk_free.shape, dtype=d_pk_free.dtype))


@contextlib.contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """Run the block with numba's parallel sections on ``count`` threads (None: as set), then
    restore the setting (it is the calling thread's). ``count`` was checked with the other
    options (:func:`_check_options`)."""
    if count is None:
        yield
        return
    before = numba.get_num_threads()
    numba.set_num_threads(min(count, int(numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]
    try:
        yield
    finally:
        numba.set_num_threads(before)


def _window_for(windowed: bool | None, ngpus: int, trace: bool, net: PodNet, spec: TopologySpec,
                packet_bytes: int) -> float:
    """The window to replay with (0: one queue) for :attr:`SimOptions.windowed`: forced on, it
    raises ``UsageError`` where windows cannot be used; left to the simulator (``None``), it
    windows from :data:`WINDOWED_FROM_GPUS` GPUs with packets smaller than
    :data:`WINDOWED_BELOW_PACKET_BYTES` where they can be."""
    if windowed is False or ngpus == 1:
        return 0.0
    if windowed is None and (ngpus < WINDOWED_FROM_GPUS or packet_bytes >= WINDOWED_BELOW_PACKET_BYTES):
        return 0.0
    if trace:
        if windowed is None:
            return 0.0
        raise UsageError("windowed scheduling cannot record a trace (it samples every GPU at one time)")
    window_ns = _window_ns(net, spec)
    if window_ns is None:
        if windowed is None:
            return 0.0
        raise UsageError(f"windowed scheduling needs unbounded, unordered buffers at the switch and the "
                         f"stacks' access; topology {spec.name!r} bounds or orders them")
    return window_ns


def _credit_ns(spec: TopologySpec, net: PodNet) -> npt.NDArray[np.float64]:
    """Per CU, the time a flow-control credit takes from a receiving threadblock on it to its
    sender's GPU: NCCL's receiver writes the freed step's count into the sender's memory, an
    8-byte remote store; nuna takes its shortest uncontended way (nearest port, cables, the
    port's nearest stack, the memory write) and leaves out the sender's polling. That way holds
    a scale-up up-link and a memory access, so it is never shorter than the window of windowed
    scheduling (:func:`_window_ns`), which a credit posted to another GPU needs (the replay
    fails on a late post: ``R_LATE``)."""
    ways = net.geo.cu_port.latency_ns + _from_port_ns(spec, net)[None, :]
    return ways.min(axis=1) + spec.chip.memory_access_latency_ns


def _window_ns(net: PodNet, spec: TopologySpec) -> float | None:
    """The window of windowed scheduling (``docs/simulator.md`` §6): the least time between an
    event of one GPU and its first effect on another's state, that is the shorter of a scale-up
    up-link's latency (a flit's way to the switch) and the memory access (a remote store's
    landing is known when its access starts). Exact only if a flit leaving the switch or
    landing in a stack touches no state of the edge it came by (no credit, no FIFO order):
    ``None`` for a topology whose buffers there are bounded or ordered."""
    P, S = spec.chip.io_ports, spec.chip.hbm_stacks
    ends = np.r_[net.up:net.up + P, net.access:net.access + S]
    cols = net.net.ei[ends]
    if (cols[:, eng.EI_CAP] >= 0).any() or cols[:, eng.EI_FIFO].any():
        return None
    return float(min(net.edge_lat[net.up:net.up + P].min(), net.edge_lat[net.access:net.access + S].min()))


def _response_ns_by_segment(spec: TopologySpec, net: PodNet) -> npt.NDArray[np.float64]:
    """Per store segment, the time a write response takes back to the storing CU along the
    reverse route (the topology's stack -> CU, stack -> port and port -> CU path tables, and the
    port's two cables): the store's own latency mirrored, without the memory access, as the
    response leaves the stack once the data is written. A remote store's response is the sum
    of its two segments' entries. All zero when stores complete as they land."""
    out = np.zeros(net.net.seg_ptr.shape[0] - 1, dtype=np.float64)
    if spec.protocol.store_completion == "landing":
        return out
    geo, C, S, P = net.geo, spec.chip.cus, spec.chip.hbm_stacks, spec.chip.io_ports
    store, remote_out, remote_in = net.seg_start[2], net.seg_start[3], net.seg_start[4]
    cables = net.edge_lat[net.up:net.up + P] + net.edge_lat[net.down:net.down + P]
    out[store:store + C * S] = geo.stack_cu.latency_ns.T.ravel()  # segment cu * S + stack
    out[remote_out:remote_out + C * P] = (geo.port_cu.latency_ns.T + cables).ravel()  # cu * P + port
    out[remote_in:remote_in + P * S] = geo.stack_port.latency_ns.T.ravel()  # port * S + stack
    return out


@functools.lru_cache(maxsize=8)
def _chip_link_names(geo: ChipGeometry) -> tuple[tuple[int, str, str], ...]:
    """(local edge id, source name, destination name) of every physical chip edge (the
    geometry's edges), named by GPU 0's nodes, sorted by (source, destination) local node id."""
    src, dst = geo.edge_src.astype(np.int64), geo.edge_dst.astype(np.int64)
    return tuple((e, repr(local_node(geo, 0, int(src[e]))), repr(local_node(geo, 0, int(dst[e]))))
                 for e in np.lexsort((dst, src)).tolist())


def _mean_wait(wait: npt.NDArray[np.float64], grants: I64) -> npt.NDArray[np.float64]:
    """Mean wait per grant, 0 where nothing was granted. The sums are rounded first, as the
    classes' totals are: a wait of zero comes out as a sum of +-1e-14 float residues."""
    return np.divide(np.round(wait, 6), grants, out=np.zeros(wait.shape), where=grants > 0)


def _chip_links(net: PodNet, e_bytes: I64, util: npt.NDArray[np.float64], e_wait: npt.NDArray[np.float64],
                e_grants: I64) -> ChipLinkTable:
    """Every physical chip edge, its bytes summed, its utilisation averaged / maximised and
    its heads' mean wait taken over the GPUs."""
    E = net.geo.num_edges
    kinds = tuple(EDGE_CLASSES[c] for c in net.edge_class[:E].tolist())
    return ChipLinkTable(_chip_link_names(net.geo), kinds, e_bytes[:, :E].sum(axis=0),
                         util[:, :E].mean(axis=0), util[:, :E].max(axis=0),
                         _mean_wait(e_wait[:, :E].sum(axis=0), e_grants[:, :E].sum(axis=0)))


def _port_waits(net: PodNet, e_wait: npt.NDArray[np.float64], e_grants: I64) -> npt.NDArray[np.float64]:
    """(GPU, port, PORT_WAIT_CLASSES): the mean head wait for each of every port's links."""
    geo = net.geo
    P = geo.spec.io_ports
    links = {"mesh_to_port": geo.port_in_edge.astype(np.int64), "port_to_switch": net.up + np.arange(P),
             "switch_to_port": net.down + np.arange(P), "port_to_mesh": geo.port_out_edge.astype(np.int64)}
    cols = [links[name] for name in PORT_WAIT_CLASSES]
    return np.stack([_mean_wait(e_wait[:, c], e_grants[:, c]) for c in cols], axis=2)


def _result(plan: Plan, spec: TopologySpec, size_bytes: int, psize: int, seed: int, flat: FlatPlan,
            dag: ReplayDag, net: PodNet, st: Any, R: Any, layout: MemoryLayout, tb_cu: I64,
            bounds: tuple[float, float],
            sent: I64, njobs: int, clock: tuple[float, float], trace: bool, fit: SizeFit, window_ns: float,
            skips: tuple[Skip, ...] | None = None, slicing: Slicing | None = None,
            sliced: SlicedNodes | None = None) -> SimResult:
    """The replay's record. ``bounds``: (lower bound, placement floor) in ns; ``clock``: (the
    ``perf_counter`` at which ``simulate`` started, the seconds it spent in the event loop)."""
    chip = spec.chip
    ngpus = plan.ngpus
    nn = flat.num_nodes
    t_end = float(np.max(R.n_t_end)) if nn else 0.0
    t = t_end if t_end > 0 else 1.0
    block = net.block
    e_bytes = eng.edge_bytes(st).reshape(ngpus, block)
    e_busy = st.ef[:, eng.EF_BUSY].reshape(ngpus, block)
    e_wait = st.ewait.reshape(ngpus, block)
    e_grants = st.ei[:, eng.EI_PKTS].astype(np.int64).reshape(ngpus, block)
    P = chip.io_ports
    lat = _latency_stats(R.hist, float(R.par_f[eng.F_BIN]), float(R.stat_f[eng.S_LAT_W]),
                         float(R.stat_f[eng.S_LAT_SUM]), float(R.stat_f[eng.S_LAT_MAX]),
                         float(R.stat_f[eng.S_READY_SUM]))
    # links by class (physical edges only)
    classes: dict[str, dict[str, float]] = {}
    util = e_busy / t
    for c, name in enumerate(EDGE_CLASSES):
        if name == "virtual":
            continue
        sel = net.edge_class == c
        if not sel.any():
            continue
        u = util[:, sel]
        classes[name] = {"edges": int(u.size), "bytes": int(e_bytes[:, sel].sum()),
                         "utilization_mean": float(u.mean()), "utilization_max": float(u.max())}
    phys = np.flatnonzero(net.edge_class != EDGE_CLASSES.index("virtual"))
    flat_util = util[:, phys].ravel()
    top = np.argsort(-flat_util, kind="stable")[:10]
    busiest = tuple(
        {"edge": _edge_name(net, int(k // phys.shape[0]), int(phys[k % phys.shape[0]])),
         "kind": EDGE_CLASSES[int(net.edge_class[phys[k % phys.shape[0]]])],
         "bytes": int(e_bytes[k // phys.shape[0], phys[k % phys.shape[0]]]),
         "utilization": float(flat_util[k])}
        for k in top.tolist() if flat_util[k] > 0
    )
    # mesh hops per line, from the jobs' routes; route columns one at a time as int64 (all at
    # once: 250 MB at 64 GPUs, 1.6 M jobs of 20 columns, and on machines where fresh memory is
    # slow over a second: docs/simulator.md section 6)
    counts = np.diff(R.n_job_ptr)
    job_node = np.repeat(np.arange(nn), counts)
    cu = R.n_cu[job_node].astype(np.int64)
    lines = (R.j_bytes[: job_node.shape[0]] + chip.flit_bytes - 1) // chip.flit_bytes
    jc = R.j_cls[: job_node.shape[0]]

    def column(c: int) -> I64:
        return jc[:, c].astype(np.int64)

    geo = net.geo
    hops: dict[str, float] = {}

    def mean(key: str, sel: npt.NDArray[np.bool_], h: npt.NDArray[Any]) -> None:
        w = lines[sel]
        hops[f"{key}_mean"] = float((h * w).sum() / w.sum()) if w.sum() > 0 else 0.0

    # load_mean is each line's first operand; load_all_mean weighs every load a line makes (a
    # reduction's second operand, a fused pass's further sources) once
    hop_lines = load_lines = 0
    for c in _load_column_ids(jc):
        load = column(c)
        sel = load >= 0
        h = geo.cu_stack.hops[cu[sel], load[sel]] + geo.stack_cu.hops[load[sel], cu[sel]]
        if c == 0:
            mean("load", sel, h)
        hop_lines += int((h * lines[sel]).sum())
        load_lines += int(lines[sel].sum())
    port, store = column(3), column(2)
    remote = port >= 0
    stack = column(4)[remote]
    mean("local_store", store >= 0, geo.cu_stack.hops[cu[store >= 0], store[store >= 0]])
    # the two sides of a remote store: NAP shortens the sender's, NAR placement the receiver's
    mean("remote_store_sender", remote, geo.cu_port.hops[cu[remote], port[remote]])
    mean("remote_store_receiver", remote, geo.port_stack.hops[port[remote], stack])
    hops["remote_store_mean"] = hops["remote_store_sender_mean"] + hops["remote_store_receiver_mean"]
    hops["load_all_mean"] = hop_lines / load_lines if load_lines else 0.0
    store_parts = _remote_store_zero_load(net, chip.memory_access_latency_ns, cu[remote], port[remote], stack,
                                          lines[remote])
    # queueing by where heads waited; a grant moves one packet (one line with 256-byte packets)
    grants = np.bincount(net.wait_class, weights=e_grants.sum(axis=0), minlength=len(WAIT_CLASSES))
    waited = np.bincount(net.wait_class, weights=e_wait.sum(axis=0), minlength=len(WAIT_CLASSES))
    queueing: dict[str, dict[str, float]] = {}
    for c, name in enumerate(WAIT_CLASSES):
        n = int(grants[c])
        if n:
            # rounded: waits of zero come out as sums of +-1e-14 float residues
            total = round(float(waited[c]), 6)
            queueing[name] = {"grants": n, "total": total, "mean": round(total / n, 9)}
    die = net.edge_class == EDGE_CLASSES.index("die_crossing")
    ntr = int(R.rc[eng.R_TR_N])
    tr_bytes = R.tr_bytes[:ntr].reshape(ntr, 2, ngpus * P).transpose(0, 2, 1) if trace else \
        np.zeros((0, ngpus * P, 2), dtype=np.int64)
    times = _step_times(R, slicing, sliced)
    return SimResult(
        plan_name=plan.name, collective=plan.collective, ngpus=ngpus, topology=spec.name,
        size_bytes=size_bytes,
        chunk_bytes=layout.chunk_bytes, packet_bytes=psize, seed=seed, config=plan.placement.config,
        nar_granularity=plan.placement.nar_granularity, time_ns=t_end, lower_bound_ns=bounds[0],
        placement_floor_ns=bounds[1],
        remote_store_latency=lat,
        port_egress_bytes=e_bytes[:, net.up:net.up + P].copy(),
        port_ingress_bytes=e_bytes[:, net.down:net.down + P].copy(),
        port_egress_busy_ns=e_busy[:, net.up:net.up + P].copy(),
        port_ingress_busy_ns=e_busy[:, net.down:net.down + P].copy(),
        port_queueing_ns_mean=_port_waits(net, e_wait, e_grants),
        link_classes=classes, busiest_links=busiest,
        chip_link_table=_chip_links(net, e_bytes, util, e_wait, e_grants),
        noc_hops=hops, queueing=queueing, remote_store_zero_load_ns=store_parts,
        die_crossing_bytes=int(e_bytes[:, die].sum()), remote_bytes=int(R.stat_f[eng.S_REMOTE_BYTES]),
        landed_bytes=R.landed.copy(), sent_bytes=sent, steps=int(times[0].shape[0]), jobs=njobs,
        events=int(st.ctr[eng.C_EVENTS]), wall_s=time.perf_counter() - clock[0], loop_s=clock[1],
        node_t_ready=times[0], node_t_start=times[1], node_t_end=times[2],
        trace_time_ns=R.tr_time[:ntr].copy(),
        trace_port_bytes=np.ascontiguousarray(tr_bytes).astype(np.int64),
        size_fit=fit,
        window_ns=window_ns,
        fast_forward=skips,
        slicing=slicing, replay_nodes=nn, slice_t_start=times[3], slice_t_end=times[4],
    )


def _step_times(R: Any, slicing: Slicing | None, sliced: SlicedNodes | None) -> tuple[Any, ...]:
    """Per plan step: when its dependencies were met, it started and it ended, and with
    slicing (steps, slices) arrays of when each slice started and ended (its first call's
    start, its last call's end; ``None`` without slicing)."""
    ready, start, end = R.n_t_ready.copy(), R.n_t_start.copy(), R.n_t_end.copy()
    if sliced is None:
        if slicing is None:
            return ready, start, end, None, None
        return ready, start, end, start[:, None], end[:, None]
    # the replay's nodes of a step and slice are its calls, consecutive in the replay
    first = np.full((sliced.steps, sliced.slices), sliced.origin.shape[0], dtype=np.int64)
    last = np.full((sliced.steps, sliced.slices), -1, dtype=np.int64)
    idx = np.arange(sliced.origin.shape[0], dtype=np.int64)
    np.minimum.at(first, (sliced.origin, sliced.slice_of), idx)
    np.maximum.at(last, (sliced.origin, sliced.slice_of), idx)
    s_start, s_end = start[first], end[last]
    return ready[first[:, 0]], s_start[:, 0].copy(), s_end[:, -1].copy(), s_start, s_end
