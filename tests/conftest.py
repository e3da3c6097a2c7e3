"""Shared fixtures: paths to the shared reference corpus and an in-process CLI runner."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _shared_dir() -> Path:
    env = os.environ.get("NUNA_SHARED")
    if env:
        return Path(env)
    return REPO.parent / "shared"


SHARED = _shared_dir()
PLANS_MSCCL = SHARED / "plans-msccl"


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run ``nuna ARGS...`` in-process; returns exit code, stdout and stderr."""
    from nuna.cli import run

    def _run(*args: str) -> CliResult:
        code = run([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return _run


def msccl_plans() -> list[Path]:
    """Every real plan in the shared corpus (top level and from-repos/)."""
    if not PLANS_MSCCL.is_dir():
        return []
    return sorted(PLANS_MSCCL.glob("*.xml")) + sorted((PLANS_MSCCL / "from-repos").glob("*.xml"))
