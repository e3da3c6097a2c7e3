"""Measure what the executors' slices, calls and call parts (``nuna.sim.SimOptions.executor_slices``)
change on a corpus of plans: each plan of the chosen protocols is replayed without and with them.

Usage: ``python scripts/slices_corpus.py [DIR] [--size 8MiB] [--protocols Simple]
[--max-flit-gpus 8] [--json FILE] [--sliced-only]``; DIR defaults to the shared corpus
(``../shared/plans-msccl``, searched recursively). Plans of up to ``--max-flit-gpus`` GPUs replay in
256-byte flits, larger ones with ``--packet-bytes auto``. Prints one line per plan (without -> with,
the ratio, the replay's nodes, the waiting sends a flow-control credit held) and a summary;
``--json`` writes the same per plan, so two revisions' runs (``PYTHONPATH=REV``, with
``--sliced-only``) can be compared. A plan that cannot be replayed is listed with its one-line error.
``docs/simulator.md`` §3, "Executor slices", quotes its output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from nuna.errors import NunaError
from nuna.fsutil import write_atomic
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
    parser.add_argument("--protocols", default="Simple", help="comma-separated: Simple,LL,LL128")
    parser.add_argument("--max-flit-gpus", type=int, default=8)
    parser.add_argument("--topology", default="nuna-4die")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--sliced-only", action="store_true",
                        help="skip the replays without slices (to compare two revisions' sliced ones)")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"error: {args.corpus} is not a folder of plans", file=sys.stderr)
        return 1
    size = parse_size(args.size)
    protocols = {p.strip() for p in args.protocols.split(",")}
    spec = load_topology(args.topology)
    rows: dict[str, dict[str, Any]] = {}
    for path in sorted(args.corpus.rglob("*.xml")):
        try:
            plan = load(path)
        except NunaError:
            continue
        if plan.protocol.value not in protocols:
            continue
        packets = 256 if plan.ngpus <= args.max_flit_gpus else "auto"
        try:
            whole = None if args.sliced_only else simulate(plan, spec, size, packet_bytes=packets)
            sliced = simulate(plan, spec, size, packet_bytes=packets,
                              options=SimOptions(executor_slices=True))
        except NunaError as err:
            print(f"{path.name}: error: {one_line(str(err))}")
            continue
        flow = sliced.to_json().get("flow_control", {})
        row = {"sliced_us": sliced.time_ns / 1e3, "replay_nodes": sliced.replay_nodes,
               "held_sends": flow.get("held_sends", 0), "waiting_sends": flow.get("waiting_sends", 0)}
        if whole is not None:
            row |= {"whole_us": whole.time_ns / 1e3, "ratio": sliced.time_ns / whole.time_ns}
        rows[str(path.relative_to(args.corpus))] = row
        times = (f"{row['sliced_us']:.2f} us" if whole is None else
                 f"{row['whole_us']:.2f} -> {row['sliced_us']:.2f} us ({row['ratio']:.3f}x)")
        print(f"{path.name}: {times}, {row['replay_nodes']} nodes, {row['held_sends']} of "
              f"{row['waiting_sends']} waiting sends held", flush=True)
    if rows and not args.sliced_only:
        ratios = sorted(r["ratio"] for r in rows.values())
        print(f"{len(rows)} plan{'s' * (len(rows) != 1)} at {format_size(size)}: ratios "
              f"{ratios[0]:.3f}-{ratios[-1]:.3f}x, median {ratios[len(ratios) // 2]:.3f}x")
    if args.json is not None:
        write_atomic(args.json, json.dumps(rows, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
