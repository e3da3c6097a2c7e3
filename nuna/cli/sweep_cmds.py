"""CLI command ``nuna sweep``: run a sweep spec into a results folder, with a progress bar."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path

import typer

from nuna.cli.common import ExecutorName, SweepProgressBar, check_outputs, report_dry_run
from nuna.errors import UsageError
from nuna.experiments.sweep import (
    SweepSummary,
    load_sweep_spec,
    run_sweep,
    sweep_estimate,
)
from nuna.fsutil import write_atomic


def _report(summary: SweepSummary) -> None:
    fresh = sum(1 for f in summary.failed if f.this_run)
    reused = f" ({summary.adopted} copied from --reuse)" if summary.adopted else ""
    typer.echo(f"sweep {summary.name}: {summary.total} points, {summary.already_done} already done{reused}, "
               f"{summary.ran} ran ({summary.ran - fresh} ok, {fresh} failed); "
               f"{summary.ok}/{summary.total} have results -> {summary.index_path}")
    if summary.unusable:
        typer.echo(f"  {summary.unusable} damaged or mismatching result files were found and recomputed")
    for failure in summary.failed:
        note = "" if failure.this_run else " [earlier run; not retried]"
        typer.echo(f"failed: {failure.describe()}{note}", err=True)


def sweep(
    spec_path: Path = typer.Argument(..., metavar="SPEC.toml", help="Sweep spec (see docs/sweeps.md)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (created; reused to resume)."),
    executor: ExecutorName = typer.Option(ExecutorName.LOCAL, "--executor",
                                          help="local: process pool; dask: dask.distributed."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=1,
                                    help="Worker processes (default: all cores)."),
    scheduler: str | None = typer.Option(None, "--scheduler", metavar="ADDRESS",
                                         help="dask scheduler address, e.g. tcp://host:8786."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Rerun points recorded as failed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    dry_run: bool = typer.Option(False, "--dry-run",
                                 help="Count done/failed/pending points and estimate the work left; run "
                                      "nothing."),
    reuse: list[Path] = typer.Option([], "--reuse", metavar="DIR", exists=True, file_okay=False,
                                     help="Another sweep folder whose results for this spec's points "
                                          "are copied in instead of rerun (repeatable)."),
) -> None:
    """Run every unfinished point of a sweep; a rerun resumes where a killed run stopped."""
    if scheduler is not None and executor is not ExecutorName.DASK:
        raise typer.BadParameter("needs --executor dask", param_hint="--scheduler")
    if scheduler is not None and jobs is not None:
        raise typer.BadParameter("the cluster at --scheduler sets its workers", param_hint="--jobs")
    spec = load_sweep_spec(spec_path)
    if dry_run:  # both check the --reuse folders before anything else
        report_dry_run(sweep_estimate(spec, out, reuse, retry_failed=retry_failed, executor=executor.value,
                                      jobs=jobs, scheduler=scheduler), "--reuse")
        return
    bar = SweepProgressBar(enabled=not quiet and sys.stderr.isatty())
    try:
        summary = run_sweep(spec, out, executor=executor.value, jobs=jobs, scheduler=scheduler,
                            retry_failed=retry_failed, progress=bar, reuse=reuse)
    finally:
        bar.close()
    _report(summary)
    if summary.failed:
        typer.echo(f"nuna: error: {len(summary.failed)} point(s) failed (records in {out / 'failures'}); "
                   f"rerun with --retry-failed to try them again", err=True)
        raise typer.Exit(1)


class TableFormat(StrEnum):
    CSV = "csv"
    MARKDOWN = "markdown"


def table(
    folder: Path = typer.Argument(..., metavar="DIR", exists=True, file_okay=False,
                                  help="A sweep's output folder (nuna sweep -o DIR, or a figure's "
                                       "out/figures/sweeps/NAME)."),
    output: Path | None = typer.Option(None, "--output", "-o",
                                       help="File to write (default: standard output)."),
    fmt: TableFormat | None = typer.Option(None, "--format",
                                           help="csv (every input field) or markdown (the fields the "
                                                "rows differ in). Default: markdown for a .md output, "
                                                "else csv."),
    metrics: list[str] = typer.Option([], "--metric", "-m", metavar="PATH",
                                      help="A result value to show, e.g. busbw_gbps or "
                                           "remote_store_latency_ns.p99 (repeatable; default: those of "
                                           "time_us, busbw_gbps, remote-store mean and p99 and NAR "
                                           "granularity used that the results hold)."),
    baseline: str = typer.Option("UA", "--baseline",
                                 help="What the speedup column compares with: a configuration, or "
                                      "FIELD=VALUE of any input field (topology=nuna-4die, "
                                      "tbs_per_peer=1, packet_bytes=256; the twin differs only in "
                                      "that field). "
                                      "'none': no speedup column."),
    best_tbs: bool = typer.Option(False, "--best-tbs",
                                  help="One row per configuration at its fastest threadblock count, as "
                                       "the paper compares them."),
) -> None:
    """Tabulate a sweep's finished points: inputs, result metrics, speedup over a baseline."""
    from nuna.experiments.sweep import load_results
    from nuna.experiments.table import sweep_table, to_csv, to_markdown

    if output is not None:
        check_outputs(output, inputs=(folder / "index.json",))
        parent = os.path.realpath(output.parent)
        if parent in (os.path.realpath(folder / "results"), os.path.realpath(folder / "failures")):
            raise UsageError(f"{output}: inside the sweep's own records; write the table elsewhere")
    if fmt is None:
        fmt = TableFormat.MARKDOWN if output is not None and output.suffix.lower() in (".md", ".markdown") \
            else TableFormat.CSV
    result = sweep_table(load_results(folder), metrics or None,
                         baseline=None if baseline.lower() == "none" else baseline, best_tbs=best_tbs)
    text = to_markdown(result) if fmt is TableFormat.MARKDOWN else to_csv(result)
    if output is None:
        typer.echo(text, nl=False)
        return
    write_atomic(output, text)
    typer.echo(f"wrote {output}: {len(result.rows)} rows, {len(result.columns)} columns", err=True)


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` and ``table`` commands to the root app."""
    app.command("sweep")(sweep)
    app.command("table")(table)
