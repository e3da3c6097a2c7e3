"""Tabulate a sweep's headroom: per (collective, pod, size), UA's distance to the placement floor
(``placement_floor_ns``: what no placement or routing can beat) and the share of it NAP+NAR
takes, each configuration at its fastest threadblock count.

Usage: ``python scripts/headroom.py DIR`` after ``nuna sweep scripts/sweeps/headroom.toml -o DIR``;
prints a Markdown table (docs/results.md, Fig 9, "Headroom").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from nuna.units import format_size

Key = tuple[str, int, int]


def headroom_rows(out_dir: Path, configs: tuple[str, str] = ("UA", "NAP+NAR")) -> list[dict[str, Any]]:
    """One row per (collective, gpus, size) that has both configurations: the floor, each
    configuration's fastest time and count, UA / floor and the share of UA's distance to the
    floor that the second configuration takes."""
    index = json.loads((out_dir / "index.json").read_text())
    floor: dict[Key, float] = {}
    best: dict[tuple[Key, str], tuple[float, int]] = {}
    for entry in index["points"]:
        if entry["status"] != "ok" or entry["point"]["config"] not in configs:
            continue
        p = entry["point"]
        res = json.loads((out_dir / entry["file"]).read_text())["result"]
        key = (p["collective"], int(p["gpus"]), int(p["size_bytes"]))
        floor[key] = min(floor.get(key, float("inf")), float(res["placement_floor_ns"]))
        have = best.get((key, p["config"]))
        if have is None or (res["time_ns"], p["tbs_per_peer"]) < have:
            best[(key, p["config"])] = (float(res["time_ns"]), int(p["tbs_per_peer"]))
    rows = []
    for key in sorted(floor):
        if (key, configs[0]) not in best or (key, configs[1]) not in best:
            continue
        (ref, ref_k), (new, new_k) = best[(key, configs[0])], best[(key, configs[1])]
        fl = floor[key]
        rows.append({"collective": key[0], "gpus": key[1], "size_bytes": key[2], "floor_ns": fl,
                     "ref_ns": ref, "ref_tbs": ref_k, "new_ns": new, "new_tbs": new_k,
                     "ref_over_floor": ref / fl, "speedup": ref / new,
                     "taken": (ref - new) / (ref - fl) if ref > fl else 0.0})
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
