"""Fixtures of the sweep runner's tests: the fake point functions on the import path, specs."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

#: Spec text of a small grid run by the fake point function (2 x 2 x 2 x (1 + 2) = 24 points).
SMALL_SPEC = """
[sweep]
name = "small"
point_function = "sweep_fake_points:echo_point"

[grid]
collectives = ["allgather", "allreduce"]
gpus = [2, 8]
sizes = ["100kB", "1MB"]
configs = ["UA", "UA+NAR"]
nar_granularities = [2, 12]
"""


@pytest.fixture
def fake_points(monkeypatch: pytest.MonkeyPatch) -> str:
    """Make ``sweep_fake_points`` importable here, in spawned workers and in subprocesses."""
    monkeypatch.syspath_prepend(str(HERE))
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(HERE) if not old else f"{HERE}{os.pathsep}{old}")
    monkeypatch.delenv("NUNA_FAKE_DELAY_S", raising=False)
    monkeypatch.delenv("NUNA_FAKE_FAIL_GPUS", raising=False)
    return str(HERE)


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[..., Path]:
    """Write spec text to a file in ``tmp_path`` and return its path."""

    def _write(text: str = SMALL_SPEC, name: str = "spec.toml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return _write
