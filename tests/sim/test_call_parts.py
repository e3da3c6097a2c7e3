"""The parts of a primitive call (nuna.plan.slices.first_part_bytes, nuna.sim.slicing.split_parts):
with ``executor_slices`` a Simple call of a connection moves its data in up to two parts, each
its own replay node, the receive's part fed by the send's, and flow-control credits counted in
buffer steps (nuna.plan.flow.credit_sources_by_steps)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.plan.dag import build_dag
from nuna.plan.flow import credit_sources, credit_sources_by_steps, flow_control_depth
from nuna.plan.generate import generate
from nuna.plan.ir import Protocol
from nuna.plan.slices import call_parts, first_part_bytes, part_min_bytes, part_steps
from nuna.plan.xml import loads
from nuna.sim import SimOptions, simulate
from nuna.sim.replay import _prepare
from nuna.topology.spec import load_topology

SLICED = SimOptions(executor_slices=True)
KIB = 1024


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def test_a_simple_call_moves_in_two_parts_of_at_least_32_kib() -> None:
    # genericOp: max(divUp(nelem, 16 * 2) * 16, stepSize * 2 / 32) elements, at most the call
    assert (call_parts(Protocol.SIMPLE), part_steps(Protocol.SIMPLE)) == (2, 2)
    assert part_min_bytes(Protocol.SIMPLE, 4) == 32 * KIB
    calls = np.array([4, 32 * KIB, 32 * KIB + 4, 40 * KIB, 1 << 20, (1 << 20) + 4, 2 << 20])
    first = first_part_bytes(Protocol.SIMPLE, calls, 4)
    # (1 MiB + 4 B) / 4 = 262,145 elements: 8,193 groups of 32 -> 131,088 elements
    assert first.tolist() == [4, 32 * KIB, 32 * KIB, 32 * KIB, 512 * KIB, 131_088 * 4, 1 << 20]
    assert (first <= calls).all()
    assert (calls - first <= first).all()
    # LL and LL128 calls are one part of one step
    for proto in (Protocol.LL, Protocol.LL128):
        assert (call_parts(proto), part_steps(proto)) == (1, 1)
        assert first_part_bytes(proto, calls, 4).tolist() == calls.tolist()


@settings(max_examples=25, deadline=None)
@given(collective=st.sampled_from(["allgather", "allreduce", "alltoall"]), ngpus=st.integers(2, 6),
       algo=st.sampled_from(["direct", "ring"]), protocol=st.sampled_from(["Simple", "LL", "LL128"]))
def test_counted_in_steps_uniform_calls_give_the_depth_rule(collective: str, ngpus: int, algo: str,
                                                            protocol: str) -> None:
    dag = build_dag(generate(collective, ngpus, algo=algo, protocol=protocol))
    proto = Protocol(protocol)
    steps = np.full(dag.num_nodes, call_parts(proto) * part_steps(proto), dtype=np.int64)
    assert np.array_equal(credit_sources_by_steps(dag, steps, part_steps(proto)),
                          credit_sources(dag, flow_control_depth(proto)))


def _mixed(cnts: list[int]) -> str:
    """GPU 0 sends steps of ``cnts`` chunks to GPU 1, which receives them."""
    n = sum(cnts)
    offs = np.concatenate([[0], np.cumsum(cnts)[:-1]]).tolist()
    pairs = list(enumerate(zip(offs, cnts, strict=True)))
    sends = "".join(f'<step s="{i}" type="s" srcbuf="i" srcoff="{o}" dstbuf="o" dstoff="{o}" cnt="{c}" '
                    f'depid="-1" deps="-1" hasdep="0"/>' for i, (o, c) in pairs)
    recvs = "".join(f'<step s="{i}" type="r" srcbuf="i" srcoff="{o}" dstbuf="o" dstoff="{o}" cnt="{c}" '
                    f'depid="-1" deps="-1" hasdep="0"/>' for i, (o, c) in pairs)
    return (f'<algo name="mixed" proto="Simple" nchannels="1" nchunksperloop="{n}" ngpus="2" '
            f'coll="broadcast" inplace="0" outofplace="1">'
            f'<gpu id="0" i_chunks="{n}" o_chunks="{n}" s_chunks="0"><tb id="0" send="1" recv="-1" chan="0">'
            f'{sends}</tb></gpu>'
            f'<gpu id="1" i_chunks="{n}" o_chunks="{n}" s_chunks="0"><tb id="0" send="-1" recv="0" chan="0">'
            f'{recvs}</tb></gpu></algo>')


def test_a_part_waits_for_the_receive_that_frees_its_two_steps(spec) -> None:  # type: ignore[no-untyped-def]
    # 16 KiB chunks: a call of one chunk is one part (steps 4c..4c+4 with its empty part), a call
    # of four two parts of 32 KiB (two steps each)
    cnts = [4, 1, 4, 1, 4, 4]
    plan = loads(_mixed(cnts))
    size = sum(cnts) * 16 * KIB
    pre = _prepare(plan, spec, size, None, SLICED)
    assert pre.sliced is not None
    dag = pre.dag
    sends = np.flatnonzero(dag.match_recv >= 0)
    assert pre.sliced.origin[sends].tolist() == [0, 0, 1, 2, 2, 3, 4, 4, 5, 5]
    assert pre.n_bytes[sends].tolist() == [32 * KIB, 32 * KIB, 16 * KIB, 32 * KIB, 32 * KIB, 16 * KIB,
                                           32 * KIB, 32 * KIB, 32 * KIB, 32 * KIB]
    # the sends' steps: [0, 2) [2, 4) [4, 8) [8, 10) [10, 12) [12, 16) [16, 18) [18, 20) [20, 22) [22, 24);
    # a part from step b waits until step b + 2 - 8 is free, i.e. for the first receive ending there
    recv_index = {int(dag.match_recv[s]): i for i, s in enumerate(sends)}
    expected = {3: 0, 4: 1, 5: 2, 6: 3, 7: 4, 8: 5}  # part 9 needs step 16 free, as part 8 does
    got = {i: recv_index[int(pre.credit_source[s])] for i, s in enumerate(sends) if pre.credit_source[s] >= 0}
    assert got == expected
    # every receive frees steps for at most one send
    src = pre.credit_source[pre.credit_source >= 0]
    assert np.unique(src).size == src.size
    res = simulate(plan, spec, size, options=SLICED)
    assert (res.landed_bytes == simulate(plan, spec, size).landed_bytes).all()
    assert res.replay_nodes == 20
    assert res.to_json()["executor_slices"]["parts_per_call"] == 2


_FORWARD = """<algo name="fwd" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="3" coll="broadcast"
 inplace="0" outofplace="1">
 <gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0">
  <tb id="0" send="1" recv="-1" chan="0">
   <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
  </tb>
 </gpu>
 <gpu id="1" i_chunks="1" o_chunks="1" s_chunks="0">
  <tb id="0" send="2" recv="0" chan="0">
   <step s="0" type="rcs" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1"
    depid="-1" deps="-1" hasdep="0"/>
  </tb>
 </gpu>
 <gpu id="2" i_chunks="1" o_chunks="1" s_chunks="0">
  <tb id="0" send="-1" recv="1" chan="0">
   <step s="0" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
  </tb>
 </gpu>
</algo>"""


@pytest.mark.parametrize("windowed", [False, True])
def test_a_forward_starts_on_the_first_part(spec, windowed: bool) -> None:  # type: ignore[no-untyped-def]
    # one 1 MiB chunk forwarded by GPU 1: whole, the forward waits for all of it; in parts, it
    # forwards the first half while the second arrives
    plan = loads(_FORWARD)
    size = 1 << 20
    whole = simulate(plan, spec, size, options=SimOptions(windowed=windowed))
    parts = simulate(plan, spec, size, options=SimOptions(executor_slices=True, windowed=windowed))
    assert parts.replay_nodes == 6
    assert (parts.landed_bytes == whole.landed_bytes).all()
    # GPU 1's forward (step 1 of the plan's three) starts before GPU 0's send has ended
    send, fwd = 0, 1
    assert whole.node_t_start[fwd] >= whole.node_t_end[send]
    assert parts.node_t_start[fwd] < parts.node_t_end[send]
    assert parts.time_ns < whole.time_ns
    assert parts.time_ns >= parts.placement_floor_ns >= parts.lower_bound_ns


def test_small_calls_stay_whole(spec) -> None:  # type: ignore[no-untyped-def]
    plan = loads(_FORWARD)
    pre = _prepare(plan, spec, 32 * KIB, None, SLICED)  # one part of 32 KiB: nothing to split
    assert pre.sliced is None


@settings(max_examples=12, deadline=None)
@given(collective=st.sampled_from(["allgather", "allreduce", "alltoall"]), ngpus=st.integers(2, 4),
       algo=st.sampled_from(["direct", "ring"]), kib=st.integers(20, 400))
def test_parts_move_the_same_bytes_above_the_bounds(collective: str, ngpus: int, algo: str, kib: int) -> None:
    spec = load_topology("nuna-4die")
    plan = generate(collective, ngpus, algo=algo)
    size = kib * KIB * ngpus * ngpus
    whole = simulate(plan, spec, size, packet_bytes="auto")
    res = simulate(plan, spec, size, packet_bytes="auto", options=SLICED)
    assert (res.landed_bytes == whole.landed_bytes).all()
    assert res.time_ns >= res.placement_floor_ns >= res.lower_bound_ns
    pre = _prepare(plan, spec, size, None, SLICED)
    if pre.sliced is not None:
        # a part's receive is fed by the same part of its send: the same bytes, the same step
        dag, sl = pre.dag, pre.sliced
        send = np.flatnonzero(dag.match_recv >= 0)
        recv = dag.match_recv[send]
        assert (pre.n_bytes[recv] == pre.n_bytes[send]).all()
        assert (sl.slice_of[recv] == sl.slice_of[send]).all()
        whole_recv = _prepare(plan, spec, size, None, SimOptions()).dag.match_recv
        assert (sl.origin[recv] == whole_recv[sl.origin[send]]).all()


def test_parts_keep_windowed_replays_exact(spec) -> None:  # type: ignore[no-untyped-def]
    # 4 MiB on a 4-GPU ring: 256 KiB calls in two parts, credits posted part by part
    plan = generate("allreduce", 4, algo="ring")
    runs = [simulate(plan, spec, 4 << 20, packet_bytes=1024,
                     options=SimOptions(executor_slices=True, windowed=w, threads=t))
            for w, t in ((True, 1), (True, 2), (False, None))]
    assert runs[0].flow_control is not None
    assert runs[0].flow_control["waiting_sends"] > 0
    assert runs[0].replay_nodes > runs[0].steps
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0].node_t_end, other.node_t_end)
        assert runs[0].time_ns == other.time_ns


@settings(max_examples=40, deadline=None)
@given(cnts=st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=12))
def test_credits_counted_in_steps_match_a_walk_along_the_connection(cnts: list[int]) -> None:
    # 16 KiB chunks: calls of 1 or 2 chunks are one part (four steps), of 4 two parts (two each)
    spec = load_topology("nuna-4die")
    pre = _prepare(loads(_mixed(cnts)), spec, sum(cnts) * 16 * KIB, None, SLICED)
    dag = pre.dag
    sends = np.flatnonzero(dag.match_recv >= 0).tolist()
    split = [c == 4 for c in cnts for _ in range(2 if c == 4 else 1)]
    assert len(split) == len(sends)
    ends, expected, step, last = [], [], 0, -1
    for two in split:
        need = step + 2 - 8
        src = next((m for m, e in enumerate(ends) if e >= need), -1) if need > 0 else -1
        expected.append(-1 if src == last else src)
        last = src if src >= 0 else last
        step += 2 if two else 4
        ends.append(step)
    recv_index = {int(dag.match_recv[s]): i for i, s in enumerate(sends)}
    got = [recv_index[int(pre.credit_source[s])] if pre.credit_source[s] >= 0 else -1 for s in sends]
    assert got == expected
