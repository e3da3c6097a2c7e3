"""The compiled placements (``nuna.passes.firstfit``) against Algorithm 1 and the NUMA choice
written out here step by step in plain Python, with a first fit that scans every class every
time: the same threadblock CUs, chunk stacks (in order), overflows and loads, on generated plans
of every collective, granularity and size, NAP, NAP* and NUMA."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.passes import PassContext
from nuna.passes.access import ChunkKey, decompose
from nuna.passes.logical import LogicalGroup, logical_allocation
from nuna.passes.nap import (
    _domain_orders,
    chunk_demand_bytes,
    cu_budget_requests,
    nap_placement,
    spread_classes,
    stack_budget_bytes,
    tb_demand_requests,
)
from nuna.passes.nar import NarPass
from nuna.passes.numa import numa_cus
from nuna.plan.generate import generate
from nuna.plan.ir import Plan
from nuna.plan.verify import chunk_bytes_for
from nuna.plan.xml import load
from nuna.sim.layout import BaselineLayout, baseline_cus
from nuna.topology.address import nar_granularities, stacks_by_distance
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec, parse_topology
from tests.conftest import PLANS_MSCCL

NUNA_4DIE = (Path(__file__).resolve().parents[2] / "topologies" / "nuna-4die.toml").read_text()

Classes = tuple[tuple[int, ...], ...]


class _ScanFirstFit:
    """The rule with no memo: the first class whose least load is under the budget and fits
    the demand gives its least-loaded candidate (earliest among equals); else the least-loaded
    candidate of all."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.load: dict[tuple[int, int], int] = {}

    def _charge(self, gpu: int, r: int, amount: int) -> None:
        self.load[(gpu, r)] = self.load.get((gpu, r), 0) + amount

    def _least(self, gpu: int, candidates: list[int]) -> tuple[int, int]:
        low = min(self.load.get((gpu, r), 0) for r in candidates)
        return next(r for r in candidates if self.load.get((gpu, r), 0) == low), low

    def take(self, gpu: int, classes: Classes, demand: int) -> tuple[int, bool, int]:
        for cls in classes:
            r, low = self._least(gpu, list(cls))
            if low < self.budget and low + demand <= self.budget:
                self._charge(gpu, r, demand)
                return r, True, low
        r, low = self._least(gpu, [r for cls in classes for r in cls])
        self._charge(gpu, r, demand)
        return r, False, low

    def take_other(self, gpu: int, order: tuple[int, ...], demand: int, taken: tuple[int, ...]
                   ) -> tuple[int, bool, int]:
        rest = [r for r in order if r not in taken]
        for r in rest:
            have = self.load.get((gpu, r), 0)
            if have + demand <= self.budget:
                self._charge(gpu, r, demand)
                return r, True, have
        r, low = self._least(gpu, rest)
        self._charge(gpu, r, demand)
        return r, False, low

    def charge(self, gpu: int, rs: tuple[int, ...], amount: int) -> None:
        if amount:
            for r in rs:
                self._charge(gpu, r, amount)

    def loads(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(sorted((g, r, v) for (g, r), v in self.load.items()))


def _reference_nap(groups: tuple[LogicalGroup, ...], nar_max: int, spec: TopologySpec, chunk_bytes: int,
                   place_memory: bool) -> dict[str, Any]:
    """Algorithm 1 lines 11-22 as ``nuna.passes.nap`` documents it."""
    cus, stacks = _ScanFirstFit(cu_budget_requests(spec)), _ScanFirstFit(stack_budget_bytes(spec))
    c_demand = chunk_demand_bytes(chunk_bytes, spec)
    accesses = Counter(c for g in groups for m in g.members for c in m.access.chunks)
    chunk_pages = -(-chunk_bytes // spec.chip.page_bytes)
    stack_of: dict[ChunkKey, tuple[int, ...]] = {}
    pending: Counter[ChunkKey] = Counter()
    tbs, chunks, overflows = [], [], []
    for i, group in enumerate(groups):
        nar = i % nar_max
        cu_classes, near, own = _domain_orders(spec, nar_max)[nar]
        for member in group.members:
            acc = member.access
            demand = tb_demand_requests(acc, chunk_bytes, spec)
            cu, fitted, least = cus.take(acc.gpu, cu_classes, demand)
            tbs.append((acc.gpu, acc.tb, cu))
            if not fitted:
                overflows.append(("cu", acc.gpu, cu, demand, nar, least))
            if not place_memory:
                continue
            for chunk in acc.chunks:
                if chunk in stack_of:
                    stacks.charge(chunk.gpu, stack_of[chunk], -(-c_demand // len(stack_of[chunk])))
                elif chunk not in member.new_chunks:
                    pending[chunk] += 1
                else:
                    if chunk.gpu == acc.gpu:
                        order = tuple(s for s in stacks_by_distance(spec, cu) if s in own)
                    else:
                        order = tuple(c[0] for c in near)
                    k = min(-(-accesses[chunk] * c_demand // stacks.budget), chunk_pages, len(order))
                    share = -(-c_demand // k)
                    placed: tuple[int, ...] = ()
                    for n in range(k):
                        if n == 0:
                            s, fitted, least = stacks.take(chunk.gpu, tuple((r,) for r in order), share)
                        else:
                            s, fitted, least = stacks.take_other(chunk.gpu, order, share, placed)
                        if not fitted:
                            overflows.append(("stack", chunk.gpu, s, share, nar, least))
                        placed += (s,)
                    stack_of[chunk] = placed
                    stacks.charge(chunk.gpu, placed, share * pending.pop(chunk, 0))
                    chunks.extend((chunk.gpu, chunk.buffer, chunk.chunk, s) for s in placed)
    return {"tbs": tbs, "chunks": chunks, "overflows": overflows, "cu_load": cus.loads(),
            "stack_load": stacks.loads()}


def _reference_numa(plan: Plan, spec: TopologySpec, size_bytes: int) -> dict[tuple[int, int], int]:
    """The NUMA choice as ``nuna.passes.numa`` documents it."""
    geo = chip_geometry(spec.chip)
    round_trip = geo.cu_stack.latency_ns + geo.stack_cu.latency_ns.T
    layout = BaselineLayout(plan, spec, size_bytes, plan.placement.nar_granularity)
    base = baseline_cus(plan, spec)
    cus = _ScanFirstFit(cu_budget_requests(spec))
    out = {}
    for group in logical_allocation(decompose(plan)):
        for member in group.members:
            acc = member.access
            weights: dict[int, int] = defaultdict(int)
            for c in acc.local:
                for s, b in layout.chunk_stack_bytes(c.gpu, c.buffer, c.chunk).items():
                    weights[s] += b
            if not weights:
                out[(acc.gpu, acc.tb)] = base[(acc.gpu, acc.tb)]
                continue
            w = [weights.get(s, 0) / sum(weights.values()) for s in range(spec.chip.hbm_stacks)]
            classes = spread_classes(spec, round_trip @ w)
            demand = tb_demand_requests(acc, chunk_bytes_for(plan, size_bytes), spec)
            out[(acc.gpu, acc.tb)] = cus.take(acc.gpu, classes, demand)[0]
    return out


_PLANS = st.tuples(st.sampled_from(["allgather", "allreduce", "alltoall"]), st.sampled_from([2, 4, 8]),
                   st.sampled_from([1, 2, 16]), st.sampled_from([1, 7, 100_000, 1 << 20, 64 << 20, 1 << 30]))


@settings(max_examples=30, deadline=None)
@given(_PLANS, st.integers(0, 5), st.booleans())
def test_compiled_nap_places_as_algorithm_1_written_out(
        spec: TopologySpec, case: tuple[str, int, int, int], gi: int, place_memory: bool) -> None:
    collective, gpus, tbs, size = case
    plan = generate(collective, gpus, tbs_per_peer=tbs)
    size = max(size - size % plan.nchunksperloop, plan.nchunksperloop)
    g = nar_granularities(spec)[gi % len(nar_granularities(spec))]
    groups = logical_allocation(decompose(plan))
    got = nap_placement(plan, spec, size, g, place_memory=place_memory)
    want = _reference_nap(groups, g, spec, chunk_bytes_for(plan, size), place_memory)
    assert [(t.gpu, t.tb, t.cu) for t in got.threadblocks] == want["tbs"]
    assert [(c.gpu, c.buffer, c.chunk, c.stack) for c in got.chunks] == want["chunks"]
    assert [(o.kind, o.gpu, o.resource, o.demand, o.domain, o.least_load) for o in got.overflows] \
        == want["overflows"]
    assert got.cu_load == want["cu_load"]
    assert got.stack_load == want["stack_load"]
    assert got.tb_domain == tuple((gp, tb, i % g) for i, grp in enumerate(groups)
                                  for gp, tb in grp.threadblocks)


def test_compiled_nap_reaches_overflows_and_spread_chunks() -> None:
    # a case through every branch: oversubscribed CUs (one CU per router, 240 threadblocks a
    # GPU on 144 CUs), chunks spread over several stacks, chunks charged after they are placed
    text, n = re.subn(r"(?m)^(cus_per_router = \{ value = )[^,]+", r"\g<1>1", NUNA_4DIE)
    assert n == 1
    spec = parse_topology(text, "one-cu-per-router.toml")
    plan = generate("allreduce", 16, tbs_per_peer=16)
    size = 64 << 20
    got = nap_placement(plan, spec, size, 1)
    kinds = Counter(o.kind for o in got.overflows)
    spread = Counter((c.gpu, c.buffer, c.chunk) for c in got.chunks)
    assert kinds["cu"] > 0
    assert kinds["stack"] > 0
    assert max(spread.values()) > 1
    want = _reference_nap(logical_allocation(decompose(plan)), 1, spec, chunk_bytes_for(plan, size), True)
    assert [(t.gpu, t.tb, t.cu) for t in got.threadblocks] == want["tbs"]
    assert [(c.gpu, c.buffer, c.chunk, c.stack) for c in got.chunks] == want["chunks"]
    assert [(o.kind, o.gpu, o.resource, o.demand, o.domain, o.least_load) for o in got.overflows] \
        == want["overflows"]
    assert (got.cu_load, got.stack_load) == (want["cu_load"], want["stack_load"])


@settings(max_examples=15, deadline=None)
@given(_PLANS, st.integers(0, 5))
def test_compiled_numa_chooses_as_written_out(spec: TopologySpec, case: tuple[str, int, int, int],
                                              gi: int) -> None:
    collective, gpus, tbs, size = case
    plan = generate(collective, gpus, tbs_per_peer=tbs)
    size = max(size - size % plan.nchunksperloop, plan.nchunksperloop)
    g = nar_granularities(spec)[gi % len(nar_granularities(spec))]
    routed = NarPass(g).run(plan, PassContext(spec, size))
    got = numa_cus(routed, spec, size)
    assert list(got.items()) == list(_reference_numa(routed, spec, size).items())


@pytest.mark.parametrize("g", [1, 12])
def test_compiled_nap_is_deterministic_across_calls(spec: TopologySpec, g: int) -> None:
    # the domain arrays are cached per (topology, G): a second placement sees them unchanged
    plan = generate("alltoall", 4, tbs_per_peer=2)
    first = nap_placement(plan, spec, 1 << 20, g)
    assert nap_placement(plan, spec, 1 << 20, g) == first


# compiler-made plans whose groups touch chunks of groups placed after them (up to 8 pending
# accesses on one chunk), which generated direct plans never do
_PENDING = ("allgather_sccl-dgx1-s3r4c3_n8_i4_Simple.xml",
            "allreduce_hierarchical_n4_g2x2_manual_i2_Simple.xml",
            "allreduce_multinodeallpairs_n8_i1_LL.xml",
            "allreduce_sccl-dgx1-compose-s4r6c2_n8_i2_Simple.xml",
            "reducescatter_sccl-dgx1-s2r3c2_n8_i1_Simple.xml",
            "alltoall_autosynth-ndv2-relay_n16_i8_Simple.xml")


@pytest.mark.skipif(not PLANS_MSCCL.exists(), reason="shared plan corpus not available")
@pytest.mark.parametrize("name", _PENDING)
def test_compiled_placements_on_plans_with_chunks_charged_later(spec: TopologySpec, name: str) -> None:
    plan = load(PLANS_MSCCL / name)
    groups = logical_allocation(decompose(plan))
    for g, target in ((1, 64 << 20), (4, 1 << 20), (12, 100_000)):
        size = max(plan.nchunksperloop, target - target % plan.nchunksperloop)
        got = nap_placement(plan, spec, size, g)
        want = _reference_nap(groups, g, spec, chunk_bytes_for(plan, size), True)
        assert [(c.gpu, c.buffer, c.chunk, c.stack) for c in got.chunks] == want["chunks"]
        assert [(t.gpu, t.tb, t.cu) for t in got.threadblocks] == want["tbs"]
        assert (got.cu_load, got.stack_load) == (want["cu_load"], want["stack_load"])
        assert len(got.overflows) == len(want["overflows"])
    routed = NarPass(4).run(plan, PassContext(spec, 1 << 20))
    want_cus = _reference_numa(routed, spec, 1 << 20)
    assert list(numa_cus(routed, spec, 1 << 20).items()) == list(want_cus.items())
