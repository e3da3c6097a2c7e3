"""CLI command ``nuna figure NAME``: run (or resume) one of the paper's figure sweeps and render
it as PNG and SVG (``nuna.experiments.figures``)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from nuna.cli.common import (
    LINE_SETUPS_HELP,
    PACKET_CREDIT_HELP,
    ExecutorName,
    LineSetups,
    SweepProgressBar,
    parse_size_option,
    report_dry_run,
)
from nuna.experiments.figures import FIGURES, FigureOptions, figure_spec, figure_sweep_folders, run_figure
from nuna.experiments.spec import MAX_CREDIT_LINES
from nuna.experiments.sweep import sweep_estimate
from nuna.topology.spec import is_topology_path, load_topology
from nuna.units import format_size


def figure(
    name: str = typer.Argument(..., metavar="NAME", help=f"One of {', '.join(FIGURES)}."),
    out: Path = typer.Option(Path("out/figures"), "--out", "-o",
                             help="Output folder: NAME.png/.svg/.json and sweeps/NAME (resumable)."),
    executor: ExecutorName = typer.Option(ExecutorName.LOCAL, "--executor",
                                          help="local: process pool; dask: local dask cluster."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=1,
                                    help="Worker processes (default: all cores)."),
    quick: bool = typer.Option(False, "--quick",
                               help="Reduced grid, a smoke test in seconds (for CI): a 2-GPU pod at "
                                    "100 kB (fig12: 100 kB and 1 MB), whatever the figure's own pods and "
                                    "sizes; --gpus, --sizes and --tbs-per-peer, when given, are kept."),
    spec_dir: Path | None = typer.Option(None, "--spec-dir",
                                         help="Folder of figN.toml sweep specs (default: scripts/sweeps, "
                                              "or the copies installed with nuna)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Rerun the figure's points recorded "
                                      "as failed (a rerun without it leaves them out again)."),
    topology: str | None = typer.Option(None, "--topology", "-t",
                                        help="Run the figure's grid on this topology (name or .toml path) "
                                             "instead of the spec's."),
    collectives: str | None = typer.Option(None, "--collectives", help="Only these (comma-separated)."),
    gpus: str | None = typer.Option(None, "--gpus", help="Only these pod sizes, e.g. 2,4,8."),
    sizes: str | None = typer.Option(None, "--sizes", help="Only these sizes, e.g. 10MB,100MB."),
    configs: str | None = typer.Option(None, "--configs", help="Only these configurations, e.g. UA,NAP+NAR."),
    tbs_per_peer: str | None = typer.Option(None, "--tbs-per-peer", help="Only these threadblock counts."),
    windowed: bool | None = typer.Option(None, "--windowed/--one-queue", help="Replay every point with "
                                         "one event queue per GPU, or with one queue for the pod, into a "
                                         "sweep of its own (fig9-windowed, fig9-one-queue). Default: "
                                         "windowed from 16 GPUs with packets under 32 KiB (equal-time "
                                         "events of different GPUs in GPU order; faster there).",
                                         show_default=False),
    max_packet_bytes: str | None = typer.Option(None, "--max-packet-bytes", help="Cap the packets that "
                                                "packet_bytes = 'auto' picks (e.g. 1KiB; 256: flits "
                                                "only, none coarse, slower at large sizes), into a "
                                                "sweep of its own (fig9-packets1KiB).", show_default=False),
    fast_forward: bool = typer.Option(False, "--fast-forward", help="Skip the middle of steady states "
                                      "(docs/simulator.md section 7), into a sweep of its own (fig9-ff)."),
    line_setups: LineSetups | None = typer.Option(None, "--line-setups", help=LINE_SETUPS_HELP
                                                  + " Other than the default: into a sweep of its own "
                                                  "(fig9-setups-series).", show_default=False),
    packet_credit_lines: int | None = typer.Option(None, "--packet-credit-lines", min=1, max=MAX_CREDIT_LINES,
                                                   help=PACKET_CREDIT_HELP + " Other than the default: "
                                                   "into a sweep of its own (fig9-credit1).",
                                                   show_default=False),
    no_reduce_fusion: bool = typer.Option(False, "--no-reduce-fusion", help="Replay every re step on its "
                                          "own rather than each chain the MSCCL executors fuse as one pass "
                                          "(nuna <= 0.9.0), into a sweep of its own (fig9-nofusion)."),
    executor_slices: bool = typer.Option(False, "--executor-slices", help="Run every threadblock's steps "
                                         "slice by slice as the MSCCL executors do (docs/simulator.md "
                                         "section 3), into a sweep of its own (fig9-slices)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count the figure's done/failed/pending points "
                                 "(those of its other sweeps under --out count as done) and estimate the "
                                 "work left; run and draw nothing."),
) -> None:
    """Render one of the paper's Figures 9-14 from its sweep (run or resumed as needed).

    --collectives/--gpus/--sizes/--configs/--tbs-per-peer run a partial grid, and --topology the
    grid on another machine, named after the change (out/figures/fig9-gpus2_4_8.png)."""
    if name not in FIGURES:
        raise typer.BadParameter(f"unknown figure {name!r} (choose from {', '.join(FIGURES)})",
                                 param_hint="NAME")
    axes = {"collectives": collectives, "gpus": gpus, "sizes": sizes, "configs": configs,
            "tbs_per_peer": tbs_per_peer}
    only = {axis: value.split(",") for axis, value in axes.items() if value is not None}
    if topology is not None:
        load_topology(topology)  # a bad name or file fails here, before any point runs
        only["topologies"] = [str(Path(topology).resolve()) if is_topology_path(topology) else topology]
    cap = None if max_packet_bytes is None else parse_size_option(max_packet_bytes)
    options = FigureOptions(spec_dir=spec_dir, quick=quick, only=only, windowed=windowed,
                            max_packet_bytes=cap, fast_forward=fast_forward,
                            line_setups=None if line_setups is None else line_setups.value,
                            reduce_fusion=not no_reduce_fusion, executor_slices=executor_slices,
                            packet_credit_lines=packet_credit_lines)
    if dry_run:
        spec = figure_spec(name, options)
        folder, siblings = figure_sweep_folders(name, spec, out)
        found = sweep_estimate(spec, folder, siblings, retry_failed=retry_failed, executor=executor.value,
                               jobs=jobs)
        report_dry_run(found, f"{name}'s other sweeps")
        return
    bar = SweepProgressBar(enabled=not quiet and sys.stderr.isatty())
    try:
        result = run_figure(name, out, options, executor=executor.value, jobs=jobs, progress=bar,
                            retry_failed=retry_failed)
    finally:
        bar.close()
    s = result.summary
    typer.echo(f"{name}: {s.ok}/{s.total} points ({s.ran} ran, {s.already_done} reused) -> "
               f"{result.png}, {result.svg}, {result.data_json}")
    coarse = result.data.get("coarse_rows", 0)
    if coarse:
        typer.echo(f"note: {coarse} of the figure's bars come from packets over "
                   f"{format_size(result.data['coarse_packet_bytes'])} (hatched: their error differs "
                   f"by configuration, docs/simulator.md §5); --max-packet-bytes "
                   f"{format_size(result.data['coarse_packet_bytes'])} avoids them, slower")
    unselectable = result.data.get("msccl_unselectable_points", 0)
    if unselectable:
        typer.echo(f"note: {unselectable} of {result.data['points']} points replay a plan that MSCCL "
                   "would not select at its size (the element count does not divide into its "
                   "chunks; msccl_selectable in their results)")
    for failure in s.failed:
        typer.echo(f"failed: {failure.describe()}", err=True)
    if s.failed:
        typer.echo(f"nuna: error: {len(s.failed)} point(s) failed; the figure leaves them out "
                   "(rerun with --retry-failed to try them again)", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``figure`` command to the root app."""
    app.command("figure")(figure)
