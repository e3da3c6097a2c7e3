"""Where a replay puts things: threadblocks on CUs, buffers in pages, pages on HBM stacks.

This is the one implementation of ``docs/architecture.md``, "Baseline (UA) placement and buffer
layout": the simulator applies it to whatever a plan's :class:`~nuna.plan.ir.Placement` leaves
open, and the UA pass materialises the same choices by calling it.

- Threadblocks: per GPU in threadblock-id order, threadblock ``i`` goes to die ``i mod D`` and,
  within the die, to the least-loaded CU, ties broken by a fixed location-neutral order of the
  die's CUs (a multiplicative stride of about 0.618 n, coprime to n, over the die's CU list), so
  the first threadblocks of a die spread over it instead of piling up in one corner.
- Buffers: per GPU, input, output, scratch, then the receive buffers of fused receives (one per
  receiving threadblock, its fused steps' regions back to back), each starting on a page; chunk
  ``k`` of a buffer is bytes ``[k*cb, (k+1)*cb)``.
- Pages: virtual page ``j`` of a GPU is on stack ``baseline_stack(spec, j)`` unless a
  :class:`~nuna.plan.ir.ChunkPlacement` fixed it first (first come, first served, in listed
  order; a chunk placed on several stacks deals its pages over them in turn). A plan routed
  with NAR granularity ``G`` > 1 has its buffers in that NAR segment,
  whose round-robin pages go to the domains in turn: ``nar_segment_stack(spec, j, G)``. Each
  stack hands out its page slots in virtual-page order, so the baseline layout (without NAR) is
  the topology's identity map (virtual address = physical address).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nuna.errors import SimulationError
from nuna.plan.dag import STEP_TYPES, FlatPlan, build_dag, flatten
from nuna.plan.ir import Buffer, Plan, StepType
from nuna.plan.verify import chunk_bytes_for
from nuna.topology.address import nar_segment_cycle
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec

I64 = npt.NDArray[np.int64]

#: Buffer order in a GPU's virtual pages; receive buffers of fused receives come after these.
BUFFER_ORDER: tuple[Buffer, ...] = (Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH)
#: Buffer codes as in :class:`nuna.plan.dag.FlatPlan` (``-1`` none); 3 is a receive buffer.
BUFFER_CODE: dict[Buffer, int] = {Buffer.INPUT: 0, Buffer.OUTPUT: 1, Buffer.SCRATCH: 2}
RECV_BUFFER = 3

_FUSED_RECEIVES = frozenset({StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_SEND,
                             StepType.RECV_REDUCE_COPY_SEND})


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def neutral_order(n: int) -> list[int]:
    """A fixed order of ``0..n-1`` in which consecutive entries land far apart: index ``i`` maps
    to ``i * step mod n`` with ``step`` the integer nearest ``0.618 n`` that is coprime to ``n``."""
    if n <= 1:
        return list(range(n))
    step = max(1, round(n * 0.6180339887))
    while _gcd(step, n) != 1:
        step += 1
    return [(i * step) % n for i in range(n)]


def baseline_cus(plan: Plan, spec: TopologySpec) -> dict[tuple[int, int], int]:
    """The baseline CU of every threadblock, keyed by ``(gpu id, tb id)``."""
    geo = chip_geometry(spec.chip)
    dies = spec.chip.dies
    die_cus: list[list[int]] = [[] for _ in range(dies)]
    for cu, die in enumerate(geo.cu_die.tolist()):
        die_cus[die].append(cu)
    orders = [[cus[k] for k in neutral_order(len(cus))] for cus in die_cus]
    out: dict[tuple[int, int], int] = {}
    for g in sorted(plan.gpus, key=lambda x: x.id):
        for i, tb in enumerate(sorted(g.threadblocks, key=lambda t: t.id)):
            die, k = i % dies, i // dies
            # the k-th threadblock of a die is its least-loaded CU: entry k of the order,
            # wrapping once every CU of the die has a threadblock
            out[(g.id, tb.id)] = orders[die][k % len(orders[die])]
    return out


def placed_cus(plan: Plan, spec: TopologySpec) -> dict[tuple[int, int], int]:
    """The CU every threadblock runs on, keyed by ``(gpu id, tb id)``: the plan's placement where
    it has one, the baseline elsewhere (unchecked: :func:`threadblock_cus` checks)."""
    cus = baseline_cus(plan, spec)
    cus.update({(p.gpu, p.tb): p.cu for p in plan.placement.threadblocks if (p.gpu, p.tb) in cus})
    return cus


def threadblock_cus(plan: Plan, spec: TopologySpec, flat: FlatPlan) -> I64:
    """CU of every threadblock in replay-DAG order (:func:`placed_cus`). Raises
    ``SimulationError`` for a CU the chip does not have."""
    placed = placed_cus(plan, spec)
    cus = np.empty(flat.tb_gpu.shape[0], dtype=np.int64)
    ncu = spec.chip.cus  # a property that multiplies four others: read once, not per threadblock
    for t, (g, tb) in enumerate(zip(flat.tb_gpu.tolist(), flat.tb_id.tolist(), strict=True)):
        cu = placed[(g, tb)]
        if not 0 <= cu < ncu:
            raise SimulationError(f"gpu {g} tb {tb}: placement names CU {cu}, but topology {spec.name}'s "
                                  f"chip has CUs 0-{ncu - 1}")
        cus[t] = cu
    return cus


@dataclass(frozen=True, eq=False)
class MemoryLayout:
    """Virtual pages of every GPU and where they live.

    ``page_base[g]`` is GPU ``g``'s first entry in the page arrays; ``buffer_page[g, b]`` the
    first virtual page of buffer code ``b`` (0 input, 1 output, 2 scratch) on GPU ``g``, and
    ``node_recv_page[n]`` / ``node_recv_off[n]`` the page and byte offset of the receive region
    of fused-receive node ``n`` (``-1`` for other nodes). ``page_stack`` and ``page_phys`` give
    each virtual page's HBM stack and physical byte address (page granularity)."""

    chunk_bytes: int
    page_bytes: int
    page_base: I64
    buffer_page: I64
    node_recv_page: I64
    node_recv_off: I64
    page_stack: I64
    page_phys: I64

    def virtual_address(self, gpu: int, buffer_code: int, offset_bytes: int) -> int:
        """Virtual byte address (within ``gpu``'s space) of a buffer offset."""
        return int(self.buffer_page[gpu, buffer_code]) * self.page_bytes + offset_bytes

    def stack_of(self, gpu: int, virtual_addr: int) -> int:
        return int(self.page_stack[self.page_base[gpu] + virtual_addr // self.page_bytes])

    def physical_address(self, gpu: int, virtual_addr: int) -> int:
        page = self.page_base[gpu] + virtual_addr // self.page_bytes
        return int(self.page_phys[page]) + virtual_addr % self.page_bytes


@dataclass(frozen=True, slots=True)
class _VirtualPages:
    """Every GPU's virtual pages at one size, before any is placed on a stack."""

    buffer_page: I64  # [gpu slot, buffer code]: first page of each buffer
    gpu_pages: I64  # [gpu slot]: pages in all, receive buffers included
    node_recv_page: I64  # [node]: first page of a fused receive's region (-1: none)
    node_recv_off: I64  # [node]: byte offset of the region in that page


def _virtual_pages(plan: Plan, cb: int, page: int, flat: FlatPlan,
                   match_send: npt.NDArray[np.integer]) -> _VirtualPages:
    ngpu_slots = max((g.id for g in plan.gpus), default=-1) + 1
    buffer_page = np.zeros((ngpu_slots, 3), dtype=np.int64)
    gpu_pages = np.zeros(ngpu_slots, dtype=np.int64)
    chunks = {g.id: (g.input_chunks, g.output_chunks, g.scratch_chunks) for g in plan.gpus}
    fused_codes = [code for code, t in enumerate(STEP_TYPES) if t in _FUSED_RECEIVES]
    nnodes = flat.num_nodes
    node_recv_page = np.full(nnodes, -1, dtype=np.int64)
    node_recv_off = np.full(nnodes, -1, dtype=np.int64)
    for g in sorted(chunks):
        at = 0
        for b, n in enumerate(chunks[g]):
            buffer_page[g, b] = at
            at += -(-(n * cb) // page)
        gpu_pages[g] = at
    # receive regions: per receiving threadblock, its fused receives back to back
    fused = np.flatnonzero(np.isin(flat.code, fused_codes) & (match_send >= 0))
    for t in np.unique(flat.node_tb[fused]).tolist():
        g = int(flat.tb_gpu[t])
        start_page = int(gpu_pages[g])
        off = 0
        for n in fused[flat.node_tb[fused] == t].tolist():
            node_recv_page[n] = start_page
            node_recv_off[n] = off
            off += int(flat.count[n]) * cb
        gpu_pages[g] = start_page + -(-off // page)
    return _VirtualPages(buffer_page, gpu_pages, node_recv_page, node_recv_off)


def _fit_problem(pages: _VirtualPages, spec: TopologySpec) -> str | None:
    chip = spec.chip
    if pages.gpu_pages.shape[0] == 0 or int(pages.gpu_pages.max()) <= chip.memory_pages:
        return None
    g = int(pages.gpu_pages.argmax())
    return (f"gpu {g}: buffers of {int(pages.gpu_pages[g])} pages of {chip.page_bytes} B at this size "
            f"exceed its memory ({chip.hbm_stacks} HBM stacks of {chip.pages_per_stack} pages)")


def memory_fit_problem(plan: Plan, spec: TopologySpec, size_bytes: int) -> str | None:
    """Why ``plan``'s buffers (receive buffers of fused receives included) do not fit a GPU of
    ``spec`` at ``size_bytes``, or None: what :func:`memory_layout` refuses, for callers that have
    not flattened the plan (the passes, which would lay out the pages of such a size first).
    The plan must have a DAG (``PlanError`` else)."""
    flat = flatten(plan)
    dag = build_dag(plan)
    pages = _virtual_pages(plan, chunk_bytes_for(plan, size_bytes), spec.chip.page_bytes, flat,
                           dag.match_send)
    return _fit_problem(pages, spec)


def memory_layout(plan: Plan, spec: TopologySpec, size_bytes: int, flat: FlatPlan,
                  match_send: npt.NDArray[np.integer]) -> MemoryLayout:
    """Lay out every GPU's buffers and place its pages (see the module docstring)."""
    chip = spec.chip
    cb = chunk_bytes_for(plan, size_bytes)
    page = chip.page_bytes
    chunks = {g.id: (g.input_chunks, g.output_chunks, g.scratch_chunks) for g in plan.gpus}
    pages = _virtual_pages(plan, cb, page, flat, match_send)
    # before the page arrays are made: a size beyond the GPU's memory would fail there, less clearly
    problem = _fit_problem(pages, spec)
    if problem is not None:
        raise SimulationError(problem)
    buffer_page, gpu_pages = pages.buffer_page, pages.gpu_pages
    node_recv_page, node_recv_off = pages.node_recv_page, pages.node_recv_off
    ngpu_slots = gpu_pages.shape[0]
    page_base = np.zeros(ngpu_slots + 1, dtype=np.int64)
    np.cumsum(gpu_pages, out=page_base[1:])
    total = int(page_base[-1])
    page_stack = np.full(total, -1, dtype=np.int64)
    stacks_of: dict[tuple[int, Buffer, int], list[int]] = {}
    for pl in plan.placement.chunks:
        stacks_of.setdefault((pl.gpu, pl.buffer, pl.chunk), []).append(pl.stack)
    for pl in plan.placement.chunks:  # first come, first served, in listed order
        if pl.gpu not in chunks:
            raise SimulationError(f"chunk placement names gpu {pl.gpu}, which the plan does not have")
        if not 0 <= pl.stack < chip.hbm_stacks:
            raise SimulationError(f"gpu {pl.gpu}: chunk placement names HBM stack {pl.stack}, but topology "
                                  f"{spec.name}'s chip has stacks 0-{chip.hbm_stacks - 1}")
        b = BUFFER_CODE[pl.buffer]
        if not 0 <= pl.chunk < chunks[pl.gpu][b]:
            continue  # a chunk this plan never touches at this size holds no page
        dealt = stacks_of.pop((pl.gpu, pl.buffer, pl.chunk), None)
        if dealt is None:
            continue  # a later placement of a chunk dealt at its first one
        lo = int(page_base[pl.gpu] + buffer_page[pl.gpu, b]) * page + pl.chunk * cb
        first, last = lo // page, (lo + cb - 1) // page
        # the chunk's pages dealt over its stacks in turn, each page not dealt before (a page
        # shared with an earlier chunk keeps that chunk's stack)
        free = first + np.flatnonzero(page_stack[first:last + 1] < 0)
        page_stack[free] = np.asarray(dealt, dtype=np.int64)[(free - first) % len(dealt)]
    page_phys = np.zeros(total, dtype=np.int64)
    stacks = chip.hbm_stacks
    # the baseline policy is periodic in the page index: evaluate it once per residue
    table = np.array(nar_segment_cycle(spec, plan.placement.nar_granularity), dtype=np.int64)
    period = table.shape[0]
    for g in range(ngpu_slots):
        lo, hi = int(page_base[g]), int(page_base[g + 1])
        if hi == lo:
            continue
        local = np.arange(hi - lo, dtype=np.int64)
        own = page_stack[lo:hi]
        unset = own < 0
        own[unset] = table[local[unset] % period]
        # each stack hands out slots in virtual-page order (a stable sort of 16-bit stack ids is
        # numpy's radix sort: 3x faster than of int64 on a 64-GPU 1 GiB pod's 0.5 M pages a GPU)
        order = np.argsort(own.astype(np.int16), kind="stable")
        slot = np.empty(hi - lo, dtype=np.int64)
        counts = np.bincount(own, minlength=stacks)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot[order] = np.arange(hi - lo, dtype=np.int64) - np.repeat(starts, counts)
        if slot.size and int(slot.max()) >= chip.pages_per_stack:
            raise SimulationError(f"gpu {g}: buffers need more than one stack's {chip.pages_per_stack} pages")
        page_phys[lo:hi] = (slot * stacks + own) * page
    return MemoryLayout(cb, page, page_base[:-1].copy(), buffer_page, node_recv_page, node_recv_off,
                        page_stack, page_phys)


class BaselineLayout:
    """The baseline layout of one plan at one size, as the placement passes query it
    (pages round-robin, no chunk placement applied; in the NAR segment of ``nar_granularity``
    if the plan will be routed with one, as :func:`memory_layout` does)."""

    def __init__(self, plan: Plan, spec: TopologySpec, size_bytes: int,
                 nar_granularity: int | None = None) -> None:
        self.spec = spec
        self.nar_granularity = nar_granularity
        self.chunk_bytes = chunk_bytes_for(plan, size_bytes)
        page = spec.chip.page_bytes
        self._base: dict[tuple[int, Buffer], int] = {}
        self._cycle = np.array(nar_segment_cycle(spec, nar_granularity), dtype=np.int64)
        for g in plan.gpus:
            at = 0
            for buf, n in zip(BUFFER_ORDER, (g.input_chunks, g.output_chunks, g.scratch_chunks), strict=True):
                self._base[(g.id, buf)] = at
                at += -(-(n * self.chunk_bytes) // page)

    def base_page(self, gpu: int, buffer: Buffer) -> int:
        """First virtual page of ``buffer`` on ``gpu``."""
        return self._base[(gpu, buffer)]

    def chunk_stack_bytes(self, gpu: int, buffer: Buffer, chunk: int) -> dict[int, int]:
        """Bytes of chunk ``chunk`` of ``buffer`` on each HBM stack under round-robin pages
        (stacks with no byte left out)."""
        row = self.chunk_stack_matrix([gpu], [buffer], np.array([chunk], dtype=np.int64))[0]
        return {s: b for s, b in enumerate(row.tolist()) if b > 0}

    def chunk_stack_matrix(self, gpus: Sequence[int], buffers: Sequence[Buffer],
                           chunks: npt.NDArray[np.int64], block: int = 1 << 16) -> npt.NDArray[np.int64]:
        """Row ``i``: the bytes of chunk ``chunks[i]`` of ``buffers[i]`` on ``gpus[i]`` on each
        HBM stack under round-robin pages, ``(len(chunks), stacks)``. Counted in closed form:
        the first and last page by their bytes, the whole pages between by how many fall on
        each residue of the page-to-stack cycle (a 1 GB collective's chunk spans thousands of
        pages, a plan of many threadblocks has 10^5 chunks), ``block`` chunks at a time."""
        page = self.spec.chip.page_bytes
        cb = self.chunk_bytes
        n_stacks = self.spec.chip.hbm_stacks
        cycle = self._cycle
        period = cycle.shape[0]
        out = np.zeros((len(chunks), n_stacks), dtype=np.int64)
        if cb <= 0 or not len(chunks):
            return out
        base = np.fromiter((self._base[(g, b)] for g, b in zip(gpus, buffers, strict=True)), dtype=np.int64,
                           count=len(chunks))
        lo = base * page + np.asarray(chunks, dtype=np.int64) * cb
        hi = lo + cb
        first, last = lo // page, (hi - 1) // page
        rows = np.arange(len(chunks))
        one = first == last
        np.add.at(out, (rows[one], cycle[first[one] % period]), cb)
        many = ~one
        np.add.at(out, (rows[many], cycle[first[many] % period]), (first[many] + 1) * page - lo[many])
        np.add.at(out, (rows[many], cycle[last[many] % period]), hi[many] - last[many] * page)
        inner = np.flatnonzero(last - first >= 2)  # whole pages between the first and the last
        onto = np.zeros((period, n_stacks), dtype=np.int64)
        onto[np.arange(period), cycle] = 1
        residues = np.arange(period, dtype=np.int64)
        for at in range(0, inner.shape[0], block):
            sel = inner[at:at + block]
            a, b = first[sel][:, None] + 1, last[sel][:, None] - 1
            # pages p in [a, b] with p = r (mod period), for every residue r
            count = (b - residues) // period - (a - 1 - residues) // period
            out[sel] += (count * page) @ onto
        return out
