"""scripts/headroom.py: the headroom table of a real (tiny) sweep, and the spec it documents."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from nuna.experiments.spec import expand, parse_sweep_spec
from nuna.experiments.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[2]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("headroom", ROOT / "scripts" / "headroom.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_headroom_spec_is_the_documented_grid() -> None:
    data = tomllib.loads((ROOT / "scripts" / "sweeps" / "headroom.toml").read_text())
    points = [p.as_dict() for p in expand(parse_sweep_spec(data, source="headroom.toml"))]
    assert len(points) == 3 * 6 * 2 * 2 * 3
    assert {p["config"] for p in points} == {"UA", "NAP+NAR"}


def test_headroom_rows_of_a_sweep(tmp_path: Path) -> None:
    data = {"sweep": {"name": "hr"},
            "grid": {"collectives": ["allgather"], "gpus": [2], "sizes": ["64KiB"],
                     "configs": ["UA", "NAP+NAR"], "tbs_per_peer": [1, 2]},
            "fixed": {"algo": "direct", "packet_bytes": 256}}
    summary = run_sweep(parse_sweep_spec(data, source="hr.toml"), tmp_path, jobs=1)
    assert summary.complete
    assert not summary.failed
    rows = _script().headroom_rows(tmp_path)
    assert len(rows) == 1
    # floors computed without a replay are the replays' own (for results of an older nuna)
    assert _script().headroom_rows(tmp_path, recompute=True) == rows
    r = rows[0]
    # each configuration at its fastest count, read here from the result files themselves
    times: dict[str, dict[int, float]] = {}
    floors = []
    for path in (tmp_path / "results").glob("*.json"):
        record = json.loads(path.read_text())
        times.setdefault(record["point"]["config"], {})[record["point"]["tbs_per_peer"]] = \
            record["result"]["time_ns"]
        floors.append(record["result"]["placement_floor_ns"])
    # the floor is the lowest of every point's: a count that is not the fastest may have it
    assert len(floors) == 4
    assert r["floor_ns"] == min(floors)
    for config, t, k in (("UA", r["ref_ns"], r["ref_tbs"]), ("NAP+NAR", r["new_ns"], r["new_tbs"])):
        assert t == min(times[config].values()) == times[config][k]
    # no time below the floor, and UA's distance to it is what the second one's gain is counted in
    assert r["floor_ns"] <= min(r["ref_ns"], r["new_ns"])
    assert r["ref_over_floor"] == pytest.approx(r["ref_ns"] / r["floor_ns"])
    assert r["taken"] == pytest.approx((r["ref_ns"] - r["new_ns"]) / (r["ref_ns"] - r["floor_ns"]))
