"""``benchmarks/bench_sim.py --spread``'s summary of ``auto``'s error over sizes. The replays
take minutes and are left to the benchmark's users."""

from __future__ import annotations

import pytest

from tests.conftest import benchmark_module


def test_error_spread_is_lowest_highest_and_mean() -> None:
    bench = benchmark_module("bench_sim")
    low, high, mean = bench.error_spread([-8.21, -3.61, -4.41, -10.85])
    assert (low, high) == (-10.85, -3.61)
    assert mean == pytest.approx(-6.77)

