"""Size parsing: decimal and binary units, and clean errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nuna.errors import UsageError
from nuna.units import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("100kB", 100_000), ("1MB", 10**6), ("1GB", 10**9), ("1KiB", 1024), ("2MiB", 2 * 2**20),
     ("1GiB", 2**30), ("4096", 4096), ("1.5kB", 1500), ("7B", 7),
     # an exponent, as in 1e6 (a short one: e99 is past any size)
     ("1e6", 10**6), ("2.5e3kB", 2_500_000), ("1E3", 1000), ("1e+3", 1000), ("1.5e0MiB", 3 * 2**19),
     ("1e-0", 1), ("15e-1kB", 1500)],  # a negative exponent where the bytes come out whole
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1XB", "-1MB", "0", "1.0001kB", "1 2MB", "2000000TiB",
                                  "99999999999999999999999", "1e-3", "1e99", "1e100", "1e999999999",
                                  "1eB", "e6", "1e",
                                  "\u0663", "1\u0660kB", "\uff11MB"])  # digits of other scripts
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_size(text)


@given(st.integers(min_value=2**53, max_value=2**60))
def test_parse_size_is_exact_for_large_byte_counts(n: int) -> None:
    # through a float, 2**53 + 1 would come back as 2**53
    assert parse_size(str(n)) == n


@given(st.integers(min_value=1, max_value=10**13))
def test_format_parse_roundtrip(n: int) -> None:
    assert parse_size(format_size(n)) == n


@pytest.mark.parametrize(
    ("size", "text"),
    [(100_000, "100kB"), (10**6, "1MB"), (10**12, "1TB"), (102_400, "100KiB"), (2**20, "1MiB"),
     (10 * 2**20, "10MiB"), (2**30, "1GiB"), (1_024_000, "1000KiB"), (1000, "1kB"), (1024, "1KiB"),
     (1536, "1536B"), (7, "7B")],
)
def test_format_size_picks_the_exact_unit_with_the_smallest_number(size: int, text: str) -> None:
    # figures label the sizes they ran: binary sizes must not print as long byte counts
    assert format_size(size) == text


@given(st.integers(min_value=1, max_value=10**13))
def test_format_size_is_never_longer_than_bytes(n: int) -> None:
    assert len(format_size(n)) <= len(f"{n}B")
