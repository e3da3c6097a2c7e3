"""The MSCCL XML reader and writer: round trips, executor-compatible output, reader conventions
(defaults, spellings, integers, -1 sentinels), source lines, warnings and writer refusals."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from nuna.errors import InputError, PlanError
from nuna.plan import xml as plan_xml
from nuna.plan.ir import (
    Buffer,
    ChunkPlacement,
    Collective,
    Gpu,
    Placement,
    Plan,
    Protocol,
    Step,
    StepType,
    TbPlacement,
    Threadblock,
)
from nuna.plan.xml import NUNA_NS, canonical_placement, dump, load, load_with_source, loads, save

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "plans").glob("*.xml"))

HEADER = ('<algo name="t" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" '
          'inplace="0"{extra}>')


def _step(s: int, kind: str, dstoff: int) -> str:
    return (f'      <step s="{s}" type="{kind}" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{dstoff}" cnt="1" '
            'depid="-1" deps="-1" hasdep="0"/>')


TWO_GPU_BODY = "\n".join([
    "",
    '  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">',
    '    <tb id="0" send="1" recv="1" chan="0">',
    _step(0, "s", 0),
    _step(1, "r", 1),
    "    </tb>",
    "  </gpu>",
    '  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">',
    '    <tb id="0" send="0" recv="0" chan="0">',
    _step(0, "s", 1),
    _step(1, "r", 0),
    "    </tb>",
    "  </gpu>",
    "</algo>",
    "",
])


def two_gpu(extra: str = "", body: str = TWO_GPU_BODY) -> str:
    return HEADER.format(extra=extra) + body


# ---------------------------------------------------------------------------------------------
# strategies: any IR the reader's value domains allow


small = st.integers(min_value=0, max_value=40)
# XML 1.0 cannot carry control characters (other than tab/newline/CR), surrogates or U+FFFE/F
xml_text = st.text(alphabet=st.sampled_from('&<>"\'\t\n\r ;#x') | st.characters(
    blacklist_categories=("Cs",), blacklist_characters="\ufffe\uffff", min_codepoint=1).filter(
    lambda c: c in "\t\n\r" or ord(c) >= 0x20), max_size=12)


@st.composite
def operands(draw: st.DrawFn) -> tuple[Buffer | None, int | None]:
    if draw(st.booleans()):
        return None, None
    return draw(st.sampled_from(Buffer)), draw(small)


@st.composite
def steps(draw: st.DrawFn) -> Step:
    sb, so = draw(operands())
    db, do = draw(operands())
    return Step(index=draw(small), type=draw(st.sampled_from(StepType)), src_buffer=sb, src_offset=so,
                dst_buffer=db, dst_offset=do, count=draw(small),
                depend_tb=draw(st.none() | small), depend_step=draw(st.none() | small),
                has_dependent=draw(st.booleans()))


@st.composite
def plans(draw: st.DrawFn, with_placement: bool | None = None) -> Plan:
    ngpus = draw(st.integers(1, 3))
    gpus = []
    for gid in draw(st.permutations(range(ngpus))):
        ntb = draw(st.integers(0, 3))
        tbs = tuple(
            Threadblock(id=tid, send_peer=draw(st.none() | small), recv_peer=draw(st.none() | small),
                        channel=draw(st.integers(-1, 40)), steps=tuple(draw(st.lists(steps(), max_size=4))))
            for tid in draw(st.permutations(range(ntb))))
        gpus.append(Gpu(gid, draw(small), draw(small), draw(small), tbs))
    collective = draw(st.sampled_from(Collective))
    spelling = None
    if collective is Collective.REDUCESCATTER:
        spelling = draw(st.sampled_from([None, "reduce_scatter"]))
    inplace = draw(st.booleans())
    defaulted = draw(st.frozensets(st.sampled_from(["outofplace", "minBytes", "maxBytes", "name"])))
    plan = Plan(
        name="" if "name" in defaulted else draw(xml_text), protocol=draw(st.sampled_from(Protocol)),
        nchannels=draw(st.integers(1, 64)), nchunksperloop=draw(st.integers(1, 2**31 - 1)), ngpus=ngpus,
        collective=collective, inplace=inplace,
        outofplace=(not inplace) if "outofplace" in defaulted else draw(st.booleans()),
        min_bytes=0 if "minBytes" in defaulted else draw(st.integers(0, 2**63 - 1)),
        max_bytes=0 if "maxBytes" in defaulted else draw(st.integers(0, 2**63 - 1)),
        gpus=tuple(gpus), coll_spelling=spelling, defaulted=defaulted)
    if with_placement is False or (with_placement is None and draw(st.booleans())):
        return plan
    tb_places = [TbPlacement(g.id, tb.id, draw(small)) for g in plan.gpus for tb in g.threadblocks
                 if draw(st.booleans())]
    chunk_places = [ChunkPlacement(g.id, draw(st.sampled_from(Buffer)), draw(small), draw(small))
                    for g in plan.gpus for _ in range(draw(st.integers(0, 3)))]
    placement = Placement(nar_granularity=draw(st.none() | st.integers(1, 64)), threadblocks=tuple(tb_places),
                          chunks=tuple(chunk_places), config=draw(st.none() | xml_text),
                          size_bytes=draw(st.none() | st.integers(1, 2**40)))
    return replace(plan, placement=placement)


# ---------------------------------------------------------------------------------------------
# round trips and output format


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_roundtrip_any_plan(plan: Plan) -> None:
    text = dump(plan)
    assert loads(text) == plan
    assert dump(plan) == text  # deterministic, and dump left the plan alone


_LINE = re.compile(r'^( *)<(/?)([A-Za-z_][\w:.-]*)((?: [\w:.-]+="[^"\n\t]*")*)(/?)>$')


def executor_lexical_problems(text: str) -> list[str]:
    """What the MSCCL executors' hand parser (reference §2) would choke on, line by line."""
    problems = []
    if text.startswith("<?xml"):
        problems.append("XML declaration")
    depth = 0
    for number, line in enumerate(text.rstrip("\n").split("\n"), 1):
        m = _LINE.match(line)
        if m is None:
            problems.append(f"line {number} not one element with single-spaced double-quoted attributes")
            continue
        indent, closing, _, attrs, selfclosing = m.groups()
        if closing:
            depth -= 1
        if len(indent) != 2 * depth:
            problems.append(f"line {number}: indentation {len(indent)} at depth {depth}")
        if attrs.count('="') > 16:
            problems.append(f"line {number}: more than 16 attributes")
        if not closing and not selfclosing:
            depth += 1
    return problems


@settings(max_examples=60, deadline=None)
@given(plans())
def test_dump_follows_executor_lexical_rules(plan: Plan) -> None:
    assert executor_lexical_problems(dump(plan)) == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_plans_are_canonical(path: Path) -> None:
    text = path.read_text()
    assert dump(load(path)) == text
    assert executor_lexical_problems(text) == []


def test_save_then_load(tmp_path: Path) -> None:
    plan = load(EXAMPLES[0])
    target = tmp_path / "copy.xml"
    save(plan, target)
    assert load(target) == plan


# ---------------------------------------------------------------------------------------------
# reader conventions


def test_missing_header_attributes_are_defaulted_and_recorded() -> None:
    plan = loads(two_gpu())
    assert plan.defaulted == {"outofplace", "minBytes", "maxBytes"}
    assert (plan.outofplace, plan.min_bytes, plan.max_bytes) == (True, 0, 0)
    header = dump(plan).split("\n", 1)[0]
    assert "outofplace" not in header
    assert "minBytes" not in header
    assert "maxBytes" not in header
    full = loads(two_gpu(' outofplace="0" minBytes="5" maxBytes="9"'))
    assert full.defaulted == frozenset()
    assert (full.outofplace, full.min_bytes, full.max_bytes) == (False, 5, 9)


def test_defaulted_value_changed_by_a_pass_is_written() -> None:
    plan = replace(loads(two_gpu()), max_bytes=1024)
    assert 'maxBytes="1024"' in dump(plan)
    assert loads(dump(plan)).max_bytes == 1024


@pytest.mark.parametrize("spelling", ["reduce_scatter", "reducescatter"])
def test_reduce_scatter_spellings(spelling: str) -> None:
    plan = loads(two_gpu().replace('coll="allgather"', f'coll="{spelling}"'))
    assert plan.collective is Collective.REDUCESCATTER
    assert plan.coll_xml == spelling
    assert f'coll="{spelling}"' in dump(plan)


@pytest.mark.parametrize(("value", "reason"), [
    ("0x1", "hexadecimal"), ("010", "octal"), ("+1", "not a decimal integer"),
    (" 1", "not a decimal integer"),
    ("1_0", "not a decimal integer"), ("-0", "not a decimal integer"), ("1.0", "not a decimal integer"),
    ("", "not a decimal integer"), ("99999999999", "out of range"), ("-2", "out of range"),
])
def test_integers_are_plain_decimal(value: str, reason: str) -> None:
    text = two_gpu().replace('srcoff="0" dstbuf="o" dstoff="1"', f'srcoff="{value}" dstbuf="o" dstoff="1"', 1)
    with pytest.raises(PlanError) as err:
        loads(text, "p.xml")
    message = str(err.value)
    assert message.startswith('p.xml:5: <step s="1">: srcoff')
    assert reason in message
    assert "\n" not in message


def test_minus_one_offset_means_no_operand() -> None:
    text = two_gpu().replace('type="r" srcbuf="i" srcoff="0"', 'type="r" srcbuf="s" srcoff="-1"', 1)
    step = loads(text).gpus[0].threadblocks[0].steps[1]
    assert (step.src_buffer, step.src_offset) == (None, None)
    assert (step.dst_buffer, step.dst_offset) == (Buffer.OUTPUT, 1)
    assert 'srcbuf="i" srcoff="-1"' in dump(loads(text))  # msccl-tools' spelling of "none"


def test_sentinels_become_none() -> None:
    plan = loads(two_gpu().replace('send="1" recv="1"', 'send="-1" recv="1"', 1))
    tb = plan.gpus[0].threadblocks[0]
    assert tb.send_peer is None
    assert tb.recv_peer == 1
    assert tb.steps[0].depend_tb is None
    assert tb.steps[0].depend_step is None


def test_attribute_order_and_comments_do_not_matter() -> None:
    reordered = two_gpu().replace('<tb id="0" send="1" recv="1" chan="0">',
                                  '<tb chan="0" recv="1" send="1" id="0">')
    commented = "<!-- a comment -->\n" + two_gpu().replace('<gpu id="1"', '<!-- <step> -->\n  <gpu id="1"')
    assert loads(reordered) == loads(two_gpu()) == loads(commented)


@pytest.mark.parametrize("text", [
    two_gpu(),
    "<!-- c -->\n" + two_gpu().replace("\n  <gpu", "\n<!--x-->  <gpu"),
    two_gpu().replace("<tb ", "<![CDATA[<tb>]]><tb ", 1),
], ids=["plain", "comments", "cdata"])
def test_source_lines_match_lxml(text: str) -> None:
    plan, source = plan_xml.loads_with_source(text, "f.xml")
    root = etree.fromstring(text.encode())
    gpus = [el for el in root if el.tag == "gpu"]
    for gi, g_el in enumerate(gpus):
        assert source.at_gpu(gi) == f"f.xml:{g_el.sourceline}: "
        for ti, tb_el in enumerate(t for t in g_el if t.tag == "tb"):
            assert source.at_tb(gi, ti) == f"f.xml:{tb_el.sourceline}: "
            for si, st_el in enumerate(s for s in tb_el if s.tag == "step"):
                assert source.at_step(gi, ti, si) == f"f.xml:{st_el.sourceline}: "
    assert source.at_algo() == f"f.xml:{root.sourceline}: "
    assert len(plan.gpus) == len(gpus)


def test_unknown_things_are_skipped_with_warnings() -> None:
    text = ("<?xml version=\"1.0\"?>\n" + two_gpu(' nthreads="256" color="red"')
            .replace("<gpu id=\"1\"", "<extra><gpu id=\"9\"/></extra>\n  <gpu id=\"1\"")
            .replace('<tb id="0" send="0"', '<tb id="0" foo="1" send="0"'))
    plan, source = plan_xml.loads_with_source(text, "w.xml")
    clean = loads(two_gpu())
    assert [g.id for g in plan.gpus] == [0, 1]
    assert plan.gpus == clean.gpus
    joined = "\n".join(source.warnings)
    assert "w.xml:1: the XML declaration" in joined
    assert "unknown attribute color ignored" in joined
    assert "unknown attribute nthreads ignored" in joined
    assert re.search(r"w\.xml:\d+: <extra>: unknown element ignored", joined)
    assert "unknown attribute foo ignored" in joined
    assert all(w.startswith("w.xml:") for w in source.warnings)


def test_placement_namespace_roundtrip_and_layout() -> None:
    text = (REPO / "plans" / "fig7_allgather_n2_c2_annotated.xml").read_text()
    plan = loads(text)
    pl = plan.placement
    assert pl.config == "NAP+NAR"
    assert pl.nar_granularity == 2
    assert pl.size_bytes == 1048576
    assert [(t.gpu, t.tb, t.cu) for t in pl.threadblocks] == [(0, 0, 0), (0, 1, 8), (1, 0, 0), (1, 1, 8)]
    root = etree.fromstring(text.encode())
    assert root.nsmap["nuna"] == NUNA_NS
    for gpu_el in root:
        # one wrapper after the threadblocks keeps a <gpu> at #tb + 1 children
        assert [c.tag for c in gpu_el][-1] == f"{{{NUNA_NS}}}placement"
        assert len(gpu_el) == len(plan.gpus[int(gpu_el.get("id"))].threadblocks) + 1
    assert loads(dump(replace(plan, placement=Placement()))) == replace(plan, placement=Placement())
    assert "nuna" not in dump(replace(plan, placement=Placement()))


def test_canonical_placement_orders_like_the_document() -> None:
    plan = loads((REPO / "plans" / "fig7_allgather_n2_c2_annotated.xml").read_text())
    pl = plan.placement
    shuffled = replace(pl, threadblocks=pl.threadblocks[::-1], chunks=pl.chunks[4:] + pl.chunks[:4])
    with pytest.raises(PlanError, match="document order"):
        dump(replace(plan, placement=shuffled))
    fixed = replace(plan, placement=canonical_placement(replace(plan, placement=shuffled)))
    assert fixed == plan
    # within one GPU the first-come-first-served order is kept
    mine = [c.chunk for c in fixed.placement.chunks if c.gpu == 1]
    assert mine == [c.chunk for c in pl.chunks if c.gpu == 1]


@pytest.mark.parametrize("bad", [
    lambda p: replace(p, gpus=(replace(p.gpus[0], threadblocks=(
        replace(p.gpus[0].threadblocks[0], send_peer=-1),)), *p.gpus[1:])),
    lambda p: replace(p, name="bell\x07"),
    lambda p: replace(p, nchannels=0),
    lambda p: replace(p, placement=Placement(threadblocks=(TbPlacement(0, 99, 1),))),
    lambda p: replace(p, gpus=(replace(p.gpus[0], threadblocks=(replace(
        p.gpus[0].threadblocks[0], steps=(replace(p.gpus[0].threadblocks[0].steps[0], src_offset=None),)),)),
        *p.gpus[1:])),
])
def test_writer_refuses_what_xml_cannot_carry(bad) -> None:
    with pytest.raises(PlanError):
        dump(bad(loads(two_gpu())))


def test_names_with_markup_characters_roundtrip() -> None:
    plan = replace(loads(two_gpu()), name='a<b>&"c"\n\td')
    text = dump(plan)
    assert loads(text).name == plan.name
    assert executor_lexical_problems(text) == []


def test_size_limit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(plan_xml, "MAX_PLAN_BYTES", 100)
    path = tmp_path / "big.xml"
    path.write_text(two_gpu())
    with pytest.raises(InputError, match="limit"):
        load(path)
    with pytest.raises(InputError, match="limit"):
        loads(two_gpu())


def test_load_with_source_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "named.xml"
    path.write_text(two_gpu().replace('type="r"', 'type="q"', 1))
    with pytest.raises(PlanError) as err:
        load_with_source(path)
    assert str(err.value).startswith(f"{path}:5: <step s=\"1\">: type=\"q\"")
