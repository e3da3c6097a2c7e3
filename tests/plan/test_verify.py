"""verify(): one targeted finding per mistake (with file:line when the source is known),
warnings for what the executors tolerate, strict mode, deadlocks, semantics, and the summary
used by ``nuna info``."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest

from nuna.errors import PlanError, UsageError
from nuna.plan.ir import Buffer, ChunkPlacement, Placement, Plan, Step, StepType, TbPlacement
from nuna.plan.verify import (
    MAX_ERRORS,
    Report,
    chunk_bytes_for,
    size_fit,
    summarize,
    verify,
    verify_placement,
)
from nuna.plan.xml import dump, load, loads_with_source

REPO = Path(__file__).resolve().parents[2]
FIG7 = REPO / "plans" / "fig7_allgather_n2_c2.xml"
SCRATCH = REPO / "plans" / "allreduce_scratch_n2.xml"
RING = REPO / "plans" / "ring_allreduce_n3.xml"


def edit_tb(plan: Plan, g: int, t: int, **changes: object) -> Plan:
    gpu = plan.gpus[g]
    tbs = list(gpu.threadblocks)
    tbs[t] = replace(tbs[t], **changes)
    return replace(plan, gpus=tuple(replace(gpu, threadblocks=tuple(tbs)) if i == g else x
                                    for i, x in enumerate(plan.gpus)))


def edit_step(plan: Plan, g: int, t: int, s: int, **changes: object) -> Plan:
    steps = list(plan.gpus[g].threadblocks[t].steps)
    steps[s] = replace(steps[s], **changes)
    return edit_tb(plan, g, t, steps=tuple(steps))


def structural(plan: Plan) -> Report:
    return verify(plan, semantics=False)


def only_error(report: Report) -> str:
    assert len(report.errors) == 1, report.errors
    return report.errors[0]


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [FIG7, SCRATCH, RING, REPO / "plans" / "fig7_allgather_n2_c2_annotated.xml"],
                         ids=lambda p: p.name)
def test_example_plans_are_clean(path: Path) -> None:
    report = verify(load(path), strict=True)
    assert report == Report((), (), ())
    assert report.ok


def test_defaulted_attributes_warn_and_strict_rejects() -> None:
    text = FIG7.read_text().replace(' outofplace="0" minBytes="0" maxBytes="0"', "")
    plan, source = loads_with_source(text, "old.xml")
    assert plan.defaulted == {"outofplace", "minBytes", "maxBytes"}
    report = verify(plan, source=source, semantics=False)
    assert report.ok
    assert len(report.warnings) == 1
    assert report.warnings[0].startswith("old.xml:1: <algo>: outofplace, minBytes, maxBytes absent")
    strict = verify(plan, source=source, semantics=False, strict=True)
    assert strict.errors == report.warnings
    assert strict.warnings == ()


def test_messages_carry_file_and_line() -> None:
    plan, source = loads_with_source(SCRATCH.read_text(), "scratch.xml")
    broken = edit_step(plan, 1, 0, 2, depend_tb=5)
    report = verify(broken, source=source)
    line = _nth_step_line(SCRATCH, 1, 0, 2)
    expected = f"scratch.xml:{line}: gpu 1 tb 0 step 2: depid 5 names no threadblock on gpu 1"
    assert only_error(report) == expected


def _nth_step_line(path: Path, g: int, t: int, s: int) -> int:
    """1-based line of step s of threadblock t of GPU g in a file written by dump()."""
    lines = path.read_text().splitlines()
    gpu_at = [i for i, x in enumerate(lines) if x.startswith("  <gpu ")][g]
    tb_at = [i for i, x in enumerate(lines) if x.startswith("    <tb ") and i > gpu_at][t]
    assert lines[tb_at + 1 + s].lstrip().startswith(f'<step s="{s}"')
    return tb_at + 2 + s


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda p: replace(p, ngpus=3), "ngpus=3 but the plan has 2 <gpu> elements"),
    (lambda p: replace(p, nchunksperloop=10**9),
     "nchunksperloop=1000000000 is more than all declared buffers hold (6 chunks over 2 gpus)"),
    (lambda p: replace(p, gpus=(p.gpus[0], replace(p.gpus[1], id=0))), "gpu id 0 is declared 2 times"),
    (lambda p: replace(p, gpus=(p.gpus[0], replace(p.gpus[1], id=5))), "gpu id 5 is out of range 0..1"),
    (lambda p: replace(p, gpus=(replace(p.gpus[0], scratch_chunks=-1), p.gpus[1])), "s_chunks=-1"),
    (lambda p: edit_tb(p, 0, 1, id=0), "threadblock id 0 is declared more than once on gpu 0"),
    (lambda p: edit_tb(p, 0, 1, id=4), "threadblock ids must be 0..1"),
    (lambda p: edit_tb(p, 0, 1, send_peer=0), "send peer is the gpu itself (send=0)"),
    (lambda p: edit_tb(p, 0, 1, recv_peer=7), "recv=7 is not a gpu (ngpus=2)"),
    (lambda p: edit_tb(p, 0, 1, channel=-1), "chan=-1 must be >= 0 for a threadblock with peers"),
    (lambda p: edit_step(p, 0, 1, 0, count=-1), "cnt=-1 must not be negative"),
    (lambda p: edit_step(p, 0, 0, 0, src_buffer=None, src_offset=None),
     "'cpy' needs a source chunk but has none"),
    (lambda p: edit_step(p, 0, 0, 2, dst_offset=1),
     "destination output chunk 1 outside the buffer (o_chunks=1)"),
    (lambda p: edit_step(p, 0, 1, 0, count=2), "source input chunks 0..1 outside the buffer (i_chunks=1)"),
    (lambda p: edit_step(p, 0, 0, 2, depend_step=None), "depid=1 deps=-1: both must be set or both -1"),
    (lambda p: edit_step(p, 0, 0, 2, depend_step=9), "deps 9 names no step of gpu 0 tb 1 (it has 2 steps)"),
    (lambda p: edit_step(p, 0, 0, 0, type=StepType.RECV),
     "'r' receives but the threadblock has no receive peer"),
    (lambda p: replace(p, placement=Placement(chunks=(ChunkPlacement(0, Buffer.SCRATCH, 3, 0),))),
     "placement: gpu 0 scratch chunk 3 is outside the buffer (1 chunks)"),
    (lambda p: replace(p, placement=Placement(threadblocks=(TbPlacement(1, 9, 0),))),
     "placement: gpu 1 tb 9 does not exist"),
])
def test_each_mistake_gives_one_error(edit, expected: str) -> None:
    report = structural(edit(load(SCRATCH)))
    assert expected in only_error(report)


@pytest.mark.parametrize("placement", [
    Placement(chunks=(ChunkPlacement(0, Buffer.SCRATCH, 3, 0),)),
    Placement(threadblocks=(TbPlacement(1, 9, 0),)),
    Placement(threadblocks=(TbPlacement(0, 1, 2), TbPlacement(0, 1, 3))),
    Placement(threadblocks=(TbPlacement(0, 0, -1),), nar_granularity=0),
    Placement(chunks=(ChunkPlacement(0, Buffer.OUTPUT, 0, 3), ChunkPlacement(0, Buffer.OUTPUT, 0, 3),
                      ChunkPlacement(7, Buffer.INPUT, 0, 0))),
    Placement(threadblocks=(TbPlacement(0, 1, 5), TbPlacement(0, 0, 4)),
              chunks=(ChunkPlacement(0, Buffer.OUTPUT, 0, 1),)),
])
def test_placement_check_alone_finds_what_the_whole_check_finds(placement: Placement) -> None:
    # passes check their output this way: their input's program verified and is unchanged
    plan = replace(load(SCRATCH), placement=placement)
    whole, alone = verify(plan), verify_placement(plan)
    assert alone.errors == whole.errors
    assert alone.warnings == whole.warnings


def _drop_step(plan: Plan, g: int, t: int, s: int) -> Plan:
    steps = [st for i, st in enumerate(plan.gpus[g].threadblocks[t].steps) if i != s]
    return edit_tb(plan, g, t, steps=tuple(replace(st, index=i) for i, st in enumerate(steps)))


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda p: _drop_step(p, 1, 0, 0), "gpu 0 tb 0 step 1: unmatched receive: gpu 1 has no send-type step to "
                                       "gpu 0 on channel 0"),
    (lambda p: _drop_step(p, 1, 0, 1),
     "gpu 0 tb 0 step 0: unmatched send: gpu 1 has no receive-type step from gpu 0 on channel 0"),
    (lambda p: edit_tb(p, 0, 1, steps=(*p.gpus[0].threadblocks[1].steps,
                                        Step(2, StepType.SEND, Buffer.OUTPUT, 1, Buffer.OUTPUT, 1, 1))),
     "gpu 0 tb 1 step 0: connection gpu 0 -> gpu 1 channel 1: 2 send-type steps but gpu 1 tb 1 has 1 "
     "receive-type step"),
    (lambda p: edit_step(p, 1, 0, 1, count=2), "gpu 0 tb 0 step 0: cnt=1 but the matching receive "
                                               "(gpu 1 tb 0 step 1) has cnt=2"),
])
def test_connection_mistakes(edit, expected: str) -> None:
    assert only_error(structural(edit(load(FIG7)))) == expected


def test_dangling_step_index_is_resolved_by_s_not_position() -> None:
    plan = load(SCRATCH)
    # renumber tb 1's steps to s=5,6: the dependencies now dangle, and the s order is odd
    tb1 = plan.gpus[0].threadblocks[1]
    renumbered = edit_tb(plan, 0, 1, steps=tuple(replace(st, index=5 + i) for i, st in enumerate(tb1.steps)))
    report = structural(renumbered)
    assert len(report.errors) == 2
    assert all("names no step of gpu 0 tb 1" in e for e in report.errors)
    fixed = edit_step(edit_step(renumbered, 0, 0, 1, depend_step=5), 0, 0, 2, depend_step=6)
    report = structural(fixed)
    assert report.ok
    assert any("s values are not 0, 1, 2" in w for w in report.warnings)


def test_local_only_negative_channel_is_a_warning() -> None:
    report = structural(edit_tb(load(SCRATCH), 0, 0, channel=-1))
    assert report.ok
    assert any("chan=-1 on a local-only threadblock" in w for w in report.warnings)


def test_rrc_reading_past_the_buffer_is_tolerated() -> None:
    plan = load(SCRATCH)
    rrc = Step(1, StepType.RECV_REDUCE_COPY, Buffer.SCRATCH, 7, Buffer.SCRATCH, 0, 1, None, None, True)
    report = structural(edit_step(plan, 0, 1, 1, type=rrc.type, src_buffer=rrc.src_buffer, src_offset=7))
    assert report.ok
    assert any("do not bounds-check rrc" in w for w in report.warnings)
    # any other step type reading there is an error
    bad = structural(edit_step(plan, 0, 1, 0, src_buffer=Buffer.SCRATCH, src_offset=7))
    assert "source scratch chunk 7 outside the buffer" in only_error(bad)


def test_cascades_are_suppressed() -> None:
    # a wrong peer would also unbalance two connections; only the cause is reported
    report = structural(edit_tb(load(SCRATCH), 0, 1, send_peer=5))
    assert "send=5 is not a gpu" in only_error(report)


def test_executor_oddities_are_warnings() -> None:
    plan = load(SCRATCH)
    odd = edit_step(plan, 0, 1, 0, has_dependent=False)  # waited on by the nop, hasdep=0
    odd = edit_step(odd, 1, 0, 0, has_dependent=True)  # nobody waits on it
    odd = edit_step(odd, 1, 0, 1, depend_tb=None, depend_step=None)  # nop without dependency
    odd = edit_tb(odd, 1, 1, channel=3)
    odd = edit_tb(odd, 0, 1, channel=3)
    report = structural(odd)
    assert report.ok
    text = "\n".join(report.warnings)
    for needle in ("other threadblocks wait on this step but hasdep=0", "hasdep=1 but no threadblock waits",
                   "nop without a dependency", "chan=3 >= nchannels=1"):
        assert needle in text
    assert "(and 1 more like it)" in text  # both channel warnings grouped into one line


def test_many_warnings_of_one_kind_are_grouped() -> None:
    plan = load(RING)
    many = plan
    for g in range(3):
        many = edit_tb(many, g, 0, steps=tuple(replace(st, index=st.index + 10) for st in
                                              many.gpus[g].threadblocks[0].steps))
    report = structural(many)
    grouped = [w for w in report.warnings if "s values" in w]
    assert len(grouped) == 1
    assert grouped[0].endswith("(and 2 more like it)")


def test_cross_gpu_deadlock_is_reported_as_a_cycle() -> None:
    plan, source = loads_with_source(FIG7.read_text(), "fig7.xml")
    swapped = plan
    for g in range(2):
        s, r = plan.gpus[g].threadblocks[0].steps
        swapped = edit_tb(swapped, g, 0, steps=(replace(r, index=0), replace(s, index=1)))
    message = only_error(verify(swapped, source=source))
    assert message.startswith("fig7.xml:")
    assert "deadlock: cross-GPU deadlock of 4 steps: " in message
    path = message.split("steps: ", 1)[1].split(" -> ")
    assert len(path) == 5
    assert path[0] == path[-1]
    assert {p.split()[1] for p in path} == {"0", "1"}


def test_dependency_cycle_on_one_gpu() -> None:
    plan = edit_step(load(SCRATCH), 0, 1, 0, depend_tb=0, depend_step=2)  # send waits for the re
    message = only_error(structural(plan))
    assert "deadlock: dependency cycle of" in message
    assert "gpu 0 tb 1 step 0" in message


def test_wrong_result_is_an_error() -> None:
    plan = load(FIG7)
    # GPU 0 sends chunk a to the slot of chunk b: output[1][0] is never written
    wrong = edit_step(plan, 0, 0, 0, dst_offset=1)
    wrong = edit_step(wrong, 1, 0, 1, dst_offset=1, src_offset=1)
    report = verify(wrong)
    assert not report.ok
    assert any("gpu 1" in e for e in report.errors)


def test_races_are_warnings_and_strict_errors() -> None:
    plan = load(SCRATCH)
    # a second local copy into o[0] on tb 1, unordered with tb 0's copy and reduction
    tb1 = plan.gpus[0].threadblocks[1]
    extra = Step(2, StepType.COPY, Buffer.INPUT, 0, Buffer.OUTPUT, 0, 1)
    racy = edit_tb(plan, 0, 1, steps=(*tb1.steps, extra))
    report = verify(racy)
    assert any("race" in w for w in report.warnings)
    strict = verify(racy, strict=True)
    assert any("race" in e for e in strict.errors)


def test_report_api() -> None:
    report = structural(edit_tb(edit_tb(load(SCRATCH), 0, 1, send_peer=0), 1, 1, send_peer=1))
    assert not report.ok
    with pytest.raises(PlanError) as err:
        report.raise_on_error()
    assert str(err.value) == f"{report.errors[0]} (and 1 more error)"
    assert report.to_dict() == {"ok": False, "errors": list(report.errors), "warnings": list(report.warnings),
                                "notes": list(report.notes)}
    Report((), ("w",), ()).raise_on_error()  # warnings alone do not raise


def test_error_list_is_capped() -> None:
    plan = load(RING)
    broken = plan
    for g in range(3):
        tb = broken.gpus[g].threadblocks[0]
        broken = edit_tb(broken, g, 0, steps=tuple(replace(st, count=-1) for st in tb.steps) * 8)
    report = structural(broken)
    assert len(report.errors) == MAX_ERRORS + 1
    assert report.errors[-1].endswith("more errors")


def test_verify_leaves_the_plan_alone() -> None:
    plan = load(RING)
    text = dump(plan)
    verify(plan)
    assert dump(plan) == text


# ---------------------------------------------------------------------------------------------
# summary


def test_summary_counts_and_traffic() -> None:
    plan = load(FIG7)
    s = summarize(plan, size_bytes=4000)
    assert s.collective == "allgather"
    assert s.threadblocks_per_gpu == (2, 2)
    assert s.steps_per_gpu == (4, 4)
    assert dict(s.steps_by_type) == {"s": 4, "r": 4}
    assert s.chunk_bytes == 1000
    # each GPU sends its two chunks to the other GPU and receives the other two
    assert s.sent_bytes == (2000, 2000)
    assert s.received_bytes == (2000, 2000)
    assert s.to_dict()["sent_bytes"] == [2000, 2000]
    assert "sent_bytes" not in summarize(plan).to_dict()


def test_summary_traffic_balances_on_every_example() -> None:
    for path in sorted((REPO / "plans").glob("*.xml")):
        plan = load(path)
        s = summarize(plan, size_bytes=plan.nchunksperloop * 256)
        assert s.sent_bytes is not None
        assert s.received_bytes is not None
        assert sum(s.sent_bytes) == sum(s.received_bytes)
        total_steps = sum(len(tb.steps) for g in plan.gpus for tb in g.threadblocks)
        assert sum(n for _, n in s.steps_by_type) == total_steps == s.total_steps


def test_chunk_bytes_round_up_so_chunks_cover_the_size() -> None:
    plan = load(RING)  # 3 chunks per loop
    assert chunk_bytes_for(plan, 3000) == 1000
    for size in range(1, 50):
        cb = chunk_bytes_for(plan, size)
        assert 3 * cb >= size > 3 * (cb - 1)
    with pytest.raises(UsageError):
        chunk_bytes_for(plan, 0)


@pytest.mark.parametrize(("size", "element", "selectable"), [
    (12, 4, True), (24_000, 4, True), (3004, 4, False),  # 751 floats: not a multiple of 3 chunks
    (3003, 1, True), (3001, 1, False), (14, 4, False),  # 14 B: not whole floats
    (3000, 2, True), (3006, 4, False)])  # 3006 B: 1,002 B chunks, not whole floats
def test_size_fit_follows_the_executors_selection_rule(size: int, element: int, selectable: bool) -> None:
    plan = load(RING)  # 3 chunks per loop
    fit = size_fit(plan, size, element)
    assert fit.msccl_selectable is selectable
    assert fit.chunk_bytes == chunk_bytes_for(plan, size)
    assert fit.padding_bytes == 3 * fit.chunk_bytes - size >= 0
    note = fit.note()
    assert (note is None) is selectable
    if note is not None:
        assert str(size) in note
        assert str(fit.chunk_bytes) in note
        assert ("pads" in note) is (fit.padding_bytes > 0)
    with pytest.raises(UsageError):
        size_fit(plan, size, 0)


@pytest.mark.parametrize(("lo", "hi", "size", "selectable"), [
    (0, 0, 3000, True), (3000, 3000, 3000, True), (3000, 6000, 6000, True),  # inclusive, 0 = unlimited
    (3003, 0, 3000, False), (0, 2997, 3000, False), (6000, 3000, 4500, False)])
def test_size_fit_needs_the_size_in_the_plans_byte_range(lo: int, hi: int, size: int,
                                                         selectable: bool) -> None:
    # the current executor selects a plan only for minBytes <= size <= maxBytes (reference §4)
    plan = dataclasses.replace(load(RING), min_bytes=lo, max_bytes=hi)
    fit = size_fit(plan, size)
    assert fit.msccl_selectable is selectable
    note = fit.note()
    assert (note is None) is selectable
    if note is not None:
        top = f"{hi} B" if hi else "unlimited"
        assert note == (f"MSCCL would not select this plan at {size} B (outside its minBytes..maxBytes, "
                        f"{lo} B..{top}); nuna replays it all the same")


def test_a_chunk_on_several_stacks_is_valid_and_one_stack_twice_warns() -> None:
    plan = load(FIG7)
    spread = replace(plan, placement=Placement(chunks=(ChunkPlacement(0, Buffer.OUTPUT, 0, 3),
                                                       ChunkPlacement(0, Buffer.OUTPUT, 0, 7))))
    report = verify(spread)
    assert report.ok
    assert not any("twice" in w for w in report.warnings)
    twice = replace(plan, placement=Placement(chunks=(ChunkPlacement(0, Buffer.OUTPUT, 0, 3),
                                                      ChunkPlacement(0, Buffer.OUTPUT, 0, 3))))
    assert any("output chunk 0 is placed on stack 3 twice" in w for w in verify(twice).warnings)
