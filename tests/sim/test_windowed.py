"""Windowed scheduling (``SimOptions.windowed``, ``docs/simulator.md`` §6): one event queue per
GPU, run in windows of the shortest cross-GPU latency, replays the same model as the single
queue. What may differ is only the order of equal-time events of different GPUs; the replay
itself checks that no grant ran outside its GPU's queue and no event was posted into a window
already run (an internal error otherwise), so every case here also exercises those guards."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

from nuna.errors import UsageError
from nuna.passes import PassContext, apply_config
from nuna.plan.generate import generate
from nuna.sim import engine as eng
from nuna.sim import noc, simulate
from nuna.sim.network import build_pod_net
from nuna.sim.replay import (
    WINDOWED_BELOW_PACKET_BYTES,
    WINDOWED_FROM_GPUS,
    SimOptions,
    _window_for,
    _window_ns,
    load_kernels,
)
from nuna.topology.spec import load_topology
from tests.conftest import force_engine_state

WINDOWED = SimOptions(windowed=True)


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def _both(plan, spec, size: int, **kw):  # type: ignore[no-untyped-def]
    return simulate(plan, spec, size, **kw), simulate(plan, spec, size, options=WINDOWED, **kw)


def test_window_is_the_shorter_of_up_link_and_memory_access(spec) -> None:  # type: ignore[no-untyped-def]
    chip, su = spec.chip, spec.scaleup
    _, win = _both(generate("allgather", 2), spec, 4096)
    assert win.window_ns == pytest.approx(min(su.link_latency_ns, chip.memory_access_latency_ns))
    assert simulate(generate("allgather", 2), spec, 4096).window_ns == 0.0


@pytest.mark.parametrize(("collective", "ngpus", "kib"), [("allgather", 8, 1024), ("alltoall", 4, 256),
                                                         ("allreduce", 4, 512)])
def test_same_model_as_one_queue(spec, collective: str, ngpus: int, kib: int) -> None:  # type: ignore[no-untyped-def]
    seq, win = _both(generate(collective, ngpus), spec, kib * 1024)
    # every flit-hop is granted once whatever the order; bytes are conserved per GPU pair
    assert win.events == seq.events
    np.testing.assert_array_equal(win.landed_bytes, seq.landed_bytes)
    np.testing.assert_array_equal(win.port_egress_bytes, seq.port_egress_bytes)
    # one threadblock per peer leaves no equal-time events of different GPUs that matter here:
    # the collective's time is the same to the last bit (measured, not a property of every plan)
    assert win.time_ns == seq.time_ns
    assert win.remote_store_latency.max_ns == seq.remote_store_latency.max_ns


def test_deterministic(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 4, tbs_per_peer=4)
    a, b = (simulate(plan, spec, 300_000, options=WINDOWED).to_json() for _ in range(2))
    a.pop("wall_s")
    b.pop("wall_s")
    assert a == b


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(collective=st.sampled_from(["allgather", "alltoall", "allreduce", "reducescatter"]),
       ngpus=st.integers(2, 6), k=st.integers(1, 4), kib=st.integers(4, 512),
       config=st.sampled_from(["UA", "NAP+NAR", "NUMA+NAR"]), packet=st.sampled_from([256, 1024]))
def test_windowed_matches_one_queue(spec, collective: str, ngpus: int, k: int, kib: int,  # type: ignore[no-untyped-def]
                                    config: str, packet: int) -> None:
    size = kib * 1024
    plan = apply_config(generate(collective, ngpus, tbs_per_peer=k), config, PassContext(spec, size))
    seq, win = _both(plan, spec, size, packet_bytes=packet)
    assert win.events == seq.events
    np.testing.assert_array_equal(win.landed_bytes, win.sent_bytes)
    assert win.time_ns >= win.lower_bound_ns
    # equal-time events posted by other GPUs run after a GPU's own, by poster, instead of in
    # insertion order: small cases agree closely (0.7.0's GPU-order rule: 147 of 150 random
    # cases identical, the others within 0.04 %; a 16-GPU 10 MiB allgather moved by 0.8 %)
    assert win.time_ns == pytest.approx(seq.time_ns, rel=0.01)


def test_with_write_responses(spec) -> None:  # type: ignore[no-untyped-def]
    ack = load_topology("nuna-4die-ack")
    seq, win = _both(generate("allgather", 4, tbs_per_peer=2), ack, 256 * 1024)
    assert win.events == seq.events
    assert win.time_ns == pytest.approx(seq.time_ns, rel=0.01)


@njit
def _push(state, dom, cls, times):  # type: ignore[no-untyped-def]
    for i in range(dom.shape[0]):
        eng.ev_push_to(state, dom[i], cls[i], times[i], (i << 3) | eng.EV_WAKE)


@njit
def _pop_domain(net, state, g, out):  # type: ignore[no-untyped-def]
    state.ctr[eng.C_DOM] = g
    k = 0
    while state.qn[g, 0] + state.qn[g, 1] > 0:
        _, p = eng.ev_pop(net, state)
        out[k] = p >> 3
        k += 1
    return k


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(-1, 1), st.integers(0, 9)),
                min_size=1, max_size=120), st.booleans())
def test_each_domain_pops_its_own_events_in_order(ops: list[tuple[int, int, int]], grow: bool) -> None:
    """Per-domain queues (rings and heap) keep ``(time, insertion)`` order within a domain and
    never hand one domain's event to another, also across a heap that grows."""
    mesh = noc.build_mesh(2, 1)
    state = eng.make_state(mesh.net, 1, 16 + len(ops), 1, 3, 1)
    state.ctr[eng.C_QC] = 2  # rings of two slots (a power of two), so that pushes find them full
    dom = np.array([g for g, _, _ in ops], np.int64)
    cls = np.array([c for _, c, _ in ops], np.int64)
    t = np.array([t for _, _, t in ops], np.float64) * 0.5  # many ties on purpose
    _push(state, dom, cls, t)
    if grow:
        state = eng.grow_heap(state, 4 * eng.heap_capacity(state))
    assert eng.ev_count(state) == len(ops)
    for g in range(3):
        out = np.zeros(len(ops), np.int64)
        k = _pop_domain(mesh.net, state, g, out)
        mine = [i for i in range(len(ops)) if ops[i][0] == g]
        assert out[:k].tolist() == sorted(mine, key=lambda i: (ops[i][2], i))
    assert eng.ev_count(state) == 0


def test_not_with_a_trace(spec) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="trace"):
        simulate(generate("allgather", 2), spec, 4096, trace=True, options=WINDOWED)


def test_refuses_a_bounded_switch_buffer(spec) -> None:  # type: ignore[no-untyped-def]
    # the window is exact only if leaving the switch returns no credit to the sender's up-link
    net = build_pod_net(spec, 2)
    assert _window_ns(net, spec) > 0
    ei = net.net.ei.copy()
    ei[net.up, eng.EI_CAP] = 4096
    bounded = dataclasses.replace(net, net=net.net._replace(ei=ei))
    assert _window_ns(bounded, spec) is None
    with pytest.raises(UsageError, match="unbounded"):
        _window_for(True, 2, False, bounded, spec, 256)
    # by default such a pod replays with one queue, at any size
    assert _window_for(None, 64, False, bounded, spec, 256) == 0.0


def test_default_windows_from_16_gpus_unless_traced(spec) -> None:  # type: ignore[no-untyped-def]
    net = build_pod_net(spec, 2)
    window = _window_ns(net, spec)
    assert WINDOWED_FROM_GPUS == 16
    small, coarse = WINDOWED_BELOW_PACKET_BYTES // 2, WINDOWED_BELOW_PACKET_BYTES
    for ngpus in (2, 8, WINDOWED_FROM_GPUS - 1):
        assert _window_for(None, ngpus, False, net, spec, 256) == 0.0
        assert _window_for(True, ngpus, False, net, spec, 256) == window
    for ngpus in (WINDOWED_FROM_GPUS, 64):
        for psize in (256, small):
            assert _window_for(None, ngpus, False, net, spec, psize) == window
            assert _window_for(False, ngpus, False, net, spec, psize) == 0.0
            assert _window_for(None, ngpus, True, net, spec, psize) == 0.0  # a trace needs one queue
        # coarse packets replay faster with one queue, unless windows are forced
        assert _window_for(None, ngpus, False, net, spec, coarse) == 0.0
        assert _window_for(True, ngpus, False, net, spec, coarse) == window
    # and the replay follows it: SimOptions() leaves the choice to the simulator
    assert SimOptions().windowed is None
    plan = generate("allgather", WINDOWED_FROM_GPUS)
    untraced = simulate(plan, spec, 64 * 1024)
    assert untraced.window_ns == window
    assert not untraced.one_queue_for_trace
    traced = simulate(plan, spec, 64 * 1024, trace=True)
    assert traced.window_ns == 0.0
    assert traced.one_queue_for_trace  # the CLI says so beside the --json it wrote
    one_queue = simulate(plan, spec, 64 * 1024, trace=True, options=SimOptions(windowed=False))
    assert one_queue.window_ns == 0.0
    assert not one_queue.one_queue_for_trace  # asked for: the trace changed nothing
    assert not simulate(generate("allgather", 8), spec, 64 * 1024, trace=True).one_queue_for_trace
    coarse_res = simulate(plan, spec, 4 << 20, packet_bytes=WINDOWED_BELOW_PACKET_BYTES)
    assert coarse_res.packet_bytes == WINDOWED_BELOW_PACKET_BYTES
    assert coarse_res.window_ns == 0.0
    assert simulate(plan, spec, 4 << 20, packet_bytes=small).window_ns == window


@pytest.mark.parametrize("gemm_bytes", [0, 1_000_000])
def test_a_sweep_point_can_be_windowed(gemm_bytes: int) -> None:
    from nuna.experiments.gemm import gemm_point
    from nuna.experiments.points import simulate_point
    from nuna.experiments.spec import Point

    point = Point(collective="allgather", gpus=2, size_bytes=100_000, config="UA", nar_granularity=None,
                  tbs_per_peer=1, topology="nuna-4die", gemm_bytes=gemm_bytes, algo="direct",
                  packet_bytes=256, seed=0)
    run = gemm_point if gemm_bytes else simulate_point
    plain, windowed = run(point.as_dict()), run(dataclasses.replace(point, windowed=True).as_dict())
    assert plain["window_ns"] == 0.0
    assert windowed["window_ns"] > 0.0
    assert windowed["events"] == plain["events"]
    # and forced off at a pod size the simulator would window by default
    big = dataclasses.replace(point, gpus=16, size_bytes=64 * 1024)
    assert run(big.as_dict())["window_ns"] > 0.0
    assert run(dataclasses.replace(big, windowed=False).as_dict())["window_ns"] == 0.0


def test_a_window_wider_than_the_lookahead_is_caught(spec, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    # the replay's own check: with 2 us windows, flits reach the switch inside a window the
    # receiver has already run
    from nuna.errors import SimulationError
    from nuna.sim import replay

    monkeypatch.setattr(replay, "_window_ns", lambda net, spec: 2000.0)
    with pytest.raises(SimulationError, match="not exact"):
        simulate(generate("allgather", 4, tbs_per_peer=2), spec, 256 * 1024, options=WINDOWED)


def test_rings_are_sized_from_the_packets_in_flight() -> None:
    # a ring's head moves round all its slots, so all of them become resident: sized from the
    # packet slots, 64 domains' rings took 2.3 GB at 1 GiB (docs/simulator.md §6)
    mesh = noc.build_mesh(2, 1)
    slots = lambda s: s.fq.shape[0] // s.fqs.shape[0]  # noqa: E731
    assert slots(eng.make_state(mesh.net, 100_000, 64, 1, 4, 1)) == 1 << (25_000).bit_length()
    assert slots(eng.make_state(mesh.net, 100_000, 64, 1, 4, 1, in_flight=1_000)) == 256
    assert slots(eng.make_state(mesh.net, 100_000, 64, 1, 4, 1, in_flight=1)) == 16
    # the replay passes its own estimate of a class's arrivals, apart from the outboxes' size
    state = eng.make_state(mesh.net, 100_000, 64, 1, 4, 1, in_flight=100_000, ring_events=1_000)
    assert slots(state) == 1024
    default = eng.make_state(mesh.net, 100_000, 64, 1, 4, 1, in_flight=100_000)
    assert state.ctr[eng.C_OBCAP] == default.ctr[eng.C_OBCAP]


@pytest.mark.parametrize("windowed", [False, True])
def test_the_replay_sizes_its_rings_from_the_jobs_its_cus_hold(spec, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                               windowed: bool) -> None:
    # two packets per job a CU's 700 request slots hold (jobs of 4 lines here), and the same
    # replay as with the rings sized from the packet pool
    make_state = eng.make_state
    seen: list[int] = []

    def record(*a: Any, **k: Any) -> Any:
        seen.append(k["ring_events"])
        return make_state(*a, **k)

    plan = generate("allgather", 4, tbs_per_peer=4)
    options = SimOptions(windowed=windowed)
    from nuna.sim import replay

    monkeypatch.setattr(replay.eng, "make_state", record)
    sized = simulate(plan, spec, 4 << 20, packet_bytes=1024, options=options)
    # a GPU sends 3 x 1 MiB in at least 3,072 jobs from 12 CUs (a threadblock each) of 175 jobs
    per_gpu = min(3 * (1 << 20) // 1024, 12 * 175)
    assert seen == [2 * per_gpu * (1 if windowed else 4)]
    force_engine_state(monkeypatch, replay, ring_events=0)
    assert _json(simulate(plan, spec, 4 << 20, packet_bytes=1024, options=options)) == _json(sized)


def _same_replay_with(spec, monkeypatch: pytest.MonkeyPatch, windowed: bool,  # type: ignore[no-untyped-def]
                      **engine_patches: Any) -> None:
    """A 4-GPU allgather replays to the same bit with ``engine_patches`` set on the replay's
    engine functions as without them."""
    from nuna.sim import replay

    plan = generate("allgather", 4, tbs_per_peer=4)
    options = SimOptions(windowed=windowed)
    plain = simulate(plan, spec, 512 * 1024, options=options)
    for name, patch in engine_patches.items():
        monkeypatch.setattr(replay.eng, name, patch)
    patched = simulate(plan, spec, 512 * 1024, options=options)
    assert patched.events == plain.events
    assert patched.time_ns == plain.time_ns
    assert patched.remote_store_latency.mean_ns == plain.remote_store_latency.mean_ns


@pytest.mark.parametrize("windowed", [False, True])
def test_full_rings_spill_into_the_heap_exactly(spec, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                 windowed: bool) -> None:
    # rings too small for the packets in flight leave their events to the heap, in the same
    # (time, insertion) order
    make_state = eng.make_state
    _same_replay_with(spec, monkeypatch, windowed,
                      # 16 slots per ring (the replay sizes rings by ring_events; in_flight did
                      # not shrink them, so this test never filled one before 2026-12-06)
                      make_state=lambda *a, **k: make_state(*a[:6], **{**k, "ring_events": 1}))


@pytest.mark.parametrize("windowed", [False, True])
def test_a_heap_grown_mid_replay_resumes_exactly(spec, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                 windowed: bool) -> None:
    # the loop returns NEED_HEAP when a heap nears its capacity and is called again on a grown
    # copy; windowed, the window it was in restarts at the earliest pending event
    margin = 16 * spec.chip.max_outstanding_requests_per_cu + 16 * 1024  # the loop's reserve
    make_state, grow_heap = eng.make_state, eng.grow_heap
    grown: list[int] = []
    _same_replay_with(spec, monkeypatch, windowed,
                      make_state=lambda net, packets, heap, *a, **k: make_state(net, packets, margin + 64,
                                                                                *a, **k),
                      grow_heap=lambda st, n: grown.append(n) or grow_heap(st, n))
    assert grown  # the heap did grow during the replay


def _json(result) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    out = result.to_json()
    out.pop("wall_s")
    return out


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(collective=st.sampled_from(["allgather", "alltoall", "allreduce", "reducescatter"]),
       ngpus=st.integers(2, 6), k=st.integers(1, 4), kib=st.integers(4, 512),
       config=st.sampled_from(["UA", "NAP+NAR"]), packet=st.sampled_from([256, 1024]))
def test_threads_do_not_change_the_result(spec, collective: str, ngpus: int, k: int,  # type: ignore[no-untyped-def]
                                          kib: int, config: str, packet: int) -> None:
    # within a window the GPUs are independent; their posts to each other wait in outboxes
    # until the window's end and are ordered by poster, not by when they are delivered
    size = kib * 1024
    plan = apply_config(generate(collective, ngpus, tbs_per_peer=k), config, PassContext(spec, size))
    one, two = (simulate(plan, spec, size, packet_bytes=packet, options=SimOptions(windowed=True, threads=n))
                for n in (1, 2))
    assert _json(one) == _json(two)


def test_threads_must_be_positive(spec) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="threads"):
        simulate(generate("allgather", 2), spec, 4096, options=SimOptions(windowed=True, threads=0))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_full_outbox_cuts_the_window_exactly(spec, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                               threads: int) -> None:
    # a domain whose outbox nears its end stops its window early and the next window starts at
    # the earliest pending event: the same replay to the bit, however often it happens
    make_state = eng.make_state
    cut: list[int] = []

    def small_outbox(*a: Any, **k: Any) -> Any:
        st = make_state(*a, **k)
        st.ctr[eng.C_OBLIM] = st.dctr[:, eng.C_OBLIM] = 1  # a window ends after 2 posts
        cut.append(1)
        return st

    plan = generate("allgather", 4, tbs_per_peer=4)
    options = SimOptions(windowed=True, threads=threads)
    plain = simulate(plan, spec, 512 * 1024, options=options)
    from nuna.sim import replay

    monkeypatch.setattr(replay.eng, "make_state", small_outbox)
    patched = simulate(plan, spec, 512 * 1024, options=options)
    assert cut
    assert _json(patched) == _json(plain)


def test_too_many_domains_for_the_event_keys() -> None:
    mesh = noc.build_mesh(2, 1)
    with pytest.raises(ValueError, match="domains"):
        eng.make_state(mesh.net, 1, 64, 1, eng.MAX_DOMAINS + 1, 1)


def _record_loops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the compiled loops the replay calls from now on, in call order."""
    calls: list[str] = []
    for name in ("_loop_one_queue", "_loop_windowed"):
        loop = getattr(eng, name)

        def record(*args: Any, _loop: Any = loop, _name: str = name) -> Any:
            calls.append(_name)
            return _loop(*args)

        monkeypatch.setattr(eng, name, record)
    return calls


@pytest.mark.parametrize("windowed", [False, True])
def test_each_mode_calls_only_its_own_compiled_loop(spec, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                    windowed: bool) -> None:
    # the two loops are separate entry points so that a first replay compiles only its own
    # (docs/simulator.md §6, "Two compiled loops"): the other must not be reached
    calls = _record_loops(monkeypatch)
    res = simulate(generate("allgather", 2), spec, 4096, options=SimOptions(windowed=windowed))
    assert res.window_ns > 0.0 if windowed else res.window_ns == 0.0
    assert calls
    assert set(calls) == {"_loop_windowed" if windowed else "_loop_one_queue"}


def test_load_kernels_reaches_both_compiled_loops(spec, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    # benchmarks call it before a timed replay, so that replay never compiles or loads its loop
    calls = _record_loops(monkeypatch)
    load_kernels(spec)
    assert set(calls) == {"_loop_one_queue", "_loop_windowed"}

