"""User-supplied text made safe to print: a plan's or a topology's name is the user's string,
and what nuna prints of it (an error line, a report's header) must stay one line and must not
drive the terminal. Used by every layer that formats text for people."""

from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` with the characters Python does not print escaped as in a string literal (control
    characters such as ``\\n``, ``\\r``, ``\\x1b``; separators other than the space), for what
    the CLI prints of user data: a plan's name may hold a newline (``name="a&#10;nuna: error:
    ..."``), which split an error in two and forged a second line, or a terminal escape."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
