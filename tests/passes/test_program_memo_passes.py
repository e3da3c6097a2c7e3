"""What the passes derive from a plan's program once (``Plan.derived``): the workload, NAP's
logical groups and the NAR heuristic's store rows equal a fresh derivation, a placed plan
shares them, and another program does not."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest

from nuna.passes import PassContext
from nuna.passes.access import _workload, decompose, remote_stores, workload
from nuna.passes.configs import apply_config
from nuna.passes.logical import logical_allocation
from nuna.passes.nap import nap_groups, nap_workload
from nuna.passes.nar import estimate_granularity, store_rows
from nuna.plan.generate import generate
from nuna.plan.ir import Plan
from nuna.plan.xml import load
from nuna.topology.spec import load_topology
from tests.conftest import PLANS_MSCCL

SPEC = load_topology("nuna-4die")


CASES = ["allreduce-4-2", "alltoall-8-1", "allreduce_allpairs_n8_i1_LL128.xml"]


def _plan(case: str) -> Plan:
    if case.endswith(".xml"):
        if not PLANS_MSCCL.is_dir():
            pytest.skip("the shared MSCCL corpus is not here")
        return load(PLANS_MSCCL / case)
    collective, gpus, tbs = case.split("-")
    return generate(collective, int(gpus), tbs_per_peer=int(tbs))


def _equal_fields(a: object, b: object) -> None:
    for f in dataclasses.fields(a):  # type: ignore[arg-type]
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("case", CASES)
def test_the_passes_derivations_equal_fresh_ones_and_are_made_once(case: str) -> None:
    plan = _plan(case)
    accesses, stores = workload(plan)
    assert (accesses, stores) == _workload(plan)
    assert decompose(plan) is accesses
    assert remote_stores(plan) is stores
    groups, work = nap_groups(plan)
    assert groups == logical_allocation(_workload(plan)[0])
    _equal_fields(work, nap_workload(groups))
    assert nap_groups(plan)[1] is work
    # a placed plan (same program) shares them
    placed = apply_config(plan, "NAP+NAR", PassContext(SPEC, 1 << 20))
    assert workload(placed)[0] is accesses
    assert nap_groups(placed)[1] is work


@pytest.mark.parametrize("case", CASES)
def test_the_heuristic_estimates_alike_from_kept_and_fresh_store_rows(case: str) -> None:
    plan = _plan(case)
    ctx = PassContext(SPEC, 1 << 20)

    def place(g: int) -> Plan:
        return apply_config(plan, "UA+NAR", ctx, g)

    kept = estimate_granularity(plan, SPEC, ctx.size_bytes, place)
    assert "nuna.passes.nar.store_rows" in plan.program_memo()
    fresh_stores = _workload(plan)[1]  # equal to the kept ones, not them: the rows are made afresh
    assert estimate_granularity(plan, SPEC, ctx.size_bytes, place, stores=fresh_stores) == kept
    _equal_fields(plan.program_memo()["nuna.passes.nar.store_rows"], store_rows(plan, fresh_stores))
    # stores of the caller's own are its, not the kept rows: twice the chunks each, twice the bytes
    doubled = tuple(replace(st, chunks=2 * st.chunks) for st in fresh_stores)
    twice = estimate_granularity(plan, SPEC, ctx.size_bytes, place, stores=doubled)[1]
    assert [e.serial_ns for e in twice] == pytest.approx([2 * e.serial_ns for e in kept[1]])


def test_another_program_derives_its_own() -> None:
    plan = generate("allgather", 4)
    accesses, _ = workload(plan)
    # the same plan with its first send reading another chunk: a program of its own
    gpu = plan.gpus[0]
    tb = gpu.threadblocks[0]
    step = replace(tb.steps[0], src_offset=(tb.steps[0].src_offset or 0) + 1)
    edited = replace(plan, gpus=(replace(gpu, threadblocks=(replace(tb, steps=(step, *tb.steps[1:])),
                                                            *gpu.threadblocks[1:])), *plan.gpus[1:]))
    assert edited.program_memo() == {}
    changed, _ = _workload(edited)
    assert changed != accesses
    assert decompose(edited) == changed
