"""NUNA-aware routing (NAR, paper §4.1) and the choice of its granularity.

:class:`NarPass` puts the plan's buffers in the NAR segment of granularity ``G``: a remote
store then leaves through the ports of the NAR domain that owns the destination page's HBM
stack (``nuna.topology.address.io_port``; or of the domain nearest the issuing CU, when the
topology's ``[nar] port_choice`` is ``"cu"``) instead of a hash over all ports. ``G = 1`` is the
baseline routing (one domain holding every port).

Choosing ``G`` (the compiler's job, §4.1: "exhaustively try all available NAR granularities ...
or use heuristic thresholds"):

- ``auto`` (:func:`nuna.passes.configs.choose_granularity`): simulate the configuration at every
  valid granularity and keep the fastest.
- the heuristic (:func:`estimate_granularity`, the default): a two-term model per candidate
  ``G``, evaluated on the plan as the configuration places it at that ``G``:

      T(G) = L(G) + B(G) / bw

  ``L(G)`` is the mean unloaded on-chip latency of the plan's remote stores (CU -> I/O port on
  the sender, port -> HBM stack on the receiver, from the topology's path tables; a port is
  any port of the destination stack's domain with equal probability, or of the issuing CU's
  domain when the topology picks NAR ports by CU; a chunk the simulator will place round-robin
  is on any stack, a threadblock it will place on any CU, with equal probability, and a chunk
  placed on several stacks on each of them in equal parts, as its pages are). ``B(G)`` is
  the largest number of bytes any single I/O port (either direction) must carry, with the same
  probabilities, and ``bw`` the port bandwidth. NAR shortens ``L`` and can concentrate ``B``;
  both terms are affine in the collective size, so for a given plan and topology the choice
  changes only at fixed sizes: the *size thresholds* ``S*`` where ``T(G) = T(G')`` for the adjacent winners
  (:func:`granularity_thresholds`), which is the statically determined threshold of the paper's
  footnote. Below the first threshold the finest granularity wins, above the last the baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nuna.errors import PassError
from nuna.passes.access import ChunkKey, RemoteStore, remote_stores
from nuna.passes.base import PassContext, replace_placement
from nuna.plan.ir import Plan
from nuna.plan.verify import chunk_bytes_for
from nuna.topology.address import nar_domain_ports, nar_domain_stacks, nar_granularities, store_domains_by_cu
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec


def check_granularity(spec: TopologySpec, g: int) -> int:
    """``g`` if it is a valid NAR granularity of ``spec``, else ``PassError``."""
    valid = nar_granularities(spec)
    if isinstance(g, bool) or not isinstance(g, int) or g not in valid:
        raise PassError(f"NAR granularity {g!r} is not valid for {spec.name} "
                        f"(valid: {', '.join(str(v) for v in valid)})")
    return g


@dataclass(frozen=True, slots=True)
class NarPass:
    """NAR: route every remote store through the ports of its destination's NAR domain, at
    granularity ``granularity`` (a divisor of the port count; 1 = baseline hashing)."""

    name: ClassVar[str] = "nar"
    granularity: int = 12

    def run(self, plan: Plan, ctx: PassContext) -> Plan:
        g = check_granularity(ctx.topology, self.granularity)
        return replace_placement(plan, ctx, nar_granularity=g)


@dataclass(frozen=True, slots=True)
class GranularityEstimate:
    """The heuristic's model of one candidate: ``time_ns = latency_ns + serial_ns``."""

    granularity: int
    latency_ns: float
    serial_ns: float
    max_port_bytes: float

    @property
    def time_ns(self) -> float:
        return self.latency_ns + self.serial_ns


def estimate(plan: Plan, spec: TopologySpec, size_bytes: int,
             stores: Sequence[RemoteStore] | None = None) -> GranularityEstimate:
    """The model ``T = L + B/bw`` for ``plan`` as placed (its placement's NAR granularity,
    threadblock CUs and chunk stacks; see the module doc). ``stores``: ``remote_stores(plan)``
    when the caller already has it (it depends only on the program, not on the placement)."""
    chip = spec.chip
    geo = chip_geometry(chip)
    P, S, C = chip.io_ports, chip.hbm_stacks, chip.cus
    g = plan.placement.nar_granularity or 1
    chunk_bytes = chunk_bytes_for(plan, size_bytes)
    # Row s: the port distribution of a store to stack s; row S: to a round-robin page (any stack).
    p_port = np.zeros((S + 1, P))
    for ports, stacks in zip(nar_domain_ports(spec, g), nar_domain_stacks(spec, g), strict=True):
        for st in stacks:
            p_port[st, list(ports)] = 1.0 / len(ports)
    p_port[S] = p_port[:S].mean(axis=0)
    port_stack = geo.port_stack.latency_ns                           # (P, S)
    dst_lat = np.append((p_port[:S] * port_stack.T).sum(axis=1), 0.0)
    dst_lat[S] = dst_lat[:S].mean()
    cu_port = np.vstack([geo.cu_port.latency_ns, geo.cu_port.latency_ns.mean(axis=0)])  # row C: any CU

    cu_domains = store_domains_by_cu(spec, g)
    by_cu = cu_domains is not None
    if by_cu:
        # the port distribution follows the issuing CU's domain (row C: a CU the simulator
        # places, any CU equally likely), independently of the destination stack
        p_cu = np.zeros((C + 1, P))
        cu_domain = np.asarray(cu_domains)
        for d, ports in enumerate(nar_domain_ports(spec, g)):
            p_cu[np.ix_(np.flatnonzero(cu_domain == d), np.asarray(ports))] = 1.0 / len(ports)
        p_cu[C] = p_cu[:C].mean(axis=0)
        stack_lat = np.hstack([port_stack, port_stack.mean(axis=1, keepdims=True)])  # (P, S + 1)

    cu_of = {(t.gpu, t.tb): t.cu for t in plan.placement.threadblocks}
    stacks_of: dict[ChunkKey, list[int]] = {}  # a chunk NAP spread has its pages on each
    for c in plan.placement.chunks:
        stacks_of.setdefault(ChunkKey(c.chunk, c.buffer, c.gpu), []).append(c.stack)
    gpu_index = {gp.id: i for i, gp in enumerate(plan.gpus)}
    # chunk counts by what the model needs, then one evaluation per distinct key
    by_cu_stack: dict[tuple[int, int], float] = {}
    by_src: dict[tuple[int, int], float] = {}  # (GPU, stack or CU: what picks the port)
    by_dst: dict[tuple[int, int], float] = {}
    for store in (remote_stores(plan) if stores is None else stores):
        cu = cu_of.get((store.gpu, store.tb), C)
        cu = cu if 0 <= cu < C else C
        src, dst = gpu_index[store.gpu], gpu_index[store.peer]
        for k in range(store.chunks):
            found = None if store.target is None else \
                stacks_of.get(store.target._replace(chunk=store.target.chunk + k))
            targets = [st if 0 <= st < S else S for st in found] if found else [S]
            share = 1.0 / len(targets)  # a spread chunk's pages are dealt evenly over its stacks
            for st in targets:
                pick = cu if by_cu else st
                by_cu_stack[(cu, st)] = by_cu_stack.get((cu, st), 0.0) + share
                by_src[(src, pick)] = by_src.get((src, pick), 0.0) + share
                by_dst[(dst, pick)] = by_dst.get((dst, pick), 0.0) + share
    total = sum(by_cu_stack.values())
    latency = 0.0
    for (cu, st), n in by_cu_stack.items():
        if by_cu:
            latency += n * (float(cu_port[cu] @ p_cu[cu]) + float(p_cu[cu] @ stack_lat[:, st]))
        else:
            latency += n * (float(cu_port[cu] @ p_port[st]) + float(dst_lat[st]))
    dist = p_cu if by_cu else p_port
    egress = np.zeros((plan.ngpus, P))
    ingress = np.zeros((plan.ngpus, P))
    for (gi, pick), n in by_src.items():
        egress[gi] += n * chunk_bytes * dist[pick]
    for (gi, pick), n in by_dst.items():
        ingress[gi] += n * chunk_bytes * dist[pick]
    bw = min(chip.io_port_bandwidth_gbps, spec.scaleup.link_bandwidth_gbps,
             spec.scaleup.switch_port_bandwidth_gbps)
    max_bytes = float(max(egress.max(initial=0.0), ingress.max(initial=0.0)))
    return GranularityEstimate(g, latency / total if total else 0.0, max_bytes / bw, max_bytes)


#: ``plan`` placed as a configuration places it at granularity ``G`` (used by the heuristic).
Placer = Callable[[int], Plan]


def estimate_granularity(plan: Plan, spec: TopologySpec, size_bytes: int, place: Placer,
                         candidates: Sequence[int] | None = None,
                         ) -> tuple[int, tuple[GranularityEstimate, ...]]:
    """The heuristic choice of ``G`` and the estimate of every candidate (all valid
    granularities by default). Ties go to the coarser granularity (more ports per domain)."""
    cands = tuple(candidates) if candidates is not None else nar_granularities(spec)
    stores = remote_stores(plan)
    estimates = tuple(estimate(place(g), spec, size_bytes, stores) for g in cands)
    best = min(estimates, key=lambda e: (round(e.time_ns, 6), e.granularity))
    return best.granularity, estimates


def granularity_thresholds(estimates: Sequence[GranularityEstimate], size_bytes: int
                           ) -> tuple[tuple[float, int], ...]:
    """The heuristic's size thresholds: ``((from_size_bytes, G), ...)``, the granularity the
    model picks from each size on, treating ``L`` as fixed and ``B`` as proportional to the
    size (both measured at ``size_bytes``). The first entry starts at 0."""
    lines = [(e.latency_ns, e.serial_ns / size_bytes, e.granularity) for e in estimates]

    def winner(x: float) -> int:
        return min(lines, key=lambda ln: (round(ln[0] + ln[1] * x, 9), ln[2]))[2]

    cuts = sorted({(a0 - b0) / (b1 - a1) for a0, a1, _ in lines for b0, b1, _ in lines
                   if b1 != a1 and (a0 - b0) / (b1 - a1) > 0})
    out = [(0.0, winner(0.0))]
    for x in cuts:
        w = winner(x * (1 + 1e-9) + 1e-9)
        if w != out[-1][1]:
            out.append((x, w))
    return tuple(out)
