"""A concurrent GEMM beside a collective (paper §6.6, Fig 14), built from plan steps alone.

The paper runs an independent GEMM of 100 tiles next to an 8-GPU allgather: each tile's
threadblock loads its input tiles, computes for a delay set by the data size, and stores its
output tile; the GEMM's threadblocks are placed naively. nuna models this without a simulator
change: after a configuration has placed the collective, :func:`add_gemm` appends to *every*
GPU ``tiles`` threadblocks (100 tiles per GPU, each GPU runs its own GEMM), each one local
``re`` (reduce) step over an extended scratch buffer. A ``re`` loads two tiles (the ``A`` and
``B`` operands: the step's source and destination), spends the CU's reduction time on them
(proportional to bytes, from the topology's vector rate) and stores the destination (``C``):
two tile loads, a compute delay, one tile store, all through the NoC and HBM stacks the
collective uses.

Tile sizes rarely fall on the collective's chunk size, so the plan's chunks are first split
``refine`` ways (:func:`refine_chunks`: the same bytes move, in finer units) until a tile is a
whole number of chunks.

Naive placement: tile ``i`` goes to die ``i mod D`` and, within the die, to the next CU in the
baseline's location-neutral order that no collective threadblock occupies (the hardware
scheduler prefers free CUs, paper §5.3, and knows nothing of locality). The placements are
explicit :class:`~nuna.plan.ir.TbPlacement` records, so the simulator cannot move them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nuna.errors import UsageError
from nuna.plan.dag import flatten
from nuna.plan.ir import Buffer, ChunkPlacement, Gpu, Plan, Step, StepType, TbPlacement, Threadblock
from nuna.plan.xml import canonical_placement
from nuna.sim.layout import neutral_order, placed_cus
from nuna.sim.result import SimResult
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec

#: Tiles per GPU of the paper's GEMM (§6.6).
GEMM_TILES = 100
#: Largest chunk split accepted; finer plans make the semantic check and the DAG needlessly big.
MAX_REFINE = 4096


@dataclass(frozen=True, slots=True)
class GemmInfo:
    """How a GEMM was merged into a plan.

    ``first_tb`` is the id of tile 0's threadblock on every GPU (the collective's threadblocks
    all have smaller ids); ``tile_bytes`` the bytes of one tile of one matrix; ``refine`` the
    factor the collective's chunks were split by; ``a_chunk``/``c_chunk`` the scratch offsets
    (in refined chunks) of the input and output matrices.
    """

    tiles: int
    gemm_bytes: int
    tile_bytes: int
    tile_chunks: int
    refine: int
    chunk_bytes: int
    first_tb: int
    a_chunk: int
    c_chunk: int


def _scale(value: int | None, factor: int) -> int | None:
    return None if value is None else value * factor


def refine_chunks(plan: Plan, factor: int) -> Plan:
    """``plan`` with every chunk split into ``factor`` consecutive chunks: same data flow and
    bytes, ``nchunksperloop``, buffer sizes, offsets and counts multiplied by ``factor``; a
    chunk placement becomes ``factor`` placements in the same order (so first-come-first-served
    page ownership is unchanged)."""
    if factor < 1:
        raise UsageError(f"chunk refinement factor must be >= 1, got {factor}")
    if factor == 1:
        return plan
    gpus = tuple(
        Gpu(g.id, g.input_chunks * factor, g.output_chunks * factor, g.scratch_chunks * factor,
            tuple(Threadblock(tb.id, tb.send_peer, tb.recv_peer, tb.channel,
                              tuple(dataclasses.replace(st, src_offset=_scale(st.src_offset, factor),
                                                        dst_offset=_scale(st.dst_offset, factor),
                                                        count=st.count * factor)
                                    for st in tb.steps))
                  for tb in g.threadblocks))
        for g in plan.gpus)
    chunks = tuple(ChunkPlacement(c.gpu, c.buffer, c.chunk * factor + k, c.stack)
                   for c in plan.placement.chunks for k in range(factor))
    placement = dataclasses.replace(plan.placement, chunks=chunks)
    return dataclasses.replace(plan, nchunksperloop=plan.nchunksperloop * factor, gpus=gpus,
                               placement=placement)


def gemm_cus(plan: Plan, spec: TopologySpec, tiles: int) -> tuple[int, ...]:
    """Naive CUs of the GEMM's ``tiles`` threadblocks on each GPU of ``plan`` (same on every
    GPU only when the collective occupies the same CUs on each): round-robin over dies, then
    the die's CUs in the baseline's neutral order, skipping CUs the collective occupies on
    *any* GPU (one list for all GPUs keeps the GEMM identical across the pod)."""
    geo = chip_geometry(spec.chip)
    dies = spec.chip.dies
    die_cus: list[list[int]] = [[] for _ in range(dies)]
    for cu, die in enumerate(geo.cu_die.tolist()):
        die_cus[die].append(cu)
    busy = set(placed_cus(plan, spec).values())
    free = [[cus[k] for k in neutral_order(len(cus)) if cus[k] not in busy] for cus in die_cus]
    out: list[int] = []
    for i in range(tiles):
        die, k = i % dies, i // dies
        order = free[die] or [die_cus[die][j] for j in neutral_order(len(die_cus[die]))]
        out.append(order[k % len(order)])
    return tuple(out)


def add_gemm(plan: Plan, spec: TopologySpec, size_bytes: int, gemm_bytes: int, *,
             tiles: int = GEMM_TILES) -> tuple[Plan, GemmInfo]:
    """``plan`` (already placed by a configuration, for a collective of ``size_bytes``) with a
    GEMM of ``tiles`` tiles per GPU whose matrices hold ``gemm_bytes`` each (see the module doc).

    Raises ``UsageError`` when the sizes do not split into whole tiles and chunks.
    """
    if tiles < 1:
        raise UsageError(f"a GEMM needs at least one tile, got {tiles}")
    if gemm_bytes <= 0 or gemm_bytes % tiles:
        raise UsageError(f"GEMM size {gemm_bytes} bytes does not split into {tiles} equal tiles")
    if size_bytes % plan.nchunksperloop:
        raise UsageError(f"collective size {size_bytes} bytes is not a whole number of the plan's "
                         f"{plan.nchunksperloop} chunks; the GEMM needs exact chunk bytes")
    tile_bytes = gemm_bytes // tiles
    coarse = size_bytes // plan.nchunksperloop
    fine = math.gcd(coarse, tile_bytes)
    refine = coarse // fine
    if refine > MAX_REFINE:
        raise UsageError(f"GEMM tiles of {tile_bytes} bytes need chunks of {fine} bytes "
                         f"({refine} per collective chunk of {coarse} bytes; at most {MAX_REFINE})")
    tile_chunks = tile_bytes // fine
    refined = refine_chunks(plan, refine)
    cus = gemm_cus(refined, spec, tiles)
    first_tb = 1 + max((tb.id for g in refined.gpus for tb in g.threadblocks), default=-1)
    gpus: list[Gpu] = []
    placements: list[TbPlacement] = []
    info: GemmInfo | None = None
    for g in refined.gpus:
        a_chunk = g.scratch_chunks
        c_chunk = a_chunk + tiles * tile_chunks
        info = GemmInfo(tiles, gemm_bytes, tile_bytes, tile_chunks, refine, fine, first_tb, a_chunk, c_chunk)
        new_tbs = tuple(
            Threadblock(first_tb + i, None, None, 0,
                        (Step(0, StepType.REDUCE, Buffer.SCRATCH, a_chunk + i * tile_chunks,
                              Buffer.SCRATCH, c_chunk + i * tile_chunks, tile_chunks),))
            for i in range(tiles))
        gpus.append(dataclasses.replace(g, scratch_chunks=c_chunk + tiles * tile_chunks,
                                        threadblocks=g.threadblocks + new_tbs))
        placements.extend(TbPlacement(g.id, first_tb + i, cus[i]) for i in range(tiles))
    if info is None:
        raise UsageError("plan has no GPUs")
    placement = dataclasses.replace(refined.placement,
                                    threadblocks=refined.placement.threadblocks + tuple(placements))
    merged = dataclasses.replace(refined, gpus=tuple(gpus), placement=placement)
    # the writer wants placements in document order; keep the merged plan dumpable
    return merged.with_placement(canonical_placement(merged)), info


def collective_time_ns(plan: Plan, result: SimResult, info: GemmInfo) -> float:
    """When the collective's own threadblocks finished (the latest end of their steps), as
    opposed to ``result.time_ns``, which also waits for the GEMM."""
    flat = flatten(plan)
    node_tb_id = flat.tb_id[flat.node_tb]
    mask = node_tb_id < info.first_tb
    if not mask.any():
        return 0.0
    return float(np.max(result.node_t_end[mask]))


def gemm_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep point function for Fig 14 (``nuna.experiments.gemm:gemm_point``): like
    :func:`nuna.experiments.points.simulate_point`, plus a GEMM of ``point["gemm_bytes"]``
    (none when 0). Adds ``collective_time_ns`` (the collective alone finishing) and ``gemm``
    (how the GEMM was built) to the simulator's JSON; its wall-clock figures go under ``timing``."""
    from nuna.experiments.points import check_files, point_payload, point_sim_options
    from nuna.passes import PassContext, apply_config
    from nuna.plan.generate import generate
    from nuna.sim import SimOptions, simulate
    from nuna.topology.spec import load_topology

    check_files(point)
    size_bytes = int(point["size_bytes"])
    seed = int(point["seed"])
    topology = load_topology(point["topology"])
    plan = generate(point["collective"], int(point["gpus"]), algo=point["algo"],
                    tbs_per_peer=int(point["tbs_per_peer"]))
    granularity = point.get("nar_granularity")
    options = SimOptions(**point_sim_options(point))
    plan = apply_config(plan, point["config"], PassContext(topology, size_bytes),
                        None if granularity in (None, "heuristic") else granularity, seed=seed,
                        packet_bytes=point["packet_bytes"], options=options)
    gemm_bytes = int(point.get("gemm_bytes", 0))
    info: GemmInfo | None = None
    if gemm_bytes:
        plan, info = add_gemm(plan, topology, size_bytes, gemm_bytes)
    result = simulate(plan, topology, size_bytes, packet_bytes=point["packet_bytes"], seed=seed,
                      options=options)
    payload = point_payload(result)
    payload["nar_granularity_used"] = plan.placement.nar_granularity
    payload["collective_time_ns"] = (collective_time_ns(plan, result, info) if info is not None
                                     else result.time_ns)
    payload["gemm"] = None if info is None else dataclasses.asdict(info)
    return payload
