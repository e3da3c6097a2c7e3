"""Tabulate a sweep's headroom: per (collective, pod, size), UA's distance to the placement floor
(``placement_floor_ns``: what no placement or routing can beat) and the share of it NAP+NAR
takes, each configuration at its fastest threadblock count.

Usage: ``python scripts/headroom.py DIR`` after ``nuna sweep scripts/sweeps/headroom.toml -o DIR``;
prints a Markdown table (docs/results.md, Fig 9, "Headroom"). ``--recompute-floors`` computes the
floors with this nuna instead of reading them (results of nuna before 0.5.1, e.g. a Fig 9 sweep:
``python scripts/headroom.py out/figures/sweeps/fig9 --recompute-floors``).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nuna.experiments.figures import best_tbs_per_peer, lowest_floors, point_key
from nuna.experiments.spec import canonical_json, recorded_topology_file
from nuna.experiments.store import load_results
from nuna.plan.generate import generate
from nuna.sim import placement_bounds
from nuna.topology.spec import load_topology
from nuna.units import format_size


def floor_now(point: dict[str, Any], topology: str | None = None) -> float:
    """The placement floor of a sweep point computed by this nuna, without a replay (the floor
    does not depend on the configuration, so the point's plan is taken as generated).
    ``topology``: where to load the point's topology from (a record names a file by its file
    name only: :func:`nuna.experiments.spec.recorded_topology_file`)."""
    plan = generate(point["collective"], int(point["gpus"]), algo=point["algo"],
                    tbs_per_peer=int(point["tbs_per_peer"]))
    return placement_bounds(plan, load_topology(topology or point["topology"]), int(point["size_bytes"]),
                            packet_bytes=point["packet_bytes"])[1]


def headroom_rows(out_dir: Path, configs: tuple[str, str] = ("UA", "NAP+NAR"),
                  recompute: bool = False, topology_dirs: tuple[Path, ...] = (Path("."),)
                  ) -> list[dict[str, Any]]:
    """One row per (collective, gpus, size) that has both configurations: the floor (the lowest
    over every threadblock count run: the floor of a plan counts its steps' sizes), each
    configuration at its fastest threadblock count (``best_tbs_per_peer``, as the figures pick
    it), UA / floor and the share of UA's distance to the floor that the second takes.
    ``recompute``: each point's floor from :func:`floor_now` instead of its result (for results
    of a nuna whose floor was looser, before 0.5.1; a topology file is looked for in
    ``topology_dirs``)."""
    records = [r for r in load_results(out_dir) if r["point"]["config"] in configs]
    computed: dict[str, float] = {}  # the configurations of a point at one count share its floor

    def recomputed(record: Mapping[str, Any]) -> float:
        point = record["point"]
        inputs = canonical_json({k: v for k, v in point.items() if k not in ("config", "nar_granularity")})
        if inputs not in computed:
            computed[inputs] = floor_now(point, recorded_topology_file(record, topology_dirs))
        return computed[inputs]

    floor = lowest_floors(records, recomputed if recompute else None)
    best: dict[tuple[str, str], Any] = {}
    for choice in best_tbs_per_peer(records):
        best[(point_key(choice.record["point"]), choice.record["point"]["config"])] = choice
    rows = []
    for key in sorted({k for k, _ in best}):
        if (key, configs[0]) not in best or (key, configs[1]) not in best:
            continue
        ref, new = best[(key, configs[0])], best[(key, configs[1])]
        fl = floor[key]
        p = ref.record["point"]
        rows.append({"collective": p["collective"], "gpus": int(p["gpus"]),
                     "size_bytes": int(p["size_bytes"]), "floor_ns": fl, "ref_ns": ref.time_ns,
                     "ref_tbs": ref.tbs_per_peer, "new_ns": new.time_ns, "new_tbs": new.tbs_per_peer,
                     "ref_over_floor": ref.time_ns / fl,
                     "speedup": ref.time_ns / new.time_ns,
                     "taken": (ref.time_ns - new.time_ns) / (ref.time_ns - fl) if ref.time_ns > fl else 0.0})
    return sorted(rows, key=lambda r: (r["collective"], r["gpus"], r["size_bytes"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a sweep's output directory")
    parser.add_argument("--recompute-floors", action="store_true",
                        help="compute each point's floor with this nuna (no replay) instead of "
                             "reading it from the result: for results of nuna before 0.5.1")
    parser.add_argument("--topology-dir", type=Path, action="append", default=None,
                        help="where the sweep's topology files are, for --recompute-floors (results name "
                             "them by file name; repeatable; default: the current folder)")
    args = parser.parse_args()
    print("| collective | size | GPUs | floor (us) | UA best (us) [K] | UA / floor | NAP+NAR best [K] "
          "| NAP+NAR over UA | headroom taken |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in headroom_rows(args.dir, recompute=args.recompute_floors,
                           topology_dirs=tuple(args.topology_dir or [Path(".")])):
        print(f"| {r['collective']} | {format_size(r['size_bytes'])} | {r['gpus']} "
              f"| {r['floor_ns'] / 1000:.3f} | {r['ref_ns'] / 1000:.3f} [{r['ref_tbs']}] "
              f"| {r['ref_over_floor']:.2f}x | {r['new_ns'] / 1000:.3f} [{r['new_tbs']}] "
              f"| {r['speedup']:.2f}x | {r['taken'] * 100:.0f}% |")


if __name__ == "__main__":
    main()
