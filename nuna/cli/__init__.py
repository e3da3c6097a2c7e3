"""The ``nuna`` command line: a thin layer that parses options, calls the library and prints.

Each command group lives in its own module and registers itself on :data:`app` through a
``register(app)`` function; :func:`run` turns library errors into one line on stderr.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

import typer

from nuna import __version__
from nuna.cli import figure_cmds, generate_cmds, pass_cmds, plan_cmds, sim_cmds, sweep_cmds, topology_cmds
from nuna.errors import NunaError
from nuna.process import tune_gc
from nuna.text import one_line

_Abort = typer.Abort
try:  # recent typer vendors click; older versions raise the click package's exceptions
    from typer._click.exceptions import NoArgsIsHelpError as _NoArgsIsHelp
    from typer._click.exceptions import UsageError as _ClickUsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import NoArgsIsHelpError as _NoArgsIsHelp  # type: ignore[assignment,no-redef,unused-ignore]
    from click.exceptions import UsageError as _ClickUsageError  # type: ignore[assignment,no-redef,unused-ignore]

app = typer.Typer(
    name="nuna",
    help="Simulate non-uniform network access (NUNA) in multi-die GPU scale-up systems.",
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain click help: rich panels cut option names short on 80 columns and in pipes
    # ("--chunks-per-p…"); click wraps the help text instead and keeps every name whole
    rich_markup_mode=None,
    no_args_is_help=True,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nuna {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """nuna: replay MSCCL collective plans on a modelled multi-die GPU pod."""


plan_cmds.register(app)
generate_cmds.register(app)
topology_cmds.register(app)
sim_cmds.register(app)
pass_cmds.register(app)
sweep_cmds.register(app)
figure_cmds.register(app)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on ``argv`` and return the exit status (0 ok, 1 error, 2 usage)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = app(args=args, prog_name="nuna", standalone_mode=False)
    except _NoArgsIsHelp as err:  # bare 'nuna' or 'nuna topology': the help is the message
        print(err.format_message())
        return 2
    except _ClickUsageError as err:
        where = err.ctx.command_path if err.ctx is not None else "nuna"
        if not err.format_message():  # the help text was already shown
            return 2
        print(f"nuna: usage error: {one_line(err.format_message())} (see '{where} --help')", file=sys.stderr)
        return 2
    except _Abort:
        print("nuna: aborted", file=sys.stderr)
        return 130
    except NunaError as err:
        print(f"nuna: error: {one_line(str(err))}", file=sys.stderr)
        return 1
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        # the file name as it is: a name may end in ':' or ' ' (rstrip of ': ' cut it short)
        message = reason if err.filename is None else f"{reason}: {err.filename}"
        print(f"nuna: error: {one_line(message)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nuna: interrupted", file=sys.stderr)
        return 130
    except MemoryError as err:  # a request too large for this machine, not a bug
        detail = f" ({one_line(str(err))})" if str(err) else ""
        print(f"nuna: error: out of memory{detail}; try a smaller size, fewer GPUs or --packet-bytes auto",
              file=sys.stderr)
        return 1
    except Exception as err:  # a bug, not bad input: one line, the traceback on request
        if os.environ.get("NUNA_DEBUG"):
            raise
        print(f"nuna: internal error: {type(err).__name__}: {one_line(str(err))} "
              "(set NUNA_DEBUG=1 for a traceback)", file=sys.stderr)
        return 3
    if result == 130:  # Ctrl-C inside a command: typer turns it into a silent Exit(130)
        print("nuna: interrupted", file=sys.stderr)
    return int(result) if isinstance(result, int) else 0


def _terminated(signum: int, _frame: object) -> None:
    # A batch system stops a job with SIGTERM (then SIGKILL). Python's default would end the
    # process at once, skipping every clean-up: a sweep's workers would go on computing points
    # nobody collects. As SystemExit it unwinds like Ctrl-C does: the sweep stops its workers,
    # writes its index and leaves the unfinished points pending.
    print("nuna: terminated", file=sys.stderr)
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    signal.signal(signal.SIGTERM, _terminated)  # the process is ours: the CLI owns its signals
    tune_gc()  # and its garbage collector
    sys.exit(run())
