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


def test_out_of_memory_is_an_error_not_an_internal_one(run_cli, monkeypatch) -> None:
    import nuna.cli

    def exhausted(**_: object) -> None:
        raise MemoryError("Unable to allocate 8.00 TiB for an array")

    monkeypatch.setattr(nuna.cli, "app", exhausted)
    res = run_cli("simulate", "x.xml", "--size", "1TiB")
    assert res.code == 1
    assert res.err == ("nuna: error: out of memory (Unable to allocate 8.00 TiB for an array); try a smaller "
                       "size, fewer GPUs or --packet-bytes auto\n")
