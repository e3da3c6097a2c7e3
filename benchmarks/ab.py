"""A/B timing of the replay between two revisions: the before-and-after measurement every change
to the hot loop needs (``docs/simulator.md`` §6).

``python benchmarks/ab.py [--base REV] [--new REV] [--case C]...  [--rounds N] [--repeat K]``

The base (default ``HEAD``) and, when ``--new`` is given, the new revision are checked out into
temporary git worktrees; without ``--new`` the new side is this working tree, uncommitted edits
included. Each side first compiles its own engine (numba caches next to the sources, so a fresh
worktree pays the cold compile, a few minutes). Then, ``N`` rounds, each case runs in a fresh
process per side, in alternating order (base first in odd rounds), timing ``simulate`` ``K``
times after a warm-up replay. On a shared machine a run's CPU time varies by tens of percent
with the neighbours' load and only ever grows with it, so the table shows each side's best run
beside its median: a change is measured when the best runs agree with the medians. It also
says whether both sides gave the same collective time and event count (a hot-loop change
should not move them).

A case is ``collective:gpus:size:threadblocks_per_peer:packet_bytes[:windowed|:one-queue][@CONFIG]``
(direct plan, nuna-4die), for example ``allgather:64:1MiB:1:256:windowed``; without the mode
each side replays as its own default (windowed from 16 GPUs since nuna 0.5.0, only with packets
under 32 KiB since 0.7.0, one queue before 0.5.0), so name the mode when the base predates
0.5.0. Without ``@CONFIG`` the plan runs as generated (UA); with it, for example
``allgather:32:1GiB:1:auto@NAP+NAR``, each side places and routes it with its own
``nuna.passes.apply_config`` (the NAR heuristic's granularity) before the timed replays, as a
sweep point does, so a change to the passes shows in the result check. This is not a
``bench_*`` file: ``benchmarks/run.py`` does not run it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CASES = ("allgather:64:1MiB:1:256:one-queue", "allgather:64:1MiB:1:256:windowed",
                 "allgather:32:1MiB:1:256:one-queue", "allgather:8:1MiB:144:256")

# run inside each side's tree, with only the API every revision since 0.2.0 has
_RUNNER = """
import json, sys, time
from nuna.plan.generate import generate
from nuna.sim import simulate
from nuna.topology.spec import load_topology
coll, gpus, size, tbs, packet, windowed, config, repeat = json.loads(sys.argv[1])
kw = {}
if windowed is not None:  # else each side's default (older revisions have no windowed option)
    from nuna.sim.replay import SimOptions
    kw["options"] = SimOptions(windowed=windowed)
spec = load_topology("nuna-4die")
try:  # loads (or compiles) the kernels, both replay loops where they are separate
    from nuna.sim.replay import load_kernels
except ImportError:  # older revisions: a warm-up in the case's own mode
    simulate(generate("allgather", 2), spec, 4096, **kw)
else:
    load_kernels(spec)
plan = generate(coll, gpus, tbs_per_peer=tbs)
if config is not None:
    from nuna.passes import PassContext, apply_config
    plan = apply_config(plan, config, PassContext(spec, size))
cpu = []
for _ in range(repeat):
    t0 = time.process_time()
    res = simulate(plan, spec, size, packet_bytes=packet, **kw)
    cpu.append(time.process_time() - t0)
print(json.dumps({"cpu_s": cpu, "time_ns": res.time_ns, "events": res.events}))
"""


@dataclass(frozen=True)
class Case:
    collective: str
    gpus: int
    size_bytes: int
    tbs_per_peer: int
    packet_bytes: int | str
    windowed: bool | None
    config: str | None
    name: str


def parse_case(text: str) -> Case:
    """``collective:gpus:size:tbs:packet[:windowed|:one-queue][@CONFIG]`` -> :class:`Case`
    (``ValueError`` if malformed); without the mode each side replays as its simulator does by
    default, without a configuration the generated plan (UA) runs."""
    from nuna.errors import UsageError
    from nuna.passes import CONFIGS
    from nuna.units import parse_size

    body, at, config = text.partition("@")
    if at and config not in CONFIGS:
        raise ValueError(f"case {text!r}: unknown configuration {config!r} (one of {', '.join(CONFIGS)})")
    parts = body.split(":")
    if len(parts) not in (5, 6) or (len(parts) == 6 and parts[5] not in ("windowed", "one-queue")):
        raise ValueError(f"case {text!r}: expected "
                         "collective:gpus:size:tbs:packet[:windowed|:one-queue][@CONFIG]")
    coll, gpus, size, tbs, packet = parts[:5]
    try:
        pk: int | str = packet if packet == "auto" else int(packet)
        windowed = None if len(parts) == 5 else parts[5] == "windowed"
        case = Case(coll, int(gpus), parse_size(size), int(tbs), pk, windowed, config if at else None, text)
    except (ValueError, UsageError) as exc:
        raise ValueError(f"case {text!r}: {exc}") from None
    # checked here, before minutes of worktree checkout and compiling, not in the replay
    if case.gpus < 2 or case.tbs_per_peer < 1 or (pk != "auto" and int(pk) < 1):
        raise ValueError(f"case {text!r}: needs at least 2 GPUs, 1 threadblock per peer and a positive "
                         "packet size")
    return case


def summarize(samples: dict[str, list[float]]) -> dict[str, float]:
    """Best and median of each side's CPU seconds and the new side's speed-up on both (>1: faster)."""
    base, new = samples["base"], samples["new"]
    out = {"base_best": min(base), "base_median": statistics.median(base),
           "new_best": min(new), "new_median": statistics.median(new)}
    out["speedup_best"] = out["base_best"] / out["new_best"]
    out["speedup_median"] = out["base_median"] / out["new_median"]
    return out


def _run(tree: Path, case: Case, repeat: int) -> dict[str, Any]:
    args = [case.collective, case.gpus, case.size_bytes, case.tbs_per_peer, case.packet_bytes, case.windowed,
            case.config, repeat]
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(args)], cwd=tree, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"ab.py: case {case.name} failed in {tree}: {tail[0]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _worktree(rev: str, into: Path) -> Path:
    path = into / rev.replace("/", "_")
    proc = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"ab.py: cannot check out {rev!r}: {proc.stderr.strip().splitlines()[-1:]}")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="HEAD", help="revision to compare against (default HEAD)")
    ap.add_argument("--new", help="revision to measure (default: this working tree)")
    ap.add_argument("--case", action="append",
                    help="collective:gpus:size:tbs:packet[:windowed|:one-queue][@CONFIG] (repeatable)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--repeat", type=int, default=2, help="timed replays per process (default 2)")
    args = ap.parse_args()
    try:
        cases = [parse_case(c) for c in (args.case or DEFAULT_CASES)]
    except ValueError as exc:
        raise SystemExit(f"ab.py: {exc}") from None
    if args.rounds < 1 or args.repeat < 1:
        raise SystemExit("ab.py: --rounds and --repeat must be at least 1")
    # a SIGTERM (timeout, a batch system) unwinds like Ctrl-C, so the worktrees are removed
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="nuna-ab-") as tmp:
        made: list[Path] = []
        try:
            trees = {"base": _worktree(args.base, Path(tmp))}
            made.append(trees["base"])
            if args.new:
                trees["new"] = _worktree(args.new, Path(tmp))
                made.append(trees["new"])
            else:
                trees["new"] = ROOT
            print(f"base {args.base} ({trees['base']}), new {args.new or 'working tree'} ({trees['new']})",
                  flush=True)
            for side, tree in trees.items():  # compile (or load) each side's kernels before timing
                _run(tree, parse_case("allgather:2:64KiB:1:256"), 1)
                print(f"{side}: kernels ready", flush=True)
            samples: dict[str, dict[str, list[float]]] = {c.name: {"base": [], "new": []} for c in cases}
            results: dict[str, dict[str, set[tuple[float, int]]]] = {c.name: {"base": set(), "new": set()}
                                                                      for c in cases}
            for r in range(args.rounds):
                order = ("base", "new") if r % 2 == 0 else ("new", "base")
                for case in cases:
                    for side in order:
                        out = _run(trees[side], case, args.repeat)
                        samples[case.name][side].extend(out["cpu_s"])
                        results[case.name][side].add((out["time_ns"], out["events"]))
                print(f"round {r + 1}/{args.rounds} done", flush=True)
        finally:
            for path in made:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                               capture_output=True, check=False)
    print(f"\nCPU s of simulate, {args.rounds} rounds x {args.repeat} replays per side; "
          "speed-up = base / new")
    print(f"{'case':<36} {'base best':>9} {'median':>7} {'new best':>9} {'median':>7} {'speed-up best':>13} "
          f"{'median':>7}  same result")
    for case in cases:
        s = summarize(samples[case.name])
        same = results[case.name]["base"] == results[case.name]["new"] and len(results[case.name]["new"]) == 1
        print(f"{case.name:<36} {s['base_best']:9.2f} {s['base_median']:7.2f} {s['new_best']:9.2f} "
              f"{s['new_median']:7.2f} {s['speedup_best']:12.2f}x {s['speedup_median']:6.2f}x  "
              f"{'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
