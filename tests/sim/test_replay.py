"""Fidelity of the replay: exact uncontended latencies, bandwidth-bound transfers, conservation
of bytes, the alpha-beta lower bound, determinism, NAR routing and deadlock reports."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna.errors import SimulationError, UsageError
from nuna.passes import PassContext, apply_config
from nuna.plan.generate import generate
from nuna.plan.ir import Buffer, ChunkPlacement, Placement, Plan, TbPlacement
from nuna.plan.xml import loads
from nuna.sim import SimOptions, placement_bounds, simulate
from nuna.topology.address import io_port, nar_domain_ports, physical_address, stack_domain
from nuna.topology.geometry import chip_geometry, pod_layout
from nuna.topology.spec import load_topology


def _step(s: int, kind: str, src: int, dst: int) -> str:
    return (f'<step s="{s}" type="{kind}" srcbuf="o" srcoff="{src}" dstbuf="o" dstoff="{dst}" cnt="1" '
            f'depid="-1" deps="-1" hasdep="0"/>')


def _plan_xml(name: str, tb0: str, steps0: list[str], tb1: str, steps1: list[str]) -> str:
    head = (f'<algo name="{name}" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" '
            f'coll="allgather" inplace="1">')
    gpus = []
    for g, tb, steps in ((0, tb0, steps0), (1, tb1, steps1)):
        gpus.append(f'<gpu id="{g}" i_chunks="0" o_chunks="2" s_chunks="0"><tb id="0" {tb} chan="0">'
                    + "".join(steps) + "</tb></gpu>")
    return head + "".join(gpus) + "</algo>"


# gpu 0 sends o[0] into o[1] of gpu 1
ONE_SEND = _plan_xml("one", 'send="1" recv="-1"', [_step(0, "s", 0, 1)],
                     'send="-1" recv="0"', [_step(0, "r", 0, 1)])
# each gpu receives before it sends: a cycle through both
DEADLOCK = _plan_xml("dl", 'send="1" recv="1"', [_step(0, "r", 1, 1), _step(1, "s", 0, 0)],
                     'send="0" recv="0"', [_step(0, "r", 0, 0), _step(1, "s", 1, 1)])


def _one_flit(cu: int, src_stack: int, dst_stack: int) -> Plan:
    """ONE_SEND with its threadblock on ``cu``, its source chunk on ``src_stack`` of GPU 0 and
    its destination chunk on ``dst_stack`` of GPU 1."""
    placement = Placement(threadblocks=(TbPlacement(0, 0, cu),),
                          chunks=(ChunkPlacement(0, Buffer.OUTPUT, 0, src_stack),
                                  ChunkPlacement(1, Buffer.OUTPUT, 1, dst_stack)))
    return dataclasses.replace(loads(ONE_SEND), placement=placement)


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cu=st.integers(0, 1007), src_stack=st.integers(0, 15), dst_stack=st.integers(0, 15))
def test_uncontended_flit_takes_the_sum_of_its_path_latencies(  # type: ignore[no-untyped-def]
        spec, cu: int, src_stack: int, dst_stack: int) -> None:
    # one 256-byte chunk: load it (request, memory access, data back), store it remotely
    res = simulate(_one_flit(cu, src_stack, dst_stack), spec, 512)
    geo = chip_geometry(spec.chip)
    layout = pod_layout(spec, 2)
    mem = spec.chip.memory_access_latency_ns
    # the destination chunk is byte 256 of the only page of gpu 1, the first page on its stack
    port = io_port(spec, physical_address(spec, dst_stack, 0, 256), None)
    load = geo.cu_stack.latency_ns[cu, src_stack] + mem + geo.stack_cu.latency_ns[src_stack, cu]
    lat = layout.edge_latency_ns
    cable = lat[layout.up_edge(0, port)] + lat[layout.down_edge(1, port)]
    store = geo.cu_port.latency_ns[cu, port] + cable + geo.port_stack.latency_ns[port, dst_stack] + mem
    assert res.remote_store_latency.count == 1
    assert res.remote_store_latency.max_ns == pytest.approx(store, abs=1e-6)
    assert res.time_ns == pytest.approx(load + store, abs=1e-6)
    assert res.port_egress_bytes[0, port] == 256
    assert res.port_egress_bytes.sum() == 256
    # alone in the network, no head ever waits
    assert sum(q["total"] for q in res.queueing.values()) == pytest.approx(0.0, abs=1e-6)
    # and the store's zero-load parts are its route's, adding up to its latency
    parts = res.remote_store_zero_load_ns
    assert parts["sender_chip"] == pytest.approx(geo.cu_port.latency_ns[cu, port], abs=1e-9)
    assert parts["scale_up"] == pytest.approx(cable, abs=1e-9)
    assert parts["receiver_chip"] == pytest.approx(geo.port_stack.latency_ns[port, dst_stack], abs=1e-9)
    assert parts["memory_write"] == mem
    assert parts["total"] == pytest.approx(res.remote_store_latency.mean_ns, abs=1e-6)


@pytest.fixture(scope="module")
def ack_spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die-ack")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cu=st.integers(0, 1007), src_stack=st.integers(0, 15), dst_stack=st.integers(0, 15))
def test_a_store_completes_when_its_write_response_is_back(  # type: ignore[no-untyped-def]
        spec, ack_spec, cu: int, src_stack: int, dst_stack: int) -> None:
    # the uncontended flit above: with write responses its send step ends one trip back later
    # (the store's route without the memory access), while the data lands when it did
    plan = _one_flit(cu, src_stack, dst_stack)
    landing = simulate(plan, spec, 512)
    response = simulate(plan, ack_spec, 512)
    store = landing.remote_store_latency.max_ns
    back = store - spec.chip.memory_access_latency_ns
    assert response.remote_store_latency.max_ns == pytest.approx(store, abs=1e-6)
    assert response.time_ns == pytest.approx(landing.time_ns + back, abs=1e-6)
    assert response.events == landing.events


def test_write_responses_slow_a_cu_bound_by_its_request_slots(spec, ack_spec) -> None:  # type: ignore[no-untyped-def]
    """One sending CU per GPU moves at most its 700 slots per slot hold (Little's law): a
    response's way back lengthens the hold, so the same traffic takes longer, by at most the
    ratio of the holds."""
    plan = generate("allgather", 2, algo="direct", tbs_per_peer=1)
    landing = simulate(plan, spec, 16 << 20)
    response = simulate(plan, ack_spec, 16 << 20)
    np.testing.assert_array_equal(landing.landed_bytes, response.landed_bytes)
    assert response.events == landing.events
    hold = landing.remote_store_latency.mean_ns
    back = hold - spec.chip.memory_access_latency_ns
    assert response.time_ns > 1.2 * landing.time_ns
    assert response.time_ns < landing.time_ns * (hold + back) / hold


def test_queueing_report_counts_every_grant_and_finds_the_bottleneck(spec) -> None:  # type: ignore[no-untyped-def]
    # latency-bound: one threadblock per peer, 100 kB; bandwidth-bound: 16 per peer, 16 MB
    small = simulate(generate("allgather", 2, tbs_per_peer=1), spec, 100_000)
    big = simulate(generate("allgather", 2, tbs_per_peer=16), spec, 16_000_000)
    for res in (small, big):
        assert sum(q["grants"] for q in res.queueing.values()) == res.events
        assert all(q["total"] >= -1e-6 and q["mean"] == pytest.approx(q["total"] / q["grants"])
                   for q in res.queueing.values())
    # saturated ports queue their traffic in the routers before them, and much more per line
    # than an idle network does
    assert big.queueing["mesh_to_port"]["mean"] > 10 * max(1.0, small.queueing["mesh_to_port"]["mean"])
    assert big.queueing["mesh_to_port"]["mean"] > big.queueing["mesh_to_hbm"]["mean"]


def test_large_transfer_is_bandwidth_bound() -> None:
    flat = load_topology("flat-switch")
    size = 8 << 20
    plan = generate("allgather", 2, tbs_per_peer=1)
    res = simulate(plan, flat, size)
    link = flat.scaleup.link_bandwidth_gbps
    alpha = 2 * flat.scaleup.link_latency_ns + flat.scaleup.switch_latency_ns
    ideal = alpha + (size // 2) / link
    assert res.time_ns == pytest.approx(ideal, rel=0.01)
    assert res.time_ns >= res.placement_floor_ns >= res.lower_bound_ns


def _shortest_load_and_remote_store_ns(spec) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    geo = chip_geometry(spec.chip)
    access = spec.chip.memory_access_latency_ns
    load = (geo.cu_stack.latency_ns + geo.stack_cu.latency_ns.T).min() + access
    remote = ((geo.cu_port.latency_ns.min(axis=0) + geo.port_stack.latency_ns.min(axis=1)).min()
              + spec.scaleup.one_way_latency_ns + access)
    return float(load), float(remote)


@pytest.mark.parametrize("config", ["UA", "NAP+NAR"])
@pytest.mark.parametrize("tbs_per_peer", [1, 8])
def test_placement_floor_is_a_load_before_the_ports_or_one_send_at_its_best(  # type: ignore[no-untyped-def]
        spec, config: str, tbs_per_peer: int) -> None:
    # every sent byte is loaded first. So no placement beats (a) the lower bound plus the
    # shortest load round trip (on nuna-4die the nearest CU-to-port path and the best
    # port-to-stack path meet at one port), nor (b) one send step at its best: a load, a
    # remote store, and its other bytes through its CU's link. With 1 threadblock per peer a
    # step is 16 KiB and (b) is the larger, with 8 (2 KiB steps) (a) is
    load, remote = _shortest_load_and_remote_store_ns(spec)
    size = 64 * 1024
    step_bytes = size // 4 // tbs_per_peer
    plan = apply_config(generate("allgather", 4, tbs_per_peer=tbs_per_peer), config, PassContext(spec, size))
    res = simulate(plan, spec, size)
    one_send = load + remote + (step_bytes - spec.chip.flit_bytes) / spec.chip.cu_link_bandwidth_gbps
    assert res.placement_floor_ns == pytest.approx(max(res.lower_bound_ns + load, one_send))
    assert (one_send > res.lower_bound_ns + load) == (tbs_per_peer == 1)
    assert res.time_ns > res.placement_floor_ns
    assert res.to_json()["placement_floor_ns"] == res.placement_floor_ns


def test_placement_floor_counts_the_request_window_of_a_long_step(spec) -> None:  # type: ignore[no-untyped-def]
    # one threadblock per peer moving 5 MiB: its CU holds at most 700 lines in flight, each
    # for at least a load and a remote store, so the step takes 30 such rounds (20,480 lines)
    # at least, longer than its bytes through the CU's link
    load, remote = _shortest_load_and_remote_store_ns(spec)
    size = 10 << 20
    res = simulate(generate("allgather", 2, tbs_per_peer=1), spec, size)
    lines = size // 2 // spec.chip.flit_bytes
    rounds = -(-lines // spec.chip.max_outstanding_requests_per_cu)
    assert rounds * (load + remote) > (size // 2) / spec.chip.cu_link_bandwidth_gbps
    assert res.placement_floor_ns == pytest.approx(rounds * (load + remote))
    assert res.time_ns > res.placement_floor_ns


def test_placement_floor_follows_the_dependencies(spec) -> None:  # type: ignore[no-untyped-def]
    # a ring allgather forwards each chunk n - 1 times, each forward after the previous landed:
    # n - 1 sends at their best in a row, far more than the lower bound plus one load
    load, remote = _shortest_load_and_remote_store_ns(spec)
    ngpus = 4
    res = simulate(generate("allgather", ngpus, algo="ring"), spec, 64 * 1024)
    assert res.placement_floor_ns >= (ngpus - 1) * (load + remote)
    assert res.placement_floor_ns > 2 * (res.lower_bound_ns + load)
    assert res.time_ns > res.placement_floor_ns


@pytest.mark.parametrize(("collective", "algo", "packet"), [("allgather", "direct", 256),
                                                          ("allreduce", "direct", "auto"),
                                                          ("allgather", "ring", 1024)])
def test_placement_bounds_without_a_replay_are_the_replays_and_ignore_placement(  # type: ignore[no-untyped-def]
        spec, collective: str, algo: str, packet: int | str) -> None:
    size = 192 * 1024
    plan = generate(collective, 3, algo=algo)
    for config in ("UA", "NAP+NAR"):
        placed = apply_config(plan, config, PassContext(spec, size))
        res = simulate(placed, spec, size, packet_bytes=packet)  # type: ignore[arg-type]
        assert placement_bounds(placed, spec, size, packet_bytes=packet) == (  # type: ignore[arg-type]
            res.lower_bound_ns, res.placement_floor_ns)
    assert placement_bounds(placed, spec, size, packet_bytes=packet) == placement_bounds(  # type: ignore[arg-type]
        plan, spec, size, packet_bytes=packet)  # type: ignore[arg-type]


# (the direct reduce-scatter and allreduce of 5 and 4 GPUs end in chains of fused re steps)
CASES = [("allgather", "direct", 2), ("allgather", "ring", 3), ("alltoall", "direct", 3),
         ("reducescatter", "direct", 3), ("allreduce", "direct", 2), ("allreduce", "ring", 3),
         ("reducescatter", "direct", 5), ("allreduce", "direct", 4)]


@pytest.mark.parametrize(("collective", "algo", "ngpus"), CASES)
def test_bytes_sent_equal_bytes_landed(spec, collective: str, algo: str, ngpus: int) -> None:  # type: ignore[no-untyped-def]
    plan = generate(collective, ngpus, algo=algo)
    res = simulate(plan, spec, 96 * 1024)
    np.testing.assert_array_equal(res.landed_bytes, res.sent_bytes)
    assert res.remote_bytes == int(res.sent_bytes.sum())
    assert int(res.port_egress_bytes.sum()) == int(res.sent_bytes.sum())
    assert int(res.port_ingress_bytes.sum()) == int(res.sent_bytes.sum())
    assert np.isfinite(res.node_t_end).all()
    hops = res.noc_hops
    # a remote store's hops are its sender's (CU -> I/O port) plus its receiver's (port -> HBM)
    assert hops["remote_store_sender_mean"] + hops["remote_store_receiver_mean"] == pytest.approx(
        hops["remote_store_mean"])
    assert min(hops["remote_store_sender_mean"], hops["remote_store_receiver_mean"]) > 0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(CASES), k=st.integers(1, 2), kib=st.integers(4, 256),
       packet=st.sampled_from([256, 1024, "auto"]))
def test_never_below_the_lower_bound(spec, case: tuple[str, str, int], k: int, kib: int,  # type: ignore[no-untyped-def]
                                     packet: int | str) -> None:
    collective, algo, ngpus = case
    plan = generate(collective, ngpus, algo=algo, **({"tbs_per_peer": k} if algo == "direct" else {}))
    res = simulate(plan, spec, kib * 1024, packet_bytes=packet)  # type: ignore[arg-type]
    assert res.lower_bound_ns > 0
    assert res.lower_bound_ns <= res.placement_floor_ns <= res.time_ns
    # the queueing report accounts for every grant, and no head waits a negative time
    assert sum(q["grants"] for q in res.queueing.values()) == res.events
    assert min(q["total"] for q in res.queueing.values()) >= 0.0
    # no remote store is faster than its route without waiting: the mean is at least the
    # zero-load parts' mean, which add up (a plan without remote stores has none)
    parts = res.remote_store_zero_load_ns
    if res.remote_store_latency.count:
        assert res.remote_store_latency.mean_ns >= parts["total"] - 1e-6
        assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))
    else:
        assert parts == {}


def test_same_inputs_same_json(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 4, tbs_per_peer=2)
    a, b = (simulate(plan, spec, 200_000).to_json() for _ in range(2))
    assert a.pop("wall_s") >= 0
    assert b.pop("wall_s") >= 0
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_the_event_loops_seconds_are_part_of_the_wall_time_and_kept_out_of_the_json(spec) -> None:  # type: ignore[no-untyped-def]
    res = simulate(generate("allgather", 4, tbs_per_peer=2), spec, 200_000)
    assert 0.0 < res.loop_s <= res.wall_s
    assert "loop_s" not in res.to_json()  # a measurement: the JSON's one varying key stays wall_s


def test_nar_keeps_stores_on_the_destination_stack_domain(spec) -> None:  # type: ignore[no-untyped-def]
    # every destination page on stack 5; NAR with one port per domain: one port carries all
    plan = generate("allgather", 2, tbs_per_peer=2)
    chunks = tuple(ChunkPlacement(g, Buffer.OUTPUT, c, 5)
                   for g in range(2) for c in range(plan.nchunksperloop))
    for g in (12, None):
        placed = dataclasses.replace(plan, placement=Placement(nar_granularity=g, chunks=chunks))
        res = simulate(placed, spec, 64 * 1024)
        used = set(np.flatnonzero(res.port_egress_bytes.sum(axis=0)).tolist())
        if g == 12:
            assert used == set(nar_domain_ports(spec, 12)[stack_domain(spec, 12, 5)])
        else:
            assert len(used) > 6  # the baseline hash spreads over the ports


def test_more_packets_in_flight_do_not_change_bytes(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("alltoall", 3)
    small = simulate(plan, spec, 300_000)
    big = simulate(plan, spec, 300_000, packet_bytes=4096)
    assert big.packet_bytes == 4096
    np.testing.assert_array_equal(small.landed_bytes, big.landed_bytes)
    assert big.jobs < small.jobs
    assert big.time_ns == pytest.approx(small.time_ns, rel=0.25)


def test_packets_keep_a_window_limited_cu_as_fast_as_flits(spec) -> None:  # type: ignore[no-untyped-def]
    """One sending CU per GPU is limited by its 700 request slots (docs/simulator.md §5): a packet
    must give its slots back when its head lands, as its lines would as flits, and report the
    head's latency. Holding half of them through the drain made 16 KiB packets 7.5% slow here
    (64 KiB 10%), and the drain's midpoint put the 64 KiB latency 11% high."""
    plan = generate("allgather", 2, algo="direct", tbs_per_peer=1)
    flits = simulate(plan, spec, 8_000_000)
    mid = simulate(plan, spec, 8_000_000, packet_bytes=16384)
    big = simulate(plan, spec, 8_000_000, packet_bytes=65536)
    assert mid.time_ns == pytest.approx(flits.time_ns, rel=0.04)
    assert big.time_ns == pytest.approx(flits.time_ns, rel=0.07)
    lat = flits.remote_store_latency.mean_ns
    assert big.remote_store_latency.mean_ns == pytest.approx(lat, rel=0.03)


def test_deadlock_names_the_blocked_threadblocks(spec) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SimulationError, match="deadlock") as info:
        simulate(loads(DEADLOCK), spec, 512)
    message = str(info.value)
    assert "gpu 0 tb 0 step 0 (r) waits for data from gpu 1 tb 0 step 1 (s)" in message
    assert "\n" not in message


def test_operand_outside_its_buffer_is_rejected(spec) -> None:  # type: ignore[no-untyped-def]
    # executors check only the start offset; the replay must check the whole range
    plan = loads(ONE_SEND)
    gpu1 = dataclasses.replace(plan.gpus[1], output_chunks=1)
    message = r"gpu 1 tb 0 step 0 \(r\) writes o\[1..2\), outside its buffer of 1 chunks"
    with pytest.raises(SimulationError, match=message):
        simulate(dataclasses.replace(plan, gpus=(plan.gpus[0], gpu1)), spec, 512)


def _operand_problem(plan: Plan) -> str | None:
    """The definition: the first step, reads before writes, whose operand leaves its buffer."""
    from nuna.plan.dag import flatten
    flat = flatten(plan)
    chunks = {g.id: (g.input_chunks, g.output_chunks, g.scratch_chunks) for g in plan.gpus}
    reads = {"s", "rrc", "rrs", "rrcs", "cpy", "re"}
    writes = {"r", "rcs", "rrc", "rrcs", "cpy", "re"}
    codes = {"i": 0, "o": 1, "s": 2}
    for which, names, side in (("reads", reads, "src"), ("writes", writes, "dst")):
        for n in range(flat.num_nodes):
            g, t, k = flat.step_pos(n)
            gpu = plan.gpus[g]
            step = gpu.threadblocks[t].steps[k]
            if step.type.value not in names or step.count <= 0:
                continue
            buf, off = getattr(step, f"{side}_buffer"), getattr(step, f"{side}_offset")
            if buf is None or off is None or off < 0 or off + step.count > chunks[gpu.id][codes[buf.value]]:
                return f"{flat.step_name(n)} {which}"
    return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_operand_checks_report_the_first_step_outside_its_buffer(spec, data) -> None:  # type: ignore[no-untyped-def]
    """``_check_operands`` (vectorised) against its definition written out step by step, on plans
    whose buffers are shrunk or whose offsets are moved, 64-bit extremes included (an
    ``off + cnt`` that would wrap in int64 must still be refused)."""
    from nuna.plan.dag import flatten
    from nuna.sim.replay import _check_operands
    plan = generate(data.draw(st.sampled_from(["allgather", "alltoall", "allreduce"])), 3)
    gpus = list(plan.gpus)
    for _ in range(data.draw(st.integers(0, 3))):
        g = data.draw(st.integers(0, len(gpus) - 1))
        field = data.draw(st.sampled_from(["input_chunks", "output_chunks", "scratch_chunks"]))
        gpus[g] = dataclasses.replace(gpus[g], **{field: data.draw(st.integers(0, getattr(gpus[g], field)))})
    if data.draw(st.booleans()):
        g = data.draw(st.integers(0, len(gpus) - 1))
        tbs = list(gpus[g].threadblocks)
        t = data.draw(st.integers(0, len(tbs) - 1))
        steps = list(tbs[t].steps)
        k = data.draw(st.integers(0, len(steps) - 1))
        side = data.draw(st.sampled_from(["src_offset", "dst_offset"]))
        if getattr(steps[k], side) is not None:
            off = data.draw(st.sampled_from([-1, 0, 1, 5, 2**62, 2**63 - 1]))
            steps[k] = dataclasses.replace(steps[k], **{side: off})
            if off >= 2**62:
                steps[k] = dataclasses.replace(steps[k], count=2**62)
            tbs[t] = dataclasses.replace(tbs[t], steps=tuple(steps))
            gpus[g] = dataclasses.replace(gpus[g], threadblocks=tuple(tbs))
    plan = dataclasses.replace(plan, gpus=tuple(gpus))
    flat = flatten(plan)
    expected = _operand_problem(plan)
    if expected is None:
        _check_operands(flat, plan, flat.tb_gpu[flat.node_tb].astype(np.int64))
    else:
        with pytest.raises(SimulationError) as info:
            _check_operands(flat, plan, flat.tb_gpu[flat.node_tb].astype(np.int64))
        assert str(info.value).startswith(expected + " ")


@pytest.mark.parametrize("packet", [0, 100, 300, True])
def test_bad_packet_size(spec, packet: object) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="packet size"):
        simulate(loads(ONE_SEND), spec, 512, packet_bytes=packet)  # type: ignore[arg-type]


@pytest.mark.parametrize("bin_ns", [0.0, -1.0, float("nan"), float("inf"), "1"])
def test_bad_latency_histogram_is_a_usage_error(spec, bin_ns: float) -> None:  # type: ignore[no-untyped-def]
    # the replay kernels divide by the bin width unchecked (numba's numpy error model)
    with pytest.raises(UsageError, match="latency histogram"):
        simulate(loads(ONE_SEND), spec, 512, options=SimOptions(hist_bin_ns=bin_ns))


@pytest.mark.parametrize(("field", "value"), [
    ("credit_ring", 0), ("credit_ring", -1), ("issue_queue", -1), ("request_bytes", 0), ("element_bytes", 0),
    ("auto_max_jobs", 0), ("trace_samples", 0), ("trace_samples", 1), ("threads", 0), ("credit_ring", 2.0),
    ("issue_queue", True), ("hist_bins", 0),
    # above the bounds: before, hist_bins and trace_samples of 2**40 and credit_ring of 2**20
    # raised MemoryError (8 TiB, 8 TiB, 257 GiB at 2 GPUs); 2**62-byte requests replayed a 2-GPU
    # 4 KiB allgather in the time of 64-byte ones (int64 byte sums overflow)
    ("hist_bins", (1 << 20) + 1), ("credit_ring", 65), ("trace_samples", (1 << 16) + 1),
    ("request_bytes", (1 << 40) + 1), ("element_bytes", 1025), ("issue_queue", (1 << 40) + 1),
    ("auto_max_jobs", (1 << 40) + 1), ("threads", (1 << 16) + 1),
])
def test_bad_option_is_a_usage_error_naming_it(spec, field: str, value: object) -> None:  # type: ignore[no-untyped-def]
    # before: a ring of no credit slots replayed into a "deadlock", an element of 0 bytes divided
    # by zero before its check, and with no trace samples the kernel's first sample would have
    # been written past the buffer's end (its indexing is unchecked)
    opts = SimOptions(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=rf"SimOptions\.{field} must be an integer from"):
        simulate(loads(ONE_SEND), spec, 512, trace=field == "trace_samples", options=opts)
    with pytest.raises(UsageError, match=rf"SimOptions\.{field}"):
        placement_bounds(loads(ONE_SEND), spec, 512, options=opts)


def test_busbw_uses_the_nccl_tests_factors(spec) -> None:  # type: ignore[no-untyped-def]
    for collective, factor in (("allgather", 3 / 4), ("allreduce", 2 * 3 / 4), ("alltoall", 3 / 4)):
        res = simulate(generate(collective, 4), spec, 64 * 1024)
        assert res.busbw_gbps == pytest.approx(res.algbw_gbps * factor)
        assert res.algbw_gbps == pytest.approx(64 * 1024 / res.time_ns)


@settings(max_examples=200, deadline=None)
@given(lines=st.integers(0, 10**9), jobs=st.integers(1, 10**7), cap_lines=st.sampled_from([1, 2, 16, 256]))
def test_auto_packets_are_the_smallest_within_the_job_budget_and_the_cap(lines: int, jobs: int,
                                                                         cap_lines: int) -> None:
    from nuna.sim.replay import auto_packet_bytes

    line = 256
    opts = SimOptions(auto_max_jobs=jobs, max_packet_bytes=cap_lines * line)
    size = auto_packet_bytes(lines, line, opts)
    m = size // line
    assert size % line == 0
    assert m & (m - 1) == 0
    assert m <= cap_lines
    assert m == cap_lines or lines <= jobs * m  # within the budget unless capped
    assert m == 1 or lines > jobs * (m // 2)  # and no larger than the budget needs


def test_auto_packets_respect_the_cap_and_a_bad_cap_is_a_usage_error(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 4)
    size = 4 << 20  # 49,152 lines to move: 400 jobs need packets of 128 lines
    free = simulate(plan, spec, size, packet_bytes="auto", options=SimOptions(auto_max_jobs=400))
    capped = simulate(plan, spec, size, packet_bytes="auto",
                      options=SimOptions(auto_max_jobs=400, max_packet_bytes=4096))
    assert free.packet_bytes == 32768
    assert capped.packet_bytes == 4096
    assert capped.jobs > free.jobs
    fixed = simulate(plan, spec, size, packet_bytes=4096)
    assert capped.time_ns == fixed.time_ns  # the cap only chooses the size
    for bad in (3000, 768, 0):
        with pytest.raises(UsageError, match="power-of-two multiple"):
            simulate(plan, spec, size, packet_bytes="auto", options=SimOptions(max_packet_bytes=bad))
    # a fixed packet size does not consult the cap
    fixed_512 = simulate(plan, spec, 65536, packet_bytes=512, options=SimOptions(max_packet_bytes=768))
    assert fixed_512.packet_bytes == 512


@pytest.mark.parametrize("role", ["send_peer", "recv_peer"])
def test_a_threadblock_whose_peer_is_its_own_gpu_is_refused(spec, role: str) -> None:  # type: ignore[no-untyped-def]
    # validate calls it an error; the replay ran it as remote stores through the GPU's own ports
    plan = generate("allgather", 2)
    gpu = plan.gpus[1]
    tb = next(t for t in gpu.threadblocks if getattr(t, role) is not None)
    bad_tb = dataclasses.replace(tb, **{role: 1})
    bad_gpu = dataclasses.replace(gpu, threadblocks=tuple(bad_tb if t is tb else t for t in gpu.threadblocks))
    bad = dataclasses.replace(plan, gpus=(plan.gpus[0], bad_gpu))
    word = role.removesuffix("_peer")
    message = rf"gpu 1 tb {tb.id}: {word} peer is the gpu itself \({word}=1\)"
    with pytest.raises(SimulationError, match=message):
        simulate(bad, spec, 1 << 16)
