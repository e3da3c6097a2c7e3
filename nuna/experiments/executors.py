"""Where sweep points run: a local process pool or a dask.distributed cluster.

Both executors take the same :class:`Task` records and yield the same :class:`Outcome` records
as points finish, in completion order. Workers only compute: they resolve the point function by
name, call it, and send the result back; the driver alone writes files. That keeps the results
consistent when a worker dies, and lets a sweep run on a cluster whose workers share no file
system with the driver.

dask is an optional dependency, imported only when the dask executor is used.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from nuna.errors import NunaError, UsageError
from nuna.process import tune_gc

PointFunction = Callable[[dict[str, Any]], dict[str, Any]]

EXECUTORS: tuple[str, ...] = ("local", "dask")

#: Key of a point function's result that holds wall-clock figures; the runner stores it apart
#: from the compared result so that result files stay comparable across runs.
TIMING_KEY = "timing"

#: Key under ``timing`` of the runner's own measure: seconds spent in the point function call.
POINT_WALL_KEY = "point_wall_s"

# Tasks in flight per worker: enough to keep workers busy between driver wake-ups, few enough
# that an interrupted sweep does not throw away much queued work.
_QUEUE_PER_WORKER = 2

# Thread-pool sizes read by numba, OpenMP and BLAS libraries when they are first imported.
_THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

# The threads a worker's numba parallel sections are to run on, as the driver chose them:
# ``NUMBA_NUM_THREADS`` cannot carry it to a worker that imported numba before it was set (below).
_NUMBA_SHARE_VARIABLE = "NUNA_WORKER_NUMBA_THREADS"


@dataclass(frozen=True, slots=True)
class Task:
    """One point to compute: its identity, the point function's name and its inputs as recorded
    (``point``) and as the point function gets them (``inputs``; ``None``: ``point``): a topology
    file is recorded by its file name and loaded from its path
    (:func:`nuna.experiments.spec.portable_topology`)."""

    point_id: str
    point_function: str
    point: dict[str, Any]
    inputs: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What came back for a task. ``result`` (JSON data) is set when ``ok``; otherwise
    ``error_type``/``error_message`` (and, for exceptions in the point, ``traceback``)."""

    point_id: str
    ok: bool
    result: dict[str, Any] | None
    timing: dict[str, Any]
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""


def default_jobs() -> int:
    """Number of cores this process may use (respects CPU affinity, e.g. in a batch job)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def started_workers(jobs: int | None, scheduler: str | None, tasks: int) -> int:
    """Worker processes :func:`run_tasks` starts for ``tasks`` tasks: ``jobs`` (default: every
    core) but no more than the tasks, for the local pool and the local dask cluster alike; none
    with a ``scheduler``, whose workers are the cluster's."""
    if scheduler is not None or tasks == 0:
        return 0
    return max(1, min(jobs or default_jobs(), tasks))


def resolve_point_function(name: str) -> PointFunction:
    """Import ``'package.module:function'``; raise ``UsageError`` if it cannot be found."""
    module_name, sep, func_name = name.partition(":")
    if not sep:
        raise UsageError(f"point function {name!r}: expected 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UsageError(f"point function {name!r}: cannot import module {module_name!r}: {err}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise UsageError(f"point function {name!r}: module {module_name!r} has no function {func_name!r}")
    return func


def _share_numba_threads(wanted: str | None) -> None:
    """Run numba's parallel sections on ``wanted`` threads (None: leave them as they are).

    Before numba is imported, ``NUMBA_NUM_THREADS`` does it (numba reads it at import). After,
    only ``numba.set_num_threads`` can: a spawned worker imports its parent's main module first
    (the ``nuna`` script, which imports numba), as dask's workers do too, and left alone every
    worker's windowed replays ran on all the cores, two workers' threads on two cores
    (docs/results.md, Speed). The count is the calling thread's, so it is set where each task
    runs (:func:`execute`): a local worker's main thread or a dask worker's executor thread."""
    if wanted is None:
        return
    if "numba" not in sys.modules:
        os.environ.setdefault("NUMBA_NUM_THREADS", wanted)
    import numba

    numba.set_num_threads(max(1, min(int(wanted), int(numba.config.NUMBA_NUM_THREADS))))  # type: ignore[attr-defined]


def execute(task: Task) -> Outcome:
    """Run one task in a worker. Every exception of the point becomes a failed outcome, so one
    bad point never stops a sweep; the result is checked to be JSON data here, where the
    traceback still names the point."""
    _share_numba_threads(os.environ.get(_NUMBA_SHARE_VARIABLE, os.environ.get("NUMBA_NUM_THREADS")))
    start = time.perf_counter()
    try:
        func = resolve_point_function(task.point_function)
        # A copy: a point function that mutates its input must not change what gets recorded.
        raw = func(dict(task.point if task.inputs is None else task.inputs))
        if not isinstance(raw, dict):
            raise TypeError(f"point function returned {type(raw).__name__}, expected a dict")
        own_timing = raw.get(TIMING_KEY, {})
        try:
            # The round trip turns tuples into lists etc., so what is written is what is read.
            result = json.loads(json.dumps({k: v for k, v in raw.items() if k != TIMING_KEY},
                                           sort_keys=True, allow_nan=False))
            timing = json.loads(json.dumps(own_timing, sort_keys=True, allow_nan=False))
        except (TypeError, ValueError) as err:
            raise TypeError(f"point function result is not JSON data: {err}") from None
        if not isinstance(timing, dict):
            timing = {"point": timing}
    except Exception as err:  # any failure of the point is data, not a crash of the sweep
        return Outcome(task.point_id, ok=False, result=None,
                       timing={POINT_WALL_KEY: round(time.perf_counter() - start, 6)},
                       error_type=type(err).__name__, error_message=_one_line(str(err)),
                       traceback=traceback.format_exc())
    timing[POINT_WALL_KEY] = round(time.perf_counter() - start, 6)
    return Outcome(task.point_id, ok=True, result=result, timing=timing)


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "(no message)"


def run_tasks(
    tasks: Sequence[Task],
    *,
    executor: str = "local",
    jobs: int | None = None,
    scheduler: str | None = None,
) -> Iterator[Outcome]:
    """Compute ``tasks`` on the chosen executor, yielding outcomes as they finish.

    Closing the iterator early (the driver was interrupted) cancels the work not yet started.
    """
    check_executor(executor)
    if executor == "local":
        return _run_local(tasks, jobs or default_jobs())
    return _run_dask(tasks, jobs, scheduler)


def check_executor(executor: str) -> None:
    """Raise ``UsageError`` unless ``executor`` is one of ``EXECUTORS``."""
    if executor not in EXECUTORS:
        raise UsageError(f"unknown executor {executor!r}; expected one of {', '.join(EXECUTORS)}")


def _run_local(tasks: Sequence[Task], jobs: int) -> Iterator[Outcome]:
    if not tasks:
        return
    workers = started_workers(jobs, None, len(tasks))
    # spawn, not fork: forking a driver that already runs threads (numba, tqdm's monitor) can
    # deadlock a child, and spawn gives the same clean workers a cluster would.
    context = multiprocessing.get_context("spawn")
    pending = iter(tasks)
    in_flight: set[Future[Outcome]] = set()
    threads = max(1, default_jobs() // workers)
    children_before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_start_worker,
                               initargs=(threads, os.getpid()))
    finished = False
    broken = False  # a worker died: the pool takes no more tasks and fails the ones it held
    try:
        def refill() -> None:
            nonlocal broken
            while not broken and len(in_flight) < workers * _QUEUE_PER_WORKER:
                task = next(pending, None)
                if task is None:
                    return
                try:
                    in_flight.add(pool.submit(execute, task))
                except BrokenProcessPool:  # the pool broke while the driver wrote an outcome
                    broken = True

        refill()
        while in_flight:
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                in_flight.discard(future)
                try:
                    outcome = future.result()
                except BrokenProcessPool:
                    broken = True  # the points finished before the death are still handed on
                    continue
                yield outcome
            refill()
        if broken:
            raise NunaError(
                "a sweep worker process died (out of memory, killed, or a script calling "
                "run_sweep without an 'if __name__ == \"__main__\":' guard); finished points "
                "are saved: run the sweep again to resume")
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            # Interrupted: stop the points in flight now rather than wait minutes for them to end.
            # ProcessPoolExecutor has no public way to do this before Python 3.14, and an
            # interrupt that lands while a worker is being spawned leaves that worker out of the
            # pool's own table, so every child started since the pool was made is stopped.
            pool.shutdown(wait=False, cancel_futures=True)
            ours = set((getattr(pool, "_processes", None) or {}).values())
            ours |= set(multiprocessing.active_children()) - children_before
            for process in ours:
                process.terminate()
            for process in ours:
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()
                    process.join()


def _worker_environment(threads: int) -> dict[str, str]:
    """The variables a worker starts with: ``threads`` for each thread pool, where the user has
    not set its variable, and the numba share (:data:`_NUMBA_SHARE_VARIABLE`).

    Not ``NUMBA_NUM_THREADS`` itself: a spawned worker may have imported numba already (from its
    parent's main module), and numba rereads the variable at every compile and raises once its
    threads have started if the value changed since import. Every point of a sweep on a cold
    numba cache failed so, in local and dask workers alike."""
    numba_threads = os.environ.get("NUMBA_NUM_THREADS", str(threads))  # a value the user set is kept
    env = {name: os.environ.get(name, str(threads))
           for name in _THREAD_VARIABLES if name != "NUMBA_NUM_THREADS"}
    env[_NUMBA_SHARE_VARIABLE] = numba_threads
    return env


def _start_worker(threads: int, driver: int) -> None:
    """Worker start-up: share the cores between workers, so that numba or BLAS thread pools in
    every worker do not each claim all of them (:func:`_worker_environment`; numba's share is set
    where each task runs, :func:`execute`), make garbage collections rare
    (:func:`nuna.process.tune_gc`) and die with the driver."""
    for name, value in _worker_environment(threads).items():
        os.environ.setdefault(name, value)
    tune_gc()
    _die_with(driver)


def _die_with(driver: int) -> None:
    """Have the kernel kill this worker when the driver dies, however it dies (SIGKILL, the
    out-of-memory killer): a point can run for minutes inside compiled code, where no Python-level
    check would run, and its result would go to nobody. Linux only (prctl); elsewhere a killed
    driver's workers finish their current point and exit."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl here: keep the portable behaviour
        return
    if os.getppid() != driver:  # the driver died before the request took effect
        os._exit(1)


def _run_dask(tasks: Sequence[Task], jobs: int | None, scheduler: str | None) -> Iterator[Outcome]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise UsageError("the dask executor needs dask.distributed: "
                         "pip install 'dask[distributed]'") from None
    if not tasks:
        return
    cluster: Any = None
    try:
        if scheduler is None:
            workers = started_workers(jobs, None, len(tasks))
            # as the local pool's: the cores are shared between workers (a windowed replay runs
            # its GPUs on numba's threads, which would each claim every core)
            threads = max(1, default_jobs() // workers)
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None, env=_worker_environment(threads))
            client = Client(cluster)
            client.run(tune_gc)  # workers we started are ours to tune, as the local pool's are
        else:
            client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError, ValueError) as err:  # refused, timed out, malformed address
        if cluster is not None:
            cluster.close()
        where = f"dask scheduler at {scheduler}" if scheduler else "a local dask cluster"
        raise UsageError(f"cannot connect to {where}: {_one_line(str(err))}") from None
    futures: list[Any] = []
    try:
        # Keys named after point ids: two sweeps sharing a scheduler compute a shared point once.
        futures = client.map(execute, list(tasks), key=[f"nuna-point-{task.point_id}" for task in tasks],
                             pure=False)
        by_key = {future.key: task for future, task in zip(futures, tasks, strict=True)}
        for future in as_completed(futures):
            task = by_key[future.key]
            try:
                outcome = future.result()
            except Exception as err:  # the worker running it died repeatedly (dask's KilledWorker)
                outcome = Outcome(task.point_id, ok=False, result=None, timing={},
                                  error_type=type(err).__name__, error_message=_one_line(str(err)))
            future.release()
            yield outcome
    finally:
        client.cancel(futures)
        client.close()
        if cluster is not None:
            cluster.close()
