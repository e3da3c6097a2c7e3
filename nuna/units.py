"""Unit parsing and formatting, converted once at the boundary.

Sizes accept decimal suffixes (``kB``, ``MB``, ``GB``, ``TB``: powers of 10) and binary ones
(``KiB``, ``MiB``, ``GiB``: powers of 2); a bare number is bytes. Internally every size is an
``int`` number of bytes and every time a ``float`` of nanoseconds.
"""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np

from nuna.errors import UsageError

_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}

#: sizes are int64 byte counts inside the simulator, with room for arithmetic on them
MAX_SIZE_BYTES = 2**60

_MAX_SIZE_TEXT = 64
# a number (decimal, or with a short exponent: "1e6"; e99 is far past any size and keeps the
# exact arithmetic below small) and an optional unit; re.ASCII: "٣" is no size
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d{1,2})?)\s*([a-zA-Z]*)\s*$", re.ASCII)


def check_size_bytes(size_bytes: object) -> int:
    """``size_bytes`` as an int if it is a whole, positive number of bytes no larger than
    :data:`MAX_SIZE_BYTES`; ``UsageError`` otherwise (a float such as ``1e6`` included: library
    callers pass sizes in code, and a float size reached the compiled kernels)."""
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, np.integer)):
        raise UsageError(f"size must be a whole number of bytes, got {size_bytes!r}")
    if size_bytes <= 0:
        raise UsageError(f"size must be a positive number of bytes, got {size_bytes}")
    if size_bytes > MAX_SIZE_BYTES:
        raise UsageError(f"size {size_bytes} is larger than {MAX_SIZE_BYTES} bytes (2**60)")
    return int(size_bytes)


def parse_size(text: str) -> int:
    """Parse ``'100kB'``, ``'1MiB'``, ``'4096'``, ``'1e6'`` into bytes; raise ``UsageError``
    otherwise."""
    if len(text) > _MAX_SIZE_TEXT:  # no size needs more; Python refuses ints of over 4,300 digits
        raise UsageError(f"invalid size {text[:20]!r}...: {len(text)} characters, more than a size takes")
    m = _SIZE_RE.match(text)
    if m is None:
        raise UsageError(f"invalid size {text!r}: expected a number with an optional unit like 100kB or 1MiB")
    number, unit = m.groups()
    scale = _SIZE_UNITS.get(unit.lower())
    if scale is None:
        raise UsageError(f"invalid size {text!r}: unknown unit {unit!r} (use B, kB, MB, GB, KiB, MiB, GiB)")
    value = Fraction(number) * scale  # exact: a float would round sizes over 2**53 bytes
    if value.denominator != 1:
        raise UsageError(f"invalid size {text!r}: not a whole number of bytes")
    try:
        return check_size_bytes(int(value))
    except UsageError as err:
        raise UsageError(f"invalid size {text!r}: {err}") from None


#: units :func:`format_size` may write, decimal first (the choice on a tie)
_FORMAT_UNITS: tuple[tuple[str, int], ...] = (
    ("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3),
    ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10),
)


def format_size(size_bytes: int) -> str:
    """Human form of a byte count, exact: the decimal or binary unit that gives the smallest whole
    number (``1000000 -> '1MB'``, ``1048576 -> '1MiB'``, ``102400 -> '100KiB'``), else bytes."""
    best, best_n = f"{size_bytes}B", size_bytes
    for unit, scale in _FORMAT_UNITS:
        n, rest = divmod(size_bytes, scale)
        if n and not rest and n < best_n:
            best, best_n = f"{n}{unit}", n
    return best
