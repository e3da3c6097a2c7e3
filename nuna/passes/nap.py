"""NUNA-aware placement (NAP, paper §4.2, Algorithm 1) and its threadblock-only variant NAP*.

Algorithm 1 in two phases, named as in the paper:

1. :func:`~nuna.passes.logical.logical_allocation` groups threadblocks with the chunks they
   access (:func:`~nuna.passes.access.decompose` gives ``W``) and sorts the groups by size.
2. :func:`physical_placement` deals the groups round-robin over the ``nar_max`` NAR domains
   and, per threadblock, takes the first CU in order of closeness to the domain's I/O ports
   whose remaining budget fits (:func:`domain_cu_classes`; among equally close CUs the least
   loaded, spread over routers: :class:`FirstFit`); per chunk, the nearest HBM stack of the
   domain whose remaining budget fits, and as many of the next nearest as the chunk's demand
   needs (below). Remote chunks (the ones a send stores into a peer) are
   placed on the peer near the *same port ordinals*: the Clos is rail-optimised, so a store
   leaving through port ``k`` arrives on port ``k`` of the peer, and both ends of the transfer
   are near.

Round-robin start. Algorithm 1 increments ``nar`` before placing a group (line 12), so its
first group would go to domain 1; the Fig 7 caption has threadblock ``w`` (first group) in
domain 0. We follow the caption: group ``i`` (in sorted order) goes to domain ``i mod nar_max``.

Budgets (``R_max`` of Algorithm 1, all from the topology):

- CU: ``max_outstanding_requests_per_cu`` (700) requests. A threadblock's demand is the number
  of flits (``flit_bytes``) of all the chunks it accesses, capped at ``R_max``: a threadblock
  can never have more requests in flight than its CU allows, so a large one claims a whole CU.
- HBM stack: the bandwidth-delay product ``hbm_stack_bandwidth_gbps x memory_access_latency_ns``
  (1000 GB/s x 120 ns = 120 kB on nuna-4die): the bytes a stack can have in flight before
  it saturates, with the paper's constant per-access memory latency (§5.1) as the delay. Every
  threadblock's access to a chunk charges the chunk's stack (Algorithm 1 line 18 charges per
  threadblock), with the chunk's size capped at the budget for the same reason as above; the
  stacks are chosen once, by the first access, later accesses only charge them.

A chunk's demand is that of all its accesses (known from ``W`` before placement). When it is
more than one stack's budget, "the nearest stack within its budget" does not exist: the chunk
goes to the nearest ``k = ceil(accesses x demand / budget)`` stacks of the domain that fit (at
most its pages and the domain's stacks), its pages dealt over them in turn, each charged its
share. Without this a large chunk read by many threadblocks (a GPU's own slice in a direct
allgather, read by one sender per peer) sat on one stack, whose bandwidth then bounded the
collective (``docs/passes.md``, Budgets).

When no candidate fits, the least-loaded candidate takes the item (lowest distance among
equals) and the overflow is recorded: the paper's "oversubscription of each NAR domain" (§6.1).
CUs are searched over the whole chip (a threadblock placed far only costs latency), stacks only
within the group's domain (a chunk outside it would, under NAR, route through another domain's
ports, breaking the group's locality).

Pages are 4 KiB and realised by the simulator from the chunk placements in the order they are
listed: the first chunk to touch a page fixes its stack (first come, first served, in
``logical_allocation`` processing order) and sub-page chunks share the first-chosen page.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from nuna.errors import PassError
from nuna.passes.access import ChunkKey, TbAccess, decompose
from nuna.passes.base import PassContext, replace_placement
from nuna.passes.logical import LogicalGroup, logical_allocation
from nuna.plan.ir import ChunkPlacement, Plan, TbPlacement
from nuna.plan.verify import chunk_bytes_for
from nuna.plan.xml import canonical_placement
from nuna.topology.address import (
    nar_domain_ports,
    nar_domain_stacks,
    nar_granularities,
    nearest_stacks,
    stacks_by_distance,
)
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec


def cu_budget_requests(spec: TopologySpec) -> int:
    """``R_max`` of a CU: outstanding requests it can have in flight."""
    return spec.chip.max_outstanding_requests_per_cu


def stack_budget_bytes(spec: TopologySpec) -> int:
    """``R_max`` of an HBM stack: its bandwidth-delay product in bytes (see the module doc), at
    least a flit (a stack always admits a line: a product under one byte divided by zero) and at
    most 2**62 (an ideal stack, of inf bandwidth, has no budget to speak of)."""
    chip = spec.chip
    if math.isinf(chip.hbm_stack_bandwidth_gbps):  # ideal, whatever its latency (inf x 0 is nan)
        return 1 << 62
    product = chip.hbm_stack_bandwidth_gbps * chip.memory_access_latency_ns
    return max(chip.flit_bytes, int(min(product, 2.0**62)))


def tb_demand_requests(access: TbAccess, chunk_bytes: int, spec: TopologySpec) -> int:
    """Requests a threadblock adds to its CU: flits of the chunks it accesses, capped at R_max."""
    flits_per_chunk = -(-chunk_bytes // spec.chip.flit_bytes)
    return min(len(access.chunks) * flits_per_chunk, cu_budget_requests(spec))


def chunk_demand_bytes(chunk_bytes: int, spec: TopologySpec) -> int:
    """Bytes a chunk adds to its stack's budget, capped at the budget."""
    return min(chunk_bytes, stack_budget_bytes(spec))


def finest_granularity(spec: TopologySpec) -> int:
    """The largest valid NAR granularity (one domain per smallest port group)."""
    return nar_granularities(spec)[-1]


@dataclass(frozen=True, slots=True)
class Overflow:
    """An item placed although no candidate had room for it: ``kind`` ``"cu"`` (candidates: all
    CUs of ``gpu``) or ``"stack"`` (candidates: the stacks of ``domain``); ``least_load`` is the
    smallest load among the candidates at that moment (so ``least_load + demand > budget``)."""

    kind: str
    gpu: int
    resource: int
    demand: int
    domain: int
    least_load: int


@dataclass(frozen=True, slots=True)
class NapPlacement:
    """Result of Algorithm 1: ``M_compute`` (``threadblocks``) and ``M_memory`` (``chunks``, in
    first-come-first-served order), the domain of every group and threadblock, and the budget
    bookkeeping (final loads and overflows) for inspection and tests."""

    domains: int
    groups: tuple[LogicalGroup, ...]
    group_domain: tuple[int, ...]
    threadblocks: tuple[TbPlacement, ...]
    chunks: tuple[ChunkPlacement, ...]
    tb_domain: tuple[tuple[int, int, int], ...]   # (gpu, tb, domain)
    tb_demand: tuple[tuple[int, int, int], ...]   # (gpu, tb, requests)
    chunk_demand_bytes: int  # per access: every threadblock touching a chunk loads its stack
    cu_budget: int
    stack_budget: int
    cu_load: tuple[tuple[int, int, int], ...]     # (gpu, cu, requests), loaded CUs only
    stack_load: tuple[tuple[int, int, int], ...]  # (gpu, stack, bytes), loaded stacks only
    overflows: tuple[Overflow, ...]


#: Candidates of a placement choice: classes of equally near resources, nearest class first,
#: each in its spread order (see :class:`FirstFit`).
Classes = tuple[tuple[int, ...], ...]


def singletons(order: tuple[int, ...]) -> Classes:
    """A strict order (no ties) as candidate classes."""
    return tuple((r,) for r in order)


class FirstFit:
    """Per-GPU loads of one resource kind, with first-fit over classes of equally near candidates.

    Algorithm 1 takes "the first CU whose incremental load fits", in the order physically
    closer to the I/O ports; the paper does not order CUs that are *equally* close. Within a
    class of equally near candidates we take the least-loaded one that fits (ties: the class's
    spread order), which is the dispatcher's own rule for the CUs an affinity mask leaves
    open: it "launches threadblocks to a subset of preferred CU(s)" (§4.2.3) and "prioritizes
    free CUs for load balancing" (§5.3). A class of one candidate is plain first-fit.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        # per GPU, resource -> load: a dict per GPU, as keying one dict by (gpu, resource) built
        # a tuple per candidate looked at (the NAR heuristic places a plan at every G)
        self._load: defaultdict[int, dict[int, int]] = defaultdict(dict)
        # first class that may still have room, per (gpu, candidate list name); loads only
        # grow, so a class whose every member is full stays full and later scans can skip it
        self._start: dict[tuple[int, int], int] = {}
        # (load, position, resource) heaps: per (gpu, list name, class) for the classes of more
        # than _SCAN candidates, per (gpu, list name, -1) over the whole list for _least
        self._heaps: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}

    #: A class of at most this many candidates is scanned; a larger one has a heap. Classes of
    #: CUs hold 7-42 CUs on nuna-4die, stack orders are singletons.
    _SCAN = 4

    def take(self, gpu: int, classes: Classes, demand: int, order_key: int) -> tuple[int, bool, int]:
        """Choose a resource for ``demand`` among ``classes`` (named ``order_key``: the same key
        must always come with the same classes) and charge it; returns the resource, whether it
        fitted and, when it did not, the least load among the candidates before the charge."""
        key = (gpu, order_key)
        load = self._load[gpu]
        budget = self.budget
        start = self._start.get(key, 0)
        leading = True  # still in the run of full classes the scan starts with
        for i in range(start, len(classes)):
            cls = classes[i]
            big = len(cls) > self._SCAN
            if big:
                heap = self._heap((gpu, order_key, i), load, cls)
                least, pos, best = heap[0]
            elif len(cls) == 1:  # stack orders: the scan below, of one candidate
                best = cls[0]
                least, pos = load.get(best, 0), 0
            else:  # the same choice as the heap's, by a scan
                least, pos, best = budget + 1, -1, -1
                for j, r in enumerate(cls):
                    have = load.get(r, 0)
                    if have < least:
                        least, pos, best = have, j, r
                        if have == 0:
                            break
            # the least-loaded candidate fits if any does; it is the full class's test too
            if leading:
                if least >= budget:
                    start = i + 1
                    continue
                leading = False
                self._start[key] = start
            if least + demand <= budget:
                load[best] = least + demand
                if big:
                    heapq.heapreplace(heap, (least + demand, pos, best))
                return best, True, least
        if leading:
            self._start[key] = start
        return self._least((gpu, order_key, -1), load, (r for c in classes for r in c), demand)

    def take_other(self, gpu: int, classes: Classes, demand: int,
                   taken: tuple[int, ...]) -> tuple[int, bool, int]:
        """:meth:`take` among the candidates not in ``taken`` (the further stacks of a chunk
        spread over several)."""
        rest = tuple(c for c in (tuple(r for r in cls if r not in taken) for cls in classes) if c)
        load = self._load[gpu]
        budget = self.budget
        for cls in rest:  # the least-loaded candidate of a class fits if any does
            least, _, best = min((load.get(r, 0), j, r) for j, r in enumerate(cls))
            if least + demand <= budget:
                load[best] = least + demand
                return best, True, least
        chosen = min((r for cls in rest for r in cls), key=lambda r: load.get(r, 0))
        least = load.get(chosen, 0)
        load[chosen] = least + demand
        return chosen, False, least

    def _heap(self, key: tuple[int, int, int], load: dict[int, int], candidates: Iterable[int]
              ) -> list[tuple[int, int, int]]:
        """The ``(load, position, resource)`` heap of ``candidates`` named ``key`` (read only
        the first time), its top brought up to date. Loads only grow (:meth:`charge`), so an
        entry is stale only by being too low: refreshed as it reaches the top, the top is the
        least load, the earliest position among equals, exactly what a scan in order picks."""
        heap = self._heaps.get(key)
        if heap is None:
            heap = [(load.get(r, 0), j, r) for j, r in enumerate(candidates)]
            heapq.heapify(heap)
            self._heaps[key] = heap
        while True:
            least, j, r = heap[0]
            now = load.get(r, 0)
            if now == least:
                return heap
            heapq.heapreplace(heap, (now, j, r))

    def _least(self, key: tuple[int, int, int], load: dict[int, int], candidates: Iterable[int],
               demand: int) -> tuple[int, bool, int]:
        """No candidate fits: the least-loaded one takes it, the earliest (nearest) among equals
        (oversubscribed GPUs, many threadblocks per peer, come here for most of their
        threadblocks: a heap, where a scan of every CU each time was most of a placement's cost)."""
        heap = self._heap(key, load, candidates)
        least, j, r = heap[0]
        load[r] = least + demand
        heapq.heapreplace(heap, (least + demand, j, r))
        return r, False, least

    def charge(self, gpu: int, resources: Iterable[int], amount: int) -> None:
        """Add ``amount`` to each of ``resources`` without a placement decision (a further
        access to a chunk placed before)."""
        if amount < 0:
            raise ValueError("a load only grows (the heaps of _least rely on it)")
        if amount:
            load = self._load[gpu]
            for r in resources:
                load[r] = load.get(r, 0) + amount

    def loads(self) -> tuple[tuple[int, int, int], ...]:
        """``(gpu, resource, load)`` of every resource charged, sorted."""
        return tuple(sorted((g, r, v) for g, load in self._load.items() for r, v in load.items()))


def spread_classes(spec: TopologySpec, *keys_ns: npt.NDArray[np.float64]) -> Classes:
    """All CUs as classes of equal keys (one value per CU per key, compared in order, each
    rounded to 1e-6 ns so that float summation order cannot split a tie), nearest class first.

    Within a class the spread order deals the class's routers round-robin (routers by index):
    the first CU of every router, then the second, and so on. The CUs of one router share its
    mesh links, so equally near threadblocks go to different routers before they double up."""
    n = spec.chip.cus
    rounded = np.stack([np.round(np.asarray(k, dtype=np.float64), 6) for k in keys_ns], axis=1)
    _, cls = np.unique(rounded, axis=0, return_inverse=True)  # class ids in ascending key order
    cls = cls.reshape(-1)
    cu = np.arange(n)
    router = cu // spec.chip.cus_per_router
    # a CU's rank among its router's CUs in the same class (CUs in index order)
    by_group = np.lexsort((cu, router, cls))
    first = np.ones(n, dtype=bool)
    first[1:] = (cls[by_group][1:] != cls[by_group][:-1]) | (router[by_group][1:] != router[by_group][:-1])
    starts = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    rank = np.empty(n, dtype=np.int64)
    rank[by_group] = np.arange(n) - starts
    order = np.lexsort((router, rank, cls))
    bounds = np.flatnonzero(np.diff(cls[order])) + 1
    return tuple(tuple(part.tolist()) for part in np.split(order, bounds))


def domain_cu_classes(spec: TopologySpec, ports: tuple[int, ...]) -> Classes:
    """CUs by physical closeness to a NAR domain's I/O ports, as Algorithm 1 orders them.

    The key is the mean CU -> port latency over the domain's ports (the expected latency of a
    store hashed over them, what NAR minimises), then, among equals, the latency to the nearest
    port of the domain. The second key matters where the mean is flat along the chip: a domain
    with ports on both short edges (G = 1, and the corner domain at G = 3) is equally far, in
    expectation, from every column, and would otherwise place its threadblocks anywhere along
    the chip (or, with ties to the lower index, all on die 0). Nearest-port latency sends
    them outwards, to the routers of the domain's ports on both edges: the paper places
    threadblocks "closer to the I/O ports (i.e., outwards to the socket)" (§4.2) and keeps
    doing so when traffic is hashed over every port (§6.3).
    """
    geo = chip_geometry(spec.chip)
    lat = geo.cu_port.latency_ns[:, list(ports)]
    return spread_classes(spec, lat.mean(axis=1), lat.min(axis=1))


_DomainOrder = tuple[Classes, Classes, frozenset[int]]


@functools.cache  # a memo of a pure function of frozen values
def _domain_orders(spec: TopologySpec, g: int) -> tuple[_DomainOrder, ...]:
    """Per domain: CU classes by closeness to its ports, its stacks by distance to its ports,
    its stacks."""
    out = []
    for ports, stacks in zip(nar_domain_ports(spec, g), nar_domain_stacks(spec, g), strict=True):
        own = frozenset(stacks)
        near = singletons(tuple(s for s in nearest_stacks(spec, ports) if s in own))
        out.append((domain_cu_classes(spec, ports), near, own))
    return tuple(out)


def physical_placement(groups: Sequence[LogicalGroup], nar_max: int, spec: TopologySpec, chunk_bytes: int,
                       *, place_memory: bool = True) -> NapPlacement:
    """Algorithm 1 lines 11-22 over ``groups`` (already sorted by ``logical_allocation``).

    ``place_memory=False`` is NAP*: threadblocks are placed as NAP places them (budgets and all),
    chunks are left to the baseline round-robin page policy.
    """
    if nar_max not in nar_granularities(spec):
        valid = ", ".join(str(v) for v in nar_granularities(spec))
        raise PassError(f"nap: {nar_max} NAR domains is not a valid granularity for {spec.name} "
                        f"(valid: {valid})")
    orders = _domain_orders(spec, nar_max)
    cus = FirstFit(cu_budget_requests(spec))
    stacks = FirstFit(stack_budget_bytes(spec))
    c_demand = chunk_demand_bytes(chunk_bytes, spec)
    tb_out: list[TbPlacement] = []
    chunk_out: list[ChunkPlacement] = []
    tb_domain: list[tuple[int, int, int]] = []
    tb_demand: list[tuple[int, int, int]] = []
    overflows: list[Overflow] = []
    group_domain: list[int] = []
    stack_of: dict[ChunkKey, tuple[int, ...]] = {}
    pending: dict[ChunkKey, int] = {}  # accesses to chunks of groups placed later
    # every access's demand, known before placement (NAP* places no memory and needs none)
    accesses = Counter(c for group in groups for m in group.members for c in m.access.chunks) \
        if place_memory else Counter()
    chunk_pages = -(-chunk_bytes // spec.chip.page_bytes)
    near_cu: dict[tuple[int, int], Classes] = {}  # (cu, domain) -> the domain's stacks by distance
    # tb_demand_requests, which depends only on a threadblock's chunk count (the loop below runs
    # once per threadblock per candidate granularity of the NAR heuristic: hoisted)
    demand_of: dict[int, int] = {}
    for i, group in enumerate(groups):
        nar = i % nar_max  # Fig 7 caption: the first group uses domain 0 (see the module doc)
        group_domain.append(nar)
        cu_order, port_stacks, own_stacks = orders[nar]
        for member in group.members:
            acc = member.access
            demand = demand_of.get(len(acc.chunks))
            if demand is None:
                demand = demand_of[len(acc.chunks)] = tb_demand_requests(acc, chunk_bytes, spec)
            cu, fitted, least = cus.take(acc.gpu, cu_order, demand, nar)
            if not fitted:
                overflows.append(Overflow("cu", acc.gpu, cu, demand, nar, least))
            tb_out.append(TbPlacement(acc.gpu, acc.tb, cu))
            tb_domain.append((acc.gpu, acc.tb, nar))
            tb_demand.append((acc.gpu, acc.tb, demand))
            if not place_memory:
                continue
            new = frozenset(member.new_chunks)  # a threadblock of a ring plan touches hundreds
            for chunk in acc.chunks:
                placed = stack_of.get(chunk)
                if placed is not None:  # placed before: this access still loads its stacks
                    stacks.charge(chunk.gpu, placed, -(-c_demand // len(placed)))
                    continue
                if chunk not in new:  # another group's chunk, not placed yet: charge it then
                    pending[chunk] = pending.get(chunk, 0) + 1
                    continue
                if chunk.gpu == acc.gpu:  # local: the CU's nearest stack of the domain
                    order = near_cu.get((cu, nar))
                    if order is None:
                        order = singletons(tuple(s for s in stacks_by_distance(spec, cu) if s in own_stacks))
                        near_cu[(cu, nar)] = order
                    order_key = nar_max + cu * nar_max + nar
                else:  # remote: near the same port ordinals on the peer
                    order, order_key = port_stacks, nar
                # stack orders are singletons: one candidate per class
                k = min(-(-accesses[chunk] * c_demand // stacks.budget), chunk_pages, len(order))
                share = -(-c_demand // k)
                stack, fitted, least = stacks.take(chunk.gpu, order, share, order_key)
                if not fitted:
                    overflows.append(Overflow("stack", chunk.gpu, stack, share, nar, least))
                placed = (stack,)
                for _ in range(k - 1):
                    stack, fitted, least = stacks.take_other(chunk.gpu, order, share, placed)
                    if not fitted:
                        overflows.append(Overflow("stack", chunk.gpu, stack, share, nar, least))
                    placed += (stack,)
                stack_of[chunk] = placed
                stacks.charge(chunk.gpu, placed, share * pending.pop(chunk, 0))
                for stack in placed:
                    chunk_out.append(ChunkPlacement(chunk.gpu, chunk.buffer, chunk.chunk, stack))
    return NapPlacement(
        domains=nar_max, groups=tuple(groups), group_domain=tuple(group_domain),
        threadblocks=tuple(tb_out), chunks=tuple(chunk_out), tb_domain=tuple(tb_domain),
        tb_demand=tuple(tb_demand), chunk_demand_bytes=c_demand, cu_budget=cus.budget,
        stack_budget=stacks.budget, cu_load=cus.loads(), stack_load=stacks.loads(),
        overflows=tuple(overflows),
    )


def nap_placement(plan: Plan, spec: TopologySpec, size_bytes: int, nar_max: int, *,
                  place_memory: bool = True) -> NapPlacement:
    """Algorithm 1 on ``plan`` for a collective of ``size_bytes``: decomposition,
    ``logical_allocation``, ``physical_placement``."""
    groups = logical_allocation(decompose(plan))
    return physical_placement(groups, nar_max, spec, chunk_bytes_for(plan, size_bytes),
                              place_memory=place_memory)


def _domains_for(plan: Plan, explicit: int | None, spec: TopologySpec, who: str) -> int:
    """``nar_max``: the plan's NAR granularity when a NAR pass set one, else ``explicit``, else
    the finest granularity of the topology. NAP without NAR still deals groups over domains; the
    finest granularity spreads them over the most distinct places along the chip's edges, and
    it is the granularity NAP+NAR uses for latency-bound sizes, so NAP and NAP+NAR differ only
    in routing there (the paper's isolation study, Fig 11)."""
    routed = plan.placement.nar_granularity
    if routed is not None:  # 1 = routed over all ports, one domain: Algorithm 1 with nar_max = 1
        if explicit is not None and explicit != routed:
            raise PassError(f"{who}: domains={explicit} but the plan is routed with NAR granularity {routed}")
        return routed
    return explicit if explicit is not None else finest_granularity(spec)


@dataclass(frozen=True, slots=True)
class NapPass:
    """NAP: threadblocks near the I/O ports of their NAR domain and the chunks they access in
    the domain's nearest HBM stacks, on both ends of every remote store (Algorithm 1).

    ``domains`` is ``nar_max``. ``None``: the plan's NAR granularity if a NAR pass ran first,
    else the topology's finest granularity.
    """

    name: ClassVar[str] = "nap"
    domains: int | None = None

    def run(self, plan: Plan, ctx: PassContext) -> Plan:
        nar_max = _domains_for(plan, self.domains, ctx.topology, self.name)
        return annotate(plan, ctx, nap_placement(plan, ctx.topology, ctx.size_bytes, nar_max))


@dataclass(frozen=True, slots=True)
class NapStarPass:
    """NAP*: NAP's threadblock placement with the baseline round-robin memory placement."""

    name: ClassVar[str] = "nap*"
    domains: int | None = None

    def run(self, plan: Plan, ctx: PassContext) -> Plan:
        nar_max = _domains_for(plan, self.domains, ctx.topology, self.name)
        result = nap_placement(plan, ctx.topology, ctx.size_bytes, nar_max, place_memory=False)
        return annotate(plan, ctx, result)


def annotate(plan: Plan, ctx: PassContext, result: NapPlacement) -> Plan:
    """``plan`` carrying ``result`` (NAP*: ``result.chunks`` is empty) in the order the XML
    stores entries, so that it reads back identically (chunk order within a GPU, the
    first-come-first-served order, is kept)."""
    out = replace_placement(plan, ctx, threadblocks=result.threadblocks, chunks=result.chunks)
    return dataclasses.replace(out, placement=canonical_placement(out))
