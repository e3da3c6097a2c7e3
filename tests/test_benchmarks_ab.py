"""The A/B timing tool's own logic (``benchmarks/ab.py``): case parsing and the summary it prints.
Running it needs a second compiled engine (minutes), so that is left to its users."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.conftest import benchmark_module


def _ab() -> ModuleType:
    return benchmark_module("ab")


def test_parses_cases() -> None:
    ab = _ab()
    case = ab.parse_case("allgather:64:1MiB:1:256:windowed")
    c = case
    fields = (c.collective, c.gpus, c.size_bytes, c.tbs_per_peer, c.packet_bytes, c.windowed)
    assert fields == ("allgather", 64, 1 << 20, 1, 256, True)
    auto = ab.parse_case("alltoall:8:100kB:4:auto")
    assert (auto.size_bytes, auto.packet_bytes, auto.windowed) == (100_000, "auto", None)
    assert ab.parse_case("allgather:64:1MiB:1:256:one-queue").windowed is False
    assert auto.config is None
    placed = ab.parse_case("allgather:32:1GiB:1:auto:windowed@NAP+NAR")
    assert (placed.gpus, placed.packet_bytes, placed.windowed, placed.config) == (32, "auto", True, "NAP+NAR")
    assert ab.parse_case("allgather:8:1MiB:4:256@NAP*").config == "NAP*"
    for bad in ("allgather:8:1MiB:1", "allgather:8:1MiB:1:256:fast", "allgather:x:1MiB:1:256",
                "allgather:8:1XB:1:256", "allgather:8:1MiB:1:256@NAP+", "allgather:8:1MiB:1:256@",
                # refused before minutes of checkout and compile, not by the replay
                "allgather:8:1MiB:0:256", "allgather:1:1MiB:1:256", "allgather:8:1MiB:1:0"):
        with pytest.raises(ValueError, match="case"):
            ab.parse_case(bad)


def test_summary_is_best_and_median_with_speedup_of_new_over_base() -> None:
    s = _ab().summarize({"base": [9.0, 6.0, 12.0, 7.0, 8.0], "new": [5.0, 4.0, 9.0]})
    assert (s["base_best"], s["base_median"], s["new_best"], s["new_median"]) == (6.0, 8.0, 4.0, 5.0)
    assert s["speedup_best"] == pytest.approx(1.5)
    assert s["speedup_median"] == pytest.approx(1.6)
