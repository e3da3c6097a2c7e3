"""NUNA-aware placement (NAP, paper §4.2, Algorithm 1) and its threadblock-only variant NAP*.

Algorithm 1 in two phases, named as in the paper:

1. :func:`~nuna.passes.logical.logical_allocation` groups threadblocks with the chunks they
   access (:func:`~nuna.passes.access.decompose` gives ``W``) and sorts the groups by size.
2. :func:`physical_placement` deals the groups round-robin over the ``nar_max`` NAR domains
   and, per threadblock, takes the first CU in order of closeness to the domain's I/O ports
   whose remaining budget fits (:func:`domain_cu_classes`; among equally close CUs the least
   loaded, spread over routers: "First fit" below); per chunk, the nearest HBM stack of the
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

First fit. Algorithm 1 takes "the first CU whose incremental load fits", in the order
physically closer to the I/O ports; the paper does not order CUs that are *equally* close.
Within a class of equally near candidates we take the least-loaded one that fits (ties: the
class's spread order, :func:`spread_classes`), which is the dispatcher's own rule for the CUs
an affinity mask leaves open: it "launches threadblocks to a subset of preferred CU(s)"
(§4.2.3) and "prioritizes free CUs for load balancing" (§5.3). A class of one candidate is
plain first-fit. The loops over every threadblock and chunk are compiled
(:mod:`nuna.passes.firstfit`): the NAR heuristic places a plan at every granularity.

Pages are 4 KiB and realised by the simulator from the chunk placements in the order they are
listed: the first chunk to touch a page fixes its stack (first come, first served, in
``logical_allocation`` processing order) and sub-page chunks share the first-chosen page.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from nuna.errors import PassError
from nuna.passes.access import ChunkKey, TbAccess, decompose
from nuna.passes.base import PassContext, replace_placement
from nuna.passes.logical import LogicalGroup, logical_allocation
from nuna.plan.ir import Buffer, ChunkPlacement, Plan, TbPlacement
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


def tb_demand_requests_each(chunk_counts: npt.NDArray[np.int64], chunk_bytes: int,
                            spec: TopologySpec) -> npt.NDArray[np.int64]:
    """:func:`tb_demand_requests` of threadblocks accessing ``chunk_counts`` chunks each."""
    flits_per_chunk = -(-chunk_bytes // spec.chip.flit_bytes)
    return np.minimum(chunk_counts * flits_per_chunk, cu_budget_requests(spec))


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
#: each in its spread order (see "First fit" in the module doc).
Classes = tuple[tuple[int, ...], ...]


def singletons(order: tuple[int, ...]) -> Classes:
    """A strict order (no ties) as candidate classes."""
    return tuple((r,) for r in order)


def spread_classes(spec: TopologySpec, *keys_ns: npt.NDArray[np.float64]) -> Classes:
    """All CUs as classes of equal keys (one value per CU per key, compared in order, each
    rounded to 1e-6 ns so that float summation order cannot split a tie), nearest class first.

    Within a class the spread order deals the class's routers round-robin (routers by index):
    the first CU of every router, then the second, and so on. The CUs of one router share its
    mesh links, so equally near threadblocks go to different routers before they double up."""
    rounded = np.stack([np.round(np.asarray(k, dtype=np.float64), 6) for k in keys_ns], axis=1)
    _, cls = np.unique(rounded, axis=0, return_inverse=True)  # class ids in ascending key order
    cand, ptr, _ = _spread_order(spec, cls.reshape(1, -1))
    return tuple(tuple(cand[a:b].tolist()) for a, b in itertools.pairwise(ptr.tolist()))


def spread_class_arrays(spec: TopologySpec, keys_ns: npt.NDArray[np.float64]
                        ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`spread_classes` of every row of ``keys_ns`` (one key per CU), all at once, laid out
    as ``firstfit.class_arrays`` lays candidate lists out (:func:`_spread_order`). NUMA asks
    for one list per distinct weighting of the stacks, about 800 for each ``G`` of a 64-GPU
    allreduce at 16 threadblocks per peer: one call each took 0.66 ms, 3.2 s of the
    heuristic's six placements; all at once, 75-94 ms for ``G``."""
    keys = np.round(np.asarray(keys_ns, dtype=np.float64).reshape(-1, spec.chip.cus), 6)
    # class ids in ascending key order, as np.unique numbers them (equal keys, one class: the
    # sort need not be stable)
    by_key = np.argsort(keys, axis=1)
    cls = np.empty(keys.shape, dtype=np.int64)
    np.put_along_axis(cls, by_key, np.cumsum(_starts(np.take_along_axis(keys, by_key, axis=1)), axis=1) - 1,
                      axis=1)
    return _spread_order(spec, cls)


def _starts(sorted_rows: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Per row, where a run of equal values starts."""
    first = np.ones(sorted_rows.shape, dtype=np.bool_)
    first[:, 1:] = sorted_rows[:, 1:] != sorted_rows[:, :-1]
    return first


def _spread_order(spec: TopologySpec, cls: npt.NDArray[np.int64]
                  ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The spread order of every row of CU class ids ``cls`` (``rows x CUs``, ids from 0 in
    ascending key order): ``(cand, ptr, bounds)``, row ``l``'s classes are
    ``bounds[l]..bounds[l + 1]-1`` of ``(cand, ptr)``, class ``c``'s CUs
    ``cand[ptr[c]:ptr[c + 1]]`` in the order :func:`spread_classes` documents."""
    rows, n = cls.shape
    routers, per_router = spec.chip.routers, spec.chip.cus_per_router
    # a CU's rank among its router's CUs in the same class, CUs in index order (a router's CUs
    # are consecutive: compare each with the ones before it on its router)
    by_router = cls.reshape(rows, routers, per_router)
    rank = np.zeros((rows, routers, per_router), dtype=np.int64)
    for j in range(1, per_router):
        rank[:, :, j] = (by_router[:, :, :j] == by_router[:, :, j:j + 1]).sum(axis=2)
    # class, then rank, then router (a CU's triple is its own)
    router = np.arange(n) // per_router
    order = np.argsort((cls * per_router + rank.reshape(rows, n)) * routers + router, axis=1)
    class_start = _starts(np.take_along_axis(cls, order, axis=1))
    ptr = np.append(np.flatnonzero(class_start.ravel()), rows * n).astype(np.int64)
    bounds = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(class_start.sum(axis=1), out=bounds[1:])
    return order.ravel().astype(np.int64), ptr, bounds


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


@dataclass(frozen=True, slots=True)
class NapWorkload:
    """Logical groups as the compiled placement reads them (:func:`nap_workload`): what does not
    depend on the granularity, built once for every ``G`` the NAR heuristic tries. GPUs are
    indices into ``gpu_ids`` (ascending), chunks numbered in order of first access; members in
    group order. The arrays are read-only."""

    gpu_ids: tuple[int, ...]
    m_gpu: npt.NDArray[np.int64]     # per member: its GPU's index
    m_tb: npt.NDArray[np.int64]      # per member: its threadblock id
    m_group: npt.NDArray[np.int64]   # per member: its group's index in sorted order
    m_count: npt.NDArray[np.int64]   # per member: chunks it accesses
    m_ptr: npt.NDArray[np.int64]     # member m's accesses: m_chunk[m_ptr[m]:m_ptr[m + 1]]
    m_chunk: npt.NDArray[np.int64]   # per access: the chunk's index
    m_new: npt.NDArray[np.bool_]     # per access: a chunk its group first touched with this member
    c_gpu: npt.NDArray[np.int64]     # per chunk: its GPU's index
    c_accesses: npt.NDArray[np.int64]  # per chunk: accesses over every group

    # per chunk: GPU id, buffer, chunk id (the ChunkKey, by column: to build placements)
    chunk_columns: tuple[tuple[int, ...], tuple[Buffer, ...], tuple[int, ...]]


def nap_groups(plan: Plan) -> tuple[tuple[LogicalGroup, ...], NapWorkload]:
    """``logical_allocation(decompose(plan))`` and its :func:`nap_workload`, once per program
    (``Plan.derived``): NAP, NAP* and NUMA place the same groups at every ``G`` and in every
    configuration of a sweep worker's points of one plan."""
    def make() -> tuple[tuple[LogicalGroup, ...], NapWorkload]:
        groups = logical_allocation(decompose(plan))
        return groups, nap_workload(groups)

    return plan.derived("nuna.passes.nap.groups", make)


def nap_workload(groups: Sequence[LogicalGroup]) -> NapWorkload:
    """:class:`NapWorkload` of ``groups`` (sorted by ``logical_allocation``)."""
    chunk_id: dict[ChunkKey, int] = {}
    m_gpu: list[int] = []
    m_tb: list[int] = []
    m_group: list[int] = []
    counts: list[int] = []
    access: list[int] = []
    new_flag: list[bool] = []
    for i, group in enumerate(groups):
        for member in group.members:
            acc = member.access
            m_gpu.append(acc.gpu)
            m_tb.append(acc.tb)
            m_group.append(i)
            counts.append(len(acc.chunks))
            new = frozenset(member.new_chunks)  # a threadblock of a ring plan touches hundreds
            for c in acc.chunks:
                access.append(chunk_id.setdefault(c, len(chunk_id)))
                new_flag.append(c in new)
    chunks = tuple(chunk_id)
    gpu_ids = tuple(sorted(set(m_gpu) | {c.gpu for c in chunks}))
    index = {g: i for i, g in enumerate(gpu_ids)}
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    m_chunk = np.asarray(access, dtype=np.int64)
    work = NapWorkload(
        gpu_ids=gpu_ids,
        m_gpu=np.asarray([index[g] for g in m_gpu], dtype=np.int64),
        m_tb=np.asarray(m_tb, dtype=np.int64), m_group=np.asarray(m_group, dtype=np.int64),
        m_count=np.asarray(counts, dtype=np.int64), m_ptr=ptr, m_chunk=m_chunk,
        m_new=np.asarray(new_flag, dtype=np.bool_),
        c_gpu=np.asarray([index[c.gpu] for c in chunks], dtype=np.int64),
        c_accesses=np.bincount(m_chunk, minlength=len(chunks)).astype(np.int64),
        chunk_columns=(tuple(c.gpu for c in chunks), tuple(c.buffer for c in chunks),
                       tuple(c.chunk for c in chunks)),
    )
    for field in dataclasses.fields(work):
        value = getattr(work, field.name)
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return work


@functools.cache  # a memo of a pure function of frozen values; the arrays are read-only
def _domain_arrays(spec: TopologySpec, g: int) -> tuple[npt.NDArray[Any], ...]:
    """:func:`_domain_orders` as the compiled placement reads them: the CU classes of every
    domain (``cand``, ``ptr``, ``dom_cls``), its stacks by distance to its ports (``near``,
    ``near_ptr``), its own stacks (``own``, a mask) and every CU's stacks by round trip."""
    from nuna.passes.firstfit import class_arrays

    orders = _domain_orders(spec, g)
    cand, ptr, dom_cls = class_arrays([cu_classes for cu_classes, _, _ in orders])
    near_lists = [[cls[0] for cls in near] for _, near, _ in orders]
    near = np.asarray([s for lst in near_lists for s in lst], dtype=np.int64)
    near_ptr = np.zeros(len(orders) + 1, dtype=np.int64)
    np.cumsum([len(lst) for lst in near_lists], out=near_ptr[1:])
    own = np.zeros((len(orders), spec.chip.hbm_stacks), dtype=np.bool_)
    for d, (_, _, stacks) in enumerate(orders):
        own[d, sorted(stacks)] = True
    by_dist = np.asarray([stacks_by_distance(spec, cu) for cu in range(spec.chip.cus)], dtype=np.int64)
    out = (cand, ptr, dom_cls, near, near_ptr, own, by_dist)
    for arr in out:
        arr.flags.writeable = False
    return out


def physical_placement(groups: Sequence[LogicalGroup], nar_max: int, spec: TopologySpec, chunk_bytes: int,
                       *, place_memory: bool = True, workload: NapWorkload | None = None) -> NapPlacement:
    """Algorithm 1 lines 11-22 over ``groups`` (already sorted by ``logical_allocation``).

    ``place_memory=False`` is NAP*: threadblocks are placed as NAP places them (budgets and all),
    chunks are left to the baseline round-robin page policy. ``workload``:
    ``nap_workload(groups)`` when the caller places the same groups more than once.

    Per threadblock (in group order, group ``i`` in domain ``i mod nar_max``): first fit among
    the domain's CU classes, demand :func:`tb_demand_requests`. Per chunk it accesses: placed
    before, its stacks are charged again; another group's chunk not placed yet, charged when it
    is; else it goes to the nearest stacks of the domain that fit (a local chunk: by round trip
    from the threadblock's CU; a remote one: by distance to the domain's ports, on the peer),
    ``k = ceil(accesses x demand / budget)`` of them at most (its pages, the candidates), each
    charged ``ceil(demand / k)``.
    """
    from nuna.passes import firstfit  # numba: loaded when a plan is placed, not on import

    if nar_max not in nar_granularities(spec):
        valid = ", ".join(str(v) for v in nar_granularities(spec))
        raise PassError(f"nap: {nar_max} NAR domains is not a valid granularity for {spec.name} "
                        f"(valid: {valid})")
    work = nap_workload(groups) if workload is None else workload
    cand, ptr, dom_cls, near, near_ptr, own, by_dist = _domain_arrays(spec, nar_max)
    chip = spec.chip
    cu_budget, stack_budget = cu_budget_requests(spec), stack_budget_bytes(spec)
    c_demand = chunk_demand_bytes(chunk_bytes, spec)
    n_gpu, n_members, n_chunks, S = len(work.gpu_ids), len(work.m_gpu), len(work.c_gpu), chip.hbm_stacks
    m_demand = tb_demand_requests_each(work.m_count, chunk_bytes, spec)
    cu_load = np.zeros((n_gpu, chip.cus), dtype=np.int64)
    cu_touched = np.zeros((n_gpu, chip.cus), dtype=np.bool_)
    st_load = np.zeros((n_gpu, S), dtype=np.int64)
    st_touched = np.zeros((n_gpu, S), dtype=np.bool_)
    tb_cu = np.zeros(n_members, dtype=np.int64)
    ov = np.zeros((n_members + n_chunks * S, 6), dtype=np.int64)
    chunk_out = np.zeros((n_chunks * S, 2), dtype=np.int64)
    n_ov, n_out, err = firstfit.place_nap(
        nar_max, place_memory, work.m_gpu, work.m_group, m_demand, work.m_ptr, work.m_chunk, work.m_new,
        work.c_gpu, work.c_accesses, cand, ptr, dom_cls, near, near_ptr, own, by_dist,
        cu_budget, stack_budget, c_demand, -(-chunk_bytes // chip.page_bytes),
        cu_load, cu_touched, st_load, st_touched, tb_cu, ov, chunk_out)
    if err != firstfit.OK:
        raise PassError(f"nap: a chunk of {chunk_bytes} bytes has no HBM stack to go to in a domain "
                        f"of granularity {nar_max} on {spec.name}")
    ids = work.gpu_ids
    placed = chunk_out[:n_out, 0].tolist()
    gpus = [ids[g] for g in work.m_gpu.tolist()]
    tbs = work.m_tb.tolist()
    domains = (work.m_group % nar_max).tolist()
    demands = m_demand.tolist()
    c_gpu, c_buffer, c_chunk = work.chunk_columns

    def loads(load: npt.NDArray[np.int64], touched: npt.NDArray[np.bool_]
              ) -> tuple[tuple[int, int, int], ...]:
        rows, cols = np.nonzero(touched)  # row-major: sorted by GPU, then resource
        return tuple((ids[g], r, v) for g, r, v in zip(rows.tolist(), cols.tolist(),
                                                       load[rows, cols].tolist(), strict=True))

    return NapPlacement(
        domains=nar_max, groups=tuple(groups), group_domain=tuple(i % nar_max for i in range(len(groups))),
        threadblocks=tuple(map(TbPlacement, gpus, tbs, tb_cu.tolist())),
        chunks=tuple(map(ChunkPlacement, [c_gpu[c] for c in placed], [c_buffer[c] for c in placed],
                         [c_chunk[c] for c in placed], chunk_out[:n_out, 1].tolist())),
        tb_domain=tuple(zip(gpus, tbs, domains, strict=True)),
        tb_demand=tuple(zip(gpus, tbs, demands, strict=True)),
        chunk_demand_bytes=c_demand, cu_budget=cu_budget, stack_budget=stack_budget,
        cu_load=loads(cu_load, cu_touched), stack_load=loads(st_load, st_touched),
        overflows=tuple(Overflow("cu" if kind == 0 else "stack", ids[g], r, d, dom, least)
                        for kind, g, r, d, dom, least in ov[:n_ov].tolist()),
    )


def nap_placement(plan: Plan, spec: TopologySpec, size_bytes: int, nar_max: int, *,
                  place_memory: bool = True) -> NapPlacement:
    """Algorithm 1 on ``plan`` for a collective of ``size_bytes``: decomposition,
    ``logical_allocation``, ``physical_placement``."""
    groups, work = nap_groups(plan)
    return physical_placement(groups, nar_max, spec, chunk_bytes_for(plan, size_bytes),
                              place_memory=place_memory, workload=work)


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
    return out.with_placement(canonical_placement(out))
