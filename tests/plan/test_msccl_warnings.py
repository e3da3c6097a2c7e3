"""verify()'s findings about the MSCCL executors' limits (reference msccl-xml.md §3, §9): what
an executor rejects or never selects but a replay handles is a warning, so the report stays
ok; what no replay can mean (header counts below 1, negative sizes, impossible placements)
is an error. One tiny 2-GPU allgather per case, read with ``nuna.plan.xml.loads``; values
the reader refuses are put into the IR directly to reach verify's own check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from nuna.errors import PlanError
from nuna.plan.ir import Buffer, ChunkPlacement, Placement, Plan
from nuna.plan.verify import (
    EXECUTOR_MAX_CHANNEL,
    EXECUTOR_MAX_COUNT,
    EXECUTOR_MAX_STR,
    EXECUTOR_MAX_TBS,
    Report,
    verify,
)
from nuna.plan.xml import loads


def _step(s: int, kind: str, src: tuple[str, int], dst: tuple[str, int], cnt: int) -> str:
    return (f'<step s="{s}" type="{kind}" srcbuf="{src[0]}" srcoff="{src[1]}" dstbuf="{dst[0]}" '
            f'dstoff="{dst[1]}" cnt="{cnt}" depid="-1" deps="-1" hasdep="0"/>')


def tiny(c: int = 1, *, extra_tbs: str = "", **header: object) -> str:
    """An out-of-place allgather of ``c`` chunks per rank on 2 GPUs: each GPU sends its input
    to the peer's slice of the output, receives the peer's slice and copies its own input into
    its slice. ``header`` overrides ``<algo>`` attributes (XML names); ``extra_tbs`` is added
    to GPU 0 after its tb 0."""
    attrs: dict[str, object] = {"name": "tiny", "proto": "Simple", "nchannels": 1, "nchunksperloop": 2 * c,
                                "ngpus": 2, "coll": "allgather", "inplace": 0, "outofplace": 1,
                                "minBytes": 0, "maxBytes": 0}
    attrs.update(header)
    gpus = []
    for g in (0, 1):
        peer = 1 - g
        steps = (_step(0, "s", ("i", 0), ("o", g * c), c) + _step(1, "r", ("i", 0), ("o", peer * c), c)
                 + _step(2, "cpy", ("i", 0), ("o", g * c), c))
        tbs = f'<tb id="0" send="{peer}" recv="{peer}" chan="0">{steps}</tb>' + (extra_tbs if g == 0 else "")
        gpus.append(f'<gpu id="{g}" i_chunks="{c}" o_chunks="{2 * c}" s_chunks="0">{tbs}</gpu>')
    head = " ".join(f'{k}="{v}"' for k, v in attrs.items())
    return f"<algo {head}>" + "".join(gpus) + "</algo>"


def local_tbs(first: int, n: int, chan: int = 0) -> str:
    """``n`` empty local-only threadblocks (no peers, no steps) with ids from ``first``."""
    return "".join(f'<tb id="{t}" send="-1" recv="-1" chan="{chan}"></tb>' for t in range(first, first + n))


def test_the_base_plan_is_clean() -> None:
    # every case below differs from it in one respect, so each finding is that respect's
    assert verify(loads(tiny())) == Report((), (), ())
    assert verify(loads(tiny(EXECUTOR_MAX_COUNT - 1))) == Report((), (), ())


WARN, NOTE, ERROR = "warning", "note", "error"
LONG = EXECUTOR_MAX_STR + 1
STEPS = 3 * 2  # steps of tiny(): three per GPU
#: (plan XML, findings expected: (kind, exact message), ...)
CASES = {
    "name-too-long": (tiny(name="n" * LONG), (
        (WARN, f"<algo>: name is {LONG} characters; the executors read at most {EXECUTOR_MAX_STR}"),)),
    "minBytes-above-maxBytes": (tiny(minBytes=4096, maxBytes=1024), (
        (WARN, "<algo>: minBytes 4096 > maxBytes 1024: the plan is never selected"),)),
    "minBytes-equal-maxBytes": (tiny(minBytes=4096, maxBytes=4096), (
        (NOTE, "<algo>: minBytes = maxBytes = 4096: the old MSCCL executor, whose maxBytes is exclusive, "
               "never selects the plan (the current one selects it at exactly that size)"),)),
    "custom-collective": (tiny(coll="custom"), (
        (NOTE, '<algo>: coll="custom" is the old executor\'s; the current executor does not accept it'),
        (NOTE, "collective custom: no postcondition modelled; data flow checked for races only"))),
    "neither-in-nor-out-of-place": (tiny(outofplace=0), (
        (WARN, "<algo>: inplace=0 and outofplace=0: the plan is never selected"),
        (NOTE, "plan is marked neither in-place nor out-of-place; checked as out-of-place"))),
    "too-many-threadblocks": (tiny(extra_tbs=local_tbs(1, EXECUTOR_MAX_TBS)), (
        (WARN, f"gpu 0: {EXECUTOR_MAX_TBS + 1} threadblocks; the MSCCL executor runs at most "
               f"{EXECUTOR_MAX_TBS}"),)),
    "chan-above-max": (tiny(extra_tbs=local_tbs(1, 1, chan=EXECUTOR_MAX_CHANNEL + 1)), (
        (WARN, f"gpu 0 tb 1: chan={EXECUTOR_MAX_CHANNEL + 1} > {EXECUTOR_MAX_CHANNEL} (the MSCCL executors "
               "reject it)"),)),
    # every step moves EXECUTOR_MAX_COUNT chunks: one line for the first, a count of the rest
    "cnt-at-max": (tiny(EXECUTOR_MAX_COUNT), (
        (WARN, f"gpu 0 tb 0 step 0: cnt={EXECUTOR_MAX_COUNT} (the MSCCL executors accept cnt < "
               f"{EXECUTOR_MAX_COUNT}) (and {STEPS - 1} more like it)"),)),
    # 3 chunks cannot be split into 2 rank slices: the allgather's result is undefined, so the
    # semantic check's refusal is an error (not a note), and the old executor's chunk check warns
    "chunks-not-per-rank": (tiny(nchunksperloop=3), (
        (WARN, "gpu 0: i_chunks=1 o_chunks=2 do not match nchunksperloop=3 for allgather (the old MSCCL "
               "executor rejects this) (and 1 more like it)"),
        (ERROR, "semantic check not run: allgather: nchunksperloop 3 is not a multiple of ngpus 2, so chunks "
                "cannot be split into rank slices"),)),
}
#: the same limits just inside: no finding of the case's kind
CLEAN = {
    "name-at-max": tiny(name="n" * EXECUTOR_MAX_STR),
    "maxBytes-0-is-unlimited": tiny(minBytes=4096, maxBytes=0),
    "minBytes-just-below-maxBytes": tiny(minBytes=4095, maxBytes=4096),
    "in-place-only": tiny(inplace=1, outofplace=0),
    "threadblocks-at-max": tiny(extra_tbs=local_tbs(1, EXECUTOR_MAX_TBS - 1)),
    "chan-at-max": tiny(extra_tbs=local_tbs(1, 1, chan=EXECUTOR_MAX_CHANNEL)),
    "cnt-below-max": tiny(EXECUTOR_MAX_COUNT - 1),
}


def _by_kind(report: Report) -> dict[str, tuple[str, ...]]:
    return {ERROR: report.errors, WARN: report.warnings, NOTE: report.notes}


@pytest.mark.parametrize(("text", "expected"), CASES.values(), ids=CASES.keys())
def test_executor_limits(text: str, expected: tuple[tuple[str, str], ...]) -> None:
    report = verify(loads(text))
    found = _by_kind(report)
    for kind in (ERROR, WARN, NOTE):
        assert found[kind] == tuple(msg for k, msg in expected if k == kind)
    # a warning or a note leaves the plan valid; only an error does not
    assert report.ok is all(kind != ERROR for kind, _ in expected)
    if not report.ok:
        return
    # strict mode turns the warnings, not the notes, into errors
    strict = verify(loads(text), strict=True)
    assert strict.errors == found[WARN]
    assert strict.ok is not found[WARN]


@pytest.mark.parametrize("text", CLEAN.values(), ids=CLEAN.keys())
def test_just_inside_the_limits_is_clean(text: str) -> None:
    assert verify(loads(text)) == Report((), (), ())


NUNA_NS = 'xmlns:nuna="https://github.com/nuna-sim/nuna/placement"'


def _edit(old: str, new: str) -> Callable[[str], str]:
    """An edit of :func:`tiny`'s XML (which must change it)."""
    def edit(text: str) -> str:
        out = text.replace(old, new, 1)
        assert out != text, old
        return out
    return edit


def _placed_chunk_on(stack: int) -> Callable[[str], str]:
    place = f'<nuna:placement><nuna:chunk buf="o" off="0" stack="{stack}"/></nuna:placement>'
    return lambda text: _edit('</tb></gpu><gpu id="1"', f'</tb>{place}</gpu><gpu id="1"')(
        _edit("<algo ", f"<algo {NUNA_NS} ")(text))


def _gpu0_output_chunks(plan: Plan, n: int) -> Plan:
    return replace(plan, gpus=(replace(plan.gpus[0], output_chunks=n), *plan.gpus[1:]))


#: values the reader refuses (out of its domains): the XML edit, the same in the IR, verify's error
REFUSED: dict[str, tuple[Callable[[str], str], Callable[[Plan], Plan], str]] = {
    "nchannels-0": (_edit('nchannels="1"', 'nchannels="0"'), lambda p: replace(p, nchannels=0),
                    "<algo>: nchannels=0 must be at least 1"),
    "nchunksperloop-0": (_edit('nchunksperloop="2"', 'nchunksperloop="0"'),
                         lambda p: replace(p, nchunksperloop=0),
                         "<algo>: nchunksperloop=0 must be at least 1"),
    "minBytes-negative": (_edit('minBytes="0"', 'minBytes="-1"'), lambda p: replace(p, min_bytes=-1),
                          "<algo>: minBytes=-1 must not be negative"),
    "maxBytes-negative": (_edit('maxBytes="0"', 'maxBytes="-5"'), lambda p: replace(p, max_bytes=-5),
                          "<algo>: maxBytes=-5 must not be negative"),
    "o_chunks-negative": (_edit('o_chunks="2"', 'o_chunks="-2"'), lambda p: _gpu0_output_chunks(p, -2),
                          "gpu 0: o_chunks=-2 must not be negative"),
    "placement-size-0": (_edit("<algo ", f'<algo {NUNA_NS} nuna:size="0" '),
                         lambda p: replace(p, placement=Placement(size_bytes=0)),
                         "placement: size 0 must be positive"),
    "placement-stack-negative": (_placed_chunk_on(-1),
                                 lambda p: replace(p, placement=Placement(
                                     chunks=(ChunkPlacement(0, Buffer.OUTPUT, 0, -1),))),
                                 "placement: gpu 0 output chunk 0 on stack -1 (must be >= 0)"),
}


@pytest.mark.parametrize(("xml_edit", "ir_edit", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_values_outside_the_readers_domain_are_errors(xml_edit: Callable[[str], str],
                                                      ir_edit: Callable[[Plan], Plan], message: str) -> None:
    with pytest.raises(PlanError, match="out of range"):
        loads(xml_edit(tiny()))
    report = verify(ir_edit(loads(tiny())))
    assert report.errors == (message,)
    assert not report.ok


def test_the_placement_edit_is_read_when_in_range() -> None:
    # the XML edit above names a real chunk: with a valid stack the reader takes it, verify too
    plan = loads(_placed_chunk_on(3)(tiny()))
    assert plan.placement.chunks == (ChunkPlacement(0, Buffer.OUTPUT, 0, 3),)
    assert verify(plan).ok
