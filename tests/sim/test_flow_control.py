"""The executors' flow control (nuna.plan.flow, SimOptions.flow_control): a send waits for the
credit of the receive ``depth`` sends earlier on its connection. The rule's edges, the
deadlocks it adds (validation and replay), the credit's time in the replay, and the plans it
leaves alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import SimulationError, UsageError
from nuna.plan.dag import build_dag, find_cycle, flatten
from nuna.plan.flow import credit_sources, flow_control_depth, with_flow_control
from nuna.plan.generate import generate
from nuna.plan.ir import Plan, Protocol
from nuna.plan.verify import verify
from nuna.plan.xml import load, loads
from nuna.sim import SimOptions, simulate
from nuna.sim.fastforward import FastForward
from nuna.sim.layout import threadblock_cus
from nuna.sim.replay import _credit_ns, _pod_net, _window_ns
from nuna.topology.spec import load_topology
from tests.conftest import PLANS_MSCCL, pingpong

NO_FLOW_CONTROL = SimOptions(flow_control=False)
RING_PLAN = PLANS_MSCCL / "allreduce_ring_n8_c1_i1_Simple.xml"


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def test_the_depths_are_the_executors() -> None:
    # 8 buffer steps per connection; a Simple call takes 4, an LL or LL128 call 1
    assert [flow_control_depth(p) for p in (Protocol.SIMPLE, Protocol.LL, Protocol.LL128)] == [2, 8, 8]


def test_a_send_waits_for_the_receive_depth_sends_earlier() -> None:
    dag = build_dag(loads(pingpong(3)))
    credit = credit_sources(dag, 2)
    # nodes: gpu 0 tb 0 = 0..5 (sends 0-2, receives 3-5), gpu 1 tb 0 = 6..11
    assert credit.tolist() == [-1, -1, 9, -1, -1, -1, -1, -1, 3, -1, -1, -1]
    assert (credit_sources(dag, 3) == -1).all()
    with pytest.raises(ValueError, match="at least 1"):
        credit_sources(dag, 0)


GENERATED = [("allreduce", "ring", 4), ("allgather", "ring", 5), ("reducescatter", "ring", 3),
             ("allgather", "direct", 3), ("alltoall", "direct", 4)]


@settings(max_examples=20, deadline=None)
@given(case=st.sampled_from(GENERATED), depth=st.integers(1, 8), tbs=st.integers(1, 3))
def test_credits_follow_each_connections_fifo(case: tuple[str, str, int], depth: int, tbs: int) -> None:
    collective, algo, ngpus = case
    # a ring has one threadblock per ring
    dag = build_dag(generate(collective, ngpus, algo=algo, tbs_per_peer=tbs if algo == "direct" else 1))
    credit = credit_sources(dag, depth)
    tb_of = np.searchsorted(dag.tb_indptr, np.arange(dag.num_nodes), side="right") - 1
    for tb in range(dag.num_threadblocks):
        lo, hi = int(dag.tb_indptr[tb]), int(dag.tb_indptr[tb + 1])
        sends = [n for n in range(lo, hi) if dag.match_recv[n] >= 0]
        for i, s in enumerate(sends):
            expected = int(dag.match_recv[sends[i - depth]]) if i >= depth else -1
            assert int(credit[s]) == expected
    others = np.flatnonzero(dag.match_recv < 0)
    assert (credit[others] == -1).all()
    # each receive gives at most one credit, to a send on its sender's threadblock
    given_by = credit[credit >= 0]
    assert np.unique(given_by).size == given_by.size
    sent_by = dag.match_send[given_by]
    assert (tb_of[sent_by] == tb_of[np.flatnonzero(credit >= 0)]).all()
    # with the executors' depths a generated plan stays free of deadlocks; with a credit per
    # send (depth 1) a ring's forwards wait for each other round the ring
    if depth >= 2:
        assert find_cycle(with_flow_control(dag, depth)) is None
    elif algo == "ring" and collective == "allreduce":
        assert find_cycle(with_flow_control(dag, depth)) is not None


@pytest.mark.parametrize(("sends", "proto", "depth"), [(3, "Simple", 2), (9, "LL", 8), (9, "LL128", 8)])
def test_validation_finds_a_deadlock_of_flow_control_alone(sends: int, proto: str, depth: int) -> None:
    plan = loads(pingpong(sends, proto))
    assert find_cycle(build_dag(plan)) is None
    errors = verify(plan).errors
    assert len(errors) == 1
    assert "cross-GPU deadlock of 4 steps through the executors' flow control" in errors[0]
    assert f"at most {depth} sends ahead" in errors[0]
    # one send fewer than the depth allows ahead, and it verifies (semantics included)
    assert verify(loads(pingpong(sends - 1, proto))).ok


@pytest.mark.parametrize("windowed", [False, True])
def test_the_replay_reports_a_credit_it_waits_for(spec, windowed: bool) -> None:  # type: ignore[no-untyped-def]
    plan = loads(pingpong(3))
    with pytest.raises(SimulationError) as info:
        simulate(plan, spec, 6 * 4096, options=SimOptions(windowed=windowed))
    message = str(info.value)
    assert message.startswith("deadlock: 2 threadblocks cannot finish: ")
    assert "gpu 0 tb 0 step 2 (s) waits for the flow-control credit of gpu 1 tb 0 step 3 (r)" in message
    assert "gpu 1 tb 0 step 2 (s) waits for the flow-control credit of gpu 0 tb 0 step 3 (r)" in message
    assert message.endswith("(flow control: a sender runs at most 2 sends ahead of its receiver on a "
                            "connection; --no-flow-control replays without it)")
    res = simulate(plan, spec, 6 * 4096, options=SimOptions(windowed=windowed, flow_control=False))
    np.testing.assert_array_equal(res.landed_bytes, res.sent_bytes)


def _ring_cases() -> list[tuple[str, Plan]]:
    cases = [("generated allreduce ring, 4 GPUs", generate("allreduce", 4, algo="ring"))]
    if RING_PLAN.is_file():
        cases.append((RING_PLAN.name, load(RING_PLAN)))
    return cases


@pytest.mark.parametrize("windowed", [False, True])
@pytest.mark.parametrize("case", _ring_cases(), ids=lambda c: c[0])
def test_a_send_starts_a_credits_way_after_its_receive_ends(spec, case, windowed: bool) -> None:  # type: ignore[no-untyped-def]
    _, plan = case
    depth = flow_control_depth(plan.protocol)
    dag = build_dag(plan)
    credit = credit_sources(dag, depth)
    waits = np.flatnonzero(credit >= 0)
    assert waits.size
    defaults = SimOptions()
    net = _pod_net(spec, plan.ngpus, defaults.router, defaults.element_bytes, defaults.issue_queue)
    shortest = float(_credit_ns(spec, net).min())
    # a credit posted to another GPU must come no sooner than a window of windowed scheduling
    window = _window_ns(net, spec)
    assert window is not None
    assert shortest >= window > 0.0
    size = 4 << 20
    res = simulate(plan, spec, size, options=SimOptions(windowed=windowed))
    np.testing.assert_array_equal(res.landed_bytes, res.sent_bytes)
    ready, ended = res.node_t_ready[waits], res.node_t_end[credit[waits]]
    assert (ready >= ended + shortest - 1e-6).all()
    # the rule binds: with it off, some sends start before that credit could be back, and the
    # collective is not slower
    free = simulate(plan, spec, size, options=SimOptions(windowed=windowed, flow_control=False))
    assert (free.node_t_start[waits] < free.node_t_end[credit[waits]] + shortest).any()
    assert free.time_ns <= res.time_ns
    assert res.lower_bound_ns <= res.placement_floor_ns <= res.time_ns
    # the result counts the sends the credit held back: those ready exactly a credit's way after
    # their source ended (the way from the source's CU)
    tb_cu = threadblock_cus(plan, spec, flatten(plan))
    way = _credit_ns(spec, net)[tb_cu[np.searchsorted(dag.tb_indptr, credit[waits], side="right") - 1]]
    held = int(np.count_nonzero(np.isclose(ready, ended + way, rtol=0.0, atol=1e-6)))
    assert res.flow_control == {"depth": depth, "waiting_sends": int(waits.size), "modelled": True,
                                "held_sends": held}
    assert held > 0
    assert free.flow_control == {"depth": depth, "waiting_sends": int(waits.size), "modelled": False}


@pytest.mark.parametrize("collective", ["allgather", "allreduce", "alltoall", "reducescatter"])
def test_the_figures_direct_plans_never_wait_for_a_credit(collective: str) -> None:
    # what lets docs/results.md stand: a direct plan sends at most twice on a connection
    for ngpus, tbs in ((2, 1), (5, 4), (16, 2), (8, 16)):
        dag = build_dag(generate(collective, ngpus, tbs_per_peer=tbs))
        assert (credit_sources(dag, flow_control_depth(Protocol.SIMPLE)) == -1).all()


def test_a_plan_without_credits_replays_the_same(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 4, tbs_per_peer=2)
    assert (credit_sources(build_dag(plan), 2) == -1).all()
    a, b = (simulate(plan, spec, 256 * 1024, options=o).to_json() for o in (SimOptions(), NO_FLOW_CONTROL))
    for d in (a, b):
        d.pop("wall_s")
    assert "flow_control" not in a
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_fast_forward_and_slices_keep_the_credits(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allreduce", 4, algo="ring")
    assert (credit_sources(build_dag(plan), 2) >= 0).any()
    for opts in (SimOptions(fast_forward=FastForward()), SimOptions(executor_slices=True)):
        # 8 MiB chunks: four Simple slices each
        res = simulate(plan, spec, 32 << 20, packet_bytes=4096, options=opts)
        np.testing.assert_array_equal(res.landed_bytes, res.sent_bytes)
        assert np.isfinite(res.node_t_end).all()


def test_a_flow_control_that_is_not_a_flag_is_a_usage_error(spec) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="flow_control must be True or False"):
        simulate(loads(pingpong(1)), spec, 4096, options=SimOptions(flow_control="yes"))  # type: ignore[arg-type]


def test_the_commands_say_what_flow_control_does(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    stuck = tmp_path / "pp3.xml"
    stuck.write_text(pingpong(3))
    res = run_cli("validate", stuck)
    assert res.code == 1
    assert "through the executors' flow control" in res.err
    assert "Traceback" not in res.err
    res = run_cli("simulate", stuck, "--size", "24KiB")
    assert res.code == 1
    [line] = res.err.strip().splitlines()
    assert "waits for the flow-control credit of gpu 1 tb 0 step 3 (r)" in line
    out = tmp_path / "free.json"
    res = run_cli("simulate", stuck, "--size", "24KiB", "--no-flow-control", "--json", out)
    assert res.code == 0, res.err
    data = json.loads(out.read_text())
    assert data["landed_bytes"][0][1] == data["landed_bytes"][1][0] == 3 * 4096  # three 4 KiB chunks each way
    assert data["flow_control"] == {"depth": 2, "waiting_sends": 2, "modelled": False}
    res = run_cli("info", stuck, "--json")
    assert json.loads(res.out)["flow_control"] == {"depth": 2, "waiting_sends": 2, "sends": 6}
    res = run_cli("info", stuck)
    assert "flow control: 2 of 6 sends wait for a credit from the receive 2 sends earlier" in res.out
    res = run_cli("dag", stuck, "-o", tmp_path / "pp3.graphml")
    assert res.code == 0, res.err
    assert "warning: with the executors' flow control the plan deadlocks through 4 steps" in res.out
    fine = tmp_path / "pp2.xml"
    fine.write_text(pingpong(2))
    for command in (("info", fine), ("dag", fine, "-o", tmp_path / "pp2.graphml")):
        res = run_cli(*command)
        assert res.code == 0, res.err
        assert "flow control" not in res.out


def test_credits_keep_windowed_replays_exact_on_any_thread_count(spec) -> None:  # type: ignore[no-untyped-def]
    # a credit is an event posted to another GPU's queue: the windows must order it the same
    # however the GPUs are spread over threads
    plan = generate("allreduce", 4, algo="ring")
    runs = [simulate(plan, spec, 1 << 20, options=SimOptions(windowed=True, threads=t)) for t in (1, 2)]
    assert runs[0].flow_control is not None
    assert runs[0].flow_control["held_sends"] > 0
    np.testing.assert_array_equal(runs[0].node_t_end, runs[1].node_t_end)
    assert runs[0].time_ns == runs[1].time_ns
