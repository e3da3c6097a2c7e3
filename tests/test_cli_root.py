"""The CLI root: version, help, usage errors give exit 2 and one line."""

from __future__ import annotations

from nuna import __version__


def test_version(run_cli) -> None:
    res = run_cli("--version")
    assert res.code == 0
    assert __version__ in res.out


def test_unknown_command_is_usage_error(run_cli) -> None:
    res = run_cli("no-such-command")
    assert res.code == 2
    assert res.err.count("\n") == 1
    assert "Traceback" not in res.err
