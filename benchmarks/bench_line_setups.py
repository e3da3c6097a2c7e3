"""Error of packets against 256-byte flits under each head set-up rule (``SimOptions.line_setups``,
docs/simulator.md §5, "Head set-ups per line"), and the NAP+NAR-over-UA speedups they give.

``python benchmarks/bench_line_setups.py [--rules one,series,overlap] [--case NAME]...
[--flits] [--set SECTION.KEY=VALUE ...] [--move-cu FROM:TO ...] [--waits] [--ports]`` (about 10
minutes for every case and rule on a 2-core machine, one process per case). ``--set`` replays on
nuna-4die with a parameter changed (an ablation: ``--set router.vc_buffer_flits=32``; it replays
the flits too, as the stored flit times are nuna-4die's); ``--move-cu FROM:TO`` is a placement
ablation: the threadblocks the configuration puts on CU ``FROM`` run on CU ``TO`` instead, on
every GPU (the flits replay too); ``--waits`` prints each replay's mean head wait per wait class
(``queueing_ns`` of ``nuna simulate --json``) and ``--ports`` where its heads waited longest:
the port link (``SimResult.longest_port_wait``), how many receiving ports made a head wait to
enter the mesh, and the chip link. Each case is a direct plan placed as the
sweeps place it (``apply_config``) and replayed with forced packet sizes or ``auto``. The
flits' times are the measured ones of docs/simulator.md §5 (2026-12-02 and -04, nuna
0.6.0-0.8.0, whose flit replays 0.9.0 keeps to the digit); ``--flits`` replays them again
instead (the 64-GPU ones take 12-17 minutes each).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nuna.plan.ir import Plan
    from nuna.topology.spec import TopologySpec

MIB = 1 << 20
# name: (collective, GPUs, size, threadblocks per peer, packet bytes, configuration, flits' us)
CASES: dict[str, tuple[str, int, int, int, int | str, str, float]] = {
    "ag2-512MB-16tb-auto": ("allgather", 2, 512_000_000, 16, "auto", "UA", 275.26),
    "ag8-32MB-1KiB": ("allgather", 8, 32_000_000, 1, 1024, "UA", 48.63),
    "ag8-32MB-4KiB": ("allgather", 8, 32_000_000, 1, 4096, "UA", 48.63),
    "ag2-256MB-16tb-1KiB": ("allgather", 2, 256_000_000, 16, 1024, "UA", 135.50),
    "ag2-256MB-16tb-4KiB": ("allgather", 2, 256_000_000, 16, 4096, "UA", 135.50),
    "ag16-4MB-nap-1KiB": ("allgather", 16, 4_000_000, 1, 1024, "NAP+NAR", 7.58),
    "ag16-4MB-nap-2KiB": ("allgather", 16, 4_000_000, 1, 2048, "NAP+NAR", 7.58),
    "ag16-4MB-nap-4KiB": ("allgather", 16, 4_000_000, 1, 4096, "NAP+NAR", 7.58),
    "ag2-64MB-4KiB": ("allgather", 2, 64_000_000, 1, 4096, "UA", 360.11),
    "ag8-100MiB-2KiB-ua": ("allgather", 8, 100 * MIB, 1, 2048, "UA", 154.65),
    "ag8-100MiB-2KiB-nap": ("allgather", 8, 100 * MIB, 1, 2048, "NAP+NAR", 178.35),
    "ag8-100MiB-8KiB-ua": ("allgather", 8, 100 * MIB, 1, 8192, "UA", 154.65),
    "ag64-100MiB-auto-ua": ("allgather", 64, 100 * MIB, 1, "auto", "UA", 152.26),
    "ag64-100MiB-auto-nap": ("allgather", 64, 100 * MIB, 1, "auto", "NAP+NAR", 154.17),
    "ag8-100MiB-auto-ua": ("allgather", 8, 100 * MIB, 1, "auto", "UA", 154.65),
    "ag8-100MiB-auto-nap": ("allgather", 8, 100 * MIB, 1, "auto", "NAP+NAR", 178.35),
    "a2a8-100MiB-auto-ua": ("alltoall", 8, 100 * MIB, 1, "auto", "UA", 281.37),
    "a2a8-100MiB-auto-nap": ("alltoall", 8, 100 * MIB, 1, "auto", "NAP+NAR", 299.06),
}
RULES = ("one", "series", "overlap")


def topology(sets: list[str]) -> Any:
    """nuna-4die with each ``SECTION.KEY=VALUE`` of ``sets`` set (``nuna.topology.spec``'s
    overrides, as ``nuna simulate --set``: the parser checks a changed value as it checks a
    file's); ``SystemExit`` naming the problem."""
    from nuna.errors import NunaError
    from nuna.topology.spec import load_topology, parse_overrides

    try:
        return load_topology("nuna-4die", parse_overrides(sets))
    except NunaError as exc:
        raise SystemExit(f"--set: {exc}") from None


def parse_moves(items: list[str], cus: int) -> dict[int, int]:
    """``--move-cu`` values (``FROM:TO``, CU indices of a chip with ``cus`` CUs) as a map."""
    moves: dict[int, int] = {}
    for item in items:
        src, sep, dst = item.partition(":")
        if not (sep and src.isdigit() and dst.isdigit()):
            raise SystemExit(f"--move-cu {item}: expected FROM:TO, two CU indices")
        a, b = int(src), int(dst)
        if a >= cus or b >= cus:
            raise SystemExit(f"--move-cu {item}: the chip has CUs 0-{cus - 1}")
        if a in moves:
            raise SystemExit(f"--move-cu {item}: CU {a} is moved twice")
        moves[a] = b
    return moves


def move_threadblocks(plan: Plan, spec: TopologySpec, moves: dict[int, int]) -> tuple[Plan, int]:
    """``plan`` with every threadblock placed on a CU ``a`` of ``moves`` (its own placement, or the
    baseline's where it has none) placed on ``moves[a]``, on every GPU; and how many moved. The
    other threadblocks keep their CUs, written out, and the chunks and NAR keep theirs."""
    from nuna.plan.ir import TbPlacement
    from nuna.sim.layout import placed_cus

    cus = placed_cus(plan, spec)
    placed = tuple(TbPlacement(g, tb, moves.get(cu, cu)) for (g, tb), cu in sorted(cus.items()))
    moved = sum(cu in moves for cu in cus.values())
    return replace(plan, placement=replace(plan.placement, threadblocks=placed)), moved


def _run(name: str, rule: str, sets: list[str], moves: dict[int, int]) -> dict[str, Any]:
    """One replay in this process: ``rule`` names a head set-up rule, or ``flits``."""
    from nuna.passes import PassContext, apply_config
    from nuna.plan.generate import generate
    from nuna.sim import SimOptions, simulate
    from nuna.sim.result import PORT_WAIT_CLASSES
    coll, gpus, size, tbs, packet, config, _ = CASES[name]
    spec = topology(sets)
    plan = generate(coll, gpus, algo="direct", tbs_per_peer=tbs)
    plan = apply_config(plan, config, PassContext(spec, size))
    plan, moved = move_threadblocks(plan, spec, moves) if moves else (plan, 0)
    cpu0 = time.process_time()
    if rule == "flits":
        res = simulate(plan, spec, size, packet_bytes=256)
    else:
        res = simulate(plan, spec, size, packet_bytes=packet if isinstance(packet, int) else "auto",
                       options=SimOptions(line_setups=rule))
    cpu = time.process_time() - cpu0
    link = max(res.chip_links, key=lambda c: c.queueing_ns_mean)
    into_mesh = res.port_queueing_ns_mean[:, :, PORT_WAIT_CLASSES.index("port_to_mesh")]
    return {"time_us": res.time_ns / 1000.0, "packet_bytes": res.packet_bytes, "events": res.events,
            "cpu_s": cpu, "waits_ns": {k: v["mean"] for k, v in res.queueing.items() if v["grants"]},
            "longest_port_wait": res.longest_port_wait(),
            "ports_waited_into_mesh": [int((into_mesh > 0).sum()), int(into_mesh.size)],
            "longest_link_wait": [link.src, link.dst, link.queueing_ns_mean], "moved": moved}


def _spawn(name: str, rule: str, sets: list[str], moves: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--run", name, rule, *(f"--set={s}" for s in sets),
                          *(f"--move-cu={m}" for m in moves)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name} {rule}: {(out.stderr.strip().splitlines() or ['failed'])[-1]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _waits(name: str, rule: str, r: dict[str, Any]) -> str:
    cells = " ".join(f"{k} {v:.2f}" for k, v in r["waits_ns"].items())
    return f"  waits {name} {rule} (ns per grant): {cells}"


def _ports(name: str, rule: str, r: dict[str, Any]) -> str:
    """Where a replay's heads waited longest: at which port link, how many receiving ports made
    any head wait to enter the mesh, and on which chip link (means per packet)."""
    hot = r["longest_port_wait"]
    port = "none" if hot is None else f"{hot[3]:.1f} ns (GPU {hot[0]} port {hot[1]}, {hot[2]})"
    waited, ports = r["ports_waited_into_mesh"]
    src, dst, wait_ns = r["longest_link_wait"]
    return (f"  ports {name} {rule}: longest port wait {port}; {waited}/{ports} receiving ports "
            f"with a wait into the mesh; longest chip-link wait {wait_ns:.1f} ns {src} -> {dst}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", default=",".join(RULES), help="comma-separated rules (default: all)")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="cases (default: all)")
    parser.add_argument("--flits", action="store_true",
                        help="replay the flits too, not the stored times (implied by --set)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="replay on nuna-4die with this parameter changed (repeatable)")
    parser.add_argument("--move-cu", action="append", default=[], metavar="FROM:TO",
                        help="run the threadblocks placed on CU FROM on CU TO, every GPU (repeatable)")
    parser.add_argument("--waits", action="store_true", help="print each replay's mean waits per class")
    parser.add_argument("--ports", action="store_true",
                        help="print where each replay's heads waited longest (port link, chip link)")
    parser.add_argument("--run", nargs=2, help=argparse.SUPPRESS)  # internal: one replay, print JSON
    args = parser.parse_args()
    from nuna.topology.spec import load_topology

    moves = parse_moves(args.move_cu, load_topology("nuna-4die").chip.cus)
    if args.run:
        print(json.dumps(_run(args.run[0], args.run[1], args.set, moves)))
        return
    if args.set:  # a bad key or value fails here, before any replay
        topology(args.set)
    rules = [r for r in args.rules.split(",") if r]
    if unknown := sorted(set(rules) - set(RULES)):
        parser.error(f"unknown rule {', '.join(unknown)} (choose from {', '.join(RULES)})")
    names = args.case or list(CASES)
    print(f"{'case':<22} {'packet':>7} {'flits us':>9} " + " ".join(f"{r:>9}" for r in rules))
    times: dict[tuple[str, str], float] = {}
    for name in names:
        notes: list[str] = []
        ports: list[str] = []
        if args.flits or args.set or moves:  # the stored flit times are nuna-4die's own
            r = _spawn(name, "flits", args.set, args.move_cu)
            flits = r["time_us"]
            notes.append(_waits(name, "flits", r))
            ports.append(_ports(name, "flits", r))
        else:
            flits = CASES[name][6]
        times[name, "flits"] = flits
        cells, packet = [], 0
        for rule in rules:
            r = _spawn(name, rule, args.set, args.move_cu)
            times[name, rule] = r["time_us"]
            packet = r["packet_bytes"]
            cells.append(f"{(r['time_us'] / flits - 1) * 100:+8.2f}%")
            notes.append(_waits(name, rule, r))
            ports.append(_ports(name, rule, r))
        print(f"{name:<22} {packet:>7} {flits:9.2f} " + " ".join(cells), flush=True)
        if moves:
            print(f"  moved {name}: {r['moved']} threadblocks ({', '.join(args.move_cu)})", flush=True)
        if args.waits:
            print("\n".join(notes), flush=True)
        if args.ports:
            print("\n".join(ports), flush=True)
    pairs = [(n, n[:-2] + "nap") for n in names if n.endswith("-ua") and n[:-2] + "nap" in names]
    for ua, nap in pairs:
        speedups = ", ".join(f"{r} {times[ua, r] / times[nap, r]:.3f}x" for r in ("flits", *rules))
        print(f"NAP+NAR over UA, {ua[:-3]}: {speedups}")


if __name__ == "__main__":
    main()
