"""The on-disk layout of a sweep's output folder: result, failure and index files.

::

    DIR/index.json              every point of the spec, in expansion order, with its status
    DIR/results/<id>.json       one finished point: inputs, result, and (apart) its timing
    DIR/failures/<id>.json      one failed point: inputs and the error with its traceback
    DIR/.lock                   held while a sweep writes to DIR

Every file is written with :func:`nuna.fsutil.write_atomic`, so a file under its final name is
always complete; files are JSON with sorted keys. A result file is trusted only if it parses and
its id, inputs, point function and nuna version match what the spec expects, so a damaged or
foreign file is recomputed, never used.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from nuna import __version__
from nuna.errors import InputError, UsageError
from nuna.experiments.executors import Outcome, Task
from nuna.experiments.spec import is_point_id
from nuna.fsutil import make_folder, write_atomic

RESULT_FORMAT = "nuna-sweep-result/1"
FAILURE_FORMAT = "nuna-sweep-failure/1"
INDEX_FORMAT = "nuna-sweep-index/1"

Status = Literal["ok", "failed", "pending"]


def results_dir(out_dir: Path) -> Path:
    return out_dir / "results"


def failures_dir(out_dir: Path) -> Path:
    return out_dir / "failures"


def index_path(out_dir: Path) -> Path:
    return out_dir / "index.json"


def result_path(out_dir: Path, point_id: str) -> Path:
    return results_dir(out_dir) / f"{point_id}.json"


def failure_path(out_dir: Path, point_id: str) -> Path:
    return failures_dir(out_dir) / f"{point_id}.json"


def _is_nuna_index(path: Path) -> bool:
    # a regular file only: reading a FIFO would block
    if not path.is_file():
        return False
    index = _read_json(path)
    return isinstance(index, dict) and index.get("format") == INDEX_FORMAT


def is_sweep_folder(folder: Path) -> bool:
    """True when ``folder`` shows a sweep's layout: the ``results`` and ``failures`` folders
    that every run creates before anything else, or an index of nuna's. (A sweep folder whose
    index was damaged, or never written by a run killed at its start, is still one.)"""
    if results_dir(folder).is_dir() and failures_dir(folder).is_dir():
        return True
    return _is_nuna_index(index_path(folder))


def check_output_folder(out_dir: Path) -> None:
    """Raise ``InputError`` if a sweep written into ``out_dir`` would replace a file that is not
    nuna's: an ``index.json`` that is not a sweep index, in a folder that is not a sweep folder.
    In a sweep folder a damaged index is rewritten (the result files are the truth)."""
    index = index_path(out_dir)
    if (index.exists() or index.is_symlink()) and not is_sweep_folder(out_dir):
        raise InputError(f"{index}: not a nuna sweep index, and {out_dir} is not a sweep folder "
                         "(no results/ and failures/); not overwriting it: choose another output folder")


def check_reuse_folder(folder: Path) -> None:
    """Raise ``InputError`` unless ``folder`` is a sweep folder whose results can be reused."""
    if not folder.is_dir():
        raise InputError(f"{folder}: no such sweep folder to reuse results from" if not folder.exists()
                         else f"{folder}: not a folder, so no sweep folder to reuse results from")
    if not is_sweep_folder(folder):
        raise InputError(f"{folder}: not a sweep folder (no nuna index.json, no results/ and failures/), "
                         "so no results to reuse")


def check_reuse_folders(reuse: Sequence[Path], out_dir: Path) -> None:
    """:func:`check_reuse_folder` on each folder of ``reuse`` but ``out_dir`` itself, which
    :func:`adopt_results` skips (its results are already where they would be copied)."""
    for folder in reuse:
        if folder.resolve() != Path(out_dir).resolve():
            check_reuse_folder(folder)


def prepare(out_dir: Path) -> None:
    """Create the folder layout; raise ``InputError`` if ``out_dir`` cannot be a sweep folder."""
    make_folder(out_dir, "sweep folder")
    for sub in (results_dir(out_dir), failures_dir(out_dir)):
        try:
            sub.mkdir(exist_ok=True)
        except FileExistsError:  # mkdir's exist_ok covers folders only
            raise InputError(f"{sub}: not a folder; a sweep folder keeps its points in "
                             f"{sub.name}/ (move the file away)") from None
        except OSError as err:
            raise InputError(f"{sub}: cannot create it: {err.strerror or err}") from None


@contextlib.contextmanager
def sweep_lock(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out_dir`` so that two sweeps never write there at once.

    The lock is an ``flock`` on ``DIR/.lock``: the kernel drops it when the holder dies, even by
    SIGKILL, so a killed sweep never leaves a stale lock behind.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock on this platform: run unlocked
        yield
        return
    with open(out_dir / ".lock", "a+b") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{out_dir}: another sweep is writing to this folder") from None
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def remove_stale_temporaries(out_dir: Path) -> int:
    """Delete the temporary files a killed writer left behind; return how many. Only call this
    while holding :func:`sweep_lock` (no other writer can be mid-write)."""
    removed = 0
    for folder in (out_dir, results_dir(out_dir), failures_dir(out_dir)):
        # write_atomic's temporaries are named '.<target name>.<random>.tmp'.
        for tmp in folder.glob(".*.json.*.tmp"):
            tmp.unlink(missing_ok=True)
            removed += 1
    return removed


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _matches(record: Any, fmt: str, task: Task, version: str = __version__) -> bool:
    return (
        isinstance(record, dict)
        and record.get("format") == fmt
        and record.get("id") == task.point_id
        and record.get("point") == task.point
        and record.get("point_function") == task.point_function
        and record.get("nuna_version") == version
    )


def read_result(out_dir: Path, task: Task, version: str = __version__) -> dict[str, Any] | None:
    """The result record of ``task`` (computed by nuna ``version``) if a valid one exists."""
    record = _read_json(result_path(out_dir, task.point_id))
    if _matches(record, RESULT_FORMAT, task, version) and isinstance(record.get("result"), dict):
        return record
    return None


def adopt_results(out_dir: Path, tasks: Sequence[Task], sources: Sequence[Path]) -> int:
    """Copy into ``out_dir`` the valid result of every task that has no result file there and
    one of the ``sources`` (other sweep folders) holds; return how many were copied. A point's
    id is a hash of its inputs and the nuna version, and the copy is checked as any result is,
    so a point computed by another sweep (a partial grid of the same figure, say) is reused
    exactly as if this sweep had computed it. (A damaged file already in ``out_dir`` is left
    to :func:`scan`, which has it recomputed.)"""
    adopted = 0
    for task, record in reusable_results(out_dir, tasks, sources):
        write_atomic(result_path(out_dir, task.point_id), _dump(record), remove_leftovers=False)
        failure_path(out_dir, task.point_id).unlink(missing_ok=True)
        adopted += 1
    return adopted


def reusable_results(out_dir: Path, tasks: Sequence[Task], sources: Sequence[Path]
                     ) -> Iterator[tuple[Task, dict[str, Any]]]:
    """The tasks without a result file in ``out_dir`` whose valid result one of ``sources``
    holds, each with that record (the first source's that has one): what
    :func:`adopt_results` copies, read only (``nuna sweep --dry-run --reuse`` counts them)."""
    others = [s for s in sources if s.resolve() != out_dir.resolve()]
    for task in tasks if others else ():
        if result_path(out_dir, task.point_id).exists():
            continue
        for source in others:
            record = read_result(source, task)
            if record is not None:
                yield task, record
                break


def scan(out_dir: Path, tasks: Sequence[Task]) -> tuple[dict[str, Status], int]:
    """Status of every task from the files present, and the number of unusable files found
    (unreadable, or not matching the task: they are recomputed and overwritten)."""
    status: dict[str, Status] = {}
    unusable = 0
    for task in tasks:
        if result_path(out_dir, task.point_id).exists():
            if read_result(out_dir, task) is not None:
                status[task.point_id] = "ok"
                continue
            unusable += 1
        path = failure_path(out_dir, task.point_id)
        if path.exists():
            if _matches(_read_json(path), FAILURE_FORMAT, task):
                status[task.point_id] = "failed"
                continue
            unusable += 1
        status[task.point_id] = "pending"
    return status, unusable


def _dump(payload: Any) -> str:
    return json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def _header(fmt: str, task: Task) -> dict[str, Any]:
    return {"format": fmt, "id": task.point_id, "nuna_version": __version__,
            "point_function": task.point_function, "point": task.point}


def write_outcome(out_dir: Path, task: Task, outcome: Outcome) -> None:
    """Record an outcome: a result file (dropping any earlier failure record of the point) or
    a failure record."""
    if outcome.ok:
        record = _header(RESULT_FORMAT, task) | {"result": outcome.result, "timing": outcome.timing}
        write_atomic(result_path(out_dir, task.point_id), _dump(record), remove_leftovers=False)
        # After the result is safely written: if we die in between, the result wins on rerun.
        failure_path(out_dir, task.point_id).unlink(missing_ok=True)
    else:
        error = {"type": outcome.error_type, "message": outcome.error_message, "traceback": outcome.traceback}
        record = _header(FAILURE_FORMAT, task) | {"error": error, "timing": outcome.timing}
        write_atomic(failure_path(out_dir, task.point_id), _dump(record), remove_leftovers=False)


def read_failure(out_dir: Path, point_id: str) -> dict[str, Any]:
    """The error part of a failure record (``type``, ``message``), or placeholders."""
    record = _read_json(failure_path(out_dir, point_id))
    error = record.get("error") if isinstance(record, dict) else None
    return error if isinstance(error, dict) else {"type": "unknown", "message": "failure record unreadable"}


def write_index(out_dir: Path, spec_json: Mapping[str, Any], tasks: Sequence[Task],
                status: Mapping[str, Status]) -> None:
    """Write ``DIR/index.json``: a pure function of the spec and the points' statuses (no
    times, no absolute output paths), so reruns that reach the same state write the same bytes."""
    counts = {"ok": 0, "failed": 0, "pending": 0}
    entries = []
    for task in tasks:
        state = status[task.point_id]
        counts[state] += 1
        folder = "results" if state == "ok" else "failures" if state == "failed" else None
        entries.append({"id": task.point_id, "status": state, "point": task.point,
                        "file": f"{folder}/{task.point_id}.json" if folder else None})
    index = {"format": INDEX_FORMAT, "nuna_version": __version__, "spec": dict(spec_json),
             "counts": counts | {"total": len(tasks)}, "points": entries}
    write_atomic(index_path(out_dir), _dump(index), remove_leftovers=False)


def load_results(out_dir: str | Path) -> list[dict[str, Any]]:
    """The finished results of the sweep in ``out_dir``, in the spec's expansion order.

    Each item is a result record: ``id``, ``point`` (the inputs), ``result`` (the point
    function's output), ``timing`` (wall-clock figures, not reproducible), ``point_function``
    and ``nuna_version``. Points are taken from ``index.json`` and their result files are read
    directly, so results finished after the index was last written (a killed sweep) are
    included; unfinished or failed points are left out.
    """
    folder = Path(out_dir)
    index = _read_json(index_path(folder))
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise InputError(f"{folder}: not a sweep output folder (no readable index.json)")
    spec = index.get("spec", {})
    function = spec.get("point_function") if isinstance(spec, dict) else None
    # The index's version, not ours: results of an older nuna stay loadable for plotting.
    version = index.get("nuna_version")
    entries = index.get("points")
    if not isinstance(function, str) or not isinstance(version, str) or not isinstance(entries, list):
        raise InputError(f"{index_path(folder)}: malformed sweep index")
    records = []
    for entry in entries:
        # an id names a file under results/: only the hex digits point_id makes, never a path
        if not isinstance(entry, dict) or not is_point_id(entry.get("id")):
            raise InputError(f"{index_path(folder)}: malformed sweep index")
        task = Task(str(entry.get("id")), function, entry.get("point", {}))
        record = read_result(folder, task, version)
        if record is not None:
            records.append(record)
    return records
