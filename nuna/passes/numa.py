"""The NUMA pass: the paper's proxy for prior NUMA-aware placement (§5.3).

Memory stays where the baseline puts it (round-robin 4 KiB pages); each threadblock is
scheduled near the memory it accesses: Algorithm 1's CU choice (first CU in order of nearness
whose outstanding-request budget fits, among equally near CUs the least loaded, spread over
routers: :class:`nuna.passes.nap.FirstFit`) with the nearness measured
to the HBM stacks that hold the threadblock's local chunks, weighted by bytes, instead of to a
NAR domain's I/O ports. Threadblocks are taken in ``logical_allocation`` order, as NAP takes
them. I/O ports play no part: that is exactly what NUMA-aware placement lacks (§3.3). A
threadblock that touches no local chunk (it only receives) keeps its baseline CU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nuna.passes.access import decompose
from nuna.passes.base import PassContext, replace_placement
from nuna.passes.logical import LogicalGroup, logical_allocation
from nuna.passes.nap import Classes, FirstFit, cu_budget_requests, spread_classes, tb_demand_requests
from nuna.plan.ir import Buffer, Plan, TbPlacement
from nuna.plan.verify import chunk_bytes_for
from nuna.plan.xml import canonical_placement
from nuna.sim.layout import BaselineLayout, baseline_cus
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec


def numa_cus(plan: Plan, spec: TopologySpec, size_bytes: int,
             groups: Sequence[LogicalGroup] | None = None) -> dict[tuple[int, int], int]:
    """CU of every threadblock under the NUMA policy (see the module doc). ``groups``:
    ``logical_allocation(decompose(plan))`` when the caller has it (it depends on the program,
    not the placement)."""
    geo = chip_geometry(spec.chip)
    round_trip = geo.cu_stack.latency_ns + geo.stack_cu.latency_ns.T  # (C, S)
    chunk_bytes = chunk_bytes_for(plan, size_bytes)
    base = baseline_cus(plan, spec)
    cus = FirstFit(cu_budget_requests(spec))
    orders: dict[tuple[tuple[int, int], ...], tuple[int, Classes]] = {}  # signature -> (id, classes)
    out: dict[tuple[int, int], int] = {}
    # under NAR the pages are in the NAR segment (a NAR pass runs first in NUMA+NAR)
    layout = BaselineLayout(plan, spec, size_bytes, plan.placement.nar_granularity)
    # a chunk read by several threadblocks (a reduction's operands) is split over stacks once
    split: dict[tuple[int, Buffer, int], dict[int, int]] = {}
    for group in logical_allocation(decompose(plan)) if groups is None else groups:
        for member in group.members:
            acc = member.access
            weights: dict[int, int] = {}
            for c in acc.local:
                key = (c.gpu, c.buffer, c.chunk)
                per_stack = split.get(key)
                if per_stack is None:
                    per_stack = split[key] = layout.chunk_stack_bytes(c.gpu, c.buffer, c.chunk)
                for s, b in per_stack.items():
                    weights[s] = weights.get(s, 0) + b
            if not weights:
                out[(acc.gpu, acc.tb)] = base[(acc.gpu, acc.tb)]
                continue
            signature = tuple(sorted(weights.items()))
            known = orders.get(signature)
            if known is None:
                w = np.zeros(spec.chip.hbm_stacks)
                for s, b in signature:
                    w[s] = b
                known = (len(orders), spread_classes(spec, round_trip @ (w / w.sum())))
                orders[signature] = known
            cu, _, _ = cus.take(acc.gpu, known[1], tb_demand_requests(acc, chunk_bytes, spec), known[0])
            out[(acc.gpu, acc.tb)] = cu
    return out


@dataclass(frozen=True, slots=True)
class NumaPass:
    """NUMA: threadblocks near the (baseline-placed) memory they access; pages round-robin."""

    name: ClassVar[str] = "numa"

    def run(self, plan: Plan, ctx: PassContext) -> Plan:
        return self.place(plan, ctx, None)

    def place(self, plan: Plan, ctx: PassContext, groups: Sequence[LogicalGroup] | None) -> Plan:
        """:meth:`run` with ``logical_allocation(decompose(plan))`` given (``None``: computed
        here)."""
        cus = numa_cus(plan, ctx.topology, ctx.size_bytes, groups)
        tbs = tuple(TbPlacement(g, t, cu) for (g, t), cu in cus.items())
        out = replace_placement(plan, ctx, threadblocks=tbs, chunks=())
        return dataclasses.replace(out, placement=canonical_placement(out))
