"""Baseline placement and buffer layout (docs/architecture.md, "Baseline (UA) placement")."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna.plan.dag import build_dag, flatten
from nuna.plan.generate import generate
from nuna.plan.ir import Buffer, ChunkPlacement, Placement, TbPlacement
from nuna.sim import layout
from nuna.topology.address import baseline_stack, nar_segment_stack, physical_address
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import load_topology


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


@given(st.integers(1, 2000))
def test_neutral_order_is_a_permutation(n: int) -> None:
    assert sorted(layout.neutral_order(n)) == list(range(n))


@pytest.mark.parametrize("k", [1, 16, 144])
def test_baseline_spreads_over_dies_and_fills_free_cus_first(spec, k: int) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 8, tbs_per_peer=k)
    cus = layout.baseline_cus(plan, spec)
    geo = chip_geometry(spec.chip)
    for g in range(8):
        mine = [cus[(g, tb.id)] for tb in plan.gpus[g].threadblocks]
        dies = Counter(int(geo.cu_die[c]) for c in mine)
        assert max(dies.values()) - min(dies.values()) <= 1  # round-robin over the dies
        assert len(set(mine)) == min(len(mine), spec.chip.cus)  # a free CU while any is free



def test_placed_cus_puts_the_plan_over_the_baseline(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 2, tbs_per_peer=2)
    base = layout.baseline_cus(plan, spec)
    # one threadblock placed, one placement of a threadblock the plan does not have
    placed = dataclasses.replace(plan, placement=Placement(threadblocks=(TbPlacement(1, 0, 500),
                                                                         TbPlacement(0, 99, 7))))
    got = layout.placed_cus(placed, spec)
    assert got == {**base, (1, 0): 500}
    flat = flatten(placed)
    order = list(zip(flat.tb_gpu.tolist(), flat.tb_id.tolist(), strict=True))
    assert layout.threadblock_cus(placed, spec, flat).tolist() == [got[key] for key in order]

def _layout(plan, spec, size):  # type: ignore[no-untyped-def]
    flat = flatten(plan)
    return layout.memory_layout(plan, spec, size, flat, build_dag(plan).match_send), flat


def test_baseline_pages_are_round_robin_and_identity_mapped(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("alltoall", 4, tbs_per_peer=2)
    mem, _ = _layout(plan, spec, 3_000_000)
    for g in range(4):
        lo = int(mem.page_base[g])
        hi = int(mem.page_base[g + 1]) if g + 1 < 4 else mem.page_stack.shape[0]
        for j in range(hi - lo):
            assert mem.page_stack[lo + j] == baseline_stack(spec, j)
            assert mem.page_phys[lo + j] == j * spec.chip.page_bytes  # virtual = physical


@pytest.mark.parametrize("g", [3, 12])
def test_nar_routed_plans_take_their_pages_in_the_nar_segment(spec, g: int) -> None:  # type: ignore[no-untyped-def]
    plan = generate("alltoall", 4, tbs_per_peer=2)
    plan = dataclasses.replace(plan, placement=Placement(nar_granularity=g))
    mem, _ = _layout(plan, spec, 3_000_000)
    base = layout.BaselineLayout(plan, spec, 3_000_000, nar_granularity=g)
    for gpu in range(4):
        lo = int(mem.page_base[gpu])
        hi = int(mem.page_base[gpu + 1]) if gpu + 1 < 4 else mem.page_stack.shape[0]
        expected = [nar_segment_stack(spec, j, g) for j in range(hi - lo)]
        assert [int(s) for s in mem.page_stack[lo:hi]] == expected
        # the passes' view of the baseline agrees with the simulator's
        info = plan.gpus[gpu]
        for buf, n in zip(layout.BUFFER_ORDER, (info.input_chunks, info.output_chunks, info.scratch_chunks),
                          strict=True):
            for chunk in {0, n - 1} if n else set():
                at = base.base_page(gpu, buf) * spec.chip.page_bytes + chunk * mem.chunk_bytes
                step = spec.chip.page_bytes
                covered = {mem.stack_of(gpu, a) for a in range(at, at + mem.chunk_bytes, step)}
                covered.add(mem.stack_of(gpu, at + mem.chunk_bytes - 1))
                assert covered == set(base.chunk_stack_bytes(gpu, buf, chunk))
    # physical addresses stay unique per GPU and on the page's stack
    phys = mem.page_phys[: int(mem.page_base[1])]
    assert len(set(phys.tolist())) == phys.shape[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=st.sampled_from([None, 1, 2, 3, 4, 6, 12]), size=st.integers(1, 40_000_000), data=st.data())
def test_chunk_stack_bytes_counts_every_byte_on_its_pages_stack(spec, g: int | None, size: int,  # type: ignore[no-untyped-def]
                                                                data: st.DataObject) -> None:
    """The passes' per-stack byte count of a chunk equals the page-by-page definition."""
    plan = generate("allgather", 4, tbs_per_peer=2)
    base = layout.BaselineLayout(plan, spec, size, nar_granularity=g)
    info = plan.gpus[data.draw(st.integers(0, 3))]
    counts = {Buffer.INPUT: info.input_chunks, Buffer.OUTPUT: info.output_chunks}
    buf = data.draw(st.sampled_from(sorted((b for b, n in counts.items() if n), key=str)))
    chunk = data.draw(st.integers(0, counts[buf] - 1))
    page, cb = spec.chip.page_bytes, base.chunk_bytes
    lo = base.base_page(info.id, buf) * page + chunk * cb
    expected: dict[int, int] = {}
    at = lo
    while at < lo + cb:
        nxt = min(lo + cb, (at // page + 1) * page)
        s = nar_segment_stack(spec, at // page, g)
        expected[s] = expected.get(s, 0) + nxt - at
        at = nxt
    assert base.chunk_stack_bytes(info.id, buf, chunk) == expected


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=st.sampled_from([None, 1, 3, 12]), size=st.integers(1, 40_000_000), block=st.integers(1, 9))
def test_chunk_stack_matrix_rows_are_each_chunks_bytes(spec, g: int | None, size: int,  # type: ignore[no-untyped-def]
                                                      block: int) -> None:
    # every chunk of every buffer at once, a few rows per block, against the one-chunk count
    # (itself checked page by page above) and the chunk's size
    plan = generate("allreduce", 4, tbs_per_peer=2)
    base = layout.BaselineLayout(plan, spec, size, nar_granularity=g)
    keys = [(info.id, buf, c) for info in plan.gpus
            for buf, n in ((Buffer.INPUT, info.input_chunks), (Buffer.OUTPUT, info.output_chunks))
            for c in range(n)]
    m = base.chunk_stack_matrix([k[0] for k in keys], [k[1] for k in keys],
                                np.array([k[2] for k in keys], dtype=np.int64), block=block)
    assert (m.sum(axis=1) == base.chunk_bytes).all()
    for row, (gpu, buf, c) in zip(m.tolist(), keys, strict=True):
        assert {s: b for s, b in enumerate(row) if b} == base.chunk_stack_bytes(gpu, buf, c)


def test_chunk_placement_first_come_first_served(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 2, tbs_per_peer=1, chunks_per_peer=8)
    size = 16 * 1024  # 1 KiB chunks: four chunks share a page
    chunks = (ChunkPlacement(0, Buffer.OUTPUT, 1, 5), ChunkPlacement(0, Buffer.OUTPUT, 2, 7),
              ChunkPlacement(0, Buffer.OUTPUT, 4, 9))
    plan = dataclasses.replace(plan, placement=Placement(chunks=chunks))
    mem, _ = _layout(plan, spec, size)
    base = int(mem.page_base[0] + mem.buffer_page[0, 1])
    assert mem.page_stack[base] == 5  # chunks 0-3: chunk 1 came first
    assert mem.page_stack[base + 1] == 9  # chunks 4-7
    # slots are handed out per stack in page order: both pages are the first on their stacks
    assert mem.page_phys[base] == physical_address(spec, 5, 0)
    assert mem.page_phys[base + 1] == physical_address(spec, 9, 0)


def test_a_chunk_dealt_over_stacks_takes_its_pages_in_turn(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 2, tbs_per_peer=1, chunks_per_peer=8)
    size = 96 * 1024  # 6 KiB chunks: chunk 0 is on pages 0-1, chunk 1 on pages 1-2
    chunks = (ChunkPlacement(0, Buffer.OUTPUT, 1, 3), ChunkPlacement(0, Buffer.OUTPUT, 1, 4),
              ChunkPlacement(0, Buffer.OUTPUT, 0, 6))
    plan = dataclasses.replace(plan, placement=Placement(chunks=chunks))
    mem, _ = _layout(plan, spec, size)
    base = int(mem.page_base[0] + mem.buffer_page[0, 1])
    # chunk 1 came first: its pages go to its stacks in turn; chunk 0 gets only the page that
    # chunk 1 did not take
    assert [int(x) for x in mem.page_stack[base:base + 3]] == [6, 3, 4]


def test_placed_threadblocks_keep_their_cu(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 2)
    plan = dataclasses.replace(plan, placement=Placement(threadblocks=(TbPlacement(1, 0, 517),)))
    flat = flatten(plan)
    cus = layout.threadblock_cus(plan, spec, flat)
    t = int(np.flatnonzero((flat.tb_gpu == 1) & (flat.tb_id == 0))[0])
    assert cus[t] == 517


def test_receive_buffers_follow_scratch(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allreduce", 4, algo="ring")
    mem, flat = _layout(plan, spec, 1 << 20)
    fused = np.flatnonzero(mem.node_recv_page >= 0)
    assert fused.size > 0
    for n in fused.tolist():
        g = int(flat.tb_gpu[flat.node_tb[n]])
        assert mem.node_recv_page[n] >= mem.buffer_page[g].max()


@settings(max_examples=30, deadline=None)
@given(pages=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 5000)), min_size=1, max_size=8),
       offset=st.integers(0, 4095), nar=st.sampled_from([None, 1, 2, 3, 4, 6, 12]),
       cu=st.one_of(st.none(), st.integers(0, 1007)), line=st.sampled_from([256, 200, 4096, 5000]))
def test_replay_port_hash_matches_the_topology(pages: list[tuple[int, int]], offset: int,
                                               nar: int | None, cu: int | None, line: int) -> None:
    # the replay re-implements the address map in numba (walking pages line by line without
    # dividing); every line's stack and port must agree with nuna.topology, for ports chosen by
    # the address and (``cu``) by the storing CU, with lines that straddle pages or skip one
    from nuna.sim import engine as eng
    from nuna.topology.address import cu_nar_domains, io_port, nar_port_table, stack_domains

    spec = load_topology("nuna-4die" if cu is None else "nuna-4die-nar-cu")
    g = nar or 1
    domain = cu_nar_domains(spec, g)[cu] if cu is not None and g > 1 else -1
    page_stack = np.array([s for s, _ in pages], dtype=np.int64)
    page_phys = np.array([physical_address(spec, s, slot) for s, slot in pages], dtype=np.int64)
    page = spec.chip.page_bytes
    nbytes = len(pages) * page - offset  # one remote store from ``offset`` to the last page's end
    args = (np.array([nbytes]), np.zeros(1, np.int32), np.zeros(1, np.int32),
            np.array([[-1, -1, -1, offset]]), np.zeros(1, np.int64), page_stack, page_phys, page,
            spec.chip.address_hash_granularity_bytes, stack_domains(spec, g), nar_port_table(spec, g),
            np.array([domain]), line, line)
    ptr = np.zeros(2, np.int64)
    jobs, j_bytes, j_cls = eng.build_jobs(*args, ptr, 1)  # capacity 1: the arrays must grow
    assert jobs == -(-nbytes // line) == ptr[1]
    assert int(j_bytes[:jobs].sum()) == nbytes
    for k in range(jobs):
        vaddr = offset + k * line  # the line's first byte decides its page
        j = vaddr // page
        assert j_cls[k, 4] == pages[j][0]
        assert j_cls[k, 3] == io_port(spec, int(page_phys[j]) + vaddr % page, nar, cu)
        assert list(j_cls[k, :3]) == [-1, -1, -1]


@settings(max_examples=20, deadline=None)
@given(sizes=st.lists(st.integers(0, 40_000), min_size=1, max_size=6),
       packet=st.sampled_from([256, 1024, 8192]), capacity=st.integers(1, 64))
def test_build_jobs_is_independent_of_its_starting_capacity(sizes: list[int], packet: int,
                                                            capacity: int) -> None:
    # build_jobs fills its arrays in one pass and grows them when the estimate is short: the
    # jobs (offsets, bytes, routes) must be the same whatever room it starts with
    from nuna.sim import engine as eng
    from nuna.topology.address import nar_port_table, stack_domains

    spec = load_topology("nuna-4die")
    page = spec.chip.page_bytes
    npages = sum(-(-s // page) + 1 for s in sizes) + 1
    page_stack = (np.arange(npages, dtype=np.int64) * 5) % 16
    page_phys = np.arange(npages, dtype=np.int64) * page
    addr, start = [], 0
    for k, size in enumerate(sizes):  # node k loads (k odd) and stores remotely from ``start``
        addr.append([start if k % 2 else -1, -1, -1, start])
        start += size
    n = len(sizes)
    args = (np.array(sizes, np.int64), np.zeros(n, np.int32), np.zeros(n, np.int32), np.array(addr, np.int64),
            np.zeros(1, np.int64), page_stack, page_phys, page, spec.chip.address_hash_granularity_bytes,
            stack_domains(spec, 1), nar_port_table(spec, 1), np.full(n, -1, np.int64), 256, packet)
    ptr_a, ptr_b = np.zeros(n + 1, np.int64), np.zeros(n + 1, np.int64)
    jobs_a, jb_a, jc_a = eng.build_jobs(*args, ptr_a, capacity)
    jobs_b, jb_b, jc_b = eng.build_jobs(*args, ptr_b, sum(-(-s // 256) for s in sizes) + 1)
    assert jobs_a == jobs_b == ptr_a[-1]
    assert np.array_equal(ptr_a, ptr_b)
    assert np.array_equal(jb_a[:jobs_a], jb_b[:jobs_b])
    assert np.array_equal(jc_a[:jobs_a], jc_b[:jobs_b])
    assert int(jb_a[:jobs_a].sum()) == sum(sizes)


def test_a_chunk_placed_on_several_stacks_deals_its_pages_over_them(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 2, tbs_per_peer=1, chunks_per_peer=2)
    size = 4 * 5 * 4096  # 5-page chunks
    chunks = (ChunkPlacement(0, Buffer.OUTPUT, 1, 3), ChunkPlacement(0, Buffer.OUTPUT, 2, 6),
              ChunkPlacement(0, Buffer.OUTPUT, 1, 11), ChunkPlacement(0, Buffer.OUTPUT, 1, 14))
    plan = dataclasses.replace(plan, placement=Placement(chunks=chunks))
    mem, _ = _layout(plan, spec, size)
    base = int(mem.page_base[0] + mem.buffer_page[0, 1])
    # chunk 1 (pages 5-9) in turn over its stacks in listed order; chunk 2 (pages 10-14) on one
    assert mem.page_stack[base + 5:base + 10].tolist() == [3, 11, 14, 3, 11]
    assert mem.page_stack[base + 10:base + 15].tolist() == [6] * 5
    # the pages of other chunks keep the baseline round-robin
    assert mem.page_stack[base:base + 5].tolist() == [baseline_stack(spec, base + j) for j in range(5)]


def test_buffers_beyond_the_gpus_memory_are_refused_before_the_page_arrays(spec) -> None:  # type: ignore[no-untyped-def]
    from nuna.errors import SimulationError

    plan = generate("allgather", 2)
    hbm = spec.chip.hbm_stacks * spec.chip.pages_per_stack * spec.chip.page_bytes
    mem, _ = _layout(plan, spec, spec.chip.page_bytes * 64)  # fits
    assert mem.page_stack.shape[0] > 0
    # 2**20 times the GPU's memory: the page arrays alone would be terabytes, so reaching them
    # would be a MemoryError, not this message
    with pytest.raises(SimulationError, match=r"gpu 0: buffers of \d+ pages .* exceed its memory"):
        _layout(plan, spec, hbm << 20)
