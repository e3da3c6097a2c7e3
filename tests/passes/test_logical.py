"""NAP's collective decomposition and ``logical_allocation``: worked examples and invariants."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.passes.access import ChunkKey, TbAccess, decompose, remote_stores
from nuna.passes.logical import logical_allocation
from nuna.plan.generate import generate
from nuna.plan.ir import Buffer, StepType

O = Buffer.OUTPUT


def ck(i: int, gpu: int = 0) -> ChunkKey:
    return ChunkKey(i, O, gpu)


def tb(i: int, *chunks: int) -> TbAccess:
    return TbAccess(0, i, tuple(ck(c) for c in chunks))


def test_disjoint_threadblocks_form_their_own_groups() -> None:
    groups = logical_allocation([tb(0, 1, 2), tb(1, 3), tb(2, 4, 5, 6)])
    # sizes 3, 2, 4 -> sorted 4, 3, 2
    assert [g.threadblocks for g in groups] == [((0, 2),), ((0, 0),), ((0, 1),)]
    assert [g.size for g in groups] == [4, 3, 2]


def test_joins_the_group_sharing_most_chunks() -> None:
    # tb2 shares one chunk with group 0 (A) and two with group 1 (B, C)
    groups = logical_allocation([tb(0, 0), tb(1, 1, 2), tb(2, 0, 1, 2, 3)])
    by_first = {g.threadblocks[0]: g for g in groups}
    assert by_first[(0, 1)].threadblocks == ((0, 1), (0, 2))
    assert by_first[(0, 1)].chunks == (ck(1), ck(2), ck(3))  # D joins with tb2
    assert by_first[(0, 0)].threadblocks == ((0, 0),)


def test_ties_go_to_the_earliest_group() -> None:
    groups = logical_allocation([tb(0, 0), tb(1, 1), tb(2, 0, 1)])
    big = groups[0]
    assert big.threadblocks == ((0, 0), (0, 2))
    assert big.formed == 0


def test_equal_sizes_keep_formation_order() -> None:
    groups = logical_allocation([tb(0, 5), tb(1, 6), tb(2, 7)])
    assert [g.formed for g in groups] == [0, 1, 2]


def test_threadblock_without_chunks_forms_a_group() -> None:
    groups = logical_allocation([tb(0, 1), tb(1)])
    assert [g.threadblocks for g in groups] == [((0, 0),), ((0, 1),)]


workloads = st.lists(st.lists(st.integers(0, 12), max_size=5, unique=True), min_size=1, max_size=25)


@settings(max_examples=200, deadline=None)
@given(workloads)
def test_groups_partition_the_workload(raw: list[list[int]]) -> None:
    work = [tb(i, *cs) for i, cs in enumerate(raw)]
    groups = logical_allocation(work)
    tbs = [t for g in groups for t in g.threadblocks]
    assert sorted(tbs) == [(0, i) for i in range(len(work))]
    chunks = [c for g in groups for c in g.chunks]
    assert len(chunks) == len(set(chunks))
    assert set(chunks) == {c for w in work for c in w.chunks}
    sizes = [g.size for g in groups]
    assert sizes == sorted(sizes, reverse=True)
    for a, b in itertools.pairwise(groups):
        assert a.size > b.size or a.formed < b.formed
    # replay: a threadblock opens a group iff none of its chunks was assigned before it
    assigned: set[ChunkKey] = set()
    first = {g.members[0].access.tb for g in groups}
    for w in work:
        assert (w.tb in first) == (not (set(w.chunks) & assigned))
        assigned |= set(w.chunks)
    # a member's chunks that were new when it joined are exactly the ones listed with it
    for g in groups:
        for m in g.members:
            assert set(m.new_chunks) <= set(m.access.chunks)


def test_decompose_direct_allgather() -> None:
    plan = generate("allgather", 4, tbs_per_peer=1)
    work = {(w.gpu, w.tb): w for w in decompose(plan)}
    assert len(work) == 4 * 3
    for g in plan.gpus:
        for t in g.threadblocks:
            w = work[(g.id, t.id)]
            sends = [s for s in t.steps if s.type.sends]
            # one local read (the own slice) and one remote store into the peer's same chunk
            assert len(w.local) == sum(s.count for s in sends)
            assert {c.gpu for c in w.remote} == {t.send_peer}
            assert [c.chunk for c in w.remote] == [c.chunk for c in w.local]
            # the plain receive touches nothing on this side
            recv_dsts = {(s.dst_buffer, s.dst_offset) for s in t.steps if s.type is StepType.RECV}
            assert not any((c.buffer, c.chunk) in recv_dsts for c in w.local)


def test_reducing_receives_have_no_remote_chunk() -> None:
    plan = generate("reducescatter", 3, tbs_per_peer=1)
    stores = remote_stores(plan)
    assert stores
    steps = {(g.id, t.id): t for g in plan.gpus for t in g.threadblocks}
    has_rrc = any(s.type is StepType.RECV_REDUCE_COPY for t in steps.values() for s in t.steps)
    assert has_rrc
    # as many stores without a target as there are reducing receives
    n_reducing = sum(1 for t in steps.values() for s in t.steps
                     if s.type in (StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_SEND,
                                   StepType.RECV_REDUCE_COPY_SEND))
    assert sum(1 for s in stores if s.target is None) == n_reducing
    for w in decompose(plan):
        assert all(c.gpu == w.gpu for c in w.chunks if c not in w.remote)
