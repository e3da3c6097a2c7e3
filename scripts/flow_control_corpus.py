"""Measure what the executors' flow control (``nuna.sim.SimOptions.flow_control``) changes on a
corpus of plans: each plan with a connection of more sends than its protocol's depth is
replayed with and without it.

Usage: ``python scripts/flow_control_corpus.py [DIR] [--size 8MiB] [--max-flit-gpus 8]``; DIR
defaults to the shared corpus (``../shared/plans-msccl``, searched recursively). Plans of up to
``--max-flit-gpus`` GPUs replay in 256-byte flits, larger ones with ``--packet-bytes auto``.
Prints one line per plan (without -> with, the ratio, the placement floor) and a summary; a plan
that cannot be replayed is listed with its one-line error. ``docs/simulator.md`` §3, "Flow
control", quotes its output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nuna.errors import NunaError
from nuna.plan.dag import build_dag
from nuna.plan.flow import credit_sources, flow_control_depth
from nuna.plan.xml import load
from nuna.sim import SimOptions, simulate
from nuna.text import one_line
from nuna.topology import load_topology
from nuna.units import format_size, parse_size

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "plans-msccl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=CORPUS)
    parser.add_argument("--size", default="8MiB")
    parser.add_argument("--max-flit-gpus", type=int, default=8)
    parser.add_argument("--topology", default="nuna-4die")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"error: {args.corpus} is not a folder of plans", file=sys.stderr)
        return 1
    size = parse_size(args.size)
    spec = load_topology(args.topology)
    ratios: list[float] = []
    for path in sorted(args.corpus.rglob("*.xml")):
        try:
            plan = load(path)
            credits = int((credit_sources(build_dag(plan), flow_control_depth(plan.protocol)) >= 0).sum())
        except NunaError:
            continue  # no replay DAG: nothing flow control could change
        if not credits:
            continue
        packets = 256 if plan.ngpus <= args.max_flit_gpus else "auto"
        try:
            free = simulate(plan, spec, size, packet_bytes=packets, options=SimOptions(flow_control=False))
            held = simulate(plan, spec, size, packet_bytes=packets)
        except NunaError as err:
            print(f"{path.name}: error: {one_line(str(err))}")
            continue
        ratio = held.time_ns / free.time_ns
        ratios.append(ratio)
        print(f"{path.name} {plan.protocol.value} {plan.ngpus} GPUs, {credits} credits, packets {packets}: "
              f"{free.time_ns / 1e3:.2f} -> {held.time_ns / 1e3:.2f} us ({ratio:.4f}x), floor "
              f"{held.placement_floor_ns / 1e3:.2f} us", flush=True)
    if ratios:
        slower = [r for r in ratios if r > 1.0]
        faster = [r for r in ratios if r < 1.0]
        same = len(ratios) - len(slower) - len(faster)
        up = f" (up to {max(slower):.3f}x)" if slower else ""
        down = f" (down to {min(faster):.3f}x)" if faster else ""
        print(f"{len(ratios)} plans at {format_size(size)}: {same} the same, {len(slower)} slower{up}, "
              f"{len(faster)} faster{down}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
