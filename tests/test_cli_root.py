"""The CLI root: version, help, usage errors give exit 2 and one line."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest
import typer

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


def test_out_of_memory_is_an_error_not_an_internal_one(run_cli, monkeypatch) -> None:
    import nuna.cli

    def exhausted(**_: object) -> None:
        raise MemoryError("Unable to allocate 8.00 TiB for an array")

    monkeypatch.setattr(nuna.cli, "app", exhausted)
    res = run_cli("simulate", "x.xml", "--size", "1TiB")
    assert res.code == 1
    assert res.err == ("nuna: error: out of memory (Unable to allocate 8.00 TiB for an array); try a smaller "
                       "size, fewer GPUs or --packet-bytes auto\n")


def _app_raises(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    """Make ``nuna.cli.app`` (what ``run`` calls) raise ``error`` whatever the arguments."""
    import nuna.cli

    def failing(**_: object) -> None:
        raise error

    monkeypatch.setattr(nuna.cli, "app", failing)


def test_bare_nuna_prints_the_help_and_exits_2(run_cli) -> None:
    helped = run_cli("--help")
    assert helped.code == 0
    assert "Usage: nuna" in helped.out
    res = run_cli()
    assert res.code == 2  # click's status for no_args_is_help, the usage-error one
    assert res.out.rstrip("\n") == helped.out.rstrip("\n")
    assert res.err == ""  # the help was the message: no usage-error line after it


def test_a_bug_is_one_line_and_exit_3_naming_nuna_debug(run_cli, monkeypatch) -> None:
    monkeypatch.delenv("NUNA_DEBUG", raising=False)
    _app_raises(monkeypatch, RuntimeError("boom"))
    res = run_cli("simulate", "x.xml")
    assert res.code == 3
    assert res.err == "nuna: internal error: RuntimeError: boom (set NUNA_DEBUG=1 for a traceback)\n"
    assert res.out == ""


def test_a_bugs_message_cannot_forge_a_second_line(run_cli, monkeypatch) -> None:
    monkeypatch.delenv("NUNA_DEBUG", raising=False)
    _app_raises(monkeypatch, ValueError("a\nnuna: ok"))
    res = run_cli("simulate", "x.xml")
    assert res.code == 3
    assert res.err == ("nuna: internal error: ValueError: a\\nnuna: ok "
                       "(set NUNA_DEBUG=1 for a traceback)\n")


def test_nuna_debug_lets_the_bug_propagate_for_its_traceback(run_cli, monkeypatch, capsys) -> None:
    monkeypatch.setenv("NUNA_DEBUG", "1")
    bug = RuntimeError("boom")
    _app_raises(monkeypatch, bug)
    with pytest.raises(RuntimeError) as raised:
        run_cli("simulate", "x.xml")
    assert raised.value is bug
    assert capsys.readouterr().err == ""  # the traceback replaces the one-line message


@pytest.mark.parametrize(("error", "line"), [
    (PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/x"),
     f"nuna: error: {os.strerror(errno.EACCES)}: /x\n"),
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),  # no file name: no dangling ': '
     f"nuna: error: {os.strerror(errno.ENOSPC)}\n"),
    (FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "a\nnuna: ok"),
     f"nuna: error: {os.strerror(errno.ENOENT)}: a\\nnuna: ok\n"),
    # a name may end in ':' or ' ': it is kept whole (an rstrip of ': ' once cut it short)
    (PermissionError(errno.EACCES, os.strerror(errno.EACCES), "out:"),
     f"nuna: error: {os.strerror(errno.EACCES)}: out:\n"),
    (PermissionError(errno.EACCES, os.strerror(errno.EACCES), "a: "),
     f"nuna: error: {os.strerror(errno.EACCES)}: a: \n"),
    (OSError(), "nuna: error: OSError\n"),  # no reason, no name: still says what went wrong
])
def test_an_os_error_is_its_reason_and_file_exit_1(run_cli, monkeypatch, error: OSError, line: str) -> None:
    _app_raises(monkeypatch, error)
    res = run_cli("simulate", "x.xml")
    assert res.code == 1
    assert res.err == line


@pytest.mark.parametrize(("error", "line"), [
    (typer.Abort(), "nuna: aborted\n"),
    (KeyboardInterrupt(), "nuna: interrupted\n"),
])
def test_abort_and_ctrl_c_exit_130(run_cli, monkeypatch, error: BaseException, line: str) -> None:
    _app_raises(monkeypatch, error)
    res = run_cli("simulate", "x.xml")
    assert res.code == 130
    assert res.err == line


def test_ctrl_c_inside_a_command_says_so(run_cli, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the test above replaces the app; inside a real command typer catches the interrupt
    # itself and used to end it with 130 and no word
    import nuna.plan.xml

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(nuna.plan.xml, "load", interrupted)
    plan = tmp_path / "p.xml"
    plan.write_text("<algo/>")
    res = run_cli("simulate", plan, "--size", "1MiB")
    assert res.code == 130
    assert res.err == "nuna: interrupted\n"


def _commands() -> list[tuple[tuple[str, ...], list[str]]]:
    """(command path, its long option names) for every command of the app (duck-typed: typer
    vendors its own click, whose classes differ between versions)."""
    import typer.main

    from nuna.cli import app

    found: list[tuple[tuple[str, ...], list[str]]] = []

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        if hasattr(cmd, "commands"):  # a group
            for name, sub in cmd.commands.items():
                walk(sub, (*path, name))
            return
        names = [o for p in cmd.params if p.param_type_name == "option"
                 for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]
        found.append((path, names))

    walk(typer.main.get_command(app), ())
    return found


def test_help_shows_every_option_name_whole_on_80_columns(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    # rich's panels cut long names ("--chunks-per-p…") on 80 columns and in pipes
    monkeypatch.setenv("COLUMNS", "80")
    commands = _commands()
    assert len(commands) >= 15
    for path, names in commands:
        res = run_cli(*path, "--help")
        assert res.code == 0, path
        assert "…" not in res.out, path
        assert max(len(line) for line in res.out.splitlines()) <= 80, path
        for name in names:
            assert name in res.out, (path, name)
