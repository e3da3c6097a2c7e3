"""Benchmark of the replay: the speed targets of issue 4, numba compile times, peak memory, the
paper's Fig 10a case and the error of larger packets against 256-byte flits.

``python benchmarks/bench_sim.py [--quick]``. Every case runs in its own Python process, so its
peak memory (``resource.getrusage``) is its own. Cases (direct allgather, nuna-4die, baseline
placement):

- compile: the replay kernels compiled from scratch (an empty numba cache) and loaded from it,
  in a process with Python's default garbage-collector thresholds (a script calling the
  library) and with those the ``nuna`` command sets (``nuna.process.tune_gc``: numba's compile
  builds many objects, and the default collector takes a large part of it);
- 8 GPUs, 1 MB, 1,008 threadblocks per GPU, 256-byte flits (target <= 2 s);
- 64 GPUs, 1 MB, 256-byte flits (target <= 20 s);
- 64 GPUs, 1 GB, ``--packet-bytes auto`` (target <= 120 s);
- both 64-GPU cases run as the simulator's default does (``SimOptions.windowed``: the 1 MB case
  windowed, one event queue per GPU, its GPUs' windows on every core; the 1 GB case, whose
  packets are 64 KiB, with one queue for the pod) and again in the other mode; the windowed 1 MB
  case also on one thread (``SimOptions.threads``), as a sweep's worker runs it;
- error of ``auto`` and of forced packet sizes against 256-byte flits where both run (rows
  ``+one`` / ``+series``: with the other head set-up rules, ``SimOptions.line_setups``, against
  the default ``overlap``; ``+credit1``: one flit of credit per packet on entering a buffer,
  ``SimOptions.packet_credit_lines = 1``, the rule of nuna <= 0.15.0, against the default two);
  ``--large`` adds the largest case measured against flits: 64 GPUs, 100 MiB, one threadblock
  per peer, under UA and NAP+NAR (about half an hour: the flits take 1.6-1.7 G events each);
- ``--spread`` runs only the first error case (2 GPUs, 16 threadblocks per peer) at six sizes from
  480 MB to 540 MB and prints ``auto``'s error at each and its range, beside that of ``auto``
  with one flit of credit per packet (nuna <= 0.15.0): the flits' hot spot at an
  I/O port forms to a different degree at each size, so the error at one size is one sample.

Wall time is what a user waits; CPU time is shown too because the machine may be shared, and
events per CPU second (the engine's efficiency) beside events per wall second (what a user gets
from the machine's cores). The CPU time's system part is shown apart, with events per user-mode
second: on the virtual machines nuna is measured on, a process's first touch of each page of
memory waits for the host (about 3 s per GiB, docs/simulator.md §6), which a replay of 0.5 GB
pays in full when its machine's memory was last used long ago and hardly at all right after
another replay, so the system part varies between runs where the user part does not. Events per
wall second of the compiled event loop alone (``SimResult.loop_s``) are shown last: the engine's
own rate, without building the jobs before the loop and the result after it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def _case(name: str, gpus: int, size: int, tbs: int, packet: str,
          windowed: bool | None = None, config: str | None = None,
          fast_forward: bool = False, threads: int | None = None,
          line_setups: str = "overlap", credit_lines: int | None = None) -> dict[str, Any]:
    """Run one replay in this process and return its figures."""
    import resource

    from nuna.passes import PassContext, apply_config
    from nuna.plan.generate import generate
    from nuna.sim import SimOptions, load_kernels, simulate
    from nuna.sim.fastforward import FastForward
    from nuna.topology.spec import load_topology

    spec = load_topology("nuna-4die")
    options = SimOptions(windowed=windowed, fast_forward=FastForward() if fast_forward else None,
                         threads=threads, line_setups=line_setups)
    if credit_lines is not None:
        options = dataclasses.replace(options, packet_credit_lines=credit_lines)
    plan = generate("allgather", gpus, algo="direct", tbs_per_peer=tbs)
    if config is not None:
        plan = apply_config(plan, config, PassContext(spec, size))
    load_kernels(spec)  # both replay loops from numba's cache: start-up is reported separately
    wall0, cpu0 = time.perf_counter(), time.process_time()
    use0 = resource.getrusage(resource.RUSAGE_SELF)
    packet_bytes = packet if packet == "auto" else int(packet)
    res = simulate(plan, spec, size, packet_bytes=packet_bytes, options=options)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    use1 = resource.getrusage(resource.RUSAGE_SELF)
    # the kernel's share: mostly the first touch of the replay's memory (docs/simulator.md §6)
    system = use1.ru_stime - use0.ru_stime
    lat = res.remote_store_latency
    return {"case": name, "wall_s": wall, "cpu_s": cpu, "system_s": system, "events": res.events,
            "events_per_cpu_s": res.events / cpu if cpu > 0 else 0.0,
            "events_per_user_s": res.events / (cpu - system) if cpu > system else 0.0,
            "events_per_wall_s": res.events / wall if wall > 0 else 0.0, "loop_s": res.loop_s,
            "events_per_loop_s": res.events / res.loop_s if res.loop_s > 0 else 0.0, "jobs": res.jobs,
            "packet_bytes": res.packet_bytes, "time_ns": res.time_ns, "lower_bound_ns": res.lower_bound_ns,
            "busbw_gbps": res.busbw_gbps, "latency_mean_ns": lat.mean_ns, "latency_p99_ns": lat.p99_ns,
            "latency_max_ns": lat.max_ns,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def _compile_probe(as_command: bool) -> dict[str, Any]:
    """First replays of a process: compile (or load) the kernels, then time tiny runs, one of
    each replay loop (one queue, windowed: two entry points) and a NoC run; ``as_command``: with
    the collector thresholds of the ``nuna`` command."""
    t0 = time.perf_counter()
    if as_command:
        from nuna.process import tune_gc

        tune_gc()
    from nuna.sim import load_kernels, run_noc
    from nuna.topology.spec import load_topology

    load_kernels(load_topology("nuna-4die"))
    run_noc(4, 4, "uniform", 0.1, 1, cycles=200)
    return {"case": "compile", "wall_s": time.perf_counter() - t0}


def _spawn(args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(HERE), *args], capture_output=True, text=True, check=False,
                         env=env, cwd=HERE.parents[1])
    if out.returncode != 0:
        raise SystemExit(f"benchmark case {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(r: dict[str, Any], target: float | None = None) -> str:
    verdict = "" if target is None else (" met" if r["wall_s"] <= target else " NOT met")
    goal = f"<= {target:.0f} s{verdict}" if target is not None else ""
    return (f"{r['case']:<34} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {r['system_s']:6.2f} "
            f"{r['events'] / 1e6:8.2f} "
            f"{r['events_per_cpu_s'] / 1e6:7.2f} {r['events_per_user_s'] / 1e6:7.2f} "
            f"{r['events_per_wall_s'] / 1e6:7.2f} {r['events_per_loop_s'] / 1e6:7.2f} {r['peak_mib']:8.0f} "
            f"{r['packet_bytes']:7d} "
            f"{r['time_ns'] / 1000:10.2f} {r['busbw_gbps']:7.1f}  {goal}")


#: sizes around the error sweep's first case (2 GPUs, 16 threadblocks per peer, 512 MB), at which
#: the flits' hot spot at port 0 forms to different degrees (docs/simulator.md §5, "other sizes")
SPREAD_SIZES = (480_000_000, 500_000_000, 512_000_000, 520_000_000, 512 << 20, 540_000_000)


def _error_pct(r: dict[str, Any], ref: dict[str, Any]) -> float:
    """Case ``r``'s collective time against the flits' (``ref``), in percent."""
    return (r["time_ns"] - ref["time_ns"]) / ref["time_ns"] * 100


def _spread() -> None:
    print("auto against 256-byte flits over sizes: 2 GPUs, 16 tbs/peer (credit1: auto with one flit of "
          "credit per packet, nuna <= 0.15.0)")
    print(f"{'size B':>12} {'flits us':>10} {'auto us':>10} {'packet':>7} {'error':>8} {'credit1 us':>10} "
          f"{'error':>8}")
    _spawn(["--case", "warmup:2:65536:1:256"])
    errors: list[float] = []
    olds: list[float] = []
    for size in SPREAD_SIZES:
        ref = _spawn(["--case", f"spread:2:{size}:16:256"])
        r = _spawn(["--case", f"spread:2:{size}:16:auto"])
        old = _spawn(["--case", f"spread:2:{size}:16:auto:credit1"])
        errors.append(_error_pct(r, ref))
        olds.append(_error_pct(old, ref))
        print(f"{size:>12} {ref['time_ns'] / 1000:10.2f} {r['time_ns'] / 1000:10.2f} {r['packet_bytes']:7d} "
              f"{errors[-1]:+7.2f}% {old['time_ns'] / 1000:10.2f} {olds[-1]:+7.2f}%")
    for name, errs in (("auto", errors), ("auto with one flit of credit", olds)):
        mean = sum(errs) / len(errs)
        mean_abs = sum(abs(e) for e in errs) / len(errs)
        print(f"{name}'s error from {min(errs):+.2f}% to {max(errs):+.2f}%, mean {mean:+.2f}%, "
              f"mean |error| {mean_abs:.2f}% (target: within 2%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the 1 GB case and the error sweep")
    parser.add_argument("--large", action="store_true",
                        help="also measure auto against flits at 64 GPUs, 100 MiB (about 30 min)")
    parser.add_argument("--spread", action="store_true",
                        help="only auto's error on the 2-GPU case at six sizes around 512 MB (about 4 min)")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case, print JSON
    args = parser.parse_args()
    if args.case:
        if args.case in ("compile", "compile-command"):
            print(json.dumps(_compile_probe(args.case == "compile-command")))
        else:
            name, gpus, size, tbs, packet, *flags = args.case.split(":")
            windowed = True if "windowed" in flags else False if "one-queue" in flags else None
            config = next((f.removeprefix("config=") for f in flags if f.startswith("config=")), None)
            threads = next((int(f.removeprefix("threads=")) for f in flags if f.startswith("threads=")), None)
            credit = next((int(f.removeprefix("credit")) for f in flags if f.startswith("credit")), None)
            print(json.dumps(_case(name, int(gpus), int(size), int(tbs), packet, windowed, config,
                                   "ff" in flags, threads,
                                   next((f for f in flags if f in ("one", "series")), "overlap"), credit)))
        return
    if args.spread:
        _spread()
        return

    # said first: the probe prints nothing for minutes (a helper took the silence for a hang)
    print("compiling numba's kernels from scratch twice, to time it (about 4 minutes on 2 cores); "
          "the timed cases follow", flush=True)
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        cold = _spawn(["--case", "compile"], env)
        warm = _spawn(["--case", "compile"], env)
    with tempfile.TemporaryDirectory() as cache:
        command = _spawn(["--case", "compile-command"], {**os.environ, "NUMBA_CACHE_DIR": cache})
    print(f"numba kernels: cold compile {cold['wall_s']:.1f} s (library, default garbage collector; "
          f"{command['wall_s']:.1f} s as the nuna command tunes it), warm (cached) start "
          f"{warm['wall_s']:.1f} s (including imports and one tiny replay of each loop and a NoC run)")

    header = (f"{'case':<34} {'wall s':>8} {'cpu s':>8} {'sys s':>6} {'Mevents':>8} {'Mev/s':>7} "
              f"{'Mev/us':>7} {'Mev/ws':>7} {'Mev/ls':>7} "
              f"{'peak MiB':>8} {'packet':>7} {'time us':>10} {'busbw':>7}  target")
    print("\n" + header)
    _spawn(["--case", "compile"])  # fill this machine's cache with every kernel the timed cases load
    small = _spawn(["--case", f"8 GPUs 1 MB 1008 tbs/GPU:8:{1_000_000}:144:256"])
    print(_row(small, 2.0))
    print(_row(_spawn(["--case", f"64 GPUs 1 MB:64:{1_000_000}:1:256"]), 20.0))
    print(_row(_spawn(["--case", f"64 GPUs 1 MB 1 thread:64:{1_000_000}:1:256:threads=1"]), 20.0))
    print(_row(_spawn(["--case", f"64 GPUs 1 MB one queue:64:{1_000_000}:1:256:one-queue"]), 20.0))
    if not args.quick:
        print(_row(_spawn(["--case", f"64 GPUs 1 GB auto:64:{1_000_000_000}:1:auto"]), 120.0))
        other = f"64 GPUs 1 GB auto windowed:64:{1_000_000_000}:1:auto:windowed"
        print(_row(_spawn(["--case", other]), 120.0))
    print("Mev/s = flit-hop events (grants of physical edges) per CPU second of the whole replay (target "
          ">= 3), Mev/us per user-mode CPU second (without sys s, the kernel's time: mostly the first touch "
          "of the replay's memory, slow on virtual machines whose host takes freed memory back), Mev/ws per "
          "wall second, Mev/ls per wall second in the compiled event loop alone (without building the jobs "
          "before it and the result after it); peak = max RSS of the case's process (target <= 4096 MiB)")

    print(f"\nFig 10a (8 GPUs, 1 MB, 1,008 threadblocks/GPU, UA): remote-store latency mean "
          f"{small['latency_mean_ns']:.0f} ns, p99 {small['latency_p99_ns']:.0f} ns, "
          f"max {small['latency_max_ns']:.0f} ns "
          f"(paper: mean ~920 ns, max ~1,320 ns)")
    if args.quick:
        return
    print("\npacket size error against 256-byte flits (largest cases where both run)")
    print(f"{'case':<34} {'packet':>15} {'time us':>10} {'error':>8} {'wall s':>8}")
    # "256+ff": 256-byte flits with fast-forward of steady states (docs/simulator.md §7); "+one",
    # "+series": packets with the other head set-up rules (SimOptions.line_setups; docs/simulator.md §5);
    # "+credit1": one flit of credit per packet on entry, as nuna <= 0.15.0 (SimOptions.packet_credit_lines)
    cases: list[tuple[str, int, int, int, list[str], str]] = [
        ("2 GPUs 512 MB, 16 tbs/peer", 2, 512_000_000, 16,
         ["auto", "auto+credit1", "auto+one", "auto+series", "256+ff"], ""),
        ("8 GPUs 32 MB, 1 tb/peer", 8, 32_000_000, 1,
         ["auto", "1024", "1024+credit1", "1024+one", "4096", "4096+credit1", "65536", "256+ff"], ""),
        ("2 GPUs 256 MB, 16 tbs/peer", 2, 256_000_000, 16,
         ["1024", "1024+credit1", "1024+one", "4096", "4096+credit1", "65536", "256+ff"], ""),
        ("2 GPUs 64 MB, 1 tb/peer", 2, 64_000_000, 1, ["4096", "16384", "65536", "256+ff"], ""),
    ]
    if args.large:
        cases += [(f"64 GPUs 100 MiB, 1 tb/peer, {config}", 64, 100 << 20, 1, ["auto"], f":config={config}")
                  for config in ("UA", "NAP+NAR")]
    times: dict[tuple[str, str], float] = {}
    for name, gpus, size, tbs, packets, flags in cases:
        ref = _spawn(["--case", f"{name}:{gpus}:{size}:{tbs}:256{flags}"])
        times[name, "256"] = ref["time_ns"]
        print(f"{name:<34} {256:>15} {ref['time_ns'] / 1000:10.2f} {'(ref)':>8} {ref['wall_s']:8.1f}")
        for packet in packets:
            size_b, _, mode = packet.partition("+")
            r = _spawn(["--case", f"{name}:{gpus}:{size}:{tbs}:{size_b}{flags}{':' + mode if mode else ''}"])
            times[name, packet] = r["time_ns"]
            err = _error_pct(r, ref)
            label = f"{packet}={r['packet_bytes']}" if size_b == "auto" else packet
            print(f"{name:<34} {label:>15} {r['time_ns'] / 1000:10.2f} {err:+7.2f}% {r['wall_s']:8.1f}")
    print("target: auto within 2% of 256-byte flits (256+ff: the flits with --fast-forward, opt-in; "
          "+one / +series: --line-setups one / series; +credit1: --packet-credit-lines 1)")
    if args.large:
        ua, nap = (f"64 GPUs 100 MiB, 1 tb/peer, {c}" for c in ("UA", "NAP+NAR"))
        print("64 GPUs 100 MiB, NAP+NAR over UA: "
              + ", ".join(f"{p} {times[ua, p] / times[nap, p]:.3f}x" for p in ("256", "auto")))


if __name__ == "__main__":
    main()
