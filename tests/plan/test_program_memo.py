"""The plan's program memo: ``flatten``, the replay DAG and the semantic check are derived once
per program and shared (arrays read-only), a plan with another program never sees them, and the
memo is no part of the plan's value (equality, hash, repr, pickles)."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna.errors import PlanError
from nuna.plan.dag import _analyze, _flatten, analyze, build_dag, flatten
from nuna.plan.generate import generate
from nuna.plan.ir import Placement, Plan, StepType, TbPlacement
from nuna.plan.semantics import check_semantics
from nuna.plan.xml import dump, load
from tests.plan.test_dag import _edit_step, check_against_reference, make_plan

REPO = Path(__file__).resolve().parents[2]


def _arrays(value: object) -> dict[str, np.ndarray]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)  # type: ignore[arg-type]
            if isinstance(getattr(value, f.name), np.ndarray)}


def _same(a: object, b: object) -> None:
    left, right = _arrays(a), _arrays(b)
    assert left.keys() == right.keys()
    for name, arr in left.items():
        assert arr.dtype == right[name].dtype, name
        assert np.array_equal(arr, right[name]), name


def test_a_program_is_flattened_and_analysed_once_and_shared_read_only() -> None:
    plan = generate("allreduce", 4, tbs_per_peer=2)
    flat = flatten(plan)
    dag = build_dag(plan)
    assert flatten(plan) is flat
    assert build_dag(plan) is dag
    assert analyze(plan, limit=3).dag is dag
    for arr in [*_arrays(flat).values(), *_arrays(dag).values(), analyze(plan).waited_nodes]:
        assert not arr.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        dag.ctrl_indegree[0] += 1
    with pytest.raises(ValueError, match="read-only"):
        flat.count[0] = 7


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), ngpus=st.integers(2, 5), transfers=st.integers(0, 12),
       local_steps=st.integers(0, 6), deps=st.integers(0, 6))
def test_the_memo_holds_what_a_fresh_derivation_gives(seed: int, ngpus: int, transfers: int, local_steps: int,
                                                       deps: int) -> None:
    plan = make_plan(seed, ngpus, transfers, local_steps, deps)
    fresh_flat = _flatten(plan)
    fresh = _analyze(plan, fresh_flat, 50)
    _same(flatten(plan), fresh_flat)
    memo = analyze(plan)  # the memo's, from here on
    assert memo.issues == fresh.issues
    assert np.array_equal(memo.waited_nodes, fresh.waited_nodes)
    if fresh.dag is None:
        assert memo.dag is None
    else:
        assert memo.dag is not None
        _same(memo.dag, fresh.dag)
        assert analyze(plan).dag is memo.dag
        check_against_reference(plan)  # the memo's DAG, against the naive construction


def test_another_program_gets_its_own_dag() -> None:
    plan = load(REPO / "plans" / "allreduce_scratch_n2.xml")
    dag = build_dag(plan)
    # the same edit as test_dag's: a dependency naming no threadblock. A stale DAG would pass
    broken = _edit_step(plan, 0, 0, 2, depend_tb=9)
    with pytest.raises(PlanError, match="depid 9 names no threadblock"):
        build_dag(broken)
    # a valid change of program: a nop at the end of a threadblock is one node more
    gpu = plan.gpus[0]
    tb = gpu.threadblocks[0]
    nop = replace(tb.steps[-1], index=tb.steps[-1].index + 1, type=StepType.NOP, depend_tb=None,
                  depend_step=None, has_dependent=False)
    edited = replace(plan, gpus=(replace(gpu, threadblocks=(replace(tb, steps=(*tb.steps, nop)),
                                                            *gpu.threadblocks[1:])), *plan.gpus[1:]))
    assert edited.program_memo() is not plan.program_memo()
    other = build_dag(edited)
    assert other.num_nodes == dag.num_nodes + 1


def test_an_analysis_with_issues_is_not_kept_so_its_limit_is_honoured() -> None:
    plan = load(REPO / "plans" / "allreduce_scratch_n2.xml")
    broken = _edit_step(_edit_step(plan, 0, 0, 2, depend_tb=9), 1, 0, 2, depend_tb=9)
    one = analyze(broken, limit=1)
    assert one.dag is None
    assert len(one.issues) == 1
    assert len(analyze(broken, limit=50).issues) == 2
    assert "nuna.plan.dag.analyze" not in broken.program_memo()


def test_a_new_placement_shares_the_memo_and_the_memo_is_not_part_of_the_value() -> None:
    plan = generate("allgather", 4)
    dag = build_dag(plan)
    tb = plan.gpus[0].threadblocks[0]
    placed = plan.with_placement(Placement(threadblocks=(TbPlacement(plan.gpus[0].id, tb.id, 5),)))
    assert placed.placement != plan.placement
    assert build_dag(placed) is dag
    assert placed == dataclasses.replace(plan, placement=placed.placement)
    assert hash(placed) == hash(dataclasses.replace(plan, placement=placed.placement))
    # a pickle carries the plan, not its arrays; it derives its own after loading
    back: Plan = pickle.loads(pickle.dumps(plan))
    assert back == plan
    assert back.program_memo() == {}
    assert len(pickle.dumps(plan)) == len(pickle.dumps(generate("allgather", 4)))
    assert "memo" not in repr(plan)
    assert dump(plan) == dump(generate("allgather", 4))
    _same(build_dag(back), dag)


def test_the_semantic_check_runs_once_per_program_and_finds_the_same() -> None:
    plan = generate("allreduce", 4)
    dag = build_dag(plan)
    first = check_semantics(plan, dag)
    assert check_semantics(plan, dag) is first
    placed = plan.with_placement(Placement(nar_granularity=2))
    assert check_semantics(placed, build_dag(placed)) is first
    # a DAG that is not the program's own is checked afresh, with the same findings
    own = _analyze(plan, _flatten(plan), 1).dag
    assert own is not None
    again = check_semantics(plan, own)
    assert again is not first
    assert again == first


def test_a_wrong_plan_keeps_its_semantic_errors() -> None:
    # gpu 1 sends chunk 0 in place of its own chunk 1: gpu 0 never gets chunk 1
    plan = _edit_step(generate("allgather", 2), 1, 0, 0, src_offset=0, dst_offset=0)
    fresh = check_semantics(plan, _analyze(plan, _flatten(plan), 1).dag)  # type: ignore[arg-type]
    assert fresh.errors
    memo = check_semantics(plan, build_dag(plan))
    assert memo == fresh
    assert check_semantics(plan, build_dag(plan)) is memo
