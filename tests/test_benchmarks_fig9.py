"""Where ``benchmarks/bench_fig9.py`` says a sweep's time went (``--from``, and after ``--grid``):
sums of the points' wall times per axis value and the costliest points, from result records.
Running the grid itself takes half an hour and is left to the benchmark's users."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import benchmark_module


def _record(collective: str, gpus: int, size: int, config: str, point_s: float,
            sim_s: float) -> dict[str, Any]:
    return {"point": {"collective": collective, "gpus": gpus, "size_bytes": size, "config": config,
                      "tbs_per_peer": 1},
            "timing": {"point_wall_s": point_s, "wall_s": sim_s}}


def test_breakdown_sums_the_event_loop_only_when_every_point_timed_it(capsys: Any) -> None:
    bench = benchmark_module("bench_fig9")
    records = [_record("allreduce", 64, 1 << 30, "UA", 100.0, 90.0),
               _record("allgather", 8, 100 * 1024, "NAP+NAR", 1.0, 0.5)]
    records[0]["timing"]["loop_s"] = 80.0
    assert bench.time_breakdown(records)["loop_s"] is None  # one point without: no sum
    records[1]["timing"]["loop_s"] = 0.25
    b = bench.time_breakdown(records)
    assert b["loop_s"] == 80.25
    bench.print_breakdown(b)
    assert "in the event loop 80 s, 79 %" in capsys.readouterr().out


def test_breakdown_sums_each_axis_in_its_natural_order() -> None:
    bench = benchmark_module("bench_fig9")
    records = [_record("allreduce", 64, 1 << 30, "UA", 100.0, 90.0),
               _record("allgather", 8, 100 * 1024, "NAP+NAR", 1.0, 0.5),
               _record("allgather", 64, 100 * 1024, "UA", 4.0, 3.0)]
    b = bench.time_breakdown(records, top=2)
    assert (b["points"], b["point_s"], b["simulate_s"]) == (3, 105.0, 93.5)
    assert b["by"]["size"] == [("100KiB", 5.0), ("1GiB", 100.0)]  # by bytes, not by label
    assert b["by"]["pod"] == [("8 GPUs", 1.0), ("64 GPUs", 104.0)]  # by count, not by label
    assert b["by"]["collective"] == [("allgather", 5.0), ("allreduce", 100.0)]
    assert b["costliest"] == [(100.0, "allreduce 64 GPUs 1GiB UA K=1"),
                              (4.0, "allgather 64 GPUs 100KiB UA K=1")]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["allgather", "allreduce", "alltoall"]),
                          st.sampled_from([2, 4, 64]), st.sampled_from([1 << 20, 1 << 30]),
                          st.sampled_from(["UA", "NAP+NAR"]),
                          st.floats(min_value=0.0, max_value=1e4, allow_nan=False)), max_size=30))
def test_every_axis_accounts_for_the_whole_point_time(rows: list[tuple[str, int, int, str, float]]) -> None:
    bench = benchmark_module("bench_fig9")
    b = bench.time_breakdown([_record(c, g, s, k, t, t / 2) for c, g, s, k, t in rows])
    assert b["point_s"] == pytest.approx(sum(r[4] for r in rows))
    for name, cells in b["by"].items():
        assert sum(t for _, t in cells) == pytest.approx(b["point_s"]), name
    times = [t for t, _ in b["costliest"]]
    assert times == sorted(times, reverse=True)
    assert len(times) == min(5, len(rows))
    if rows:
        assert times[0] == max(r[4] for r in rows)


def test_grid_refuses_a_folder_with_results_in_it(tmp_path: Any) -> None:
    bench = benchmark_module("bench_fig9")
    (tmp_path / "sweeps").mkdir()
    with pytest.raises(SystemExit, match="not empty"):
        bench.run_grid(tmp_path, 2)


def _serial(walls: list[float], costs: list[float], t0: float = 0.0) -> list[tuple[float, float, float]]:
    """``progress_check``'s rows of one worker running points of these wall times and costs."""
    rows, t = [], t0
    for wall, cost in zip(walls, costs, strict=True):
        t += wall
        rows.append((t, wall, cost))
    return rows


costs_st = st.lists(st.floats(min_value=0.01, max_value=1e3), min_size=4, max_size=40)


@settings(max_examples=50, deadline=None)
@given(costs=costs_st, seconds_per_cost=st.floats(min_value=0.01, max_value=10.0))
def test_the_cost_eta_is_exact_for_a_serial_run_whose_times_follow_the_costs(
        costs: list[float], seconds_per_cost: float) -> None:
    # one worker, each point taking its estimated cost's time: the cost-weighted ETA is the time
    # left at every mark; the count's only where the points cost alike
    bench = benchmark_module("bench_fig9")
    check = bench.progress_check(_serial([c * seconds_per_cost for c in costs], costs, 1000.0))
    assert check["wall_s"] == pytest.approx(sum(costs) * seconds_per_cost)
    assert check["ratios"] == pytest.approx([seconds_per_cost] * len(costs))
    assert [m[0] for m in check["marks"]] == list(bench.ETA_MARKS)
    for _, elapsed, left, by_count, by_cost in check["marks"]:
        assert by_cost == pytest.approx(left, rel=1e-6, abs=1e-6)
        assert 0 < elapsed <= check["wall_s"] * (1 + 1e-9)
        assert by_count >= 0


@settings(max_examples=50, deadline=None)
@given(costs=costs_st, start=st.floats(min_value=0.5, max_value=1e3))
def test_a_workers_start_is_charged_to_its_first_point_as_the_runner_charges_it(
        costs: list[float], start: float) -> None:
    # one worker whose first point also pays the worker's start (as a fresh process's first
    # point pays its warm-up): charged that start, the ETA is the time left at every mark
    bench = benchmark_module("bench_fig9")
    rows = _serial([costs[0] + start, *costs[1:]], costs)
    charged = bench.progress_check(rows, workers=1, start_cost=start)
    for _, _, left, _, by_cost in charged["marks"]:
        assert by_cost == pytest.approx(left, rel=1e-6, abs=1e-6)
    # without the charge the first point looks dear, and the ETA is too long while it counts
    first = bench.progress_check(rows)["marks"][0]
    assert first[4] > first[2] * (1 + 1e-9) or first[2] == pytest.approx(0.0, abs=1e-6)


def test_the_count_eta_misses_when_the_dear_points_come_last() -> None:
    bench = benchmark_module("bench_fig9")
    costs = [1.0] * 90 + [100.0] * 10  # a sweep's order: small pods first
    rows = _serial(costs, costs)
    half = next(m for m in bench.progress_check(rows)["marks"] if m[0] == 0.5)
    _, elapsed, left, by_count, by_cost = half
    assert (elapsed, left) == (50.0, 1040.0)
    assert by_count == pytest.approx(50.0)  # 50 points in 50 s: 50 s for the 50 left
    assert by_cost == pytest.approx(1040.0)


def test_finished_points_reads_a_sweep_folder_in_finishing_order(tmp_path: Any) -> None:
    import json
    import os

    bench = benchmark_module("bench_fig9")
    from nuna.experiments.cost import point_cost
    from nuna.experiments.spec import DEFAULT_POINT_FUNCTION

    results = tmp_path / "results"
    results.mkdir()
    points = [{"collective": "allgather", "gpus": g, "size_bytes": 1 << 20, "packet_bytes": 256}
              for g in (2, 8, 4)]
    for i, (point, finished) in enumerate(zip(points, (30.0, 10.0, 20.0), strict=True)):
        path = results / f"p{i}.json"
        path.write_text(json.dumps({"point": point, "point_function": DEFAULT_POINT_FUNCTION,
                                    "timing": {"point_wall_s": 5.0}}))
        os.utime(path, (finished, finished))
    rows = bench.finished_points(tmp_path)
    assert [r[0] for r in rows] == [10.0, 20.0, 30.0]
    assert [r[2] for r in rows] == [point_cost(DEFAULT_POINT_FUNCTION, points[k]) for k in (1, 2, 0)]
