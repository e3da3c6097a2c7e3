"""Benchmark of the Fig 9 grid (3 collectives x 6 pods x 5 sizes x 4 configs = 360 points at one
threadblock per peer, plus 4 and 16 per peer at 100 KiB and 1 MiB: 648 points): how long it takes
on this machine and where the time goes.

``python benchmarks/bench_fig9.py [--gpus 2,8] [--sizes 100KiB,1MiB] [--full]``
``python benchmarks/bench_fig9.py --grid [--jobs 2] [--out DIR]``
``python benchmarks/bench_fig9.py --from DIR``

``--grid`` is the issue's figure: the main grid (360 points, one threadblock per peer) run as
``nuna figure fig9 --tbs-per-peer 1 --jobs 2`` runs it, into an empty folder, timed on the wall
clock, then where the time goes. ``--from`` prints where the time went in a finished (or killed)
sweep folder, ``DIR/sweeps/fig9-tbsperpeer1`` or any other sweep's. Both then check the
progress bar's cost estimate against the points' times and replay the ETA it would have shown,
by count and by cost, against the time the run had left (docs/sweeps.md, "Progress").

Runs a stated subset of scripts/sweeps/fig9.toml serially in this process (one point at a time,
so each point's wall time is its own), prints per-point timings (passes + simulation, jobs,
events, events/s), then extrapolates to the full grid: each unmeasured point is estimated from
the measured point of the same collective, configuration and threadblocks per peer with the
largest ``gpus x size``, scaled by the two points' estimated costs (the progress bar's,
:func:`nuna.experiments.cost.point_cost`: jobs as the simulator will group them, a cost per job
growing with the pod; how far it is from the points' times: docs/sweeps.md, "Progress").
``--full`` measures every point.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nuna.errors import NunaError
from nuna.experiments import store
from nuna.experiments.cost import axis_name, point_cost, split_by_axes, worker_start_cost
from nuna.experiments.executors import POINT_WALL_KEY, TIMING_KEY
from nuna.experiments.figures import FigureOptions, run_figure
from nuna.experiments.points import simulate_point
from nuna.experiments.spec import DEFAULT_POINT_FUNCTION, expand
from nuna.experiments.store import load_results
from nuna.experiments.sweep import load_sweep_spec
from nuna.sim import load_kernels
from nuna.topology.spec import load_topology
from nuna.units import format_size, parse_size

SPEC = Path(__file__).resolve().parents[1] / "scripts" / "sweeps" / "fig9.toml"
CORES = 2


#: the axes a sweep's point time is split by, in the order printed
AXES = ("size_bytes", "gpus", "collective", "config")


def _key(p: Mapping[str, Any]) -> tuple[str, int, int, str, int]:
    return (p["collective"], p["gpus"], p["size_bytes"], p["config"], p["tbs_per_peer"])


def _point_label(p: Mapping[str, Any]) -> str:
    return (f"{p['collective']} {p['gpus']} GPUs {format_size(int(p['size_bytes']))} {p['config']} "
            f"K={p['tbs_per_peer']}")


def time_breakdown(records: Sequence[Mapping[str, Any]], top: int = 5) -> dict[str, Any]:
    """Where a sweep's time went, from its result records (:func:`nuna.experiments.store.
    load_results`): the points' wall time (the runner's ``timing.point_wall_s``) in all, the part in
    ``simulate`` (``timing.wall_s``) and of that the part in the compiled event loop
    (``timing.loop_s``; ``None`` when a point has none: results of a nuna without it), the point
    time summed per value of each axis of
    :data:`AXES` (in the axis's natural order: :func:`nuna.experiments.cost.split_by_axes`, as
    ``nuna sweep --dry-run`` splits its estimate), and the ``top`` costliest points."""
    rows = [(r["point"], float(r[TIMING_KEY][POINT_WALL_KEY])) for r in records]
    sim = sum(float(r[TIMING_KEY].get("wall_s", 0.0)) for r in records)
    loops = [r[TIMING_KEY].get("loop_s") for r in records]
    loop = sum(float(t) for t in loops) if all(t is not None for t in loops) else None
    points = sorted(((t, _point_label(p)) for p, t in rows), key=lambda tl: (-tl[0], tl[1]))
    by = {axis_name(axis): list(cells) for axis, cells in split_by_axes(rows, AXES, varying_only=False)}
    return {"points": len(records), "point_s": sum(t for _, t in rows), "simulate_s": sim, "loop_s": loop,
            "by": by, "costliest": points[:top]}


def print_breakdown(b: Mapping[str, Any]) -> None:
    total = b["point_s"]
    loop = "" if b.get("loop_s") is None else \
        f"; in the event loop {b['loop_s']:.0f} s, {100 * b['loop_s'] / max(total, 1e-9):.0f} %"
    print(f"{b['points']} points, point time {total:.0f} s (simulate {b['simulate_s']:.0f} s, "
          f"{100 * b['simulate_s'] / max(total, 1e-9):.0f} %{loop})")
    for name, rows in b["by"].items():
        cells = ", ".join(f"{label} {t:.0f} s ({100 * t / max(total, 1e-9):.0f} %)" for label, t in rows)
        print(f"  by {name}: {cells}")
    for t, label in b["costliest"]:
        print(f"  costliest: {t:7.1f} s  {label}")


def finished_points(folder: Path) -> list[tuple[float, float, float]]:
    """``(finished_at, point_wall_s, estimated cost)`` of every result in a sweep folder, in the
    order they finished: the result files' modification times (each written as its point
    finished), the runner's timing and :func:`nuna.experiments.cost.point_cost`."""
    rows = []
    for path in store.results_dir(folder).glob("*.json"):
        record = json.loads(path.read_text())
        wall = float(record[TIMING_KEY][POINT_WALL_KEY])
        rows.append((path.stat().st_mtime, wall, point_cost(record["point_function"], record["point"])))
    return sorted(rows)


def progress_check(rows: Sequence[tuple[float, float, float]], workers: int = 0,
                   start_cost: float = 0.0) -> dict[str, Any]:
    """How well the progress bar's weights matched a run's points (``rows`` as
    :func:`finished_points` gives them), and the ETA the bar would have shown along the way.

    The run's start is the earliest finish less that point's time. At each of
    :data:`ETA_MARKS` of the points finished, the ETA by count (``elapsed x left / done``
    points, the bar's rule until 2026-12-07) and by cost (the same over estimated costs, with
    ``start_cost`` for each of the run's ``workers`` charged to the first points to finish, as
    the runner does) against the time the run really took from there. Meaningful for a folder
    filled in one run from empty."""
    start = min(t - wall for t, wall, _ in rows)
    end = max(t for t, _, _ in rows) - start
    total_cost = math.fsum(c for _, _, c in rows) + workers * start_cost
    ratios = sorted(wall / c for _, wall, c in rows)
    marks = []
    done_cost = 0.0
    for k, (t, _, c) in enumerate(rows, 1):
        done_cost += c + (start_cost if k <= workers else 0.0)
        for mark in ETA_MARKS:
            if k == max(1, round(mark * len(rows))):
                elapsed = t - start
                marks.append((mark, elapsed, end - elapsed, elapsed * (len(rows) - k) / k,
                              elapsed * max(0.0, total_cost - done_cost) / done_cost))
    return {"points": len(rows), "wall_s": end, "ratios": ratios, "marks": marks}


#: fractions of a sweep's points at which :func:`progress_check` reads the ETA
ETA_MARKS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9)


def print_progress_check(c: Mapping[str, Any]) -> None:
    r = c["ratios"]

    def q(f: float) -> float:
        return float(r[min(len(r) - 1, int(f * len(r)))])

    print(f"progress weights: point time over estimated cost, {c['points']} points: "
          f"p10 {q(0.1):.2f}, median {q(0.5):.2f}, p90 {q(0.9):.2f} (min {r[0]:.2f}, max {r[-1]:.2f})")
    print("ETA along the run (true time left; by point count; by estimated cost):")

    def span(seconds: float) -> str:
        return f"{seconds:6.1f} s" if c["wall_s"] < 600 else f"{seconds / 60:6.1f} min"

    for mark, elapsed, left, by_count, by_cost in c["marks"]:
        print(f"  {100 * mark:3.0f} % of points at {span(elapsed)}: left {span(left)}, "
              f"by count {span(by_count)} ({by_count / max(left, 1e-9):.2f}x), "
              f"by cost {span(by_cost)} ({by_cost / max(left, 1e-9):.2f}x)")


def run_grid(out: Path, jobs: int) -> None:
    """The main grid as ``nuna figure fig9 --tbs-per-peer 1 --jobs JOBS -o OUT`` runs it."""
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"bench_fig9: --out {out} is not empty: finished points would be reused, not timed")
    t0 = time.perf_counter()
    fig = run_figure("fig9", out, FigureOptions(only={"tbs_per_peer": ["1"]}), jobs=jobs)
    wall = time.perf_counter() - t0
    records = load_results(fig.sweep_dir)
    failed = len(fig.summary.failed)
    print(f"fig9 main grid on {jobs} workers: {wall / 60:.1f} min wall ({wall:.0f} s; budget 30 min), "
          f"{len(records)} of {fig.summary.total} points finished" + (f", {failed} FAILED" if failed else ""))
    print_breakdown(time_breakdown(records))
    start = worker_start_cost(DEFAULT_POINT_FUNCTION)
    print_progress_check(progress_check(finished_points(fig.sweep_dir), jobs, start))


def _gpu_counts(text: str) -> set[int]:
    try:
        return {int(g) for g in text.split(",")}
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of GPU counts: {text!r}") from None


def _sizes(text: str) -> set[int]:
    try:
        return {parse_size(s) for s in text.split(",")}
    except NunaError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=_gpu_counts, default="2,8")
    parser.add_argument("--sizes", type=_sizes, default="100KiB,1MiB")
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--grid", action="store_true", help="run the main grid on --jobs workers, timed")
    parser.add_argument("--jobs", type=int, default=CORES,
                        help="--grid's workers; with --from, those the sweep ran on (for its ETA check)")
    parser.add_argument("--out", type=Path, default=None,
                        help="--grid's output folder (default: a temporary one)")
    parser.add_argument("--from", dest="from_dir", type=Path, default=None,
                        help="print where a finished sweep folder's time went")
    args = parser.parse_args()
    if args.from_dir is not None:
        try:
            records = load_results(args.from_dir)
        except NunaError as err:
            raise SystemExit(f"bench_fig9: {err}") from None
        print_breakdown(time_breakdown(records))
        if records:
            print_progress_check(progress_check(finished_points(args.from_dir), args.jobs,
                                                worker_start_cost(DEFAULT_POINT_FUNCTION)))
        return
    if args.grid:
        if args.out is not None:
            run_grid(args.out, args.jobs)
        else:
            with tempfile.TemporaryDirectory(prefix="bench-fig9-") as tmp:
                run_grid(Path(tmp), args.jobs)
        return
    spec = load_sweep_spec(SPEC)
    points = [p.as_dict() for p in expand(spec)]
    gpus, sizes = args.gpus, args.sizes
    subset = points if args.full else [p for p in points if p["gpus"] in gpus and p["size_bytes"] in sizes]
    if not subset:
        have = ", ".join(format_size(b) for b in sorted({p["size_bytes"] for p in points}))
        wanted = ",".join(format_size(b) for b in sorted(sizes))
        raise SystemExit(f"bench_fig9: no point of the grid has --gpus {','.join(map(str, sorted(gpus)))} "
                         f"and --sizes {wanted} "
                         f"(the grid's sizes: {have})")
    print(f"fig9 grid: {len(points)} points; measuring {len(subset)} serially")
    measured: dict[tuple[str, int, int, str, int], tuple[float, Mapping[str, Any]]] = {}
    simulate_point(dict(subset[0]))  # JIT warm-up, as a long-lived sweep worker has it
    load_kernels(load_topology("nuna-4die"))  # and both replay loops, whichever the subset's first took
    for p in subset:
        t0 = time.perf_counter()
        out = simulate_point(dict(p))
        wall = time.perf_counter() - t0
        sim = out["timing"]["wall_s"]
        measured[_key(p)] = (wall, p)
        rate = out["events"] / max(sim, 1e-9) / 1e6
        print(f"  {p['collective']:9s} {p['gpus']:2d} GPUs {format_size(p['size_bytes']):>5s} "
              f"{p['config']:8s} K={p['tbs_per_peer']:<2d} wall {wall:7.2f} s "
              f"(sim {sim:6.2f} s, passes+generate {wall - sim:5.2f} s) "
              f"jobs {out['jobs']:8d} events {out['events']:9d} ({rate:.2f} M/s) "
              f"simulated {out['time_ns'] / 1000:.2f} us")
    total_measured = sum(v[0] for v in measured.values())
    estimate = 0.0
    heaviest: list[tuple[float, str]] = []
    for p in points:
        key = _key(p)
        if key in measured:
            t = measured[key][0]
        else:
            refs = [(k, v) for k, v in measured.items() if (k[0], k[3], k[4]) == (key[0], key[3], key[4])]
            _, (rw, reference) = max(refs, key=lambda kv: kv[0][1] * kv[0][2])
            t = rw * point_cost(DEFAULT_POINT_FUNCTION, p) / point_cost(DEFAULT_POINT_FUNCTION, reference)
        estimate += t
        heaviest.append((t, _point_label(p)))
    print(f"measured subset: {total_measured:.1f} s serial = {total_measured / CORES:.1f} s on {CORES} cores")
    print(f"full grid estimate: {estimate:.0f} s serial = {estimate / CORES / 60:.1f} min on {CORES} cores "
          f"(budget 30 min)")
    for t, label in sorted(heaviest, reverse=True)[:8]:
        print(f"  heaviest (estimated or measured): {t:8.1f} s  {label}")


if __name__ == "__main__":
    main()
