"""``nuna sweep`` through the in-process CLI (and once in a process on a pseudo-terminal, for the
progress bar): exit codes, one-line errors, resume, retry."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nuna.experiments.spec import expand
from nuna.experiments.sweep import FailedPoint, load_results, load_sweep_spec

GRID_HEAD = '[grid]\ncollectives = ["allgather"]\ngpus = [8]\n'


def test_sweep_runs_resumes_and_reports(run_cli: Callable[..., Any], fake_points: str,
                                        write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec_path = write_spec()
    total = len(expand(load_sweep_spec(spec_path)))
    out = tmp_path / "out"
    first = run_cli("sweep", spec_path, "-o", out, "--jobs", "2")
    assert first.code == 0, first.err
    assert f"{total} points, 0 already done, {total} ran ({total} ok, 0 failed)" in first.out
    assert len(load_results(out)) == total
    assert first.err == ""  # no progress bar when stderr is not a terminal

    (out / "results" / sorted(p.name for p in (out / "results").iterdir())[0]).unlink()
    second = run_cli("sweep", spec_path, "-o", out, "-j", "2", "--quiet")
    assert second.code == 0
    assert f"{total - 1} already done, 1 ran" in second.out


def test_reuse_copies_results_of_another_folder(run_cli: Callable[..., Any], fake_points: str,
                                               write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec_path = write_spec()
    total = len(expand(load_sweep_spec(spec_path)))
    assert run_cli("sweep", spec_path, "-o", tmp_path / "first", "-j", "1", "-q").code == 0
    # a dry run counts what the run will copy in (it said "0 done, N pending")
    dry = run_cli("sweep", spec_path, "-o", tmp_path / "second", "--reuse", tmp_path / "first", "--dry-run")
    assert dry.code == 0, dry.err
    assert f"{total} points: {total} done ({total} from --reuse), 0 failed, 0 pending" in dry.out
    assert not (tmp_path / "second").exists()
    again = run_cli("sweep", spec_path, "-o", tmp_path / "second", "-j", "1", "-q",
                    "--reuse", tmp_path / "first")
    assert again.code == 0, again.err
    assert f"{total} points, {total} already done ({total} copied from --reuse), 0 ran" in again.out
    # once copied, they are this folder's own
    rerun = run_cli("sweep", spec_path, "-o", tmp_path / "second", "--reuse", tmp_path / "first", "--dry-run")
    assert f"{total} points: {total} done, 0 failed, 0 pending" in rerun.out
    missing = run_cli("sweep", spec_path, "-o", tmp_path / "third", "--reuse", tmp_path / "nope")
    assert missing.code == 2
    assert not (tmp_path / "third").exists()


def test_reuse_of_the_output_folder_itself_is_skipped_as_the_library_skips_it(
        run_cli: Callable[..., Any], fake_points: str, write_spec: Callable[..., Path],
        tmp_path: Path) -> None:
    # the command used to refuse an existing, empty output folder as "not a sweep folder"
    spec_path = write_spec()
    total = len(expand(load_sweep_spec(spec_path)))
    out = tmp_path / "out"
    out.mkdir()
    dry = run_cli("sweep", spec_path, "-o", out, "--reuse", out, "--dry-run")
    assert dry.code == 0, dry.err
    assert f"{total} points: 0 done, 0 failed, {total} pending" in dry.out
    run = run_cli("sweep", spec_path, "-o", out, "-j", "1", "-q", "--reuse", out)
    assert run.code == 0, run.err
    assert f"{total} points, 0 already done, {total} ran" in run.out
    # any other folder is still checked
    (tmp_path / "plain").mkdir()
    refused = run_cli("sweep", spec_path, "-o", out, "--reuse", tmp_path / "plain", "--dry-run")
    assert refused.code == 1
    assert "plain: not a sweep folder" in refused.err


def test_failures_exit_1_and_are_listed(run_cli: Callable[..., Any], fake_points: str,
                                        write_spec: Callable[..., Path], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    spec_path = write_spec()
    failing = [p for p in expand(load_sweep_spec(spec_path)) if p.gpus == 2]
    out = tmp_path / "out"
    monkeypatch.setenv("NUNA_FAKE_FAIL_GPUS", "2")
    result = run_cli("sweep", spec_path, "-o", out, "-j", "2")
    assert result.code == 1
    failed_lines = [line for line in result.err.splitlines() if line.startswith("failed: ")]
    assert len(failed_lines) == len(failing)
    assert all("RuntimeError: injected failure for 2 GPUs" in line for line in failed_lines)
    assert "--retry-failed" in result.err.splitlines()[-1]
    assert "Traceback" not in result.err

    again = run_cli("sweep", spec_path, "-o", out, "-j", "2")
    assert again.code == 1
    assert "0 ran" in again.out
    assert "not retried" in again.err

    monkeypatch.delenv("NUNA_FAKE_FAIL_GPUS")
    dry = run_cli("sweep", spec_path, "-o", out, "--dry-run")
    assert dry.code == 0
    assert f"{len(failing)} failed, 0 pending" in dry.out
    fixed = run_cli("sweep", spec_path, "-o", out, "-j", "2", "--retry-failed")
    assert fixed.code == 0
    assert f"{len(failing)} ran ({len(failing)} ok, 0 failed)" in fixed.out
    index = json.loads((out / "index.json").read_text())
    assert index["counts"]["ok"] == index["counts"]["total"]


@pytest.mark.parametrize(("text", "fragment"), [
    (GRID_HEAD + 'sizes = ["1XB"]\nconfigs = ["UA"]\n', "[grid] sizes[0]"),
    (GRID_HEAD + 'sizes = ["1MB"]\n', "missing required key 'configs'"),
    (GRID_HEAD + 'sizes = ["1MB"]\nconfigs = ["UA"]\nseed = 1\n', "unknown key 'seed'"),
    ("[grid\n", "invalid TOML"),
])
def test_bad_spec_is_one_line_exit_1(run_cli: Callable[..., Any], write_spec: Callable[..., Path],
                                     tmp_path: Path, text: str, fragment: str) -> None:
    spec_path = write_spec(text)
    result = run_cli("sweep", spec_path, "-o", tmp_path / "out")
    assert result.code == 1
    assert result.err.count("\n") == 1
    assert result.err.startswith("nuna: error: ")
    assert str(spec_path) in result.err
    assert fragment in result.err
    assert not (tmp_path / "out").exists()


def test_missing_spec_and_unknown_point_function(run_cli: Callable[..., Any], write_spec: Callable[..., Path],
                                                 tmp_path: Path) -> None:
    missing = run_cli("sweep", tmp_path / "nope.toml", "-o", tmp_path / "out")
    assert missing.code == 1
    assert "nope.toml" in missing.err
    assert missing.err.count("\n") == 1
    spec_path = write_spec('[sweep]\npoint_function = "no_such_module_xyz:f"\n'
                           + GRID_HEAD + 'sizes = ["1MB"]\nconfigs = ["UA"]\n')
    bad = run_cli("sweep", spec_path, "-o", tmp_path / "out")
    assert bad.code == 1
    assert "no_such_module_xyz" in bad.err
    assert bad.err.count("\n") == 1


@pytest.mark.parametrize("args", [
    ["--executor", "slurm"],
    ["--jobs", "0"],
    ["--scheduler", "tcp://127.0.0.1:1"],
    ["--executor", "dask", "--scheduler", "tcp://127.0.0.1:1", "--jobs", "2"],
])
def test_usage_errors_exit_2(run_cli: Callable[..., Any], write_spec: Callable[..., Path], tmp_path: Path,
                             args: list[str]) -> None:
    result = run_cli("sweep", write_spec(), "-o", tmp_path / "out", *args)
    assert result.code == 2
    assert result.err.startswith("nuna: usage error: ")
    assert result.err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_cli_refuses_what_would_fail_or_overwrite_before_running(
        run_cli: Callable[..., Any], fake_points: str, write_spec: Callable[..., Path],
        tmp_path: Path) -> None:
    spec_path = write_spec()
    user = tmp_path / "user"
    user.mkdir()
    (user / "index.json").write_text('{"my": "important data"}')
    for extra in ((), ("--dry-run",)):
        kept = run_cli("sweep", spec_path, "-o", user, "-q", *extra)
        assert kept.code == 1
        assert kept.err == (f"nuna: error: {user / 'index.json'}: not a nuna sweep index, and {user} is not "
                            "a sweep folder (no results/ and failures/); not overwriting it: choose another "
                            "output folder\n")
        assert (user / "index.json").read_text() == '{"my": "important data"}'
        # --reuse of a folder that holds no sweep, checked by a dry run as well
        reuse = run_cli("sweep", spec_path, "-o", tmp_path / "out", "--reuse", tmp_path, *extra)
        assert reuse.code == 1
        assert reuse.err == f"nuna: error: {tmp_path}: not a sweep folder (no nuna index.json, no results/ " \
                            "and failures/), so no results to reuse\n"
    assert not (tmp_path / "out").exists()
    # a value every point would fail with is refused by the dry run that counts them
    bad = write_spec(spec_path.read_text() + "\n[fixed]\npacket_bytes = 100\n", "bad.toml")
    dry = run_cli("sweep", bad, "-o", tmp_path / "out", "--dry-run")
    assert dry.code == 1
    assert dry.err.count("\n") == 1
    assert f"{bad}: [fixed] packet_bytes: packet size must be 'auto' or a multiple of the 256" in dry.err


def test_a_failure_is_listed_on_one_printable_line() -> None:
    # a failure record holds the error's words, which may quote a plan's name or a path
    failure = FailedPoint("abc123", "allgather gpus2", "PlanError", "plan 'x\x1b[31m\ny' is bad", True)
    line = failure.describe()
    assert line.isprintable()
    assert "\\x1b[31m\\ny" in line
    assert line.startswith("abc123 (allgather gpus2): PlanError: plan 'x")


@pytest.mark.parametrize(("lines", "columns"), [(24, 100), (0, 0)])
def test_the_progress_bar_draws_when_stderr_is_a_terminal(fake_points: str, write_spec: Callable[..., Path],
                                                          tmp_path: Path, lines: int, columns: int) -> None:
    # the bar is drawn only on a terminal, which the in-process CLI never has: a sweep on a
    # terminal failed with ModuleNotFoundError while tqdm was used but not a dependency
    spec_path = write_spec()
    primary, secondary = pty.openpty()
    # a sized terminal, and one that reports no size (a new pseudo-terminal, as `script` makes),
    # where tqdm drew nothing until the bar fell back to 80 x 24
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    main = "import sys; from nuna.cli import main; sys.argv[0] = 'nuna'; main()"
    out = str(tmp_path / "out")
    try:
        proc = subprocess.Popen([sys.executable, "-c", main, "sweep", str(spec_path), "-o", out, "-j", "1"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=secondary)
        os.close(secondary)  # read while it runs: a full terminal would block its writes
        drawn = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the sweep closed its end and everything was read
                break
            if not chunk:
                break
            drawn += chunk
        proc.wait(timeout=300)
    finally:
        os.close(primary)
    total = len(expand(load_sweep_spec(spec_path)))
    assert proc.returncode == 0, drawn.decode(errors="replace")
    assert f"{total}/{total}".encode() in drawn  # the bar reached the end
    assert b"Traceback" not in drawn
    assert b"error" not in drawn
