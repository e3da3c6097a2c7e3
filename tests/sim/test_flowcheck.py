"""Flow-control deadlocks at a size (nuna.sim.flowcheck, ``nuna validate --size``): a step of more
primitive calls than a connection's ring holds, sent before its threadblock receives, hangs the
executors at the sizes that split it so, though the plan passes step by step. The check agrees
with a replay of the executors' slices, calls and parts, and two slices answer for all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import SimulationError
from nuna.plan.generate import generate
from nuna.plan.slices import executor_slicing
from nuna.plan.verify import chunk_bytes_for, verify
from nuna.plan.xml import loads
from nuna.sim import SimOptions, simulate
from nuna.sim.flowcheck import flow_deadlock
from nuna.topology.spec import load_topology
from tests.conftest import PLANS_MSCCL, pingpong

MIB = 1 << 20
ALLPAIRS = PLANS_MSCCL / "reducescatter_allpairs_n8_i1_Simple.xml"


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def exchange(cnt: int, proto: str = "Simple") -> str:
    """Two GPUs whose one threadblock each sends one step of ``cnt`` chunks to the other, then
    receives the other's: free of deadlocks step by step."""
    return pingpong(1, proto, cnt)


def test_a_step_of_more_calls_than_the_ring_holds_deadlocks_at_its_size() -> None:
    plan = loads(exchange(3))
    assert verify(plan).ok
    # 6 MiB: 1 MiB chunks, calls of 2: two calls (8 buffer steps) fit the ring
    assert flow_deadlock(plan, 6 * MIB) is None
    # 12 MiB: 2 MiB chunks, calls of one: the third call waits for the peer's first receive
    found = flow_deadlock(plan, 12 * MIB)
    assert found is not None
    assert found.startswith("deadlock at 12582912 B (2097152 B chunks, 1 slice, calls of up to 1 chunk): "
                            "cross-GPU deadlock of ")
    assert "at most 8 buffer steps ahead of those its receiver has freed" in found
    assert "gpu 0 tb 0 step 0 (s) (call 3 of 3, part 2 of 2)" in found
    assert "gpu 1 tb 0 step 1 (r) (call 1 of 3, part 1 of 2)" in found
    # 48 MiB: 8 MiB chunks in 4 slices, still calls of one chunk
    many = flow_deadlock(plan, 48 * MIB)
    assert many is not None
    assert "(slice 1 of 4, call 3 of 3, part 2 of 2)" in many
    # LL: a call takes one of the 8 steps, so nine calls close it
    ll = loads(exchange(9, "LL"))
    assert flow_deadlock(ll, 18 * 1024) is None
    found = flow_deadlock(ll, 18 * MIB)
    assert found is not None
    assert "a sender runs at most 8 sends ahead" in found
    assert flow_deadlock(loads(exchange(8, "LL")), 16 * MIB) is None


@pytest.mark.parametrize(("cnt", "size"), [(2, 8 * MIB), (3, 6 * MIB), (3, 12 * MIB), (2, 16 * MIB)])
def test_the_check_agrees_with_a_replay_of_the_calls(spec, cnt: int, size: int) -> None:  # type: ignore[no-untyped-def]
    plan = loads(exchange(cnt))
    found = flow_deadlock(plan, size)
    opts = SimOptions(executor_slices=True)
    if found is None:
        res = simulate(plan, spec, size, packet_bytes=64 * 1024, options=opts)
        assert (res.landed_bytes == res.sent_bytes).all()
    else:
        with pytest.raises(SimulationError) as info:
            simulate(plan, spec, size, packet_bytes=64 * 1024, options=opts)
        message = str(info.value)
        assert "waits for the flow-control credit of" in message
        assert "(flow control: a sender writes at most 8 buffer steps ahead" in message
        # without the executors' calls the replay finishes: a node per step, a step per call
        res = simulate(plan, spec, size, packet_bytes=64 * 1024)
        assert (res.landed_bytes == res.sent_bytes).all()


PLANS = st.one_of(
    st.builds(lambda c, p: exchange(c, p), st.integers(1, 12), st.sampled_from(["Simple", "LL", "LL128"])),
    st.builds(lambda coll, n, t: generate(coll, n, algo="direct", tbs_per_peer=t),
              st.sampled_from(["allgather", "alltoall", "allreduce"]), st.integers(2, 4), st.integers(1, 3)),
    st.builds(lambda coll, n: generate(coll, n, algo="ring"), st.sampled_from(["allgather", "allreduce"]),
              st.integers(2, 4)),
)


@settings(max_examples=40, deadline=None)
@given(plan=PLANS, size=st.integers(1 << 16, 96 * MIB))
def test_two_slices_answer_for_every_slice(plan, size: int) -> None:  # type: ignore[no-untyped-def]
    plan = loads(plan) if isinstance(plan, str) else plan
    found = flow_deadlock(plan, size)
    assert (found is None) == (flow_deadlock(plan, size, every_slice=True) is None)
    slices = executor_slicing(plan, chunk_bytes_for(plan, size)).slices
    if found is not None:
        assert f"{slices} slice{'s' * (slices != 1)}" in found


@pytest.mark.skipif(not ALLPAIRS.is_file(), reason="the shared plan corpus is not here")
def test_the_compilers_allpairs_reducescatter_closes_at_64_mib() -> None:
    # each pair's threadblocks send 8 chunks before receiving 8: one call up to 16 MiB, two at
    # 32 MiB (8 buffer steps, the whole ring), four at 64 MiB
    plan = loads(ALLPAIRS.read_text())
    assert verify(plan).ok
    assert flow_deadlock(plan, 32 * MIB) is None
    found = flow_deadlock(plan, 64 * MIB)
    assert found is not None
    assert "calls of up to 2 chunks" in found
    assert "(call 4 of 4" in found


def test_validate_size_reports_the_deadlock_and_its_size(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x3.xml"
    path.write_text(exchange(3))
    ok = run_cli("validate", path, "--size", "6MiB")
    assert ok.code == 0
    assert ok.out.startswith(f"{path}: ok: allgather, 2 GPUs")
    bad = run_cli("validate", path, "--size", "12MiB")
    assert bad.code == 1
    assert bad.out.startswith(f"{path}: invalid (1 error")
    lines = bad.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"nuna: error: {path}: deadlock at 12582912 B ")
    js = run_cli("validate", path, "--size", "12MiB", "--json")
    report = json.loads(js.out)
    assert js.code == 1
    assert report["size_bytes"] == 12 * MIB
    assert not report["ok"]
    assert report["plans"][0]["errors"][0].startswith(f"{path}: deadlock at 12582912 B")
    assert "size_bytes" not in json.loads(run_cli("validate", path, "--json").out)
    bad_size = run_cli("validate", path, "--size", "lots")
    assert bad_size.code != 0
    assert "Traceback" not in bad_size.err


@pytest.mark.parametrize("algo", ["direct", "ring"])
@pytest.mark.parametrize("collective", ["allgather", "allreduce", "alltoall", "reducescatter"])
def test_generated_plans_never_hang(collective: str, algo: str) -> None:
    # every step moves one chunk, one call at any size, and the generators keep every
    # connection within the depth step by step, also with several chunks per threadblock (before
    # nuna 0.15.0 a step moved them all, and hung from two or three calls)
    for ngpus, protocol, par, mult in [(2, "Simple", 1, 1), (3, "LL", 1, 4), (5, "Simple", 2, 1),
                                       (4, "Simple", 1, 4), (4, "Simple", 2, 2), (8, "LL128", 1, 2)]:
        plan = generate(collective, ngpus, algo=algo, protocol=protocol, chunks_per_peer=par * mult,
                        tbs_per_peer=par if algo == "direct" else 1,
                        channels=par if algo == "ring" else None)
        for size in (100 * 1024, 4 * MIB, 100 * MIB, 1 << 30):
            assert flow_deadlock(plan, size) is None, (ngpus, protocol, par, mult, size)
