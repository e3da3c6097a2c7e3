"""The replay loop pauses every fraction of a second of wall time so that Ctrl-C is heard
(``nuna.sim.fastforward._run_pausing``), and a pause changes nothing: the same bytes out with
one call into the compiled loop or dozens, one queue or windowed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nuna.plan.generate import generate
from nuna.sim import SimOptions, simulate
from nuna.sim import fastforward as ff
from nuna.topology import load_topology


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the driver's calls into the compiled loop (one entry per simulate)."""
    counted: list[int] = []
    loop = ff._loop

    def counting(*args: Any) -> Any:
        counted[-1] += 1
        return loop(*args)

    monkeypatch.setattr(ff, "_loop", counting)
    return counted


def _replay(spec: Any, calls: list[int], monkeypatch: pytest.MonkeyPatch, pause_s: float, *args: Any,
            **kwargs: Any) -> str:
    monkeypatch.setattr(ff, "PAUSE_EVERY_S", pause_s)
    calls.append(0)
    out = simulate(*args[:1], spec, *args[1:], **kwargs).to_json()
    out.pop("wall_s")
    return json.dumps(out, sort_keys=True)


@pytest.mark.parametrize(("collective", "gpus", "size", "windowed", "packet"), [
    ("allgather", 8, 1 << 20, False, 256),
    ("allreduce", 4, 256 << 10, False, 256),  # reductions, two phases: steps end mid-pause too
    ("allgather", 16, 1 << 20, True, 256),    # windowed: its totals are summed once, at the end
    ("alltoall", 16, 2 << 20, True, "auto"),
])
def test_pauses_change_nothing(spec, calls, monkeypatch, collective: str, gpus: int, size: int,  # type: ignore[no-untyped-def]
                               windowed: bool, packet: int | str) -> None:
    plan = generate(collective, gpus, tbs_per_peer=2)
    options = SimOptions(windowed=windowed)
    # a pause as often as the floor allows (every 100 ns of simulated time), and none
    often = _replay(spec, calls, monkeypatch, 0.0, plan, size, packet_bytes=packet, options=options)
    never = _replay(spec, calls, monkeypatch, 1e9, plan, size, packet_bytes=packet, options=options)
    assert calls[0] > 10
    assert calls[1] <= 3  # the adaptation grows the stretch 4x a call: a few calls to reach the end
    assert often == never


def test_a_long_replay_returns_to_python_regularly(spec, calls, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # what lets Ctrl-C through: a replay of a second or so with a pause wanted every 10 ms
    # makes many calls, whatever the machine's speed (each call's stretch follows the last)
    plan = generate("allgather", 8, tbs_per_peer=16)
    monkeypatch.setattr(ff, "PAUSE_EVERY_S", 0.01)
    calls.append(0)
    result = simulate(plan, spec, 8 << 20)
    assert result.wall_s > 0.1
    assert calls[0] >= 5


def test_fast_forward_must_be_its_parameters(spec) -> None:  # type: ignore[no-untyped-def]
    # True raised an AttributeError from inside the replay
    from nuna.errors import UsageError

    with pytest.raises(UsageError, match=r"SimOptions\.fast_forward must be a FastForward"):
        simulate(generate("allgather", 2), spec, 4096, options=SimOptions(fast_forward=True))  # type: ignore[arg-type]
