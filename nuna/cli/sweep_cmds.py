"""CLI command ``nuna sweep``: run a sweep spec into a results folder, with a progress bar."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from nuna.cli.common import ExecutorName, SweepProgressBar, report_dry_run
from nuna.experiments.sweep import (
    SweepSummary,
    load_sweep_spec,
    run_sweep,
    sweep_estimate,
)


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


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` command to the root app."""
    app.command("sweep")(sweep)
