"""Fake point functions for the sweep runner's tests: deterministic, picklable, importable by name.

The tests put this folder on ``sys.path`` (and ``PYTHONPATH`` for subprocesses), so the functions
are named ``sweep_fake_points:<function>`` in specs. Behaviour switches come from environment
variables, which worker processes inherit:

- ``NUNA_FAKE_DELAY_S``: seconds every point sleeps (for the kill-and-resume test);
- ``NUNA_FAKE_FAIL_GPUS``: points with this GPU count raise ``RuntimeError``;
- ``NUNA_FAKE_STARTED_DIR``: every point first creates a file named after its process there,
  so a test can tell that points are running.
- ``NUNA_FAKE_KILL_GPUS``: ``killing_point`` SIGKILLs the worker process running a point with
  this GPU count (as the out-of-memory killer would); with ``NUNA_FAKE_KILL_AFTER`` set, only
  once the file it names exists.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import time
from typing import Any


def _digest(point: dict[str, Any]) -> int:
    text = json.dumps(point, sort_keys=True)
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def echo_point(point: dict[str, Any]) -> dict[str, Any]:
    """A deterministic 'simulation': figures derived from the inputs, plus a wall-clock field."""
    started = os.environ.get("NUNA_FAKE_STARTED_DIR")
    if started:
        with open(os.path.join(started, str(os.getpid())), "a"):
            pass
    delay = float(os.environ.get("NUNA_FAKE_DELAY_S", "0"))
    if delay:
        time.sleep(delay)
    fail_gpus = os.environ.get("NUNA_FAKE_FAIL_GPUS")
    if fail_gpus and int(fail_gpus) == point["gpus"]:
        raise RuntimeError(f"injected failure for {point['gpus']} GPUs")
    return {
        "time_ns": point["size_bytes"] / 100.0 + point["gpus"] * 10.0,
        "digest": _digest(point),
        "inputs_seen": sorted(point),
        "timing": {"fake_delay_s": delay},
    }


def not_json_point(point: dict[str, Any]) -> dict[str, Any]:
    """Returns something that is not JSON data."""
    return {"value": {1, 2, 3}}


def not_a_dict_point(point: dict[str, Any]) -> list[int]:
    """Returns a list instead of a dict."""
    return [1, 2]


def nan_point(point: dict[str, Any]) -> dict[str, Any]:
    """Returns NaN, which JSON cannot hold."""
    return {"value": float("nan")}


def mutating_point(point: dict[str, Any]) -> dict[str, Any]:
    """Mutates its input; the recorded inputs must not change."""
    point["gpus"] = -1
    point.clear()
    return {"ok": True}


def env_point(point: dict[str, Any]) -> dict[str, Any]:
    """Reports the thread-pool settings the worker runs with: the variable, and the threads
    numba's parallel sections use (what the variable sets only if numba was not yet imported)."""
    import numba

    return {"numba_threads": os.environ.get("NUMBA_NUM_THREADS"), "numba_running": numba.get_num_threads()}


def compile_point(point: dict[str, Any]) -> dict[str, Any]:
    """Compiles a numba function in the worker, as a point does on a cold numba cache: numba
    rereads its environment variables at each compile, after the worker set its threads."""
    import numba

    @numba.njit(cache=False)
    def twice(x: int) -> int:
        return 2 * x

    return {"value": int(twice(point["gpus"])), "numba_running": numba.get_num_threads()}


def killing_point(point: dict[str, Any]) -> dict[str, Any]:
    """``echo_point``, except that a point with ``NUNA_FAKE_KILL_GPUS`` GPUs SIGKILLs the worker
    process running it, as the out-of-memory killer would: at once, or once the file named by
    ``NUNA_FAKE_KILL_AFTER`` exists (waiting for it up to a minute). Only a worker process: in
    the main process (an in-process dask worker's thread, say) it raises instead of killing the
    tests."""
    kill_gpus = os.environ.get("NUNA_FAKE_KILL_GPUS")
    if kill_gpus and int(kill_gpus) == point["gpus"]:
        if multiprocessing.parent_process() is None:
            raise RuntimeError("killing_point runs in a main process: not killing it")
        after = os.environ.get("NUNA_FAKE_KILL_AFTER")
        deadline = time.monotonic() + 60
        while after and not os.path.exists(after) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    return echo_point(point)
