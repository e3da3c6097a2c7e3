"""Packet sizes as a grid axis: ``[grid] packet_bytes = [256, "1KiB", "auto"]`` sweeps several
packet sizes in one folder, so that ``nuna table --baseline packet_bytes=256`` gives each coarse
replay's speed-up over (and so its error against) the flits' of the same point."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import InputError, UsageError
from nuna.experiments.spec import (
    AUTO,
    check_spec_inputs,
    expand,
    packet_cap_spec,
    parse_sweep_spec,
    point_id,
    restrict_grid,
)
from nuna.experiments.sweep import load_results
from nuna.experiments.table import sweep_table
from tests.experiments.test_table import _record as record

GRID: dict[str, Any] = {"collectives": ["allgather"], "gpus": [2, 4], "sizes": ["64KiB"], "configs": ["UA"]}


def _spec(grid: dict[str, Any] | None = None, fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"grid": {**GRID, **(grid or {})}, "fixed": dict(fixed or {})}


def test_the_axis_multiplies_the_grid_innermost_but_for_the_gemm() -> None:
    spec = parse_sweep_spec(_spec({"packet_bytes": [256, "1KiB", "auto"], "tbs_per_peer": [1, 2]}))
    assert spec.packet_bytes == (256, 1024, AUTO)
    points = expand(spec)
    assert len(points) == 2 * 2 * 3
    # the sizes of one point sit next to each other, in the file's order
    assert [p.packet_bytes for p in points[:3]] == [256, 1024, AUTO]
    assert [(p.gpus, p.tbs_per_peer) for p in points[:3]] == [(2, 1)] * 3
    assert len({point_id(p.record(), spec.point_function) for p in points}) == len(points)
    assert [p.label().split()[-1] for p in points[:3]] == ["nuna-4die", "packets=1KiB", "packets=auto"]
    # several sizes are a [grid] axis in the recorded spec
    recorded = spec.to_json()
    assert recorded["grid"]["packet_bytes"] == [256, 1024, AUTO]
    assert "packet_bytes" not in recorded["fixed"]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([256, 512, "1KiB", 4096, "auto"]))
def test_one_size_in_the_grid_is_the_fixed_setting(size: int | str) -> None:
    fixed = parse_sweep_spec(_spec(fixed={"packet_bytes": size}))
    grid = parse_sweep_spec(_spec({"packet_bytes": [size]}))
    assert fixed == grid
    assert fixed.to_json() == grid.to_json()
    assert "packet_bytes" not in grid.to_json()["grid"]
    assert [p.record() for p in expand(fixed)] == [p.record() for p in expand(grid)]


@pytest.mark.parametrize(("grid", "fixed", "message"), [
    ({"packet_bytes": [256]}, {"packet_bytes": 256}, r"\[fixed\] packet_bytes: also given in \[grid\]"),
    ({}, {"packet_bytes": [256, 512]}, r"\[fixed\] packet_bytes: one packet size .*\[grid\] packet_bytes"),
    ({"packet_bytes": [256, "big"]}, {}, r"\[grid\] packet_bytes\[1\]: .*or 'auto'"),
    ({"packet_bytes": ["1KiB", 1024]}, {}, r"\[grid\] packet_bytes\[1\]: duplicate value 1024"),
    ({"packet_bytes": []}, {}, r"\[grid\] packet_bytes: must list at least one value"),
    ({"packet_bytes": [256, 512]}, {"max_packet_bytes": 4096},
     r"\[fixed\] max_packet_bytes: .*no packet_bytes is 'auto'"),
])
def test_bad_packet_axes_are_one_line_errors(grid: dict[str, Any], fixed: dict[str, Any],
                                             message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_sweep_spec(_spec(grid, fixed))


def test_each_value_is_checked_against_the_flit_where_it_is_given() -> None:
    spec = parse_sweep_spec(_spec({"packet_bytes": [256, 384]}))
    with pytest.raises(InputError, match=r"\[grid\] packet_bytes\[1\]: .*256-byte flit"):
        check_spec_inputs(spec)
    patched = parse_sweep_spec(_spec({"packet_bytes": [256, 512],
                                      "also": [{"sizes": ["1MiB"], "packet_bytes": [100]}]}))
    with pytest.raises(InputError, match=r"\[\[grid.also\]\] #1 packet_bytes\[0\]: .*256-byte flit"):
        check_spec_inputs(patched)
    with pytest.raises(InputError, match=r"\[fixed\] packet_bytes: .*256-byte flit"):
        check_spec_inputs(parse_sweep_spec(_spec(fixed={"packet_bytes": 384})))
    check_spec_inputs(parse_sweep_spec(_spec({"packet_bytes": [256, 512, AUTO]})))


def test_a_cap_applies_to_the_auto_points_alone() -> None:
    spec = parse_sweep_spec(_spec({"packet_bytes": [256, AUTO]}, {"max_packet_bytes": "4KiB"}))
    caps = {p.packet_bytes: p.max_packet_bytes for p in expand(spec)}
    assert caps == {256: None, AUTO: 4096}
    # an "auto" size in an [[grid.also]] table alone is enough for the cap
    patched = parse_sweep_spec(_spec({"packet_bytes": [256, 512], "also": [{"packet_bytes": [AUTO]}]},
                                     {"max_packet_bytes": 8192}))
    assert {p.packet_bytes: p.max_packet_bytes for p in expand(patched)} == {256: None, 512: None, AUTO: 8192}
    # `nuna figure --max-packet-bytes` needs some "auto" points
    capped = expand(packet_cap_spec(spec, 16384))
    assert {p.max_packet_bytes for p in capped if p.packet_bytes == AUTO} == {16384}
    with pytest.raises(UsageError, match=r"applies to packet_bytes = 'auto'; .* uses 256 B, 512 B"):
        packet_cap_spec(parse_sweep_spec(_spec({"packet_bytes": [256, 512]})), 4096)


def test_a_command_line_restriction_keeps_the_axis() -> None:
    spec = parse_sweep_spec(_spec({"packet_bytes": [256, AUTO]}))
    part = restrict_grid(spec, {"gpus": ["2"]})
    assert part.packet_bytes == (256, AUTO)
    assert [p.record() for p in expand(part)] == [p.record() for p in expand(spec) if p.gpus == 2]
    # a cap whose "auto" points are an [[grid.also]] table's
    patched = parse_sweep_spec(_spec({"also": [{"sizes": ["1MiB"], "packet_bytes": [AUTO]}]},
                                     {"max_packet_bytes": 4096}))
    part = restrict_grid(patched, {"gpus": ["4"]})
    assert [p.record() for p in expand(part)] == [p.record() for p in expand(patched) if p.gpus == 4]
    assert {(p.packet_bytes, p.max_packet_bytes) for p in expand(part)} == {(256, None), (AUTO, 4096)}


def _record(packets: int | str, time_ns: float, gpus: int = 2, cap: int | None = None) -> dict[str, Any]:
    """``test_table``'s fake record of a UA point at this packet size (and ``auto``'s cap)."""
    return record("UA", time_ns, gpus=gpus, packet_bytes=packets,
                  **({"max_packet_bytes": cap} if cap else {}))


def test_the_table_pairs_each_size_with_the_flits_of_the_same_point() -> None:
    # the cap goes with "auto" as a NAR granularity goes with its configuration
    records = [_record(256, 1000.0), _record(1024, 800.0), _record(AUTO, 1250.0, cap=4096),
               _record(256, 3000.0, gpus=4), _record(AUTO, 2000.0, gpus=4, cap=4096)]
    table = sweep_table(records, ["time_ns"], baseline="packet_bytes=256")
    column = [row[-1] for row in table.rows]
    assert table.columns[-1] == "speedup_over_packet_bytes=256"
    assert column == pytest.approx([1.0, 1.25, 0.8, 1.0, 1.5])


def test_a_swept_packet_axis_replays_each_size(run_cli: Callable[..., Any], write_spec: Callable[..., Path],
                                                tmp_path: Path) -> None:
    path = write_spec('[sweep]\nname = "packets"\n[grid]\ncollectives = ["allgather"]\ngpus = [2]\n'
                      'sizes = ["256KiB"]\nconfigs = ["UA"]\npacket_bytes = [256, "4KiB"]\n')
    out = tmp_path / "out"
    res = run_cli("sweep", path, "-o", out, "-j", "1", "-q")
    assert res.code == 0, res.err
    records = load_results(out)
    assert [r["result"]["packet_bytes"] for r in records] == [256, 4096]
    assert records[0]["result"]["time_ns"] != records[1]["result"]["time_ns"]
    table = run_cli("table", out, "-m", "time_ns", "--baseline", "packet_bytes=256")
    assert table.code == 0, table.err
    rows = list(csv.DictReader(io.StringIO(table.out)))
    flits, packets = (float(r["time_ns"]) for r in rows)
    assert [float(r["speedup_over_packet_bytes=256"]) for r in rows] == pytest.approx([1.0, flits / packets])
