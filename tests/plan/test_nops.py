"""The verifier's nop checks: the next real step of every nop is found with one binary search
(``next_non_nop``), not a forward scan per nop, which was quadratic in a run of trailing nops
(`nuna validate` of a plan with 40k of them: 41.9 s before, 2.1 s after, 2026-12-05). The scan
survives here as the reference."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from unittest import mock

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.plan.dag import STEP_TYPES
from nuna.plan.generate import generate
from nuna.plan.ir import Plan, Step, StepType
from nuna.plan.verify import next_non_nop, verify
from nuna.plan.xml import load

REPO = Path(__file__).resolve().parents[2]
SCRATCH = REPO / "plans" / "allreduce_scratch_n2.xml"  # has a nop with a dependency
NOP = STEP_TYPES.index(StepType.NOP)


def next_non_nop_by_scan(code: npt.NDArray[np.int64], tb_indptr: npt.NDArray[np.int64],
                         node_tb: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The verifier's former forward scan from every node, written plainly."""
    out = []
    for n in range(code.shape[0]):
        end = int(tb_indptr[node_tb[n] + 1])
        out.append(next((k for k in range(n + 1, end) if code[k] != NOP), -1))
    return np.asarray(out, dtype=np.int64)


step_codes = st.one_of(st.just(NOP), st.integers(0, len(STEP_TYPES) - 1))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(step_codes, max_size=12), max_size=6))
def test_next_non_nop_matches_the_forward_scan(tbs: list[list[int]]) -> None:
    # empty threadblocks and all-nop threadblocks included: neither may leak into a neighbour
    sizes = [len(tb) for tb in tbs]
    code = np.asarray([c for tb in tbs for c in tb], dtype=np.int64)
    tb_indptr = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64))).astype(np.int64)
    node_tb = np.repeat(np.arange(len(tbs), dtype=np.int64), sizes)
    got = next_non_nop(code, tb_indptr, node_tb)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, next_non_nop_by_scan(code, tb_indptr, node_tb))


BASE = load(SCRATCH)


def _nop(dep_tb: int | None, hasdep: bool) -> Step:
    return Step(0, StepType.NOP, None, None, None, None, 0, dep_tb, None if dep_tb is None else 0, hasdep)


@st.composite
def plans_with_nops(draw: st.DrawFn) -> Plan:
    """BASE with nops (with or without a dependency, hasdep or not) inserted anywhere, trailing
    runs included, and some real steps stripped of their dependency (the inherit case)."""
    gpus = []
    for g in BASE.gpus:
        tb_ids = [tb.id for tb in g.threadblocks]
        dep = st.one_of(st.none(), st.sampled_from(tb_ids))
        tbs = []
        for tb in g.threadblocks:
            steps: list[Step] = []
            for s in (*tb.steps, None):
                steps += [_nop(draw(dep), draw(st.booleans())) for _ in range(draw(st.integers(0, 3)))]
                if s is not None:
                    if draw(st.booleans()):
                        s = dataclasses.replace(s, depend_tb=None, depend_step=None)
                    steps.append(s)
            tbs.append(dataclasses.replace(tb, steps=tuple(dataclasses.replace(s, index=i)
                                                           for i, s in enumerate(steps))))
        gpus.append(dataclasses.replace(g, threadblocks=tuple(tbs)))
    return dataclasses.replace(BASE, gpus=tuple(gpus))


@settings(max_examples=60, deadline=None)
@given(plans_with_nops())
def test_nop_findings_match_the_forward_scan(plan: Plan) -> None:
    got = verify(plan, semantics=False)
    with mock.patch("nuna.plan.verify.next_non_nop", next_non_nop_by_scan):
        want = verify(plan, semantics=False)
    assert got == want


def test_many_trailing_nops() -> None:
    # 50k trailing nops: seconds of work per thousand nops for the former scan, well under
    # a second now (not timed here; a quadratic check would make this test take minutes)
    plan = generate("allgather", 2)
    g = plan.gpus[0]
    tb = g.threadblocks[0]
    n = 50_000
    nops = tuple(dataclasses.replace(_nop(None, False), index=len(tb.steps) + i) for i in range(n))
    tb = dataclasses.replace(tb, steps=tb.steps + nops)
    plan = dataclasses.replace(plan, gpus=(dataclasses.replace(g, threadblocks=(tb, *g.threadblocks[1:])),
                                           *plan.gpus[1:]))
    report = verify(plan, semantics=False)
    assert report.errors == ()
    first = len(tb.steps) - n
    assert report.warnings == (
        f"gpu 0 tb 0: {n + first} steps (both MSCCL executors reject more than 256)",
        f"gpu 0 tb 0 step {first}: nop without a dependency (the executors' step counter then "
        f"disagrees with s) (and {n - 1} more like it)",
        f"gpu 0 tb 0 step {first}: nop at the end of its threadblock (the executors drop it) "
        f"(and {n - 1} more like it)",
    )
