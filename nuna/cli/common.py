"""Helpers shared by the CLI command modules (option parsing that is CLI-only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from nuna.errors import UsageError
from nuna.fsutil import write_atomic
from nuna.units import parse_size


def parse_size_option(text: str) -> int:
    """``--size`` values (``100kB``, ``1MiB``, ``4096``): a bad value is a usage error (exit 2),
    like any other bad option."""
    try:
        return parse_size(text)
    except UsageError as err:
        raise typer.BadParameter(str(err)) from None


def write_json(path: Path, payload: Any) -> None:
    """Write ``payload`` as deterministic, indented JSON (sorted keys) atomically."""
    write_atomic(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def echo_json(payload: Any) -> None:
    typer.echo(json.dumps(payload, indent=2, sort_keys=True))
