"""Estimated cost of a sweep's points: the weights the progress bar's ETA counts in.

A sweep's points differ in cost by nearly four orders of magnitude (in the Fig 9 grid, from
0.02 s for a 2-GPU 100 KiB alltoall to 156 s for the 64-GPU 1 GiB allreduce under UA) and run
in spec order, small pods first, so an ETA that counts points promises far too little early
on. Weighted by these estimates it counts work instead.

The estimate is of the simulator's work: the jobs a replay has (the lines the collective's steps
move, grouped into packets as ``--packet-bytes`` groups them, ``auto`` by the simulator's own
rule) times a cost per job that grows with the pod (more hops per store, larger tables; a
GEMM's job costs more), plus a fixed part; generating the plan and running the configuration's
passes, per step of the plan (NAP and NUMA, which read every threadblock's accesses, cost
most); all times the replays the point runs (``nar_granularity = "auto"`` replays every
granularity). Its constants were fitted to the Fig 9 grid's measured point times, Fig 14's for
the GEMM and, for the passes, 95 points at 1-16 threadblocks per peer
(``benchmarks/bench_fig9.py``, ``docs/sweeps.md`` "Progress"), in seconds of the machine they
were fitted on: the ETA needs only their ratios, a dry run's estimate (:func:`estimate_work`)
the seconds. It counts the lines of the generator's plans exactly (a plan file's as if
generated); packets that split by route (UA on large pods: up to 1.5x the jobs) and
fast-forward are not in it. A point function other than the simulator's own weighs every
point alike.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from nuna.experiments.spec import DEFAULT_POINT_FUNCTION, GEMM_POINT_FUNCTION
from nuna.units import format_size

#: the point functions whose points this model knows (their cost is the replay's)
SIMULATING_POINT_FUNCTIONS = frozenset({DEFAULT_POINT_FUNCTION, GEMM_POINT_FUNCTION})

#: moving steps of each GPU's plan per threadblock of a peer, as the generator writes the plans;
#: each moves its share of a chunk (``size_bytes / gpus``). Allgather sends its chunk to every
#: peer, alltoall also copies its own; reducescatter receives its peers' chunks into scratch and
#: reduces them there (r and re besides the sends), except on 2 GPUs, where the one peer's chunk
#: is reduced on receipt (rrc); allreduce is a reducescatter and an allgather.
_STEPS_PER_GPU: dict[str, Callable[[int], int]] = {
    "allgather": lambda gpus: gpus - 1,
    "alltoall": lambda gpus: gpus,
    "reducescatter": lambda gpus: gpus + 1 if gpus > 2 else 2,
    "allreduce": lambda gpus: 2 * gpus if gpus > 2 else 3,
}

# Seconds on 2026-12-07's machine, fitted to the Fig 9 main grid run that day (360 points, two
# workers, one thread each; docs/sweeps.md "Progress"). The replay: a fixed part and a cost per
# job growing with the pod, their ratios by least squares relative to each point's time (of the
# point's time less the passes' estimate below), then scaled by 1.297 so that the estimates sum
# to the grid's point time (relative least squares alone fell 23 % short of it in sum, which a
# dry run's total would show; the ETA, a ratio, moves by at most 0.01).
_REPLAY_FIXED_S = 0.0175
_PER_JOB_S = 2.26e-5
_PER_JOB_PER_GPU_S = 3.61e-7
# Generating the plan and the configuration's passes (the rest of the point's time), per moving
# step: the sums over the grid's points and 95 more (allgather and allreduce, alltoall in part;
# 8-64 GPUs, 100 KiB and 1 MiB, UA and NAP+NAR, 1, 4 and 16 threadblocks per peer) over their
# steps: UA 64.0 us, UA+NAR 83.8, NAP+NAR 224.0, NUMA+NAR 440.3 (the last two read every
# threadblock's chunk accesses).
_PASSES_PER_STEP_S = 64e-6
_NAR_PER_STEP_S = 20e-6
_PLACEMENT_PER_STEP_S = {"ua": 0.0, "nap": 140e-6, "nap*": 140e-6, "numa": 356e-6}

# A GEMM's job (a line of a tile's re step: two loads, the vector unit, a store) costs about
# 1.9 of a collective's: fitted to the sum of Fig 14's 36 points (8 GPUs, GEMMs of 1-16 MB beside
# a 1 MiB allgather, 2026-12-07), which the collective's weight alone estimated at 0.57 of their
# time (40-49 us a GEMM line measured, 25.5 us a job in the model at 8 GPUs).
_GEMM_JOB_WEIGHT = 1.9

#: seconds a new worker takes before its first point's replay: the interpreter, nuna's imports
#: and the compiled replay loop read from numba's cache (2.0-2.4 s wall for a fresh process to
#: import and run a 2-GPU 100 KiB point, 0.02-0.03 s of which the point itself, 2026-12-07)
_WORKER_START_S = 2.0

_DEFAULT_LINE_BYTES = 256


def moving_steps(collective: str, gpus: int, tbs_per_peer: int = 1) -> int:
    """Steps that move data in a generated plan: each a share of a chunk (``size_bytes / gpus``)
    split among the ``tbs_per_peer`` threadblocks of a peer (a collective this model does not
    know: as an allgather)."""
    per_gpu = _STEPS_PER_GPU.get(collective, _STEPS_PER_GPU["allgather"])(gpus)
    return per_gpu * gpus * max(1, tbs_per_peer)


def estimated_lines(collective: str, gpus: int, size_bytes: int, line_bytes: int = _DEFAULT_LINE_BYTES,
                    tbs_per_peer: int = 1) -> int:
    """Lines (flits) the replay's moving steps carry in all, for a collective as the generator
    writes it: each step's share rounded up to whole lines."""
    share = -(-size_bytes // (gpus * max(1, tbs_per_peer)))
    return max(1, moving_steps(collective, gpus, tbs_per_peer) * -(-share // line_bytes))


def _shape(point: Mapping[str, Any]) -> tuple[str, int, int]:
    """A point's collective, GPU count and threadblocks per peer (a plan file's point, 0 per
    peer: as if generated with one)."""
    return str(point.get("collective", "")), int(point.get("gpus", 2)), int(point.get("tbs_per_peer") or 1)


def estimated_jobs(point: Mapping[str, Any], line_bytes: int = _DEFAULT_LINE_BYTES) -> int:
    """The jobs the replay of ``point`` (a sweep point's inputs) would hold: its collective's
    lines and its GEMM's (``gemm_bytes``), grouped into packets of ``packet_bytes``
    (``"auto"``: as the simulator chooses them)."""
    return _jobs(point, line_bytes)[0]


def _jobs(point: Mapping[str, Any], line_bytes: int) -> tuple[int, int]:
    """:func:`estimated_jobs`, and how many of them its GEMM's lines alone would make."""
    collective, gpus, tbs_per_peer = _shape(point)
    lines = estimated_lines(collective, gpus, int(point.get("size_bytes", 0)), line_bytes, tbs_per_peer)
    # a concurrent GEMM (Fig 14) is one re step per tile on every GPU: its matrix's lines each
    gemm_lines = gpus * -(-int(point.get("gemm_bytes") or 0) // line_bytes)
    lines += gemm_lines
    packet = point.get("packet_bytes", line_bytes)
    if packet == "auto":
        from nuna.sim.replay import SimOptions, auto_packet_bytes

        cap = point.get("max_packet_bytes")
        options = SimOptions() if cap is None else SimOptions(max_packet_bytes=int(cap))
        packet = auto_packet_bytes(lines, line_bytes, options)
    lines_per_packet = max(1, int(packet) // line_bytes)
    return max(1, -(-lines // lines_per_packet)), -(-gemm_lines // lines_per_packet)


def point_cost(point_function: str, point: Mapping[str, Any]) -> float:
    """Relative cost of computing ``point`` with ``point_function`` (about seconds on the
    machine the constants were fitted on); 1.0 for a point function this model does not know."""
    if point_function not in SIMULATING_POINT_FUNCTIONS:
        return 1.0
    _, gpus, _ = _shape(point)
    jobs, gemm_jobs = _jobs(point, _DEFAULT_LINE_BYTES)
    weighted = jobs + (_GEMM_JOB_WEIGHT - 1.0) * gemm_jobs
    replay = _REPLAY_FIXED_S + weighted * (_PER_JOB_S + _PER_JOB_PER_GPU_S * gpus)
    return (replay + _passes_cost(point)) * _replays(point)


def _passes_cost(point: Mapping[str, Any]) -> float:
    """Seconds to generate the point's plan and run its configuration's passes."""
    from nuna.passes.configs import get_config

    steps = moving_steps(*_shape(point))
    config = get_config(str(point.get("config", "UA")))
    per_step = _PASSES_PER_STEP_S + (_NAR_PER_STEP_S if config.nar else 0.0) \
        + _PLACEMENT_PER_STEP_S.get(config.placement, 0.0)
    return steps * per_step


def _replays(point: Mapping[str, Any]) -> int:
    """Replays a point runs: one, and one per granularity the topology's NAR can take besides
    when ``nar_granularity = "auto"`` picks the fastest by replaying each."""
    if point.get("nar_granularity") != "auto":
        return 1
    from nuna.topology.address import nar_granularities
    from nuna.topology.spec import load_topology

    return 1 + len(nar_granularities(load_topology(point["topology"])))


def worker_start_cost(point_function: str) -> float:
    """Relative cost (as :func:`point_cost`'s) of starting one worker for ``point_function``:
    in a short sweep it outweighs the points (0 for a point function this model does not know)."""
    return _WORKER_START_S if point_function in SIMULATING_POINT_FUNCTIONS else 0.0


#: the point inputs a sweep's work is split by (:func:`split_by_axes`), in the order printed
AXES = ("size_bytes", "gpus", "collective", "config", "tbs_per_peer", "nar_granularity", "gemm_bytes",
        "packet_bytes", "topology", "plan")

_AXIS_NAMES = {"size_bytes": "size", "gpus": "pod", "config": "configuration",
               "tbs_per_peer": "threadblocks per peer", "nar_granularity": "NAR granularity",
               "gemm_bytes": "GEMM", "packet_bytes": "packets"}


def axis_name(axis: str) -> str:
    """How an axis of :data:`AXES` is named in a report."""
    return _AXIS_NAMES.get(axis, axis)


def axis_value_label(axis: str, value: Any) -> str:
    """How a value of ``axis`` is shown: sizes in their exact unit, pods as ``N GPUs``, plan and
    topology files by name (as points' labels name them; a shipped topology's name is itself)."""
    if axis in ("size_bytes", "gemm_bytes") and isinstance(value, int):
        return format_size(value)
    if axis == "gpus":
        return f"{value} GPUs"
    if axis in ("plan", "topology"):
        return PurePath(str(value)).name
    return str(value)


def _natural(value: Any) -> tuple[int, float, str]:
    # numbers before words, numbers by value: 100KiB before 1GiB, 8 GPUs before 64
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def split_by_axes(rows: Sequence[tuple[Mapping[str, Any], float]], axes: Sequence[str] = AXES,
                  varying_only: bool = True) -> tuple[tuple[str, tuple[tuple[str, float], ...]], ...]:
    """``rows`` of (point inputs, seconds) summed per value of each of ``axes``, values in their
    natural order, labelled by :func:`axis_value_label`. A point without the axis (``None`` or
    absent: a configuration without NAR has no granularity) is left out of that axis's sums. With
    ``varying_only`` an axis with fewer than two values is left out."""
    out = []
    for axis in axes:
        sums: dict[Hashable, float] = defaultdict(float)
        for point, seconds in rows:
            value = point.get(axis)
            if value is not None:
                sums[value] += seconds
        if len(sums) >= (2 if varying_only else 1):
            cells = tuple((axis_value_label(axis, v), sums[v]) for v in sorted(sums, key=_natural))
            out.append((axis, cells))
    return tuple(out)


def schedule_wall_s(costs: Sequence[float], workers: int, start_s: float = 0.0) -> float:
    """Wall time of ``costs`` run in the order given on ``workers`` workers that each start
    after ``start_s``: every point goes to the first worker free, as the sweep's executors hand
    out points in spec order."""
    if not costs:
        return 0.0
    free = [start_s] * max(1, workers)
    for cost in costs:
        heapq.heappush(free, heapq.heappop(free) + cost)
    return max(free)


@dataclass(frozen=True, slots=True)
class WorkEstimate:
    """The estimated cost of a sweep's points to run (:func:`estimate_work`), in the cost model's
    seconds (those of the machine its constants were fitted on: ``docs/sweeps.md``, "Progress").

    ``known`` is False for a point function the model does not know (every point then weighs 1
    and no time is given). ``wall_s`` is the run's time on ``workers`` workers, their start
    included, ``None`` when the workers are a cluster's (``workers == 0``). ``by_axis``: the
    work per value of each axis the points vary in (:func:`split_by_axes`); ``costliest``: the
    dearest points, ``(seconds, label)``."""

    points: int
    known: bool
    work_s: float
    workers: int
    wall_s: float | None
    by_axis: tuple[tuple[str, tuple[tuple[str, float], ...]], ...]
    costliest: tuple[tuple[float, str], ...]


def estimate_work(point_function: str, points: Sequence[tuple[Mapping[str, Any], str]], workers: int,
                  top: int = 3) -> WorkEstimate:
    """Estimate the work of ``points`` (each its inputs and label, in the order they will run)
    for ``point_function`` on ``workers`` started workers (0: a cluster's, already running)."""
    known = point_function in SIMULATING_POINT_FUNCTIONS
    costs = [point_cost(point_function, point) for point, _ in points]
    start_s = worker_start_cost(point_function)
    wall = schedule_wall_s(costs, workers, start_s) if known and workers > 0 else None
    ranked = sorted(((c, label) for c, (_, label) in zip(costs, points, strict=True)),
                    key=lambda cl: (-cl[0], cl[1]))
    rows = [(point, c) for c, (point, _) in zip(costs, points, strict=True)]
    return WorkEstimate(points=len(points), known=known, work_s=math.fsum(costs), workers=workers,
                        wall_s=wall, by_axis=split_by_axes(rows) if known else (),
                        costliest=tuple(ranked[:top]) if known else ())
