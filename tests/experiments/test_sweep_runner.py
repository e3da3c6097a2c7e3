"""The sweep runner on the local process pool: results, resume, failures, determinism, SIGKILL.

Point functions come from ``sweep_fake_points`` (this folder), so these tests need neither the
simulator nor the passes; the fake computes a result from its inputs, which the tests recompute
directly to check that the runner records exactly what the point function returned.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nuna.errors import InputError, UsageError
from nuna.experiments import store
from nuna.experiments.executors import run_tasks
from nuna.experiments.spec import expand, point_id, portable_topology, recorded_topology_file
from nuna.experiments.sweep import (
    SweepProgress,
    load_results,
    load_sweep_spec,
    run_sweep,
    sweep_status,
    tasks_of,
)

REPO = Path(__file__).resolve().parents[2]


def _expected(point: dict[str, Any]) -> dict[str, Any]:
    import sweep_fake_points

    result = sweep_fake_points.echo_point(dict(point))
    result.pop("timing")
    return json.loads(json.dumps(result))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.is_dir() else {}


def _compared(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "timing"}


def test_clean_run_writes_one_correct_result_per_point(fake_points: str, write_spec: Callable[..., Path],
                                                       tmp_path: Path) -> None:
    spec = load_sweep_spec(write_spec())
    out = tmp_path / "out"
    summary = run_sweep(spec, out, jobs=2)
    points = expand(spec)
    assert (summary.total, summary.ran, summary.ok, summary.already_done) == (len(points), len(points),
                                                                               len(points), 0)
    assert summary.complete
    assert not summary.failed
    assert len(list((out / "results").iterdir())) == len(points)
    for point in points:
        pid = point_id(point.as_dict(), spec.point_function)
        record = json.loads((out / "results" / f"{pid}.json").read_text())
        assert record["id"] == pid
        assert record["point"] == point.as_dict()
        assert record["result"] == _expected(point.as_dict())
        # The wall-clock figures live apart from the compared result.
        assert "point_wall_s" in record["timing"]
        assert "fake_delay_s" in record["timing"]
        assert "timing" not in record["result"]
    index = json.loads((out / "index.json").read_text())
    assert index["counts"] == {"ok": len(points), "failed": 0, "pending": 0, "total": len(points)}
    assert [e["point"] for e in index["points"]] == [p.as_dict() for p in points]
    assert all(e["status"] == "ok" and (out / e["file"]).is_file() for e in index["points"])


def test_rerun_skips_finished_points_and_rewrites_identical_index(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec = load_sweep_spec(write_spec())
    out = tmp_path / "out"
    run_sweep(spec, out, jobs=2)
    before, index = _files(out / "results"), (out / "index.json").read_bytes()
    again = run_sweep(spec, out, jobs=2)
    assert (again.ran, again.already_done, again.ok) == (0, again.total, again.total)
    assert _files(out / "results") == before
    assert (out / "index.json").read_bytes() == index


def test_index_and_results_do_not_depend_on_parallelism(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec = load_sweep_spec(write_spec())
    run_sweep(spec, tmp_path / "one", jobs=1)
    run_sweep(spec, tmp_path / "two", jobs=2)
    assert (tmp_path / "one" / "index.json").read_bytes() == (tmp_path / "two" / "index.json").read_bytes()
    one, two = load_results(tmp_path / "one"), load_results(tmp_path / "two")
    assert [_compared(r) for r in one] == [_compared(r) for r in two]


def test_an_edited_topology_file_is_recomputed_a_shipped_name_keeps_its_ids(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    chip = tmp_path / "chip.toml"
    chip.write_text((REPO / "topologies" / "nuna-4die.toml").read_text().replace(
        'name = "nuna-4die"', 'name = "my-chip"'))
    text = ('[sweep]\npoint_function = "sweep_fake_points:echo_point"\n[grid]\n'
            'collectives = ["allgather"]\ngpus = [2, 4]\nsizes = ["1MB"]\nconfigs = ["UA"]\n'
            'topologies = ["chip.toml", "nuna-4die"]\n')
    spec = load_sweep_spec(write_spec(text))
    out = tmp_path / "out"
    assert run_sweep(spec, out, jobs=1).ran == 4
    again = run_sweep(spec, out, jobs=1)
    assert (again.ran, again.already_done) == (0, 4)
    # the same path, other bytes: its points are new points; the shipped name's are not
    chip.write_text(chip.read_text().replace("io_port_latency_ns = { value = 57.0",
                                             "io_port_latency_ns = { value = 60.0"))
    edited = run_sweep(spec, out, jobs=1)
    assert (edited.ran, edited.already_done) == (2, 2)
    ids = {r["point"]["topology"]: set() for r in load_results(out)}
    for r in load_results(out):
        ids[r["point"]["topology"]].add(r["id"])
    shipped = {point_id(p.as_dict(), spec.point_function) for p in expand(spec) if p.topology == "nuna-4die"}
    assert ids["nuna-4die"] == shipped


def test_a_topology_file_is_recorded_by_its_file_name_so_a_moved_project_keeps_its_results(
        fake_points: str, tmp_path: Path) -> None:
    # before, the file's absolute path was part of every point: the same spec and file in two
    # folders gave other ids, index bytes and recorded points, and --reuse adopted nothing
    text = ('[sweep]\npoint_function = "sweep_fake_points:echo_point"\n[grid]\n'
            'collectives = ["allgather"]\ngpus = [2, 4]\nsizes = ["1MB"]\nconfigs = ["UA"]\n'
            'topologies = ["t/chip.toml", "nuna-4die"]\n')
    chip = (REPO / "topologies" / "nuna-4die.toml").read_text().replace('name = "nuna-4die"',
                                                                       'name = "my-chip"')
    specs = []
    for place in ("a", "b/deeper"):
        (tmp_path / place / "t").mkdir(parents=True)
        (tmp_path / place / "t" / "chip.toml").write_text(chip)
        (tmp_path / place / "spec.toml").write_text(text)
        specs.append(load_sweep_spec(tmp_path / place / "spec.toml"))
    first, second = specs
    run_sweep(first, tmp_path / "a" / "out", jobs=1)
    run_sweep(second, tmp_path / "b" / "out", jobs=1)
    index = (tmp_path / "a" / "out" / "index.json").read_bytes()
    assert index == (tmp_path / "b" / "out" / "index.json").read_bytes()
    assert str(tmp_path) not in index.decode()
    records = load_results(tmp_path / "a" / "out")
    assert sorted({r["point"]["topology"] for r in records}) == ["chip.toml", "nuna-4die"]
    # the same records but for the fake's result, which digests the path it was given
    assert ([{k: v for k, v in r.items() if k not in ("result", "timing")} for r in records]
            == [{k: v for k, v in r.items() if k not in ("result", "timing")}
                for r in load_results(tmp_path / "b" / "out")])
    # the point function still loads the file from where it is
    inputs = {task.inputs["topology"] for task, _ in tasks_of(second) if task.inputs is not None}
    assert inputs == {str((tmp_path / "b" / "deeper" / "t" / "chip.toml").resolve()), "nuna-4die"}
    moved = run_sweep(second, tmp_path / "fresh", jobs=1, reuse=[tmp_path / "a" / "out"])
    assert (moved.ran, moved.already_done) == (0, 4)
    # a record finds its file again by name and bytes (scripts/headroom.py --recompute-floors)
    record = next(r for r in records if r["point"]["topology"] == "chip.toml")
    assert recorded_topology_file(record, [tmp_path, tmp_path / "b" / "deeper" / "t"]) == \
        str(tmp_path / "b" / "deeper" / "t" / "chip.toml")
    (tmp_path / "a" / "t" / "chip.toml").write_text(chip.replace("my-chip", "edited"))
    with pytest.raises(InputError, match=r"topology file chip\.toml with the bytes it was computed with is "):
        recorded_topology_file(record, [tmp_path / "a" / "t"])
    shipped = next(r for r in records if r["point"]["topology"] == "nuna-4die")
    assert recorded_topology_file(shipped, []) == "nuna-4die"


@pytest.mark.parametrize(("given", "recorded"), [
    ("t/chip.toml", "chip.toml"), ("/abs/t/chip.toml", "chip.toml"), ("chips/nuna-4die", "./nuna-4die"),
    ("nuna-4die", "nuna-4die")])
def test_a_recorded_topology_file_still_reads_as_a_file(given: str, recorded: str) -> None:
    # 'chips/nuna-4die' recorded as 'nuna-4die' would read as the shipped topology
    assert portable_topology(given) == recorded
    assert portable_topology(recorded) == recorded


def test_resume_recomputes_only_missing_and_damaged_points(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec = load_sweep_spec(write_spec())
    out = tmp_path / "out"
    run_sweep(spec, out, jobs=2)
    clean = {name: json.loads(data) for name, data in _files(out / "results").items()}
    index = (out / "index.json").read_bytes()
    names = sorted(clean)
    (out / "results" / names[0]).unlink()                                   # lost
    (out / "results" / names[1]).write_text('{"format": "nuna-sweep-res')   # truncated
    # A valid record of another point under this name must not be trusted either.
    (out / "results" / names[2]).write_bytes((out / "results" / names[3]).read_bytes())
    (out / "results" / f".{names[4]}.abc123.tmp").write_text("half")        # a killed writer's leftover
    summary = run_sweep(spec, out, jobs=2)
    assert summary.ran == 3
    assert summary.unusable == 2
    assert summary.complete
    assert {n: _compared(json.loads(d)) for n, d in _files(out / "results").items()} == {
        n: _compared(r) for n, r in clean.items()}
    assert (out / "index.json").read_bytes() == index


def test_results_of_other_sweep_folders_are_reused_when_valid(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    """A partial grid's results serve the full grid (the same point has the same id); a damaged
    or foreign record in the other folder is not trusted, so that point runs."""
    full_path = write_spec()
    full = load_sweep_spec(full_path)
    part_text = full_path.read_text().replace("gpus = [2, 8]", "gpus = [8]")
    part = load_sweep_spec(write_spec(part_text, "part.toml"))
    run_sweep(part, tmp_path / "part", jobs=1)
    results = tmp_path / "part" / "results"
    names = sorted(p.name for p in results.iterdir())
    assert len(names) == len(expand(part)) == len(expand(full)) // 2
    (results / names[0]).write_text('{"format": "nuna-sweep-res')   # damaged
    (results / names[1]).write_bytes((results / names[2]).read_bytes())   # another point's record
    summary = run_sweep(full, tmp_path / "full", jobs=1, reuse=[tmp_path / "part"])
    assert (summary.already_done, summary.ran) == (len(names) - 2, len(expand(full)) - len(names) + 2)
    assert summary.complete
    # the same records as a sweep that computed everything itself
    run_sweep(full, tmp_path / "alone", jobs=1)
    assert [_compared(r) for r in load_results(tmp_path / "full")] == [
        _compared(r) for r in load_results(tmp_path / "alone")]
    assert (tmp_path / "full" / "index.json").read_bytes() == (tmp_path / "alone" / "index.json").read_bytes()


def test_failures_are_recorded_listed_and_retried_only_on_request(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_sweep_spec(write_spec())
    out = tmp_path / "out"
    failing = {point_id(p.as_dict(), spec.point_function) for p in expand(spec) if p.gpus == 8}
    monkeypatch.setenv("NUNA_FAKE_FAIL_GPUS", "8")
    first = run_sweep(spec, out, jobs=2)
    assert {f.point_id for f in first.failed} == failing
    assert all(f.this_run and f.error_type == "RuntimeError" and "injected failure" in f.message
               for f in first.failed)
    assert first.ok == first.total - len(failing)
    assert not first.complete
    for pid in failing:
        record = json.loads((out / "failures" / f"{pid}.json").read_text())
        assert record["error"]["type"] == "RuntimeError"
        assert "Traceback" in record["error"]["traceback"]
        assert not (out / "results" / f"{pid}.json").exists()
    index = json.loads((out / "index.json").read_text())
    assert index["counts"]["failed"] == len(failing)
    assert {e["id"] for e in index["points"] if e["status"] == "failed"} == failing

    # Without --retry-failed a failed point is not rerun (the cause is probably deterministic).
    monkeypatch.delenv("NUNA_FAKE_FAIL_GPUS")
    second = run_sweep(spec, out, jobs=2)
    assert second.ran == 0
    assert {f.point_id for f in second.failed} == failing
    assert not any(f.this_run for f in second.failed)

    third = run_sweep(spec, out, jobs=2, retry_failed=True)
    assert third.ran == len(failing)
    assert third.complete
    assert not third.failed
    assert list((out / "failures").iterdir()) == []
    clean = tmp_path / "clean"
    run_sweep(spec, clean, jobs=2)
    assert (out / "index.json").read_bytes() == (clean / "index.json").read_bytes()


@pytest.mark.parametrize(("function", "message"), [
    ("not_json_point", "not JSON data"),
    ("nan_point", "not JSON data"),
    ("not_a_dict_point", "expected a dict"),
])
def test_results_that_are_not_json_objects_fail_the_point(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path, function: str,
        message: str) -> None:
    text = (f'[sweep]\npoint_function = "sweep_fake_points:{function}"\n'
            '[grid]\ncollectives = ["allgather"]\ngpus = [2, 4]\nsizes = ["1MB"]\nconfigs = ["UA"]\n')
    summary = run_sweep(load_sweep_spec(write_spec(text)), tmp_path / "out", jobs=1)
    assert len(summary.failed) == 2
    assert summary.ok == 0
    assert all(f.error_type == "TypeError" and message in f.message for f in summary.failed)


def test_point_function_cannot_change_the_recorded_inputs(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    text = ('[sweep]\npoint_function = "sweep_fake_points:mutating_point"\n'
            '[grid]\ncollectives = ["allgather"]\ngpus = [2]\nsizes = ["1MB"]\nconfigs = ["UA"]\n')
    spec = load_sweep_spec(write_spec(text))
    run_sweep(spec, tmp_path / "out", jobs=1)
    (record,) = load_results(tmp_path / "out")
    assert record["point"] == expand(spec)[0].as_dict()


def test_progress_reports_start_then_every_point(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_sweep_spec(write_spec())
    out = tmp_path / "out"
    run_sweep(spec, out, jobs=2)
    for path in sorted((out / "results").iterdir())[:5]:
        path.unlink()
    monkeypatch.setenv("NUNA_FAKE_FAIL_GPUS", "2")
    events: list[SweepProgress] = []
    run_sweep(spec, out, jobs=2, progress=events.append)
    assert events[0].kind == "start"
    assert events[0].to_run == 5
    assert events[0].total == len(expand(spec))
    assert [e.kind for e in events[1:]] == ["point"] * 5
    assert [e.completed for e in events[1:]] == [1, 2, 3, 4, 5]
    failed = [e for e in events[1:] if e.status == "failed"]
    assert events[-1].failed == len(failed)
    assert len({e.point_id for e in events[1:]}) == 5


def test_status_reports_without_writing(fake_points: str, write_spec: Callable[..., Path],
                                        tmp_path: Path) -> None:
    spec = load_sweep_spec(write_spec())
    out = tmp_path / "out"
    status = sweep_status(spec, out)
    assert (status.pending, status.ok) == (status.total, 0)
    assert not out.exists()
    run_sweep(spec, out, jobs=2)
    sorted((out / "results").iterdir())[0].unlink()
    status = sweep_status(spec, out)
    assert (status.pending, status.ok) == (1, status.total - 1)


def test_bad_options_and_function_fail_before_writing(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec = load_sweep_spec(write_spec())
    out = tmp_path / "out"
    for kwargs in ({"executor": "slurm"}, {"jobs": 0}, {"scheduler": "tcp://h:1"},
                   {"executor": "dask", "scheduler": "tcp://h:1", "jobs": 2}):
        with pytest.raises(UsageError):
            run_sweep(spec, out, **kwargs)
    # the executors' own entry point refuses an unknown name the same way
    for refuse in (lambda: run_sweep(spec, out, executor="slurm"), lambda: run_tasks((), executor="slurm")):
        with pytest.raises(UsageError, match="unknown executor 'slurm'; expected one of local, dask"):
            refuse()
    missing = load_sweep_spec(write_spec(
        '[sweep]\npoint_function = "sweep_fake_points:nope"\n'
        '[grid]\ncollectives = ["allgather"]\ngpus = [2]\nsizes = ["1MB"]\nconfigs = ["UA"]\n',
        name="m.toml"))
    with pytest.raises(UsageError, match="has no function 'nope'"):
        run_sweep(missing, out)
    assert not out.exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        run_sweep(spec, tmp_path / "file", jobs=1)


def test_a_second_sweep_on_a_busy_folder_is_refused(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    import fcntl

    spec = load_sweep_spec(write_spec())
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".lock", "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        with pytest.raises(UsageError, match="another sweep"):
            run_sweep(spec, out, jobs=1)
    assert run_sweep(spec, out, jobs=2).complete


def test_load_results_needs_a_sweep_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a sweep output folder"):
        load_results(tmp_path)
    (tmp_path / "index.json").write_text('{"format": "nuna-sweep-index/1", "points": 3}')
    with pytest.raises(InputError, match="malformed"):
        load_results(tmp_path)


def test_sigkill_mid_sweep_then_rerun_loses_nothing(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec_path = write_spec()
    spec = load_sweep_spec(spec_path)
    total = len(expand(spec))
    killed = tmp_path / "killed"
    # A shell that starts a job in the background (as CI harnesses do) ignores SIGINT in it, and
    # children inherit that; restore Python's own handler, as a terminal user has it.
    driver = ("import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "from nuna.experiments.sweep import load_sweep_spec, run_sweep\n"
              "run_sweep(load_sweep_spec(sys.argv[1]), sys.argv[2], jobs=2)\n")
    env = os.environ | {"NUNA_FAKE_DELAY_S": "0.1"}
    # A session of its own, so that the kill takes the driver and its workers at once, as a
    # batch system or an out-of-memory killer would.
    log = tmp_path / "driver.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-c", driver, str(spec_path), str(killed)], cwd=REPO,
                                env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                done = len(list((killed / "results").glob("*.json"))) if (killed / "results").is_dir() else 0
                if done >= 4 or proc.poll() is not None:
                    break
                time.sleep(0.02)
            os.killpg(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, log.read_text()
    finished_before = len(list((killed / "results").glob("*.json")))
    assert 4 <= finished_before < total, "the sweep must be killed mid-way"

    resumed = run_sweep(spec, killed, jobs=2)
    assert resumed.complete
    assert resumed.ran == total - finished_before
    assert not list(killed.rglob("*.tmp"))
    clean = tmp_path / "clean"
    run_sweep(spec, clean, jobs=2)
    assert (killed / "index.json").read_bytes() == (clean / "index.json").read_bytes()
    killed_records = {r["id"]: _compared(r) for r in load_results(killed)}
    assert killed_records == {r["id"]: _compared(r) for r in load_results(clean)}
    assert len(killed_records) == total


def _wait_until_both_workers_run_a_point(started: Path) -> None:
    """Wait until the two workers have each started a point (``NUNA_FAKE_STARTED_DIR``): a
    signal while a worker is still being spawned is a different case (see the executor)."""
    deadline = time.monotonic() + 60
    while len(list(started.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(list(started.iterdir())) >= 2, "the workers never started a point"


def _still_running(pids: list[int], wait_s: float = 10.0) -> list[int]:
    """The processes of ``pids`` still alive after waiting up to ``wait_s`` for them to end."""
    deadline = time.monotonic() + wait_s
    while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if Path(f"/proc/{p}").exists()]


def test_interrupt_stops_points_in_flight_and_leaves_them_pending(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec_path = write_spec()
    out = tmp_path / "out"
    # A shell that starts a job in the background (as CI harnesses do) ignores SIGINT in it, and
    # children inherit that; restore Python's own handler, as a terminal user has it.
    driver = ("import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "from nuna.experiments.sweep import load_sweep_spec, run_sweep\n"
              "try:\n    run_sweep(load_sweep_spec(sys.argv[1]), sys.argv[2], jobs=2)\n"
              "except KeyboardInterrupt:\n    sys.exit(130)\n")
    # Every point would take a minute: only terminating the workers lets the driver stop quickly.
    started = tmp_path / "started"
    started.mkdir()
    env = os.environ | {"NUNA_FAKE_DELAY_S": "60", "NUNA_FAKE_STARTED_DIR": str(started)}
    proc = subprocess.Popen([sys.executable, "-c", driver, str(spec_path), str(out)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # interrupt once both workers are running points (an interrupt while a worker is still
        # being spawned is a different case: see the executor's note on it)
        _wait_until_both_workers_run_a_point(started)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130
    index = json.loads((out / "index.json").read_text())
    assert index["counts"]["pending"] == index["counts"]["total"]
    assert not list((out / "results").iterdir())
    assert not list((out / "failures").iterdir())  # an interrupt is not a failure of the point


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc: field 4 of ``stat`` is the parent)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_sigterm_stops_the_cli_sweep_and_its_workers(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec_path = write_spec()
    out = tmp_path / "out"
    started = tmp_path / "started"
    started.mkdir()
    # every point would take a minute: only stopping the workers lets the command end quickly
    env = os.environ | {"NUNA_FAKE_DELAY_S": "60", "NUNA_FAKE_STARTED_DIR": str(started)}
    driver = "import sys\nfrom nuna.cli import main\nsys.argv[0] = 'nuna'\nmain()\n"
    log = tmp_path / "stderr.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-c", driver, "sweep", str(spec_path), "-o", str(out),
                                 "--jobs", "2"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=stderr, start_new_session=True)
    try:
        _wait_until_both_workers_run_a_point(started)
        workers = _children(proc.pid)
        assert workers
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = log.read_text()
    assert code == 128 + signal.SIGTERM, err
    assert err.strip().endswith("nuna: terminated"), err
    assert not _still_running(workers), "a worker outlived the command"
    index = json.loads((out / "index.json").read_text())
    assert index["counts"]["pending"] == index["counts"]["total"]
    assert not list((out / "results").iterdir())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers die with the driver on Linux only")
def test_workers_die_with_a_killed_driver(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec_path = write_spec()
    started = tmp_path / "started"
    started.mkdir()
    env = os.environ | {"NUNA_FAKE_DELAY_S": "60", "NUNA_FAKE_STARTED_DIR": str(started)}
    driver = ("import sys\nfrom nuna.experiments.sweep import load_sweep_spec, run_sweep\n"
              "run_sweep(load_sweep_spec(sys.argv[1]), sys.argv[2], jobs=2)\n")
    proc = subprocess.Popen([sys.executable, "-c", driver, str(spec_path), str(tmp_path / "out")], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    workers: list[int] = []
    try:
        _wait_until_both_workers_run_a_point(started)
        workers = [int(f.name) for f in started.iterdir()]
        proc.kill()  # the driver alone, as the out-of-memory killer would
        proc.wait(timeout=10)
        assert not _still_running(workers), "a worker outlived its driver"
    finally:
        for w in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_workers_share_the_cores_between_their_thread_pools(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from nuna.experiments.executors import default_jobs

    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    text = ('[sweep]\npoint_function = "sweep_fake_points:env_point"\n'
            '[grid]\ncollectives = ["allgather"]\ngpus = [2, 4]\nsizes = ["1MB"]\nconfigs = ["UA"]\n')
    spec = load_sweep_spec(write_spec(text))
    run_sweep(spec, tmp_path / "a", jobs=2)
    share = str(max(1, default_jobs() // 2))
    assert {r["result"]["numba_threads"] for r in load_results(tmp_path / "a")} == {share}
    monkeypatch.setenv("NUMBA_NUM_THREADS", "3")  # the user's choice wins
    run_sweep(spec, tmp_path / "b", jobs=2)
    assert {r["result"]["numba_threads"] for r in load_results(tmp_path / "b")} == {"3"}


@pytest.mark.parametrize(("executor", "point_function"), [
    ("local", "env_point"), ("dask", "env_point"), ("local", "compile_point"), ("dask", "compile_point")])
def test_cli_workers_run_numba_on_their_share_of_the_cores(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, executor: str, point_function: str) -> None:
    """A spawned worker imports its parent's main module first: from the CLI's, numba comes in
    before the worker sets NUMBA_NUM_THREADS, and reads it then. The threads numba runs on must
    still be the worker's share (two workers' windowed replays on every core each ran 2.7x
    slower, docs/results.md, Speed), and a point that compiles (a cold numba cache) must run:
    numba rereads NUMBA_NUM_THREADS at each compile and refuses a value changed after its
    threads started, which failed every point of a first sweep."""
    from nuna.experiments.executors import default_jobs

    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    text = (f'[sweep]\npoint_function = "sweep_fake_points:{point_function}"\n'
            '[grid]\ncollectives = ["allgather"]\ngpus = [2, 4]\nsizes = ["1MB"]\nconfigs = ["UA"]\n')
    spec_path = write_spec(text)
    driver = tmp_path / "nuna_main.py"  # a file, as the `nuna` script is: spawn imports it
    driver.write_text("import sys\nfrom nuna.cli import main\n\nif __name__ == '__main__':\n"
                      "    sys.argv[0] = 'nuna'\n    main()\n")
    out = tmp_path / "out"
    if executor == "dask":
        pytest.importorskip("distributed")
    command = [sys.executable, str(driver), "sweep", str(spec_path), "-o", str(out), "--jobs", "2", "--quiet",
               "--executor", executor]
    proc = subprocess.run(command, cwd=REPO, env=dict(os.environ), capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    share = max(1, default_jobs() // 2)
    results = load_results(out)
    assert len(results) == 2
    assert {r["result"].get("numba_running") for r in results} == {share}, results


@pytest.mark.parametrize("foreign", [b'{"my": "important data"}\n', b"[]\n", bytes(range(256)),
                                     b'{"format": "nuna-sweep-index/2"}'])
def test_an_index_that_is_not_a_sweeps_is_kept_unless_the_folder_is_a_sweep_folder(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path, foreign: bytes) -> None:
    spec = load_sweep_spec(write_spec())
    user = tmp_path / "user"
    user.mkdir()
    (user / "index.json").write_bytes(foreign)
    for attempt in (lambda: run_sweep(spec, user, jobs=1), lambda: sweep_status(spec, user)):
        with pytest.raises(InputError, match=r"index.json: not a nuna sweep index.*not overwriting it"):
            attempt()
    assert (user / "index.json").read_bytes() == foreign
    assert sorted(p.name for p in user.iterdir()) == ["index.json"]  # nothing written beside it
    # a sweep folder whose index was damaged is recovered: its result files are the truth
    sweep = tmp_path / "sweep"
    run_sweep(spec, sweep, jobs=1)
    clean = (sweep / "index.json").read_bytes()
    (sweep / "index.json").write_bytes(foreign)
    summary = run_sweep(spec, sweep, jobs=1)
    assert (summary.ran, summary.complete) == (0, True)
    assert (sweep / "index.json").read_bytes() == clean


def test_only_sweep_folders_are_reused(fake_points: str, write_spec: Callable[..., Path],
                                       tmp_path: Path) -> None:
    spec = load_sweep_spec(write_spec())
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    out = tmp_path / "out"
    for folder, message in ((tmp_path / "missing", "no such sweep folder"), (plain, "not a sweep folder"),
                            (plain / "notes.txt", "not a folder")):
        with pytest.raises(InputError, match=message):
            run_sweep(spec, out, jobs=1, reuse=[folder])
        assert not out.exists()  # refused before anything was written
    # a sweep folder (also one whose index a killed run never wrote) is one
    run_sweep(spec, tmp_path / "done", jobs=1)
    (tmp_path / "done" / "index.json").unlink()
    assert run_sweep(spec, out, jobs=1, reuse=[tmp_path / "done"]).already_done == len(expand(spec))
    # folders given as text, as out_dir may be (a str crashed the folder check)
    assert run_sweep(spec, str(tmp_path / "again"), jobs=1,
                     reuse=[str(tmp_path / "done")]).already_done == len(expand(spec))
    with pytest.raises(InputError, match="no such sweep folder"):
        run_sweep(spec, out, jobs=1, reuse=[str(tmp_path / "missing")])


def test_load_results_reads_only_files_the_index_may_name(tmp_path: Path) -> None:
    from nuna import __version__
    from nuna.experiments.store import INDEX_FORMAT, RESULT_FORMAT

    folder = tmp_path / "sweep"
    (folder / "results").mkdir(parents=True)
    # an id is a file name under results/: one that climbs out of it is not an id
    outside = {"format": RESULT_FORMAT, "id": "../outside", "point": {}, "point_function": "m:f",
               "nuna_version": __version__, "result": {"secret": 1}}
    (folder / "outside.json").write_text(json.dumps(outside))
    index = {"format": INDEX_FORMAT, "nuna_version": __version__, "spec": {"point_function": "m:f"},
             "points": [{"id": "../outside", "point": {}}]}
    (folder / "index.json").write_text(json.dumps(index))
    with pytest.raises(InputError, match="malformed sweep index"):
        load_results(folder)


@pytest.mark.parametrize("sub", ["results", "failures"])
def test_a_sweep_folder_whose_subfolder_is_a_file_is_named_and_kept(tmp_path: Path, sub: str) -> None:
    # mkdir's 'File exists' read as if the sweep folder itself could not be made
    (tmp_path / sub).write_text("mine")
    with pytest.raises(InputError, match=rf"{sub}: not a folder; a sweep folder keeps its points in {sub}/"):
        store.prepare(tmp_path)
    assert (tmp_path / sub).read_text() == "mine"
