"""Fit the latency defaults of a mesh topology (nuna-4die) to the paper's own figures.

Table 2 of the NUNA paper (system parameters) is lost, so the fixed and per-hop latencies are
fitted to the figures the paper states (``nuna.topology.latency.CALIBRATION_TARGETS``) by a
weighted least-squares fit of log(achieved / target), with a small Nelder-Mead search. Every
path latency is linear in the parameters, so the geometry is evaluated once per parameter
(unit basis) and the fit combines those arrays.

Fixed by public figures or assumption rather than fitted: the switch port-to-port latency
(``--switch-ns``, UALink 1.0: < 200 ns for a 51.2 Tb/s switch, which a 64-GPU plane of 800 Gb/s
ports needs) and the die-crossing to mesh-hop latency ratio (``--crossing-hops``; only the sum
24*hop + 3*crossing is identifiable from the targets, because both scale alike with distance).

Usage: ``python scripts/calibrate_topology.py [TOPOLOGY] [--store-weight W]``; prints the
fitted values (rounded as they go into the TOML file) and the achieved figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import numpy as np
import numpy.typing as npt

from nuna.topology import load_topology
from nuna.topology.geometry import chip_geometry
from nuna.topology.latency import CALIBRATION_TARGETS, calibration_report
from nuna.topology.spec import TopologySpec

F64 = npt.NDArray[np.float64]
FITTED = ("noc_hop_latency_ns", "cu_attach_latency_ns", "io_port_latency_ns", "hbm_attach_latency_ns")
TABLES = ("cu_port", "port_stack", "cu_stack", "stack_cu")


def basis(spec: TopologySpec, crossing_hops: float) -> dict[str, dict[str, F64]]:
    """Path latency tables for a unit value of each fitted parameter (others zero)."""
    zero = dataclasses.replace(spec.chip, **dict.fromkeys((*FITTED, "die_crossing_latency_ns"), 0.0))
    out: dict[str, dict[str, F64]] = {}
    for key in FITTED:
        unit = {key: 1.0}
        if key == "noc_hop_latency_ns":
            unit["die_crossing_latency_ns"] = crossing_hops
        geo = chip_geometry(dataclasses.replace(zero, **unit))
        out[key] = {t: getattr(geo, t).latency_ns for t in TABLES}
    return out


def figures(
    params: dict[str, float],
    base: dict[str, dict[str, F64]],
    link_ns: float,
    switch_ns: float,
    memory_ns: float,
) -> dict[str, float]:
    """Calibration figures for a parameter vector (same definitions as nuna.topology.latency)."""
    t = {name: sum(params[k] * base[k][name] for k in FITTED) for name in TABLES}
    noc = t["cu_port"][:, :, None] + t["port_stack"][None, :, :]
    one_way = 2.0 * link_ns + switch_ns
    load = t["cu_stack"] + t["stack_cu"].T + memory_ns
    store = noc.reshape(noc.shape[0], -1) + one_way + memory_ns
    best = float((load.min(axis=1) + store.min(axis=1)).min())
    worst = float((load.max(axis=1) + store.max(axis=1)).max())
    mean = float((load.mean(axis=1) + store.mean(axis=1)).mean())
    return {
        "remote_write_noc_worst_ns": float(noc.max()),
        "remote_write_noc_worst_to_best": float(noc.max() / noc.min()),
        "remote_write_noc_mean_to_best": float(noc.mean() / noc.min()),
        "scaleup_round_trip_ns": 2.0 * one_way,
        "transfer_worst_to_best": worst / best,
        "transfer_mean_to_best": mean / best,
        "remote_store_mean_ns": float(noc.mean()) + one_way,
        "remote_store_worst_ns": float(noc.max()) + one_way,
    }


def nelder_mead(f: object, x0: F64, iterations: int = 600) -> tuple[F64, float]:
    """Minimise ``f`` from ``x0`` (plain Nelder-Mead; enough for five smooth parameters)."""
    assert callable(f)
    n = len(x0)
    pts = [x0.astype(float)] + [x0 + np.eye(n)[i] * (0.2 * abs(x0[i]) + 1.0) for i in range(n)]
    vals = [float(f(p)) for p in pts]
    for _ in range(iterations):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centre = np.mean(pts[:-1], axis=0)
        xr = centre + (centre - pts[-1])
        fr = float(f(xr))
        if fr < vals[0]:
            xe = centre + 2.0 * (centre - pts[-1])
            fe = float(f(xe))
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centre + 0.5 * (pts[-1] - centre)
            fc = float(f(xc))
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0] + 0.5 * (p - pts[0]) for p in pts]
                vals = [float(f(p)) for p in pts]
    i = int(np.argmin(vals))
    return pts[i], vals[i]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topology", nargs="?", default="nuna-4die")
    parser.add_argument("--switch-ns", type=float, default=200.0)
    parser.add_argument("--crossing-hops", type=float, default=10.0)
    parser.add_argument(
        "--store-weight",
        type=float,
        default=0.5,
        help="weight of the contended Fig 10 store figures (the others weigh 1)",
    )
    args = parser.parse_args()
    spec = load_topology(args.topology)
    base = basis(spec, args.crossing_hops)
    memory_ns = spec.chip.memory_access_latency_ns
    weights = {
        key: (args.store_weight if key.startswith("remote_store") else 1.0) for key, *_ in CALIBRATION_TARGETS
    }
    targets = {key: target for key, target, *_ in CALIBRATION_TARGETS}

    def objective(z: F64) -> float:
        if z.min() < 0.0:
            return math.inf
        params = dict(zip(FITTED, z[:-1], strict=True))
        got = figures(params, base, float(z[-1]), args.switch_ns, memory_ns)
        return sum(weights[k] * math.log(got[k] / targets[k]) ** 2 for k in targets)

    best: tuple[F64, float] | None = None
    for start in (
        [5.0, 100.0, 50.0, 80.0, 150.0],
        [3.0, 60.0, 80.0, 60.0, 100.0],
        [8.0, 140.0, 20.0, 120.0, 200.0],
    ):
        found = nelder_mead(objective, np.array(start))
        if best is None or found[1] < best[1]:
            best = found
    assert best is not None
    z = best[0]
    hop = round(float(z[0]) * 4) / 4
    rounded = {
        "noc_hop_latency_ns": hop,
        "die_crossing_latency_ns": round(hop * args.crossing_hops, 2),
        "cu_attach_latency_ns": float(round(z[1])),
        "io_port_latency_ns": float(round(z[2])),
        "hbm_attach_latency_ns": float(round(z[3])),
    }
    chip = dataclasses.replace(spec.chip, **rounded)
    scaleup = dataclasses.replace(
        spec.scaleup, link_latency_ns=float(round(z[4])), switch_latency_ns=args.switch_ns
    )
    fitted = dataclasses.replace(spec, chip=chip, scaleup=scaleup)
    print(f"# fitted (objective {best[1]:.5f}), rounded as written to the TOML file:")
    for key, value in rounded.items():
        print(f"chip.{key} = {value}")
    print(f"scaleup.link_latency_ns = {scaleup.link_latency_ns}")
    print(f"scaleup.switch_latency_ns = {scaleup.switch_latency_ns}")
    print("# achieved with the rounded values:")
    for row in calibration_report(fitted):
        print(f"{row.key:34s} target {row.target:8.2f}  achieved {row.achieved:9.3f}  ({row.error:+.1%})")


if __name__ == "__main__":
    main()
