"""The outcome of a replay: one frozen record, its JSON form and the nccl-tests bus factors.

``SimResult.to_json()`` is deterministic for the same inputs except ``wall_s``, which measures
the run itself: a comparison drops that one key.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from nuna.plan.ir import Collective, Plan
from nuna.plan.slices import Slicing
from nuna.plan.verify import SizeFit
from nuna.plan.wire import protocol_wire
from nuna.units import format_size

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Packets larger than this are *coarse*: every packet of more than one 256-byte line. A packet
#: moves its lines as one burst and holds less credit in a buffer than its flits would where
#: many senders converge, so packets hide congestion or add burstiness, by different amounts for
#: each configuration (docs/simulator.md §5), and no size above a line is safe: against 256-byte
#: flits, nuna 0.15.0, direct plans, one threadblock per peer, the 64-GPU 10 MiB allgather and
#: alltoall under NUMA+NAR with auto's 512-byte packets run 22.4 % and 23.5 % fast (loads that
#: converge on a stack wait 325 ns per flit to leave it, 0.7 ns per packet), where UA errs by -7.7
#: and -9.6 %. Until 2026-12-07 the threshold was 1 KiB, from the 64-GPU 100 MiB allgather (nuna
#: 0.6.0: 1 KiB packets UA -8.8 %, NAP+NAR -4.2 %; 2 KiB -22.6 % and -22.4 %; 8 KiB, what auto
#: picks, -6.4 % and -9.2 %; on 2-8 GPUs 2-64 KiB err by -8 % to +61 %). Since 0.16.0 a packet
#: takes two lines of credit on entering a buffer (``SimOptions.packet_credit_lines``): the
#: 64-GPU NUMA+NAR cases above err +0.3 % and +2.8 %, and the errors measured on 0.16.0 range
#: from -10.1 % (2 GPUs, 16 per peer, 520 MB, 512 B) to +60.2 % (4 GPUs, 4 per peer, 128 MB,
#: 64 KiB); still no size above a line is safe.
COARSE_PACKET_BYTES = 256

#: The wait classes (``nuna.sim.network.WAIT_CLASSES``) of an I/O port's four links, in a
#: remote store's order: router to port, port to switch, switch to port, port to router. Each
#: port row of the JSON gives the mean head wait for each: where a port is a hot spot.
PORT_WAIT_CLASSES = ("mesh_to_port", "port_to_switch", "switch_to_port", "port_to_mesh")


class PortWait(NamedTuple):
    """One link of one I/O port (``link``: a ``PORT_WAIT_CLASSES`` name) and its heads' mean
    wait per grant."""

    gpu: int
    port: int
    link: str
    queueing_ns_mean: float


def coarse_packet_note(packet_bytes: int) -> str | None:
    """A one-line caution for a result replayed with coarse packets, ``None`` for finer ones."""
    if packet_bytes <= COARSE_PACKET_BYTES:
        return None
    return (f"packets of {format_size(packet_bytes)} are coarse (over {format_size(COARSE_PACKET_BYTES)}): "
            "where many CUs send they err against 256-byte flits by tens of percent (-10 % to +60 % in "
            "the cases measured on nuna 0.16.0), differently per configuration (docs/simulator.md §5); "
            f"packets of {format_size(COARSE_PACKET_BYTES)} (flits) are the reference, and slower")


def bus_factor(collective: Collective, ngpus: int) -> float:
    """nccl-tests' busbw / algbw factor: allgather, reducescatter and alltoall ``(n-1)/n``,
    allreduce ``2(n-1)/n``, anything else 1."""
    n = ngpus
    if collective in (Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLTOALL):
        return (n - 1) / n
    if collective is Collective.ALLREDUCE:
        return 2 * (n - 1) / n
    return 1.0


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Distribution of one-way remote-store latencies (ns), weighted by 256-byte lines: from the
    moment a store leaves its CU's issue queue to the moment its tail is written in the remote
    HBM stack (NoC, I/O ports, scale-up network, remote NoC, the memory write).
    ``mean_from_ready_ns`` also counts the wait in the CU's queue (from the data being loaded)."""

    count: int
    mean_ns: float
    p50_ns: float
    p99_ns: float
    max_ns: float
    bin_ns: float
    histogram: tuple[int, ...]  # lines per bin of ``bin_ns``, from 0
    mean_from_ready_ns: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "mean": self.mean_ns, "p50": self.p50_ns, "p99": self.p99_ns,
                "max": self.max_ns, "mean_from_ready": self.mean_from_ready_ns,
                "histogram": {"bin_ns": self.bin_ns, "counts": list(self.histogram)}}


@dataclass(frozen=True, slots=True)
class ChipLink:
    """One physical edge of a GPU's chip (mesh link, die crossing, CU, I/O-port or HBM
    attachment), aggregated over the pod's GPUs. ``src`` and ``dst`` are the ``repr`` of GPU 0's
    node keys (``"Router(gpu=0, x=3, y=1)"``), the names the topology layer gives its nodes;
    utilisation is the edge's busy time over the run time, per GPU."""

    src: str
    dst: str
    kind: str  # a class of ``nuna.sim.network.EDGE_CLASSES``
    total_bytes: int  # summed over GPUs
    utilization_mean: float  # over GPUs
    utilization_max: float
    # per grant over the GPUs: from a head reaching the buffer before the link to its grant
    queueing_ns_mean: float

    def to_json(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "kind": self.kind, "bytes": self.total_bytes,
                "utilization_mean": self.utilization_mean, "utilization_max": self.utilization_max,
                "queueing_ns_mean": self.queueing_ns_mean}


@dataclass(frozen=True, eq=False)
class ChipLinkTable:
    """The per-chip-link figures as arrays, one entry per local edge of a GPU's chip (index =
    edge id): :attr:`SimResult.chip_links` builds its rows from them on first use, because
    building ~2,600 records costs as much as a small replay and sweeps never read them.
    ``order`` lists ``(edge, src, dst)`` in row order."""

    order: tuple[tuple[int, str, str], ...]
    kinds: tuple[str, ...]
    total_bytes: I64
    utilization_mean: F64
    utilization_max: F64
    queueing_ns_mean: F64

    def rows(self) -> tuple[ChipLink, ...]:
        total, mean = self.total_bytes.tolist(), self.utilization_mean.tolist()
        peak, wait = self.utilization_max.tolist(), self.queueing_ns_mean.tolist()
        return tuple(ChipLink(u, v, self.kinds[e], int(total[e]), float(mean[e]), float(peak[e]),
                              float(wait[e]))
                     for e, u, v in self.order)


@dataclass(frozen=True, slots=True)
class Skip:
    """A steady state that fast-forward skipped (nuna.sim.fastforward): at ``at_ns`` on the
    replay's own clock, ``skipped_ns`` of collective time, ``jobs`` credited as done and the
    flit-hop ``events`` that time would have taken (extrapolated, not counted in ``events``)."""

    at_ns: float
    skipped_ns: float
    jobs: int
    events: float


@dataclass(frozen=True, eq=False)
class SimResult:
    """Everything one replay measured. Times in ns, sizes in bytes, bandwidths in GB/s.

    Per-step arrays are in replay-DAG node order (``nuna.plan.dag.build_dag``); ``node_*``
    times are when a step's dependencies were met, when it started moving data and when it
    finished. ``port_*`` arrays are indexed ``[gpu, port]``.
    """

    plan_name: str
    collective: Collective
    ngpus: int
    topology: str
    size_bytes: int
    chunk_bytes: int
    packet_bytes: int
    seed: int
    config: str | None
    nar_granularity: int | None
    time_ns: float
    lower_bound_ns: float
    placement_floor_ns: float  # what no placement or routing beats (replay._bounds)
    remote_store_latency: LatencyStats
    port_egress_bytes: I64
    port_ingress_bytes: I64
    port_egress_busy_ns: F64
    port_ingress_busy_ns: F64
    # (GPU, port, PORT_WAIT_CLASSES): mean head wait per grant for each of the port's four links
    port_queueing_ns_mean: F64
    link_classes: dict[str, dict[str, float]]
    busiest_links: tuple[dict[str, Any], ...]
    chip_link_table: ChipLinkTable = field(repr=False)  # every physical chip edge (see chip_links)
    noc_hops: dict[str, float]
    # by where heads waited (nuna.sim.network.WAIT_CLASSES): grants and ns waited in total and
    # per grant, from a head reaching a buffer to the grant of its next edge
    queueing: dict[str, dict[str, float]]
    die_crossing_bytes: int
    remote_bytes: int
    landed_bytes: I64  # [src gpu, dst gpu]
    sent_bytes: I64  # [src gpu, dst gpu], from the plan
    steps: int
    jobs: int
    events: int
    wall_s: float
    node_t_ready: F64 = field(repr=False)
    node_t_start: F64 = field(repr=False)
    node_t_end: F64 = field(repr=False)
    trace_time_ns: F64 = field(repr=False)
    trace_port_bytes: I64 = field(repr=False)  # [sample, gpu * ports + port, 0 egress / 1 ingress]
    # how the size splits into the plan's chunks (padding, whether an executor would select
    # the plan at this size): nuna.plan.verify.size_fit, as the replay used it
    size_fit: SizeFit = field(repr=False)
    # a remote store's latency without waiting, by part (replay._remote_store_zero_load): the
    # measured mean less their "total" is time spent waiting
    remote_store_zero_load_ns: dict[str, float] = field(default_factory=dict)
    # windowed scheduling's window (SimOptions.windowed), 0 when events ran in one global order
    window_ns: float = 0.0
    # True when only the trace kept the replay in one queue (windowed by default, unable to
    # sample every GPU at one time): the same model, other tie orders (docs/simulator.md §6)
    one_queue_for_trace: bool = False
    # the steady states skipped (SimOptions.fast_forward, nuna.sim.fastforward); None when off
    fast_forward: tuple[Skip, ...] | None = None
    # with SimOptions.executor_slices: the executors' slices (nuna.plan.slices), the replay's
    # nodes (one per step, slice and primitive call) and when each step's slices ran,
    # [step, slice] (its first call's start, its last call's end); None when off
    slicing: Slicing | None = None
    replay_nodes: int = 0
    # an LL or LL128 plan's protocol as the replay modelled it (SimOptions.protocol_model;
    # nuna.plan.wire): name, model, wire bytes per payload byte, whether sends fenced. None for
    # Simple plans, whose JSON has no such key
    protocol: dict[str, Any] | None = None
    # the executors' flow control (SimOptions.flow_control; nuna.plan.flow) of a plan with sends
    # that wait for a credit: the depth, how many sends wait, whether the replay modelled it
    # and, when it did, how many became ready only when their credit came. None for a plan
    # without such sends, whose JSON has no such key
    flow_control: dict[str, Any] | None = None
    slice_t_start: F64 | None = field(default=None, repr=False)
    slice_t_end: F64 | None = field(default=None, repr=False)
    # of wall_s, the seconds in the compiled event loop (the rest: building the jobs and the
    # engine's state before it, this record after it). A measurement like wall_s, so not in
    # to_json, whose one varying key stays wall_s; a sweep point keeps it under "timing"
    loop_s: float = 0.0

    @property
    def skipped_ns(self) -> float:
        """Collective time fast-forward skipped (0 when it was off or skipped nothing)."""
        return sum(k.skipped_ns for k in self.fast_forward or ())

    @property
    def events_skipped(self) -> float:
        """Flit-hop events the skipped time would have taken (extrapolated; not in ``events``)."""
        return sum(k.events for k in self.fast_forward or ())

    @property
    def padding_bytes(self) -> int:
        return self.size_fit.padding_bytes

    @property
    def msccl_selectable(self) -> bool:
        return self.size_fit.msccl_selectable

    @property
    def algbw_gbps(self) -> float:
        return self.size_bytes / self.time_ns if self.time_ns > 0 else 0.0

    @property
    def busbw_gbps(self) -> float:
        return self.algbw_gbps * bus_factor(self.collective, self.ngpus)

    def longest_port_wait(self) -> PortWait | None:
        """The port link whose heads waited longest on average (the first in (GPU, port,
        ``PORT_WAIT_CLASSES``) order on a tie), or ``None`` if no head waited at any port."""
        waits = self.port_queueing_ns_mean
        if waits.size == 0 or float(waits.max()) <= 0.0:
            return None
        g, k, c = np.unravel_index(int(np.argmax(waits)), waits.shape)
        return PortWait(int(g), int(k), PORT_WAIT_CLASSES[int(c)], float(waits[g, k, c]))

    @functools.cached_property
    def chip_links(self) -> tuple[ChipLink, ...]:
        """Every physical chip edge, sorted by (source, destination) local node id."""
        return self.chip_link_table.rows()

    def to_json(self, *, chip_links: bool = True) -> dict[str, Any]:
        """JSON-ready dict (units in the key names); everything but ``wall_s`` is deterministic.
        ``chip_links=False`` leaves out the per-link table, by far the largest part (about 2,600
        rows on nuna-4die), for callers that store many results."""
        t = self.time_ns if self.time_ns > 0 else 1.0
        ports = [
            {"gpu": g, "port": k,
             "egress_bytes": int(self.port_egress_bytes[g, k]),
             "ingress_bytes": int(self.port_ingress_bytes[g, k]),
             "egress_utilization": float(self.port_egress_busy_ns[g, k] / t),
             "ingress_utilization": float(self.port_ingress_busy_ns[g, k] / t),
             "queueing_ns_mean": dict(zip(PORT_WAIT_CLASSES, self.port_queueing_ns_mean[g, k].tolist(),
                                          strict=True))}
            for g in range(self.port_egress_bytes.shape[0]) for k in range(self.port_egress_bytes.shape[1])
        ]
        out: dict[str, Any] = {
            "plan": self.plan_name,
            "collective": self.collective.value,
            "ngpus": self.ngpus,
            "topology": self.topology,
            "size_bytes": self.size_bytes,
            "chunk_bytes": self.chunk_bytes,
            "padding_bytes": self.padding_bytes,
            "msccl_selectable": self.msccl_selectable,
            "packet_bytes": self.packet_bytes,
            "seed": self.seed,
            "config": self.config,
            "nar_granularity": self.nar_granularity,
            "time_ns": self.time_ns,
            "time_us": self.time_ns / 1000.0,
            "lower_bound_ns": self.lower_bound_ns,
            "placement_floor_ns": self.placement_floor_ns,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "bus_factor": bus_factor(self.collective, self.ngpus),
            "remote_store_latency_ns": self.remote_store_latency.to_json(),
            "remote_store_zero_load_ns": self.remote_store_zero_load_ns,
            "io_ports": ports,
            "links": self.link_classes,
            "busiest_links": list(self.busiest_links),
            "noc_hops": self.noc_hops,
            "queueing_ns": self.queueing,
            "die_crossing_bytes": self.die_crossing_bytes,
            "remote_bytes": self.remote_bytes,
            "landed_bytes": self.landed_bytes.tolist(),
            "steps": self.steps,
            "jobs": self.jobs,
            "events": self.events,
            "window_ns": self.window_ns,
            "wall_s": self.wall_s,
        }
        if self.fast_forward is not None:  # only when on: results without it keep their bytes
            out["fast_forward"] = {
                "skipped_ns": self.skipped_ns,
                "skipped_jobs": sum(k.jobs for k in self.fast_forward),
                "events_skipped": round(self.events_skipped),
                "skips": [{"at_ns": k.at_ns, "skipped_ns": k.skipped_ns, "jobs": k.jobs,
                           "events_skipped": round(k.events)} for k in self.fast_forward],
            }
        if self.slicing is not None:  # only when on, as fast_forward
            out["executor_slices"] = {**self.slicing.to_json(), "replay_nodes": self.replay_nodes}
        if self.protocol is not None:
            out["protocol"] = dict(self.protocol)
        if self.flow_control is not None:
            out["flow_control"] = dict(self.flow_control)
        if chip_links:
            out["chip_links"] = [link.to_json() for link in self.chip_links]
        return out


def protocol_note(plan: Plan, result: SimResult) -> str | None:
    """What a replay of an LL or LL128 plan as Simple (``SimOptions.protocol_model = "simple"``)
    leaves out, or ``None`` (docs/simulator.md §3, "Protocols")."""
    if result.protocol is None or result.protocol["model"] != "simple":
        return None
    wire = protocol_wire(plan.protocol)
    return (f"replayed as Simple: this {plan.protocol.value} plan's {wire.num / wire.den:.3g}x bytes on the "
            "wire and its sends that do not wait for their stores are left out (--protocol-model plan "
            "models them)")
