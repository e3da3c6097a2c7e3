"""``nuna.text.one_line``: what nuna prints of a user's string stays on one line."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nuna.text import one_line


@given(st.text())
def test_one_line_prints_on_one_line_and_keeps_printable_text(text: str) -> None:
    out = one_line(text)
    assert out.isprintable()
    assert len(out.splitlines()) <= 1
    if text.isprintable():
        assert out == text


def test_control_characters_are_escaped_as_in_a_literal() -> None:
    assert one_line("evil\nnuna: error: forged\r") == "evil\\nnuna: error: forged\\r"
    assert one_line("esc\x1b[31m red") == "esc\\x1b[31m red"
    assert one_line("café 2\u2028lines") == "café 2\\u2028lines"
