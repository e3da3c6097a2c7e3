"""Benchmark of the synthetic NoC mode against BookSim 2 (shared/reference/noc-reference-8x8.csv):
the full latency table, the saturation throughputs, the output-queued model for contrast, and
the engine's speed (flit-hop events per CPU second).

``python benchmarks/bench_noc.py [--cycles N] [--quick] [--reference CSV]``. Latency points run ``--cycles``
cycles (the first fifth warms up); saturation is found by bisection on the stability test of
``nuna.sim.noc.run_noc`` (a source's late packets above BookSim's 500-cycle threshold, or
packets never delivered).
"""

from __future__ import annotations

import argparse
import csv
import resource
import time
from pathlib import Path

from nuna.sim import noc

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "noc-reference-8x8.csv"
# the reference's stated saturation throughputs (noc-reference-8x8.md)
BOOKSIM_SATURATION = {"uniform": 0.40, "transpose": 0.145}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="shorter runs, coarser bisection")
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    args = parser.parse_args()
    cycles = 5_000 if args.quick else args.cycles
    try:
        with args.reference.open() as handle:
            rows = list(csv.DictReader(handle))
    except OSError as err:
        parser.error(f"--reference: {err.strerror}: {args.reference}")

    t0 = time.perf_counter()
    meshes = {r: noc.build_mesh(8, 8, r) for r in noc.ROUTERS}
    noc.run_noc(8, 8, "uniform", 0.1, 1, cycles=200, mesh=meshes["iq"])  # compile / load the kernel
    print(f"kernel ready in {time.perf_counter() - t0:.1f} s (cold compile if no numba cache)")

    print(f"\nlatency, 8x8 mesh, input-queued VC routers, {cycles} cycles, seed 1")
    print(f"{'traffic':>9} {'L':>2} {'rate':>6} {'BookSim':>9} {'status':>8} {'nuna':>9} {'error':>7} "
          f"{'accepted':>8} {'sat':>5}  within 80% of saturation")
    events = 0
    cpu = 0.0
    worst = 0.0
    for row in rows:
        if row["sim_type"] != "latency":
            continue
        traffic, flits, rate = row["traffic"], int(row["packet_size"]), float(row["offered_flit_rate"])
        c0 = time.process_time()
        res = noc.run_noc(8, 8, traffic, rate, flits, cycles=cycles, seed=1, mesh=meshes["iq"])
        cpu += time.process_time() - c0
        events += res.events
        ref = float(row["packet_latency_avg"])
        err = (res.packet_latency_avg - ref) / ref * 100
        in_range = rate <= 0.8 * BOOKSIM_SATURATION[traffic]
        if in_range:
            worst = max(worst, abs(err))
        print(f"{traffic:>9} {flits:>2} {rate:6.3f} {ref:9.2f} {row['status']:>8} "
              f"{res.packet_latency_avg:9.2f} {err:+6.1f}% {res.accepted_flit_rate:8.4f} "
              f"{res.saturated!s:>5}  {'yes' if in_range else ''}")
    print(f"worst latency error up to 80% of saturation: {worst:.1f}% (target <= 10%)")
    print(f"engine speed: {events / cpu / 1e6:.2f} M flit-hop events per CPU second "
          f"({events} events in {cpu:.1f} s CPU)")

    print("\nsaturation throughput (flits/node/cycle) by bisection; accepted rate at full load "
          "(BookSim's throughput mode)")
    print(f"{'traffic':>9} {'L':>2} {'BookSim':>8} {'iq':>7} {'error':>7} {'oq':>7} "
          f"{'BS full':>8} {'iq full':>8}")
    sat_cycles = 5_000 if args.quick else 10_000
    tol = 0.01 if args.quick else 0.005
    for traffic, flits in (("uniform", 1), ("transpose", 1), ("uniform", 4), ("transpose", 4)):
        ref = BOOKSIM_SATURATION[traffic]
        iq = noc.saturation_rate(8, 8, traffic, flits, cycles=sat_cycles, lo=0.05, hi=0.7, tolerance=tol,
                                 mesh=meshes["iq"])
        oq = noc.saturation_rate(8, 8, traffic, flits, cycles=sat_cycles, lo=0.05, hi=0.7, tolerance=tol,
                                 router="oq", mesh=meshes["oq"])
        full_ref = next(float(r["accepted_flit_rate"]) for r in rows if r["sim_type"] == "throughput"
                        and r["traffic"] == traffic and int(r["packet_size"]) == flits)
        full = noc.run_noc(8, 8, traffic, 1.0, flits, cycles=min(cycles, 5_000), mesh=meshes["iq"])
        print(f"{traffic:>9} {flits:>2} {ref:8.3f} {iq:7.3f} {(iq - ref) / ref * 100:+6.1f}% {oq:7.3f} "
              f"{full_ref:8.3f} {full.accepted_flit_rate:8.3f}")
    print("target: iq within 15% of BookSim; oq = the pure output-link FIFO model")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(f"peak memory: {peak:.0f} MiB; total {time.perf_counter() - t0:.1f} s wall")


if __name__ == "__main__":
    main()
