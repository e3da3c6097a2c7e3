"""The flit event engine shared by the replay and the synthetic NoC mode.

Resources are directed edges. Every edge has a latency, a bandwidth (bytes/ns) and, at its
downstream end, an input buffer: either a bounded, input-queued router buffer (``nvc`` virtual
channels of ``cap`` bytes each, FIFO per virtual channel, credit flow control) or an unbounded
buffer without head-of-line order (output queues, memory controllers, sinks).

A packet of ``S`` bytes travels a path of edges in virtual cut-through fashion. When it reaches
the head of its virtual channel it requests its next edge; the edge grants requests oldest
first among those that are eligible: the edge is idle, the packet's input port is idle and
bids for this edge (an input-queued port bids for one output at a time, as BookSim's separable
allocator does), and the next buffer has a virtual channel with ``min(S, cap)`` free bytes. On a
grant at time ``t`` the link is busy until the tail has passed, ``t + S/bw`` (later if the tail
arrives late), the head reaches the next buffer at ``t + latency`` and the credits of the buffer
it leaves come back ``credit_delay`` after its tail left. A packet that becomes head of its
virtual channel behind another one first redoes route computation and VC allocation
(``setup``). So an uncontended single flit takes exactly the sum of its path's latencies, a long
transfer streams at its bottleneck bandwidth, and queueing, head-of-line blocking and back
pressure (tree saturation) emerge instead of being assumed.

Events are processed in global ``(time, sequence)`` order, so equal-time events keep their
insertion order and runs are deterministic. The queue is a heap plus one FIFO ring per delay
class (arrivals at ``now + latency`` of a common latency come in time order), which also tells
the loop which rows the next arrivals touch, so it prefetches them. State lives in a few
packed numpy arrays (one row per edge, virtual channel or packet: a hop touches a handful of
cache lines, not dozens) handled by ``numba`` functions; the two drivers (:mod:`nuna.sim.noc`,
:mod:`nuna.sim.replay`) have their event loops at the end of this module, so that numba's cache,
which only tracks the file a function lives in, is invalidated by any change to the engine.

Units: times in ns (float64), sizes in bytes (int64), ``inv_bw`` in ns per byte.
"""

from __future__ import annotations

import mmap
from collections import namedtuple
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

F8 = npt.NDArray[np.float64]
I8 = npt.NDArray[np.int64]
I4 = npt.NDArray[np.int32]
U1 = npt.NDArray[np.uint8]

INF = np.inf
_BIG = 1 << 62  # larger than any packet

_F = TypeVar("_F", bound=Callable[..., Any])

# numba's reference counting would incref/decref every state array at each function boundary:
# measured 14x slower on the NoC benchmark. The kernels never allocate, so they run without the
# runtime (the private but long-standing ``_nrt`` flag). ``error_model="numpy"`` drops the
# zero-divisor check numba's default puts before each division: every divisor here is a
# positive parameter (the histogram bin width is checked in replay._prepare) or guarded
# (t_tail > t_head in _pile_up)
_JIT_OPTIONS: dict[str, Any] = {"cache": True, "_nrt": False, "error_model": "numpy"}


def _hot(fn: _F) -> _F:
    """Compile ``fn`` and inline it into its callers (small helpers on the hot path)."""
    return cast(_F, njit(inline="always", **_JIT_OPTIONS)(fn))


def _jit(fn: _F) -> _F:
    """Compile ``fn`` as its own function (larger helpers: keeps compile time down)."""
    return cast(_F, njit(**_JIT_OPTIONS)(fn))


#: Event kinds (low 3 bits of the heap payload; the id is in the other bits).
EV_ARRIVE = 0  # the head of packet ``id`` reaches the buffer at the end of its current edge
EV_WAKE = 1  # edge ``id`` re-runs its arbitration (became idle, credits or an input freed)
EV_DELIVER = 2  # the tail of packet ``id`` has reached the end of its path
EV_HEAD = 3  # packet ``id`` finished the route/VC set-up after reaching its VC's head
EV_ROOM = 4  # source queue ``id`` dropped below its notification threshold (for the drivers)
EV_RESPONSE_HEAD = 5  # replay: the write response for the head of job slot ``id``'s last store is back;
# an ``id`` past the job slots (``js_node``) is a flow-control credit for step ``id`` - slots
# (``_flow_credit``: the kinds have three bits, and both events are rare)
EV_RESPONSE_TAIL = 6  # replay: the write response for one of job slot ``id``'s stores is back
EV_LAND = 7  # windowed replay: the tail of packet ``id`` lands in a GPU other than its sender's

#: Indices into the ``ctr`` array of scalar counters.
# 0 and 7: unused (the queues' event counts are in State.qn)
C_SEQ = 1  # next sequence number
C_EVENTS = 2  # flit-hop events: grants of physical edges
C_STACK_N = 3  # edges waiting for arbitration at the current time
C_OVERFLOW = 4  # 1 when a fixed-size array ran out of room
C_POPPED = 5  # heap events processed
C_RING = 6  # credit-return slots per virtual channel
C_NDOM = 8  # event-queue domains (1, or one per GPU for windowed scheduling)
C_DOM = 9  # the domain whose events are being processed: pushes go to its queue
C_BLOCK = 10  # edges per domain (edge ``e`` belongs to domain ``e // block``)
C_FOREIGN = 11  # windowed: grants of an edge outside the current domain (must stay 0)
# the event queues' shape, kept here because the hot path would otherwise divide array sizes
# at every push and pop (an integer division costs tens of cycles)
C_QD = 12  # delay-class rings per domain
C_QC = 13  # slots per ring (a power of two)
C_HROWS = 14  # rows per domain's heap
C_PILEUP = 15  # 1: a waiting head packet holds the bytes that have come in behind it (``_pile_up``)
# windowed scheduling: a domain's posts to other domains wait in its outbox until the window's
# end (:func:`replay_loop`); entries in it, its rows, and the count at which the domain stops
# its window early so that one more event's posts still fit
C_OBN = 16
C_OBCAP = 17
C_OBLIM = 18
C_STATUS = 19  # how the domain's last window ended (DONE, NEED_HEAP, OVERFLOW or CUT)
# how the head behind a packet of m lines is charged router head set-ups (``_grant``, one of the
# LINE_SETUP_* rules below; docs/simulator.md §5)
C_LINE_SETUP = 20
# bytes of credit a packet takes on entering a buffer, at most its size (``_need``): the flit
# times the lines a packet holds as it streams through (``make_state``'s ``credit_lines``)
C_ENTRY_CREDIT = 21
NCTR = 24

# Head set-ups behind a packet of m lines in its virtual channel (``C_LINE_SETUP``): the m
# one-line packets of the 256-byte reference would each redo route computation and VC allocation
# (S) at the head of the channel they were given, one after another in it. ONE: the next head
# is ready S after the packet's tail leaves (nuna <= 0.8.0). SERIES: m x S after it, as if the
# m lines had queued in this channel and nothing overlapped their set-ups. OVERLAP (the default
# since 0.9.0): the lines' heads leave no faster than one per (line's input time + S) in each of
# the n channels of the port with room for a flit (this one included), over which the upstream
# router would have dealt them; so the next head is ready S after the later of the tail's
# leaving and the m-th line's earliest leaving. Behind a slow output (an I/O port) the set-ups
# hide behind the transfers, as a flit's do, and the rule is ONE; on a mesh link out of a full
# port it is SERIES
LINE_SETUP_ONE, LINE_SETUP_SERIES, LINE_SETUP_OVERLAP = 0, 1, 2

# State.ef columns (per edge, floats; one 64-byte row): latency, ns per byte, credit delay,
# head set-up (static); link idle from, input port idle from, earliest pending wake, busy time
# (bytes granted = busy time x bandwidth, see ``edge_bytes``)
EF_LAT, EF_INVBW, EF_CDELAY, EF_SETUP, EF_FREE, EF_INFREE, EF_WAKE, EF_BUSY = range(8)
NEF = 8
# State.ei columns (per edge, int32): bytes per virtual channel (-1 unbounded), virtual channels,
# 1 if the downstream buffer is an input-queued FIFO, first row in the VC arrays (-1: none);
# requests waiting for the edge (list via PI_WNEXT); the packet of this input port that bids;
# the port's other ready heads (list via PI_RNEXT); on the arbitration stack; round-robin VC
# pointer; blocked on credits; packets granted; for a source queue, the length below which the
# engine posts an EV_ROOM event when a packet leaves it (0: never); delay class (event queue);
# a free column (the int block stays 64 bytes)
EI_CAP, EI_NVC, EI_FIFO, EI_VBASE, EI_WHEAD, EI_WTAIL, EI_ACTIVE, EI_RHEAD, EI_RTAIL, EI_INSTACK, EI_RR, \
    EI_CWAIT, EI_PKTS, EI_NOTIFY, EI_DCLASS, _EI_FREE = range(16)
NEI = 16
# State.vf columns (per virtual channel of a buffered edge): FIFO of packets, pending credit
# returns, time a new head may bid, packets queued (source queues only), then the returns' times
# and bytes. The credit bytes in use are apart, in State.vu: a grant reads them for every channel
# of a port (``_pick_vc``, ``_channels_with_room``), one cache line for the four channels of a
# port whose rows start on a four-row boundary (all of nuna-4die's, a test checks) instead of a
# line of each channel's row
VF_HEAD, VF_TAIL, VF_CRN, VF_READY, VF_QLEN = range(5)
VF_RING = 5
# State.pi columns (per packet, int32; one 64-byte row): second segment, edge-id offsets and
# sizes of the two legs, current leg, index of the current edge in ``seg_edge`` and the end of
# the current leg's segment there, virtual channel and credit bytes held, list links, head
# arrived. PI_USER0/1 are free for the drivers.
PI_SEG1, PI_BASE0, PI_BASE1, PI_SIZE0, PI_SIZE1, PI_LEG, PI_POS, PI_END, PI_VC, PI_NEED, PI_VNEXT, \
    PI_WNEXT, PI_RNEXT, PI_ARR, PI_USER0, PI_USER1 = range(16)
NPI = 16

Net = namedtuple(
    "Net",
    [
        "ef",  # f8[E, NEF] static columns filled (copied into each State)
        "ei",  # i4[E, NEI] static columns filled
        "seg_ptr",  # i8[nseg+1] CSR of path segments
        "seg_edge",  # i4[...] local edge ids; the actual edge is seg_edge + the packet's base
        "flit",  # f8[1] flit bytes: the cut-through unit
    ],
)

State = namedtuple(
    "State",
    [
        "ef",  # f8[E, NEF]
        "ei",  # i4[E, NEI]
        "stack",  # i4[E] edges to arbitrate at the current time
        "vf",  # f8[VC rows, VF_RING + 2R]
        "vu",  # f8[VC rows] credit bytes in use
        "pi",  # i4[P, NPI]
        "pf",  # f8[P, 4] time the tail reached (or reaches) the packet's current buffer; time it
        # left its source queue (-1 until then); time its head reached (reaches) that buffer;
        # windowed replay, a remote store: its send step, then which side of its landing is done
        "ewait",  # f8[E] time heads waited in a buffer for this edge (granted only in its own domain)
        # one event queue (a heap and one ring per delay class) per domain g:
        "heap",  # f8[G * (N + 3), 2] event times in column 0 (4-ary heap, node i in row g (N + 3) + i + 3)
        "heapk",  # i8[G * (N + 3), 2] the same memory: (sequence << 28 | payload) in column 1
        "fq",  # f8[G * D * C, 2] one FIFO ring of C events per delay class (time, key as in heap)
        "fqk",  # i8[G * D * C, 2] the same memory
        "fqs",  # i8[G * D, 2] first slot and length of each ring
        "fqh",  # f8[G * D] time of each ring's first event (inf when empty)
        "qn",  # i8[G, 2] events in each domain's heap and rings
        "ctr",  # i8[NCTR]
        # windowed scheduling (G > 1): each domain's own counters and arbitration stack
        # (``ctr`` and ``stack`` of its view, :func:`domain_state`; the state's own counters hold
        # the totals when the loop returns), and the outboxes: G rows of C_OBCAP entries
        "dctr",  # i8[G, NCTR]
        "dstack",  # i4[G, edges per domain]
        "ob",  # f8[G * C_OBCAP, 4] posts to other domains: time, then (int) key, domain, class
        "obk",  # i8[G * C_OBCAP, 4] the same memory
    ],
)


def make_net(lat: F8, bandwidth: F8, cap: I8, nvc: I4, cdelay: F8, fifo: U1, setup: F8,
             seg_ptr: I8, seg_edge: I4, flit_bytes: float, notify: I8 | None = None) -> Any:
    """Validate and pack edge and segment arrays into a :data:`Net`."""
    bandwidth = np.asarray(bandwidth, np.float64)
    E = bandwidth.shape[0]
    ef = np.zeros((E, NEF))
    ef[:, EF_LAT] = lat
    ef[:, EF_INVBW] = np.where(np.isinf(bandwidth), 0.0, 1.0 / np.where(bandwidth > 0, bandwidth, 1.0))
    ef[:, EF_CDELAY] = cdelay
    ef[:, EF_SETUP] = setup
    ef[:, EF_WAKE] = INF
    cap = np.asarray(cap, np.int64)
    if cap.size and int(cap.max()) >= 1 << 31:
        raise ValueError("buffer capacity too large")
    fifo = np.asarray(fifo, np.int64)
    nvc = np.maximum(np.asarray(nvc, np.int64), 1)
    buffered = (cap >= 0) | (fifo != 0)
    vrows = np.where(buffered, nvc, 0)
    vbase = np.concatenate([[0], np.cumsum(vrows)[:-1]]) if E else np.zeros(0, np.int64)
    ei = np.zeros((E, NEI), np.int32)
    ei[:, EI_CAP] = cap
    ei[:, EI_NVC] = nvc
    ei[:, EI_FIFO] = fifo
    ei[:, EI_VBASE] = np.where(buffered, vbase, -1)
    ei[:, [EI_WHEAD, EI_WTAIL, EI_ACTIVE, EI_RHEAD, EI_RTAIL]] = -1
    if notify is not None:
        ei[:, EI_NOTIFY] = notify
    ei[:, EI_DCLASS] = _delay_classes(ef[:, EF_LAT])
    return Net(ef, ei, np.ascontiguousarray(seg_ptr, np.int64), np.ascontiguousarray(seg_edge, np.int32),
               np.array([float(flit_bytes)]))


#: at most this many delay classes get a FIFO of their own (the rest use the heap)
_MAX_CLASSES = 16


def _delay_classes(lat: F8) -> npt.NDArray[np.int64]:
    """Delay class of every edge: the index of its latency among the most common ones, -1 for
    the rest. Heads arrive ``now + latency`` after a grant, so the arrivals of one class are
    scheduled in time order and a FIFO holds them sorted (see :func:`ev_push`)."""
    out = np.full(lat.shape[0], -1, np.int64)
    if not lat.size:
        return out
    values, counts = np.unique(lat, return_counts=True)
    top = np.sort(values[np.argsort(-counts, kind="stable")[:_MAX_CLASSES]])
    pos = np.searchsorted(top, lat)
    hit = (pos < top.size) & (top[np.minimum(pos, top.size - 1)] == lat)
    out[hit] = pos[hit]
    return out


def num_edges(net: Any) -> int:
    return int(net.ef.shape[0])


def ring_slots(net: Any, min_packet_bytes: int, limit: int = 8) -> int:
    """Pending credit returns one virtual channel keeps apart: the most packets it can hold,
    at most ``limit`` (beyond that returns are merged, see ``_return_credit``)."""
    cap = net.ei[:, EI_CAP]
    bounded = cap[cap >= 0]
    if bounded.size == 0:
        return 1
    most = -(-int(bounded.max()) // max(1, min(min_packet_bytes, int(bounded.max()))))
    return int(min(max(1, most), limit))


def _aligned(n: int) -> F8:
    """``n`` zeroed float64 starting on a 64-byte boundary (a cache line)."""
    raw = np.zeros(n + 8)
    off = ((-raw.ctypes.data) % 64) // 8
    return raw[off:off + n]


def _small_pages(n: int) -> F8:
    """``n`` zeroed float64 on 4-KiB pages (page-aligned, so on a cache line), not the
    transparent huge pages numpy asks the kernel for on arrays of 4 MB and more.

    For the event rings: a ring is written front to back as the replay goes, so its pages are
    first touched one by one, and with huge pages a first touch may zero (and first compact)
    2 MB. Windowed, a 64-GPU pod has 576 rings of up to 4 MB: the first 1 MiB allgather replayed
    in a process spent 0.46-1.30 s in the kernel with huge pages, 0.11-0.45 s with small ones,
    where only the slots used are zeroed (docs/simulator.md §6). The windowed replay's heaps
    likewise (:func:`_new_heap`). The rows read at random (edges, packets, the one-queue heap)
    keep huge pages, which spare TLB misses: that heap on small pages made the one-queue replay
    of the same pod slower in both of two rounds. Falls back to :func:`_aligned` where the
    kernel cannot be told (not Linux)."""
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if advice is None:
        return _aligned(n)
    buf = mmap.mmap(-1, 8 * max(1, n), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf.madvise(advice)
    return np.frombuffer(buf, dtype=np.float64, count=n)


def _new_heap(events: int, domains: int = 1) -> tuple[F8, I8]:
    """``domains`` empty event heaps of ``events`` slots each: a float64 view (times) and an
    int64 view (keys) of one buffer of 16-byte rows. Node ``i`` of heap ``g`` is row
    ``g * (events + 3) + i + 3``, so the four children of a node (rows ``4i + 4 .. 4i + 7``)
    fill exactly one cache line: a sift-down level costs one miss (``events + 3`` is rounded up
    to a multiple of four rows, 64 bytes, to keep every heap so aligned).

    Several heaps (windowed scheduling, one per GPU) are on 4-KiB pages: each is sized for the
    most events its domain could hold but holds a few hundred on average (848 at 64 GPUs,
    10 MiB), near its root, and on transparent huge pages the first touch of each cost the
    kernel a whole 2-MB page (a 64-GPU pod's heaps: 101 MiB at 1 MiB; docs/simulator.md §6).
    One heap keeps huge pages: it is read all over, and on small pages the one-queue replay ran
    slower."""
    rows = events + 3 + (-(events + 3)) % 4
    alloc = _small_pages if domains > 1 else _aligned
    buf = alloc(2 * rows * domains).reshape(rows * domains, 2)
    return buf, buf.view(np.int64)


#: payload bits of a heap key; the sequence number is above them
_PAY_BITS = 28
_PAY_MASK = (1 << _PAY_BITS) - 1
#: ids an event's payload holds (above its three kind bits)
MAX_EVENT_ID = 1 << (_PAY_BITS - 3)
#: windowed scheduling: the sequence of an event posted by another domain has this bit set
#: (after the domain's own events of the same time), then the poster (8 bits, so at most 256
#: domains) and the low bits of the poster's own sequence
_FOREIGN = 1 << 34
_SRC_SEQ_BITS = 26
MAX_DOMAINS = 1 << (34 - _SRC_SEQ_BITS)


def make_state(net: Any, packets: int, heap: int, ring: int, domains: int = 1, block: int = 0,
               in_flight: int = 0, pileup: bool = False, ring_events: int = 0,
               line_setup: int = LINE_SETUP_ONE, credit_lines: int = 1) -> Any:
    """Fresh engine state for ``packets`` packet slots and a heap of ``heap`` events; with
    ``domains`` > 1, one event queue (a heap of ``heap`` events and its rings) per domain of
    ``block`` edges (see :func:`replay_loop`). ``in_flight``: about the most packets in flight
    at once, which sizes the outboxes (default ``packets``). ``ring_events``: about the most
    arrivals of one delay class a domain holds at once, which sizes its rings (default
    ``in_flight`` over the domains; a fuller ring leaves its events to the heap, in the same
    order). ``pileup``: packets of more than a flit hold, while their head waits in a buffer,
    the bytes that have come in behind it (:func:`_pile_up`); without it a packet holds at most
    ``credit_lines`` flits of credit (:func:`_need`). ``line_setup``: how many head set-ups the
    next head of a virtual channel bids after a packet of several lines (flits, on its larger leg:
    a load's response, not its request), one of the ``LINE_SETUP_*`` rules (:func:`_grant`).
    ``credit_lines``: the flits of credit a packet of several takes on entering a buffer."""
    E = num_edges(net)
    P = max(1, packets)
    if max(P, E) >= MAX_EVENT_ID:
        raise ValueError(f"too many packets or edges for the event queue ({max(P, E)})")
    buffered = net.ei[:, EI_VBASE] >= 0
    nrows = int(net.ei[buffered, EI_NVC].sum()) if E else 0
    width = VF_RING + 2 * ring
    # rows of whole cache lines; numpy starts a large array 16 bytes into a line (malloc's
    # header), so each row spans a third line, as each 64-byte packet row below spans two:
    # aligning both measured no gain (docs/simulator.md §6, "rows on line boundaries")
    vf = np.zeros((max(1, nrows), width + (-width) % 8))
    vf[:, [VF_HEAD, VF_TAIL]] = -1.0
    # no -1 fill of the list links: every packet is set up by init_packet and enter, and every
    # link is written as the packet joins a list (reused rows come back with stale links too).
    # Untouched, the rows of packet slots never used stay unmapped: at 64 GPUs, 1 GiB, 3.1 M
    # slots of which few are ever in use, the fill made 189 MiB resident (docs/simulator.md §6)
    pi = np.zeros((P, NPI), np.int32)
    ctr = np.zeros(NCTR, np.int64)
    ctr[C_RING] = ring
    ctr[C_PILEUP] = int(pileup)
    if line_setup not in (LINE_SETUP_ONE, LINE_SETUP_SERIES, LINE_SETUP_OVERLAP):
        raise ValueError(f"unknown head set-up rule {line_setup}")
    ctr[C_LINE_SETUP] = line_setup
    if credit_lines < 1:
        raise ValueError(f"a packet takes at least a flit of credit, got {credit_lines} lines")
    ctr[C_ENTRY_CREDIT] = credit_lines * int(net.flit[0])
    G = max(1, domains)
    ctr[C_NDOM] = G
    ctr[C_BLOCK] = block if G > 1 else max(1, E)
    # an edge's float and int columns share one 128-byte block (two adjacent cache lines)
    rows = _aligned(E * (NEF + NEI // 2)).reshape(E, NEF + NEI // 2)
    ef = rows[:, :NEF]
    ef[:] = net.ef
    ei = rows[:, NEF:].view(np.int32)
    ei[:] = net.ei
    h, hk = _new_heap(max(16, heap), G)
    ctr[C_HROWS] = h.shape[0] // G
    # rings: a class holds at most one arrival per packet in flight; beyond 2**18 events the heap
    # takes them (a domain's: about its share; the heap takes what does not fit). A ring's head
    # moves round all of its slots, so every slot becomes resident: with 64 domains, rings sized
    # from the packet slots instead of the packets in flight took 2.3 GB (docs/simulator.md §6).
    D = max(1, int(net.ei[:, EI_DCLASS].max()) + 1 if E else 1)
    C = 1 << min(18, max(4, int(ring_events or (in_flight or P) // G).bit_length()))
    fq = _small_pages(2 * G * D * C).reshape(G * D * C, 2)
    ctr[C_QD] = D
    ctr[C_QC] = C
    # 32-byte packet rows: a row never straddles two cache lines
    # windowed: a domain's outbox holds its posts of one window (cut short when it fills up:
    # one event's posts, at most one per edge it grants, always fit above C_OBLIM)
    B = int(ctr[C_BLOCK])
    obcap = B + 64 + max(4096, (in_flight or P) // G) if G > 1 else 1
    ctr[C_OBCAP] = obcap
    ctr[C_OBLIM] = obcap - B - 64 if G > 1 else _BIG
    dctr = np.tile(ctr, (G, 1))
    dctr[:, C_DOM] = np.arange(G)
    if G > MAX_DOMAINS:
        raise ValueError(f"too many domains for the event keys ({G} > {MAX_DOMAINS})")
    ob = np.zeros((G * obcap, 4)) if G > 1 else np.zeros((1, 4))
    return State(ef, ei, np.zeros(max(1, E), np.int32), vf, _aligned(max(1, nrows)), pi,
                 _aligned(4 * P).reshape(P, 4), np.zeros(max(1, E)), h, hk, fq, fq.view(np.int64),
                 np.zeros((G * D, 2), np.int64), np.full(G * D, INF), np.zeros((G, 2), np.int64), ctr,
                 dctr, np.zeros((G, B if G > 1 else 1), np.int32), ob, ob.view(np.int64))


def edge_bytes(st: Any) -> npt.NDArray[np.int64]:
    """Bytes granted on every edge (busy time x bandwidth; 0 for unlimited edges)."""
    inv = st.ef[:, EF_INVBW]
    out = np.zeros(inv.shape[0], np.int64)
    lim = inv > 0
    out[lim] = np.rint(st.ef[lim, EF_BUSY] / inv[lim]).astype(np.int64)
    return out


def grow_heap(st: Any, events: int) -> Any:
    """A copy of ``st`` whose heaps hold ``events`` events each."""
    old = heap_capacity(st)
    if events <= old:
        return st
    G = st.qn.shape[0]
    h, hk = _new_heap(events, G)
    rows_old, rows_new = st.heap.shape[0] // G, h.shape[0] // G
    for g in range(G):
        h[g * rows_new:g * rows_new + rows_old] = st.heap[g * rows_old:(g + 1) * rows_old]
    ctr = st.ctr.copy()
    ctr[C_HROWS] = rows_new
    dctr = st.dctr.copy()
    dctr[:, C_HROWS] = rows_new
    return st._replace(heap=h, heapk=hk, ctr=ctr, dctr=dctr)


@_hot
def heap_capacity(st: Any) -> int:
    """Events each heap of ``st`` can hold (its first three rows pad the root's children onto
    one cache line, see :func:`_new_heap`)."""
    return st.ctr[C_HROWS] - 3


@_hot
def heap_root(st: Any, g: int) -> int:
    """Row of domain ``g``'s heap root (node ``i`` is ``i`` rows below it, see :func:`_new_heap`)."""
    return g * st.ctr[C_HROWS] + 3


# --- event heap --------------------------------------------------------------------------

@_hot
def heap_push_to(st: Any, g: int, t: float, pay: int) -> None:
    """Schedule payload ``pay`` at time ``t`` in domain ``g``'s heap; sets the overflow counter
    when it is full. Keys are ``(time, sequence)``: equal times pop in insertion order."""
    ctr = st.ctr
    key = (ctr[C_SEQ] << _PAY_BITS) | pay
    ctr[C_SEQ] += 1
    heap_push_key(st, g, t, key)


@_hot
def heap_push_key(st: Any, g: int, t: float, key: int) -> None:
    """Put event ``key`` (sequence and payload) at ``t`` into domain ``g``'s heap."""
    h = st.heap
    hk = st.heapk
    n = st.qn[g, 0]
    if n >= heap_capacity(st):
        st.ctr[C_OVERFLOW] = 1
        return
    b = heap_root(st, g)
    i = n
    while i > 0:
        parent = (i - 1) >> 2
        pt = h[b + parent, 0]
        # a domain's own keys grow, so an equal time stays below its parent; only a key posted
        # by another domain (windowed) may need the comparison
        if pt < t or (pt == t and hk[b + parent, 1] < key):
            break
        h[b + i, 0] = pt
        hk[b + i, 1] = hk[b + parent, 1]
        i = parent
    h[b + i, 0] = t
    hk[b + i, 1] = key
    st.qn[g, 0] = n + 1


@_hot
def heap_push(st: Any, t: float, pay: int) -> None:
    """Schedule payload ``pay`` at time ``t`` in the current domain's heap."""
    heap_push_to(st, st.ctr[C_DOM], t, pay)


@_hot
def heap_pop(st: Any) -> tuple[float, int]:
    """Remove and return ``(time, payload)`` of the current domain's earliest heap event (the
    heap must not be empty)."""
    h = st.heap
    hk = st.heapk
    g = st.ctr[C_DOM]
    b = heap_root(st, g)
    n = st.qn[g, 0] - 1
    t0 = h[b, 0]
    p0 = hk[b, 1] & _PAY_MASK
    st.qn[g, 0] = n
    if n > 0:
        t = h[b + n, 0]
        s = hk[b + n, 1]
        i = 0
        while True:
            c = 4 * i + 1
            if c >= n:
                break
            end = c + 4 if c + 4 <= n else n
            best = c
            bt = h[b + c, 0]
            bs = hk[b + c, 1]
            for k in range(c + 1, end):
                kt = h[b + k, 0]
                if kt < bt or (kt == bt and hk[b + k, 1] < bs):
                    best = k
                    bt = kt
                    bs = hk[b + k, 1]
            if t < bt or (t == bt and s < bs):
                break
            h[b + i, 0] = bt
            hk[b + i, 1] = bs
            i = best
        h[b + i, 0] = t
        hk[b + i, 1] = s
    return t0, p0


@_hot
def heap_top_time(st: Any) -> float:
    """Time of the current domain's earliest heap event (inf when its heap is empty)."""
    g = st.ctr[C_DOM]
    if st.qn[g, 0] == 0:
        return INF
    return st.heap[heap_root(st, g), 0]


# --- the event queue: the heap plus one FIFO per delay class ------------------------------
#
# Most events are head arrivals at ``now + latency`` of the granted edge, and a topology has few
# distinct latencies. Arrivals of one latency are pushed in time order, so a FIFO ring per
# latency keeps them sorted at O(1) cost and with sequential memory access; the heap keeps the
# rest. A pop takes the smallest ``(time, sequence)`` over the heap and the ring heads: the
# order is exactly that of a single heap, so results are unchanged. Knowing the next arrivals of
# each class also lets the loop prefetch the rows they will touch.

def _prefetch_codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
    """The ``llvm.prefetch`` call of :func:`_prefetch_typer` and :func:`_prefetch_at_typer`."""
    aryty = signature.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    idx = [context.cast(builder, a, t, types.intp) for a, t in zip(args[1:], signature.args[1:], strict=True)]
    inds = [*idx, context.get_constant(types.intp, 0)][:aryty.ndim]
    ptr = cgutils.get_item_pointer2(context, builder, data=ary.data,
                                    shape=cgutils.unpack_tuple(builder, ary.shape),
                                    strides=cgutils.unpack_tuple(builder, ary.strides),
                                    layout=aryty.layout, inds=inds, wraparound=False,
                                    boundscheck=False)
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
    builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
    return context.get_dummy_value()


def _prefetch_typer(typingctx: Any, arr: Any, row: Any) -> Any:
    """``_prefetch(arr, row)``: hint the CPU to fetch the cache line of ``arr[row, 0]`` (of
    ``arr[row]`` for a 1-d array; no effect on results; a hint never faults)."""
    if not (isinstance(arr, types.Array) and arr.ndim in (1, 2) and isinstance(row, types.Integer)):
        return None
    return types.void(arr, row), _prefetch_codegen


def _prefetch_at_typer(typingctx: Any, arr: Any, row: Any, col: Any) -> Any:
    """``_prefetch_at(arr, row, col)``: the cache line of ``arr[row, col]`` (a row's second line)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2 and isinstance(row, types.Integer)
            and isinstance(col, types.Integer)):
        return None
    return types.void(arr, row, col), _prefetch_codegen


_prefetch_at: Any = intrinsic(_prefetch_at_typer)
_prefetch: Any = intrinsic(_prefetch_typer)

#: how many events ahead in a ring the loop prefetches packet rows, then (once those are in
#: cache) the path-table entries that name their edges, then edge rows, then virtual-channel
#: rows: each stage needs the rows of the one before
_PF_AHEAD = 8
_PF_PATHS = 5
_PF_EDGES = 3
_PF_VCS = 1


@_hot
def ev_push_to(st: Any, g: int, cls: int, t: float, pay: int) -> None:
    """Schedule payload ``pay`` at ``t`` in domain ``g``: in delay class ``cls``'s ring when it
    keeps the ring sorted and fits, else in the heap."""
    ctr = st.ctr
    key = (ctr[C_SEQ] << _PAY_BITS) | pay
    ctr[C_SEQ] += 1
    ev_push_key(st, g, cls, t, key)


@_hot
def ev_push_key(st: Any, g: int, cls: int, t: float, key: int) -> None:
    """Put event ``key`` (sequence and payload) at ``t`` into domain ``g``'s queue: the ring of
    delay class ``cls`` if it stays sorted by ``(time, key)`` and has room, else the heap."""
    if cls >= 0:
        fqs = st.fqs
        C = st.ctr[C_QC]
        q = g * st.ctr[C_QD] + cls  # the domain's ring of this class
        n = fqs[q, 1]
        if n < C:
            last = q * C + ((fqs[q, 0] + n - 1) & (C - 1))
            if n == 0 or st.fq[last, 0] < t or (st.fq[last, 0] == t and st.fqk[last, 1] < key):
                r = q * C + ((fqs[q, 0] + n) & (C - 1))
                st.fq[r, 0] = t
                st.fqk[r, 1] = key
                fqs[q, 1] = n + 1
                st.qn[g, 1] += 1
                if n == 0:
                    st.fqh[q] = t
                return
    heap_push_key(st, g, t, key)


@_hot
def ev_push(st: Any, cls: int, t: float, pay: int) -> None:
    """Schedule payload ``pay`` at ``t`` (delay class ``cls``) in the current domain."""
    ev_push_to(st, st.ctr[C_DOM], cls, t, pay)


@_hot
def ev_count(st: Any) -> int:
    """Events in every domain's queue."""
    n = 0
    for g in range(st.qn.shape[0]):
        n += st.qn[g, 0] + st.qn[g, 1]
    return n


@_hot
def ev_top_time(st: Any) -> float:
    """Time of the current domain's earliest event (inf when it has none)."""
    t = heap_top_time(st)
    fqh = st.fqh
    D = st.ctr[C_QD]
    q0 = st.ctr[C_DOM] * D
    for c in range(q0, q0 + D):
        if fqh[c] < t:
            t = fqh[c]
    return t


@_hot
def _arrival(key: int) -> int:
    """The packet of a ring entry's key if the event is an arrival (the kind the prefetch
    stages look ahead for), else -1."""
    pay = key & _PAY_MASK
    return pay >> 3 if pay & 7 == EV_ARRIVE else -1


@_hot
def _prefetch_packet(net: Any, st: Any, key: int) -> None:
    """Prefetch the packet row of an upcoming arrival."""
    p = _arrival(key)
    if p >= 0:
        _prefetch(st.pi, p)
        _prefetch(st.pf, p)


@_hot
def _prefetch_path(net: Any, st: Any, key: int) -> None:
    """Prefetch the path-table entry (``seg_edge``) naming the edge an upcoming arrival lands
    on, usually on the cache line of its next one (its packet row was prefetched earlier): the
    edge-row stage waits on it otherwise."""
    p = _arrival(key)
    if p >= 0:
        _prefetch(net.seg_edge, st.pi[p, PI_POS])


@_hot
def _prefetch_edges(net: Any, st: Any, key: int) -> None:
    """Prefetch the rows of the edge an upcoming arrival lands on and of the edge it asks for
    next (its packet row was prefetched earlier)."""
    p = _arrival(key)
    if p >= 0:
        e = cur_edge(net, st, p)
        _prefetch(st.ei, e)
        _prefetch(st.ef, e)
        leg, pos, _ = next_pos(net, st, p)
        if leg >= 0:
            e2 = edge_of(net, st, p, leg, pos)
            _prefetch(st.ei, e2)
            _prefetch(st.ef, e2)


@_hot
def _prefetch_vcs(net: Any, st: Any, key: int) -> None:
    """Prefetch the virtual-channel rows an upcoming arrival touches (its edges' rows were
    prefetched earlier): its own in the buffer it lands in and the one the round-robin pointer
    of its next edge offers, and that edge's credit bytes in use (``State.vu``: one line for a
    port's channels), which ``_pick_vc`` reads first."""
    p = _arrival(key)
    if p >= 0:
        k = st.ei[cur_edge(net, st, p), EI_VBASE]
        if k >= 0:
            _prefetch(st.vf, k + st.pi[p, PI_VC])
            # the row's second line: most credit returns into its ring read or write it
            _prefetch_at(st.vf, k + st.pi[p, PI_VC], VF_RING + 3)
        leg, pos, _ = next_pos(net, st, p)
        if leg >= 0:
            e2 = edge_of(net, st, p, leg, pos)
            k2 = st.ei[e2, EI_VBASE]
            if k2 >= 0:
                _prefetch(st.vf, k2 + st.ei[e2, EI_RR])
                _prefetch(st.vu, k2)


@_hot
def _prefetch_heap_top(st: Any) -> None:
    """Prefetch the row the current domain's next heap event starts from (an edge's for a
    wake-up, a packet's for an arrival, a set-up end or a delivery): unlike a ring's arrivals,
    heap events are known only one ahead."""
    g = st.ctr[C_DOM]
    if st.qn[g, 0] > 0:
        pay = st.heapk[heap_root(st, g), 1] & _PAY_MASK
        kind = pay & 7
        x = pay >> 3
        if kind == EV_WAKE:
            _prefetch(st.ef, x)
            _prefetch(st.ei, x)
        elif kind in (EV_ARRIVE, EV_HEAD, EV_DELIVER):  # packet events
            _prefetch(st.pi, x)
            _prefetch(st.pf, x)


@_hot
def ev_pop(net: Any, st: Any) -> tuple[float, int]:
    """Remove and return ``(time, payload)`` of the current domain's earliest event (its queue
    must not be empty)."""
    return ev_pop_before(net, st, INF)


@_hot
def ev_pop_before(net: Any, st: Any, before: float) -> tuple[float, int]:
    """:func:`ev_pop` if the current domain's earliest event is earlier than ``before``, else
    ``(its time, -1)`` and nothing is removed."""
    fqh = st.fqh
    g = st.ctr[C_DOM]
    D = st.ctr[C_QD]
    best = -1
    bt = heap_top_time(st)
    for c in range(g * D, g * D + D):
        t = fqh[c]
        if t < bt:
            best = c
            bt = t
        elif t == bt and t < INF:
            C = st.ctr[C_QC]
            key = st.fqk[c * C + st.fqs[c, 0], 1]
            other = st.heapk[heap_root(st, g), 1] if best < 0 else st.fqk[best * C + st.fqs[best, 0], 1]
            if key < other:
                best = c
    if bt >= before:
        return bt, -1
    if best < 0:
        t, pay = heap_pop(st)
        _prefetch_heap_top(st)
        return t, pay
    fqs = st.fqs
    C = st.ctr[C_QC]
    h = fqs[best, 0]
    key = st.fqk[best * C + h, 1]
    n = fqs[best, 1] - 1
    h = (h + 1) & (C - 1)
    fqs[best, 0] = h
    fqs[best, 1] = n
    st.qn[g, 1] -= 1
    if n > 0:
        fqh[best] = st.fq[best * C + h, 0]
        if n > _PF_AHEAD:
            _prefetch_packet(net, st, st.fqk[best * C + ((h + _PF_AHEAD) & (C - 1)), 1])
        if n > _PF_PATHS:
            _prefetch_path(net, st, st.fqk[best * C + ((h + _PF_PATHS) & (C - 1)), 1])
        if n > _PF_EDGES:
            _prefetch_edges(net, st, st.fqk[best * C + ((h + _PF_EDGES) & (C - 1)), 1])
        if n > _PF_VCS:
            _prefetch_vcs(net, st, st.fqk[best * C + ((h + _PF_VCS) & (C - 1)), 1])
    else:
        fqh[best] = INF
    return bt, key & _PAY_MASK




# --- paths -------------------------------------------------------------------------------

@_hot
def cur_edge(net: Any, st: Any, p: int) -> int:
    pi = st.pi
    return net.seg_edge[pi[p, PI_POS]] + pi[p, PI_BASE0 + pi[p, PI_LEG]]


@_hot
def next_pos(net: Any, st: Any, p: int) -> tuple[int, int, int]:
    """``(leg, pos, end)`` of the packet's next edge (``pos`` indexes ``seg_edge``), or
    ``(-1, -1, -1)`` at the end of its path."""
    pi = st.pi
    pos = pi[p, PI_POS] + 1
    if pos < pi[p, PI_END]:
        return pi[p, PI_LEG], pos, pi[p, PI_END]
    if pi[p, PI_LEG] == 0:
        seg = pi[p, PI_SEG1]
        if seg >= 0 and net.seg_ptr[seg + 1] > net.seg_ptr[seg]:
            return 1, net.seg_ptr[seg], net.seg_ptr[seg + 1]
    return -1, -1, -1


@_hot
def edge_of(net: Any, st: Any, p: int, leg: int, pos: int) -> int:
    return net.seg_edge[pos] + st.pi[p, PI_BASE0 + leg]


@_hot
def init_packet(net: Any, st: Any, p: int, seg0: int, base0: int, size0: int, seg1: int, base1: int,
                size1: int) -> None:
    """Set up packet slot ``p`` to travel segment ``seg0`` (then ``seg1`` if >= 0)."""
    r = st.pi
    r[p, PI_POS] = net.seg_ptr[seg0]
    r[p, PI_END] = net.seg_ptr[seg0 + 1]
    r[p, PI_LEG] = 0
    r[p, PI_BASE0] = base0
    r[p, PI_SIZE0] = size0
    r[p, PI_SEG1] = seg1
    r[p, PI_BASE1] = base1
    r[p, PI_SIZE1] = size1


# --- wake-ups and credits ----------------------------------------------------------------

@_hot
def schedule_wake(st: Any, e: int, t: float) -> None:
    if t < st.ef[e, EF_WAKE]:
        st.ef[e, EF_WAKE] = t
        heap_push(st, t, EV_WAKE | (e << 3))


@_hot
def push_arbitration(st: Any, e: int) -> None:
    if st.ei[e, EI_INSTACK] == 0:
        st.ei[e, EI_INSTACK] = 1
        n = st.ctr[C_STACK_N]
        st.stack[n] = e
        st.ctr[C_STACK_N] = n + 1


@_hot
def _apply_vc_credits(st: Any, k: int, now: float) -> float:
    """Apply the due credit returns of VC row ``k``; return its earliest pending one."""
    vf = st.vf
    R = st.ctr[C_RING]
    earliest = INF
    n = int(vf[k, VF_CRN])
    i = 0
    while i < n:
        t = vf[k, VF_RING + i]
        if t <= now:
            st.vu[k] -= vf[k, VF_RING + R + i]
            n -= 1
            vf[k, VF_RING + i] = vf[k, VF_RING + n]
            vf[k, VF_RING + R + i] = vf[k, VF_RING + R + n]
        else:
            if t < earliest:
                earliest = t
            i += 1
    vf[k, VF_CRN] = n
    return earliest


@_jit
def _merge_credit(vf: F8, k: int, R: int, nbytes: int, t: float) -> None:
    """A credit return for VC row ``k`` whose ring of ``R`` pending returns is full: merge it
    into the latest-due entry (its credits come back a little late: conservative, and exact
    whenever the ring holds a virtual channel's packets)."""
    j = 0
    for i in range(1, R):
        if vf[k, VF_RING + i] > vf[k, VF_RING + j]:
            j = i
    if t > vf[k, VF_RING + j]:
        vf[k, VF_RING + j] = t
    vf[k, VF_RING + R + j] += nbytes


@_jit
def _credit_wake(st: Any, e: int, t: float) -> None:
    """Edge ``e`` waits for credits of its buffer: it re-arbitrates when this return is due."""
    st.ei[e, EI_CWAIT] = 0
    schedule_wake(st, e, t)


@_hot
def _return_credit(st: Any, e: int, v: int, nbytes: int, t: float) -> None:
    # inlined at its two call sites (a grant, a delivery): a call that passes the whole state
    # costs more than the ring insert itself; the rare paths take only what they need
    vf = st.vf
    R = st.ctr[C_RING]
    k = st.ei[e, EI_VBASE] + v
    n = int(vf[k, VF_CRN])
    if n >= R:
        _merge_credit(vf, k, R, nbytes, t)
    else:
        vf[k, VF_RING + n] = t
        vf[k, VF_RING + R + n] = nbytes
        vf[k, VF_CRN] = n + 1
    if st.ei[e, EI_CWAIT]:
        _credit_wake(st, e, t)


# --- requests, arbitration, grants -------------------------------------------------------

@_jit
def request(net: Any, st: Any, p: int) -> None:
    """Packet ``p`` (head of its virtual channel) asks for its next edge.

    An input-queued port has one active request at a time: BookSim's separable input-first
    allocator moves its round-robin pointers only on success, so a port keeps asking for the
    same output until it wins it and its other virtual channels wait (oldest first)."""
    ein = cur_edge(net, st, p)
    ei = st.ei
    pi = st.pi
    if ei[ein, EI_FIFO]:
        if ei[ein, EI_ACTIVE] >= 0:
            pi[p, PI_RNEXT] = -1
            if ei[ein, EI_RTAIL] < 0:
                ei[ein, EI_RHEAD] = p
            else:
                pi[ei[ein, EI_RTAIL], PI_RNEXT] = p
            ei[ein, EI_RTAIL] = p
            return
        ei[ein, EI_ACTIVE] = p
    leg, pos, _ = next_pos(net, st, p)
    e = edge_of(net, st, p, leg, pos)
    pi[p, PI_WNEXT] = -1
    if ei[e, EI_WTAIL] < 0:
        ei[e, EI_WHEAD] = p
    else:
        pi[ei[e, EI_WTAIL], PI_WNEXT] = p
    ei[e, EI_WTAIL] = p
    push_arbitration(st, e)


@_hot
def _as_int64(x: Any) -> Any:
    """``x`` as an int64. Packet and edge rows are int32, and an int32 id or size passed on
    would compile a second copy of each function it reaches (the event loop passes int64 ids):
    numba's cache index had two entries for eight of them."""
    return np.int64(x)


@_hot
def _head_ready(net: Any, st: Any, p: int, k: int, now: float) -> None:
    """``p`` is now the head of virtual channel row ``k``: it bids once its set-up is done."""
    if st.vf[k, VF_READY] > now:
        heap_push(st, st.vf[k, VF_READY], EV_HEAD | (p << 3))
    else:
        request(net, st, p)


@_hot
def _release_port(net: Any, st: Any, ein: int) -> None:
    """The active request of input port ``ein`` was granted: the oldest waiting head takes over."""
    ei = st.ei
    ei[ein, EI_ACTIVE] = -1
    q = _as_int64(ei[ein, EI_RHEAD])
    if q >= 0:
        ei[ein, EI_RHEAD] = st.pi[q, PI_RNEXT]
        if ei[ein, EI_RHEAD] < 0:
            ei[ein, EI_RTAIL] = -1
        st.pi[q, PI_RNEXT] = -1
        request(net, st, q)


@_hot
def _channels_with_room(st: Any, ein: int, k: int, flit: float, now: float) -> int:
    """Channels of ``ein``'s input port with room for a flit, channel row ``k`` (the one a packet
    leaves) counted whatever its room: those over which the upstream router would deal a stream of
    one-line packets (``LINE_SETUP_OVERLAP``). Room counts the credit returns due by ``now``,
    read and not applied: applying them here would change which returns a full ring later
    merges (:func:`_merge_credit`), and so the replay of a zero set-up."""
    ei = st.ei
    vf = st.vf
    cap = ei[ein, EI_CAP]
    base = ei[ein, EI_VBASE]
    R = st.ctr[C_RING]
    n = 1
    for u in range(ei[ein, EI_NVC]):
        row = base + u
        if row == k:
            continue
        used = st.vu[row]
        if cap - used < flit:
            for i in range(int(vf[row, VF_CRN])):
                if vf[row, VF_RING + i] <= now:
                    used -= vf[row, VF_RING + R + i]
        if cap - used >= flit:
            n += 1
    return n


@_hot
def _grant(net: Any, st: Any, p: int, ein: int, e: int, v: int, leg: int, pos: int, end: int,
           now: float) -> None:
    pi = st.pi
    ef = st.ef
    ei = st.ei
    vf = st.vf
    size = pi[p, PI_SIZE0 + leg]
    flit = net.flit[0]
    f = size if size < flit else flit
    inv = ef[e, EF_INVBW]
    t_lf = now + (size - f) * inv  # the last flit starts ...
    if st.pf[p, 0] > t_lf:
        t_lf = st.pf[p, 0]  # ... but not before it has arrived
    t_tail_out = t_lf + f * inv
    if st.pf[p, 1] < 0.0:
        st.pf[p, 1] = now
    lat = ef[e, EF_LAT]
    ef[e, EF_FREE] = t_tail_out
    ef[e, EF_BUSY] += size * inv
    ei[e, EI_PKTS] += 1
    if lat > 0.0 or inv > 0.0:  # virtual source queues are not hops
        st.ctr[C_EVENTS] += 1
    # leave the current buffer
    if ei[ein, EI_FIFO]:
        inv_in = ef[ein, EF_INVBW]
        # the crossbar is allocated flit by flit (BookSim does not hold the switch for a whole
        # packet): the packet uses its input port for its bytes at the input's rate, and the
        # port's other virtual channels interleave while it drains into a slower output
        ef[ein, EF_INFREE] = now + size * inv_in
        k = ei[ein, EI_VBASE] + pi[p, PI_VC]
        nxt = _as_int64(pi[p, PI_VNEXT])
        vf[k, VF_HEAD] = nxt
        setup = ef[ein, EF_SETUP]
        done = t_lf + f * inv_in  # the tail has left the buffer
        rule = st.ctr[C_LINE_SETUP]
        if rule != LINE_SETUP_ONE and setup > 0.0:
            # m lines: a load counts the bytes of its response, as its request of m x 64 bytes
            # stands for m requests
            nbytes = pi[p, PI_SIZE0] if pi[p, PI_SIZE0] > pi[p, PI_SIZE1] else pi[p, PI_SIZE1]
            # in integers: numba does a float floor division as Python does, through an fmod, and
            # this runs on every grant of a packet (docs/simulator.md §5, Cost)
            fl = int(flit)
            m = float((nbytes + fl - 1) // fl)
            if m > 1.0:
                if rule == LINE_SETUP_SERIES:
                    setup *= m
                else:
                    # the m lines' heads leave no faster than one per input time and set-up in
                    # each of the channels they would have been dealt over
                    ell = size / m * inv_in
                    n = _channels_with_room(st, ein, k, flit, now)
                    t_m = now + (m - 1.0) * (ell + setup) / n + ell
                    if t_m > done:
                        done = t_m
        vf[k, VF_READY] = done + setup
        if nxt < 0:
            vf[k, VF_TAIL] = -1.0
        if ei[ein, EI_NOTIFY] > 0:
            vf[k, VF_QLEN] -= 1.0
            if vf[k, VF_QLEN] < ei[ein, EI_NOTIFY]:
                heap_push(st, now, EV_ROOM | (ein << 3))
        _release_port(net, st, ein)
        if nxt >= 0 and pi[nxt, PI_ARR]:
            _head_ready(net, st, nxt, k, now)
    if ei[ein, EI_CAP] >= 0:
        _return_credit(st, ein, pi[p, PI_VC], pi[p, PI_NEED], t_tail_out + ef[ein, EF_CDELAY])
    # enter the next buffer
    need = 0
    cap = ei[e, EI_CAP]
    kk = ei[e, EI_VBASE] + v
    if cap >= 0:
        need = _need(size, cap, st.ctr[C_ENTRY_CREDIT])
        st.vu[kk] += need
    pi[p, PI_NEED] = need
    pi[p, PI_VC] = v
    pi[p, PI_LEG] = leg
    pi[p, PI_POS] = pos
    pi[p, PI_END] = end
    pi[p, PI_ARR] = 0
    pi[p, PI_VNEXT] = -1
    if ei[e, EI_FIFO]:
        tail = int(vf[kk, VF_TAIL])
        if tail < 0:
            vf[kk, VF_HEAD] = p
        else:
            pi[tail, PI_VNEXT] = p
        vf[kk, VF_TAIL] = p
    st.pf[p, 0] = t_lf + lat
    # queueing report: the head waited here since it reached this buffer (set-up included)
    st.ewait[e] += now - st.pf[p, 2]
    st.pf[p, 2] = now + lat
    if st.ctr[C_NDOM] == 1:
        ev_push(st, ei[e, EI_DCLASS], now + lat, EV_ARRIVE | (p << 3))
        return
    if e // st.ctr[C_BLOCK] != st.ctr[C_DOM]:
        st.ctr[C_FOREIGN] += 1
    if pos + 1 < end:  # a leg's edges are all in its first edge's domain
        ev_push(st, ei[e, EI_DCLASS], now + lat, EV_ARRIVE | (p << 3))
    else:
        _post_arrival(net, st, p, e, now + lat)


@_jit
def _post_arrival(net: Any, st: Any, p: int, e: int, t: float) -> None:
    """Windowed scheduling: post packet ``p``'s arrival at the end of edge ``e`` (at ``t``) to
    the domain whose state it touches: that of its next edge (a flit reaching the switch: its
    receiver's), or at the end of its path its sender's (home) domain, which owns its job.
    A packet that lands in another domain (a remote store) also leaves an EV_LAND event for
    the tail's landing in this one: the receiver's side of a store (its receive step). Both
    are posted here, at the grant of the last edge (the stack's access), one access latency
    ahead, so no domain ever posts into another's past (see :func:`replay_loop`)."""
    block = st.ctr[C_BLOCK]
    leg, pos, _ = next_pos(net, st, p)
    if leg >= 0:
        _post_to(st, edge_of(net, st, p, leg, pos) // block, st.ei[e, EI_DCLASS], t, EV_ARRIVE | (p << 3))
        return
    home = st.pi[p, PI_BASE0] // block
    _post_to(st, home, st.ei[e, EI_DCLASS], t, EV_ARRIVE | (p << 3))
    if home != st.ctr[C_DOM]:
        st.pi[p, PI_RNEXT] = -1  # set to -2 once the landing below has read the packet's row
        heap_push(st, st.pf[p, 0], EV_LAND | (p << 3))


@_hot
def _post_to(st: Any, g: int, cls: int, t: float, pay: int) -> None:
    """Schedule payload ``pay`` at ``t`` (delay class ``cls``) in domain ``g``: at once in the
    current domain, else through the current domain's outbox, which :func:`replay_loop`
    empties at the window's end (domains may run their windows at the same time)."""
    ctr = st.ctr
    if g == ctr[C_DOM]:
        ev_push_to(st, g, cls, t, pay)
        return
    n = ctr[C_OBN]
    if n >= ctr[C_OBCAP]:  # cannot happen: a domain stops its window at C_OBLIM
        ctr[C_OVERFLOW] = 1
        return
    r = ctr[C_DOM] * ctr[C_OBCAP] + n
    # the key orders the event after the receiving domain's own ones of the same time, and
    # among other domains' by (poster, its sequence): not by when the post is delivered, so
    # that neither threads nor windows cut short change the replay
    seq = _FOREIGN | (ctr[C_DOM] << _SRC_SEQ_BITS) | (ctr[C_SEQ] & ((1 << _SRC_SEQ_BITS) - 1))
    ctr[C_SEQ] += 1
    st.ob[r, 0] = t
    st.obk[r, 1] = (seq << _PAY_BITS) | pay
    st.obk[r, 2] = g
    st.obk[r, 3] = cls
    ctr[C_OBN] = n + 1


@_hot
def _need(size: int, cap: int, entry: int) -> int:
    """Credit bytes a packet takes on entering a buffer: ``entry`` bytes (``C_ENTRY_CREDIT``,
    two flits by default), at most its size and never more than the buffer. A packet of ``m``
    lines stands for ``m`` one-line packets streaming through: while they pass, one leaving and
    the next coming in, two of them sit in the buffer, and more only when the head waits, when
    :func:`_pile_up` grows the credit to what has come in behind it. One flit (nuna <= 0.15.0)
    hid the back-pressure of load responses converging on a stack (docs/simulator.md §5); the
    whole size over-blocks from 1 KiB."""
    f = size if size < entry else entry
    return f if f < cap else cap


@_hot
def _pile_up(st: Any, k: int, cap: int, now: float) -> None:
    """Grow the credit held by the head packet of virtual channel row ``k`` (a FIFO buffer of
    ``cap`` bytes) to the bytes of it that have come in by ``now``, up to the buffer's room.
    A packet of ``m`` lines stands for ``m`` flits that stream through a buffer while its head
    moves on (:func:`_need`), but pile up behind it while it waits: linearly from its head's
    arrival to its tail's, as they would. Without this a packet puts ``1/m`` of its flits'
    pressure on a buffer where many senders' packets converge and wait (docs/simulator.md §5).
    Called when another packet asks the channel for room: that is when the credit matters."""
    h = int(st.vf[k, VF_HEAD])
    if h < 0 or st.pi[h, PI_ARR] == 0:
        return
    t_head = st.pf[h, 2]
    t_tail = st.pf[h, 0]
    size = st.pi[h, PI_SIZE0 + st.pi[h, PI_LEG]]
    held = st.pi[h, PI_NEED]
    if now >= t_tail:
        want = size
    elif now <= t_head:
        return
    else:
        want = int(size * (now - t_head) / (t_tail - t_head))
    room = cap - st.vu[k]
    if want > held + room:
        want = int(held + room)
    if want > held:
        st.vu[k] += want - held
        st.pi[h, PI_NEED] = want


@_hot
def _pick_vc(st: Any, e: int, need: int, now: float) -> tuple[int, float]:
    """Round-robin choice of a virtual channel of ``e``'s buffer with ``need`` free bytes, or
    ``(-1, earliest pending credit return)``. Due returns are applied only to channels that
    look full: returns only add room, so the choice is the same as applying them all first."""
    ei = st.ei
    cap = ei[e, EI_CAP]
    if cap < 0:
        return 0, INF
    nv = ei[e, EI_NVC]
    base = ei[e, EI_VBASE]
    start = ei[e, EI_RR]
    earliest = INF
    pile = st.ctr[C_PILEUP] != 0 and ei[e, EI_FIFO] != 0
    for i in range(nv):
        v = start + i
        if v >= nv:
            v -= nv
        if pile:
            _pile_up(st, base + v, cap, now)
        if cap - st.vu[base + v] < need:
            due = _apply_vc_credits(st, base + v, now)
            if due < earliest:
                earliest = due
            if cap - st.vu[base + v] < need:
                continue
        ei[e, EI_RR] = v + 1 if v + 1 < nv else 0
        return v, INF
    return -1, earliest


@_hot
def arbitrate(net: Any, st: Any, e: int, now: float) -> None:
    """Grant edge ``e`` to the oldest eligible request, or schedule a wake-up for when one may be."""
    ei = st.ei
    ef = st.ef
    if ei[e, EI_WHEAD] < 0:
        return
    if ef[e, EF_FREE] > now:
        schedule_wake(st, e, ef[e, EF_FREE])
        return
    retry = INF
    credit_blocked = False
    cap = ei[e, EI_CAP]
    prev = -1
    p = ei[e, EI_WHEAD]
    while p >= 0:
        nxt = st.pi[p, PI_WNEXT]
        ein = cur_edge(net, st, p)
        if ei[ein, EI_FIFO] and ef[ein, EF_INFREE] > now:
            if ef[ein, EF_INFREE] < retry:
                retry = ef[ein, EF_INFREE]
            prev = p
            p = nxt
            continue
        leg, pos, end = next_pos(net, st, p)
        need = 0
        if cap >= 0:
            need = _need(st.pi[p, PI_SIZE0 + leg], cap, st.ctr[C_ENTRY_CREDIT])
        v, due = _pick_vc(st, e, need, now)
        if v < 0:
            if due < retry:
                retry = due
            # credits belong to the edge: the requests behind would mostly fail the same way,
            # and scanning them all would make long queues quadratic
            credit_blocked = True
            break
        # unlink p and grant
        if prev < 0:
            ei[e, EI_WHEAD] = nxt
        else:
            st.pi[prev, PI_WNEXT] = nxt
        if ei[e, EI_WTAIL] == p:
            ei[e, EI_WTAIL] = prev
        st.pi[p, PI_WNEXT] = -1
        _grant(net, st, p, ein, e, v, leg, pos, end, now)
        if ei[e, EI_WHEAD] >= 0:
            schedule_wake(st, e, ef[e, EF_FREE])
        return
    if credit_blocked and retry == INF:
        ei[e, EI_CWAIT] = 1  # woken by the next credit return of this edge's buffer
    if retry < INF:
        schedule_wake(st, e, retry)


@_hot
def drain_arbitrations(net: Any, st: Any, now: float) -> None:
    """Run every arbitration queued at the current time (grants can queue more)."""
    while st.ctr[C_STACK_N] > 0:
        n = st.ctr[C_STACK_N] - 1
        st.ctr[C_STACK_N] = n
        e = st.stack[n]
        st.ei[e, EI_INSTACK] = 0
        arbitrate(net, st, e, now)


@_jit
def enter(net: Any, st: Any, p: int, now: float, tail: float) -> None:
    """Packet ``p``'s head appears in the buffer of the first edge of its path (a source) at
    ``now``; its tail arrives there at ``tail`` (>= ``now``: data still streaming in)."""
    pi = st.pi
    pi[p, PI_VC] = 0
    pi[p, PI_NEED] = 0
    pi[p, PI_ARR] = 1
    pi[p, PI_VNEXT] = -1
    st.pf[p, 0] = tail if tail > now else now
    st.pf[p, 1] = -1.0
    st.pf[p, 2] = now
    e = cur_edge(net, st, p)
    leg, _, _ = next_pos(net, st, p)
    if leg < 0:
        heap_push(st, st.pf[p, 0], EV_DELIVER | (p << 3))
        return
    if st.ei[e, EI_FIFO]:
        k = st.ei[e, EI_VBASE]
        st.vf[k, VF_QLEN] += 1.0
        tail = int(st.vf[k, VF_TAIL])
        if tail < 0:
            st.vf[k, VF_HEAD] = p
            st.vf[k, VF_TAIL] = p
            request(net, st, p)
        else:
            pi[tail, PI_VNEXT] = p
            st.vf[k, VF_TAIL] = p
    else:
        request(net, st, p)


#: on_arrive results
ARR_MOVING, ARR_DELIVERED, ARR_HEAD_AT_END = 0, 1, 2


@_hot
def on_arrive(net: Any, st: Any, p: int, now: float) -> int:
    """Handle an ARRIVE event: ``ARR_DELIVERED`` if the packet reached the end of its path and
    its tail is in too, ``ARR_HEAD_AT_END`` if its head did and a DELIVER event will follow at
    the tail's time, ``ARR_MOVING`` otherwise."""
    pi = st.pi
    pi[p, PI_ARR] = 1
    leg, _, _ = next_pos(net, st, p)
    e = cur_edge(net, st, p)
    fifo = st.ei[e, EI_FIFO]
    if leg < 0:
        if fifo:
            k = st.ei[e, EI_VBASE] + pi[p, PI_VC]
            nxt = _as_int64(pi[p, PI_VNEXT])
            st.vf[k, VF_HEAD] = nxt
            if nxt < 0:
                st.vf[k, VF_TAIL] = -1.0
            elif pi[nxt, PI_ARR]:
                _head_ready(net, st, nxt, k, now)
        if st.ei[e, EI_CAP] >= 0:
            _return_credit(st, e, pi[p, PI_VC], pi[p, PI_NEED], st.pf[p, 0] + st.ef[e, EF_CDELAY])
        if st.pf[p, 0] > now:
            heap_push(st, st.pf[p, 0], EV_DELIVER | (p << 3))
            return ARR_HEAD_AT_END
        return ARR_DELIVERED
    if not fifo:
        request(net, st, p)
    else:
        k = st.ei[e, EI_VBASE] + pi[p, PI_VC]
        if int(st.vf[k, VF_HEAD]) == p:
            _head_ready(net, st, p, k, now)
    return ARR_MOVING


@_hot
def on_wake(net: Any, st: Any, e: int, now: float) -> None:
    if st.ef[e, EF_WAKE] == now:
        st.ef[e, EF_WAKE] = INF
    push_arbitration(st, e)


# --- driver loops (kept in this module so that numba's cache sees every change) ----------

@_jit
def noc_loop(net: Any, st: Any, b_time: Any, b_seg: Any, b_size: Any, deliver: Any, pos: Any,
             m0: int, m1: int, t_stop: float) -> int:
    """Inject packets at their birth times and run events until every packet in ``[m0, m1)``
    is delivered or time passes ``t_stop``. Returns 1 when the heap must grow first, 2 if a
    fixed array overflowed."""
    nb = b_time.shape[0]
    i = pos[0]
    pending = pos[1]
    now = 0.0
    margin = 4 * st.ef.shape[0] + 64
    while pending > 0:
        if st.qn[0, 0] + margin > heap_capacity(st):
            pos[0] = i
            pos[1] = pending
            return 1
        th = ev_top_time(st)
        tb = b_time[i] if i < nb else INF
        if th == INF and tb == INF:
            break
        if tb <= th:
            now = tb
            if now > t_stop:
                break
            p = i
            i += 1
            init_packet(net, st, p, b_seg[p], 0, b_size[p], -1, 0, 0)
            enter(net, st, p, now, now)
        else:
            now, pay = ev_pop(net, st)
            st.ctr[C_POPPED] += 1
            kind = pay & 7
            x = pay >> 3
            if kind == EV_ARRIVE:
                if on_arrive(net, st, x, now) == ARR_DELIVERED:
                    deliver[x] = now
                    if m0 <= x < m1:
                        pending -= 1
            elif kind == EV_WAKE:
                on_wake(net, st, x, now)
            elif kind == EV_HEAD:
                request(net, st, x)
            else:
                deliver[x] = now
                if m0 <= x < m1:
                    pending -= 1
            if now > t_stop:
                break
        drain_arbitrations(net, st, now)
        if st.ctr[C_OVERFLOW]:
            return 2
    pos[0] = i
    pos[1] = pending
    return 0


# --- replay: jobs ------------------------------------------------------------------------
#
# A job is one packet's worth of a step's data: the lines (flit-sized pieces of the step's byte
# range) that share a route class (the stacks they are loaded from, the stack they are stored
# to, the I/O port and the remote stack), up to ``packet_bytes``. With packet_bytes equal to
# the flit size every line is its own job, in line order.

#: Step type codes (``nuna.plan.dag.STEP_TYPES`` order).
T_SEND, T_RECV, T_RCS, T_RRC, T_RRS, T_RRCS, T_CPY, T_RE, T_NOP = range(9)

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True)
def mix64(value: Any) -> Any:
    """SplitMix64 finaliser (as ``nuna.topology.address.mix64``) on a uint64."""
    z = np.uint64(value)
    z = z ^ (z >> np.uint64(30))
    z = z * _M1
    z = z ^ (z >> np.uint64(27))
    z = z * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def _line_page(base: Any, addr: Any, page_bytes: int, page_stack: I8) -> tuple:
    """(page, offset in it, its stack) of the first line of a step's address ``addr`` in a
    buffer whose first page is ``base``; (-1, 0, -1) when the step has no such address."""
    if addr < 0:
        return -1, 0, -1
    page = base + addr // page_bytes
    return page, addr % page_bytes, page_stack[page]


@njit(cache=True)
def _next_line_page(page: Any, within: Any, stack: Any, step: int, page_bytes: int, page_stack: I8) -> tuple:
    """:func:`_line_page` of the line ``step`` bytes further on, without dividing (the pages of
    a buffer are consecutive); unchanged for a missing address (``page`` -1)."""
    if page < 0:
        return page, within, stack
    within += step
    while within >= page_bytes:
        within -= page_bytes
        page += 1
    return page, within, page_stack[page]


@njit(cache=True)
def _lines_on_page(page: Any, within: Any, page_bytes: int, line_bytes: int, most: Any) -> Any:
    """How many lines from offset ``within`` start on ``page`` (at most ``most``; ``most`` for a
    missing address): one division per run of lines rather than a page check per line."""
    if page < 0:
        return most
    lines = (page_bytes - within + line_bytes - 1) // line_bytes
    return lines if lines < most else most


@njit(cache=True)
def _grow_jobs(j_bytes: I8, j_cls: Any, used: int, need: int) -> tuple:
    """``j_bytes``/``j_cls`` with room for ``need`` rows, their first ``used`` rows kept
    (capacity doubles, so that filling is linear overall)."""
    if need <= j_bytes.shape[0]:
        return j_bytes, j_cls
    cap = 2 * j_bytes.shape[0]
    if cap < need:
        cap = need
    jb = np.zeros(cap, np.int64)
    jc = np.full((cap, j_cls.shape[1]), -1, np.int16)
    jb[:used] = j_bytes[:used]
    jc[:used] = j_cls[:used]
    return jb, jc


# The open route classes of a node, for packets of several lines: an open-addressing table from
# the stacks of a class (load 1, local store, remote store), the part of the route that stays
# the same along a page, to a row of job slots with one column per I/O port (+1: none). A line
# then finds its class by the port alone; the table is looked up once per run of lines on the
# same pages. ``tab`` rows: key (-1 free), first column of its row in ``slots``; ``used`` lists
# the table rows in use. The tables are made once, for the most rows any node can open (at most
# one per run, and at most ``max_open``), and never reassigned: numba reference-counts an array
# that a loop reassigns at every use, which took half of build_jobs' time when they doubled.

@njit(cache=True)
def _probe(tab: I8, key: int) -> Any:
    """The row of ``key`` in the table ``tab`` (linear probing), or the free row it would take."""
    mask = tab.shape[0] - 1
    h = np.int64(mix64(key) & np.uint64(mask))
    while tab[h, 0] >= 0 and tab[h, 0] != key:
        h = (h + 1) & mask
    return h


@njit(cache=True)
def _class_row(tab: I8, used: I8, count: int | np.int64, key: int, width: int | np.int64) -> tuple:
    """``(count, column)``: the first column of the row of stacks ``key`` (its slots in the
    ``slots`` array), a new row if it is not in the table, which holds ``count`` rows and has
    room for one more (its slots are all -1 until a line opens them)."""
    h = _probe(tab, key)
    if tab[h, 0] >= 0:
        return count, tab[h, 1]
    if count >= used.shape[0]:  # build_jobs' bound on the rows was wrong: never write past it
        raise IndexError("build_jobs: more route classes than the table was made for")
    tab[h, 0] = key
    tab[h, 1] = count * width
    used[count] = h
    return count + 1, count * width


@njit(cache=True)
def _reopen(tab: I8, used: I8, key: int) -> int:
    """Open the class row of ``key`` as the only one, in an empty table: its first column (0)."""
    h = _probe(tab, key)
    tab[h, 0] = key
    tab[h, 1] = 0
    used[0] = h
    return 0


@njit(cache=True)
def _close_classes(tab: I8, used: I8, slots: I8, count: int | np.int64, width: int | np.int64) -> None:
    """Forget the ``count`` open classes (their jobs stay as they are)."""
    for u in range(count):
        first = tab[used[u], 1]
        slots[first:first + width] = -1
        tab[used[u], 0] = -1


@njit(cache=True)
def build_jobs(n_bytes: I8, n_gpu: I4, n_peer: I4, n_addr: I8, page_base: I8, page_stack: I8, page_phys: I8,
               page_bytes: int, hash_bytes: int, owner: I8, dom_ports: Any, n_domain: I8, line_bytes: int,
               packet_bytes: int, n_job_ptr: I8, capacity: int, max_open: int = 1 << 17) -> Any:
    """The jobs of every node, in one pass: their offsets go into ``n_job_ptr`` (CSR), and
    ``(total, j_bytes, j_cls)`` is returned, the arrays with room for at least ``total`` rows
    (``capacity`` to begin with; an estimate, grown as needed). ``n_addr[n]`` holds the node's
    base addresses: load 0, load 1, local store (on its own GPU), remote store (on
    ``n_peer[n]``), then any further loads (a fused ``re``'s other sources; -1 = none). A job's
    ``j_cls`` row holds the stacks of load 0, load 1 and the local store, the remote store's
    port and stack, then the further loads' stacks. ``n_domain[n]`` is the NAR domain its
    remote stores use (-1: the one owning each line's destination stack). A line joins the last
    job of its route class while that has room for it; when ``max_open`` classes are open, a
    new one first closes them all (a bound on memory that nuna-4die cannot reach: 17^3 stack
    triples, -1 included, times 13 port columns is 63,869 classes)."""
    nn = n_bytes.shape[0]
    # shifts and masks instead of divisions by a variable (the hash granule divides the page,
    # which nuna.topology.spec requires to be a power of two, so it is one)
    hash_shift = 0
    while (1 << hash_shift) < hash_bytes:
        hash_shift += 1
    if (1 << hash_shift) != hash_bytes:
        raise ValueError("the address hash granule must be a power of two")
    extra = n_addr.shape[1] - 4  # further loads
    ncol = 5 + extra
    j_bytes = np.zeros(max(1, capacity), np.int64)
    j_cls = np.full((max(1, capacity), ncol), -1, np.int16)
    xpg = np.full(max(1, extra), -1, np.int64)  # the further loads' page, offset, stack
    xw = np.zeros(max(1, extra), np.int64)
    xs = np.full(max(1, extra), -1, np.int64)
    nports = np.uint64(dom_ports.shape[1])
    # counts start as np.int64, not literals: a literal argument (``width = 2``) made numba
    # compile _class_row and _close_classes once more per literal seen during type inference
    width = np.int64(2)  # columns of a class row: port + 1 for ports -1 .. the largest
    for r in range(dom_ports.shape[0]):
        for c in range(dom_ports.shape[1]):
            width = max(width, dom_ports[r, c] + 2)
    nclass = np.int64(0)  # rows in the table
    nopen = 0  # classes (rows x ports) open
    max_lines = 1
    max_rows = 1  # class rows one node may open: one per run, a run ending where a page does
    for n in range(nn):
        lines = (n_bytes[n] + line_bytes - 1) // line_bytes
        if lines > max_lines:
            max_lines = lines
        runs = min(lines, 1 + (4 + extra) * (n_bytes[n] // page_bytes + 1))
        if runs > max_rows:
            max_rows = runs
    if packet_bytes <= line_bytes:
        max_rows = 1  # every line is its own job: no classes
    # a new row opens a class in its run, so a row beyond max_open + 1 would first close them all
    max_rows = min(max_rows, max_open + 1)
    rows = 1 << 4
    while rows < 2 * max_rows:  # at most half full, for short probes
        rows <<= 1
    tab = np.full((rows, 2), -1, np.int64)
    used = np.zeros(max_rows, np.int64)
    slots = np.full(max_rows * width, -1, np.int64)
    acc = np.zeros(max_lines, np.int64)  # bytes of each of the current node's jobs
    centre = np.zeros(max_lines, np.float64)  # sum of each job's line indices
    n_job_ptr[0] = 0
    for n in range(nn):
        base = n_job_ptr[n]
        nbytes = n_bytes[n]
        count = 0
        moves = False
        for c in range(4 + extra):
            if n_addr[n, c] >= 0:
                moves = True
        if nbytes > 0 and moves:
            nlines = (nbytes + line_bytes - 1) // line_bytes
            j_bytes, j_cls = _grow_jobs(j_bytes, j_cls, base, base + nlines)
            # each address's page and offset in it (a line's page is its first byte's), moved
            # on run by run: a run is the lines that start on the same four pages, whose stacks
            # and class row are the same; only a remote store's port changes from line to line
            g = n_gpu[n]
            pg0, w0, s0 = _line_page(page_base[g], n_addr[n, 0], page_bytes, page_stack)
            pg1, w1, s1 = _line_page(page_base[g], n_addr[n, 1], page_bytes, page_stack)
            pg2, w2, s2 = _line_page(page_base[g], n_addr[n, 2], page_bytes, page_stack)
            pg3, w3, s3 = _line_page(page_base[n_peer[n]], n_addr[n, 3], page_bytes, page_stack)
            for x in range(extra):
                xpg[x], xw[x], xs[x] = _line_page(page_base[g], n_addr[n, 4 + x], page_bytes, page_stack)
            li = 0
            while li < nlines:
                run = _lines_on_page(pg0, w0, page_bytes, line_bytes, nlines - li)
                run = _lines_on_page(pg1, w1, page_bytes, line_bytes, run)
                run = _lines_on_page(pg2, w2, page_bytes, line_bytes, run)
                run = _lines_on_page(pg3, w3, page_bytes, line_bytes, run)
                for x in range(extra):
                    run = _lines_on_page(xpg[x], xw[x], page_bytes, line_bytes, run)
                # the store route defines the class; a packet loads from its first line's
                # stack (pages are round-robin, so loads spread over stacks all the same)
                key = ((s1 + 1) * 2048 + (s2 + 1)) * 2048 + (s3 + 1)
                first = -1
                if packet_bytes > line_bytes:
                    nclass, first = _class_row(tab, used, nclass, key, width)
                phys = page_phys[pg3] + w3 if pg3 >= 0 else 0
                # a remote store's I/O port: the address hash (of the line's granule) over the
                # ports of the NAR domain of the step (``n_domain``) or of the destination stack
                # (``owner``), as nuna.topology.address.io_port (a row of ``nar_port_table``)
                prow = (owner[s3] if n_domain[n] < 0 else n_domain[n]) if pg3 >= 0 else 0
                for i in range(run):
                    line = li + i
                    off = line * line_bytes
                    b = line_bytes if off + line_bytes <= nbytes else nbytes - off
                    port = np.int64(-1)
                    if pg3 >= 0:
                        # (a row index, not a row view: a view made per run is reference-counted)
                        hashed = np.int64(mix64((phys + i * line_bytes) >> hash_shift) % nports)
                        port = dom_ports[prow, hashed]
                    if first >= 0:
                        col = first + port + 1
                        j = slots[col]
                        if j >= 0 and acc[j] + b <= packet_bytes:
                            acc[j] += b
                            centre[j] += line
                            continue
                        if j < 0:
                            if nopen >= max_open:
                                _close_classes(tab, used, slots, nclass, width)
                                nclass, nopen, first = np.int64(1), 0, _reopen(tab, used, key)
                                col = first + port + 1
                            nopen += 1
                        slots[col] = count
                    acc[count] = b
                    centre[count] = line
                    k = base + count
                    j_cls[k, 0] = s0
                    j_cls[k, 1] = s1
                    j_cls[k, 2] = s2
                    j_cls[k, 3] = port
                    j_cls[k, 4] = s3
                    for x in range(extra):
                        j_cls[k, 5 + x] = xs[x]
                    count += 1
                li += run
                if li >= nlines:
                    # (the pages after a buffer's last line may lie past the last GPU's pages)
                    break
                step = run * line_bytes
                pg0, w0, s0 = _next_line_page(pg0, w0, s0, step, page_bytes, page_stack)
                pg1, w1, s1 = _next_line_page(pg1, w1, s1, step, page_bytes, page_stack)
                pg2, w2, s2 = _next_line_page(pg2, w2, s2, step, page_bytes, page_stack)
                pg3, w3, s3 = _next_line_page(pg3, w3, s3, step, page_bytes, page_stack)
                for x in range(extra):
                    xpg[x], xw[x], xs[x] = _next_line_page(xpg[x], xw[x], xs[x], step, page_bytes, page_stack)
            _close_classes(tab, used, slots, nclass, width)
            nclass = np.int64(0)
            nopen = 0
            j_bytes[base:base + count] = acc[:count]
            if packet_bytes > line_bytes and count > 1:
                # issue in the order of each packet's mean line index, the order in which a
                # stream of lines would reach it: packets of every route are interleaved to the
                # very end (round by round over the routes, the order before, issued a round in
                # the order its routes first appear: 8 GPUs 32 MB 4 KiB +9.8% -> +7.4% vs flits)
                job_lines = (acc[:count] + line_bytes - 1) // line_bytes
                order = np.argsort(centre[:count] / job_lines, kind="mergesort")
                jb = j_bytes[base:base + count].copy()
                jc = j_cls[base:base + count].copy()
                for i in range(count):
                    j_bytes[base + i] = jb[order[i]]
                    for c in range(ncol):
                        j_cls[base + i, c] = jc[order[i], c]
        n_job_ptr[n + 1] = base + count
    return n_job_ptr[nn], j_bytes, j_cls


# --- replay: the event loop --------------------------------------------------------------

Replay = namedtuple(
    "Replay",
    [
        # nodes (steps), static
        "n_type", "n_gpu", "n_cu", "n_peer", "n_succ_ptr", "n_succ", "match_recv", "n_job_ptr",
        # flow control (nuna.plan.flow): the send-type step each step's end gives a credit to
        # (-1: none) and the time the credit takes to reach that step's GPU
        "n_credit", "n_credit_ns",
        # nodes, dynamic
        "n_state", "n_indeg", "n_land", "n_next_job", "n_jobs_left", "n_t_ready", "n_t_start", "n_t_end",
        "n_cnext",
        # jobs, static: bytes and route class (load 0, load 1, local store, port, remote stack)
        "j_bytes", "j_cls",
        # CUs (global id gpu * cus + cu)
        "cu_out", "cu_head", "cu_tail",
        # job slots in flight: step, job, packets pending, phase (JS_*), time the stores were issued,
        # latest tail of its loads, head landing time of its remote store, lines it holds
        "js_node", "js_job", "js_pending", "js_phase", "js_t", "js_tail", "js_head", "js_held", "js_free",
        # free packet slots (a packet's job slot and kind are its PI_USER0/1 columns)
        "pk_free",
        # nodes whose control dependencies are all done
        "ready",
        # statistics
        "hist", "stat_f", "landed",
        # I/O-port counters for traces: sampled cumulative bytes of the scale-up links
        "tr_edges", "tr_time", "tr_bytes",
        # per segment (local id), ns a write response takes back to the CU from the end of
        # the segment's path (all zero when a store completes as it lands)
        "seg_ret",
        # parameters and counters
        "par_i", "par_f", "rc",
        # windowed scheduling: remote stores landed on the sender's side, to be freed (a
        # domain's, in its view)
        "defer",
        # windowed scheduling: each domain's counters, ready steps, free job and packet slots
        # (its share of the pools), statistics and landed stores to be freed; a domain's view
        # (:func:`domain_replay`) has them as rc, ready, js_free, pk_free, hist, stat_f and
        # defer, and the replay's own hold the totals when the loop returns
        "d_rc", "d_ready", "d_js_free", "d_pk_free", "d_hist", "d_stat_f", "d_defer",
    ],
)

# par_i
P_CUS, P_LIMIT, P_REQ, P_BLOCK, P_SEG_REQ, P_SEG_READ, P_SEG_STORE, P_SEG_OUT, P_SEG_IN, P_SEG_ALU, \
    P_STACKS, P_PORTS, P_LINE, P_CUSRC, P_QDEPTH, P_WIRE_NUM, P_WIRE_DEN, P_UNFENCED = range(18)
# par_f
# (F_GATHER_PAUSED: nonzero when a caller reads the totals at a pause, as fast-forward does;
# otherwise a pause leaves them in the domains, so that pauses do not change float sums)
F_BIN, F_TRACE_DT, F_WINDOW, F_STOP, F_GATHER_PAUSED = range(5)
# rc counters
R_JS_FREE, R_PK_FREE, R_READY, R_DONE, R_INIT, R_TR_N, R_LATE, R_LOSTJOB, R_DEFER = range(9)
NRC = 16
# stat_f
S_LAT_SUM, S_LAT_W, S_LAT_MAX, S_TR_NEXT, S_REMOTE_BYTES, S_READY_SUM = range(6)
# node states
N_WAIT, N_DATA, N_RUN, N_DONE = 0, 1, 2, 3
# packet kinds
K_LOAD, K_ALU, K_STORE, K_REMOTE = 0, 1, 2, 3
# job slot phases (js_phase): loading, reducing, storing; storing and already counted done by
# its step (an unfenced remote store, P_UNFENCED); storing, to be counted done by its step when
# its local store lands (a job with a local and an unfenced remote store)
JS_LOAD, JS_ALU, JS_STORE, JS_POSTED, JS_POST_AT_LOCAL = 0, 1, 2, 3, 4
# loop status (PAUSED: no event is left before ``par_f[F_STOP]``, see nuna.sim.fastforward)
DONE, NEED_HEAP, OVERFLOW, PAUSED = 0, 1, 2, 3
#: a domain's window ended early: its outbox is nearly full (internal to replay_loop)
CUT = 4


@_hot
def _dependency_done(R: Any, s: int) -> None:
    """One more dependency of step ``s`` is done: it is ready when none is left."""
    R.n_indeg[s] -= 1
    if R.n_indeg[s] == 0:
        r = R.rc[R_READY]
        R.ready[r] = s
        R.rc[R_READY] = r + 1


@_jit
def _complete(st: Any, R: Any, n: int, now: float) -> None:
    R.n_state[n] = N_DONE
    R.n_t_end[n] = now
    R.rc[R_DONE] += 1
    for k in range(R.n_succ_ptr[n], R.n_succ_ptr[n + 1]):
        _dependency_done(R, R.n_succ[k])
    s = R.n_credit[n]
    if s >= 0:
        # the receiver frees its buffer step: the credit reaches the sender's GPU (its domain:
        # at least a window later, see nuna.sim.replay) as a remote write would
        g = R.n_gpu[s] if st.ctr[C_NDOM] > 1 else 0
        _post_to(st, g, -1, now + R.n_credit_ns[n], EV_RESPONSE_HEAD | ((R.js_node.shape[0] + s) << 3))


@_jit
def _flow_credit(R: Any, s: int) -> None:
    """A flow-control credit for send-type step ``s`` is back (see ``EV_RESPONSE_HEAD``)."""
    _dependency_done(R, s)


@_jit
def _start(net: Any, st: Any, R: Any, n: int, now: float) -> None:
    """Node ``n`` may move data: queue it on its CU."""
    R.n_t_start[n] = now
    if R.n_jobs_left[n] == 0:
        _complete(st, R, n, now)
        return
    R.n_state[n] = N_RUN
    cu = R.n_gpu[n] * R.par_i[P_CUS] + R.n_cu[n]
    R.n_cnext[n] = -1
    if R.cu_tail[cu] < 0:
        R.cu_head[cu] = n
    else:
        R.n_cnext[R.cu_tail[cu]] = n
    R.cu_tail[cu] = n
    _issue(net, st, R, cu, now)


@_jit
def _node_ready(net: Any, st: Any, R: Any, n: int, now: float) -> None:
    """Every control dependency of ``n`` is done."""
    R.n_t_ready[n] = now
    t = R.n_type[n]
    if t == T_NOP:
        R.n_t_start[n] = now
        _complete(st, R, n, now)
    elif t == T_RECV:
        R.n_t_start[n] = now
        if R.n_land[n] <= 0:
            _complete(st, R, n, now)
        else:
            R.n_state[n] = N_DATA
    elif t in (T_RCS, T_RRC, T_RRS, T_RRCS):
        if R.n_land[n] <= 0:
            _start(net, st, R, n, now)
        else:
            R.n_state[n] = N_DATA
    else:
        _start(net, st, R, n, now)


@_jit
def _drain_ready(net: Any, st: Any, R: Any, now: float) -> None:
    while R.rc[R_READY] > 0:
        r = R.rc[R_READY] - 1
        R.rc[R_READY] = r
        _node_ready(net, st, R, R.ready[r], now)


@_hot
def _new_packet(st: Any, R: Any, js: int, kind: int) -> int:
    f = R.rc[R_PK_FREE] - 1
    R.rc[R_PK_FREE] = f
    p = R.pk_free[f]
    st.pi[p, PI_USER0] = js
    st.pi[p, PI_USER1] = kind
    return p


@_jit
def _job_stores(net: Any, st: Any, R: Any, js: int, now: float, tail: float) -> None:
    """The job's data is at the CU (its tail by ``tail``): store it locally and/or remotely."""
    n = R.js_node[js]
    j = R.js_job[js]
    g = R.n_gpu[n]
    cu = R.n_cu[n]
    base = g * R.par_i[P_BLOCK]
    size = R.j_bytes[j]
    pending = 0
    R.js_phase[js] = JS_STORE
    R.js_t[js] = now
    if R.j_cls[j, 2] >= 0:
        pending += 1
    if R.j_cls[j, 3] >= 0:
        pending += 1
    R.js_pending[js] = pending
    if pending == 0:  # cannot happen: every job of a data-moving step stores
        R.rc[R_LOSTJOB] = 2
        st.ctr[C_OVERFLOW] = 1
        return
    stacks = R.par_i[P_STACKS]
    ports = R.par_i[P_PORTS]
    if R.j_cls[j, 2] >= 0:
        p = _new_packet(st, R, js, K_STORE)
        init_packet(net, st, p, R.par_i[P_SEG_STORE] + cu * stacks + R.j_cls[j, 2], base, size, -1, 0, 0)
        enter(net, st, p, now, tail)
    if R.j_cls[j, 3] >= 0:
        port = R.j_cls[j, 3]
        p = _new_packet(st, R, js, K_REMOTE)
        # the protocol's bytes on the wire (LL: a flag per 8 bytes of data, LL128 per 120)
        wire = _wire_bytes(R, size)
        init_packet(net, st, p, R.par_i[P_SEG_OUT] + cu * ports + port, base, wire,
                    R.par_i[P_SEG_IN] + port * stacks + R.j_cls[j, 4], R.n_peer[n] * R.par_i[P_BLOCK], wire)
        st.pf[p, 3] = n  # its send step, for the receiver's side of its landing (EV_LAND)
        enter(net, st, p, now, tail)
        if R.par_i[P_UNFENCED]:
            # LL and LL128 sends do not wait for their stores (the flags travel with the data):
            # the step counts the job done once its stores are issued, or, with a local store
            # as well, once that one lands
            if R.j_cls[j, 2] >= 0:
                R.js_phase[js] = JS_POST_AT_LOCAL
            else:
                _post(st, R, js, now)


@_hot
def _wire_bytes(R: Any, payload: Any) -> Any:
    """Bytes a remote store (or a load of what one stored) of ``payload`` bytes takes on the
    wire under the plan's protocol: ``ceil(payload * P_WIRE_NUM / P_WIRE_DEN)``. As the factor is
    at least 1, ``(wire * P_WIRE_DEN) // P_WIRE_NUM`` gives the payload back (``_payload_bytes``)."""
    num = R.par_i[P_WIRE_NUM]
    den = R.par_i[P_WIRE_DEN]
    if num == den:  # Simple: no division on every store
        return payload
    return (payload * num + den - 1) // den


@_hot
def _payload_bytes(R: Any, wire: Any) -> Any:
    """The payload of a remote store of ``wire`` bytes on the wire (inverse of ``_wire_bytes``)."""
    return (wire * R.par_i[P_WIRE_DEN]) // R.par_i[P_WIRE_NUM]


@_jit
def _post(st: Any, R: Any, js: int, now: float) -> None:
    """Count job slot ``js``'s job done by its step ahead of its stores (P_UNFENCED)."""
    R.js_phase[js] = JS_POSTED
    n = R.js_node[js]
    R.n_jobs_left[n] -= 1
    if R.n_jobs_left[n] == 0:
        _complete(st, R, n, now)


@_hot
def _further_loads(R: Any, j: int) -> int:
    """Loads of job ``j`` beyond load 0 and load 1: a fused ``re``'s other sources, the stacks in
    ``j_cls`` columns 5 on (``build_jobs``); 0 for every other job."""
    n = 0
    for k in range(5, R.j_cls.shape[1]):
        if R.j_cls[j, k] >= 0:
            n += 1
    return n


@_jit
def _job_loaded(net: Any, st: Any, R: Any, js: int, now: float, tail: float) -> None:
    """The heads of the job's loads are at the CU (their tails by ``tail``): reduce or store,
    cut-through, as a CU streams lines rather than waiting for a whole packet."""
    n = R.js_node[js]
    t = R.n_type[n]
    if t in (T_RRC, T_RRS, T_RRCS, T_RE):
        R.js_phase[js] = JS_ALU
        j = R.js_job[js]
        # a fused re reduces each further source too: one more pass of the ALU per source
        passes = 1 + _further_loads(R, j)
        p = _new_packet(st, R, js, K_ALU)
        init_packet(net, st, p, R.par_i[P_SEG_ALU] + R.n_cu[n], R.n_gpu[n] * R.par_i[P_BLOCK],
                    R.j_bytes[j] * passes, -1, 0, 0)
        enter(net, st, p, now, tail)
    else:
        _job_stores(net, st, R, js, now, tail)


@_jit
def _job_start(net: Any, st: Any, R: Any, js: int, now: float) -> None:
    n = R.js_node[js]
    j = R.js_job[js]
    g = R.n_gpu[n]
    cu = R.n_cu[n]
    base = g * R.par_i[P_BLOCK]
    stacks = R.par_i[P_STACKS]
    cus = R.par_i[P_CUS]
    ncol = R.j_cls.shape[1]
    loads = _further_loads(R, j)
    for k in range(2):
        if R.j_cls[j, k] >= 0:
            loads += 1
    R.js_phase[js] = JS_LOAD
    R.js_pending[js] = loads
    R.js_tail[js] = now
    if loads == 0:
        _job_loaded(net, st, R, js, now, now)
        return
    payload = R.j_bytes[j]
    # a receive-type step's load 0 reads what a remote store wrote, flags included
    received = _wire_bytes(R, payload) if R.n_type[n] in (T_RCS, T_RRC, T_RRS, T_RRCS) else payload
    for k in range(ncol):
        s = R.j_cls[j, k]
        if (k < 2 or k >= 5) and s >= 0:
            p = _new_packet(st, R, js, K_LOAD)
            size = received if k == 0 else payload
            # one request per line: a packet of m lines asks with m requests' bytes
            lines = (size + R.par_i[P_LINE] - 1) // R.par_i[P_LINE]
            init_packet(net, st, p, R.par_i[P_SEG_REQ] + cu * stacks + s, base, R.par_i[P_REQ] * lines,
                        R.par_i[P_SEG_READ] + s * cus + cu, base, size)
            enter(net, st, p, now, now)


@_hot
def _slots_per_line(R: Any, j: int) -> int:
    """Request slots a line of job ``j`` holds: one per two loads, as a ``re``'s line holds one
    for its two (so a fused ``re`` of k sources, k + 1 loads, holds ceil((k + 1) / 2))."""
    return (2 + _further_loads(R, j) + 1) // 2


@_jit
def _issue(net: Any, st: Any, R: Any, cu: int, now: float) -> None:
    """Start jobs of the CU's running steps, round-robin, while it has outstanding slots."""
    limit = R.par_i[P_LIMIT]
    line = R.par_i[P_LINE]
    # the CU's memory pipeline takes a new job only while its issue queue is short (stores of
    # started jobs always enter): loads are not queued up behind stores without bound
    g = cu // R.par_i[P_CUS]
    q = st.ei[g * R.par_i[P_BLOCK] + R.par_i[P_CUSRC] + cu - g * R.par_i[P_CUS], EI_VBASE]
    depth = R.par_i[P_QDEPTH] if R.par_i[P_QDEPTH] > 0 else 1 << 62
    while R.cu_out[cu] < limit and R.cu_head[cu] >= 0 and st.vf[q, VF_QLEN] < depth:
        n = R.cu_head[cu]
        j = R.n_next_job[n]
        end = R.n_job_ptr[n + 1]
        if j >= end:
            R.cu_head[cu] = R.n_cnext[n]
            if R.cu_head[cu] < 0:
                R.cu_tail[cu] = -1
            continue
        # the limit counts requests, i.e. lines: a packet of several lines holds several; it
        # may start while half of it fits, so that lines in flight average the limit rather
        # than fall short of it by half a packet
        lines = (R.j_bytes[j] + line - 1) // line
        if R.j_cls.shape[1] > 5:
            lines *= _slots_per_line(R, j)
        if R.cu_out[cu] > 0 and R.cu_out[cu] + lines // 2 > limit:
            return
        # (a job may need its loads' packets at once: two, or a fused re's more)
        if R.rc[R_JS_FREE] == 0 or R.rc[R_PK_FREE] < R.j_cls.shape[1] - 3:
            R.rc[R_LOSTJOB] = 1  # pools are sized so that this cannot happen
            st.ctr[C_OVERFLOW] = 1
            return
        f = R.rc[R_JS_FREE] - 1
        R.rc[R_JS_FREE] = f
        js = R.js_free[f]
        R.js_node[js] = n
        R.js_job[js] = j
        R.js_held[js] = lines
        R.n_next_job[n] = j + 1
        R.cu_out[cu] += lines
        # round-robin: the step goes to the back of the CU's queue
        if R.n_cnext[n] >= 0:
            R.cu_head[cu] = R.n_cnext[n]
            R.n_cnext[n] = -1
            R.n_cnext[R.cu_tail[cu]] = n
            R.cu_tail[cu] = n
        _job_start(net, st, R, js, now)


@_jit
def _job_done(net: Any, st: Any, R: Any, js: int, now: float) -> None:
    n = R.js_node[js]
    f = R.rc[R_JS_FREE]
    R.js_free[f] = js
    R.rc[R_JS_FREE] = f + 1
    cu = R.n_gpu[n] * R.par_i[P_CUS] + R.n_cu[n]
    R.cu_out[cu] -= R.js_held[js]
    # (the flag first: Simple's replays do not read the phase of every job that ends)
    if R.par_i[P_UNFENCED] == 0 or R.js_phase[js] != JS_POSTED:
        R.n_jobs_left[n] -= 1
        if R.n_jobs_left[n] == 0:
            _complete(st, R, n, now)
    _issue(net, st, R, cu, now)


@_hot
def _response_ns(R: Any, js: int, kind: int) -> float:
    """Time a write response takes from the store of job slot ``js`` (``kind`` K_STORE or
    K_REMOTE) back to its CU: 0 when stores complete as they land."""
    j = R.js_job[js]
    n = R.js_node[js]
    cu = R.n_cu[n]
    if kind == K_STORE:
        return R.seg_ret[R.par_i[P_SEG_STORE] + cu * R.par_i[P_STACKS] + R.j_cls[j, 2]]
    port = R.j_cls[j, 3]
    return (R.seg_ret[R.par_i[P_SEG_OUT] + cu * R.par_i[P_PORTS] + port]
            + R.seg_ret[R.par_i[P_SEG_IN] + port * R.par_i[P_STACKS] + R.j_cls[j, 4]])


@_jit
def _slots_back_at_head(net: Any, st: Any, R: Any, js: int, now: float) -> None:
    """All but one of the request slots of job slot ``js`` come back (see ``_packet_head``)."""
    give = R.js_held[js] - 1
    if give <= 0:
        return
    R.js_held[js] -= give
    n = R.js_node[js]
    cu = R.n_gpu[n] * R.par_i[P_CUS] + R.n_cu[n]
    R.cu_out[cu] -= give
    _issue(net, st, R, cu, now)


@_jit
def _store_complete(net: Any, st: Any, R: Any, js: int, now: float) -> None:
    """One store of job slot ``js`` is complete (landed, or its write response is back)."""
    R.js_pending[js] -= 1
    if R.js_pending[js] == 0:
        _job_done(net, st, R, js, now)


@_jit
def _packet_head(net: Any, st: Any, R: Any, p: int, now: float) -> None:
    """The head of packet ``p`` reached the end of its path (its tail at ``st.pf[p, 0]``):
    a load or reduction hands over to the next phase of its job right away."""
    kind = st.pi[p, PI_USER1]
    js = _as_int64(st.pi[p, PI_USER0])
    if kind in (K_STORE, K_REMOTE):
        # a packet of several lines stands for lines that, as flits, would each land after
        # about the head's latency: the lines behind the head wait only because they were
        # grouped into one packet (in a flit stream they interleave with other routes). So the
        # CU gets all but one of its request slots back when the last store's head lands, the
        # last at its tail (one line: at the tail, exactly as a flit). Holding half until the
        # tail made window-limited CUs up to 22% slow at 64 KiB (docs/simulator.md §5).
        # With write responses the slots come back a response after the head (a job with a
        # local and a remote store counts the first as pending until its response: its slots
        # then all come back at the second's tail response, a case only fused receives have).
        if R.js_pending[js] == 1 and st.pf[p, 0] > now and R.js_held[js] > 1:
            ret = _response_ns(R, js, kind)
            if ret > 0.0:
                heap_push(st, now + ret, EV_RESPONSE_HEAD | (js << 3))
            else:
                _slots_back_at_head(net, st, R, js, now)
        if kind == K_REMOTE:
            R.js_head[js] = now
        return
    tail = st.pf[p, 0]
    if kind == K_ALU:
        _job_stores(net, st, R, js, now, tail)
        return
    if tail > R.js_tail[js]:
        R.js_tail[js] = tail
    R.js_pending[js] -= 1
    if R.js_pending[js] == 0:
        _job_loaded(net, st, R, js, now, R.js_tail[js])


@_hot
def _free_packet(R: Any, p: int) -> None:
    f = R.rc[R_PK_FREE]
    R.pk_free[f] = p
    R.rc[R_PK_FREE] = f + 1


@_jit
def _land(net: Any, st: Any, R: Any, n: int, nbytes: int, now: float) -> None:
    """The receiver's side of a remote store of send step ``n`` landing: ``nbytes`` more of
    its matching receive's data are there."""
    R.landed[R.n_gpu[n], R.n_peer[n]] += nbytes
    m = R.match_recv[n]
    R.n_land[m] -= nbytes
    if R.n_land[m] <= 0 and R.n_state[m] == N_DATA:
        if R.n_type[m] == T_RECV:
            _complete(st, R, m, now)
        else:
            _start(net, st, R, m, now)


@_jit
def _packet_landed(net: Any, st: Any, R: Any, p: int, now: float) -> None:
    """EV_LAND (windowed scheduling): the tail of remote store ``p`` landed in the receiver's
    domain. Its sender's side (``_packet_done``) runs at the same time in the sender's domain,
    maybe on another thread: neither frees the packet, the window's end does once both are
    done (``PI_RNEXT`` -2: this side has read the row; see :func:`_free_landed`)."""
    n = int(st.pf[p, 3])
    nbytes = _payload_bytes(R, _as_int64(st.pi[p, PI_SIZE1]))
    st.pi[p, PI_RNEXT] = -2
    _land(net, st, R, n, nbytes, now)


@_jit
def _packet_done(net: Any, st: Any, R: Any, p: int, now: float) -> None:
    """The tail of packet ``p`` reached the end of its path: free it; a store has landed."""
    js = _as_int64(st.pi[p, PI_USER0])
    kind = st.pi[p, PI_USER1]
    split = kind == K_REMOTE and st.ctr[C_NDOM] > 1  # the receiver's side is an EV_LAND
    if not split:
        _free_packet(R, p)
    if kind not in (K_STORE, K_REMOTE):
        return
    n = R.js_node[js]
    j = R.js_job[js]
    if kind == K_STORE and R.par_i[P_UNFENCED] and R.js_phase[js] == JS_POST_AT_LOCAL:
        _post(st, R, js, now)
    if kind == K_REMOTE:
        # weight by lines so that the distribution does not depend on the packet size
        w = float((R.j_bytes[j] + R.par_i[P_LINE] - 1) // R.par_i[P_LINE])
        R.stat_f[S_READY_SUM] += (now - R.js_t[js]) * w
        # the head's latency, for the same reason the slots come back at the head: the drain
        # behind it is an artefact of grouping lines (as flits each line sees about the head's)
        lat = R.js_head[js] - st.pf[p, 1]
        R.stat_f[S_LAT_SUM] += lat * w
        R.stat_f[S_LAT_W] += w
        R.stat_f[S_REMOTE_BYTES] += R.j_bytes[j]
        if lat > R.stat_f[S_LAT_MAX]:
            R.stat_f[S_LAT_MAX] = lat
        b = int(lat / R.par_f[F_BIN])
        if b >= R.hist.shape[0]:
            b = R.hist.shape[0] - 1
        R.hist[b] += w
        if not split:
            _land(net, st, R, n, R.j_bytes[j], now)
        else:  # freed at a window's end once the receiver's side has run (_free_landed)
            d = R.rc[R_DEFER]
            R.defer[d] = p
            R.rc[R_DEFER] = d + 1
    ret = _response_ns(R, js, kind)
    if ret > 0.0:
        heap_push(st, now + ret, EV_RESPONSE_TAIL | (js << 3))
    else:
        _store_complete(net, st, R, js, now)


@_jit
def _trace_sample(st: Any, R: Any, now: float) -> None:
    """Record the scale-up links' cumulative bytes; halve the sample rate when the buffer fills."""
    while now >= R.stat_f[S_TR_NEXT]:
        k = R.rc[R_TR_N]
        if k >= R.tr_time.shape[0]:
            half = k // 2
            for i in range(half):
                R.tr_time[i] = R.tr_time[2 * i + 1]
                for e in range(R.tr_edges.shape[0]):
                    R.tr_bytes[i, e] = R.tr_bytes[2 * i + 1, e]
            R.rc[R_TR_N] = half
            R.par_f[F_TRACE_DT] *= 2.0
            k = half
        t = R.stat_f[S_TR_NEXT]
        R.tr_time[k] = t
        for e in range(R.tr_edges.shape[0]):
            inv = st.ef[R.tr_edges[e], EF_INVBW]
            R.tr_bytes[k, e] = st.ef[R.tr_edges[e], EF_BUSY] / inv if inv > 0.0 else 0.0
        R.rc[R_TR_N] = k + 1
        R.stat_f[S_TR_NEXT] = t + R.par_f[F_TRACE_DT]


@_hot
def _replay_event(net: Any, st: Any, R: Any, now: float, pay: int) -> None:
    """Handle one replay event, then the steps and arbitrations it made ready."""
    st.ctr[C_POPPED] += 1
    kind = pay & 7
    x = pay >> 3
    if kind == EV_ARRIVE:
        code = on_arrive(net, st, x, now)
        if code != ARR_MOVING:
            _packet_head(net, st, R, x, now)
            if code == ARR_DELIVERED:
                _packet_done(net, st, R, x, now)
    elif kind == EV_WAKE:
        on_wake(net, st, x, now)
    elif kind == EV_HEAD:
        request(net, st, x)
    elif kind == EV_ROOM:
        g = x // R.par_i[P_BLOCK]
        _issue(net, st, R, g * R.par_i[P_CUS] + x - g * R.par_i[P_BLOCK] - R.par_i[P_CUSRC], now)
    elif kind == EV_DELIVER:
        _packet_done(net, st, R, x, now)
    elif kind == EV_RESPONSE_TAIL:
        _store_complete(net, st, R, x, now)
    elif kind == EV_LAND:
        _packet_landed(net, st, R, x, now)
    elif x >= R.js_node.shape[0]:
        _flow_credit(R, x - R.js_node.shape[0])
    else:
        _slots_back_at_head(net, st, R, x, now)
    # calls pass every state array (hundreds of scalars): only make them when needed
    if R.rc[R_READY] > 0:
        _drain_ready(net, st, R, now)
    drain_arbitrations(net, st, now)


@_hot
def domain_state(st: Any, g: int) -> Any:
    """Windowed scheduling: domain ``g``'s view of ``st`` (its own counters and arbitration
    stack; every other array shared, each domain touching only its own rows)."""
    return State(st.ef, st.ei, st.dstack[g], st.vf, st.vu, st.pi, st.pf, st.ewait, st.heap, st.heapk,
                 st.fq, st.fqk, st.fqs, st.fqh, st.qn, st.dctr[g], st.dctr, st.dstack, st.ob, st.obk)


@_hot
def domain_replay(R: Any, g: int) -> Any:
    """Windowed scheduling: domain ``g``'s view of ``R`` (its own counters, ready steps, pool
    shares, statistics and landed stores; the step, job and CU arrays shared, each domain
    touching only its GPU's)."""
    return Replay(R.n_type, R.n_gpu, R.n_cu, R.n_peer, R.n_succ_ptr, R.n_succ, R.match_recv, R.n_job_ptr,
                  R.n_credit, R.n_credit_ns, R.n_state, R.n_indeg, R.n_land, R.n_next_job, R.n_jobs_left,
                  R.n_t_ready, R.n_t_start, R.n_t_end, R.n_cnext, R.j_bytes, R.j_cls, R.cu_out, R.cu_head,
                  R.cu_tail,
                  R.js_node, R.js_job, R.js_pending, R.js_phase, R.js_t, R.js_tail, R.js_head, R.js_held,
                  R.d_js_free[g], R.d_pk_free[g], R.d_ready[g], R.d_hist[g], R.d_stat_f[g], R.landed,
                  R.tr_edges, R.tr_time, R.tr_bytes, R.seg_ret, R.par_i, R.par_f, R.d_rc[g], R.d_defer[g],
                  R.d_rc, R.d_ready, R.d_js_free, R.d_pk_free, R.d_hist, R.d_stat_f, R.d_defer)


@_jit
def _run_domain(net: Any, st: Any, R: Any, end: float) -> int:
    """Handle the events of ``st``'s current domain earlier than ``end`` (every domain's,
    with one queue), first, in its first call, the steps ready at time 0. Returns DONE when
    none is left before ``end``, NEED_HEAP when the heap may not hold another event's pushes,
    OVERFLOW, or CUT when the outbox may not hold another event's posts (windowed: the
    window ends early for this domain)."""
    if R.rc[R_INIT] == 0:
        R.rc[R_INIT] = 1
        _drain_ready(net, st, R, 0.0)
        drain_arbitrations(net, st, 0.0)
    margin = 16 * R.par_i[P_LIMIT] + 16 * 1024
    g = st.ctr[C_DOM]
    tracing = R.par_f[F_TRACE_DT] > 0.0
    while True:
        if st.qn[g, 0] + margin > heap_capacity(st):
            return NEED_HEAP
        if st.ctr[C_OBN] > st.ctr[C_OBLIM]:
            return CUT
        now, pay = ev_pop_before(net, st, end)
        if pay < 0:
            return DONE
        if tracing:
            _trace_sample(st, R, now)
        _replay_event(net, st, R, now, pay)
        if st.ctr[C_OVERFLOW]:
            return OVERFLOW


@_jit
def _run_domain_window(net: Any, st: Any, R: Any, g: int, end: float) -> None:
    """Windowed scheduling: domain ``g`` handles its events earlier than ``end``
    (:func:`_run_domain`) and leaves how it ended in its ``C_STATUS``."""
    st.dctr[g, C_STATUS] = _run_domain(net, domain_state(st, g), domain_replay(R, g), end)


@njit(parallel=True, cache=True, error_model="numpy")
def _run_window(net: Any, st: Any, R: Any, end: float) -> None:
    """Windowed scheduling: every domain handles its events earlier than ``end``, on as many
    threads as numba is set to use (the domains are independent within a window, so the
    result does not depend on the count). The work is all in a called function: numba's
    parallel loop body lost stores to arrays it reached through a tuple (numba 0.68.1)."""
    for g in prange(st.dctr.shape[0]):
        # numba otherwise compiled the callee twice, for an int64 and a uint64 ``g``
        _run_domain_window(net, st, R, _as_int64(g), end)


@_jit
def _free_landed(st: Any, R: Any, g: int) -> None:
    """Windowed scheduling, between windows: free domain ``g``'s remote stores whose both sides
    have landed (the receiver's has once it marked the packet's row read)."""
    n = R.d_rc[g, R_DEFER]
    keep = 0
    for i in range(n):
        p = R.d_defer[g, i]
        if st.pi[p, PI_RNEXT] == -2:
            f = R.d_rc[g, R_PK_FREE]
            R.d_pk_free[g, f] = p
            R.d_rc[g, R_PK_FREE] = f + 1
        else:
            R.d_defer[g, keep] = p
            keep += 1
    R.d_rc[g, R_DEFER] = keep


@_jit
def _deliver_posts(st: Any, G: int) -> None:
    """Windowed scheduling, between windows: move every outbox's posts into their domains'
    queues, in the order of the posting domains (the order does not depend on threads)."""
    cap = st.ctr[C_OBCAP]
    for h in range(G):
        for i in range(st.dctr[h, C_OBN]):
            r = h * cap + i
            g = st.obk[r, 2]
            ev_push_key(domain_state(st, g), g, st.obk[r, 3], st.ob[r, 0], st.obk[r, 1])
        st.dctr[h, C_OBN] = 0


@_jit
def _gather(st: Any, R: Any, G: int) -> None:
    """Windowed scheduling, when the loop returns: add the domains' counters and statistics
    into the state's and replay's own (in domain order: the same bytes whatever the threads)."""
    for g in range(G):
        d = st.dctr[g]
        for c in (C_EVENTS, C_POPPED, C_FOREIGN):
            st.ctr[c] += d[c]
            d[c] = 0
        if d[C_OVERFLOW]:
            st.ctr[C_OVERFLOW] = 1
        for k in range(R.hist.shape[0]):
            if R.d_hist[g, k] != 0.0:  # untouched bins stay unmapped (65,536 per GPU)
                R.hist[k] += R.d_hist[g, k]
                R.d_hist[g, k] = 0.0
        for s in (S_LAT_SUM, S_LAT_W, S_REMOTE_BYTES, S_READY_SUM):
            R.stat_f[s] += R.d_stat_f[g, s]
            R.d_stat_f[g, s] = 0.0
        if R.d_stat_f[g, S_LAT_MAX] > R.stat_f[S_LAT_MAX]:
            R.stat_f[S_LAT_MAX] = R.d_stat_f[g, S_LAT_MAX]
        R.rc[R_DONE] += R.d_rc[g, R_DONE]
        R.d_rc[g, R_DONE] = 0
        if R.d_rc[g, R_LOSTJOB] > R.rc[R_LOSTJOB]:
            R.rc[R_LOSTJOB] = R.d_rc[g, R_LOSTJOB]


def replay_loop(net: Any, st: Any, R: Any) -> int:
    """Run the replay until no event is left (done, or deadlocked: the caller checks), until
    the heap needs to grow (``NEED_HEAP``: grow it and call again) or until the next event is
    at or after ``par_f[F_STOP]`` (``PAUSED``: the driver in :mod:`nuna.sim.fastforward` pauses
    the loop every fraction of a second, so that Ctrl-C is heard, and fast-forward at every
    sampling window; a paused loop called again goes on exactly as if it had not paused).

    With one event queue (``C_NDOM`` 1) the loop is :func:`_loop_one_queue`; with one queue
    per GPU (windowed scheduling) :func:`_loop_windowed`. Two compiled entry points rather than
    one with both branches, so that a first replay compiles only the loop it runs; both call
    :func:`_run_domain` (the event handling), compiled once for both (cold starts measured in
    docs/simulator.md §6)."""
    if st.ctr[C_NDOM] == 1:
        return int(_loop_one_queue(net, st, R))
    return int(_loop_windowed(net, st, R))


@_jit
def _loop_one_queue(net: Any, st: Any, R: Any) -> int:
    """:func:`replay_loop` with one event queue."""
    status = _run_domain(net, st, R, R.par_f[F_STOP])
    if status == DONE and ev_count(st) > 0:
        return PAUSED
    return status


@_jit
def _loop_windowed(net: Any, st: Any, R: Any) -> int:
    """:func:`replay_loop` with one event queue per GPU (domain, ``C_NDOM`` > 1): the loop
    runs window by window. Every domain handles its events earlier than the window's end, the
    earliest pending event of any domain plus ``F_WINDOW``, possibly at the same time on
    several threads (:func:`_run_window`). An event of one GPU reaches another GPU's state only
    through an event posted at least the window ahead (``_post_arrival``: a flit's arrival at
    the switch, a cable latency after its grant; a store's landing, a memory access after its
    last grant), so no domain posts into the window being run: posts wait in the poster's
    outbox until the window's end (:func:`_deliver_posts`), and the order is exact. Equal-time
    events of one GPU run in the order they were posted to it, a window's posts from other
    GPUs after its own."""
    G = st.ctr[C_NDOM]
    stop = R.par_f[F_STOP]
    for g in range(G):  # a call after NEED_HEAP, PAUSED or OVERFLOW starts afresh
        st.dctr[g, C_STATUS] = DONE
    if R.rc[R_INIT] == 0:  # each domain starts its steps ready at time 0
        R.rc[R_INIT] = 1
        _run_window(net, st, R, -INF)
    width = R.par_f[F_WINDOW]
    # a window cut short (a full outbox, or the heap before a call that grows it) restarts at
    # the earliest pending event, which keeps every post ahead of every domain's progress
    end = -INF
    status = DONE
    while True:
        _deliver_posts(st, G)
        cut = False
        for g in range(G):
            _free_landed(st, R, g)
            s = st.dctr[g, C_STATUS]
            if s == OVERFLOW or (s == NEED_HEAP and status != OVERFLOW):
                status = s
            cut = cut or s != DONE
        if status != DONE:
            break
        if ev_count(st) == 0:
            break
        t0 = INF
        for g in range(G):
            t = ev_top_time(domain_state(st, g))
            if t < end and not cut:  # posted into a window this domain has finished (the caller fails)
                R.rc[R_LATE] += 1
            if t < t0:
                t0 = t
        if t0 >= stop:
            status = PAUSED
            break
        end = t0 + width
        _run_window(net, st, R, end)
    # the totals the caller reads; at a pause only when asked for: summed in one go at the end,
    # the domains' float statistics add up the same however often the loop paused
    if status != PAUSED or R.par_f[F_GATHER_PAUSED] != 0.0:
        _gather(st, R, G)
    return status
