"""A sweep worker that dies (SIGKILLed, as the out-of-memory killer does) while running a point.

The point function is ``sweep_fake_points:killing_point``: ``echo_point``, except that the worker
running a point with ``NUNA_FAKE_KILL_GPUS`` GPUs kills itself. On the local process pool the run
must stop with a ``NunaError`` (one line from the CLI, exit 1), keep every point that came back
and resume on a rerun; on dask the killed point is a failed point (dask's ``KilledWorker``) and
the sweep goes on.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nuna.errors import NunaError
from nuna.experiments import store
from nuna.experiments.executors import Task
from nuna.experiments.sweep import SweepProgress, load_results, load_sweep_spec, run_sweep, tasks_of

REPO = Path(__file__).resolve().parents[2]

#: 7 points in expansion order (the file's), the one with 8 GPUs (killed) last: nothing is left to
#: submit once it runs, so a dead worker cannot meet the driver submitting (that case has its own
#: test below: until 2026-12-06 the submit raised BrokenProcessPool bare, an internal error).
KILL_SPEC = """
[sweep]
name = "kill"
point_function = "sweep_fake_points:killing_point"

[grid]
collectives = ["allgather"]
gpus = [2, 3, 4, 5, 6, 7, 8]
sizes = ["1MB"]
configs = ["UA"]
"""

KILLED_GPUS = 8

#: The CLI as the ``nuna`` script runs it.
CLI = "import sys\nfrom nuna.cli import main\nsys.argv[0] = 'nuna'\nmain()\n"


@pytest.fixture
def no_kill(fake_points: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``fake_points``, with no kill switch inherited from the environment."""
    monkeypatch.delenv("NUNA_FAKE_KILL_GPUS", raising=False)
    monkeypatch.delenv("NUNA_FAKE_KILL_AFTER", raising=False)
    return fake_points


def _expected(task: Task) -> dict[str, Any]:
    """What ``killing_point`` returns for a point it does not kill, as a result file holds it."""
    import sweep_fake_points

    result = sweep_fake_points.echo_point(dict(task.point if task.inputs is None else task.inputs))
    result.pop("timing")
    return json.loads(json.dumps(result))


def _split(spec_path: Path) -> tuple[list[Task], set[str]]:
    """The spec's tasks, and the ids of the points whose worker dies."""
    pairs = tasks_of(load_sweep_spec(spec_path))
    return [t for t, _ in pairs], {t.point_id for t, p in pairs if p.gpus == KILLED_GPUS}


def _check_saved_results(out: Path, tasks: list[Task], killed: set[str]) -> set[str]:
    """Check the folder a run stopped by a dead worker left; return the ids with results."""
    saved = {p.stem for p in (out / "results").glob("*.json")}
    assert not saved & killed, "a killed point has a result"
    # 2 workers keep 4 points queued: the killed point (the 7th) is submitted only after 3 points
    # came back, and each is written before the next is asked for
    assert 3 <= len(saved) <= len(tasks) - len(killed), saved
    for task in tasks:
        if task.point_id in saved:
            record = store.read_result(out, task)
            assert record is not None, f"{task.point_id}: unusable result file"
            assert record["result"] == _expected(task)
    assert not list((out / "failures").iterdir()), "a dead worker is no failure of its point"
    assert not list(out.rglob("*.tmp"))
    index = json.loads((out / "index.json").read_text())
    assert index["counts"] == {"ok": len(saved), "failed": 0, "pending": len(tasks) - len(saved),
                               "total": len(tasks)}
    return saved


def _check_complete(out: Path, tasks: list[Task]) -> None:
    records = load_results(out)
    assert [r["id"] for r in records] == [t.point_id for t in tasks]
    assert [r["result"] for r in records] == [_expected(t) for t in tasks]


def test_local_worker_death_is_a_nuna_error_and_a_rerun_runs_only_the_rest(
        no_kill: str, write_spec: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec_path = write_spec(KILL_SPEC)
    spec = load_sweep_spec(spec_path)
    tasks, killed = _split(spec_path)
    out = tmp_path / "out"
    monkeypatch.setenv("NUNA_FAKE_KILL_GPUS", str(KILLED_GPUS))
    with pytest.raises(NunaError, match=r"^a sweep worker process died \(.*run the sweep again to resume$"):
        run_sweep(spec, out, jobs=2)
    saved = _check_saved_results(out, tasks, killed)
    before = {name: (out / "results" / f"{name}.json").read_bytes() for name in saved}

    monkeypatch.delenv("NUNA_FAKE_KILL_GPUS")
    resumed = run_sweep(spec, out, jobs=2)
    rest = len(tasks) - len(saved)
    assert (resumed.already_done, resumed.ran, resumed.ok) == (len(saved), rest, len(tasks))
    assert not resumed.failed
    assert all((out / "results" / f"{name}.json").read_bytes() == data for name, data in before.items())
    _check_complete(out, tasks)


def test_cli_reports_a_dead_worker_in_one_line_and_exit_1_then_resumes(
        no_kill: str, write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec_path = write_spec(KILL_SPEC)
    tasks, killed = _split(spec_path)
    out = tmp_path / "out"
    command = [sys.executable, "-c", CLI, "sweep", str(spec_path), "-o", str(out), "--jobs", "2"]
    env = os.environ | {"NUNA_FAKE_KILL_GPUS": str(KILLED_GPUS)}
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("nuna: error: a sweep worker process died ("), proc.stderr
    assert proc.stderr.rstrip().endswith("run the sweep again to resume"), proc.stderr
    assert proc.stdout == ""  # no summary of a run that did not finish
    saved = _check_saved_results(out, tasks, killed)

    again = subprocess.run(command, cwd=REPO, env=dict(os.environ), capture_output=True, text=True,
                           timeout=60, check=False)
    assert again.returncode == 0, again.stderr
    rest = len(tasks) - len(saved)
    assert (f"{len(tasks)} points, {len(saved)} already done, {rest} ran ({rest} ok, 0 failed)"
            in again.stdout), again.stdout
    _check_complete(out, tasks)


def test_local_worker_death_while_the_driver_writes_a_result_is_still_a_nuna_error(
        no_kill: str, write_spec: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the killed point is among the first 4 submitted; 2 more wait to be submitted
    spec = load_sweep_spec(write_spec(KILL_SPEC.replace("[2, 3, 4, 5, 6, 7, 8]", "[2, 8, 3, 4, 5, 6]")))
    go = tmp_path / "go"
    monkeypatch.setenv("NUNA_FAKE_KILL_GPUS", str(KILLED_GPUS))
    monkeypatch.setenv("NUNA_FAKE_KILL_AFTER", str(go))
    ours_before = set(multiprocessing.active_children())

    def kill_while_the_driver_is_busy(report: SweepProgress) -> None:
        if report.kind != "point" or go.exists():
            return
        go.touch()  # the point with 8 GPUs kills its worker now
        # the pool notices, marks itself broken, then stops its other worker: wait for that
        deadline = time.monotonic() + 30
        while set(multiprocessing.active_children()) - ours_before and time.monotonic() < deadline:
            time.sleep(0.01)

    with pytest.raises(NunaError, match="a sweep worker process died"):
        run_sweep(spec, tmp_path / "out", jobs=2, progress=kill_while_the_driver_is_busy)


def test_dask_records_a_point_whose_worker_died_as_failed_and_goes_on(
        no_kill: str, write_spec: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed", reason="dask.distributed is not installed (optional)")
    import dask

    spec_path = write_spec(KILL_SPEC)
    spec = load_sweep_spec(spec_path)
    tasks, killed = _split(spec_path)
    assert (len(tasks), len(killed)) == (7, 1)
    out = tmp_path / "out"
    monkeypatch.setenv("NUNA_FAKE_KILL_GPUS", str(KILLED_GPUS))
    # allowed-failures 0: a point fails at its first dead worker (dask's default retries it on 3
    # more, each a worker restart); worker-saturation 1: a single-threaded worker holds one task
    # at a time, so that no innocent point is on the worker that dies (dask blames it too)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                          "distributed.scheduler.worker-saturation": 1.0}):
        summary = run_sweep(spec, out, executor="dask", jobs=2)
    assert (summary.total, summary.ran, summary.ok) == (7, 7, 6)
    assert {f.point_id for f in summary.failed} == killed
    assert all(f.this_run and f.error_type == "KilledWorker" for f in summary.failed), summary.failed
    for point in killed:
        record = json.loads(store.failure_path(out, point).read_text())
        assert record["error"]["type"] == "KilledWorker"
        assert f"nuna-point-{point}" in record["error"]["message"]
        assert "died" in record["error"]["message"]
        assert "\n" not in record["error"]["message"]
    survivors = [t for t in tasks if t.point_id not in killed]
    assert [r["id"] for r in load_results(out)] == [t.point_id for t in survivors]
    assert [r["result"] for r in load_results(out)] == [_expected(t) for t in survivors]
    index = json.loads((out / "index.json").read_text())
    assert index["counts"] == {"ok": 6, "failed": 1, "pending": 0, "total": 7}

    # a worker killed for memory is a transient cause: --retry-failed reruns those points alone
    monkeypatch.delenv("NUNA_FAKE_KILL_GPUS")
    retried = run_sweep(spec, out, executor="dask", jobs=2, retry_failed=True)
    assert (retried.already_done, retried.ran, retried.failed) == (6, 1, ())
    assert not list((out / "failures").iterdir())
    _check_complete(out, tasks)
