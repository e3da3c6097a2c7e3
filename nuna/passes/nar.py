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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from nuna.errors import PassError
from nuna.passes.access import ChunkKey, RemoteStore, remote_stores
from nuna.passes.base import PassContext, replace_placement
from nuna.plan.dag import read_only_arrays
from nuna.plan.ir import Buffer, Plan
from nuna.plan.verify import chunk_bytes_for
from nuna.topology.address import nar_domain_ports, nar_domain_stacks, nar_granularities, store_domains_by_cu
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec
from nuna.units import MAX_SIZE_BYTES


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


@dataclass(frozen=True, slots=True)
class StoreRows:
    """A plan's remote stores as the heuristic's model reads them, one row per chunk stored,
    in :func:`remote_stores` order: what depends only on the program, computed once for every
    candidate ``G`` (:func:`store_rows`). Threadblocks and chunks have integer ids here, so that
    a candidate's placement is looked up once per threadblock and chunk, not once per store."""

    tb_ids: dict[tuple[int, int], int]  # (gpu, tb) -> id
    chunk_ids: dict[tuple[int, Buffer, int], int]  # a chunk (ChunkKey) stored into in place -> id
    tb: npt.NDArray[np.int64]  # per row: the storing threadblock's id
    chunk: npt.NDArray[np.int64]  # per row: the chunk's id, -1 for a receive buffer
    src: npt.NDArray[np.int64]  # per row: the sending GPU's index in the plan
    dst: npt.NDArray[np.int64]  # per row: the receiving GPU's index


def store_rows(plan: Plan, stores: Sequence[RemoteStore] | None = None) -> StoreRows:
    """:class:`StoreRows` of ``stores``, a sequence of ``plan``'s remote stores; ``None``: all of
    them (``remote_stores(plan)``), made once per program (``Plan.derived``, arrays read-only:
    a sweep worker's NAR points of one plan share them)."""
    if stores is None:
        return plan.derived("nuna.passes.nar.store_rows",
                            lambda: read_only_arrays(_store_rows(plan, remote_stores(plan))))
    return _store_rows(plan, stores)


def _store_rows(plan: Plan, stores: Sequence[RemoteStore]) -> StoreRows:
    gpu_index = {gp.id: i for i, gp in enumerate(plan.gpus)}
    tb_ids: dict[tuple[int, int], int] = {}
    chunk_ids: dict[tuple[int, Buffer, int], int] = {}
    per_store: list[tuple[int, int, int]] = []
    counts: list[int] = []
    chunk: list[int] = []
    for store in stores:
        n = store.chunks
        per_store.append((tb_ids.setdefault((store.gpu, store.tb), len(tb_ids)),
                          gpu_index[store.gpu], gpu_index[store.peer]))
        counts.append(n)
        if store.target is None:
            chunk.extend([-1] * n)
        else:
            first, buffer, gpu = store.target
            chunk.extend(chunk_ids.setdefault(ChunkKey(first + k, buffer, gpu), len(chunk_ids))
                         for k in range(n))
    each = np.asarray(per_store, dtype=np.int64).reshape(-1, 3)
    reps = np.asarray(counts, dtype=np.int64)
    tb, src, dst = (np.repeat(each[:, i], reps) for i in range(3))
    return StoreRows(tb_ids, chunk_ids, tb, np.asarray(chunk, dtype=np.int64), src, dst)


def _sums_in_first_order(code: npt.NDArray[np.int64], weights: npt.NDArray[np.float64]
                         ) -> tuple[list[int], list[float]]:
    """Distinct ``code`` values in order of first occurrence, each with its weights summed in
    row order: what accumulating a dict row by row gives, to the last bit (``np.bincount``
    adds in input order), so the model's float sums do not depend on how they are computed."""
    keys, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=weights, minlength=len(keys))
    order = np.argsort(first, kind="stable")
    return keys[order].tolist(), sums[order].tolist()


def estimate(plan: Plan, spec: TopologySpec, size_bytes: int,
             stores: Sequence[RemoteStore] | StoreRows | None = None) -> GranularityEstimate:
    """The model ``T = L + B/bw`` for ``plan`` as placed (its placement's NAR granularity,
    threadblock CUs and chunk stacks; see the module doc). ``stores``: ``remote_stores(plan)``
    or ``store_rows(plan)`` when the caller already has it (it depends only on the program,
    not on the placement)."""
    chip = spec.chip
    geo = chip_geometry(chip)
    P, S, C = chip.io_ports, chip.hbm_stacks, chip.cus
    g = plan.placement.nar_granularity or 1
    chunk_bytes = chunk_bytes_for(plan, size_bytes)
    rows = stores if isinstance(stores, StoreRows) else store_rows(plan, stores)
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

    # the placement, by the rows' ids: a threadblock's CU (C: placed by the simulator, any CU),
    # a chunk's stacks (a chunk NAP spread has its pages on each; none: round-robin, any stack)
    cu_of = {(t.gpu, t.tb): t.cu for t in plan.placement.threadblocks}
    tb_cu = np.array([cu_of.get(key, C) for key in rows.tb_ids], dtype=np.int64)
    tb_cu[(tb_cu < 0) | (tb_cu >= C)] = C
    stacks_of: dict[int, list[int]] = {}
    for c in plan.placement.chunks:
        i = rows.chunk_ids.get((c.chunk, c.buffer, c.gpu))  # a plain tuple finds a ChunkKey
        if i is not None:
            stacks_of.setdefault(i, []).append(c.stack if 0 <= c.stack < S else S)
    n_chunks = len(rows.chunk_ids)
    per_chunk = [stacks_of.get(i, [S]) for i in range(n_chunks)] + [[S]]  # last: a receive buffer
    n_targets = np.array([len(t) for t in per_chunk], dtype=np.int64)
    first_target = np.cumsum(n_targets) - n_targets
    targets = np.array([st for t in per_chunk for st in t], dtype=np.int64)

    # one entry per (row, target stack), rows in order, a row's targets in placement order
    row_chunk = np.where(rows.chunk < 0, n_chunks, rows.chunk)
    reps = n_targets[row_chunk]
    starts = np.cumsum(reps) - reps
    within = np.arange(int(reps.sum()), dtype=np.int64) - np.repeat(starts, reps)
    stack = targets[np.repeat(first_target[row_chunk], reps) + within]
    share = np.repeat(1.0 / reps, reps)  # a spread chunk's pages are dealt evenly over its stacks
    cu = np.repeat(tb_cu[rows.tb], reps)
    pick = cu if by_cu else stack  # what picks the port
    n_pick = C + 1 if by_cu else S + 1
    pairs, counts = _sums_in_first_order(cu * (S + 1) + stack, share)
    total = sum(counts)
    latency = 0.0
    for code, n in zip(pairs, counts, strict=True):
        i_cu, i_st = divmod(code, S + 1)
        if by_cu:
            latency += n * (float(cu_port[i_cu] @ p_cu[i_cu]) + float(p_cu[i_cu] @ stack_lat[:, i_st]))
        else:
            latency += n * (float(cu_port[i_cu] @ p_port[i_st]) + float(dst_lat[i_st]))
    dist = p_cu if by_cu else p_port
    egress = np.zeros((plan.ngpus, P))
    ingress = np.zeros((plan.ngpus, P))
    for side, gpu_of in ((egress, rows.src), (ingress, rows.dst)):
        for code, n in zip(*_sums_in_first_order(np.repeat(gpu_of, reps) * n_pick + pick, share),
                           strict=True):
            gi, p = divmod(code, n_pick)
            side[gi] += n * chunk_bytes * dist[p]
    bw = min(chip.io_port_bandwidth_gbps, spec.scaleup.link_bandwidth_gbps,
             spec.scaleup.switch_port_bandwidth_gbps)
    max_bytes = float(max(egress.max(initial=0.0), ingress.max(initial=0.0)))
    return GranularityEstimate(g, latency / total if total else 0.0, max_bytes / bw, max_bytes)


#: ``plan`` placed as a configuration places it at granularity ``G`` (used by the heuristic).
Placer = Callable[[int], Plan]


def estimate_granularity(plan: Plan, spec: TopologySpec, size_bytes: int, place: Placer,
                         candidates: Sequence[int] | None = None, *,
                         stores: Sequence[RemoteStore] | None = None,
                         ) -> tuple[int, tuple[GranularityEstimate, ...]]:
    """The heuristic choice of ``G`` and the estimate of every candidate (all valid
    granularities by default). Ties go to the coarser granularity (more ports per domain).
    ``stores``: remote stores to model in place of all of the plan's (:func:`store_rows`)."""
    cands = tuple(candidates) if candidates is not None else nar_granularities(spec)
    rows = store_rows(plan, stores)
    estimates = tuple(estimate(place(g), spec, size_bytes, rows) for g in cands)
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

    # slopes equal but for rounding (2.56 against 2.5599999999999996 ns per byte, from sums in
    # another order) are parallel: their "crossing" (7e20 B) is noise, as is any beyond a size
    cuts = sorted({(a0 - b0) / (b1 - a1) for a0, a1, _ in lines for b0, b1, _ in lines
                   if not math.isclose(a1, b1, rel_tol=1e-12, abs_tol=0.0)
                   and 0 < (a0 - b0) / (b1 - a1) <= MAX_SIZE_BYTES})
    # from 0 on: the winner just above 0 (equal latencies go to the smaller B, slopes equal as
    # above to the smaller G, as estimate_granularity breaks ties), not the tie at 0
    low = min(round(ln[0], 9) for ln in lines)
    level = [ln for ln in lines if round(ln[0], 9) == low]
    least = min(ln[1] for ln in level)
    first = min(ln[2] for ln in level if math.isclose(ln[1], least, rel_tol=1e-12, abs_tol=0.0))
    out = [(0.0, first)]
    for x in cuts:
        w = winner(x * (1 + 1e-9) + 1e-9)
        if w != out[-1][1]:
            out.append((x, w))
    return tuple(out)
