"""Tabulate a sweep's headroom: per (topology, collective, pod, size), UA's distance to the
placement floor (``placement_floor_ns``: what no placement or routing can beat) and the share of
it NAP+NAR takes, each configuration at its fastest threadblock count.

Usage: ``python scripts/headroom.py DIR`` after ``nuna sweep scripts/sweeps/headroom.toml -o DIR``;
prints a Markdown table (docs/results.md, Fig 9, "Headroom"). ``--recompute-floors`` computes the
floors with this nuna instead of reading them (results of nuna before 0.5.1, e.g. a Fig 9 sweep:
``python scripts/headroom.py out/figures/sweeps/fig9 --recompute-floors``). A sweep over several
topologies (or other settings: packet size, NAR granularity, ...) gets a column for each setting
its rows differ in, one row per point.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nuna.errors import InputError, NunaError
from nuna.experiments.figures import TbsChoice, best_tbs_per_peer, lowest_floors, point_key
from nuna.experiments.spec import canonical_json, recorded_plan_file, recorded_topology_file
from nuna.experiments.store import load_results
from nuna.plan.generate import generate
from nuna.plan.xml import load
from nuna.sim import SimOptions, placement_bounds
from nuna.text import one_line
from nuna.topology.spec import load_topology
from nuna.units import format_size

#: point fields that every row shows (the others get a column when the rows differ in them)
_SHOWN = ("collective", "gpus", "size_bytes")
#: fields in which the records of one row differ: the configuration, its NAR granularity
#: (a column of its own when it varies) and the threadblock count (the fastest is taken)
_VARIANTS = ("config", "nar_granularity", "tbs_per_peer")
#: column titles of the point fields a sweep may vary besides the shown ones
_TITLES = {"topology": "topology", "algo": "algo", "packet_bytes": "packet", "max_packet_bytes": "packet cap",
           "gemm_bytes": "GEMM", "seed": "seed", "windowed": "windowed", "fast_forward": "fast-forward",
           "line_setups": "line set-ups", "reduce_fusion": "re fusion"}
_SIZES = ("packet_bytes", "max_packet_bytes", "gemm_bytes")


def floor_now(point: dict[str, Any], topology: str | None = None, plan_file: str | None = None) -> float:
    """The placement floor of a sweep point computed by this nuna, without a replay (the floor
    does not depend on the configuration, so the point's plan is taken as generated, or as its
    plan file holds it). ``topology`` and ``plan_file``: where to load the point's topology and
    plan file from (a record names a file by its file name only:
    :func:`nuna.experiments.spec.recorded_topology_file`, ``recorded_plan_file``)."""
    if point.get("plan") is not None:
        plan = load(plan_file or point["plan"])
    else:
        plan = generate(point["collective"], int(point["gpus"]), algo=point["algo"],
                        tbs_per_peer=int(point["tbs_per_peer"]))
    # (a sweep without re fusion has other steps, so another floor)
    options = SimOptions(reduce_fusion=point.get("reduce_fusion") is not False)
    return placement_bounds(plan, load_topology(topology or point["topology"]), int(point["size_bytes"]),
                            packet_bytes=point["packet_bytes"], options=options)[1]


def headroom_rows(out_dir: Path, configs: tuple[str, str] = ("UA", "NAP+NAR"),
                  recompute: bool = False, topology_dirs: tuple[Path, ...] = (Path("."),)
                  ) -> list[dict[str, Any]]:
    """One row per point that has both configurations (a point: every input but the
    configuration, its NAR granularity and the threadblock count; so topology, collective, gpus,
    size, packet settings, ... and, when the sweep runs several, the NAR granularity of each
    configuration): the floor (the lowest over every threadblock count run: the floor of a plan
    counts its steps' sizes), each configuration at its fastest threadblock count
    (``best_tbs_per_peer``, as the figures pick it), UA / floor and the share of UA's distance
    to the floor that the second takes. ``inputs`` holds the point's fields (the topology as
    the records name it), ``ref_nar_granularity`` and ``new_nar_granularity`` each
    configuration's. Rows come in the sweep's topology order, then by collective, pod and size.
    ``recompute``: each point's floor from :func:`floor_now` instead of its result (for results
    of a nuna whose floor was looser, before 0.5.1; a topology file is looked for in
    ``topology_dirs``). ``InputError`` for results that carry no floor without ``recompute``."""
    records = [r for r in load_results(out_dir) if r["point"]["config"] in configs]
    computed: dict[str, float] = {}  # the configurations of a point at one count share its floor

    def recomputed(record: Mapping[str, Any]) -> float:
        point = record["point"]
        inputs = canonical_json({k: v for k, v in point.items() if k not in ("config", "nar_granularity")})
        if inputs not in computed:
            try:
                topology = recorded_topology_file(record, topology_dirs)
                plan_file = recorded_plan_file(record, topology_dirs)
            except InputError as err:
                raise InputError(f"{err} (pass the folder that holds it with --topology-dir)") from None
            computed[inputs] = floor_now(point, topology, plan_file)
        return computed[inputs]

    floor = lowest_floors(records, recomputed if recompute else None)
    # per point (every field but _VARIANTS, so the topology too), each configuration's choices:
    # one per NAR granularity run
    points: dict[str, dict[str, list[TbsChoice]]] = {}
    for choice in best_tbs_per_peer(records):
        point = choice.record["point"]
        points.setdefault(point_key(point), {}).setdefault(point["config"], []).append(choice)
    rows = []
    for key, by_config in points.items():
        refs, news = by_config.get(configs[0], []), by_config.get(configs[1], [])
        if not refs or not news:
            continue
        if key not in floor:
            raise InputError(f"{out_dir}: result {refs[0].record['id']} holds no placement floor "
                             "(a result of nuna before 0.5.1?): run with --recompute-floors")
        fl = floor[key]
        for ref in refs:
            for new in news:
                p = ref.record["point"]
                rows.append({"topology": p["topology"], "collective": p["collective"], "gpus": int(p["gpus"]),
                             "size_bytes": int(p["size_bytes"]),
                             "inputs": {k: v for k, v in p.items() if k not in _VARIANTS},
                             "ref_nar_granularity": p["nar_granularity"],
                             "new_nar_granularity": new.record["point"]["nar_granularity"],
                             "floor_ns": fl, "ref_ns": ref.time_ns,
                             "ref_tbs": ref.tbs_per_peer, "new_ns": new.time_ns, "new_tbs": new.tbs_per_peer,
                             "ref_over_floor": ref.time_ns / fl,
                             "speedup": ref.time_ns / new.time_ns,
                             "taken": ((ref.time_ns - new.time_ns) / (ref.time_ns - fl)
                                       if ref.time_ns > fl else 0.0)})
    # the topologies in the sweep's order (load_results keeps it), the rest of a point's
    # settings in the order they were first met, after the shown fields
    topologies: dict[str, int] = {}
    settings: dict[str, int] = {}
    for r in rows:
        topologies.setdefault(r["topology"], len(topologies))
        settings.setdefault(_settings(r), len(settings))
    return sorted(rows, key=lambda r: (topologies[r["topology"]], r["collective"], r["gpus"], r["size_bytes"],
                                       settings[_settings(r)]))


def _settings(row: Mapping[str, Any]) -> str:
    return canonical_json([{k: v for k, v in row["inputs"].items() if k not in (*_SHOWN, "topology")},
                           row["ref_nar_granularity"], row["new_nar_granularity"]])


def _value(field: str, value: Any) -> str:
    if value is None:
        return "-"
    if field in _SIZES and isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return format_size(value)
    return one_line(str(value)).replace("|", "\\|")


def table(rows: Sequence[Mapping[str, Any]], configs: tuple[str, str] = ("UA", "NAP+NAR")) -> list[str]:
    """:func:`headroom_rows` as a Markdown table: a leading ``topology`` column when the rows
    hold more than one topology, a column after the pod for each other setting the rows differ
    in (packet size, NAR granularity, ...); a sweep of one topology and one setting gets the
    table of docs/results.md."""
    def varies(get: Any) -> bool:
        return len({canonical_json(get(r)) for r in rows}) > 1

    fields = sorted({k for r in rows for k in r["inputs"]} - {*_SHOWN, "topology"},
                    key=lambda k: (list(_TITLES).index(k) if k in _TITLES else len(_TITLES), k))
    extra: list[tuple[str, Any]] = [
        (_TITLES.get(k, k), lambda r, k=k: _value(k, r["inputs"].get(k)))
        for k in fields if varies(lambda r, k=k: r["inputs"].get(k))]
    for side, config in (("ref", configs[0]), ("new", configs[1])):
        if varies(lambda r, side=side: r[f"{side}_nar_granularity"]):
            extra.append((f"{config} G", lambda r, side=side: _value("", r[f"{side}_nar_granularity"])))
    lead: list[tuple[str, Any]] = []
    if varies(lambda r: r["topology"]):
        lead.append(("topology", lambda r: _value("topology", r["topology"])))
    ref, new = configs
    titles = ([t for t, _ in lead] + ["collective", "size", "GPUs"] + [t for t, _ in extra]
              + ["floor (us)", f"{ref} best (us) [K]", f"{ref} / floor", f"{new} best [K]",
                 f"{new} over {ref}", "headroom taken"])
    lines = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
    for r in rows:
        cells = ([get(r) for _, get in lead]
                 + [r["collective"], format_size(r["size_bytes"]), str(r["gpus"])]
                 + [get(r) for _, get in extra]
                 + [f"{r['floor_ns'] / 1000:.3f}", f"{r['ref_ns'] / 1000:.3f}{_count(r['ref_tbs'])}",
                    f"{r['ref_over_floor']:.2f}x", f"{r['new_ns'] / 1000:.3f}{_count(r['new_tbs'])}",
                    f"{r['speedup']:.2f}x", f"{r['taken'] * 100:.0f}%"])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _count(tbs_per_peer: int) -> str:
    """`` [K]``, or nothing for a plan file's point: its threadblocks are the plan's own (0)."""
    return f" [{tbs_per_peer}]" if tbs_per_peer else ""


def _main(args: argparse.Namespace) -> None:
    configs = ("UA", "NAP+NAR")
    rows = headroom_rows(args.dir, configs, recompute=args.recompute_floors,
                         topology_dirs=tuple(args.topology_dir or [Path(".")]))
    if not rows:
        raise InputError(f"{args.dir}: no point has results of both {configs[0]} and {configs[1]} "
                         "(an unfinished sweep, or one without these configurations?)")
    # the whole table is computed before anything is printed: an error leaves no half table
    print("\n".join(table(rows, configs)))
    sys.stdout.flush()  # a closed pipe (| head) is met here, where main handles it


def main() -> None:
    # the docstring's first paragraph (its first line alone stopped mid-sentence)
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("dir", type=Path, help="a sweep's output directory")
    parser.add_argument("--recompute-floors", action="store_true",
                        help="compute each point's floor with this nuna (no replay) instead of "
                             "reading it from the result: for results of nuna before 0.5.1")
    parser.add_argument("--topology-dir", type=Path, action="append", default=None,
                        help="where the sweep's topology files are, for --recompute-floors (results name "
                             "them by file name; repeatable; default: the current folder)")
    args = parser.parse_args()
    if args.topology_dir and not args.recompute_floors:  # it would be ignored
        parser.error("--topology-dir is for --recompute-floors (the results hold their floors)")
    for folder in args.topology_dir or ():
        if not folder.is_dir():
            parser.error(f"--topology-dir {one_line(str(folder))}: not a folder")
    # bad input is one line on stderr, as the nuna command prints it, never a traceback
    prog = parser.prog
    try:
        _main(args)
    except NunaError as err:
        sys.exit(f"{prog}: error: {one_line(str(err))}")
    except BrokenPipeError:  # the reader stopped early (| head): nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        sys.exit(1)
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        message = reason if err.filename is None else f"{reason}: {err.filename}"
        sys.exit(f"{prog}: error: {one_line(message)}")
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as err:  # a bug (or a results folder of another shape): one line unless asked
        if os.environ.get("NUNA_DEBUG"):
            raise
        print(f"{prog}: internal error: {type(err).__name__}: {one_line(str(err))} "
              "(set NUNA_DEBUG=1 for a traceback)", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
