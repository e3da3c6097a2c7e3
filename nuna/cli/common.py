"""Helpers shared by the CLI command modules (option parsing that is CLI-only, the option enums
and the sweeps' progress bar)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import typer

from nuna.errors import PlanError, SimulationError, UsageError
from nuna.experiments.cost import WorkEstimate, axis_name
from nuna.experiments.sweep import SweepProgress, SweepSummary
from nuna.fsutil import check_writable, write_atomic
from nuna.topology.spec import TopologySpec, is_topology_path, load_topology, parse_overrides
from nuna.units import parse_size


class LineSetups(StrEnum):
    """``--line-setups``: router head set-ups behind a packet of several lines
    (``nuna.sim.SimOptions.line_setups``)."""

    OVERLAP = "overlap"
    SERIES = "series"
    ONE = "one"


class ProtocolModel(StrEnum):
    """``--protocol-model``: how a replay treats an LL or LL128 plan's protocol
    (``nuna.sim.SimOptions.protocol_model``)."""

    PLAN = "plan"
    SIMPLE = "simple"


class ExecutorName(StrEnum):
    """``--executor`` of ``nuna sweep`` and ``nuna figure`` (``nuna.experiments.executors.EXECUTORS``)."""

    LOCAL = "local"
    DASK = "dask"


def _terminal_size(stream: Any) -> tuple[int, int]:
    """Columns and lines of the terminal ``stream`` writes to (0, 0: unknown or not a terminal)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return 0, 0
    return size.columns, size.lines


class SweepProgressBar:
    """Progress of ``nuna sweep`` and ``nuna figure``: tqdm on stderr, created when the sweep
    reports how many points it will run.

    The bar and its ETA follow the points' estimated cost (``SweepProgress.cost_completed``), not
    their count: a sweep's points differ in cost by orders of magnitude and the small ones come
    first. The ETA is the remaining cost at the average rate since the start (no smoothing:
    points finish in bursts, out of order, several workers at a time)."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._bar: Any = None

    def __call__(self, event: SweepProgress) -> None:
        if not self._enabled:
            return
        if event.kind == "start":
            from tqdm import tqdm

            # a terminal that reports no size (a pseudo-terminal nobody sized: `script`, some CI
            # runners) got no bar at all from tqdm: draw one of 80 x 24 there
            sized = min(_terminal_size(sys.stderr)) > 0
            self._bar = tqdm(total=event.cost_to_run, file=sys.stderr, dynamic_ncols=sized,
                             ncols=None if sized else 80, nrows=None if sized else 24,
                             desc=self._description(event), initial=0, smoothing=0,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]")
        elif self._bar is not None:
            self._bar.set_description_str(self._description(event), refresh=False)
            self._bar.set_postfix_str(f"failed={event.failed}" if event.failed else "", refresh=False)
            # the sum of the finished points' costs may round away from the total: end exactly there
            done = self._bar.total if event.completed == event.to_run else event.cost_completed
            self._bar.update(done - self._bar.n)

    @staticmethod
    def _description(event: SweepProgress) -> str:
        return f"sweep {event.completed}/{event.to_run} pt"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


LINE_SETUPS_HELP = ("Router head set-ups behind a packet of several lines: overlap (the next head "
                    "waits until its lines' set-ups would have let them leave, over the channels "
                    "with room; the default), series (one per line after the packet), one (one "
                    "per packet, nuna <= 0.8.0). docs/simulator.md section 5. Flits: no change.")

PACKET_CREDIT_HELP = ("Flits of buffer credit a packet of several takes on entering a buffer, more "
                      "only while its head waits: 2 (the default) the two lines of a stream that sit "
                      "in a buffer while they pass; 1 as nuna <= 0.15.0. docs/simulator.md section 5. "
                      "Simple's flits: no change (an LL or LL128 line is two flits on the wire).")


PROTOCOL_MODEL_HELP = ("How an LL or LL128 plan's protocol is replayed: plan (its bytes on the wire, LL "
                       "twice the payload and LL128 16/15, and sends that do not wait for their stores; "
                       "the default) or simple (as Simple: payload only, sends wait; nuna <= 0.11.0). "
                       "Simple plans: no change.")

FLOW_CONTROL_HELP = ("The executors' flow control: a send waits until its receiver has finished the "
                     "receive 2 (Simple) or 8 (LL, LL128) sends earlier on its connection and the credit "
                     "is back (the default). --no-flow-control: senders never wait for receivers "
                     "(nuna <= 0.12.0). docs/simulator.md section 3.")


def parse_size_option(text: str) -> int:
    """``--size`` values (``100kB``, ``1MiB``, ``4096``): a bad value is a usage error (exit 2),
    like any other bad option."""
    try:
        return parse_size(text)
    except UsageError as err:
        raise typer.BadParameter(str(err)) from None


REDUCE_FUSION_HELP = ("Replay each chain of re steps the MSCCL executors fuse as one pass (loads every "
                      "source and the destination once, stores once), or every re on its own "
                      "(nuna <= 0.9.0).")
EXECUTOR_SLICES_HELP = ("Run each threadblock's steps once per slice of the plan's protocol (Simple 2 MiB, "
                        "LL 32 KiB, LL128 576,000 B per chunk), steps of many chunks as several calls and "
                        "a Simple call of a connection in its two parts, as the MSCCL executors do. "
                        "Default: every step once on its whole chunks (the paper's model).")


def parse_packet_bytes_option(text: str | None) -> int | Literal["auto"] | None:
    """``--packet-bytes``: ``auto``, a size (``1024``, ``1KiB``) or, not given, None (one flit of
    the topology)."""
    if text is None:
        return None
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = parse_size(text)
    except UsageError as err:
        raise typer.BadParameter(f"invalid packet size {text!r}: expected 'auto' or a size in bytes "
                                 f"({err})") from None
    if value <= 0:
        raise typer.BadParameter(f"invalid packet size {text!r}: must be positive")
    return value


SET_HELP = ("Change a topology parameter for this run: SECTION.KEY=VALUE, e.g. router.vc_buffer_flits=32 "
            "or chip.io_port_bandwidth_gbps=200 (repeatable; an ablation without a topology file of its "
            "own; the results name the chip with the settings).")


def topology_with_settings(topology: str, settings: Sequence[str]) -> TopologySpec:
    """``--topology`` loaded with the parameters of its ``--set`` options changed."""
    return load_topology(topology, parse_overrides(settings))


def check_outputs(*paths: Path | None, inputs: Sequence[Path | str | None] = ()) -> None:
    """Fail now, with the error the write would give, if an output file given on the command
    line could not be written (``nuna.fsutil.check_writable``): before the work, not after it.
    Also if two outputs name one file, or an output names one of the command's ``inputs`` (a
    plan, a topology file, a result): the write would replace the user's input, by a file of
    another kind for most commands (``nuna dag in.xml -o in.xml`` wrote GraphML over the plan).
    Inputs given as text are topologies: a shipped name is not a path and is skipped (the
    topology loader's rule, ``is_topology_path``)."""
    given = [path for path in paths if path is not None]
    for path in given:
        check_writable(path)
    real = [os.path.realpath(path) for path in given]
    for i, path in enumerate(given):  # one file for two outputs: the second would replace the first
        if real[i] in real[:i]:
            raise UsageError(f"{path}: given for two outputs; each needs a file of its own")
    read = [Path(item) for item in inputs
            if item is not None and (isinstance(item, Path) or is_topology_path(item))]
    for path in given:
        for source in read:
            if _same_file(path, source):
                raise UsageError(f"{path}: is also an input ({source}); write the output to another file")


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: one real path, or (hard links) one inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def write_json(path: Path, payload: Any) -> None:
    """Write ``payload`` as deterministic, indented JSON (sorted keys) atomically."""
    write_atomic(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def echo_json(payload: Any) -> None:
    typer.echo(json.dumps(payload, indent=2, sort_keys=True))


@contextlib.contextmanager
def naming_the_plan(path: Path) -> Iterator[None]:
    """Prefix a ``PlanError`` or ``SimulationError`` raised inside with the plan's file name, as
    ``nuna validate`` names its findings: the library checks a plan, not a file (``gpu 0 tb 0
    step 0: depid 5 names no threadblock`` or ``gpu 0 tb 0: placement names CU 5000`` told a
    user of several plans nothing about which one). The error keeps its type."""
    try:
        yield
    except (PlanError, SimulationError) as err:
        if str(err).startswith(f"{path}:"):
            raise
        raise type(err)(f"{path}: {err}") from None


def _span(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def report_dry_run(found: tuple[SweepSummary, WorkEstimate], reused_from: str) -> None:
    """Print what a dry run found (``nuna sweep`` and ``nuna figure``): the points' state, the
    points found done in the folders reused (named ``reused_from``), and the estimated work
    (``found``: :func:`nuna.experiments.sweep.sweep_estimate`)."""
    status, est = found
    reused = f" ({status.adopted} from {reused_from})" if status.adopted else ""
    typer.echo(f"sweep {status.name}: {status.total} points: {status.ok} done{reused}, "
               f"{len(status.failed)} failed, {status.pending} pending")
    if est.points == 0:
        return
    if not est.known:
        typer.echo(f"estimate: none for this point function ({est.points} points to run)")
        return
    on = (f", about {_span(est.wall_s)} on {est.workers} worker{'s' if est.workers > 1 else ''}"
          if est.wall_s is not None else " (the cluster's workers: no time estimated)")
    typer.echo(f"estimate: {_span(est.work_s)} of point time for {est.points} points{on} (seconds of the "
               f"machine the cost model was fitted to: docs/sweeps.md, 'Progress')")
    for axis, cells in est.by_axis:
        shares = ", ".join(f"{label} {100 * t / max(est.work_s, 1e-12):.0f}%" for label, t in cells)
        typer.echo(f"  by {axis_name(axis)}: {shares}")
    for seconds, label in est.costliest:
        typer.echo(f"  costliest: {_span(seconds)} {label}")
