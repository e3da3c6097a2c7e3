"""The interpreter settings nuna applies in the processes it owns."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from nuna.experiments import executors
from nuna.process import GC_THRESHOLDS, tune_gc


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


@pytest.mark.usefixtures("thresholds")
def test_tune_gc_makes_collections_rare_but_keeps_the_collector_on() -> None:
    tune_gc()
    assert gc.get_threshold() == GC_THRESHOLDS
    assert GC_THRESHOLDS[0] > 700
    assert gc.isenabled()


@pytest.mark.usefixtures("thresholds")
def test_a_sweep_worker_tunes_its_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executors, "_die_with", lambda driver: None)
    for name in executors._THREAD_VARIABLES:
        monkeypatch.setenv(name, os.environ.get(name, "1"))  # restored after the test
    executors._start_worker(1, os.getpid())
    assert gc.get_threshold() == GC_THRESHOLDS


def test_the_cli_tunes_its_collector() -> None:
    # main() owns the process: run it in a child that reports its thresholds at exit
    code = ("import atexit, gc, sys; atexit.register(lambda: print(gc.get_threshold()));"
            "sys.argv = ['nuna', '--version']; from nuna.cli import main; main()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == str(GC_THRESHOLDS)
