"""Atomic writes: content, permissions like open(), no leftovers, previous file kept on failure;
reads of input files: regular files only, one wording of their errors."""

from __future__ import annotations

import errno
import fcntl
import io
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nuna import fsutil
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


def _os_error(code: int) -> OSError:
    """The error the system raises for ``code``: ``OSError`` picks the subclass
    (``PermissionError`` for ``EACCES``) and ``strerror`` is the system's wording."""
    return OSError(code, os.strerror(code))


def test_read_input_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # chmod 0 does not stop root (CI's user): the refusal is made the system call's
    target = tmp_path / "secret.xml"
    target.write_text("x")
    real_open = os.open

    def refusing_open(name: str, flags: int, mode: int = 0o777) -> int:
        if name == str(target):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
        return real_open(name, flags, mode)

    monkeypatch.setattr(os, "open", refusing_open)
    with pytest.raises(InputError) as raised:
        read_input(target, "plan file")
    assert str(raised.value) == f"{target}: cannot read: {os.strerror(errno.EACCES)}"
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__  # one line, not the OSError's traceback


@pytest.mark.parametrize("failing", ["fstat", "read"])
def test_read_input_error_after_the_open_closes_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         failing: str) -> None:
    target = tmp_path / "plan.xml"
    target.write_text("<algo/>")
    opened: list[int] = []
    real_open = os.open

    def spying_open(name: str, flags: int, mode: int = 0o777) -> int:
        opened.append(real_open(name, flags, mode))
        return opened[-1]

    def failing_fstat(fd: int) -> os.stat_result:
        raise _os_error(errno.EIO)

    class FailingReader(io.BufferedReader):
        def read(self, size: int | None = -1, /) -> bytes:
            raise _os_error(errno.EIO)

    def failing_fdopen(fd: int, mode: str) -> io.BufferedReader:
        assert mode == "rb"
        return FailingReader(io.FileIO(fd, "r"))

    monkeypatch.setattr(os, "open", spying_open)
    if failing == "fstat":
        monkeypatch.setattr(os, "fstat", failing_fstat)
    else:
        monkeypatch.setattr(os, "fdopen", failing_fdopen)
    with pytest.raises(InputError) as raised:
        read_input(target, "plan file")
    monkeypatch.undo()
    assert str(raised.value) == f"{target}: cannot read: {os.strerror(errno.EIO)}"
    assert len(opened) == 1
    with pytest.raises(OSError) as closed:
        os.fstat(opened[0])  # the descriptor read_input opened is closed, not leaked
    assert closed.value.errno == errno.EBADF


def _access_denying_write(monkeypatch: pytest.MonkeyPatch, denied: Path) -> list[int]:
    """Make ``os.access`` refuse a write to ``denied`` (as for a user without the permission,
    which root never is); returns the modes ``denied`` is asked for, as they come."""
    real_access = os.access
    asked: list[int] = []

    def access(path: str | os.PathLike[str], mode: int) -> bool:
        if Path(path) == denied:
            asked.append(mode)
            if mode & os.W_OK:
                return False
        return real_access(path, mode)

    monkeypatch.setattr(os, "access", access)
    return asked


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_check_writable_refuses_a_pipe_or_device_it_may_not_write(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _access_denying_write(monkeypatch, fifo)
    with pytest.raises(InputError) as raised:
        check_writable(fifo)
    assert str(raised.value) == f"{fifo}: cannot write: permission denied"
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_unwritable_folder_is_refused_and_the_old_file_kept(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.json"
    target.write_bytes(b"old\x00\xff")
    asked = _access_denying_write(monkeypatch, tmp_path)
    message = f"{target}: cannot write in {tmp_path}: permission denied"
    with pytest.raises(InputError) as raised:
        check_writable(target)
    assert str(raised.value) == message
    assert asked == [os.W_OK | os.X_OK]  # a folder must be searchable too, to create in it
    with pytest.raises(InputError) as raised:
        write_atomic(target, "new")
    assert str(raised.value) == message
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    assert target.read_bytes() == b"old\x00\xff"


@pytest.mark.parametrize(("call", "code"), [
    ("fsync", errno.ENOSPC),    # the disk fills as the data is flushed
    ("chmod", errno.EPERM),
    ("replace", errno.EACCES),  # the rename over the old file is refused
])
def test_a_failed_write_removes_its_temporary_and_keeps_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, code: int) -> None:
    target = tmp_path / "out.json"
    target.write_bytes(b"old\n")
    error = _os_error(code)

    def failing(*_: object) -> None:
        raise error

    monkeypatch.setattr(os, call, failing)
    with pytest.raises(InputError) as raised:
        write_atomic(target, "new\n")
    monkeypatch.undo()
    assert str(raised.value) == f"{target}: cannot write: {os.strerror(code)}"
    assert raised.value.__cause__ is error
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    assert target.read_bytes() == b"old\n"


def _age(path: Path, seconds: float = 60.0) -> Path:
    """``path`` with its times set ``seconds`` into the past (a leftover, not a fresh file)."""
    old = time.time() - seconds
    os.utime(path, (old, old))
    return path


def test_a_killed_writers_temporary_is_removed_by_the_next_write(tmp_path: Path) -> None:
    # a writer SIGKILLed between its temporary and the rename (no finally runs) left the
    # temporary for good: a hidden file as large as the output (a trace: hundreds of MB)
    out = tmp_path / "out.json"
    out.write_text("old")
    script = ("import os, signal, sys\n"
              "from nuna import fsutil\n"
              "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
              "fsutil.write_atomic(sys.argv[1], 'half')\n")
    killed = subprocess.run([sys.executable, "-c", script, str(out)], check=False)
    assert killed.returncode == -signal.SIGKILL
    (left,) = [p for p in tmp_path.iterdir() if p.name != "out.json"]  # the killed writer's temporary
    _age(left)
    live = tmp_path / ".out.json.live0001.tmp"  # a writer still writing holds its lock
    live.write_text("x")
    _age(live)
    keep = [live.name,
            ".out.json.fresh001.tmp",  # too young to tell from a writer about to lock it
            ".out.json.toolong01.tmp", ".out.json.UPPER001.tmp",  # not names mkstemp gives
            ".other.json.abcd1234.tmp"]  # another file's
    for name in keep[2:]:
        (tmp_path / name).write_text("x")
        _age(tmp_path / name)
    (tmp_path / ".out.json.fresh001.tmp").write_text("x")
    with open(live, "rb") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        fsutil.write_atomic(out, "new")
    assert out.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*keep, "out.json"])
    # once its writer is gone, the lock is too
    fsutil.write_atomic(out, "newer")
    assert not live.exists()


def test_a_writer_that_cleans_up_itself_can_skip_the_scan(tmp_path: Path) -> None:
    # a sweep's store writes thousands of files in one folder and cleans it under its lock
    out = tmp_path / "r.json"
    dead = tmp_path / ".r.json.dead0001.tmp"
    dead.write_text("x")
    _age(dead)
    fsutil.write_atomic(out, "1", remove_leftovers=False)
    assert dead.exists()
    fsutil.write_atomic(out, "2")
    assert not dead.exists()


def test_a_temporary_is_locked_until_its_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what tells a live writer's temporary from a leftover, on any host sharing the folder
    seen: list[bool] = []
    replace = os.replace

    def check_then_replace(src: str, dst: object) -> None:
        with open(src, "rb") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append(False)
            except BlockingIOError:
                seen.append(True)
        replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", check_then_replace)
    fsutil.write_atomic(tmp_path / "a.json", "x")
    assert seen == [True]
