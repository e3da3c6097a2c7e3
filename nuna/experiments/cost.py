"""Estimated cost of a sweep's points: the weights the progress bar's ETA counts in.

A sweep's points differ in cost by nearly four orders of magnitude (in the Fig 9 grid, from
0.02 s for a 2-GPU 100 KiB alltoall to 156 s for the 64-GPU 1 GiB allreduce under UA) and run
in spec order, small pods first, so an ETA that counts points promises far too little early
on. Weighted by these estimates it counts work instead.

The estimate is of the simulator's work: the jobs a replay has (the lines the collective's steps
move, grouped into packets as ``--packet-bytes`` groups them, ``auto`` by the simulator's own
rule) times a cost per job that grows with the pod (more hops per store, larger tables), plus a
fixed part; generating the plan and running the configuration's passes, per step of the plan
(NAP and NUMA, which read every threadblock's accesses, cost most); all times the replays the
point runs (``nar_granularity = "auto"`` replays every granularity). Its constants were fitted
to the Fig 9 grid's measured point times and, for the passes, 95 points at 1-16 threadblocks per
peer (``benchmarks/bench_fig9.py``, ``docs/sweeps.md`` "Progress"); only their ratios matter. It
counts the lines of the generator's plans exactly (a plan file's as if generated); packets that
split by route (UA on large pods: up to 1.5x the jobs) and fast-forward are not in it. A point
function other than the simulator's own weighs every point alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nuna.experiments.spec import DEFAULT_POINT_FUNCTION, GEMM_POINT_FUNCTION

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
# workers, one thread each; docs/sweeps.md "Progress"). The replay (least squares, relative to
# each point's time, of the point's time less the passes' estimate below): a fixed part and a
# cost per job growing with the pod.
_REPLAY_FIXED_S = 0.0135
_PER_JOB_S = 1.74e-5
_PER_JOB_PER_GPU_S = 2.78e-7
# Generating the plan and the configuration's passes (the rest of the point's time), per moving
# step: the sums over the grid's points and 95 more (allgather and allreduce, alltoall in part;
# 8-64 GPUs, 100 KiB and 1 MiB, UA and NAP+NAR, 1, 4 and 16 threadblocks per peer) over their
# steps: UA 64.0 us, UA+NAR 83.8, NAP+NAR 224.0, NUMA+NAR 440.3 (the last two read every
# threadblock's chunk accesses).
_PASSES_PER_STEP_S = 64e-6
_NAR_PER_STEP_S = 20e-6
_PLACEMENT_PER_STEP_S = {"ua": 0.0, "nap": 140e-6, "nap*": 140e-6, "numa": 356e-6}

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
    collective, gpus, tbs_per_peer = _shape(point)
    lines = estimated_lines(collective, gpus, int(point.get("size_bytes", 0)), line_bytes, tbs_per_peer)
    # a concurrent GEMM (Fig 14) is one re step per tile on every GPU: its matrix's lines each
    lines += gpus * -(-int(point.get("gemm_bytes") or 0) // line_bytes)
    packet = point.get("packet_bytes", line_bytes)
    if packet == "auto":
        from nuna.sim.replay import SimOptions, auto_packet_bytes

        cap = point.get("max_packet_bytes")
        options = SimOptions() if cap is None else SimOptions(max_packet_bytes=int(cap))
        packet = auto_packet_bytes(lines, line_bytes, options)
    lines_per_packet = max(1, int(packet) // line_bytes)
    return max(1, -(-lines // lines_per_packet))


def point_cost(point_function: str, point: Mapping[str, Any]) -> float:
    """Relative cost of computing ``point`` with ``point_function`` (about seconds on the
    machine the constants were fitted on); 1.0 for a point function this model does not know."""
    if point_function not in SIMULATING_POINT_FUNCTIONS:
        return 1.0
    _, gpus, _ = _shape(point)
    replay = _REPLAY_FIXED_S + estimated_jobs(point) * (_PER_JOB_S + _PER_JOB_PER_GPU_S * gpus)
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
