"""``benchmarks/bench_sim.py --spread``: ``auto``'s error against the flits at each size and its
range, with the replays stubbed (they take minutes and are left to the benchmark's users)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import benchmark_module


def test_spread_reports_each_sizes_error_and_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    bench = benchmark_module("bench_sim")
    sizes = bench.SPREAD_SIZES
    flits = {size: 1000.0 + i for i, size in enumerate(sizes)}
    errors = {size: -2.0 * (i + 1) for i, size in enumerate(sizes)}  # percent
    olds = {size: 3.0 - i for i, size in enumerate(sizes)}  # one flit of credit per packet

    def fake_spawn(args: list[str]) -> dict[str, Any]:
        _, _, size, _, packet, *flags = args[1].split(":")
        t = flits.get(int(size), 1.0)
        if packet == "auto":
            t *= 1 + (olds if flags == ["credit1"] else errors)[int(size)] / 100
        return {"time_ns": t, "packet_bytes": 512 if packet == "auto" else 256}

    bench._spawn = fake_spawn
    bench._spread()
    out = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in out if line.split() and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == list(sizes)
    assert [float(r[4].rstrip("%")) for r in rows] == pytest.approx([errors[s] for s in sizes])
    assert [float(r[6].rstrip("%")) for r in rows] == pytest.approx([olds[s] for s in sizes])
    for line, errs in zip(out[-2:], (errors, olds), strict=True):
        values = list(errs.values())
        mean = sum(values) / len(values)
        mean_abs = sum(abs(v) for v in values) / len(values)
        assert f"error from {min(values):+.2f}% to {max(values):+.2f}%, mean {mean:+.2f}%, " \
               f"mean |error| {mean_abs:.2f}%" in line
    assert out[-2].startswith("auto's error")


def test_the_compile_probe_runs_as_the_command_only_when_asked() -> None:
    import gc

    from nuna.process import GC_THRESHOLDS

    bench = benchmark_module("bench_sim")
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)  # Python's defaults: what a library script runs with
        assert bench._compile_probe(False)["case"] == "compile"
        assert gc.get_threshold() == (700, 10, 10)
        bench._compile_probe(True)
        assert gc.get_threshold() == GC_THRESHOLDS
    finally:
        gc.set_threshold(*before)


def test_a_case_reports_its_system_time_apart() -> None:
    bench = benchmark_module("bench_sim")
    r = bench._case("tiny", 2, 1 << 16, 1, "256")
    assert 0.0 <= r["system_s"] <= r["cpu_s"]
    assert r["events"] > 0
    # per user-mode second is at least per CPU second: the same events over less time
    assert r["events_per_user_s"] >= r["events_per_cpu_s"] > 0
    assert r["events_per_user_s"] == pytest.approx(r["events"] / (r["cpu_s"] - r["system_s"]))
    cells = bench._row(r, 2.0).split()
    assert cells[0] == "tiny"
    assert float(cells[3]) == pytest.approx(r["system_s"], abs=0.005)  # wall, cpu, then sys
    # the event loop is part of the replay: at least as many events per its second as per the replay's
    assert 0.0 < r["loop_s"] <= r["wall_s"]
    assert r["events_per_loop_s"] >= r["events_per_wall_s"]
    assert float(cells[8]) == pytest.approx(r["events_per_loop_s"] / 1e6, abs=0.005)  # after Mev/ws
    assert cells[-1] == "met"
