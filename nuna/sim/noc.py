"""The synthetic-traffic NoC mode: a W x H mesh driven by Bernoulli sources, on the same engine
as the replay, for validation against BookSim 2 (``shared/reference/noc-reference-8x8.*``).

Each router has one terminal. A packet is created in its terminal's unbounded source queue,
crosses the injection channel into the router, the X-then-Y mesh links and the ejection channel.
Time is in cycles (the engine's ns), a flit is 256 bytes and every channel moves one flit per
cycle. Edge latencies split BookSim's zero-load latency ``7 + 5H + (L-1)`` physically: each
router output (mesh link or ejection) costs 4 pipeline stages + 1 link cycle = 5, the injection
channel 1 cycle + 1 cycle of source-queue handling = 2.

Router models (``router=``):

``"iq"`` (default)
    input-queued virtual-channel routers as in the BookSim setting: each router input port has
    4 virtual channels x 8 flit buffers, FIFO per virtual channel (head-of-line blocking), one
    flit per cycle through each crossbar input, credit flow control with a credit loop of
    2 cycles after the tail leaves (credit_delay 1 + 1-cycle credit channel), so congestion
    backs up into upstream routers (tree saturation).
``"oq"``
    ideal output queues: unbounded buffers, no head-of-line order, no input-port conflicts
    (the pure output-link FIFO model; it saturates at the channel bound).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from nuna.errors import UsageError
from nuna.sim import engine as eng
from nuna.sim.network import RouterParams, router_params_problem

FLIT_BYTES = 256
TRAFFICS = ("uniform", "transpose", "edges")
ROUTERS = ("iq", "oq")
#: BookSim's latency threshold: a run whose latency exceeds it is past saturation (unstable).
SATURATION_LATENCY = 500.0


def _finite_or_none(value: float) -> float | None:
    return None if math.isnan(value) else value


@dataclass(frozen=True, slots=True)
class NocResult:
    """Outcome of one synthetic run. Rates are flits per node per cycle, latencies cycles."""

    width: int
    height: int
    traffic: str
    router: str
    packet_flits: int
    offered_flit_rate: float
    generated_flit_rate: float
    accepted_flit_rate: float
    packet_latency_avg: float
    packet_latency_max: float
    hops_avg: float
    measured_packets: int
    delivered_packets: int
    saturated: bool
    cycles: int
    warmup_cycles: int
    seed: int
    events: int
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict; ``wall_s`` is the only field that varies between identical runs. A
        statistic of no packet (none measured was delivered) is ``null``: JSON has no NaN."""
        return {
            "mesh": f"{self.width}x{self.height}",
            "traffic": self.traffic,
            "router": self.router,
            "packet_flits": self.packet_flits,
            "offered_flit_rate": self.offered_flit_rate,
            "generated_flit_rate": self.generated_flit_rate,
            "accepted_flit_rate": self.accepted_flit_rate,
            "packet_latency_avg": _finite_or_none(self.packet_latency_avg),
            "packet_latency_max": _finite_or_none(self.packet_latency_max),
            "hops_avg": _finite_or_none(self.hops_avg),
            "measured_packets": self.measured_packets,
            "delivered_packets": self.delivered_packets,
            "saturated": self.saturated,
            "cycles": self.cycles,
            "warmup_cycles": self.warmup_cycles,
            "seed": self.seed,
            "events": self.events,
            "wall_s": self.wall_s,
        }


@dataclass(frozen=True, slots=True)
class MeshNet:
    """A built mesh: the engine network plus the segment of every (source, destination) pair."""

    width: int
    height: int
    net: Any
    pair_seg: np.ndarray  # i4[n, n] segment id of the path from terminal s to terminal d
    pair_hops: np.ndarray  # i4[n, n] mesh links on that path


def _late_latency(birth: np.ndarray, lat: np.ndarray, src: np.ndarray, nodes: int, warm: int,
                  cycles: int) -> float:
    """Worst mean latency over sources of their packets created in the last fifth of the window:
    a flow that cannot keep up shows a backlog that grows with time, even when the others are
    fine (transpose saturates only the flows through its few bottleneck links)."""
    late = birth >= cycles - (cycles - warm) // 5
    if not late.any():
        return 0.0
    lat_late = np.where(np.isnan(lat[late]), np.inf, lat[late])
    sums = np.bincount(src[late], weights=lat_late, minlength=nodes)
    counts = np.bincount(src[late], minlength=nodes)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
    return float(means.max())


def zero_load_latency(hops: int, packet_flits: int) -> int:
    """BookSim's zero-load packet latency in cycles: ``7 + 5H + (L - 1)``."""
    return 7 + 5 * hops + (packet_flits - 1)


#: the most edges the paths of :func:`build_mesh` may hold: it lists every ordered pair's X-then-Y
#: path, about 8 bytes an edge while it builds (a 32x32 mesh: 25 M; a 2048x1 line, which the node
#: count alone allowed, 2.9 G, and its build was killed for memory at 24 GB)
MAX_PATH_ENTRIES = 50_000_000


def path_entries(width: int, height: int) -> int:
    """Edges in the paths of every ordered pair of a ``width x height`` mesh's nodes: each path is
    its source queue, injection and ejection channels and one link per hop, and the hops over all
    pairs sum to ``H^2 (W^3 - W) / 3 + W^2 (H^3 - H) / 3``."""
    n = width * height
    return 3 * n * n + (height * height * (width**3 - width) + width * width * (height**3 - height)) // 3


def build_mesh(width: int, height: int, router: str = "iq", params: RouterParams | None = None) -> MeshNet:
    """Edges and X-then-Y paths of a ``width x height`` mesh with one terminal per router."""
    if width < 1 or height < 1:
        raise UsageError(f"mesh {width}x{height}: both sides must be at least 1")
    if router not in ROUTERS:
        raise UsageError(f"unknown router model {router!r} (use {', '.join(ROUTERS)})")
    entries = path_entries(width, height)
    if entries > MAX_PATH_ENTRIES:
        raise UsageError(f"mesh {width}x{height}: its paths between every pair of nodes would hold "
                         f"{entries:,} edges, more than the {MAX_PATH_ENTRIES:,} this mode builds "
                         f"(a square mesh of up to 36x36 fits)")
    prm = params or RouterParams()
    n = width * height
    lat: list[float] = []
    bw: list[float] = []
    cap: list[int] = []
    nvc: list[int] = []
    cdel: list[float] = []
    fifo: list[int] = []
    setup: list[float] = []

    def add(latency: float, bandwidth: float, bounded: bool, is_fifo: bool, vcs: int) -> int:
        lat.append(latency)
        bw.append(bandwidth)
        cap.append(prm.vc_buffer_flits * FLIT_BYTES if bounded else -1)
        nvc.append(vcs)
        cdel.append(prm.credit_delay_cycles if bounded else 0.0)
        fifo.append(1 if is_fifo else 0)
        setup.append(prm.head_setup_cycles if is_fifo and bounded else 0.0)
        return len(lat) - 1

    iq = router == "iq"
    src = [add(0.0, np.inf, False, True, 1) for _ in range(n)]  # terminal source queues
    inj = [add(2.0, float(FLIT_BYTES), iq, iq, prm.vcs if iq else 1) for _ in range(n)]
    ej = [add(5.0, float(FLIT_BYTES), False, False, 1) for _ in range(n)]
    link: dict[tuple[int, int], int] = {}
    for y in range(height):
        for x in range(width):
            r = y * width + x
            for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                nx_, ny_ = x + dx, y + dy
                if 0 <= nx_ < width and 0 <= ny_ < height:
                    link[(r, ny_ * width + nx_)] = add(5.0, float(FLIT_BYTES), iq, iq, prm.vcs if iq else 1)
    seg_ptr = [0]
    seg_edge: list[int] = []
    pair_seg = np.zeros((n, n), np.int32)
    pair_hops = np.zeros((n, n), np.int32)
    for s in range(n):
        for d in range(n):
            path = [src[s], inj[s]]
            x, y = s % width, s // width
            tx, ty = d % width, d // width
            cur = s
            while x != tx:
                x += 1 if tx > x else -1
                nxt = y * width + x
                path.append(link[(cur, nxt)])
                cur = nxt
            while y != ty:
                y += 1 if ty > y else -1
                nxt = y * width + x
                path.append(link[(cur, nxt)])
                cur = nxt
            path.append(ej[d])
            pair_seg[s, d] = len(seg_ptr) - 1
            pair_hops[s, d] = len(path) - 3
            seg_edge.extend(path)
            seg_ptr.append(len(seg_edge))
    net = eng.make_net(np.array(lat), np.array(bw), np.array(cap, np.int64), np.array(nvc, np.int32),
                       np.array(cdel), np.array(fifo, np.uint8), np.array(setup),
                       np.array(seg_ptr, np.int64),
                       np.array(seg_edge, np.int32), FLIT_BYTES)
    return MeshNet(width, height, net, pair_seg, pair_hops)


def destinations(width: int, height: int, traffic: str, src: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    """Destination terminal of a packet from each source in ``src`` under ``traffic``."""
    n = width * height
    if traffic == "uniform":
        # BookSim's uniform pattern draws from all nodes, the source included
        return np.asarray(rng.integers(0, n, size=src.shape[0]))
    if traffic == "transpose":
        if width != height:
            raise UsageError(f"transpose traffic needs a square mesh, got {width}x{height}")
        x, y = src % width, src // width
        return np.asarray(x * width + y)
    if traffic == "edges":
        # the routers of the two short edges, like CUs writing to I/O ports
        if width >= height:
            targets = np.array([y * width + x for x in (0, width - 1) for y in range(height)])
        else:
            targets = np.array([y * width + x for y in (0, height - 1) for x in range(width)])
        targets = np.unique(targets)
        return np.asarray(targets[rng.integers(0, targets.shape[0], size=src.shape[0])])
    raise UsageError(f"unknown traffic {traffic!r} (use {', '.join(TRAFFICS)})")


def simulate_packets(mesh: MeshNet, birth: np.ndarray, src: np.ndarray, dst: np.ndarray,
                     packet_flits: int, measured: tuple[int, int] | None = None,
                     t_stop: float = np.inf) -> tuple[np.ndarray, int]:
    """Run explicit packets (``birth`` sorted, in cycles) and return ``(delivery times, grants)``;
    undelivered packets have delivery time ``nan``."""
    count = int(birth.shape[0])
    order = np.argsort(birth, kind="stable")
    if not np.array_equal(order, np.arange(count)):
        raise ValueError("births must be sorted")
    b_seg = mesh.pair_seg[src, dst].astype(np.int32)
    b_size = np.full(count, packet_flits * FLIT_BYTES, np.int64)
    deliver = np.full(count, np.nan)
    m0, m1 = measured if measured is not None else (0, count)
    pos = np.array([0, m1 - m0], np.int64)
    net = mesh.net
    # a worm's flits pile up behind its waiting head as in the replay (BookSim's 4-flit rows:
    # the same latencies as the one-flit rule below 80 % of saturation, 0.17 cycles apart at 0.35)
    st = eng.make_state(net, count, 8 * eng.num_edges(net) + 1024, eng.ring_slots(net, FLIT_BYTES),
                        pileup=packet_flits > 1)
    while True:
        status = eng.noc_loop(net, st, birth.astype(np.float64), b_seg, b_size, deliver, pos, m0, m1,
                              float(t_stop))
        if status == 0:
            break
        if status == 2:
            raise RuntimeError("engine event heap overflowed inside one step (a bug)")
        st = eng.grow_heap(st, 2 * eng.heap_capacity(st))
    return deliver, int(st.ctr[eng.C_EVENTS])


#: the most node-cycles of injection :func:`run_noc` draws (two per node-cycle, 8 bytes each:
#: about 1.6 GB at the bound; BookSim's runs are 10**4-10**5 cycles on 64 routers)
MAX_NODE_CYCLES = 100_000_000
#: the longest packet: far beyond any run's reach already (a packet longer than the run is
#: allowed, and simply not delivered), and well inside the engine's 64-bit byte counts
MAX_PACKET_FLITS = 1 << 20


def run_noc(width: int, height: int, traffic: str, rate: float, packet_flits: int, *, cycles: int = 10_000,
            seed: int = 1, router: str = "iq", params: RouterParams | None = None,
            mesh: MeshNet | None = None) -> NocResult:
    """Bernoulli injection of ``rate`` flits/node/cycle for ``cycles`` cycles; the first fifth
    warms up, packets created in the rest are measured until they are delivered (injection goes
    on meanwhile) or for at most ``cycles`` more cycles."""
    if traffic not in TRAFFICS:
        raise UsageError(f"unknown traffic {traffic!r} (use {', '.join(TRAFFICS)})")
    if not 0.0 < rate <= 1.0:
        raise UsageError(f"--rate must be in (0, 1] flits/node/cycle, got {rate}")
    if packet_flits < 1:
        raise UsageError(f"--packet-flits must be at least 1, got {packet_flits}")
    if cycles < 100:
        raise UsageError(f"--cycles must be at least 100, got {cycles}")
    if cycles * width * height > MAX_NODE_CYCLES:
        # the sources draw one number per node and cycle over twice the run: bound the memory
        raise UsageError(f"--cycles x mesh nodes must be at most {MAX_NODE_CYCLES:,}, got "
                         f"{cycles:,} x {width * height}")
    if packet_flits > MAX_PACKET_FLITS:
        raise UsageError(f"--packet-flits must be at most {MAX_PACKET_FLITS}, got {packet_flits}")
    if seed < 0:
        raise UsageError(f"--seed must be non-negative, got {seed}")
    problem = None if params is None else router_params_problem(params)
    if problem is not None:
        raise UsageError(problem)
    started = time.perf_counter()
    mesh = mesh if mesh is not None else build_mesh(width, height, router, params)
    n = width * height
    warm = cycles // 5
    horizon = 2 * cycles
    rng = np.random.default_rng(seed)
    # Bernoulli per node and cycle with probability rate / L (a packet of L flits)
    fire = rng.random((horizon, n)) < rate / packet_flits
    cyc, node = np.nonzero(fire)  # row-major: sorted by cycle, then node
    dst = destinations(width, height, traffic, node, rng)
    birth = cyc.astype(np.float64)
    m0 = int(np.searchsorted(birth, warm, side="left"))
    m1 = int(np.searchsorted(birth, cycles, side="left"))
    deliver, events = simulate_packets(mesh, birth, node, dst, packet_flits, (m0, m1), float(horizon))
    lat = deliver[m0:m1] - birth[m0:m1]
    done = ~np.isnan(lat)
    window = cycles - warm
    in_window = (deliver >= warm) & (deliver < cycles)
    accepted = float(np.count_nonzero(in_window)) * packet_flits / (n * window)
    generated = float(m1 - m0) * packet_flits / (n * window)
    lat_avg = float(lat[done].mean()) if done.any() else float("nan")
    lat_max = float(lat[done].max()) if done.any() else float("nan")
    hops = mesh.pair_hops[node[m0:m1], dst[m0:m1]] + 1  # routers traversed, as BookSim counts
    saturated = bool((~done).any() or lat_avg > SATURATION_LATENCY
                     or _late_latency(birth[m0:m1], lat, node[m0:m1], n, warm, cycles) > SATURATION_LATENCY)
    return NocResult(
        width=width, height=height, traffic=traffic, router=router, packet_flits=packet_flits,
        offered_flit_rate=float(rate), generated_flit_rate=generated, accepted_flit_rate=accepted,
        packet_latency_avg=lat_avg, packet_latency_max=lat_max,
        hops_avg=float(hops.mean()) if hops.size else float("nan"),
        measured_packets=m1 - m0, delivered_packets=int(done.sum()), saturated=saturated,
        cycles=cycles, warmup_cycles=warm, seed=seed, events=events,
        wall_s=time.perf_counter() - started,
    )


def saturation_rate(width: int, height: int, traffic: str, packet_flits: int, *, cycles: int = 20_000,
                    seed: int = 1, router: str = "iq", lo: float = 0.01, hi: float = 1.0,
                    tolerance: float = 0.005, mesh: MeshNet | None = None) -> float:
    """Highest offered load (flits/node/cycle) that :func:`run_noc` finds stable, by bisection
    between ``lo`` (assumed stable) and ``hi`` to within ``tolerance``."""
    mesh = mesh if mesh is not None else build_mesh(width, height, router)
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        res = run_noc(width, height, traffic, mid, packet_flits, cycles=cycles, seed=seed, router=router,
                      mesh=mesh)
        if res.saturated:
            hi = mid
        else:
            lo = mid
    return lo
