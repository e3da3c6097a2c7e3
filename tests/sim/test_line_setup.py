"""Head set-ups behind packets of several lines (``SimOptions.line_setups``, docs/simulator.md
§5): the one-line packets of the 256-byte reference each redo route computation and VC
allocation at the head of their channel. ``one`` charges a packet one set-up, ``series`` one per
line after its tail, ``overlap`` (the default) lets the next head go no sooner than those
packets' set-ups would have let them leave over the channels of the port with room. Flits must
replay exactly as under every rule, and packets must change only through the set-up."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nuna.errors import UsageError
from nuna.passes import PassContext, apply_config
from nuna.plan.generate import generate
from nuna.plan.xml import save
from nuna.sim import engine as eng
from nuna.sim import noc, simulate
from nuna.sim import replay as replay_mod
from nuna.sim.network import RouterParams
from nuna.sim.replay import SimOptions
from nuna.topology.spec import load_topology
from tests.conftest import force_engine_state

RULES = {"series": eng.LINE_SETUP_SERIES, "overlap": eng.LINE_SETUP_OVERLAP}


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def _json(result: Any) -> dict[str, Any]:
    out = dict(result.to_json())
    out.pop("wall_s")
    return out


@pytest.mark.parametrize("rule", sorted(RULES))
def test_flits_replay_the_same_with_the_rule_forced(spec, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                    rule: str) -> None:
    # an allreduce has loads (64-byte requests, 256-byte responses), reductions, local and remote
    # stores; 1,000,004 bytes leave a part line at the end of every chunk
    plan = generate("allreduce", 4, tbs_per_peer=1)
    plain = _json(simulate(plan, spec, 1_000_004, packet_bytes=256))
    force_engine_state(monkeypatch, replay_mod, line_setup=RULES[rule])
    assert _json(simulate(plan, spec, 1_000_004, packet_bytes=256)) == plain


@pytest.mark.parametrize("rule", sorted(RULES))
def test_without_a_set_up_the_rule_changes_nothing(spec, rule: str) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allreduce", 4, tbs_per_peer=1)
    router = dataclasses.replace(RouterParams.from_topology(spec), head_setup_cycles=0.0)
    one = simulate(plan, spec, 2_000_000, packet_bytes=1024,
                   options=SimOptions(router=router, line_setups="one"))
    other = simulate(plan, spec, 2_000_000, packet_bytes=1024,
                     options=SimOptions(router=router, line_setups=rule))
    assert _json(other) == _json(one)


def test_the_default_is_overlap(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 8, tbs_per_peer=1)
    default = simulate(plan, spec, 4_000_000, packet_bytes=1024)
    overlap = simulate(plan, spec, 4_000_000, packet_bytes=1024, options=SimOptions(line_setups="overlap"))
    one = simulate(plan, spec, 4_000_000, packet_bytes=1024, options=SimOptions(line_setups="one"))
    assert _json(default) == _json(overlap)
    assert default.time_ns != one.time_ns


@pytest.mark.parametrize("rule", sorted(RULES))
def test_packets_pay_set_ups_per_line(spec, rule: str) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 8, tbs_per_peer=1)
    one = simulate(plan, spec, 4_000_000, packet_bytes=1024, options=SimOptions(line_setups="one"))
    on = simulate(plan, spec, 4_000_000, packet_bytes=1024, options=SimOptions(line_setups=rule))
    assert on.events == one.events  # the same grants, at other times
    np.testing.assert_array_equal(on.landed_bytes, on.sent_bytes)
    assert on.time_ns >= on.lower_bound_ns
    if rule == "series":
        # every head behind a packet waits at least as long as under "one"; under "overlap" a
        # set-up may also shift which packet wins a later arbitration, and the collective
        # here ends 0.6 % sooner (measured): no order is promised between the two
        assert on.time_ns > one.time_ns
        wait = sum(q["total"] for q in on.queueing.values())
        assert wait > sum(q["total"] for q in one.queueing.values())
    else:
        assert on.time_ns != one.time_ns


def test_overlapped_set_ups_bring_small_packets_close_to_flits_where_stores_converge(spec) -> None:  # type: ignore[no-untyped-def]
    # 16-GPU 4 MB direct allgather under NAP+NAR, 1 KiB packets: heads queue where 15 senders'
    # stores converge, and there a flit's own set-up counts. Measured 2026-12-04 against the
    # flits: one set-up per packet -12.2 %, overlapped -2.3 % (docs/simulator.md §5)
    size = 4_000_000
    plan = apply_config(generate("allgather", 16, tbs_per_peer=1), "NAP+NAR", PassContext(spec, size))
    flits = simulate(plan, spec, size, packet_bytes=256).time_ns
    overlap = simulate(plan, spec, size, packet_bytes=1024).time_ns
    one = simulate(plan, spec, size, packet_bytes=1024, options=SimOptions(line_setups="one")).time_ns
    assert abs(overlap / flits - 1) < 0.04
    assert one / flits - 1 < -0.10


def test_an_unknown_rule_is_a_usage_error(spec) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="head set-ups"):
        simulate(generate("allgather", 2), spec, 4096, options=SimOptions(line_setups="twice"))
    with pytest.raises(ValueError, match="set-up rule"):
        eng.make_state(noc.build_mesh(2, 1).net, 4, 64, 4, line_setup=7)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_head_behind_a_worm_waits_its_lines_set_ups(monkeypatch: pytest.MonkeyPatch, rule: str) -> None:
    # two 4-flit packets from router 0 to router 3 of a 4x4 mesh of one virtual channel per
    # port, born together: the first is alone on its way; the second follows it in every
    # channel and leaves the first behind it 4 set-ups later instead of 1. With one channel
    # there is no other to overlap in, so both rules charge the 4
    mesh = noc.build_mesh(4, 4, "iq", RouterParams(vcs=1))
    birth = np.zeros(2)
    src = np.array([0, 0])
    dst = np.array([3, 3])
    plain, grants = noc.simulate_packets(mesh, birth, src, dst, 4)
    force_engine_state(monkeypatch, noc, line_setup=RULES[rule])
    forced, forced_grants = noc.simulate_packets(mesh, birth, src, dst, 4)
    setup = RouterParams().head_setup_cycles  # build_mesh's default, in cycles
    assert forced_grants == grants
    assert forced[0] == plain[0]
    assert forced[1] - plain[1] == pytest.approx(3 * setup)


def _port_state() -> tuple[Any, int, int, int, float]:
    """An engine state of a 2x1 mesh of 4 virtual channels per port: a buffered edge, its
    first channel row, its room per channel and the flit."""
    mesh = noc.build_mesh(2, 1, "iq", RouterParams(vcs=4))
    st = eng.make_state(mesh.net, 4, 64, 4, line_setup=eng.LINE_SETUP_OVERLAP)
    edge = int(np.flatnonzero((st.ei[:, eng.EI_CAP] > 0) & (st.ei[:, eng.EI_NVC] == 4))[0])
    return st, edge, int(st.ei[edge, eng.EI_VBASE]), int(st.ei[edge, eng.EI_CAP]), float(mesh.net.flit[0])


def test_the_channels_a_stream_is_dealt_over_are_those_with_room() -> None:
    st, edge, base, cap, flit = _port_state()
    own = base  # the channel the packet leaves
    st.vu[base:base + 4] = cap  # every channel full: only its own
    assert eng._channels_with_room(st, edge, own, flit, 0.0) == 1
    st.vu[own] = 0.0  # which counts whatever its room
    assert eng._channels_with_room(st, edge, own, flit, 0.0) == 1
    for free in (1, 2, 3):
        st.vu[base + free] = cap - flit  # room for exactly one flit
        assert eng._channels_with_room(st, edge, own, flit, 0.0) == free + 1
    st.vu[base + 1] = cap - flit + 1  # not quite a flit
    assert eng._channels_with_room(st, edge, own, flit, 0.0) == 3


def test_the_channels_with_room_count_due_credit_returns() -> None:
    st, edge, base, cap, flit = _port_state()
    st.vu[base:base + 4] = cap
    ring = int(st.ctr[eng.C_RING])
    st.vf[base + 2, eng.VF_CRN] = 1  # a flit's credit comes back to channel 2 at 5 ns
    st.vf[base + 2, eng.VF_RING] = 5.0
    st.vf[base + 2, eng.VF_RING + ring] = flit
    assert eng._channels_with_room(st, edge, base, flit, 4.0) == 1
    assert eng._channels_with_room(st, edge, base, flit, 5.0) == 2
    assert st.vu[base + 2] == cap  # read, not applied
    assert st.vf[base + 2, eng.VF_CRN] == 1


def test_cli_line_setups(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = tmp_path / "ag8.xml"
    save(generate("allgather", 8, tbs_per_peer=1), plan)
    times = {}
    for rule in ("one", "series", "overlap", None):
        out = tmp_path / f"r{rule}.json"
        extra = () if rule is None else ("--line-setups", rule)
        res = run_cli("simulate", plan, "--size", "4MB", "--packet-bytes", "1024", "--json", out, *extra)
        assert res.code == 0, res.err
        times[rule] = json.loads(out.read_text())["time_ns"]
    assert times["series"] > times["one"]
    assert times[None] == times["overlap"]
    res = run_cli("simulate", plan, "--size", "4MB", "--line-setups", "twice")
    assert res.code == 2
    assert "twice" in res.err
