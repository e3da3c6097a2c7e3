"""The NUMA pass: the paper's proxy for prior NUMA-aware placement (§5.3).

Memory stays where the baseline puts it (round-robin 4 KiB pages); each threadblock is
scheduled near the memory it accesses: Algorithm 1's CU choice (first CU in order of nearness
whose outstanding-request budget fits, among equally near CUs the least loaded, spread over
routers: "First fit" in :mod:`nuna.passes.nap`) with the nearness measured
to the HBM stacks that hold the threadblock's local chunks, weighted by bytes, instead of to a
NAR domain's I/O ports. Threadblocks are taken in ``logical_allocation`` order, as NAP takes
them. I/O ports play no part: that is exactly what NUMA-aware placement lacks (§3.3). A
threadblock that touches no local chunk (it only receives) keeps its baseline CU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from nuna.passes.base import PassContext, replace_placement
from nuna.passes.nap import (
    cu_budget_requests,
    nap_groups,
    spread_class_arrays,
    tb_demand_requests_each,
)
from nuna.plan.ir import Plan, TbPlacement
from nuna.plan.verify import chunk_bytes_for
from nuna.plan.xml import canonical_placement
from nuna.sim.layout import BaselineLayout, baseline_cus
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec


def numa_cus(plan: Plan, spec: TopologySpec, size_bytes: int) -> dict[tuple[int, int], int]:
    """CU of every threadblock under the NUMA policy (see the module doc), in the order of the
    logical groups (``nap.nap_groups``: made once per program, shared by every ``G``)."""
    from nuna.passes import firstfit  # numba: loaded when a plan is placed, not on import

    work = nap_groups(plan)[1]
    geo = chip_geometry(spec.chip)
    round_trip = geo.cu_stack.latency_ns + geo.stack_cu.latency_ns.T  # (C, S)
    chunk_bytes = chunk_bytes_for(plan, size_bytes)
    base = baseline_cus(plan, spec)
    # under NAR the pages are in the NAR segment (a NAR pass runs first in NUMA+NAR)
    layout = BaselineLayout(plan, spec, size_bytes, plan.placement.nar_granularity)
    n_members = work.m_gpu.shape[0]
    member = np.repeat(np.arange(n_members), work.m_count)  # per access
    local = work.c_gpu[work.m_chunk] == work.m_gpu[member]
    # bytes per stack of every chunk a threadblock touches on its own GPU (a reduction's operand
    # read by several threadblocks counted once), summed per threadblock
    chunks, row = np.unique(work.m_chunk[local], return_inverse=True)
    gpu_of, buffer_of, id_of = work.chunk_columns
    per_chunk = layout.chunk_stack_matrix([gpu_of[c] for c in chunks.tolist()],
                                          [buffer_of[c] for c in chunks.tolist()],
                                          np.asarray([id_of[c] for c in chunks.tolist()], dtype=np.int64))
    weights = np.zeros((n_members, spec.chip.hbm_stacks), dtype=np.int64)
    np.add.at(weights, member[local], per_chunk[row.reshape(-1)])
    placed = np.flatnonzero(weights.any(axis=1))  # the others touch no local chunk: baseline CU
    demand = tb_demand_requests_each(work.m_count, chunk_bytes, spec)
    cu = np.full(n_members, -1, dtype=np.int64)
    if placed.shape[0]:
        # one candidate list per distinct weighting (a row of integer bytes, compared exactly,
        # as bytes: sorting the rows with np.unique(axis=0) was 0.24 s of the call's 0.50 s
        # under cProfile on the 64-GPU 16-per-peer allreduce, 0.41 s without; numbered by a
        # dict, the call takes 0.19 s)
        rows = np.ascontiguousarray(weights[placed])
        first: dict[Any, int] = {}
        which = np.fromiter((first.setdefault(key, len(first)) for key in
                             rows.view(np.dtype((np.void, rows.shape[1] * 8))).ravel().tolist()),
                            dtype=np.int64, count=rows.shape[0])
        keys = []
        for i in np.unique(which, return_index=True)[1].tolist():
            w = rows[i].astype(np.float64)
            keys.append(round_trip @ (w / w.sum()))  # a product per row: BLAS sums as it always did
        cand, ptr, bounds = spread_class_arrays(spec, np.stack(keys))
        cu[placed] = firstfit.take_each(work.m_gpu[placed], which, demand[placed], cand, ptr, bounds,
                                        cu_budget_requests(spec), spec.chip.cus)
    ids = work.gpu_ids
    out: dict[tuple[int, int], int] = {}
    for g, tb, c in zip(work.m_gpu.tolist(), work.m_tb.tolist(), cu.tolist(), strict=True):
        out[(ids[g], tb)] = base[(ids[g], tb)] if c < 0 else c
    return out


@dataclass(frozen=True, slots=True)
class NumaPass:
    """NUMA: threadblocks near the (baseline-placed) memory they access; pages round-robin."""

    name: ClassVar[str] = "numa"

    def run(self, plan: Plan, ctx: PassContext) -> Plan:
        cus = numa_cus(plan, ctx.topology, ctx.size_bytes)
        tbs = tuple(TbPlacement(g, t, cu) for (g, t), cu in cus.items())
        out = replace_placement(plan, ctx, threadblocks=tbs, chunks=())
        return out.with_placement(canonical_placement(out))
