"""Credit a packet takes on entering a buffer (``SimOptions.packet_credit_lines``, engine
``_need``; docs/simulator.md §5, "Two lines of credit per packet"): at most its size and the
buffer, flits untouched, and the command line and option checks (every byte of it returned:
tests/sim/test_pileup.py, over the counts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import UsageError
from nuna.passes import PassContext, apply_config
from nuna.plan.generate import generate
from nuna.plan.xml import load, save
from nuna.sim import engine as eng
from nuna.sim import noc, simulate
from nuna.sim.replay import DEFAULT_PACKET_CREDIT_LINES, SimOptions
from nuna.topology.spec import load_topology
from tests.conftest import PLANS_MSCCL


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def _fields(result) -> dict:  # type: ignore[no-untyped-def]
    data = json.loads(json.dumps(result.to_json()))
    data.pop("wall_s", None)
    return data


@settings(max_examples=50, deadline=None)
@given(size=st.integers(1, 1 << 20), cap=st.integers(1, 1 << 16), lines=st.integers(1, 64))
def test_a_packet_takes_its_lines_of_credit_within_its_size_and_the_buffer(size: int, cap: int,
                                                                          lines: int) -> None:
    need = eng._need(size, cap, lines * 256)
    assert need == min(size, cap, lines * 256)


def test_the_state_carries_the_credit_of_its_flit(spec) -> None:  # type: ignore[no-untyped-def]
    mesh = noc.build_mesh(4, 4, "iq")
    flit = int(mesh.net.flit[0])
    for lines in (1, 2, 5):
        state = eng.make_state(mesh.net, 8, 1024, 4, credit_lines=lines)
        assert state.ctr[eng.C_ENTRY_CREDIT] == lines * flit
    assert eng.make_state(mesh.net, 8, 1024, 4).ctr[eng.C_ENTRY_CREDIT] == flit  # nuna <= 0.15.0
    with pytest.raises(ValueError, match="at least a flit"):
        eng.make_state(mesh.net, 8, 1024, 4, credit_lines=0)


def test_simple_flits_replay_the_same_whatever_a_packets_credit(spec) -> None:  # type: ignore[no-untyped-def]
    plan = apply_config(generate("allgather", 4, tbs_per_peer=2), "NUMA+NAR", PassContext(spec, 1 << 20))
    results = [_fields(simulate(plan, spec, 1 << 20, packet_bytes=256,
                                options=SimOptions(packet_credit_lines=lines))) for lines in (1, 2, 7)]
    assert results[0] == results[1] == results[2]


@pytest.mark.skipif(not (PLANS_MSCCL / "allgather_allpairs_n8_i1_LL.xml").is_file(), reason="no MSCCL corpus")
def test_an_ll_line_is_a_packet_of_two_flits_that_takes_both(spec) -> None:  # type: ignore[no-untyped-def]
    # LL puts a flag beside every 8 bytes: a 256-byte line is 512 bytes on the wire (nuna.plan.wire)
    plan = load(PLANS_MSCCL / "allgather_allpairs_n8_i1_LL.xml")
    one, two, three = (simulate(plan, spec, 1 << 20, packet_bytes=256,
                                options=SimOptions(packet_credit_lines=lines)).time_ns for lines in (1, 2, 3))
    assert one != two
    assert two == three  # a two-flit packet takes at most its size


def test_more_credit_holds_packets_back_where_they_converge(spec) -> None:  # type: ignore[no-untyped-def]
    """2 GPUs, 8 MiB direct allgather, 16 threadblocks per peer, UA: the 32 senders' loads and
    stores converge on the stacks and ports. Measured 2026-12-07 (nuna 0.16.0): 256-byte flits
    6,085 ns; 512-byte packets -1.72 % with one flit of credit each (nuna <= 0.15.0), +0.27 %
    with two (the default): the flits' back-pressure, which one flit per packet hides. Nearby
    sizes scatter more (32 MiB: -2.28 % and +5.89 %; docs/simulator.md §5), so this pins the
    direction and the case, not a bound on the error."""
    size = 8 << 20
    plan = apply_config(generate("allgather", 2, tbs_per_peer=16), "UA", PassContext(spec, size))
    flits = simulate(plan, spec, size, packet_bytes=256).time_ns
    one = simulate(plan, spec, size, packet_bytes=512, options=SimOptions(packet_credit_lines=1)).time_ns
    two = simulate(plan, spec, size, packet_bytes=512).time_ns
    assert DEFAULT_PACKET_CREDIT_LINES == 2
    assert one < two
    assert one / flits - 1 < -0.01
    assert abs(two / flits - 1) < 0.01


@pytest.mark.parametrize("lines", [0, True, 1 << 21])
def test_a_credit_out_of_range_is_refused(spec, lines: object) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 2, tbs_per_peer=1)
    with pytest.raises(UsageError, match="packet_credit_lines"):
        simulate(plan, spec, 1 << 16, options=SimOptions(packet_credit_lines=lines))  # type: ignore[arg-type]


def test_the_command_line_sets_the_credit(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = tmp_path / "ag.xml"
    save(generate("allgather", 2, tbs_per_peer=4), plan)
    times = {}
    for lines in (1, 2, None):
        out = tmp_path / f"r{lines}.json"
        given = () if lines is None else ("--packet-credit-lines", lines)
        res = run_cli("simulate", plan, "--size", "4MiB", "--packet-bytes", "1KiB", *given, "--json", out)
        assert res.code == 0, res.err
        times[lines] = json.loads(out.read_text())["time_ns"]
    assert times[None] == times[DEFAULT_PACKET_CREDIT_LINES]
    assert times[1] != times[2]
    bad = run_cli("simulate", plan, "--size", "4MiB", "--packet-credit-lines", "0")
    assert bad.code == 2
    assert "Traceback" not in bad.err
