"""The executors' fusion of ``re`` chains (nuna.plan.fusion) against a step-by-step model of
their parser, and what verify and the generator make of it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.plan.dag import flatten
from nuna.plan.fusion import MAX_REDUCE_FUSION, reduce_fusion
from nuna.plan.generate import generate
from nuna.plan.ir import Buffer, Collective, Gpu, Plan, Protocol, Step, StepType, Threadblock
from nuna.plan.verify import summarize, verify

_RE, _NOP, _CPY = StepType.REDUCE, StepType.NOP, StepType.COPY
_I, _S = Buffer.INPUT, Buffer.SCRATCH


@dataclass
class _Parser:
    """The executor's per-threadblock state while it reads steps in order (reference §5)."""

    dst: tuple[Buffer | None, int | None] | None = None  # the chain's (dstbuf, dstoff), if open
    src_buf: Buffer | None = None
    reduces: int = 0  # re steps read in this threadblock


def _executor_groups(steps: tuple[Step, ...]) -> list[list[int]]:
    """The positions of each fused pass of ``re`` steps, one threadblock, read as the executor
    reads it: a continuation joins the previous transmission."""
    groups: list[list[int]] = []
    state = _Parser()
    for pos, s in enumerate(steps):
        if s.type is _NOP:
            continue  # not a transmission: leaves the chain as it is
        if s.type is not _RE:
            state.dst = None
            continue
        joins = (state.dst == (s.dst_buffer, s.dst_offset) and state.src_buf == s.src_buffer
                 and s.depend_tb is None)
        if joins:
            groups[-1].append(pos)
        else:
            groups.append([pos])
        state.reduces += 1
        if s.has_dependent or state.reduces == MAX_REDUCE_FUSION:
            state.dst = None
        else:
            state.dst, state.src_buf = (s.dst_buffer, s.dst_offset), s.src_buffer
    return groups


def _nuna_groups(steps: tuple[Step, ...]) -> list[list[int]]:
    """The executor's passes, cut where nuna replays otherwise (nuna.plan.fusion)."""
    out: list[list[int]] = []
    for group in _executor_groups(steps):
        cur = [group[0]]
        for a, b in itertools.pairwise(group):
            between = steps[a + 1:b]
            cut = (steps[b].count != steps[a].count or len(cur) == MAX_REDUCE_FUSION
                   or any(s.type is _NOP and s.depend_tb is not None for s in between))
            if cut:
                out.append(cur)
                cur = []
            cur.append(b)
        out.append(cur)
    return out


def _plan(tbs: list[tuple[Step, ...]]) -> Plan:
    threadblocks = tuple(Threadblock(id=i, send_peer=None, recv_peer=None, channel=0, steps=steps)
                         for i, steps in enumerate(tbs))
    return Plan(name="t", protocol=Protocol.SIMPLE, nchannels=1, nchunksperloop=4, ngpus=1,
                collective=Collective.ALLREDUCE, inplace=True, outofplace=False, min_bytes=0, max_bytes=0,
                gpus=(Gpu(0, 8, 0, 8, threadblocks),))


@st.composite
def _steps(draw: st.DrawFn) -> tuple[Step, ...]:
    out = []
    for i in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from([_RE] * 6 + [_NOP, _CPY]))
        dep = draw(st.sampled_from([None, None, None, 0]))
        if kind is _NOP:
            out.append(Step(i, _NOP, None, None, None, None, 0, dep, None if dep is None else 0))
            continue
        out.append(Step(i, kind, draw(st.sampled_from([_S, _S, _S, _I])), draw(st.integers(0, 7)), _I,
                        draw(st.sampled_from([0, 0, 0, 1])), draw(st.sampled_from([1, 1, 1, 2])),
                        dep, None if dep is None else 0, draw(st.sampled_from([False] * 5 + [True]))))
    return tuple(out)


@settings(max_examples=300, deadline=None)
@given(st.lists(_steps(), min_size=1, max_size=3))
def test_groups_follow_the_executor_parser(tbs: list[tuple[Step, ...]]) -> None:
    flat = flatten(_plan(tbs))
    head = reduce_fusion(flat).head
    base = 0
    for steps in tbs:
        for group in _nuna_groups(steps):
            assert head[base + group[0]] == -1
            for pos in group[1:]:
                assert head[base + pos] == base + group[0]
        members = {p for g in _nuna_groups(steps) for p in g[1:]}
        for pos in range(len(steps)):
            if pos not in members:
                assert head[base + pos] == -1
        base += len(steps)


def _chain(n: int, *, cnt: tuple[int, ...] | None = None, nop_at: int | None = None) -> tuple[Step, ...]:
    steps: list[Step] = []
    for j in range(n):
        if nop_at == j:
            steps.append(Step(len(steps), _NOP, None, None, None, None, 0, 0, 0))
        steps.append(Step(len(steps), _RE, _S, j % 8, _I, 0, 1 if cnt is None else cnt[j]))
    return tuple(steps)


def test_a_chain_of_twenty_reduces_is_two_passes_in_nuna_and_is_flagged() -> None:
    plan = _plan([_chain(8), _chain(20)])
    fusion = reduce_fusion(flatten(plan))
    # the second threadblock's counter reaches 16 at its 16th re: cut there, as both executors do
    assert fusion.head[8:8 + 16].tolist() == [-1] + [8] * 15
    assert fusion.head[8 + 16:].tolist() == [-1] + [24] * 3
    assert fusion.too_long.size == 0
    # a first chain of 8 uses up half the counter: the next one runs on past 16 in the executor
    plan = _plan([_chain(4) + tuple(Step(4 + s.index, s.type, s.src_buffer, s.src_offset, s.dst_buffer, 1,
                                         s.count) for s in _chain(30))])
    fusion = reduce_fusion(flatten(plan))
    assert fusion.head[:4].tolist() == [-1, 0, 0, 0]
    # the counter cut lands on the 12th of the second chain; its remaining 18 exceed 16
    assert fusion.head[4:16].tolist() == [-1] + [4] * 11
    assert fusion.head[16:32].tolist() == [-1] + [16] * 15
    assert fusion.head[32:].tolist() == [-1, 32]
    assert fusion.too_long.tolist() == [32]
    report = verify(plan, semantics=False)
    assert any("more sources than their kernel" in w for w in report.warnings)


def test_cnt_changes_and_nops_with_dependencies_cut_nuna_chains_and_are_flagged() -> None:
    fusion = reduce_fusion(flatten(_plan([_chain(4, cnt=(1, 1, 2, 2))])))
    assert fusion.head.tolist() == [-1, 0, -1, 2]
    assert fusion.cnt_change.tolist() == [2]
    fusion = reduce_fusion(flatten(_plan([_chain(4, nop_at=2)])))
    assert fusion.head.tolist() == [-1, 0, -1, -1, 3]
    assert fusion.nop_inside.tolist() == [3]


def test_generated_plans_keep_fused_passes_within_the_kernel_limit() -> None:
    for n in (8, 17, 18, 40):
        plan = generate("allreduce", n)
        flat = flatten(plan)
        fusion = reduce_fusion(flat)
        assert fusion.too_long.size == 0
        # every reducer's chain of n - 2 re steps is fused whole into passes of at most 16
        heads = np.flatnonzero((flat.code == flat.code[fusion.head[fusion.head >= 0][0]]) & (fusion.head < 0))
        sizes = np.bincount(fusion.head[fusion.head >= 0], minlength=flat.num_nodes)[heads] + 1
        assert sizes.max() <= MAX_REDUCE_FUSION
        assert sizes.sum() == n * (n - 2)
        assert -(-(n - 2) // MAX_REDUCE_FUSION) * n == heads.size
        warnings = verify(plan, semantics=False).warnings
        assert not [w for w in warnings if "hasdep" in w or "fuse" in w]


def test_the_summary_counts_fused_steps_and_passes() -> None:
    # 8 GPUs: each GPU's reducer adds 6 peers' contributions in one chain, one pass
    assert summarize(generate("allreduce", 8)).fused_re == (48, 8)
    assert summarize(generate("allreduce", 8)).to_dict()["fused_re"] == {"steps": 48, "passes": 8}
    # 20 GPUs: chains of 18, passes of 16 and 2
    assert summarize(generate("reducescatter", 20)).fused_re == (20 * 18, 40)
    assert summarize(generate("allgather", 8)).fused_re == (0, 0)
    # re steps into different destinations do not chain
    two = (Step(0, _RE, _S, 0, _I, 0, 1), Step(1, _RE, _S, 1, _I, 1, 1))
    assert summarize(_plan([two])).fused_re == (0, 0)
    assert summarize(_plan([(two[0], Step(1, _RE, _S, 1, _I, 0, 1))])).fused_re == (2, 1)
