"""``nuna table``: a sweep's results as CSV or Markdown, with speedups over a baseline."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import UsageError
from nuna.experiments.figures import best_tbs_per_peer
from nuna.experiments.spec import expand
from nuna.experiments.sweep import load_results, load_sweep_spec
from nuna.experiments.table import DEFAULT_METRICS, Table, sweep_table, to_csv, to_markdown


def _record(config: str, time_ns: float, *, tbs: int = 1, size: int = 1 << 20, gpus: int = 8,
            **extra: Any) -> dict[str, Any]:
    point = {"algo": "direct", "collective": "allgather", "config": config, "gemm_bytes": 0, "gpus": gpus,
             "nar_granularity": "heuristic" if config.endswith("+NAR") else None, "packet_bytes": "auto",
             "seed": 0, "size_bytes": size, "tbs_per_peer": tbs, "topology": "nuna-4die", **extra}
    result = {"time_ns": time_ns, "time_us": time_ns / 1000, "busbw_gbps": 1e3 / time_ns,
              "remote_store_latency_ns": {"mean": 900.0, "p99": 1300.0, "histogram": [1, 2]},
              "nar_granularity_used": 4 if config.endswith("+NAR") else None}
    return {"id": "0" * 16, "point": point, "result": result, "timing": {}}


def _column(table: Table, name: str) -> list[Any]:
    i = table.columns.index(name)
    return [row[i] for row in table.rows]


def test_rows_keep_the_records_order_with_inputs_then_metrics_then_the_speedup() -> None:
    records = [_record("UA", 2000.0), _record("NAP+NAR", 1600.0), _record("UA", 5000.0, size=10 << 20),
               _record("NAP+NAR", 4000.0, size=10 << 20)]
    table = sweep_table(records)
    assert table.columns[:5] == ("plan", "collective", "gpus", "size_bytes", "config")
    assert table.columns[-len(DEFAULT_METRICS) - 1:] == (*DEFAULT_METRICS, "speedup_over_UA")
    assert _column(table, "config") == ["UA", "NAP+NAR", "UA", "NAP+NAR"]
    assert _column(table, "time_us") == [2.0, 1.6, 5.0, 4.0]
    assert _column(table, "speedup_over_UA") == pytest.approx([1.0, 1.25, 1.0, 1.25])
    # a field a point leaves out has the value a point means without it
    assert _column(table, "windowed") == [None] * 4
    assert _column(table, "reduce_fusion") == [True] * 4
    assert dict(table.fixed)["collective"] == "allgather"
    assert "size_bytes" not in dict(table.fixed)
    assert "config" not in dict(table.fixed)


def test_speedup_pairs_only_points_that_differ_in_the_configuration() -> None:
    # the 16-GPU NAP+NAR point has no UA twin; the 8-GPU UA point at 4 per peer is not the
    # twin of the NAP+NAR point at 1 per peer unless the counts are reduced to the best
    records = [_record("UA", 2000.0, tbs=4), _record("NAP+NAR", 1000.0, tbs=1),
               _record("NAP+NAR", 1000.0, gpus=16)]
    assert _column(sweep_table(records), "speedup_over_UA") == [1.0, None, None]
    assert _column(sweep_table(records, baseline=None), "config") == ["UA", "NAP+NAR", "NAP+NAR"]
    assert not any(c.startswith("speedup") for c in sweep_table(records, baseline=None).columns)
    nap = _column(sweep_table(records, baseline="NAP+NAR"), "speedup_over_NAP+NAR")
    assert nap == [None, 1.0, 1.0]  # no NAP+NAR point at 4 per peer


def test_a_baseline_of_any_field_pairs_points_that_differ_in_it_alone() -> None:
    # a variant topology against its base, each configuration against itself
    records = [_record(c, t, topology=topo) for c, topo, t in (
        ("UA", "nuna-4die", 2000.0), ("UA", "x2.toml", 1900.0), ("NAP+NAR", "nuna-4die", 1800.0),
        ("NAP+NAR", "x2.toml", 1500.0), ("NAP+NAR", "buf32.toml", 1600.0))]
    table = sweep_table(records, baseline="topology=nuna-4die")
    assert table.columns[-1] == "speedup_over_topology=nuna-4die"
    assert _column(table, "speedup_over_topology=nuna-4die") == pytest.approx(
        [1.0, 2000 / 1900, 1.0, 1800 / 1500, 1800 / 1600])
    # a field the points leave out is compared at the value it means
    windowed = sweep_table(records[:2], baseline="windowed=")
    assert _column(windowed, "speedup_over_windowed=") == [1.0, 1.0]  # each point its own twin
    with pytest.raises(UsageError, match=r"no point of the sweep has the baseline topology 'mi300x-like' "
                                         r"\(topology values: 'buf32.toml', 'nuna-4die', 'x2.toml'\)"):
        sweep_table(records, baseline="topology=mi300x-like")
    with pytest.raises(UsageError, match=r"no field 'topologies' \(did you mean 'topology'"):
        sweep_table(records, baseline="topologies=nuna-4die")


def test_best_tbs_rows_are_the_figures_choices() -> None:
    records = [_record("UA", t, tbs=k) for k, t in ((1, 3000.0), (4, 2500.0), (16, 2600.0))] + \
        [_record("NAP+NAR", t, tbs=k) for k, t in ((1, 2000.0), (4, 2100.0), (16, 2200.0))]
    table = sweep_table(records, best_tbs=True)
    choices = best_tbs_per_peer(records)
    assert len(table.rows) == len(choices) == 2
    assert _column(table, "tbs_per_peer") == [c.tbs_per_peer for c in choices] == [4, 1]
    assert _column(table, "speedup_over_UA") == pytest.approx([1.0, 2500.0 / 2000.0])


def test_default_metrics_a_sweep_lacks_are_left_out() -> None:
    records = [_record("UA", 2000.0), _record("UA+NAR", 1900.0)]
    for r in records:
        del r["result"]["remote_store_latency_ns"]
    names = [c for c in sweep_table(records).columns if c in DEFAULT_METRICS]
    assert names == ["time_us", "busbw_gbps", "nar_granularity_used"]


def test_metric_paths_read_nested_values_and_are_checked() -> None:
    records = [_record("UA", 2000.0), _record("UA+NAR", 1900.0)]
    table = sweep_table(records, ["remote_store_latency_ns.p99"])
    assert _column(table, "remote_store_latency_ns.p99") == [1300.0, 1300.0]
    with pytest.raises(UsageError, match=r"metric 'time_u' is in no result.*did you mean 'time_us'"):
        sweep_table(records, ["time_u"])
    with pytest.raises(UsageError, match=r"is a table: pick one of its entries .*mean, p99"):
        sweep_table(records, ["remote_store_latency_ns"])
    with pytest.raises(UsageError, match="is a list"):
        sweep_table(records, ["remote_store_latency_ns.histogram"])
    with pytest.raises(UsageError, match=r"baseline configuration 'NUMA' \(config values: 'UA', 'UA\+NAR'\)"):
        sweep_table(records, baseline="NUMA")
    with pytest.raises(UsageError, match="no finished points"):
        sweep_table([])
    untimed = [{**records[0], "result": {"digest": 7}}]  # another point function's result
    assert _column(sweep_table(untimed, ["digest"]), "speedup_over_UA") == [None]
    with pytest.raises(UsageError, match=r"fastest threadblock count needs .* a time_ns"):
        sweep_table(untimed, ["digest"], best_tbs=True)


def test_a_metric_some_results_lack_is_an_empty_cell_and_a_clashing_name_is_prefixed() -> None:
    records = [_record("UA", 2000.0), _record("UA+NAR", 1900.0)]
    records[1]["result"]["packet_bytes"] = 512
    table = sweep_table(records, ["packet_bytes"])
    assert "packet_bytes" in table.columns  # the point's field ("auto")
    assert _column(table, "packet_bytes") == ["auto", "auto"]
    assert _column(table, "result.packet_bytes") == [None, 512]
    assert to_csv(table).splitlines()[1].split(",")[table.columns.index("result.packet_bytes")] == ""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1e-3, max_value=1e12, allow_nan=False), min_size=1, max_size=6))
def test_csv_reads_back_every_value_exactly(times: list[float]) -> None:
    records = [_record("UA", t, size=1024 * (i + 1)) for i, t in enumerate(times)]
    table = sweep_table(records, ["time_ns", "nar_granularity_used"])
    rows = list(csv.reader(io.StringIO(to_csv(table))))
    assert tuple(rows[0]) == table.columns
    col = table.columns.index("time_ns")
    assert [float(r[col]) for r in rows[1:]] == times
    assert [r[table.columns.index("nar_granularity_used")] for r in rows[1:]] == [""] * len(times)
    assert all(r[table.columns.index("reduce_fusion")] == "true" for r in rows[1:])
    assert all(math.isclose(float(r[-1]), 1.0) for r in rows[1:])


def test_markdown_shows_the_varying_fields_and_says_the_set_fixed_ones() -> None:
    records = [_record("UA", 2000.0, windowed=True), _record("NAP+NAR", 1600.0, windowed=True)]
    text = to_markdown(sweep_table(records))
    first, blank, header, rule, *rows = text.splitlines()
    assert first.startswith("fixed: ")
    assert "windowed = yes" in first
    assert "size_bytes = 1MiB" in first
    assert "reduce_fusion" not in first  # at the value a point has without it
    assert blank == ""
    assert header.split(" | ")[0] == "| config"
    assert rule == "|" + "---|" * (header.count("|") - 1)
    assert rows[1].startswith("| NAP+NAR | heuristic | 1.6 |")
    big = to_markdown(sweep_table([_record("UA", 12345.678)], ["time_ns", "time_us"], baseline=None))
    assert big.splitlines()[-1] == "| 12346 | 12.35 |"
    assert rows[1].endswith("| 1.25 |")


def test_the_command_tabulates_a_sweep_folder(run_cli: Callable[..., Any], fake_points: str,
                                              write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec_path = write_spec()
    out = tmp_path / "out"
    assert run_cli("sweep", spec_path, "-o", out, "-j", "1", "-q").code == 0
    # the fake points' results hold none of the default metrics but time_ns: no column for them
    header = run_cli("table", out).out.splitlines()[0]
    assert header.endswith(",flow_control,packet_credit_lines,speedup_over_UA")
    res = run_cli("table", out, "-m", "time_ns", "-m", "digest")
    assert res.code == 0, res.err
    rows = list(csv.reader(io.StringIO(res.out)))
    records = load_results(out)
    assert len(rows) - 1 == len(records) == len(expand(load_sweep_spec(spec_path)))
    assert rows[0][-3:] == ["time_ns", "digest", "speedup_over_UA"]
    assert [int(r[-2]) for r in rows[1:]] == [r["result"]["digest"] for r in records]
    # the fake point's time ignores the configuration: every twin is as fast as its UA point
    assert {r[-1] for r in rows[1:]} == {"1.0"}

    md = tmp_path / "table.md"
    res = run_cli("table", out, "-o", md, "--baseline", "none")
    assert res.code == 0, res.err
    assert md.read_text().splitlines()[2].startswith("| collective | gpus | size_bytes | config |")
    assert f"wrote {md}" in res.err

    bad = run_cli("table", out, "-m", "time_nss")
    assert bad.code == 1
    assert bad.err.startswith("nuna: error: metric 'time_nss'")
    assert "Traceback" not in bad.err
    inside = run_cli("table", out, "-o", out / "results" / "t.csv")
    assert inside.code != 0
    assert "sweep's own records" in inside.err
    assert run_cli("table", out, "-o", out / "index.json").code != 0
    missing = run_cli("table", out, "-o", tmp_path / "no" / "such" / "t.csv")
    assert missing.code == 1
    assert missing.out == ""
    assert load_results(out) == records  # the folder is untouched
    assert run_cli("table", tmp_path).code == 1  # not a sweep folder
