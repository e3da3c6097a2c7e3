"""Fast-forward of steady states (``nuna.sim.fastforward``, docs/simulator.md §7): off by
default and then without a trace in the results; on, it skips time only inside steady states,
lands every byte, stays above the lower bound, is deterministic and stays close to the full
replay."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import UsageError
from nuna.plan.generate import generate
from nuna.plan.xml import save
from nuna.sim import SimOptions, SimResult, simulate
from nuna.sim.fastforward import FastForward, shift_times
from nuna.sim.result import Skip
from nuna.topology.spec import load_topology

# the defaults: a steady state needs about 16 us (a warm-up window, ten measured, four skipped)
# to be skipped, so the cases are a few tens of MiB on 2-4 GPUs. Shorter windows err more (2 GPUs,
# 8 MiB: +2.2 % with 500-ns windows, docs/simulator.md §7).
QUICK = FastForward()


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def _pair(spec, collective: str, gpus: int, size: int,  # type: ignore[no-untyped-def]
          windowed: bool | None = None, packet: int = 256) -> tuple[SimResult, SimResult]:
    plan = generate(collective, gpus, algo="direct", tbs_per_peer=1)
    full = simulate(plan, spec, size, packet_bytes=packet, options=SimOptions(windowed=windowed))
    fast = simulate(plan, spec, size, packet_bytes=packet,
                    options=SimOptions(windowed=windowed, fast_forward=QUICK))
    return full, fast


def test_off_by_default(spec) -> None:  # type: ignore[no-untyped-def]
    res = simulate(generate("allgather", 2), spec, 1 << 20)
    assert res.fast_forward is None
    assert "fast_forward" not in res.to_json(chip_links=False)


@pytest.mark.parametrize(("collective", "gpus", "size", "packet"), [
    ("allgather", 2, 32 << 20, 256),
    ("alltoall", 2, 32 << 20, 256),
    ("alltoall", 4, 16 << 20, 256),
    ("allreduce", 2, 8 << 20, 256),
    ("allgather", 2, 64 << 20, 4096),  # against the same packets: fast-forward is not a packet model
])
def test_close_to_the_full_replay(spec, collective: str, gpus: int, size: int,  # type: ignore[no-untyped-def]
                                  packet: int) -> None:
    full, fast = _pair(spec, collective, gpus, size, packet=packet)
    skips = fast.fast_forward
    assert skips, "no steady state was skipped"
    assert fast.time_ns == pytest.approx(full.time_ns, rel=0.02)
    assert fast.events < full.events
    # every byte lands, none twice; the bound holds; the statistics stay whole
    assert np.array_equal(fast.landed_bytes, fast.sent_bytes)
    assert fast.remote_bytes == full.remote_bytes
    assert fast.time_ns >= fast.lower_bound_ns
    assert fast.remote_store_latency.mean_ns == pytest.approx(full.remote_store_latency.mean_ns, rel=0.05)
    skipped = sum(k.skipped_ns for k in skips)
    assert fast.skipped_ns == pytest.approx(skipped)
    assert 0 < skipped < fast.time_ns
    assert full.skipped_ns == 0.0
    busy = fast.port_egress_busy_ns.sum() / full.port_egress_busy_ns.sum()
    assert busy == pytest.approx(1.0, rel=0.02)


def test_steps_neither_start_nor_end_inside_a_skip(spec) -> None:  # type: ignore[no-untyped-def]
    _, fast = _pair(spec, "allreduce", 2, 8 << 20)
    assert fast.fast_forward
    before = 0.0
    for k in fast.fast_forward:
        start, end = k.at_ns + before, k.at_ns + before + k.skipped_ns  # on the collective's clock
        for times in (fast.node_t_start, fast.node_t_end):
            t = times[np.isfinite(times)]
            assert not ((t > start) & (t < end)).any()
        before += k.skipped_ns


def test_windowed_skips_as_one_queue_does(spec) -> None:  # type: ignore[no-untyped-def]
    full, fast = _pair(spec, "allgather", 2, 32 << 20, windowed=True)
    assert fast.window_ns > 0
    assert fast.fast_forward
    assert fast.time_ns == pytest.approx(full.time_ns, rel=0.02)
    assert np.array_equal(fast.landed_bytes, fast.sent_bytes)


def test_deterministic(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 2, tbs_per_peer=1)
    outs = []
    for _ in range(2):
        data = simulate(plan, spec, 32 << 20, options=SimOptions(fast_forward=QUICK)).to_json()
        data.pop("wall_s")
        outs.append(json.dumps(data, sort_keys=True))
    assert outs[0] == outs[1]


def test_refuses_a_trace_and_bad_parameters(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 2)
    with pytest.raises(UsageError, match="trace"):
        simulate(plan, spec, 1 << 20, trace=True, options=SimOptions(fast_forward=FastForward()))
    with pytest.raises(UsageError, match="fast-forward"):
        simulate(plan, spec, 1 << 20, options=SimOptions(fast_forward=FastForward(fraction=1.5)))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(1, 1e5)), max_size=4),
       st.lists(st.floats(0, 2e6), min_size=1, max_size=20))
def test_shift_times_moves_later_times_by_the_skips_before_them(skips, times) -> None:  # type: ignore[no-untyped-def]
    skips = sorted(skips)
    made = tuple(Skip(at, d, 1, 0.0) for at, d in skips)
    t = np.array(times, dtype=np.float64)
    out = t.copy()
    shift_times(out, made)
    for before, after in zip(t.tolist(), out.tolist(), strict=True):
        assert after == pytest.approx(before + sum(d for at, d in skips if before >= at))
    # order is kept: the replay's clock and the collective's run the same way
    assert (np.diff(out[np.argsort(t, kind="stable")]) >= -1e-6).all()


def test_cli_fast_forward(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = tmp_path / "ag2.xml"
    save(generate("allgather", 2, tbs_per_peer=1), plan)
    out = tmp_path / "r.json"
    res = run_cli("simulate", plan, "--size", "32MiB", "--fast-forward", "--json", out)
    assert res.code == 0, res.err
    data = json.loads(out.read_text())
    assert data["fast_forward"]["skips"], "the default windows found no steady state in 32 MiB"
    skips = data["fast_forward"]["skips"]
    assert data["fast_forward"]["skipped_ns"] == pytest.approx(sum(k["skipped_ns"] for k in skips))
    assert "# fast-forward:" in res.out
    bad = run_cli("simulate", plan, "--size", "1MiB", "--fast-forward", "--trace", tmp_path / "t.json")
    assert bad.code != 0
    assert bad.err.count("\n") == 1
    assert "Traceback" not in bad.err
