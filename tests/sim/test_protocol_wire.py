"""LL and LL128 as the replay models them (nuna.plan.wire, SimOptions.protocol_model): their bytes
on the wire, and sends that do not wait for their stores."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna.errors import UsageError
from nuna.plan.generate import generate
from nuna.plan.ir import Plan, Protocol
from nuna.plan.wire import SIMPLE_WIRE, protocol_wire
from nuna.plan.xml import loads
from nuna.sim import SimOptions, simulate
from nuna.sim.fastforward import FastForward
from nuna.topology.spec import load_topology

AS_SIMPLE = SimOptions(protocol_model="simple")


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def test_the_protocols_wire_formats() -> None:
    # LL: 8 B of data and 8 B of flag per 16-byte line; LL128: 120 B of data per 128-byte line
    assert protocol_wire(Protocol.SIMPLE) == SIMPLE_WIRE
    assert SIMPLE_WIRE.fenced
    ll, ll128 = protocol_wire(Protocol.LL), protocol_wire(Protocol.LL128)
    assert (ll.wire_bytes(256), ll128.wire_bytes(240), ll128.wire_bytes(256)) == (512, 256, 274)
    assert not ll.fenced
    assert not ll128.fenced


@settings(max_examples=300, deadline=None)
@given(payload=st.integers(0, 1 << 24), protocol=st.sampled_from(list(Protocol)))
def test_the_payload_comes_back_from_the_wire_bytes(payload: int, protocol: Protocol) -> None:
    # the engine recovers a landed store's payload from its wire bytes (engine._payload_bytes)
    w = protocol_wire(protocol)
    wire = w.wire_bytes(payload)
    assert wire * w.den >= payload * w.num > (wire - 1) * w.den
    assert (wire * w.den) // w.num == payload


def _one_send(protocol: str, chunks: int = 1, copy: bool = False) -> Plan:
    """GPU 0 sends ``chunks`` chunks to GPU 1; with ``copy`` GPU 1 forwards them to GPU 2
    (``rcs``: a local and a remote store per line)."""
    n = 3 if copy else 2
    step = ('<step s="0" type="{t}" srcbuf="o" srcoff="0" dstbuf="o" dstoff="{d}" cnt="{c}" depid="-1" '
            'deps="-1" hasdep="0"/>')
    tbs = [f'<tb id="0" send="1" recv="-1" chan="0">{step.format(t="s", d=chunks, c=chunks)}</tb>',
           f'<tb id="0" send="{2 if copy else -1}" recv="0" chan="0">'
           f'{step.format(t="rcs" if copy else "r", d=chunks, c=chunks)}</tb>']
    if copy:
        tbs.append(f'<tb id="0" send="-1" recv="1" chan="0">{step.format(t="r", d=chunks, c=chunks)}</tb>')
    gpus = "".join(f'<gpu id="{g}" i_chunks="0" o_chunks="{2 * chunks}" s_chunks="0">{tb}</gpu>'
                   for g, tb in enumerate(tbs))
    return loads(f'<algo name="one" proto="{protocol}" nchannels="1" nchunksperloop="{2 * chunks}" '
                 f'ngpus="{n}" coll="allgather" inplace="1">{gpus}</algo>')


@pytest.mark.parametrize("windowed", [False, True])
@pytest.mark.parametrize("protocol", ["LL", "LL128"])
def test_remote_stores_carry_the_protocols_wire_bytes(spec, protocol: str, windowed: bool) -> None:  # type: ignore[no-untyped-def]
    plan = _one_send(protocol, chunks=4)
    size = 2 * 4 * 64 * 1024  # 64 KiB chunks: 256 lines of 256 B each
    res = simulate(plan, spec, size, options=SimOptions(windowed=windowed))
    simple = simulate(plan, spec, size, options=dataclasses.replace(AS_SIMPLE, windowed=windowed))
    payload = 4 * 64 * 1024
    per_line = protocol_wire(Protocol(protocol)).wire_bytes(256)
    # each flit-sized store crosses the ports with its flags; what lands is the payload
    assert int(res.port_egress_bytes.sum()) == int(res.port_ingress_bytes.sum()) == payload // 256 * per_line
    assert int(simple.port_egress_bytes.sum()) == payload
    np.testing.assert_array_equal(res.landed_bytes, res.sent_bytes)
    assert res.remote_bytes == payload
    assert res.time_ns > simple.time_ns
    # the bound counts the wire bytes too, and no replay beats it
    assert res.lower_bound_ns > simple.lower_bound_ns
    assert res.lower_bound_ns <= res.placement_floor_ns <= res.time_ns


@pytest.mark.parametrize("protocol", ["Simple", "LL", "LL128"])
def test_only_simple_sends_wait_for_their_stores(spec, protocol: str) -> None:  # type: ignore[no-untyped-def]
    plan = _one_send(protocol, chunks=4)
    res = simulate(plan, spec, 2 * 4 * 64 * 1024)
    send_end, recv_end = float(res.node_t_end[0]), float(res.node_t_end[1])
    if protocol == "Simple":
        assert send_end == recv_end  # done as its last store lands, which completes the receive
    else:
        # done once its last store is issued: the store's way to the peer is still ahead
        assert send_end < recv_end - 500.0
    as_simple = simulate(plan, spec, 2 * 4 * 64 * 1024, options=AS_SIMPLE)
    assert float(as_simple.node_t_end[0]) == float(as_simple.node_t_end[1])


def test_a_forward_waits_for_its_local_stores_only(spec) -> None:  # type: ignore[no-untyped-def]
    # gpu 1's rcs stores each line locally and forwards it to gpu 2: under LL it is done once
    # its local stores land, before its forwarded stores do
    plan = _one_send("LL", copy=True)
    size = 3 * 2 * 64 * 1024
    res = simulate(plan, spec, size)
    as_simple = simulate(plan, spec, size, options=AS_SIMPLE)
    rcs_end, last_recv_end = float(res.node_t_end[1]), float(res.node_t_end[2])
    assert rcs_end < last_recv_end
    assert float(as_simple.node_t_end[1]) == float(as_simple.node_t_end[2])
    np.testing.assert_array_equal(res.landed_bytes, res.sent_bytes)


def test_a_simple_plan_is_the_same_under_both_models(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allreduce", 4, algo="ring")
    a, b = (simulate(plan, spec, 256 * 1024, options=o).to_json() for o in (SimOptions(), AS_SIMPLE))
    for d in (a, b):
        d.pop("wall_s")
    assert "protocol" not in a
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_a_bad_protocol_model_is_a_usage_error(spec) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="protocol_model must be one of plan, simple"):
        simulate(_one_send("LL"), spec, 4096, options=SimOptions(protocol_model="wire"))


CASES = [("allgather", "direct", 2), ("allgather", "ring", 3), ("alltoall", "direct", 3),
         ("reducescatter", "direct", 3), ("allreduce", "ring", 3), ("allreduce", "direct", 4)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(CASES), protocol=st.sampled_from(["LL", "LL128"]), kib=st.integers(4, 256),
       packet=st.sampled_from([256, 1024]), windowed=st.booleans())
def test_ll_replays_land_every_byte_above_their_bounds(spec, case: tuple[str, str, int], protocol: str,  # type: ignore[no-untyped-def]
                                                      kib: int, packet: int, windowed: bool) -> None:
    collective, algo, ngpus = case
    plan = generate(collective, ngpus, algo=algo, protocol=protocol)
    opts = SimOptions(windowed=windowed)
    res = simulate(plan, spec, kib * 1024, packet_bytes=packet, options=opts)
    simple = simulate(plan, spec, kib * 1024, packet_bytes=packet,
                      options=dataclasses.replace(opts, protocol_model="simple"))
    np.testing.assert_array_equal(res.landed_bytes, res.sent_bytes)
    np.testing.assert_array_equal(res.landed_bytes, simple.landed_bytes)
    assert res.lower_bound_ns <= res.placement_floor_ns <= res.time_ns
    assert res.lower_bound_ns >= simple.lower_bound_ns
    # every store rounds its own wire bytes up: at least the payload's share, at most a byte more each
    w = protocol_wire(Protocol(protocol))
    egress = int(res.port_egress_bytes.sum())
    sent = int(res.sent_bytes.sum())
    assert sent * w.num / w.den <= egress <= sent * w.num / w.den + res.jobs
    assert np.isfinite(res.node_t_end).all()


def test_fast_forward_counts_unfenced_jobs_once(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 2, tbs_per_peer=2, protocol="LL")
    res = simulate(plan, spec, 16 << 20, options=SimOptions(fast_forward=FastForward()))
    np.testing.assert_array_equal(res.landed_bytes, res.sent_bytes)
    assert res.fast_forward
    assert res.time_ns >= res.placement_floor_ns
