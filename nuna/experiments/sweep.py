"""The sweep runner: compute every point of a sweep spec once, survive interruption, resume.

:func:`run_sweep` expands a :class:`~nuna.experiments.spec.SweepSpec` into points, skips those
whose result file already exists (and, unless ``retry_failed``, those recorded as failed), runs
the rest on a local process pool or a dask cluster, and writes each outcome atomically as it
arrives, so a sweep killed at any moment loses at most the points in flight. The index written
at the end lists every point and its status and depends only on the spec and those statuses.

The library never prints: callers follow the run through the ``progress`` callback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nuna.errors import UsageError
from nuna.experiments import store
from nuna.experiments.cost import WorkEstimate, estimate_work, point_cost, worker_start_cost
from nuna.experiments.executors import (
    Task,
    check_executor,
    resolve_point_function,
    run_tasks,
    started_workers,
)
from nuna.experiments.spec import (
    FILE_DIGESTS_KEY,
    Point,
    SweepSpec,
    expand,
    load_sweep_spec,
    plan_file_sha256,
    point_id,
    topology_file_sha256,
)
from nuna.experiments.store import load_results
from nuna.text import one_line

__all__ = [
    "FailedPoint",
    "SweepProgress",
    "SweepSpec",
    "SweepSummary",
    "expand",
    "load_results",
    "load_sweep_spec",
    "run_sweep",
    "sweep_estimate",
    "sweep_status",
    "tasks_of",
]


@dataclass(frozen=True, slots=True)
class SweepProgress:
    """One progress report. ``kind == "start"`` comes once, before any point runs, with
    ``to_run`` set; then one ``"point"`` report per finished point, with its id, label and
    ``status`` (``"ok"`` or ``"failed"``) and the running counts.

    ``cost_to_run`` is the estimated cost of the points to run and of starting the workers
    (:mod:`nuna.experiments.cost`: about seconds, only ratios meaningful) and ``cost_completed``
    that of the points finished so far (the first ones to finish also carry a worker's start):
    a fraction of the work done, where ``completed / to_run`` is a fraction of the points."""

    kind: Literal["start", "point"]
    total: int
    to_run: int
    completed: int
    failed: int
    point_id: str = ""
    label: str = ""
    status: str = ""
    cost_to_run: float = 0.0
    cost_completed: float = 0.0


@dataclass(frozen=True, slots=True)
class FailedPoint:
    """A point whose last run raised. ``this_run`` is False for failures recorded by an earlier
    run and not retried."""

    point_id: str
    label: str
    error_type: str
    message: str
    this_run: bool

    def describe(self) -> str:
        # the message may quote user data (a plan's name, a path): printed, it must stay one line
        return one_line(f"{self.point_id} ({self.label}): {self.error_type}: {self.message}")


@dataclass(frozen=True, slots=True)
class SweepSummary:
    """The state of a sweep folder after a run (or, from :func:`sweep_status`, before one).

    ``already_done`` points had results before this run (``adopted`` of them copied from the
    ``reuse`` folders); ``ran`` points were computed now; ``unusable`` counts damaged or
    mismatching files that were found and recomputed.
    """

    name: str
    out_dir: str
    total: int
    already_done: int
    ran: int
    ok: int
    pending: int
    failed: tuple[FailedPoint, ...]
    unusable: int
    index_path: str
    adopted: int = 0

    @property
    def complete(self) -> bool:
        """True when every point has a result."""
        return self.ok == self.total


ProgressCallback = Callable[[SweepProgress], None]


def tasks_of(spec: SweepSpec) -> tuple[tuple[Task, Point], ...]:
    """The spec's points paired with their tasks (identity, point function, inputs). A topology
    or plan file is hashed once, however many points use it."""
    digests = {t: topology_file_sha256(t) for grid in spec.grids() for t in grid.topologies}
    plans = {p.path: plan_file_sha256(p.path) for grid in spec.grids() for p in grid.plans}

    def task(p: Point) -> Task:
        topology, plan = digests[p.topology], None if p.plan is None else plans[p.plan]
        inputs = p.as_dict()
        if topology is not None or plan is not None:  # checked by the point function
            inputs[FILE_DIGESTS_KEY] = {"topology": topology, "plan": plan}
        return Task(point_id(p.record(), spec.point_function, topology_sha256=topology, plan_sha256=plan),
                    spec.point_function, p.record(), inputs=inputs)

    return tuple((task(p), p) for p in expand(spec))


def _runs(status: store.Status, retry_failed: bool) -> bool:
    """Whether a run computes a point of this status: pending ones, and failed ones when retried."""
    return status == "pending" or (retry_failed and status == "failed")


def _check_options(executor: str, jobs: int | None, scheduler: str | None) -> None:
    check_executor(executor)
    if jobs is not None and jobs < 1:
        raise UsageError(f"jobs must be >= 1, got {jobs}")
    if scheduler is not None and executor != "dask":
        raise UsageError("a scheduler address needs the dask executor")
    if scheduler is not None and jobs is not None:
        raise UsageError("jobs applies to a local cluster; with a scheduler the cluster sets the workers")


def run_sweep(
    spec: SweepSpec,
    out_dir: str | Path,
    *,
    executor: str = "local",
    jobs: int | None = None,
    scheduler: str | None = None,
    retry_failed: bool = False,
    progress: ProgressCallback | None = None,
    reuse: Sequence[str | Path] = (),
) -> SweepSummary:
    """Compute every unfinished point of ``spec`` into ``out_dir`` and return the summary.

    ``executor`` is ``"local"`` (a process pool of ``jobs`` workers, default: every core this
    process may use) or ``"dask"`` (the dask.distributed scheduler at ``scheduler``, or a local
    cluster of ``jobs`` workers). Points recorded as failed are rerun only with
    ``retry_failed``. A failing point never stops the sweep: it is recorded and listed in the
    summary. Results that other sweep folders in ``reuse`` hold for points of this spec are
    copied in first (:func:`nuna.experiments.store.adopt_results`) and count as already done.
    Raises ``UsageError`` for bad options or an unknown point function, ``InputError`` if
    ``out_dir`` is unusable (a folder holding an ``index.json`` that is not a sweep's, say:
    :func:`nuna.experiments.store.check_output_folder`) or a folder in ``reuse`` is not a sweep
    folder.
    """
    _check_options(executor, jobs, scheduler)
    resolve_point_function(spec.point_function)  # a typo fails now, not once per point
    folder = Path(out_dir)
    # before anything is written: a refused folder is left as it was
    store.check_output_folder(folder)
    reuse_folders = tuple(Path(r) for r in reuse)  # as out_dir: a path or its text
    store.check_reuse_folders(reuse_folders, folder)
    pairs = tasks_of(spec)
    tasks = [task for task, _ in pairs]
    labels = {task.point_id: point.label() for task, point in pairs}
    spec_json = spec.to_json()

    store.prepare(folder)
    with store.sweep_lock(folder):
        store.remove_stale_temporaries(folder)
        adopted = store.adopt_results(folder, tasks, reuse_folders)
        status, unusable = store.scan(folder, tasks)
        already_done = sum(1 for s in status.values() if s == "ok")
        to_run = [t for t in tasks if _runs(status[t.point_id], retry_failed)]
        store.write_index(folder, spec_json, tasks, status)

        ran = failed_now = 0
        new_failures: set[str] = set()
        # the estimates are for the progress reports alone: without a listener, none are made
        costs = {t.point_id: 0.0 if progress is None else
                 point_cost(t.point_function, t.point if t.inputs is None else t.inputs) for t in to_run}
        # workers this run starts (a scheduler's are the cluster's, perhaps warm: not counted);
        # each worker's start is charged to one of the first points to finish
        starting = started_workers(jobs, scheduler, len(to_run))
        start_cost = 0.0 if progress is None else worker_start_cost(spec.point_function)
        cost_to_run = math.fsum(costs.values()) + starting * start_cost
        cost_completed = 0.0
        if progress is not None:
            progress(SweepProgress("start", len(tasks), len(to_run), 0, 0, cost_to_run=cost_to_run))
        by_id = {t.point_id: t for t in to_run}
        try:
            for outcome in run_tasks(to_run, executor=executor, jobs=jobs, scheduler=scheduler):
                task = by_id[outcome.point_id]
                store.write_outcome(folder, task, outcome)
                status[task.point_id] = "ok" if outcome.ok else "failed"
                ran += 1
                if not outcome.ok:
                    failed_now += 1
                    new_failures.add(task.point_id)
                cost_completed += costs[task.point_id] + (start_cost if ran <= starting else 0.0)
                if progress is not None:
                    progress(SweepProgress("point", len(tasks), len(to_run), ran, failed_now,
                                           task.point_id, labels[task.point_id], status[task.point_id],
                                           cost_to_run, cost_completed))
        finally:
            # Also on interrupt: the index then shows what is done and what is still pending.
            store.write_index(folder, spec_json, tasks, status)

    return _summary(spec, folder, tasks, labels, status, already_done, ran, unusable, new_failures, adopted)


def sweep_status(spec: SweepSpec, out_dir: str | Path, reuse: Sequence[str | Path] = ()) -> SweepSummary:
    """What a run of ``spec`` into ``out_dir`` (with ``reuse`` folders, as :func:`run_sweep`
    takes them) would find, without running or writing anything: the points it would copy
    from ``reuse`` count as done (``adopted``). ``InputError`` where :func:`run_sweep` would
    refuse a folder."""
    return _found(spec, Path(out_dir), reuse).summary(spec)


def sweep_estimate(spec: SweepSpec, out_dir: str | Path, reuse: Sequence[str | Path] = (), *,
                   retry_failed: bool = False, executor: str = "local", jobs: int | None = None,
                   scheduler: str | None = None) -> tuple[SweepSummary, WorkEstimate]:
    """:func:`sweep_status`, and the estimated work of the points a run of ``spec`` into
    ``out_dir`` would compute (with these options, as :func:`run_sweep` takes them) and its time
    on the workers it would start (:func:`nuna.experiments.cost.estimate_work`), without running
    or writing anything."""
    _check_options(executor, jobs, scheduler)
    resolve_point_function(spec.point_function)  # what the run refuses, the dry run refuses
    found = _found(spec, Path(out_dir), reuse)
    points = [(point.as_dict(), found.labels[task.point_id]) for task, point in found.pairs
              if _runs(found.status[task.point_id], retry_failed)]
    return found.summary(spec), estimate_work(spec.point_function, points,
                                              started_workers(jobs, scheduler, len(points)))


@dataclass(frozen=True, slots=True)
class _Found:
    """A sweep folder's state for a spec, as a run would find it (the ``reuse`` folders'
    results counted as done)."""

    folder: Path
    pairs: tuple[tuple[Task, Point], ...]
    tasks: list[Task]
    labels: dict[str, str]
    status: dict[str, store.Status]
    unusable: int
    adopted: int

    def summary(self, spec: SweepSpec) -> SweepSummary:
        """The folder's state as :func:`sweep_status` reports it (nothing run)."""
        done = sum(1 for s in self.status.values() if s == "ok")
        return _summary(spec, self.folder, self.tasks, self.labels, self.status, done, 0, self.unusable,
                        set(), self.adopted)


def _found(spec: SweepSpec, folder: Path, reuse: Sequence[str | Path]) -> _Found:
    store.check_output_folder(folder)
    reuse_folders = tuple(Path(r) for r in reuse)
    store.check_reuse_folders(reuse_folders, folder)
    pairs = tasks_of(spec)
    tasks = [task for task, _ in pairs]
    labels = {task.point_id: point.label() for task, point in pairs}
    status, unusable = store.scan(folder, tasks)
    adopted = 0
    for task, _ in store.reusable_results(folder, tasks, reuse_folders):
        status[task.point_id] = "ok"  # the run copies it in and drops a failure record
        adopted += 1
    return _Found(folder, pairs, tasks, labels, status, unusable, adopted)


def _summary(
    spec: SweepSpec,
    folder: Path,
    tasks: list[Task],
    labels: dict[str, str],
    status: dict[str, store.Status],
    already_done: int,
    ran: int,
    unusable: int,
    new_failures: set[str],
    adopted: int = 0,
) -> SweepSummary:
    failed = []
    for task in tasks:
        if status[task.point_id] == "failed":
            error = store.read_failure(folder, task.point_id)
            failed.append(FailedPoint(task.point_id, labels[task.point_id], str(error.get("type", "")),
                                      str(error.get("message", "")), task.point_id in new_failures))
    ok = sum(1 for s in status.values() if s == "ok")
    return SweepSummary(
        name=spec.name,
        out_dir=str(folder),
        total=len(tasks),
        already_done=already_done,
        ran=ran,
        ok=ok,
        pending=sum(1 for s in status.values() if s == "pending"),
        failed=tuple(failed),
        unusable=unusable,
        index_path=str(store.index_path(folder)),
        adopted=adopted,
    )
