"""scripts/headroom.py: the headroom table of a real (tiny) sweep, and the spec it documents."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nuna.experiments.spec import expand, load_sweep_spec, parse_sweep_spec
from nuna.experiments.sweep import run_sweep
from tests.conftest import script_module

ROOT = Path(__file__).resolve().parents[2]


def _script() -> Any:
    return script_module("headroom")


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


# A sweep over two topologies (a file and a shipped one) and two NAR granularities: rows of
# different chips or granularities were merged before (printed twice without a topology
# column, or one granularity silently dropped).
TWO_TOPOLOGIES_SPEC = """
[sweep]
name = "hr2"

[grid]
topologies = ["my2die.toml", "nuna-4die"]
collectives = ["allgather"]
gpus = [2]
sizes = ["1MiB"]
configs = ["UA", "NAP+NAR"]
nar_granularities = [2, 4]

[fixed]
algo = "direct"
packet_bytes = 256
"""


@pytest.fixture(scope="module")
def two_topologies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep folder of :data:`TWO_TOPOLOGIES_SPEC` (6 points, ~1 s); its topology file,
    nuna-4die with slower die crossings, is in the folder's parent ``chips``."""
    base = tmp_path_factory.mktemp("headroom2")
    chip = (ROOT / "topologies" / "nuna-4die.toml").read_text()
    assert 'name = "nuna-4die"' in chip
    assert "die_crossing_bandwidth_gbps = { value = 458.0" in chip
    (base / "chips").mkdir()
    (base / "chips" / "my2die.toml").write_text(chip.replace('name = "nuna-4die"', 'name = "my2die"').replace(
        "die_crossing_bandwidth_gbps = { value = 458.0", "die_crossing_bandwidth_gbps = { value = 200.0"))
    (base / "chips" / "spec.toml").write_text(TWO_TOPOLOGIES_SPEC)
    summary = run_sweep(load_sweep_spec(base / "chips" / "spec.toml"), base / "out", jobs=1)
    assert summary.complete
    assert not summary.failed
    return base / "out"


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "headroom.py"), *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_headroom_rows_of_two_topologies(two_topologies: Path, tmp_path: Path) -> None:
    script = _script()
    rows = script.headroom_rows(two_topologies)
    # one row per (topology, NAP+NAR's granularity), the sweep's topologies in its order
    assert [(r["topology"], r["new_nar_granularity"]) for r in rows] == [
        ("my2die.toml", 2), ("my2die.toml", 4), ("nuna-4die", 2), ("nuna-4die", 4)]
    # each row's numbers are its own topology's (and granularity's), read from the result files
    times: dict[tuple[str, str, Any], float] = {}
    for path in (two_topologies / "results").glob("*.json"):
        record = json.loads(path.read_text())
        p = record["point"]
        times[(p["topology"], p["config"], p["nar_granularity"])] = record["result"]["time_ns"]
    assert len(times) == 6
    for r in rows:
        assert r["ref_ns"] == times[(r["topology"], "UA", None)]
        assert r["new_ns"] == times[(r["topology"], "NAP+NAR", r["new_nar_granularity"])]
    # the slower die crossings show: the two chips' rows differ
    assert rows[0]["ref_ns"] != rows[2]["ref_ns"]
    # the table: a topology column, a granularity column, no two rows alike
    lines = script.table(rows)
    assert lines[0].startswith("| topology | collective | size | GPUs | NAP+NAR G | floor (us) |")
    assert len(lines) == 2 + 4
    assert len(set(lines[2:])) == 4
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| my2die.toml"] * 2 + ["| nuna-4die"] * 2
    # the script prints that table, from any folder: the floors are the results' own
    run = _run(two_topologies, cwd=tmp_path)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.splitlines() == lines


def test_recomputed_floors_of_a_topology_file(two_topologies: Path, tmp_path: Path) -> None:
    chips = two_topologies.parent / "chips"
    rows = _script().headroom_rows(two_topologies)
    assert _script().headroom_rows(two_topologies, recompute=True, topology_dirs=(tmp_path, chips)) == rows
    # run from elsewhere, the script finds the file with --topology-dir
    run = _run(two_topologies, "--recompute-floors", "--topology-dir", chips, cwd=tmp_path)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout == _run(two_topologies, cwd=tmp_path).stdout
    # without it: one line naming the file and the option
    run = _run(two_topologies, "--recompute-floors", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1
    assert "Traceback" not in run.stderr
    assert "my2die.toml" in run.stderr
    assert "--topology-dir" in run.stderr


def _without_floors(sweep: Path, copy: Path) -> Path:
    """``sweep``'s copy whose results carry no placement floor (as those of nuna before 0.5.1)."""
    shutil.copytree(sweep, copy)
    for path in (copy / "results").glob("*.json"):
        record = json.loads(path.read_text())
        del record["result"]["placement_floor_ns"]
        path.write_text(json.dumps(record))
    return copy


def _without_nap_nar(sweep: Path, copy: Path) -> Path:
    """``sweep``'s copy without NAP+NAR's results (an unfinished sweep)."""
    shutil.copytree(sweep, copy)
    for path in (copy / "results").glob("*.json"):
        if json.loads(path.read_text())["point"]["config"] == "NAP+NAR":
            path.unlink()
    return copy


@pytest.mark.parametrize(("case", "status", "message"), [
    ("missing folder", 1, "not a sweep output folder"),
    ("missing folder, recompute", 1, "not a sweep output folder"),
    ("a file", 1, "not a sweep output folder"),
    ("missing topology dir", 2, "--topology-dir"),
    ("topology dir without recompute", 2, "--topology-dir is for --recompute-floors"),
    ("no floors", 1, "--recompute-floors"),
    ("no pairs", 1, "no point has results of both UA and NAP+NAR"),
])
def test_bad_input_is_one_line(two_topologies: Path, tmp_path: Path, case: str, status: int,
                               message: str) -> None:
    cases: dict[str, Callable[[], list[str | Path]]] = {
        "missing folder": lambda: [tmp_path / "nowhere"],
        "missing folder, recompute": lambda: [tmp_path / "nowhere", "--recompute-floors"],
        "a file": lambda: [two_topologies / "index.json"],
        "missing topology dir": lambda: [two_topologies, "--recompute-floors",
                                         "--topology-dir", tmp_path / "nowhere"],
        "topology dir without recompute": lambda: [two_topologies, "--topology-dir", tmp_path],
        "no floors": lambda: [_without_floors(two_topologies, tmp_path / "old")],
        "no pairs": lambda: [_without_nap_nar(two_topologies, tmp_path / "half")],
    }
    run = _run(*cases[case](), cwd=tmp_path)
    assert run.returncode == status
    assert "Traceback" not in run.stderr
    # argparse's usage line comes first for a usage error; the error itself is one line
    assert run.stderr.splitlines()[-1].startswith("headroom.py: error: ")
    assert message in run.stderr.splitlines()[-1]
    assert len(run.stderr.splitlines()) == (2 if status == 2 else 1)
    assert run.stdout == ""
