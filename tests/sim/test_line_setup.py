"""Per-line head set-ups (``SimOptions.setup_per_line``, docs/simulator.md §5): the head behind a
packet of m lines bids m router set-ups after it, as the m one-line packets of the 256-byte
reference would, instead of one. Flits must replay exactly as without it, and packets must
change only through the set-up."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nuna.plan.generate import generate
from nuna.plan.xml import save
from nuna.sim import engine as eng
from nuna.sim import noc, simulate
from nuna.sim import replay as replay_mod
from nuna.sim.network import RouterParams
from nuna.sim.replay import SimOptions
from nuna.topology.spec import load_topology


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def _forcing(monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
    """Make ``module``'s engine states with the rule on, whatever the caller asked."""
    make_state = eng.make_state
    monkeypatch.setattr(module.eng, "make_state", lambda *a, **k: make_state(*a, **{**k, "line_setup": True}))


def _json(result: Any) -> dict[str, Any]:
    out = dict(result.to_json())
    out.pop("wall_s")
    return out


def test_flits_replay_the_same_with_the_rule_forced(spec, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    # an allreduce has loads (64-byte requests, 256-byte responses), reductions, local and remote
    # stores; 1,000,004 bytes leave a part line at the end of every chunk
    plan = generate("allreduce", 4, tbs_per_peer=1)
    plain = _json(simulate(plan, spec, 1_000_004, packet_bytes=256))
    _forcing(monkeypatch, replay_mod)
    assert _json(simulate(plan, spec, 1_000_004, packet_bytes=256)) == plain


def test_without_a_set_up_the_rule_changes_nothing(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allreduce", 4, tbs_per_peer=1)
    router = dataclasses.replace(RouterParams.from_topology(spec), head_setup_cycles=0.0)
    off = simulate(plan, spec, 2_000_000, packet_bytes=1024, options=SimOptions(router=router))
    on = simulate(plan, spec, 2_000_000, packet_bytes=1024,
                  options=SimOptions(router=router, setup_per_line=True))
    assert _json(on) == _json(off)


def test_packets_pay_a_set_up_per_line(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 8, tbs_per_peer=1)
    off = simulate(plan, spec, 4_000_000, packet_bytes=1024)
    on = simulate(plan, spec, 4_000_000, packet_bytes=1024, options=SimOptions(setup_per_line=True))
    assert on.time_ns > off.time_ns
    assert on.events == off.events  # the same grants, later
    np.testing.assert_array_equal(on.landed_bytes, on.sent_bytes)
    wait = {name: q["total"] for name, q in on.queueing.items()}
    wait_off = {name: q["total"] for name, q in off.queueing.items()}
    assert sum(wait.values()) > sum(wait_off.values())


def test_the_head_behind_a_worm_waits_its_lines_set_ups(monkeypatch: pytest.MonkeyPatch) -> None:
    # two 4-flit packets from router 0 to router 3 of a 4x4 mesh of one virtual channel per
    # port, born together: the first is alone on its way; the second follows it in every
    # channel and leaves the first behind it 4 set-ups later instead of 1
    mesh = noc.build_mesh(4, 4, "iq", RouterParams(vcs=1))
    birth = np.zeros(2)
    src = np.array([0, 0])
    dst = np.array([3, 3])
    plain, grants = noc.simulate_packets(mesh, birth, src, dst, 4)
    _forcing(monkeypatch, noc)
    forced, forced_grants = noc.simulate_packets(mesh, birth, src, dst, 4)
    setup = RouterParams().head_setup_cycles  # build_mesh's default, in cycles
    assert forced_grants == grants
    assert forced[0] == plain[0]
    assert forced[1] - plain[1] == pytest.approx(3 * setup)


def test_cli_setup_per_line(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = tmp_path / "ag8.xml"
    save(generate("allgather", 8, tbs_per_peer=1), plan)
    times = []
    for extra in ((), ("--setup-per-line",)):
        out = tmp_path / f"r{len(extra)}.json"
        res = run_cli("simulate", plan, "--size", "4MB", "--packet-bytes", "1024", "--json", out, *extra)
        assert res.code == 0, res.err
        times.append(json.loads(out.read_text())["time_ns"])
    assert times[1] > times[0]
