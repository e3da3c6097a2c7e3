"""Atomic writes: content, permissions like open(), no leftovers, previous file kept on failure;
reads of input files: regular files only, one wording of their errors."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nuna.errors import InputError, TopologyError
from nuna.fsutil import check_writable, make_folder, read_input, write_atomic


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


def test_target_that_is_a_folder_is_an_input_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep").write_text("x")
    with pytest.raises(InputError, match=r"d: cannot write"):
        write_atomic(tmp_path / "d", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # no temporary left behind
    assert (tmp_path / "d" / "keep").read_text() == "x"


def test_unwritable_folder_names_the_target_not_the_temporary() -> None:
    # /proc refuses new files even to root, where a read-only mode would not
    if not Path("/proc/self").is_dir():
        pytest.skip("needs Linux /proc")
    with pytest.raises(InputError, match=r"/proc/x\.txt: cannot write in /proc") as err:
        write_atomic("/proc/x.txt", "x")
    assert ".tmp" not in str(err.value)


def test_check_writable_accepts_a_new_or_existing_file_and_writes_nothing(tmp_path: Path) -> None:
    check_writable(tmp_path / "new.json")
    (tmp_path / "old.json").write_text("keep")
    check_writable(tmp_path / "old.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]
    assert (tmp_path / "old.json").read_text() == "keep"


@pytest.mark.parametrize(("name", "message"), [
    ("nope/x.json", r"nope/x\.json: folder .*nope does not exist"),
    ("d", r"d: cannot write: it is a folder"),
])
def test_check_writable_refuses_what_write_atomic_would(tmp_path: Path, name: str, message: str) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError, match=message):
        check_writable(tmp_path / name)
    with pytest.raises(InputError, match=message):
        write_atomic(tmp_path / name, "x")


def test_make_folder_creates_parents_and_refuses_a_file_in_its_way(tmp_path: Path) -> None:
    make_folder(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()
    make_folder(tmp_path / "a" / "b")  # already there: nothing to do
    (tmp_path / "f").write_text("keep")
    with pytest.raises(InputError, match=r"f: not a folder"):
        make_folder(tmp_path / "f")
    with pytest.raises(InputError, match=r"cannot create the sweep folder"):
        make_folder(tmp_path / "f" / "sub", "sweep folder")
    assert (tmp_path / "f").read_text() == "keep"


def test_a_symlink_is_followed_not_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink()
    assert real.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_an_existing_file_keeps_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "private.json"
    target.write_text("old")
    target.chmod(0o600)
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_named_pipe_is_written_through_not_replaced(tmp_path: Path) -> None:
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    check_writable(fifo)
    write_atomic(fifo, "through")
    reader.join(timeout=10)
    assert got == [b"through"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


def test_read_input_returns_a_regular_files_bytes(tmp_path: Path) -> None:
    target = tmp_path / "plan.xml"
    target.write_bytes(b"<algo/>\x00\xff")
    assert read_input(target, "plan file") == b"<algo/>\x00\xff"
    assert read_input(target, "plan file", limit_bytes=9) == b"<algo/>\x00\xff"


@pytest.mark.parametrize(("make", "message"), [
    ("missing", "no such plan file"),
    ("folder", "is a folder, not a plan file"),
    ("large", "10 bytes, more than the 9-byte limit for a plan file"),
])
def test_read_input_names_what_is_wrong(tmp_path: Path, make: str, message: str) -> None:
    target = tmp_path / "x.xml"
    if make == "folder":
        target.mkdir()
    elif make == "large":
        target.write_bytes(b"0123456789")
    with pytest.raises(InputError) as raised:
        read_input(target, "plan file", limit_bytes=9)
    assert str(raised.value) == f"{target}: {message}"


def test_read_input_raises_the_error_class_asked_for(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="no such topology file"):
        read_input(tmp_path / "t.toml", "topology file", error=TopologyError)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_read_input_refuses_a_named_pipe_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.xml"
    os.mkfifo(fifo)  # a blocking open or read would hang the test here
    with pytest.raises(InputError, match="not a regular file"):
        read_input(fifo, "plan file")


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() == 0, reason="root reads any file")
def test_read_input_unreadable_file(tmp_path: Path) -> None:
    target = tmp_path / "secret.xml"
    target.write_text("x")
    target.chmod(0)
    with pytest.raises(InputError, match="cannot read: Permission denied"):
        read_input(target, "plan file")

