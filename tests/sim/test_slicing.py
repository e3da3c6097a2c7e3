"""The executors' slices (nuna.plan.slices, nuna.sim.slicing): every step once per slice and
primitive call, the same bytes to the same addresses, dependencies slice by slice."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna.errors import UsageError
from nuna.plan.generate import generate
from nuna.plan.ir import Collective, Protocol
from nuna.plan.slices import MSCCL_MAX_COUNT, Slicing, effective_chunk_bytes, executor_slicing, slice_bytes
from nuna.plan.verify import summarize
from nuna.plan.xml import loads
from nuna.sim import SimOptions, simulate
from nuna.sim.replay import _prepare
from nuna.sim.result import protocol_note
from nuna.sim.trace import chrome_trace
from nuna.topology.spec import load_topology

SLICED = SimOptions(executor_slices=True)


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def test_the_protocols_slices_and_call_limits() -> None:
    # NCCL's default buffers over NCCL_STEPS = 8 (reference section 7)
    assert slice_bytes(Protocol.SIMPLE, 4) == 2 << 20
    assert slice_bytes(Protocol.LL, 4) == 32 << 10
    assert slice_bytes(Protocol.LL128, 4) == 576_000
    assert effective_chunk_bytes(Protocol.SIMPLE, Collective.ALLGATHER) == 2 << 20
    assert effective_chunk_bytes(Protocol.SIMPLE, Collective.BROADCAST) == 512 << 10
    assert effective_chunk_bytes(Protocol.LL128, Collective.ALLREDUCE) == 576_000


@pytest.mark.parametrize(("protocol", "chunk", "expected"), [
    ("LL", 32 << 10, Slicing(32 << 10, 1, 1, 1, 0)), ("LL", (32 << 10) + 1, Slicing(32 << 10, 2, 1, 1, 0)),
    ("LL", 1 << 20, Slicing(32 << 10, 32, 1, 1, 0)), ("Simple", 1 << 20, Slicing(2 << 20, 1, 2, 2, 32 << 10)),
    ("Simple", 4096, Slicing(2 << 20, 1, MSCCL_MAX_COUNT - 1, 2, 32 << 10)),
    ("LL128", 600_000, Slicing(576_000, 2, 1, 1, 0))])
def test_slices_and_calls_follow_the_chunk(protocol: str, chunk: int, expected: Slicing) -> None:
    plan = generate("allgather", 2, protocol=protocol)
    assert executor_slicing(plan, chunk) == expected


def test_info_tells_the_slices_at_a_size() -> None:
    plan = generate("allgather", 4, algo="ring", protocol="LL")  # 4 chunks: 1 MiB each at 4 MiB
    assert summarize(plan, 4 << 20).slicing == Slicing(32 << 10, 32, 1, 1, 0)
    assert summarize(plan, 4 << 20).to_dict()["executor_slices"] == {
        "slices": 32, "slice_bytes": 32 << 10, "max_count": 1, "parts_per_call": 1, "part_min_bytes": 0}
    assert summarize(plan).slicing is None  # no size, no chunks to slice


def _ranges(addr: np.ndarray, nbytes: np.ndarray) -> list[tuple[int, int]]:
    """Merged byte ranges [start, end) of ``addr`` columns over ``nbytes`` each."""
    spans = sorted((int(a), int(a) + int(b)) for a, b in zip(addr, nbytes, strict=True) if a >= 0 and b > 0)
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            assert lo == merged[-1][1], "slices overlap"
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(collective=st.sampled_from(["allgather", "allreduce", "alltoall", "reducescatter"]),
       ngpus=st.integers(2, 4), k=st.integers(1, 2), protocol=st.sampled_from(["Simple", "LL", "LL128"]),
       kib=st.integers(1, 3000))
def test_a_sliced_replay_moves_the_same_bytes_to_the_same_places(  # type: ignore[no-untyped-def]
        spec, collective: str, ngpus: int, k: int, protocol: str, kib: int) -> None:
    plan = generate(collective, ngpus, tbs_per_peer=k, protocol=protocol)
    size = kib * 1024 * ngpus
    whole = _prepare(plan, spec, size, None, SimOptions())
    pre = _prepare(plan, spec, size, None, SLICED)
    assert pre.slicing is not None
    if pre.sliced is None:  # one slice, no step split: the plan's own nodes
        assert pre.slicing.slices == 1
        assert pre.flat.num_nodes == whole.flat.num_nodes
        return
    sl = pre.sliced
    assert sl.flat.num_nodes > whole.flat.num_nodes
    # every step's calls cover exactly its chunks' bytes, in each address column
    for n in range(whole.flat.num_nodes):
        mine = np.flatnonzero(sl.origin == n)
        assert sl.n_bytes[mine].sum() == whole.n_bytes[n]
        for c in range(whole.n_addr.shape[1]):
            if whole.n_addr[n, c] >= 0 and whole.n_bytes[n] > 0:
                assert _ranges(sl.n_addr[mine, c], sl.n_bytes[mine]) == \
                    [(int(whole.n_addr[n, c]), int(whole.n_addr[n, c] + whole.n_bytes[n]))]
    # a threadblock runs its steps slice by slice, in program order within each slice
    for t in range(sl.flat.tb_indptr.shape[0] - 1):
        lo, hi = int(sl.flat.tb_indptr[t]), int(sl.flat.tb_indptr[t + 1])
        keys = list(zip(sl.slice_of[lo:hi].tolist(), sl.origin[lo:hi].tolist(), strict=True))
        assert keys == sorted(keys)
    # data edges pair calls of the same slice, both ways
    dag = sl.dag
    send = np.flatnonzero(dag.match_recv >= 0)
    recv = dag.match_recv[send]
    assert (dag.match_send[recv] == send).all()
    assert (sl.slice_of[recv] == sl.slice_of[send]).all()
    assert (sl.n_bytes[recv] == sl.n_bytes[send]).all()
    assert (whole.dag.match_recv[sl.origin[send]] == sl.origin[recv]).all()
    # a dependency holds slice by slice: every edge between steps stays within a slice
    ptr = dag.ctrl_indptr.astype(np.int64)
    src = np.repeat(np.arange(dag.num_nodes), np.diff(ptr))
    dst = dag.ctrl_indices.astype(np.int64)
    cross = sl.flat.node_tb[src] != sl.flat.node_tb[dst]
    assert (sl.slice_of[src[cross]] == sl.slice_of[dst[cross]]).all()


_BIG_SEND = """<algo name="big" proto="Simple" nchannels="1" nchunksperloop="8" ngpus="2" coll="allgather"
 inplace="0" outofplace="1">
 <gpu id="0" i_chunks="4" o_chunks="8" s_chunks="0">
  <tb id="0" send="1" recv="-1" chan="0">
   <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="4" depid="-1" deps="-1" hasdep="0"/>
  </tb>
  <tb id="1" send="-1" recv="1" chan="0">
   <step s="0" type="r" srcbuf="o" srcoff="4" dstbuf="o" dstoff="4" cnt="4" depid="-1" deps="-1" hasdep="0"/>
  </tb>
 </gpu>
 <gpu id="1" i_chunks="4" o_chunks="8" s_chunks="0">
  <tb id="0" send="0" recv="-1" chan="0">
   <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="4" cnt="4" depid="-1" deps="-1" hasdep="0"/>
  </tb>
  <tb id="1" send="-1" recv="0" chan="0">
   <step s="0" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="4" depid="-1" deps="-1" hasdep="0"/>
  </tb>
 </gpu>
</algo>"""


def test_a_step_of_many_chunks_is_several_calls(spec) -> None:  # type: ignore[no-untyped-def]
    plan = loads(_BIG_SEND)
    size = 8 << 20  # 1 MiB chunks: one slice, two chunks a call, so a send of four is two calls
    pre = _prepare(plan, spec, size, None, SLICED)
    assert pre.slicing == Slicing(2 << 20, 1, 2, 2, 32 << 10)
    assert pre.sliced is not None
    # and each call of 2 MiB moves in two parts of 1 MiB
    assert pre.sliced.flat.num_nodes == 16
    assert sorted(set(pre.sliced.n_bytes.tolist())) == [1 << 20]
    res = simulate(plan, spec, size, options=SLICED)
    whole = simulate(plan, spec, size)
    assert (res.landed_bytes == whole.landed_bytes).all()
    assert res.steps == whole.steps == 4
    assert res.replay_nodes == 16
    assert protocol_note(plan, res) is None  # a Simple plan
    # a call fences: the send's second call starts after its first ended
    assert res.time_ns > whole.time_ns >= whole.lower_bound_ns


@pytest.mark.parametrize("windowed", [False, True])
def test_slices_of_a_ring_run_in_order(spec, windowed: bool) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 4, algo="ring", protocol="LL")
    size = 4 << 20  # 1 MiB chunks of 32 KiB slices
    res = simulate(plan, spec, size, options=SimOptions(executor_slices=True, windowed=windowed))
    whole = simulate(plan, spec, size, options=SimOptions(windowed=windowed))
    assert res.slicing is not None
    assert res.slicing.slices == 32
    assert res.slice_t_start is not None
    assert res.slice_t_end is not None
    assert res.slice_t_start.shape == (whole.steps, 32)
    # each step's slice i ends before its slice i + 1 starts, and the step spans them all
    assert (res.slice_t_end[:, :-1] <= res.slice_t_start[:, 1:]).all()
    assert (res.node_t_start == res.slice_t_start[:, 0]).all()
    assert (res.node_t_end == res.slice_t_end[:, -1]).all()
    assert (res.landed_bytes == whole.landed_bytes).all()
    assert res.time_ns >= res.placement_floor_ns >= res.lower_bound_ns
    assert protocol_note(plan, res) is None  # LL modelled, sliced or not
    data = res.to_json()
    assert data["executor_slices"] == {"slices": 32, "slice_bytes": 32 << 10, "max_count": 1,
                                       "parts_per_call": 1, "part_min_bytes": 0,
                                       "replay_nodes": res.replay_nodes}
    # deterministic: the same replay gives the same JSON
    again = simulate(plan, spec, size, options=SimOptions(executor_slices=True, windowed=windowed)).to_json()
    for d in (data, again):
        d.pop("wall_s")
    assert json.dumps(data, sort_keys=True) == json.dumps(again, sort_keys=True)
    # the trace draws a step's slices apart: on a threadblock's track they never overlap
    events = [e for e in chrome_trace(plan, res, spec)["traceEvents"] if e.get("cat") == "step"]
    assert len(events) == 32 * sum(1 for e in events if e["name"].endswith("[1/32]"))
    by_track: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-9 for a, b in itertools.pairwise(spans))


def test_without_slices_to_cut_the_option_changes_nothing(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allreduce", 4)
    on, off = (simulate(plan, spec, 1 << 17, options=SimOptions(executor_slices=f)).to_json()
               for f in (True, False))
    for data in (on, off):
        data.pop("wall_s")
    assert off["chunk_bytes"] <= 32 << 10  # calls of one part
    assert on.pop("executor_slices") == {"slices": 1, "slice_bytes": 2 << 20, "replay_nodes": off["steps"],
                                         "max_count": (2 << 20) // off["chunk_bytes"], "parts_per_call": 2,
                                         "part_min_bytes": 32 << 10}
    assert json.dumps(on, sort_keys=True) == json.dumps(off, sort_keys=True)


@pytest.mark.parametrize("value", [1, "yes", None])
def test_executor_slices_must_be_a_bool(spec, value: object) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match=r"SimOptions\.executor_slices must be True or False"):
        simulate(generate("allgather", 2), spec, 1 << 16,
                 options=SimOptions(executor_slices=value))  # type: ignore[arg-type]
