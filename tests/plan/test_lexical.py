"""The executors' lexical rules (reference ``msccl-xml.md`` §2) that lxml does not enforce: a
byte-order mark, tabs, text and CDATA sections between elements, processing instructions, line
breaks or tabs inside start tags, single-quoted values, and extra spaces that push attributes
past the 16th; and the reader's attribute count, which includes namespace declarations as the
executors do. Each is a reader warning (so ``nuna validate --strict`` fails on it); comments,
nuna's own output and the shared corpus never trigger one."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.plan.generate import ALGORITHMS, COLLECTIVES, generate
from nuna.plan.ir import Plan
from nuna.plan.verify import verify
from nuna.plan.xml import NUNA_NS, _lexical_scan_needed, dump, load_with_source, loads, loads_with_source
from tests.conftest import msccl_plans
from tests.plan.test_xml import plans

REPO = Path(__file__).resolve().parents[2]
FIG7 = REPO / "plans" / "fig7_allgather_n2_c2.xml"
BASE = FIG7.read_text()  # canonical: no reader warning at all
STEP4 = '<step s="0" type="s" srcbuf="o" srcoff="0"'  # the first step, line 4

TAB = "a tab between elements makes both MSCCL executors reject the file"
BREAK = "a line break or tab inside the start tag <{}> makes both MSCCL executors reject the file"
SQUOTE = "the single-quoted attribute value {}='...' makes both MSCCL executors reject the file"
TEXT = 'the text "{}" between elements makes both MSCCL executors reject the file'
CDATA = "a CDATA section <![CDATA[...]]> makes both MSCCL executors reject the file"
PI = "the processing instruction <?{} ...?> makes both MSCCL executors reject the file"
BOM = "a UTF-8 byte-order mark at the start makes both MSCCL executors reject the file"
DECL = "the XML declaration <?xml ...?> makes both MSCCL executors reject the file"
SPACES = ("extra spaces between the attributes of <{}> make both MSCCL executors ignore the attributes "
          "beyond the 16th ({}): each extra space counts as an empty attribute")
# every lexical message contains one of these
LEXICAL = (" makes both MSCCL executors reject the file", "beyond the 16th")


def warnings_of(text: str) -> list[str]:
    return list(loads_with_source(text, "f.xml")[1].warnings)


def lexical(warnings: list[str] | tuple[str, ...]) -> list[str]:
    return [w for w in warnings if any(key in w for key in LEXICAL) and "XML declaration" not in w]


def replace_once(old: str, new: str, text: str = BASE) -> str:
    assert old in text
    return text.replace(old, new, 1)


def test_base_plan_is_clean() -> None:
    assert warnings_of(BASE) == []


# --------------------------------------------------------------------------------------------
# 1. whitespace between elements: space, \n, \r only


def test_tab_between_elements() -> None:
    text = replace_once('    <tb id="1" send="1"', '  \t  <tb id="1" send="1"')
    assert warnings_of(text) == [f"f.xml:7: {TAB}"]


def test_tabs_between_elements_are_counted() -> None:
    text = BASE.replace("    <tb", "\t<tb").replace("</algo>", "</algo>\t")
    assert warnings_of(text) == [f"f.xml:3: {TAB} (and 4 more like it)"]


def test_spaces_line_breaks_and_carriage_returns_between_elements_are_fine() -> None:
    text = BASE.replace("\n", "  \r\n\n \r\n").replace("    <tb", "          <tb")
    assert warnings_of(text) == []


def test_tab_inside_an_attribute_value_is_fine() -> None:
    # the executors read a double-quoted value verbatim up to the next '"'
    assert warnings_of(replace_once('name="fig7_', 'name="fig7\t_')) == []


# --------------------------------------------------------------------------------------------
# 2. attributes separated by spaces on one line


def test_line_break_between_attributes() -> None:
    text = replace_once('<tb id="1" send="1" recv="1"', '<tb id="1" send="1"\n   recv="1"')
    assert warnings_of(text) == [f"f.xml:7: {BREAK.format('tb ...')}"]


@pytest.mark.parametrize("where", ['<tb\tid="1" send="1"', '<tb id="1"\tsend="1"', '<tb\nid="1" send="1"',
                                   '<tb id="1" \r\nsend="1"', '<tb id="1" send="1" \t'])
def test_tab_or_line_break_anywhere_in_a_start_tag(where: str) -> None:
    text = replace_once('<tb id="1" send="1"', where)
    assert warnings_of(text) == [f"f.xml:7: {BREAK.format('tb ...')}"]


def test_line_breaks_in_start_tags_are_counted() -> None:
    text = BASE.replace('" type="', '"\n type="')
    assert warnings_of(text) == [f"f.xml:4: {BREAK.format('step ...')} (and 7 more like it)"]


def test_one_finding_per_start_tag() -> None:
    text = replace_once("<algo name=", "<algo\n name=").replace('" proto=', '"\tproto=', 1)
    assert warnings_of(text) == [f"f.xml:1: {BREAK.format('algo ...')}"]


def test_line_break_inside_a_double_quoted_value_is_fine() -> None:
    assert warnings_of(replace_once('name="fig7_', 'name="fig7\n_')) == []


# --------------------------------------------------------------------------------------------
# 3. double-quoted values


def test_single_quoted_value() -> None:
    text = replace_once('proto="Simple"', "proto='Simple'")
    assert warnings_of(text) == [f"f.xml:1: {SQUOTE.format('proto')}"]


def test_a_line_break_inside_a_single_quoted_value_is_no_line_break_in_the_tag() -> None:
    text = replace_once('name="fig7_', "name='fig7\n_").replace('_store"', "_store'", 1)
    assert warnings_of(text) == [f"f.xml:1: {SQUOTE.format('name')}"]


def test_single_quoted_values_are_counted() -> None:
    text = BASE.replace('cnt="1"', "cnt='1'")
    assert warnings_of(text) == [f"f.xml:4: {SQUOTE.format('cnt')} (and 7 more like it)"]


def test_single_quote_inside_a_double_quoted_value_is_fine() -> None:
    assert warnings_of(replace_once('name="fig7_', "name=\"fig7's '_")) == []


# --------------------------------------------------------------------------------------------
# 4. extra spaces are empty attributes; the executors keep 16


def test_extra_spaces_push_an_attribute_past_the_16th() -> None:
    # <step> has 10 attributes: with 8 spaces before the first, hasdep is the 17th token
    text = replace_once(STEP4, "<step" + " " * 8 + STEP4[6:])
    assert warnings_of(text) == [f"f.xml:4: {SPACES.format('step ...', 'hasdep')}"]


def test_extra_spaces_between_attributes_name_every_ignored_one() -> None:
    text = BASE.replace('inplace="1" ', 'inplace="1"' + " " * 10)
    assert warnings_of(text) == [f"f.xml:1: {SPACES.format('algo ...', 'outofplace, minBytes, maxBytes')}"]
    text = BASE.replace('coll="allgather" ', 'coll="allgather"' + " " * 11)
    ignored = "inplace, outofplace, minBytes, ..."
    assert warnings_of(text) == [f"f.xml:1: {SPACES.format('algo ...', ignored)}"]


def test_extra_spaces_are_counted() -> None:
    text = BASE.replace('<step s="', "<step" + " " * 8 + 's="')
    assert warnings_of(text) == [f"f.xml:4: {SPACES.format('step ...', 'hasdep')} (and 7 more like it)"]


def test_extra_spaces_up_to_the_16th_are_fine() -> None:
    # 7 spaces before the first attribute: hasdep is the 16th token, the last one kept
    assert warnings_of(replace_once(STEP4, "<step" + " " * 7 + STEP4[6:])) == []


def test_spaces_after_the_last_attribute_are_fine() -> None:
    # they make empty attributes too, but only after every real one
    assert warnings_of(BASE.replace('hasdep="0"/>', 'hasdep="0"' + " " * 20 + "/>")) == []
    assert warnings_of(BASE.replace('chan="0">', 'chan="0"' + " " * 20 + ">")) == []


def test_spaces_inside_values_are_not_extra_spaces() -> None:
    assert warnings_of(replace_once('name="fig7_', 'name="fig7' + " " * 30 + "_")) == []


def test_more_than_16_real_attributes_keep_the_readers_own_warning() -> None:
    extra = "".join(f' x{i}="{i}"' for i in range(7))
    text = replace_once('hasdep="0"/>', 'hasdep="0"' + extra + "/>").replace("<step s=", "<step  s=", 1)
    found = warnings_of(text)
    assert lexical(found) == []
    assert any("17 attributes; the MSCCL executors read only the first 16" in w for w in found)


# --------------------------------------------------------------------------------------------
# 5. nothing but spaces, \n and \r before a '<': no text or CDATA between elements, no
# byte-order mark before the first one


@pytest.mark.parametrize(("old", "new", "line", "shown"), [
    ("    </tb>", "    done</tb>", 6, "done"),  # before an end tag
    ('chan="0">', 'chan="0">x', 3, "x"),  # right after a start tag
    ("  </gpu>", "  some words\n  </gpu>", 11, "some words"),  # on a line of its own
    ("    </tb>", "    &#32;\n    </tb>", 6, "&#32;"),  # a character reference is text too
    ("    </tb>", "    a longer text that gets clipped\n    </tb>", 6, "a longer text that g..."),
])
def test_text_between_elements(old: str, new: str, line: int, shown: str) -> None:
    assert warnings_of(replace_once(old, new)) == [f"f.xml:{line}: {TEXT.format(shown)}"]


def test_texts_between_elements_are_counted() -> None:
    text = BASE.replace("    </tb>", "    x\n    </tb>")
    assert warnings_of(text) == [f"f.xml:6: {TEXT.format('x')} (and 3 more like it)"]


def test_words_in_values_and_comments_and_spaces_after_a_tag_are_fine() -> None:
    text = (replace_once('name="fig7_', 'name="a > b fig7_')
            .replace('chan="0">', 'chan="0">   ', 1)
            .replace("  </gpu>", "  <!-- some words -->\n  </gpu>", 1))
    assert warnings_of(text) == []


def test_cdata_section() -> None:
    # even an empty one: the executors read it as an element named "![CDATA[]]" that never ends
    text = replace_once("    </tb>", "    <![CDATA[]]>\n    </tb>")
    assert warnings_of(text) == [f"f.xml:6: {CDATA}"]


def test_cdata_sections_are_counted() -> None:
    text = BASE.replace("  </gpu>", "  <![CDATA[x]]></gpu>")
    assert warnings_of(text) == [f"f.xml:11: {CDATA} (and 1 more like it)"]


def test_cdata_inside_a_comment_is_fine() -> None:
    assert warnings_of(replace_once("  </gpu>", "  <!-- <![CDATA[x]]> -->\n  </gpu>")) == []


def test_byte_order_mark() -> None:
    assert warnings_of("\ufeff" + BASE) == [f"f.xml:1: {BOM}"]
    _, source = loads_with_source(b"\xef\xbb\xbf" + BASE.encode(), "f.xml")
    assert list(source.warnings) == [f"f.xml:1: {BOM}"]
    # the lines of later findings are not shifted by it
    tabbed = "\ufeff" + BASE.replace("    <tb", "\t<tb", 1)
    assert warnings_of(tabbed) == [f"f.xml:1: {BOM}", f"f.xml:3: {TAB}"]


def test_byte_order_mark_comes_before_the_xml_declaration() -> None:
    assert warnings_of('\ufeff<?xml version="1.0"?>\n' + BASE) == [f"f.xml:1: {BOM}", f"f.xml:1: {DECL}"]


def test_byte_order_mark_inside_a_value_is_fine() -> None:
    assert warnings_of(replace_once('name="fig7_', 'name="\ufefffig7_')) == []


# --------------------------------------------------------------------------------------------
# 6. after '<' only comments are special: a processing instruction is an element to the executors


def test_processing_instruction() -> None:
    text = replace_once("  </gpu>", '  <?nuna-note x="1"?>\n  </gpu>')
    assert warnings_of(text) == [f"f.xml:11: {PI.format('nuna-note')}"]


def test_processing_instructions_are_counted() -> None:
    text = BASE.replace("    </tb>", "    <?pi?></tb>")
    assert warnings_of(text) == [f"f.xml:6: {PI.format('pi')} (and 3 more like it)"]


def test_a_leading_processing_instruction_is_no_xml_declaration() -> None:
    text = '<?xml-stylesheet href="s.xsl"?>\n' + BASE
    assert warnings_of(text) == [f"f.xml:1: {PI.format('xml-stylesheet')}"]


def test_the_xml_declaration_keeps_its_own_warning() -> None:
    assert warnings_of('<?xml version="1.0"?>\n' + BASE) == [f"f.xml:1: {DECL}"]
    text = '<?xml version="1.0"?>\n<?pi?>\n' + BASE
    assert warnings_of(text) == [f"f.xml:1: {DECL}", f"f.xml:2: {PI.format('pi')}"]


def test_question_marks_in_values_and_comments_are_fine() -> None:
    text = replace_once('name="fig7_', 'name="?>fig7?[1]_')
    text = text.replace("  </gpu>", "  <!-- <?pi?> -->\n  </gpu>", 1)
    assert warnings_of(text) == []


# --------------------------------------------------------------------------------------------
# 7. namespace declarations are attributes to the executors: they count toward the 16

NS_DECLS = [f' xmlns:n{i}="urn:n{i}"' for i in range(17)]
COUNT = "{} attributes (counting {}); the MSCCL executors read only the first 16"


def test_namespace_declarations_count_as_attributes() -> None:
    # <step> has 10 attributes: with 7 namespace declarations the executors see 17
    text = replace_once("<step s=", "<step" + "".join(NS_DECLS[:7]) + " s=")
    assert warnings_of(text) == [f'f.xml:4: <step s="0">: {COUNT.format(17, "7 namespace declarations")}']


def test_16_attributes_counting_namespace_declarations_are_fine() -> None:
    assert warnings_of(replace_once("<step s=", "<step" + "".join(NS_DECLS[:6]) + " s=")) == []


def test_the_nuna_namespace_declaration_counts_on_a_full_algo() -> None:
    # 16 attributes the reader sees (13 it knows) and xmlns:nuna first: the executors drop b
    extra = ' nuna:nar="2" nuna:config="NAP" nuna:size="1024" nthreads="544" a="1"'
    full = replace_once("<algo name=", f'<algo xmlns:nuna="{NUNA_NS}" name=').replace(
        'maxBytes="0">', 'maxBytes="0"' + extra + ' b="2">', 1)
    unknown = [f"f.xml:1: <algo>: unknown attribute {a} ignored" for a in ("nthreads", "a", "b")]
    assert warnings_of(full) == [f"f.xml:1: <algo>: {COUNT.format(17, '1 namespace declaration')}", *unknown]
    assert warnings_of(full.replace(' b="2"', "")) == unknown[:2]


def test_more_than_16_attributes_and_a_namespace_declaration_are_counted_once() -> None:
    extra = "".join(f' x{i}="{i}"' for i in range(7))
    found = warnings_of(replace_once('hasdep="0"/>', 'hasdep="0"' + extra + ' xmlns:n="urn:n"/>'))
    assert [w for w in found if "read only" in w] == [
        f'f.xml:4: <step s="0">: {COUNT.format(18, "1 namespace declaration")}']


def test_an_unknown_element_gets_no_attribute_count() -> None:
    text = replace_once("    </tb>", "    <x" + "".join(NS_DECLS) + "/>\n    </tb>")
    assert warnings_of(text) == ["f.xml:6: <x>: unknown element ignored (the MSCCL executors skip it)"]


def test_extra_spaces_count_namespace_declarations_too() -> None:
    # 6 declarations and 10 attributes fill the 16 slots: one extra space pushes hasdep out
    text = replace_once(STEP4, "<step" + "".join(NS_DECLS[:6]) + " " + STEP4[5:])
    assert warnings_of(text) == [f"f.xml:4: {SPACES.format('step ...', 'hasdep')}"]


# --------------------------------------------------------------------------------------------
# the quick pre-check keeps plain plans from being scanned


def test_plain_plans_are_not_scanned() -> None:
    assert not _lexical_scan_needed(BASE.encode())
    assert not _lexical_scan_needed(BASE.rstrip("\n").encode())  # msccl-tools ends without one
    assert not _lexical_scan_needed(('<?xml version="1.0"?>\n' + BASE).encode())  # reported apart


# --------------------------------------------------------------------------------------------
# comments, CDATA and processing instructions are not looked into


def test_comments_are_ignored() -> None:
    comment = ("<!-- a\tcomment's text\n  <tb id='9'\n   send=\"1\">  with  <step" + " " * 20
               + 'a="1" b="2"> and\ttabs\r\n-->')
    text = comment + "\n" + BASE.replace("  <gpu id=\"1\"", f"  {comment}\n  <gpu id=\"1\"")
    assert warnings_of(text) == []
    # and what follows a comment is still checked, on the right line
    assert warnings_of(text.replace("\n<algo", "\n\t<algo")) == [f"f.xml:5: {TAB}"]


def test_cdata_and_processing_instructions_are_not_looked_into() -> None:
    # they are reported themselves (sections 5 and 6), but nothing inside them is
    text = replace_once("  </gpu>", "  <![CDATA[\t'x'\n<a\tb='1'>]]><?pi\tx='1'\n?>\n  </gpu>")
    assert lexical(warnings_of(text)) == [f"f.xml:11: {CDATA}", f"f.xml:12: {PI.format('pi')}"]


# --------------------------------------------------------------------------------------------
# the warnings reach verify and nuna validate like the XML declaration's


def test_every_rule_at_once_in_report_order() -> None:
    text = (replace_once("  <gpu id=\"1\"", "\t<gpu id=\"1\"")
            .replace('<tb id="1" send="0"', '<tb id="1"\nsend="0"')
            .replace('ngpus="2"', "ngpus='2'")
            .replace('<step s="1" type="r" srcbuf="o" srcoff="1"',
                     "<step" + " " * 9 + 's="1" type="r" srcbuf="o" srcoff="1"'))
    plan, source = loads_with_source(text, "f.xml")
    expected = [f"f.xml:12: {TAB}", f"f.xml:17: {BREAK.format('tb ...')}",
                f"f.xml:1: {SQUOTE.format('ngpus')}",
                f"f.xml:20: {SPACES.format('step ...', 'deps, hasdep')}"]
    assert list(source.warnings) == expected
    report = verify(plan, source=source)
    assert report.errors == ()
    assert [w for w in report.warnings if w in expected] == expected
    strict = verify(plan, source=source, strict=True)
    assert [e for e in strict.errors if e in expected] == expected
    assert strict.warnings == ()


def test_every_new_rule_at_once_in_report_order() -> None:
    text = ("\ufeff" + replace_once('chan="1">', 'chan="1">x')
            .replace("  </gpu>", "  <![CDATA[ ]]></gpu>", 1)
            .replace("</algo>", "<?pi?></algo>")
            .replace('<step s="0" type="s" srcbuf="o" srcoff="2"',
                     '<step xmlns:n="urn:n" xmlns:m="urn:m" xmlns:k="urn:k" xmlns:j="urn:j" xmlns:i="urn:i" '
                     'xmlns:h="urn:h" xmlns:g="urn:g" s="0" type="s" srcbuf="o" srcoff="2"'))
    plan, source = loads_with_source(text, "f.xml")
    expected = [f"f.xml:1: {BOM}", f"f.xml:7: {TEXT.format('x')}", f"f.xml:11: {CDATA}",
                f"f.xml:22: {PI.format('pi')}",
                f'f.xml:14: <step s="0">: {COUNT.format(17, "7 namespace declarations")}']
    assert list(source.warnings) == expected
    assert [w for w in verify(plan, source=source).warnings if w in expected] == expected
    assert [e for e in verify(plan, source=source, strict=True).errors if e in expected] == expected


def test_validate_strict_fails_on_a_lexical_warning(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "tabbed.xml"
    path.write_text(BASE.replace("    <tb", "\t<tb"))
    res = run_cli("validate", str(path))
    assert res.code == 0
    assert res.out.splitlines()[0].startswith(f"{path}: ok: allgather, 2 GPUs")
    assert "(1 warning)" in res.out
    assert f"warning: {path}:3: {TAB} (and 3 more like it)" in res.out
    res = run_cli("validate", "--strict", str(path))
    assert res.code == 1
    assert res.out.splitlines()[0] == f"{path}: invalid (1 error, 0 warnings)"
    assert res.err == f"nuna: error: {path}:3: {TAB} (and 3 more like it)\n"
    assert run_cli("validate", "--strict", str(FIG7)).code == 0


# --------------------------------------------------------------------------------------------
# nuna's own output and the real compiler outputs never trigger a lexical warning


def no_lexical_warning(text: str) -> None:
    assert lexical(warnings_of(text)) == []
    # a single quote in a leading comment makes the reader scan the whole text, not only
    # take its shortcut for text that cannot break a rule
    assert lexical(warnings_of("<!-- ' -->\n" + text)) == []


@settings(max_examples=80, deadline=None)
@given(plans())
def test_dump_never_breaks_a_lexical_rule(plan: Plan) -> None:
    # names and configs hold quotes, tabs, line breaks, runs of spaces, '?', '[', '>' and text
    text = dump(plan)
    no_lexical_warning(text)
    assert warnings_of(text) == []


@settings(max_examples=40, deadline=None)
@given(plans(with_placement=True))
def test_dump_of_a_placed_plan_keeps_16_attributes_with_its_namespace(plan: Plan) -> None:
    # <algo> carries xmlns:nuna and up to 13 attributes more, <tb> nuna:cu: at most 14 either way
    text = dump(plan)
    assert warnings_of(text) == []
    assert not any("read only the first 16" in w for w in warnings_of("<!-- ' -->\n" + text))


@settings(max_examples=20, deadline=None)
@given(coll=st.sampled_from(COLLECTIVES), algo=st.sampled_from(ALGORITHMS), n=st.integers(2, 6),
       par=st.integers(1, 3), name=st.text(alphabet=" \t\n'\"<>&x", max_size=20))
def test_generated_plans_never_break_a_lexical_rule(coll: object, algo: str, n: int, par: int,
                                                    name: str) -> None:
    kw = {"tbs_per_peer": par} if algo == "direct" else {"channels": par}
    plan = generate(coll, n, algo=algo, name=name, **kw)  # type: ignore[arg-type]
    text = dump(plan)
    assert loads(text) == plan
    no_lexical_warning(text)
    assert warnings_of(text) == []


@pytest.mark.parametrize("path", msccl_plans(), ids=lambda p: p.name)
def test_shared_corpus_has_no_lexical_warning(path: Path) -> None:
    _, source = load_with_source(path)
    assert lexical(source.warnings) == []
    no_lexical_warning(path.read_text())
