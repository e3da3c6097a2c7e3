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
