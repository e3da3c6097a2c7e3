"""Benchmark of the replay loop's rate against the size of the engine state: what a scheduler
that keeps one GPU's state in cache could gain (``docs/simulator.md`` §6).

``python benchmarks/bench_scaling.py [--size BYTES]``. For pods of 2-64 GPUs (direct allgather,
one threadblock per peer, 256-byte flits, nuna-4die, UA), each in its own process after a warm-up
replay, it times ``replay_loop`` alone (set-up and statistics excluded) and prints the engine
state's size (edge, virtual-channel, packet and event-queue rows), the events popped per
flit-hop grant and the grants per CPU second of the loop. Equal pops per grant with a falling
rate means the loop waits on memory, not on more work. Each pod runs twice: with one event
queue, and with windowed scheduling (``SimOptions.windowed``: one queue per GPU, run window by
window), whose rate and collective time it prints beside.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
PODS = (2, 4, 8, 16, 32, 64)
_STATE_ROWS = ("ef", "ei", "vf", "pi", "pf", "heap", "fq")  # the rest are views or tiny


def _case(gpus: int, size: int, windowed: bool) -> dict[str, Any]:
    """Replay one pod in this process with ``replay_loop`` wrapped to time it and read its counters."""
    from nuna.plan.generate import generate
    from nuna.sim import engine, load_kernels, simulate
    from nuna.sim.replay import SimOptions
    from nuna.topology.spec import load_topology

    spec = load_topology("nuna-4die")
    options = SimOptions(windowed=windowed)
    load_kernels(spec)  # load the kernels from the cache first
    loop = engine.replay_loop
    seen: dict[str, float] = {"cpu_s": 0.0}

    def timed(net: Any, st: Any, R: Any) -> int:
        start = time.process_time()
        status = int(loop(net, st, R))
        seen["cpu_s"] += time.process_time() - start
        seen["popped"] = float(st.ctr[engine.C_POPPED])
        seen["grants"] = float(st.ctr[engine.C_EVENTS])
        seen["state_mib"] = sum(getattr(st, name).nbytes for name in _STATE_ROWS) / 2**20
        return status

    engine.replay_loop = timed  # the replay calls it through the module
    try:
        plan = generate("allgather", gpus, algo="direct", tbs_per_peer=1)
        res = simulate(plan, spec, size, packet_bytes=256, options=options)
    finally:
        engine.replay_loop = loop
    return {"gpus": gpus, "time_ns": res.time_ns, **seen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1 << 20, help="collective size in bytes (1 MiB)")
    parser.add_argument("--case", type=int, help=argparse.SUPPRESS)  # internal: one pod, print JSON
    parser.add_argument("--windowed", action="store_true", help=argparse.SUPPRESS)  # internal, with --case
    args = parser.parse_args()
    if args.size < 1:
        parser.error(f"--size must be a positive number of bytes, got {args.size}")
    if args.case:
        print(json.dumps(_case(args.case, args.size, args.windowed)))
        return
    print(f"direct allgather, {args.size} B, 1 threadblock per peer, 256-byte flits, nuna-4die, UA")
    print(f"{'GPUs':>5} {'state MiB':>10} {'Mgrants':>8} {'pops/grant':>11} {'loop cpu s':>11} "
          f"{'Mgrants/s':>10} {'windowed s':>11} {'Mgrants/s':>10} {'speed-up':>9} {'time diff':>10}")
    for gpus in PODS:
        r, w = (_run(gpus, args.size, windowed) for windowed in (False, True))
        diff = w["time_ns"] / r["time_ns"] - 1.0
        print(f"{gpus:>5} {r['state_mib']:>10.0f} {r['grants'] / 1e6:>8.2f} "
              f"{r['popped'] / r['grants']:>11.2f} {r['cpu_s']:>11.2f} {_rate(r):>10.2f} "
              f"{w['cpu_s']:>11.2f} {_rate(w):>10.2f} {r['cpu_s'] / w['cpu_s']:>8.2f}x {diff:>+10.4%}")
    print("target (issue 4): >= 3 M flit-hop events (grants) per second")


def _run(gpus: int, size: int, windowed: bool) -> dict[str, Any]:
    """One pod in a fresh process (its own memory and caches), as JSON."""
    cmd = [sys.executable, str(HERE), "--case", str(gpus), "--size", str(size)] + (["--windowed"] * windowed)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=HERE.parents[1])
    if out.returncode != 0:
        raise SystemExit(f"benchmark case {gpus} GPUs failed:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _rate(r: dict[str, Any]) -> float:
    return float(r["grants"] / r["cpu_s"] / 1e6) if r["cpu_s"] > 0 else 0.0


if __name__ == "__main__":
    main()
