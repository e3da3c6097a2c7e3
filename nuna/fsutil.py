"""Files: atomic output (a reader never sees a half-written file and a failed write never
clobbers the user's previous file), and telling a file argument from a registered name."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from nuna.errors import InputError


def _current_umask() -> int:
    # os.umask can only be read by setting it; restore it at once (single-threaded CLI use)
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise ``InputError`` now if :func:`write_atomic` could not write ``path``: its folder is
    missing or not writable, or ``path`` is a folder. Commands call it on their output files
    before the work, so that an hour's replay does not end in an output it cannot write."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{target}: folder {folder} does not exist")
    if target.is_dir():
        raise InputError(f"{target}: cannot write: it is a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{target}: cannot write in {folder}: permission denied")


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


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    check_writable(target)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as err:  # name the user's file, not the temporary one
        raise InputError(f"{target}: cannot write in {folder}: {err.strerror or err}") from err
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates 0600; give the file the mode a plain open() would have
        os.chmod(tmp, 0o666 & ~_current_umask())
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{target}: cannot write: {err.strerror or err}") from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def looks_like_path(text: str, suffix: str) -> bool:
    """True when ``text`` names a file rather than a registered name (a shipped topology, say):
    it holds a path separator or ends in ``suffix``. Here, not in the layers that own the names,
    so that light code (the sweep driver) can apply the rule without importing them."""
    return "/" in text or "\\" in text or text.endswith(suffix)
