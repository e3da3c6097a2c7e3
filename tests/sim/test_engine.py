"""The event engine's invariants: heap order, per-flow FIFO, credit conservation, exact timing."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numba import njit

from nuna.sim import engine as eng
from nuna.sim import noc
from nuna.sim.network import RouterParams


@njit
def _push_all_pop_all(state, times, out_t, out_p):  # type: ignore[no-untyped-def]
    for i in range(times.shape[0]):
        eng.heap_push(state, times[i], i)
    for i in range(times.shape[0]):
        t, p = eng.heap_pop(state)
        out_t[i] = t
        out_p[i] = p


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=300))
def test_heap_pops_in_time_then_insertion_order(raw: list[int]) -> None:
    times = np.array(raw, dtype=np.float64) * 0.5  # many ties on purpose
    mesh = noc.build_mesh(2, 1)
    state = eng.make_state(mesh.net, 1, len(raw) + 16, 1)
    out_t = np.zeros(len(raw))
    out_p = np.zeros(len(raw), dtype=np.int64)
    _push_all_pop_all(state, times, out_t, out_p)
    expected = sorted(range(len(raw)), key=lambda i: (times[i], i))
    assert out_p.tolist() == expected
    assert out_t.tolist() == [times[i] for i in expected]


@njit
def _queue_ops(net, state, cls, times, out_t, out_p):  # type: ignore[no-untyped-def]
    k = 0
    pushed = 0
    for i in range(cls.shape[0]):
        if cls[i] == -2:
            if eng.ev_count(state) > 0:
                t, p = eng.ev_pop(net, state)
                out_t[k] = t
                out_p[k] = p >> 3
                k += 1
        else:
            eng.ev_push(state, cls[i], times[i], (pushed << 3) | eng.EV_WAKE)
            pushed += 1
    while eng.ev_count(state) > 0:
        t, p = eng.ev_pop(net, state)
        out_t[k] = t
        out_p[k] = p >> 3
        k += 1
    return k


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 2), st.integers(0, 12)), min_size=1, max_size=200))
def test_event_queue_pops_like_one_heap(ops: list[tuple[int, int]]) -> None:
    """Delay-class rings plus the heap pop in exactly ``(time, insertion)`` order, whatever the
    push order: out-of-order pushes and pushes into a full ring (2 slots) fall back to the heap."""
    import heapq

    mesh = noc.build_mesh(2, 1)
    state = eng.make_state(mesh.net, 1, len(ops) + 16, 1)
    # rings of two slots: with 16, pushes of nondecreasing times from 0..6 almost never found
    # one full, and a ring that overwrote its head when full passed this test
    classes, slots = 3, 2
    fq = np.zeros((classes * slots, 2))
    state = state._replace(fq=fq, fqk=fq.view(np.int64), fqs=np.zeros((classes, 2), np.int64),
                           fqh=np.full(classes, np.inf))
    state.ctr[eng.C_QC] = slots
    cls = np.array([c for c, _ in ops], np.int64)
    times = np.array([t for _, t in ops], np.float64) * 0.5  # many ties on purpose
    out_t = np.zeros(len(ops))
    out_p = np.zeros(len(ops), np.int64)
    n = _queue_ops(mesh.net, state, cls, times, out_t, out_p)

    ref: list[tuple[float, int]] = []
    expected: list[tuple[float, int]] = []
    for c, t in zip(cls.tolist(), times.tolist(), strict=True):
        if c == -2:
            if ref:
                expected.append(heapq.heappop(ref))
        else:
            heapq.heappush(ref, (t, len(ref) + len(expected)))
    expected += [heapq.heappop(ref) for _ in range(len(ref))]
    assert n == len(expected)
    assert list(zip(out_t[:n].tolist(), out_p[:n].tolist(), strict=True)) == expected


def _random_traffic(mesh: noc.MeshNet, rate: float, flits: int, seed: int) -> tuple[Any, Any, Any, Any]:
    n = mesh.width * mesh.height
    rng = np.random.default_rng(seed)
    cyc, src = np.nonzero(rng.random((200, n)) < rate / flits)
    dst = rng.integers(0, n, size=src.shape[0])
    deliver, _ = noc.simulate_packets(mesh, cyc.astype(np.float64), src, dst, flits)
    return cyc, src, dst, deliver


@settings(max_examples=15, deadline=None)
@given(width=st.integers(2, 4), height=st.integers(1, 4), rate=st.floats(0.05, 0.9),
       flits=st.integers(1, 4), router=st.sampled_from(noc.ROUTERS), seed=st.integers(0, 10_000))
def test_each_flow_is_delivered_in_order_through_single_fifos(width: int, height: int, rate: float,
                                                              flits: int, router: str, seed: int) -> None:
    # FIFO per link and per virtual-channel port: where every port has one queue (output queues, or
    # input queues with one virtual channel) packets of one (source, destination) flow never
    # overtake each other, even past saturation
    params = RouterParams(vcs=1) if router == "iq" else None
    mesh = noc.build_mesh(width, height, router, params)
    _, src, dst, deliver = _random_traffic(mesh, rate, flits, seed)
    assert not np.isnan(deliver).any()
    for s in range(width * height):
        for d in range(width * height):
            sel = (src == s) & (dst == d)
            assert np.all(np.diff(deliver[sel]) > 0)


@settings(max_examples=15, deadline=None)
@given(width=st.integers(2, 4), height=st.integers(1, 4), rate=st.floats(0.05, 0.9),
       flits=st.integers(1, 4), seed=st.integers(0, 10_000))
@example(width=2, height=4, rate=0.875, flits=3, seed=523)
def test_virtual_channels_deliver_every_packet_no_faster_than_zero_load(width: int, height: int, rate: float,
                                                                       flits: int, seed: int) -> None:
    # with 4 virtual channels per port a flow's packets may take different channels (round-robin
    # VC allocation) and overtake each other (53 reorders over 100 seeds of a 4x4 mesh at 0.9
    # flits/cycle in 3-flit packets, none with one channel; the example reorders once), but none
    # is lost and none beats its path
    mesh = noc.build_mesh(width, height, "iq")
    cyc, src, dst, deliver = _random_traffic(mesh, rate, flits, seed)
    assert not np.isnan(deliver).any()
    zero_load = np.array([noc.zero_load_latency(int(mesh.pair_hops[s, d]), flits)
                          for s, d in zip(src.tolist(), dst.tolist(), strict=True)])
    assert np.all(deliver - cyc >= zero_load - 1e-9)


def _vc_rows(net: Any) -> int:
    return int(net.ei[net.ei[:, eng.EI_VBASE] >= 0, eng.EI_NVC].sum())


def unreturned_credit(net: Any, state: Any) -> np.ndarray:
    """Per virtual channel, the credit bytes in use that no queued return will give back."""
    ring = int(state.ctr[eng.C_RING])
    rows = state.vf[: _vc_rows(net)]
    pending = sum(rows[:, eng.VF_RING + ring + i] * (i < rows[:, eng.VF_CRN]) for i in range(ring))
    return np.asarray(state.vu[: _vc_rows(net)] - pending)


def test_a_ports_credits_share_one_cache_line() -> None:
    # why State.vu exists: a grant reads the credits of every channel of a port; on the default
    # topology's pod each multi-channel port's credits lie in one 64-byte line
    from nuna.sim.network import build_pod_net
    from nuna.topology.spec import load_topology

    pod = build_pod_net(load_topology("nuna-4die"), 2)
    st = eng.make_state(pod.net, 4, 64, 4)
    assert st.vu.ctypes.data % 64 == 0
    base, nvc = pod.net.ei[:, eng.EI_VBASE], pod.net.ei[:, eng.EI_NVC]
    ports = (base >= 0) & (nvc > 1)
    assert ports.any()
    first = base[ports] * 8 // 64
    last = (base[ports] + nvc[ports] - 1) * 8 // 64
    np.testing.assert_array_equal(first, last)


@pytest.mark.parametrize("ring", [1, 8])
def test_credits_all_come_back(ring: int) -> None:
    # ring 1: a virtual channel's second pending return already merges into the first
    mesh = noc.build_mesh(4, 4, "iq")
    rng = np.random.default_rng(5)
    cyc, src = np.nonzero(rng.random((500, 16)) < 0.3)
    dst = rng.integers(0, 16, size=src.shape[0])
    count = src.shape[0]
    state = eng.make_state(mesh.net, count, 8 * eng.num_edges(mesh.net) + 1024, ring)
    deliver = np.full(count, np.nan)
    pos = np.array([0, count], np.int64)
    seg = mesh.pair_seg[src, dst].astype(np.int32)
    size = np.full(count, 256, np.int64)
    births = cyc.astype(np.float64)
    assert eng.noc_loop(mesh.net, state, births, seg, size, deliver, pos, 0, count, np.inf) == 0
    assert not np.isnan(deliver).any()
    # every byte of credit taken was returned (some returns may still be queued, never lost)
    np.testing.assert_array_equal(unreturned_credit(mesh.net, state), 0.0)
    assert (state.vf[: _vc_rows(mesh.net), eng.VF_HEAD] == -1).all()


@pytest.mark.parametrize("n", [1, 7, 1 << 20])
def test_small_page_arrays_are_zeroed_aligned_writable_and_distinct(n: int) -> None:
    # the event rings' memory (engine._small_pages): like _aligned's, on 4-KiB pages
    a, b = eng._small_pages(n), eng._small_pages(n)
    assert a.shape == (n,)
    assert a.dtype == np.float64
    assert a.ctypes.data % 64 == 0
    assert not a.any()
    a[:] = 1.0
    assert a.sum() == n
    assert not b.any()


def _owner(a: np.ndarray) -> object:
    base: object = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


@pytest.mark.parametrize("domains", [1, 3])
def test_heaps_are_zeroed_aligned_views_and_windowed_ones_on_small_pages(domains: int) -> None:
    # one heap keeps numpy's memory (huge pages: read all over); one per GPU sits on 4-KiB pages,
    # as each is used near its root only (engine._new_heap)
    h, hk = eng._new_heap(1000, domains)
    rows = h.shape[0] // domains
    assert h.shape == (rows * domains, 2)
    assert rows % 4 == 0
    assert rows >= 1003
    assert np.shares_memory(h, hk)
    assert not h.any()
    for g in range(domains):
        # node i is row g * rows + i + 3: the children of a node (rows 4i + 4 .. 4i + 7) share a line
        assert h[g * rows:].ctypes.data % 64 == 0
    assert isinstance(_owner(h), mmap.mmap) == (domains > 1)


@njit
def _prefetch_each(rows, flat):  # type: ignore[no-untyped-def]
    for i in range(rows.shape[0]):
        eng._prefetch(rows, i)
    for i in range(flat.shape[0]):
        eng._prefetch(flat, i)
    for i in range(rows.shape[0]):
        for j in range(rows.shape[1]):
            eng._prefetch_at(rows, i, j)
    return rows.sum() + flat.sum()


def test_prefetch_hints_rows_and_entries_without_touching_them() -> None:
    # the loop prefetches rows of 2-d state arrays (also a row's later line, engine._prefetch_at)
    # and entries of the 1-d path table (engine._prefetch_path); a hint compiles for each and
    # changes nothing
    rows = np.arange(24.0).reshape(6, 4)
    flat = np.arange(7, dtype=np.int32)
    before = rows.copy(), flat.copy()
    assert _prefetch_each(rows, flat) == rows.sum() + flat.sum()
    assert np.array_equal(rows, before[0])
    assert np.array_equal(flat, before[1])


def test_packet_rows_need_no_initial_links() -> None:
    # make_state leaves packet rows zero (unmapped until used); the engine writes every list
    # link before it reads it, so rows holding stale values (as reused rows do) replay the same
    mesh = noc.build_mesh(3, 3, "iq")
    count = 200
    rng = np.random.default_rng(7)
    src = rng.integers(0, 9, count)
    dst = (src + rng.integers(1, 9, count)) % 9
    seg = mesh.pair_seg[src, dst].astype(np.int32)
    size = np.full(count, 768, np.int64)
    births = np.sort(rng.uniform(0.0, 40.0, count))
    out = []
    for garbage in (False, True):
        pos = np.array([0, count], np.int64)  # the loop's resume point: it writes it back
        state = eng.make_state(mesh.net, count, 8 * eng.num_edges(mesh.net) + 4096, 8)
        if garbage:
            state.pi[:] = rng.integers(0, count, state.pi.shape)
        deliver = np.full(count, np.nan)
        eng.noc_loop(mesh.net, state, births, seg, size, deliver, pos, 0, count, np.inf)
        out.append((deliver, eng.edge_bytes(state)))
    assert not np.isnan(out[0][0]).any()
    assert np.array_equal(out[0][0], out[1][0])
    assert np.array_equal(out[0][1], out[1][1])


def test_long_packet_streams_at_the_bottleneck() -> None:
    # one packet of 64 flits over 3 links: head latency plus 63 flits of serialization
    mesh = noc.build_mesh(3, 1, "iq")
    deliver, _ = noc.simulate_packets(mesh, np.array([0.0]), np.array([0]), np.array([2]), 64)
    assert deliver[0] == 7 + 5 * 2 + 63


def test_edge_bytes_counts_granted_bytes() -> None:
    mesh = noc.build_mesh(2, 1, "oq")
    count = 10
    state = eng.make_state(mesh.net, count, 1024, 1)
    seg = np.full(count, mesh.pair_seg[0, 1], np.int32)
    size = np.full(count, 512, np.int64)
    deliver = np.full(count, np.nan)
    pos = np.array([0, count], np.int64)
    births = np.arange(count, dtype=np.float64)
    eng.noc_loop(mesh.net, state, births, seg, size, deliver, pos, 0, count, np.inf)
    path = mesh.net.seg_edge[mesh.net.seg_ptr[seg[0]]:mesh.net.seg_ptr[seg[0] + 1]]
    got = eng.edge_bytes(state)
    for e in path[1:]:  # the first edge is the virtual source queue
        assert got[e] == 10 * 512
