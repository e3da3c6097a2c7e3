"""Tabulate a sweep's headroom: per (collective, pod, size), UA's distance to the placement floor
(``placement_floor_ns``: what no placement or routing can beat) and the share of it NAP+NAR
takes, each configuration at its fastest threadblock count.

Usage: ``python scripts/headroom.py DIR`` after ``nuna sweep scripts/sweeps/headroom.toml -o DIR``;
prints a Markdown table (docs/results.md, Fig 9, "Headroom").
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from nuna.experiments.figures import best_tbs_per_peer
from nuna.experiments.store import load_results
from nuna.units import format_size


def headroom_rows(out_dir: Path, configs: tuple[str, str] = ("UA", "NAP+NAR")) -> list[dict[str, Any]]:
    """One row per (collective, gpus, size) that has both configurations: the floor (the lowest
    over every threadblock count run: the floor of a plan counts its steps' sizes), each
    configuration at its fastest threadblock count (``best_tbs_per_peer``, as the figures pick
    it), UA / floor and the share of UA's distance to the floor that the second takes."""
    records = [r for r in load_results(out_dir) if r["point"]["config"] in configs]
    floor: dict[tuple[str, int, int], float] = {}
    for r in records:
        p = r["point"]
        key = (p["collective"], int(p["gpus"]), int(p["size_bytes"]))
        floor[key] = min(floor.get(key, math.inf), float(r["result"]["placement_floor_ns"]))
    best: dict[tuple[tuple[str, int, int], str], Any] = {}
    for choice in best_tbs_per_peer(records):
        p = choice.record["point"]
        best[((p["collective"], int(p["gpus"]), int(p["size_bytes"])), p["config"])] = choice
    rows = []
    for key in sorted({k for k, _ in best}):
        if (key, configs[0]) not in best or (key, configs[1]) not in best:
            continue
        ref, new = best[(key, configs[0])], best[(key, configs[1])]
        fl = floor[key]
        rows.append({"collective": key[0], "gpus": key[1], "size_bytes": key[2], "floor_ns": fl,
                     "ref_ns": ref.time_ns, "ref_tbs": ref.tbs_per_peer, "new_ns": new.time_ns,
                     "new_tbs": new.tbs_per_peer, "ref_over_floor": ref.time_ns / fl,
                     "speedup": ref.time_ns / new.time_ns,
                     "taken": (ref.time_ns - new.time_ns) / (ref.time_ns - fl) if ref.time_ns > fl else 0.0})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a sweep's output directory")
    args = parser.parse_args()
    print("| collective | size | GPUs | floor (us) | UA best (us) [K] | UA / floor | NAP+NAR best [K] "
          "| NAP+NAR over UA | headroom taken |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in headroom_rows(args.dir):
        print(f"| {r['collective']} | {format_size(r['size_bytes'])} | {r['gpus']} "
              f"| {r['floor_ns'] / 1000:.3f} | {r['ref_ns'] / 1000:.3f} [{r['ref_tbs']}] "
              f"| {r['ref_over_floor']:.2f}x | {r['new_ns'] / 1000:.3f} [{r['new_tbs']}] "
              f"| {r['speedup']:.2f}x | {r['taken'] * 100:.0f}% |")


if __name__ == "__main__":
    main()
