"""Atomic writes: content, permissions like open(), no leftovers, previous file kept on failure."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nuna.errors import InputError
from nuna.fsutil import write_atomic


def test_writes_content_with_umask_mode(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    write_atomic(target, "hello\n")
    assert target.read_text() == "hello\n"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_failed_write_keeps_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(TypeError):
        write_atomic(target, 42)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_missing_folder_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        write_atomic(tmp_path / "nope" / "x.txt", "x")
