"""Address model: pages, HBM stacks, I/O-port hashing and NUNA-aware routing (NAR) domains.

Buffers live in a virtual address space of ``page_bytes`` pages (4 KiB). A physical page is
identified by its HBM stack and a slot within that stack; physical addresses interleave the
stacks page by page, ``((slot * stacks) + stack) * page_bytes + offset``, so the baseline
policy (virtual page ``i`` on stack ``i mod stacks``, slot ``i div stacks``: round-robin,
paper §5.3) is the identity map from virtual to physical addresses.

A remote store leaves through the I/O port chosen by hashing its destination physical address
at ``address_hash_granularity_bytes`` (256 B) granularity: the line index goes through the
SplitMix64 finaliser (a full-avalanche 64-bit bit mixer; every address bit affects every output
bit) and the result modulo the number of candidate ports picks one. Baseline: all ports.

NAR (paper §4.1, Fig 5): the physical address space is statically partitioned into segments;
in a segment of granularity ``G`` (a divisor of the port count; ``G = 1`` is the baseline) the
ports form ``G`` domains of adjacent ports (consecutive indices, which are neighbours along the
chip's perimeter), and each domain owns the HBM stacks nearest its ports: the stacks are split
into domains of ``floor(S/G)`` or ``ceil(S/G)`` stacks by a minimum-cost assignment whose cost is
the summed port<->stack latency to the domain's ports, so every stack is in exactly one domain
for each ``G``. An address in a NAR segment hashes only over the ports of the domain owning its
stack. Which segment a buffer lives in travels with the plan (``Placement.nar_granularity``)
rather than in upper address bits, so functions here take ``G`` as an argument.

Which domain a store uses is the topology's ``[nar] port_choice``: ``"address"`` (the default,
above) or ``"cu"``, the domain nearest the CU that issues the store (:func:`cu_nar_domains`),
hashing over its ports all the same.
"""

from __future__ import annotations

import functools
import math

import networkx as nx
import numpy as np
import numpy.typing as npt

from nuna.errors import TopologyError
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import ChipSpec, TopologySpec

_MASK64 = (1 << 64) - 1


def mix64(value: int) -> int:
    """SplitMix64 finaliser of a non-negative integer (taken modulo 2**64)."""
    z = value & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mix64_array(values: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """Vectorised :func:`mix64` (numpy uint64 arithmetic wraps modulo 2**64, as intended)."""
    z = np.asarray(values).astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


# --- pages and physical addresses ----------------------------------------------------------


def address_space_bytes(spec: TopologySpec) -> int:
    """Size of one GPU's physical address space (all stacks)."""
    return spec.chip.hbm_stacks * spec.chip.hbm_stack_capacity_bytes


def physical_address(spec: TopologySpec, stack: int, page_slot: int, offset_bytes: int = 0) -> int:
    """Physical address of byte ``offset_bytes`` of page slot ``page_slot`` of HBM stack ``stack``."""
    chip = spec.chip
    if not 0 <= stack < chip.hbm_stacks:
        raise TopologyError(f"HBM stack {stack} does not exist (the chip has {chip.hbm_stacks})")
    if not 0 <= page_slot < chip.pages_per_stack:
        raise TopologyError(
            f"page slot {page_slot} out of range (a stack holds {chip.pages_per_stack} pages)"
        )
    if not 0 <= offset_bytes < chip.page_bytes:
        raise TopologyError(f"offset {offset_bytes} out of range (pages are {chip.page_bytes} bytes)")
    return (page_slot * chip.hbm_stacks + stack) * chip.page_bytes + offset_bytes


def _check_address(spec: TopologySpec, addr: int) -> None:
    if not 0 <= addr < address_space_bytes(spec):
        raise TopologyError(
            f"physical address {addr:#x} outside the GPU's {address_space_bytes(spec)}-byte space"
        )


def stack_of_address(spec: TopologySpec, addr: int) -> int:
    """HBM stack holding physical address ``addr``."""
    _check_address(spec, addr)
    return (addr // spec.chip.page_bytes) % spec.chip.hbm_stacks


def page_slot_of_address(spec: TopologySpec, addr: int) -> int:
    """Slot (within its stack) of the page holding physical address ``addr``."""
    _check_address(spec, addr)
    return addr // spec.chip.page_bytes // spec.chip.hbm_stacks


def baseline_stack(spec: TopologySpec, page_index: int) -> int:
    """Stack of virtual page ``page_index`` under the baseline round-robin page policy."""
    if page_index < 0:
        raise TopologyError(f"page index must be >= 0, got {page_index}")
    return page_index % spec.chip.hbm_stacks


def baseline_physical_address(spec: TopologySpec, virtual_addr: int) -> int:
    """Physical address of ``virtual_addr`` under the baseline policy (the identity map)."""
    _check_address(spec, virtual_addr)
    return virtual_addr


# --- NAR domains -----------------------------------------------------------------------------


def nar_granularities(spec: TopologySpec) -> tuple[int, ...]:
    """Valid NAR granularities: the divisors of the port count (1 = baseline) up to the stack
    count, so that every domain owns a stack (NAP places a domain's data in its own), ascending."""
    p = spec.chip.io_ports
    return tuple(g for g in range(1, p + 1) if p % g == 0 and g <= spec.chip.hbm_stacks)


def _check_granularity(spec: TopologySpec, g: int) -> None:
    if isinstance(g, bool) or not isinstance(g, int) or g not in nar_granularities(spec):
        valid = ", ".join(str(v) for v in nar_granularities(spec))
        raise TopologyError(
            f"NAR granularity {g!r} is invalid for {spec.chip.io_ports} I/O ports and "
            f"{spec.chip.hbm_stacks} HBM stacks (valid: {valid})"
        )


def _domain_ports(io_ports: int, g: int) -> tuple[tuple[int, ...], ...]:
    size = io_ports // g
    return tuple(tuple(range(d * size, (d + 1) * size)) for d in range(g))


def nar_domain_ports(spec: TopologySpec, g: int) -> tuple[tuple[int, ...], ...]:
    """Ports of each of the ``g`` NAR domains: blocks of ``ports / g`` adjacent ports (the one
    definition; everything else reads the domains' ports from here)."""
    _check_granularity(spec, g)
    return _domain_ports(spec.chip.io_ports, g)


def nar_port_table(spec: TopologySpec, g: int) -> npt.NDArray[np.int64]:
    """:func:`nar_domain_ports` as a ``(g, ports / g)`` array: row ``d`` holds domain ``d``'s
    ports, and a store hashed to ``h`` within domain ``d`` leaves through ``table[d, h % (ports / g)]``.
    The vectorised and compiled port choices index it, so they follow the one definition."""
    return np.array(nar_domain_ports(spec, g), dtype=np.int64)


def stack_domains(spec: TopologySpec, g: int) -> npt.NDArray[np.int64]:
    """:func:`stack_domain` of every HBM stack, as an array indexed by stack."""
    owner = np.zeros(spec.chip.hbm_stacks, dtype=np.int64)
    for d, stacks in enumerate(nar_domain_stacks(spec, g)):
        owner[list(stacks)] = d
    return owner


@functools.cache
def _domain_stacks(chip: ChipSpec, g: int) -> tuple[tuple[int, ...], ...]:
    geo = chip_geometry(chip)
    s_count = chip.hbm_stacks
    pair = geo.port_stack.latency_ns + geo.stack_port.latency_ns.T  # (P, S) there and back
    ports = np.array(_domain_ports(chip.io_ports, g), dtype=np.int64)  # (G, P / G)
    # Integer costs (picoseconds) keep the network simplex exact and deterministic.
    cost = np.rint(pair[ports].sum(axis=1) * 1000.0).astype(np.int64)  # (G, S)
    low, extra = divmod(s_count, g)
    big = int(cost.sum()) + 1
    flow = nx.DiGraph()
    flow.add_node("source", demand=-s_count)
    flow.add_node("sink", demand=s_count)
    for s in range(s_count):
        flow.add_edge("source", ("stack", s), capacity=1, weight=0)
        for d in range(g):
            flow.add_edge(("stack", s), ("domain", d), capacity=1, weight=int(cost[d, s]))
    for d in range(g):
        if low:
            flow.add_edge(("domain", d), "sink", capacity=low, weight=0)
        if extra:
            # A domain takes a stack above floor(S/G) only at a large fixed price, so the
            # cheapest flow gives every domain floor(S/G) first: a balanced partition.
            flow.add_edge(("domain", d), ("extra", d), capacity=1, weight=big)
            flow.add_edge(("extra", d), "sink", capacity=1, weight=0)
    solution = nx.min_cost_flow(flow)
    owner = [-1] * s_count
    for s in range(s_count):
        for d in range(g):
            if solution[("stack", s)].get(("domain", d), 0):
                owner[s] = d
    return tuple(tuple(s for s in range(s_count) if owner[s] == d) for d in range(g))


def nar_domain_stacks(spec: TopologySpec, g: int) -> tuple[tuple[int, ...], ...]:
    """HBM stacks of each NAR domain (a partition of the stacks; sizes differ by at most one)."""
    _check_granularity(spec, g)
    return _domain_stacks(spec.chip, g)


def stack_domain(spec: TopologySpec, g: int, stack: int) -> int:
    """NAR domain that owns ``stack`` at granularity ``g``."""
    if not 0 <= stack < spec.chip.hbm_stacks:
        raise TopologyError(f"HBM stack {stack} does not exist (the chip has {spec.chip.hbm_stacks})")
    for d, stacks in enumerate(nar_domain_stacks(spec, g)):
        if stack in stacks:
            return d
    raise AssertionError("the stack partition covers every stack")  # pragma: no cover


def nar_segment_stack(spec: TopologySpec, page_index: int, nar_granularity: int | None) -> int:
    """Stack of virtual page ``page_index`` under the baseline round-robin page policy, for a
    buffer in the address segment of NAR granularity ``nar_granularity`` (``None`` or 1: the
    plain :func:`baseline_stack`).

    A NAR segment's physical addresses are "partitioned uniformly into subsets for each domain"
    (paper §4.1.2, Fig 5) and a domain's addresses lie on its own stacks. A round-robin allocator
    in the segment therefore deals pages to the domains in turn, and each domain's pages over its
    stacks in turn. Every domain gets the same share of pages (and so of port traffic) even when
    the stacks do not split evenly over the domains (16 stacks, 12 domains), where dealing pages
    over all stacks would give the domains with two stacks twice the traffic of the others."""
    if nar_granularity is None or nar_granularity == 1:
        if nar_granularity is not None:
            _check_granularity(spec, nar_granularity)
        return baseline_stack(spec, page_index)
    if page_index < 0:
        raise TopologyError(f"page index must be >= 0, got {page_index}")
    stacks = nar_domain_stacks(spec, nar_granularity)[page_index % nar_granularity]
    return stacks[(page_index // nar_granularity) % len(stacks)]


def nar_segment_cycle(spec: TopologySpec, nar_granularity: int | None) -> tuple[int, ...]:
    """One period of :func:`nar_segment_stack`: page ``j`` is on stack ``cycle[j % len(cycle)]``.
    The period is the stack count without NAR, else ``G`` times the least common multiple of the
    domains' stack counts (pages go to the domains in turn, then over each domain's stacks)."""
    if nar_granularity is None or nar_granularity == 1:
        period = spec.chip.hbm_stacks
    else:
        period = nar_granularity * math.lcm(*(len(d) for d in nar_domain_stacks(spec, nar_granularity)))
    return tuple(nar_segment_stack(spec, j, nar_granularity) for j in range(period))


@functools.cache
def _cu_domains(chip: ChipSpec, domains: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    lat = chip_geometry(chip).cu_port.latency_ns  # (C, P)
    mean = np.stack([lat[:, list(ports)].mean(axis=1) for ports in domains], axis=1)
    # rounded so that float summation order cannot break ties; ties go to the lower domain
    return tuple(int(d) for d in np.argmin(np.round(mean, 6), axis=1))


def cu_nar_domains(spec: TopologySpec, g: int) -> tuple[int, ...]:
    """For every CU, the NAR domain at granularity ``g`` whose ports are nearest on average
    (mean CU -> port latency, the expected latency of a store hashed over them): the domain a
    store of that CU uses when the topology's NAR port choice is ``"cu"``."""
    return _cu_domains(spec.chip, nar_domain_ports(spec, g))


def store_domains_by_cu(spec: TopologySpec, nar_granularity: int | None) -> tuple[int, ...] | None:
    """:func:`cu_nar_domains` when a store at this granularity picks its NAR domain by its CU
    (a NAR segment, ``G > 1``, on a topology whose ``[nar] port_choice`` is ``"cu"``); ``None``
    when the destination address picks it (or there is no NAR). The one place that decides."""
    if nar_granularity is None or nar_granularity == 1 or spec.nar.port_choice != "cu":
        return None
    return cu_nar_domains(spec, nar_granularity)


def io_port(spec: TopologySpec, phys_addr: int, nar_granularity: int | None, cu: int | None = None) -> int:
    """I/O port a remote access to ``phys_addr`` leaves through: the address hash over all
    ports (``None`` or 1), or over the ports of one NAR domain: the one owning the address's
    stack, or, when the topology's NAR port choice is ``"cu"``, the one nearest ``cu`` (the
    issuing CU, then required)."""
    _check_address(spec, phys_addr)
    h = mix64(phys_addr // spec.chip.address_hash_granularity_bytes)
    if nar_granularity is None or nar_granularity == 1:
        if nar_granularity is not None:
            _check_granularity(spec, nar_granularity)
        return h % spec.chip.io_ports
    by_cu = store_domains_by_cu(spec, nar_granularity)
    if by_cu is not None:
        if cu is None or not 0 <= cu < spec.chip.cus:
            raise TopologyError(f"{spec.name} picks NAR ports by the issuing CU: give a CU "
                                f"(0..{spec.chip.cus - 1}), got {cu!r}")
        domain = by_cu[cu]
    else:
        domain = stack_domain(spec, nar_granularity, stack_of_address(spec, phys_addr))
    ports = nar_domain_ports(spec, nar_granularity)[domain]
    return ports[h % len(ports)]


def io_ports_array(
    spec: TopologySpec, phys_addrs: npt.ArrayLike, nar_granularity: int | None,
    cus: npt.ArrayLike | None = None,
) -> npt.NDArray[np.int64]:
    """Vectorised :func:`io_port` for many addresses (and issuing CUs: ``cus``, needed when the
    topology picks NAR ports by CU); the same results, element by element."""
    addrs = np.asarray(phys_addrs, dtype=np.int64)
    if addrs.size and (addrs.min() < 0 or addrs.max() >= address_space_bytes(spec)):
        raise TopologyError("physical address outside the GPU's address space")
    chip = spec.chip
    h = mix64_array(addrs // chip.address_hash_granularity_bytes)
    g = 1 if nar_granularity is None else nar_granularity
    table = nar_port_table(spec, g)
    within = (h % np.uint64(table.shape[1])).astype(np.int64)
    by_cu = store_domains_by_cu(spec, g)
    if by_cu is not None:
        if cus is None:
            raise TopologyError(f"{spec.name} picks NAR ports by the issuing CU: give the CUs")
        cu = np.broadcast_to(np.asarray(cus, dtype=np.int64), addrs.shape)
        if cu.size and (cu.min() < 0 or cu.max() >= chip.cus):
            raise TopologyError(f"CU outside 0..{chip.cus - 1}")
        return table[np.asarray(by_cu, dtype=np.int64)[cu], within]
    stacks_of = (addrs // chip.page_bytes) % chip.hbm_stacks
    return table[stack_domains(spec, g)[stacks_of], within]


# --- distances used by placement -------------------------------------------------------------


def _ports_tuple(spec: TopologySpec, ports: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    out = tuple(ports)
    if not out:
        raise TopologyError("need at least one I/O port")
    for k in out:
        if not 0 <= k < spec.chip.io_ports:
            raise TopologyError(f"I/O port {k} does not exist (the chip has {spec.chip.io_ports})")
    return out


def _order(costs: npt.NDArray[np.float64]) -> tuple[int, ...]:
    # Rounded so that float summation order cannot break ties; ties go to the lower index.
    return tuple(int(i) for i in np.argsort(np.round(costs, 6), kind="stable"))


def nearest_cus(spec: TopologySpec, ports: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """All CUs ordered by mean CU->port latency to ``ports`` (nearest first, ties by index)."""
    p = _ports_tuple(spec, ports)
    geo = chip_geometry(spec.chip)
    return _order(geo.cu_port.latency_ns[:, list(p)].mean(axis=1))


def nearest_stacks(spec: TopologySpec, ports: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """All HBM stacks ordered by mean port<->stack latency to ``ports`` (nearest first)."""
    p = _ports_tuple(spec, ports)
    geo = chip_geometry(spec.chip)
    both = geo.port_stack.latency_ns[list(p), :] + geo.stack_port.latency_ns[:, list(p)].T
    return _order(both.mean(axis=0))


def stacks_by_distance(spec: TopologySpec, cu: int) -> tuple[int, ...]:
    """All HBM stacks ordered by CU<->stack round-trip latency from ``cu`` (nearest first)."""
    if not 0 <= cu < spec.chip.cus:
        raise TopologyError(f"CU {cu} does not exist (the chip has {spec.chip.cus})")
    geo = chip_geometry(spec.chip)
    return _order(geo.cu_stack.latency_ns[cu, :] + geo.stack_cu.latency_ns[:, cu])


def nearest_stack(spec: TopologySpec, cu: int) -> int:
    """The HBM stack nearest to ``cu`` (lowest index among equals)."""
    return stacks_by_distance(spec, cu)[0]


def nar_domain_cus(spec: TopologySpec, g: int) -> tuple[tuple[int, ...], ...]:
    """CUs grouped by the NAR domain whose ports they are nearest to (:func:`cu_nar_domains`).
    For pictures and reports; NAP orders CUs with
    ``nuna.passes.nap.domain_cu_classes``."""
    owner = np.asarray(cu_nar_domains(spec, g))
    return tuple(tuple(int(c) for c in np.flatnonzero(owner == d)) for d in range(g))
