"""Uncontended latency characterization of a topology: the NUNA spread, calibration figures
and the paper's Fig 4 experiment, all computed from the chip geometry's path latencies.

Definitions (one GPU model; every average is uniform over its index set, which is what the
baseline produces: threadblocks spread over all CUs, pages round-robin over all stacks,
addresses hashed evenly over all ports):

- ``cu_to_port``: ``Cu -> IoPort`` over all (CU, port) pairs;
- ``port_to_stack``: ``IoPort -> Hbm`` over all (port, stack) pairs;
- ``remote_write_noc``: the on-chip (NoC) part of a remote write, local ``Cu -> IoPort k``
  plus remote ``IoPort k -> Hbm s``, over all (CU, k, s); the same ``k`` on both GPUs because
  plane ``k`` joins only ports ``k``;
- ``remote_store``: ``remote_write_noc`` plus the scale-up one-way latency (cable, switch,
  cable): the time from a CU issuing a store until it reaches the remote stack, without the
  memory access itself;
- ``transfer``: an uncontended GPU-to-GPU transfer, end to end: a CU loads from a local stack
  (request there, memory access, data back) and stores into a remote stack (``remote_store``
  plus the memory access), over all (CU, local stack, k, remote stack);
- ``scaleup_round_trip_ns``: I/O port to a remote I/O port and back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nuna.topology.address import address_space_bytes, io_ports_array
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Spread:
    """Best, mean and worst of a latency over its index set."""

    best_ns: float
    mean_ns: float
    worst_ns: float

    @property
    def worst_to_best(self) -> float:
        return self.worst_ns / self.best_ns if self.best_ns > 0 else float("nan")

    @property
    def mean_to_best(self) -> float:
        return self.mean_ns / self.best_ns if self.best_ns > 0 else float("nan")

    def as_dict(self) -> dict[str, float | None]:
        """JSON-ready; ratios are None when the best case is free (a flat chip's NoC)."""

        def finite(value: float) -> float | None:
            return value if math.isfinite(value) else None

        return {
            "best_ns": self.best_ns,
            "mean_ns": self.mean_ns,
            "worst_ns": self.worst_ns,
            "worst_to_best": finite(self.worst_to_best),
            "mean_to_best": finite(self.mean_to_best),
        }


def _spread(values: F64) -> Spread:
    return Spread(float(values.min()), float(values.mean()), float(values.max()))


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Counts and uncontended latency spreads of one topology (see the module docstring)."""

    topology: str
    kind: str
    dies: int
    routers: int
    cus: int
    io_ports: int
    hbm_stacks: int
    cu_to_port: Spread
    port_to_stack: Spread
    remote_write_noc: Spread
    remote_store: Spread
    transfer: Spread
    scaleup_round_trip_ns: float
    memory_access_latency_ns: float

    def as_dict(self) -> dict[str, object]:
        return {
            "topology": self.topology,
            "kind": self.kind,
            "counts": {
                "dies": self.dies,
                "routers": self.routers,
                "cus": self.cus,
                "io_ports": self.io_ports,
                "hbm_stacks": self.hbm_stacks,
            },
            "cu_to_port": self.cu_to_port.as_dict(),
            "port_to_stack": self.port_to_stack.as_dict(),
            "remote_write_noc": self.remote_write_noc.as_dict(),
            "remote_store": self.remote_store.as_dict(),
            "transfer": self.transfer.as_dict(),
            "scaleup_round_trip_ns": self.scaleup_round_trip_ns,
            "memory_access_latency_ns": self.memory_access_latency_ns,
        }


def latency_summary(spec: TopologySpec) -> LatencySummary:
    """Uncontended latency spreads of ``spec`` (exact: every combination is counted)."""
    chip = spec.chip
    geo = chip_geometry(chip)
    mem = chip.memory_access_latency_ns
    one_way = spec.scaleup.one_way_latency_ns
    cu_port = geo.cu_port.latency_ns  # (C, P)
    port_stack = geo.port_stack.latency_ns  # (P, S)
    noc = cu_port[:, :, None] + port_stack[None, :, :]  # (C, P, S)
    # Per CU, the load and store parts are independent choices, so their extremes and means add.
    load = geo.cu_stack.latency_ns + geo.stack_cu.latency_ns.T + mem  # (C, S_local)
    store = noc.reshape(chip.cus, -1) + one_way + mem  # (C, P*S)
    transfer_best = float((load.min(axis=1) + store.min(axis=1)).min())
    transfer_worst = float((load.max(axis=1) + store.max(axis=1)).max())
    transfer_mean = float((load.mean(axis=1) + store.mean(axis=1)).mean())
    return LatencySummary(
        topology=spec.name,
        kind=chip.kind,
        dies=chip.dies,
        routers=chip.routers,
        cus=chip.cus,
        io_ports=chip.io_ports,
        hbm_stacks=chip.hbm_stacks,
        cu_to_port=_spread(cu_port),
        port_to_stack=_spread(port_stack),
        remote_write_noc=_spread(noc),
        remote_store=_spread(noc + one_way),
        transfer=Spread(transfer_best, transfer_mean, transfer_worst),
        scaleup_round_trip_ns=spec.scaleup.round_trip_latency_ns,
        memory_access_latency_ns=mem,
    )


# --- calibration ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    """One calibration figure: what the paper (or a public figure) says and what the model gives."""

    key: str
    target: float
    achieved: float
    unit: str
    source: str

    @property
    def error(self) -> float:
        """Relative error of the achieved value (achieved / target - 1)."""
        return self.achieved / self.target - 1.0


#: (key, target, unit, source) of every figure the nuna-4die defaults are calibrated against.
CALIBRATION_TARGETS: tuple[tuple[str, float, str, str], ...] = (
    ("remote_write_noc_worst_ns", 900.0, "ns", "paper §3.1.3: NoC part of a remote write up to 0.9 us"),
    ("remote_write_noc_worst_to_best", 3.0, "x", "paper §1: worst-case NoC latency 3x the best"),
    ("remote_write_noc_mean_to_best", 2.0, "x", "paper §1: average-case NoC latency 2x the best"),
    (
        "scaleup_round_trip_ns",
        1000.0,
        "ns",
        "paper §3.1.3: scale-up latency 1 us (UALink 1.0 switch 150-250 ns)",
    ),
    ("transfer_worst_to_best", 1.8, "x", "paper §1: uncontended GPU-to-GPU transfer, worst 1.8x best"),
    ("transfer_mean_to_best", 1.45, "x", "paper §1: uncontended GPU-to-GPU transfer, average 1.45x best"),
    ("remote_store_mean_ns", 920.0, "ns", "paper §6.2, Fig 10a: 8-GPU 1 MB allgather, UA, contended mean"),
    ("remote_store_worst_ns", 1320.0, "ns", "paper §6.2, Fig 10a: 8-GPU 1 MB allgather, UA, contended max"),
)


def calibration_figures(spec: TopologySpec) -> dict[str, float]:
    """The achieved value of every calibration target key for ``spec``."""
    s = latency_summary(spec)
    return {
        "remote_write_noc_worst_ns": s.remote_write_noc.worst_ns,
        "remote_write_noc_worst_to_best": s.remote_write_noc.worst_to_best,
        "remote_write_noc_mean_to_best": s.remote_write_noc.mean_to_best,
        "scaleup_round_trip_ns": s.scaleup_round_trip_ns,
        "transfer_worst_to_best": s.transfer.worst_to_best,
        "transfer_mean_to_best": s.transfer.mean_to_best,
        "remote_store_mean_ns": s.remote_store.mean_ns,
        "remote_store_worst_ns": s.remote_store.worst_ns,
    }


def calibration_report(spec: TopologySpec) -> tuple[CalibrationRow, ...]:
    """Every calibration target next to the value ``spec`` achieves."""
    achieved = calibration_figures(spec)
    return tuple(
        CalibrationRow(key, target, achieved[key], unit, source)
        for key, target, unit, source in CALIBRATION_TARGETS
    )


# --- Fig 4: remote atomics from every CU -----------------------------------------------------


@dataclass(frozen=True, eq=False)
class AtomicCharacterization:
    """Round-trip latency of an uncontended remote atomic from every CU of GPU 0 to each of
    ``targets`` addresses of GPU 1 (baseline port hash, owning stack, memory access, and back
    through the same plane). ``latency_ns[c, t]``: CU ``c``, target ``t``.

    Variation (standard deviation, ns): ``across_addresses`` is the mean over CUs of the
    standard deviation over targets (a fixed CU, varying the address); ``across_cus`` is the
    mean over targets of the standard deviation over CUs (a fixed address, varying the CU).
    The ``*_p95_p5`` fields are the same with the 5th-to-95th percentile range instead."""

    topology: str
    dies: int
    latency_ns: F64
    across_addresses_ns: float
    across_cus_ns: float
    across_addresses_p95_p5_ns: float
    across_cus_p95_p5_ns: float

    def as_dict(self) -> dict[str, object]:
        lat = self.latency_ns
        return {
            "topology": self.topology,
            "dies": self.dies,
            "cus": int(lat.shape[0]),
            "targets": int(lat.shape[1]),
            "min_ns": float(lat.min()),
            "mean_ns": float(lat.mean()),
            "max_ns": float(lat.max()),
            "variation_across_addresses_std_ns": self.across_addresses_ns,
            "variation_across_cus_std_ns": self.across_cus_ns,
            "variation_across_addresses_p95_p5_ns": self.across_addresses_p95_p5_ns,
            "variation_across_cus_p95_p5_ns": self.across_cus_p95_p5_ns,
        }


def atomic_round_trips(spec: TopologySpec, targets: int = 2048, seed: int = 0) -> AtomicCharacterization:
    """The paper's Fig 4 experiment on the model: ``targets`` 256-byte lines drawn uniformly
    (seeded) from GPU 1's physical address space, an atomic from every CU of GPU 0 to each."""
    chip = spec.chip
    geo = chip_geometry(chip)
    rng = np.random.default_rng(seed)
    lines = address_space_bytes(spec) // chip.address_hash_granularity_bytes
    addrs = rng.integers(0, lines, size=targets, dtype=np.int64) * chip.address_hash_granularity_bytes
    ports = io_ports_array(spec, addrs, None)
    stacks = (addrs // chip.page_bytes) % chip.hbm_stacks
    out_and_back = geo.cu_port.latency_ns[:, ports] + geo.port_cu.latency_ns[ports, :].T  # (C, T)
    remote = (
        geo.port_stack.latency_ns[ports, stacks]
        + geo.stack_port.latency_ns[stacks, ports]
        + chip.memory_access_latency_ns
        + spec.scaleup.round_trip_latency_ns
    )  # (T,)
    lat = out_and_back + remote[None, :]
    p5a, p95a = np.percentile(lat, [5, 95], axis=1)
    p5c, p95c = np.percentile(lat, [5, 95], axis=0)
    return AtomicCharacterization(
        topology=spec.name,
        dies=chip.dies,
        latency_ns=lat,
        across_addresses_ns=float(lat.std(axis=1).mean()),
        across_cus_ns=float(lat.std(axis=0).mean()),
        across_addresses_p95_p5_ns=float((p95a - p5a).mean()),
        across_cus_p95_p5_ns=float((p95c - p5c).mean()),
    )
