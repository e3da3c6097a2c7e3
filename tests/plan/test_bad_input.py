"""Hostile and broken plan files through ``nuna validate``: each gives one clear line on stderr
and exit status 1 (never a traceback, a network access or a leaked file), and random mutations
of valid plans end either valid or in a clean NunaError."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna.errors import NunaError
from nuna.plan.verify import verify
from nuna.plan.xml import loads_with_source
from tests.conftest import assert_clean_exit

REPO = Path(__file__).resolve().parents[2]
FIG7 = (REPO / "plans" / "fig7_allgather_n2_c2.xml").read_text()
SCRATCH = (REPO / "plans" / "allreduce_scratch_n2.xml").read_text()
RING = (REPO / "plans" / "ring_allreduce_n3.xml").read_text()
SECRET = "TOP-SECRET-MARKER-5f2c"


@dataclass
class Listener:
    """A local HTTP server that records every request: proof that nothing was fetched."""

    url: str
    requests: list[str]


@pytest.fixture
def listener() -> Iterator[Listener]:
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'<!ENTITY x "pwned">')

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Listener(f"http://127.0.0.1:{server.server_address[1]}", requests)
    finally:
        server.shutdown()
        server.server_close()


def check_one_line(res, *needles: str) -> None:
    assert res.code == 1, (res.out, res.err)
    assert "Traceback" not in res.err + res.out
    assert res.err.count("\n") == 1, res.err
    assert res.err.startswith("nuna: error: ")
    for needle in needles:
        assert needle in res.err, res.err
    assert SECRET not in res.out + res.err


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(SECRET)
    return path


def run_validate(run_cli: Callable, tmp_path: Path, content: str | bytes, name: str = "plan.xml"):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return run_cli("validate", str(path))


def sub(text: str, old: str, new: str, count: int = 1) -> str:
    assert old in text, old
    return text.replace(old, new, count)


# ---------------------------------------------------------------------------------------------
# hostile XML


def test_xxe_file_entity(run_cli, tmp_path: Path, secret_file: Path) -> None:
    doc = (f'<!DOCTYPE algo [<!ENTITY xxe SYSTEM "file://{secret_file}">]>\n'
           + sub(FIG7, 'name="fig7_allgather_local_load_remote_store"', 'name="&xxe;"'))
    check_one_line(run_validate(run_cli, tmp_path, doc), "plan.xml:1:", "DOCTYPE", "not allowed")


def test_xxe_http_entity(run_cli, tmp_path: Path, listener: Listener) -> None:
    doc = (f'<!DOCTYPE algo [<!ENTITY xxe SYSTEM "{listener.url}/xxe">]>\n'
           + sub(FIG7, 'name="fig7_allgather_local_load_remote_store"', 'name="&xxe;"'))
    check_one_line(run_validate(run_cli, tmp_path, doc), "DOCTYPE")
    assert listener.requests == []


def test_billion_laughs(run_cli, tmp_path: Path) -> None:
    entities = '<!ENTITY lol0 "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10}">' for i in range(1, 10))
    doc = f"<!DOCTYPE algo [{entities}]>\n" + sub(FIG7, 'name="fig7_allgather_local_load_remote_store"',
                                                  'name="&lol9;"')
    check_one_line(run_validate(run_cli, tmp_path, doc), "DOCTYPE")


def test_external_dtd(run_cli, tmp_path: Path, listener: Listener, secret_file: Path) -> None:
    doc = f'<!DOCTYPE algo SYSTEM "{listener.url}/plan.dtd">\n' + FIG7
    check_one_line(run_validate(run_cli, tmp_path, doc), "DOCTYPE")
    doc = f'<!DOCTYPE algo SYSTEM "file://{secret_file}">\n' + FIG7
    check_one_line(run_validate(run_cli, tmp_path, doc), "DOCTYPE")
    assert listener.requests == []


def test_parameter_entities(run_cli, tmp_path: Path, listener: Listener) -> None:
    doc = (f'<!DOCTYPE algo [<!ENTITY % remote SYSTEM "{listener.url}/p.dtd"> %remote;]>\n' + FIG7)
    check_one_line(run_validate(run_cli, tmp_path, doc), "DOCTYPE")
    assert listener.requests == []


def test_entity_declaration_without_doctype_keyword(run_cli, tmp_path: Path) -> None:
    doc = sub(FIG7, "<algo ", '<!ENTITY e "x">\n<algo ')
    check_one_line(run_validate(run_cli, tmp_path, doc), "ENTITY")


def test_deep_nesting(run_cli, tmp_path: Path) -> None:
    doc = sub(FIG7, "</algo>", "<x>" * 20000 + "</x>" * 20000 + "</algo>")
    check_one_line(run_validate(run_cli, tmp_path, doc), "XML syntax error", "depth")


# ---------------------------------------------------------------------------------------------
# broken files


def test_empty_file(run_cli, tmp_path: Path) -> None:
    check_one_line(run_validate(run_cli, tmp_path, ""), "empty file")


def test_whitespace_only_file(run_cli, tmp_path: Path) -> None:
    check_one_line(run_validate(run_cli, tmp_path, "\n  \n"), "empty file")


def test_truncated_file(run_cli, tmp_path: Path) -> None:
    check_one_line(run_validate(run_cli, tmp_path, FIG7[: len(FIG7) // 2]), "XML syntax error")


def test_binary_garbage(run_cli, tmp_path: Path) -> None:
    garbage = bytes(range(256)) * 4
    check_one_line(run_validate(run_cli, tmp_path, garbage, "garbage.bin"), "garbage.bin:", "not UTF-8")


def test_nul_bytes(run_cli, tmp_path: Path) -> None:
    check_one_line(run_validate(run_cli, tmp_path, b"<algo\x00>"), "XML syntax error")


def test_wrong_root(run_cli, tmp_path: Path) -> None:
    check_one_line(run_validate(run_cli, tmp_path, '<system version="1"><gpu/></system>\n'),
                   "plan.xml:1: <system>: the root element must be <algo>")


def test_namespaced_root(run_cli, tmp_path: Path) -> None:
    doc = sub(sub(FIG7, "<algo ", '<m:algo xmlns:m="urn:other" '), "</algo>", "</m:algo>")
    check_one_line(run_validate(run_cli, tmp_path, doc),
                   "plan.xml:1: <algo>: the root element must be <algo> (an MSCCL plan), not one in "
                   'namespace "urn:other"')


@pytest.mark.parametrize("where", ["<algo ", "<gpu ", "<tb "])
def test_default_namespace_is_read_as_written(where: str) -> None:
    """The executors read element names as written and ``xmlns`` as one more attribute, so a
    default namespace declared anywhere leaves the plan as it is, with one warning."""
    plain, _ = loads_with_source(FIG7)
    plan, src = loads_with_source(sub(FIG7, where, f'{where}xmlns="urn:any" '), "plan.xml")
    assert plan == plain
    notes = [w for w in src.warnings if "default namespace" in w]
    assert len(notes) == 1, src.warnings
    assert 'xmlns="urn:any" ignored' in notes[0]


def test_missing_file(run_cli, tmp_path: Path) -> None:
    check_one_line(run_cli("validate", str(tmp_path / "nope.xml")), "nope.xml: no such plan file")


def test_unknown_step_type(run_cli, tmp_path: Path) -> None:
    doc = sub(FIG7, 'type="r"', 'type="ra"')
    check_one_line(run_validate(run_cli, tmp_path, doc),
                   'plan.xml:5: <step s="1">: type="ra": unknown step type')


@pytest.mark.parametrize(("old", "new", "needle"), [
    ('cnt="1"', 'cnt="one"', 'cnt="one": not a decimal integer'),
    ('cnt="1"', 'cnt="0x1"', "hexadecimal is not accepted"),
    ('dstoff="0"', 'dstoff="007"', "octal"),
    ('nchannels="2"', 'nchannels="0"', "nchannels=0 is out of range"),
    ('srcoff="0"', 'srcoff="-5"', "srcoff=-5 is out of range"),
    ('cnt="1"', 'cnt="3000000000"', "cnt=3000000000 is out of range"),
    ('hasdep="0"', 'hasdep="2"', 'hasdep="2": must be 0 or 1'),
    ('inplace="1"', 'inplace="yes"', 'inplace="yes": must be 0 or 1'),
    ('proto="Simple"', 'proto="Fast"', "proto"),
    ('coll="allgather"', 'coll="allgatherv"', "unsupported collective"),
    (' cnt="1"', "", "missing required attribute cnt"),
])
def test_bad_attribute_values(run_cli, tmp_path: Path, old: str, new: str, needle: str) -> None:
    check_one_line(run_validate(run_cli, tmp_path, sub(FIG7, old, new)), "plan.xml:", needle)


def test_negative_ngpus(run_cli, tmp_path: Path) -> None:
    check_one_line(run_validate(run_cli, tmp_path, sub(FIG7, 'ngpus="2"', 'ngpus="-2"')),
                   "ngpus=-2 is out of range")


def test_mismatched_ngpus(run_cli, tmp_path: Path) -> None:
    check_one_line(run_validate(run_cli, tmp_path, sub(FIG7, 'ngpus="2"', 'ngpus="4"')),
                   "plan.xml:1: <algo>: ngpus=4 but the plan has 2 <gpu> elements")


def test_unknown_buffer(run_cli, tmp_path: Path) -> None:
    check_one_line(run_validate(run_cli, tmp_path, sub(FIG7, 'dstbuf="o"', 'dstbuf="x"')),
                   'plan.xml:4: <step s="0">: dstbuf="x": unknown buffer')


def test_offset_out_of_range(run_cli, tmp_path: Path) -> None:
    doc = sub(FIG7, 'type="s" srcbuf="o" srcoff="1"', 'type="s" srcbuf="o" srcoff="4"')
    check_one_line(run_validate(run_cli, tmp_path, doc),
                   "plan.xml:8: gpu 0 tb 1 step 0: source output chunk 4 outside the buffer (o_chunks=4)")


def test_dangling_dependency(run_cli, tmp_path: Path) -> None:
    doc = sub(SCRATCH, 'depid="1" deps="1"', 'depid="7" deps="1"')
    check_one_line(run_validate(run_cli, tmp_path, doc),
                   "plan.xml:6: gpu 0 tb 0 step 2: depid 7 names no threadblock on gpu 0")


def test_send_to_self(run_cli, tmp_path: Path) -> None:
    check_one_line(run_validate(run_cli, tmp_path, sub(RING, 'send="1" recv="2"', 'send="0" recv="2"')),
                   "plan.xml:3: gpu 0 tb 0: send peer is the gpu itself")


def test_duplicate_threadblock(run_cli, tmp_path: Path) -> None:
    check_one_line(run_validate(run_cli, tmp_path, sub(FIG7, '<tb id="1" send="1"', '<tb id="0" send="1"')),
                   "threadblock id 0 is declared more than once on gpu 0")


def test_unmatched_send(run_cli, tmp_path: Path) -> None:
    lines = FIG7.splitlines(keepends=True)
    # drop gpu 1's receive on channel 0 (the step after its first send)
    gpu1 = next(i for i, x in enumerate(lines) if x.startswith('  <gpu id="1"'))
    del lines[gpu1 + 3]
    check_one_line(run_validate(run_cli, tmp_path, "".join(lines)),
                   "plan.xml:4: gpu 0 tb 0 step 0: unmatched send: gpu 1 has no receive-type step from gpu 0")


def test_dependency_cycle(run_cli, tmp_path: Path) -> None:
    # the send of tb 1 waits for the reduction of tb 0, which waits for tb 1's receive
    doc = sub(SCRATCH, 'type="s" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1" depid="-1" deps="-1"',
              'type="s" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1" depid="0" deps="2"')
    check_one_line(run_validate(run_cli, tmp_path, doc), "deadlock: dependency cycle of 3 steps",
                   "gpu 0 tb 1 step 0")


def test_cross_gpu_deadlock(run_cli, tmp_path: Path) -> None:
    # both GPUs receive on channel 0 before they send: each waits for the other
    lines = FIG7.split("\n")
    for start, line in enumerate(list(lines)):
        if line.startswith('    <tb id="0"'):
            send, recv = lines[start + 1], lines[start + 2]
            lines[start + 1] = recv.replace('s="1"', 's="0"', 1)
            lines[start + 2] = send.replace('s="0"', 's="1"', 1)
    check_one_line(run_validate(run_cli, tmp_path, "\n".join(lines)),
                   "deadlock: cross-GPU deadlock of 4 steps")


def test_wrong_collective_result(run_cli, tmp_path: Path) -> None:
    # GPU 1 receives chunk a (sent by GPU 0) into the slot of chunk b
    doc = sub(FIG7, 'type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0"',
              'type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="1"')
    res = run_validate(run_cli, tmp_path, doc)
    check_one_line(res, "wrong result", "gpu 1 output chunk")


# ---------------------------------------------------------------------------------------------
# random mutations of valid plans


ATTR = re.compile(r'(\w+)="([^"]*)"')
VALUES = st.one_of(
    st.integers(-3, 70).map(str),
    st.sampled_from(["", "x", "0x1", "08", "-1", "1e3", "99999999999", "i", "o", "s", "nop", "rrcs",
                     "reduce_scatter", "LL", "&amp;", "&#0;", "<"]),
    st.text(max_size=4))


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from([FIG7, SCRATCH, RING]))
    for _ in range(draw(st.integers(1, 3))):
        lines = text.split("\n")
        kind = draw(st.sampled_from(["value", "delete", "duplicate", "swap", "truncate", "insert"]))
        if kind == "value":
            spots = list(ATTR.finditer(text))
            if spots:
                m = spots[draw(st.integers(0, len(spots) - 1))]
                text = text[: m.start(2)] + draw(VALUES) + text[m.end(2):]
        elif kind == "delete":
            del lines[draw(st.integers(0, len(lines) - 1))]
            text = "\n".join(lines)
        elif kind == "duplicate":
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif kind == "swap":
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif kind == "truncate":
            text = text[: draw(st.integers(0, len(text)))]
        else:
            i = draw(st.integers(0, len(text)))
            text = text[:i] + draw(st.text(max_size=6)) + text[i:]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutations_are_valid_or_a_clean_error(text: str) -> None:
    try:
        plan, source = loads_with_source(text, "m.xml")
        report = verify(plan, source=source)
    except NunaError as err:
        message = str(err)
        assert message
        assert "\n" not in message
        assert message.startswith("m.xml")
        return
    assert all("\n" not in m for m in report.errors + report.warnings + report.notes)
    if not report.ok:
        with pytest.raises(NunaError):
            report.raise_on_error()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(mutated())
def test_mutations_through_the_cli(run_cli, tmp_path: Path, text: str) -> None:
    assert_clean_exit(run_validate(run_cli, tmp_path, text))


# the commands past validation, on what a mutation leaves valid (a campaign of 22,400 mutated
# corpus plans through validate and these commands found no internal error, 2026-12-06; this
# keeps it so on the shipped plans)
LATER_COMMANDS = [("info", "--size", "1MiB"), ("simulate", "--size", "64KiB"),
                  ("simulate", "--size", "100KiB", "--config", "NUMA+NAR", "--packet-bytes", "1024"),
                  ("simulate", "--size", "256KiB", "--executor-slices"),
                  ("simulate", "--size", "64KiB", "--protocol-model", "simple", "--no-flow-control"),
                  ("diff", "--size", "256KiB", "--configs", "UA,NAP+NAR"),
                  ("rewrite", "--config", "NAP+NAR", "--size", "1MiB", "-o", "OUT")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(mutated(), st.sampled_from(LATER_COMMANDS))
def test_mutations_through_the_later_commands(run_cli, tmp_path: Path, text: str,
                                              command: tuple[str, ...]) -> None:
    plan = tmp_path / "plan.xml"
    plan.write_text(text)
    out = tmp_path / "out.xml"
    out.unlink(missing_ok=True)
    res = run_cli(command[0], str(plan), *(str(out) if a == "OUT" else a for a in command[1:]))
    assert_clean_exit(res)
    if command[0] == "rewrite":  # a rewrite writes a plan that validates, or nothing
        if res.code == 0:
            assert run_cli("validate", str(out)).code == 0
        else:
            assert not out.exists()


def test_a_plan_name_holding_a_newline_cannot_forge_a_second_error_line(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the name is the user's string, and errors and headers quote it
    evil = re.sub(r'name="[^"]*"', 'name="evil&#10;nuna: error: forged&#13;"', FIG7, count=1)
    path = tmp_path / "evil.xml"
    path.write_text(evil.replace('ngpus="2"', 'ngpus="3"', 1))
    res = run_cli("simulate", str(path), "--size", "64KiB")
    assert res.code == 1
    assert res.err.count("\n") == 1
    assert "evil\\nnuna: error: forged\\r" in res.err
    path.write_text(evil)
    res = run_cli("info", str(path))
    assert res.code == 0
    assert res.out.splitlines()[0].startswith("plan: evil\\nnuna: error: forged\\r")
