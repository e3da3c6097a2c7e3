"""Fixtures of the passes tests: the default topology and a CLI runner that reaches the
passes commands whether or not the lead has wired them into the root app yet."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import typer

import nuna.cli
from nuna.cli.pass_cmds import register
from nuna.topology.spec import TopologySpec, default_topology
from tests.conftest import CliResult


@pytest.fixture(scope="session")
def spec() -> TopologySpec:
    return default_topology()


@pytest.fixture
def cli(run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    """``run_cli`` with ``rewrite``/``diff``/``demo`` reachable (root app, or a fresh one with the
    same error handling when they are not registered there yet)."""
    if "rewrite" not in {c.name for c in nuna.cli.app.registered_commands}:
        app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True)

        @app.callback()
        def _root() -> None:
            """test root"""

        register(app)
        monkeypatch.setattr(nuna.cli, "app", app)
    return run_cli
