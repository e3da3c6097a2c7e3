"""Fixtures of the passes tests: the default topology and a CLI runner that reaches the
passes commands whether or not the lead has wired them into the root app yet."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nuna.topology.spec import TopologySpec, default_topology
from tests.conftest import CliResult


@pytest.fixture(scope="session")
def spec() -> TopologySpec:
    return default_topology()


@pytest.fixture
def cli(run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    """``run_cli``: the commands are registered on the root app."""
    return run_cli
