"""Helpers shared by the CLI command modules (option parsing that is CLI-only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from nuna.fsutil import write_atomic
from nuna.units import parse_size


def size_option(text: str) -> int:
    """typer parser for ``--size`` values: ``100kB``, ``1MiB``, ``4096``."""
    return parse_size(text)


def write_json(path: Path, payload: Any) -> None:
    """Write ``payload`` as deterministic, indented JSON (sorted keys) atomically."""
    write_atomic(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def echo_json(payload: Any) -> None:
    typer.echo(json.dumps(payload, indent=2, sort_keys=True))
