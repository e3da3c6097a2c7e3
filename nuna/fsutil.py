"""Files: atomic output (a reader never sees a half-written file and a failed write never
clobbers the user's previous file), input read from regular files only (with one wording of
their errors), and telling a file argument from a registered name."""

from __future__ import annotations

import glob
import os
import re
import stat
import sys
import tempfile
import time
from pathlib import Path

from nuna.errors import InputError, NunaError


def _current_umask() -> int:
    # os.umask can only be read by setting it; restore it at once (single-threaded CLI use)
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _special(target: Path) -> bool:
    """True when ``target`` (after symlinks) exists and is not a regular file: a device such as
    /dev/null or /dev/stdout, or a named pipe. Those are written through, not replaced: a rename
    over them would turn the device or pipe into a plain file."""
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _real(target: Path) -> Path:
    """The file a write to ``target`` must replace: the end of its symlinks, so that a link
    keeps pointing where it did and the file it names gets the new content."""
    return Path(os.path.realpath(target)) if target.is_symlink() else target


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise ``InputError`` now if :func:`write_atomic` could not write ``path``: its folder is
    missing or not writable, or ``path`` is a folder. Commands call it on their output files
    before the work, so that an hour's replay does not end in an output it cannot write."""
    given = Path(path)
    if _special(given):
        if not os.access(given, os.W_OK):
            raise InputError(f"{given}: cannot write: permission denied")
        return
    target = _real(given)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{given}: folder {folder} does not exist")
    if target.is_dir():
        raise InputError(f"{given}: cannot write: it is a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{given}: cannot write in {folder}: permission denied")


def make_folder(path: str | os.PathLike[str], what: str = "folder") -> None:
    """Create the folder ``path`` (and its parents) unless it exists; ``InputError`` if a file
    is in its way or it cannot be made. Commands call it before their work, as
    :func:`check_writable` for files."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise InputError(f"{target}: not a folder")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{target}: cannot create the {what}: {err.strerror or err}") from None


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, remove_leftovers: bool = True) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    A symlink is followed (the file it names is replaced, the link stays); an existing file keeps
    its permission bits, a new one gets those of a plain ``open()``; a device or named pipe is
    written through, as a shell redirection would (nothing there to keep whole).
    The temporary is locked (``flock``) until it is renamed. ``remove_leftovers``: then delete
    what killed writers of ``path`` left (:func:`remove_dead_writers_temporaries`: a scan of the
    folder, 5 ms in one of 10,000 files; a sweep's store, which writes thousands there and cleans
    its folders itself, turns it off)."""
    given = Path(path)
    check_writable(given)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if _special(given):
        try:
            with open(given, "wb") as handle:
                handle.write(payload)
        except OSError as err:
            raise InputError(f"{given}: cannot write: {err.strerror or err}") from err
        return
    target = _real(given)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_current_umask()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as err:  # name the user's file, not the temporary one
        raise InputError(f"{given}: cannot write in {folder}: {err.strerror or err}") from err
    lock = _lock(fd)  # held until the rename: the temporary is a live writer's
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # mkstemp creates 0600
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{given}: cannot write: {err.strerror or err}") from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        if lock is not None:
            os.close(lock)
    if remove_leftovers:
        remove_dead_writers_temporaries(target)


#: a temporary younger than this may be a writer's that has not locked it yet (mkstemp, then flock)
_LEFTOVER_AFTER_S = 10.0


def _lock(fd: int) -> int | None:
    """A second descriptor of ``fd``'s file holding an exclusive ``flock`` on it (it outlives
    ``fd``'s close), or None where there are no such locks (not POSIX)."""
    if sys.platform == "win32":
        return None
    import fcntl

    try:
        held = os.dup(fd)
    except OSError:  # out of descriptors: write unlocked (the 10-s age still guards it a while)
        return None
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
    except OSError:  # a file system without locks: no cleanup will take it for a leftover either
        os.close(held)
        return None
    return held


def remove_dead_writers_temporaries(target: Path) -> int:
    """Delete the temporaries of ``target`` whose writer is gone (killed by SIGKILL or a crash:
    no ``finally`` ran), and return how many: files named as :func:`write_atomic` names them,
    older than :data:`_LEFTOVER_AFTER_S`, that no process holds locked (a live writer holds its
    lock until the rename, on this host or another sharing the file system). Not where locks do
    not exist (not POSIX)."""
    if sys.platform == "win32":
        return 0
    import fcntl

    # mkstemp's names: the prefix, 8 characters of [a-z0-9_], the suffix
    pattern = re.compile(rf"\.{re.escape(target.name)}\.[a-z0-9_]{{8}}\.tmp")
    removed = 0
    now = time.time()
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        if not pattern.fullmatch(tmp.name):
            continue
        try:
            fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or now - info.st_mtime < _LEFTOVER_AFTER_S:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: its writer lives
            tmp.unlink()
            removed += 1
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def checkout_folder(name: str) -> Path | None:
    """Folder ``name`` of the source checkout nuna runs from (``topologies``, ``scripts/sweeps``),
    or None: an installed package has no checkout around it, and reads its packaged copies."""
    root = Path(__file__).resolve().parents[1]
    folder = root / name
    return folder if (root / "pyproject.toml").is_file() and folder.is_dir() else None


def looks_like_path(text: str, suffix: str) -> bool:
    """True when ``text`` names a file rather than a registered name (a shipped topology, say):
    it holds a path separator or ends in ``suffix``. Here, not in the layers that own the names,
    so that light code (the sweep driver) can apply the rule without importing them."""
    return "/" in text or "\\" in text or text.endswith(suffix)


def read_input(path: str | os.PathLike[str], what: str, *, limit_bytes: int | None = None,
               error: type[NunaError] = InputError) -> bytes:
    """The bytes of the regular file ``path``, a ``what`` ("plan file", "topology file", ...)
    named in the errors: ``error`` (a subclass of :class:`NunaError`) when it is missing, a
    folder, a named pipe or a device, larger than ``limit_bytes``, or unreadable.

    Every command reads its input files through here. Pipes and devices are refused, since a read
    would wait for a writer forever or never end; the file is opened without blocking and its
    type read from the open descriptor, so a pipe put in the file's place after a check cannot
    block the read."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # not inherited (PEP 446)
    except FileNotFoundError:
        raise error(f"{name}: no such {what}") from None
    except IsADirectoryError:  # where a folder cannot be opened (Linux opens it)
        raise error(f"{name}: is a folder, not a {what}") from None
    except OSError as err:
        raise error(f"{name}: cannot read: {err.strerror or err}") from None
    except (ValueError, UnicodeError):  # a NUL byte, or a name the file system cannot encode
        raise error(f"{name!r}: not a valid file name") from None
    try:
        info = os.fstat(fd)
    except OSError as err:
        os.close(fd)
        raise error(f"{name}: cannot read: {err.strerror or err}") from None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise error(f"{name}: is a folder, not a {what}" if stat.S_ISDIR(info.st_mode)
                    else f"{name}: not a regular file")
    if limit_bytes is not None and info.st_size > limit_bytes:
        os.close(fd)
        raise error(f"{name}: {info.st_size} bytes, more than the {limit_bytes}-byte limit for a {what}")
    try:
        with os.fdopen(fd, "rb") as handle:
            data = handle.read() if limit_bytes is None else handle.read(limit_bytes + 1)
    except OSError as err:
        raise error(f"{name}: cannot read: {err.strerror or err}") from None
    if limit_bytes is not None and len(data) > limit_bytes:  # it grew while we read
        raise error(f"{name}: more than the {limit_bytes}-byte limit for a {what}")
    return data
