"""Hardened MSCCL XML reader and executor-compatible writer for the plan IR.

Reading (:func:`load`, :func:`loads`, :func:`load_with_source`) uses lxml with entity
expansion, DTD loading and network access switched off, and rejects any ``DOCTYPE``/``ENTITY``
declaration outright (the plan format has none), so XXE, billion-laughs and external-DTD files
fail before parsing. Files are limited to :data:`MAX_PLAN_BYTES`; nesting depth is bounded by
libxml2's limit of 256 levels (``huge_tree=False``). Every error is a ``PlanError`` (or
``InputError`` for unreadable, non-UTF-8 or syntactically broken files) whose one-line message
starts ``file:line: <element>:``.

Conventions of the reader (reference ``msccl-xml.md`` §2-§3, §12):

* Integers must be plain decimal (``-?[0-9]+``, no leading zeros, no sign ``+``). The
  executors parse with ``strtol(s, NULL, 0)``, where ``0x10`` is hex and ``010`` is octal 8; we
  reject both spellings with a message saying how the executors would read them, rather than
  silently guess which meaning the author intended. No compiler-made plan uses them.
* ``-1`` sentinels become ``None``. An operand whose offset is ``-1`` has no location, so it is
  read as ``(None, None)`` whatever its buffer letter; the writer emits an absent operand the
  way msccl-tools writes ``nop`` steps (``srcbuf="i" srcoff="-1"``, ``dstbuf="o" dstoff="-1"``).
* ``reduce_scatter`` and ``reducescatter`` both read as :attr:`Collective.REDUCESCATTER`;
  ``Plan.coll_spelling`` keeps the file's spelling. Absent ``outofplace``/``minBytes``/
  ``maxBytes`` (older msccl-tools) take the reference defaults (``!inplace``, 0, 0) and are
  listed in ``Plan.defaulted``; :func:`nuna.plan.verify.verify` reports them as a warning.
  An absent ``name`` reads as ``""`` and is listed too.
* Unknown elements and attributes are skipped (as the executors do) with a warning recorded in
  :class:`SourceMap`; text content and comments are ignored.
* What lxml reads but the executors' hand-written parser rejects (§2) is a warning in
  :class:`SourceMap` too, found on the raw text outside comments: a UTF-8 byte-order mark, an
  XML declaration, a tab, text or a CDATA section between elements, a processing instruction,
  a line break or tab inside a start tag, a single-quoted attribute value, and extra spaces
  between attributes (empty attributes to the executors) that push one past the 16th. The
  executors count namespace declarations (``xmlns:nuna=...``) among an element's at most 16
  attributes, and so does the reader's own warning. Line numbers live only in the
  :class:`SourceMap`, never in the IR.
* The reader is an lxml parser *target* (no tree is built): a 64-GPU plan with 1,008
  threadblocks per GPU reads in about a second. Identical ``<step>`` elements yield one shared
  (immutable) :class:`Step` object.

Writing (:func:`dump`, :func:`save`) produces what msccl-tools produces: no XML declaration,
one element per line, 2-space indentation, attributes on one line separated by single spaces in
double quotes, at most 16 attributes per element. Placement annotations go in the ``nuna``
namespace described in ``docs/architecture.md``. ``loads(dump(p)) == p`` for every plan the
writer accepts; it rejects (``PlanError``) only what cannot come back equal: ``-1`` stored
instead of ``None``, an operand with a buffer but no offset (or the reverse), values outside
the reader's domains (e.g. negative ids or counts), characters XML 1.0 forbids, and placements
out of document order (see :func:`canonical_placement`). The executors' other limits (values of
at most 255 characters, at most 1,024 children per element) are reported by ``verify``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from lxml import etree

from nuna.errors import InputError, PlanError
from nuna.fsutil import read_input, write_atomic
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

#: Largest plan file accepted (the biggest compiler-made plan we know of is ~2 MB).
MAX_PLAN_BYTES = 64 * 2**20
#: XML namespace of the placement annotations (``docs/architecture.md``).
NUNA_NS = "https://github.com/nuna-sim/nuna/placement"
NUNA_PREFIX = "nuna"

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MAX = 2**63 - 1

_COLLECTIVES: dict[str, Collective] = {c.value: c for c in Collective}
_COLLECTIVES["reduce_scatter"] = Collective.REDUCESCATTER
_PROTOCOLS: dict[str, Protocol] = {p.value: p for p in Protocol}
_STEP_TYPES: dict[str, StepType] = {t.value: t for t in StepType}
_BUFFERS: dict[str, Buffer] = {b.value: b for b in Buffer}

_ALGO_ATTRS = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace",
               "outofplace", "minBytes", "maxBytes")
# nthreads (a threads-per-block override the old executor reads) is not modelled, so it is
# reported as ignored like any unknown attribute
_KNOWN_ALGO_ATTRS = frozenset(_ALGO_ATTRS)
_GPU_ATTRS = frozenset(("id", "i_chunks", "o_chunks", "s_chunks"))
_TB_ATTRS = frozenset(("id", "send", "recv", "chan"))
_STEP_KEYS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
_STEP_ATTRS = frozenset(_STEP_KEYS)
_DEFAULTABLE = ("outofplace", "minBytes", "maxBytes")

_NS_NAR = f"{{{NUNA_NS}}}nar"
_NS_CONFIG = f"{{{NUNA_NS}}}config"
_NS_SIZE = f"{{{NUNA_NS}}}size"
_NS_CU = f"{{{NUNA_NS}}}cu"
_NS_PLACEMENT = f"{{{NUNA_NS}}}placement"
_NS_CHUNK = f"{{{NUNA_NS}}}chunk"

_DECL_RE = re.compile(r"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_XML_DECL_RE = re.compile(rb"<\?xml[ \t\n\r]")
# XML 1.0 Char production minus what attribute values can hold at all
_XML_ILLEGAL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True, slots=True, eq=False)
class SourceMap:
    """Where each part of a plan came from in its file: 1-based line numbers by position.

    Positions are indices into ``Plan.gpus`` / ``Gpu.threadblocks`` / ``Threadblock.steps``
    (not ids), so the map stays valid for malformed plans with duplicate ids. Lines are stored
    flat, in document order: ``tb_lines[tb_start[g] + t]`` is threadblock ``t`` of GPU ``g``
    and ``step_lines[step_start[tb_start[g] + t] + s]`` its step ``s``. ``warnings`` are the
    reader's own findings (unknown elements or attributes, XML declaration, ...).
    """

    file: str
    algo_line: int
    gpu_lines: npt.NDArray[np.int64]
    tb_start: npt.NDArray[np.int64]
    tb_lines: npt.NDArray[np.int64]
    step_start: npt.NDArray[np.int64]
    step_lines: npt.NDArray[np.int64]
    warnings: tuple[str, ...] = ()

    def at_algo(self) -> str:
        """``'file:line: '`` prefix for a plan-wide message."""
        return f"{self.file}:{self.algo_line}: "

    def at_gpu(self, g: int) -> str:
        """Prefix for GPU position ``g``; falls back to the file name if out of range."""
        if 0 <= g < self.gpu_lines.shape[0]:
            return f"{self.file}:{int(self.gpu_lines[g])}: "
        return f"{self.file}: "

    def at_tb(self, g: int, t: int) -> str:
        """Prefix for threadblock position ``t`` of GPU position ``g``."""
        if 0 <= g < self.gpu_lines.shape[0] and 0 <= t < self.tb_start[g + 1] - self.tb_start[g]:
            return f"{self.file}:{int(self.tb_lines[self.tb_start[g] + t])}: "
        return self.at_gpu(g)

    def at_step(self, g: int, t: int, s: int) -> str:
        """Prefix for step position ``s`` of threadblock ``t`` of GPU ``g``."""
        if 0 <= g < self.gpu_lines.shape[0] and 0 <= t < self.tb_start[g + 1] - self.tb_start[g]:
            k = int(self.tb_start[g] + t)
            if 0 <= s < self.step_start[k + 1] - self.step_start[k]:
                return f"{self.file}:{int(self.step_lines[self.step_start[k] + s])}: "
        return self.at_tb(g, t)


# --------------------------------------------------------------------------------------------
# reading


def load(path: str | os.PathLike[str]) -> Plan:
    """Read and parse the plan file at ``path``."""
    return load_with_source(path)[0]


def loads(text: str | bytes, name: str = "<string>") -> Plan:
    """Parse a plan from ``text``; ``name`` is the file name used in error messages."""
    return loads_with_source(text, name)[0]


def load_with_source(path: str | os.PathLike[str]) -> tuple[Plan, SourceMap]:
    """Read the plan file at ``path`` and return it with its :class:`SourceMap`."""
    return loads_with_source(read_input(path, "plan file", limit_bytes=MAX_PLAN_BYTES), os.fspath(path))


def loads_with_source(text: str | bytes, name: str = "<string>") -> tuple[Plan, SourceMap]:
    """Parse a plan from ``text`` and return it with its :class:`SourceMap`."""
    if isinstance(text, str):
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{name}: text contains characters that are not valid Unicode") from None
    else:
        data = bytes(text)
    if len(data) > MAX_PLAN_BYTES:
        raise InputError(f"{name}: plan is {len(data)} bytes, more than the {MAX_PLAN_BYTES}-byte limit")
    body, decl, bom = _screen(data, name)
    reader = _Reader(name, body)
    parser = etree.XMLParser(
        target=reader, resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False,
        huge_tree=False, remove_comments=True, remove_pis=True, encoding="utf-8",
    )
    try:
        plan = etree.fromstring(body, parser)
    except etree.XMLSyntaxError as err:
        msg = " ".join(str(err.msg or err).split())
        raise InputError(f"{name}:{err.lineno or 1}: XML syntax error: {msg}") from None
    except (ValueError, etree.LxmlError) as err:
        raise InputError(f"{name}: cannot parse: {' '.join(str(err).split())}") from None
    if not isinstance(plan, Plan):
        raise InputError(f"{name}: no <algo> element")
    rejected = " makes both MSCCL executors reject the file"
    warnings = []
    if bom:
        warnings.append(f"{name}:1: a UTF-8 byte-order mark at the start{rejected}")
    if decl:
        warnings.append(f"{name}:1: the XML declaration <?xml ...?>{rejected}")
    warnings += _lexical_warnings(body, name)
    return plan, reader.source_map(plan, warnings)


def _screen(data: bytes, name: str) -> tuple[bytes, bool, bool]:
    """Checks before any XML parsing: not empty, UTF-8, no DOCTYPE/ENTITY declarations. Returns
    the UTF-8 body (BOM removed), whether it starts with an XML declaration and whether it
    started with a byte-order mark."""
    if not data.strip():
        raise InputError(f"{name}: empty file (expected an MSCCL <algo> plan)")
    try:
        # utf-8-sig: lxml reads a BOM (the executors do not: a warning); other encodings are not
        # something the executors read
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise InputError(f"{name}:{line}: not UTF-8 text (binary or wrongly encoded file)") from None
    m = _DECL_RE.search(text)
    if m is not None:
        line = text.count("\n", 0, m.start()) + 1
        raise InputError(f"{name}:{line}: <!{m.group(1).upper()}> declarations are not allowed in plans "
                         "(refused to avoid entity expansion and external file or network access)")
    bom = data.startswith(b"\xef\xbb\xbf")
    body = data[3:] if bom else data
    # lxml accepts a declaration only at the very start; <?xml-stylesheet ...?> is none
    return body, _XML_DECL_RE.match(body) is not None, bom


# --------------------------------------------------------------------------------------------
# the executors' lexical rules (reference §2)
#
# Both executors read plans with a hand-written parser (``mscclXmlGetNode`` and friends) that
# accepts less than XML: before each '<' only spaces, \n and \r (so a byte-order mark, a tab or
# any text between elements fails with "expecting '<'"); after '<' only comments are special,
# everything else is read as an element (so a processing instruction such as the XML
# declaration, or a CDATA section, becomes an element "?xml", "![CDATA[..." that fails with
# "expected >" or is never closed; one with a '/' in just the right place, like <?pi a/?>,
# would close itself and be skipped, which is not worth telling apart);
# inside a start tag the attributes are read while the character after the previous one is a
# space (``while (c == ' ')``), so a line break or tab there fails with "expected >"; a value
# opened with ' is read up to the next "; and every space beyond the one that separates two
# attributes is read as an empty attribute that takes one of the 16 slots (MAX_ATTR_COUNT), so
# attributes past the 16th token are ignored. lxml accepts all of these, so they are found on
# the raw text, after lxml has checked that it is well formed. (The byte-order mark and the XML
# declaration are reported by :func:`loads_with_source`.)

# what the lexical scan reports, by kind, in report order (each message follows ``file:line: ``)
_LEX_MESSAGES = {
    "tab": "a tab between elements makes both MSCCL executors reject the file",
    "text": 'the text "{0}" between elements makes both MSCCL executors reject the file',
    "cdata": "a CDATA section <![CDATA[...]]> makes both MSCCL executors reject the file",
    "pi": "the processing instruction <?{0} ...?> makes both MSCCL executors reject the file",
    "break": "a line break or tab inside the start tag <{0} ...> makes both MSCCL executors reject the file",
    "squote": "the single-quoted attribute value {0}='...' makes both MSCCL executors reject the file",
    "spaces": ("extra spaces between the attributes of <{0} ...> make both MSCCL executors ignore the "
               "attributes beyond the 16th ({1}): each extra space counts as an empty attribute"),
}
_EXECUTOR_MAX_ATTRS = 16
# a line break not right after '>'
_LINE_END_RE = re.compile(rb"\n(?<!>\n)")
# a '>' not followed by a line break, indentation and the next '<' (nor by the end): where text
# can start in a file whose every line ends with '>'
_AFTER_TAG_RE = re.compile(rb">(?!\n *+<)(?!\n?\Z)")
# a run of two or more spaces that is not indentation (not after a line break or another space)
_INNER_SPACES_RE = re.compile(rb"  (?<![\n ]  )")
# everything up to the next '<' (whitespace, or text), then the markup that '<' opens in a
# well-formed document (group 1): a comment, CDATA section, processing instruction, end tag or
# start tag (whose quoted values may hold '>'). The gap is taken possessively and every '<'
# opens markup (lxml has checked the document), so the matches tile the body: linear time (a
# gap of whitespace only, followed by text, made the search retry at every position of it:
# 36 s for a 300 kB run of spaces)
_LEX_TOKEN_RE = re.compile(
    rb"[^<]*+(<!--.*?-->|<!\[CDATA\[.*?\]\]>|<\?.*?\?>|</[^>]*+>"
    rb"|<[^>\"']*+(?:(?:\"[^\"]*+\"|'[^']*+')[^>\"']*+)*+>)",
    re.DOTALL)
_NOT_SPACE_RE = re.compile(rb"[^ \t\n\r]")
_PI_TARGET_RE = re.compile(rb"<\?([^ \t\n\r?]*+)")
# one start tag: its quoted values, and the stretches outside them
_TAG_PART_RE = re.compile(rb"\"[^\"]*+\"|'[^']*+'|[^\"']++")
_TAG_BREAK_RE = re.compile(rb"[\t\n\r]")
# a start tag the executors read attribute by attribute: spaces only, double quotes, no spaces
# around '='; group 1 is the name, group 2 the attributes
_PLAIN_TAG_RE = re.compile(rb"<([^\s/>]++)((?: ++[^\s=\"']++=\"[^\"]*+\")*+) *+/?>")
_PLAIN_ATTR_RE = re.compile(rb"( ++)([^\s=\"']++)=\"[^\"]*+\"")
_BANG, _QUESTION, _SLASH = b"!?/"


def _lexical_warnings(body: bytes, name: str) -> list[str]:
    """Warnings for what the executors' hand-written parser rejects although lxml reads it
    (see above): ``file:line: <what> ...`` with the line of the first occurrence and, if there
    are several, ``(and N more like it)``. Text inside comments, CDATA and processing
    instructions is never looked at. Linear in the size of ``body``."""
    if not _lexical_scan_needed(body):
        return []
    first: dict[str, tuple[int, str]] = {}  # kind -> (offset, message)
    counts: Counter[str] = Counter()

    def found(kind: str, offset: int, *args: str) -> None:
        counts[kind] += 1
        if kind not in first:
            first[kind] = (offset, _LEX_MESSAGES[kind].format(*args))

    has_tab = b"\t" in body
    decl = _XML_DECL_RE.match(body) is not None  # reported on its own
    pos = 0
    for m in _LEX_TOKEN_RE.finditer(body):
        start = m.start(1)
        text = _NOT_SPACE_RE.search(body, pos, start) if start > pos else None
        if text is not None:  # something other than whitespace before the markup: text
            found("text", text.start(), _text_excerpt(body, text.start(), start))
        if has_tab and start > pos:
            tab = body.find(b"\t", pos, start)
            if tab >= 0:
                found("tab", tab)
        pos = m.end()
        lead = body[start + 1]
        if lead in (_BANG, _SLASH):  # comment, CDATA section, end tag
            if body.startswith(b"<![", start):
                found("cdata", start)
            continue
        if lead == _QUESTION:
            if start or not decl:
                target = _PI_TARGET_RE.match(body, start)
                found("pi", start, _clip(target.group(1).decode("utf-8", "replace") if target else ""))
            continue
        tag = m.group(1)
        if b"\t" in tag or b"\n" in tag or b"\r" in tag or b"'" in tag or b"  " in tag:
            _check_start_tag(tag, start, found)
    if has_tab and pos < len(body):
        tab = body.find(b"\t", pos)
        if tab >= 0:
            found("tab", tab)
    out = []
    for kind in _LEX_MESSAGES:
        if kind in first:
            offset, msg = first[kind]
            more = counts[kind] - 1
            line = body.count(b"\n", 0, offset) + 1
            out.append(f"{name}:{line}: {msg}" + (f" (and {more} more like it)" if more else ""))
    return out


def _text_excerpt(body: bytes, start: int, end: int) -> str:
    """The start of the text at ``body[start:end]`` for a message: its first line, clipped."""
    text = body[start:min(end, start + 80)].split(b"\n", 1)[0].rstrip(b" \t\r")
    return _clip(text.decode("utf-8", "replace"), 20)


def _lexical_scan_needed(body: bytes) -> bool:
    """Whether ``body`` may break a lexical rule at all: it has a tab, a carriage return, a
    single quote, a '[' (CDATA), a '?' after a leading XML declaration (a processing
    instruction), a line that does not end with '>' (a start tag may span lines), a '>' not
    followed by a line break and the next line's '<' (text may follow), or a run of spaces that
    is not indentation. Plans as msccl-tools and :func:`dump` write them have none of these
    (unless a name holds a quote, say), and the searches take about 3 ms on a 2 MB plan where
    the full scan takes about 20 ms."""
    question = body.find(b"?")
    if question >= 0 and _XML_DECL_RE.match(body) is not None:  # the declaration has two
        question = body.find(b"?", body.find(b"?>") + 2)
    return (b"\t" in body or b"\r" in body or b"'" in body or b"[" in body or question >= 0
            or _LINE_END_RE.search(body) is not None or _AFTER_TAG_RE.search(body) is not None
            or _INNER_SPACES_RE.search(body) is not None)


def _check_start_tag(tag: bytes, start: int, found: Callable[..., None]) -> None:
    """Report the lexical findings of one start tag (``tag`` begins at offset ``start``):
    at most one line break or tab, every single-quoted value, and, if neither, attributes
    pushed past the 16th slot by extra spaces."""
    label = _clip(tag[1:].split(None, 1)[0].rstrip(b"/>").decode("utf-8", "replace"))
    broken = quoted = False
    outside = b""  # the latest stretch outside values: it ends with the next value's name
    for part in _TAG_PART_RE.finditer(tag):
        text = part.group()
        if text[:1] == b'"':
            continue
        if text[:1] == b"'":
            attr = outside.rstrip(b" \t\n\r=").rsplit(None, 1)[-1:] or [b""]
            found("squote", start + part.start(), _clip(attr[0].decode("utf-8", "replace")))
            quoted = True
            continue
        outside = text
        if not broken:
            ws = _TAG_BREAK_RE.search(text)
            if ws is not None:
                found("break", start + part.start() + ws.start(), label)
                broken = True
    if broken or quoted or b"  " not in tag:
        return
    plain = _PLAIN_TAG_RE.fullmatch(tag)
    if plain is None:  # spaces around '=': not checked, reference §2 does not cover them
        return
    slot = 0
    beyond: list[str] = []
    count = 0
    for a in _PLAIN_ATTR_RE.finditer(plain.group(2)):
        count += 1
        slot += len(a.group(1))  # each space starts one token of the executors' reader
        if slot > _EXECUTOR_MAX_ATTRS:
            beyond.append(_clip(a.group(2).decode("utf-8", "replace")))
    # with more than 16 real attributes the reader's own warning (check_attrs) applies
    if beyond and count <= _EXECUTOR_MAX_ATTRS:
        shown = ", ".join(beyond[:3]) + (", ..." if len(beyond) > 3 else "")
        found("spaces", start, label, shown)


# start tags in document order, skipping comments, CDATA and processing instructions; for a
# well-formed document (lxml has checked it) the k-th match is the k-th element
_START_TAG_RE = re.compile(rb"<(?:!--.*?-->|!\[CDATA\[.*?\]\]>|\?.*?\?>|([A-Za-z_:]))", re.DOTALL)


def _start_tag_lines(body: bytes) -> npt.NDArray[np.int64]:
    """1-based line of every start tag of ``body``, in document order."""
    raw = np.frombuffer(body, dtype=np.uint8)
    if b"<!" in body or b"<?" in body:
        starts = np.fromiter((m.start() for m in _START_TAG_RE.finditer(body) if m.group(1) is not None),
                             dtype=np.int64)
    else:  # no comments, CDATA or PIs: every '<' not followed by '/' opens an element
        lt = np.flatnonzero(raw == 0x3C)
        nxt = raw[np.minimum(lt + 1, raw.shape[0] - 1)]
        starts = lt[nxt != 0x2F]
    newlines = np.flatnonzero(raw == 0x0A)
    return np.searchsorted(newlines, starts).astype(np.int64) + 1


def _describe(tag: str, attrs: dict[str, str]) -> str:
    """``<step s="3">``-style name of an element for messages."""
    if tag.startswith(f"{{{NUNA_NS}}}"):
        tag = f"{NUNA_PREFIX}:{tag[len(NUNA_NS) + 2:]}"
    elif tag.startswith("{"):
        tag = tag[tag.index("}") + 1:]
    key = {"step": "s", "tb": "id", "gpu": "id"}.get(tag)
    if key is not None and attrs.get(key) is not None:
        return f'<{tag} {key}="{_clip(attrs[key], 20)}">'
    return f"<{tag}>"


class _Reader:
    """lxml parser target: builds the IR from start/end events, without building a tree.

    Element positions are counted as start-event ordinals; line numbers are looked up from the
    raw text only when a message or the :class:`SourceMap` needs them.
    """

    def __init__(self, name: str, body: bytes) -> None:
        self.name = name
        self.body = body
        self.n = 0  # start events seen
        self.stack: list[str] = []
        self.ctx = ""  # tag of the innermost open element we read ("" before the root)
        self.skip = 0  # depth inside an unknown element
        self.ns_decls = 0  # namespace declarations reported for the next start event
        self.ns_at = -1  # ordinal of the latest element that declared namespaces
        # default namespaces declared in the plan: the executors read element names as written
        # (``xmlns`` is one more attribute to them), so their elements are read as plain ones
        self.default_ns: frozenset[str] = frozenset()
        self.new_default: str | None = None  # declared on the next start event
        self.pending: list[tuple[int, str, dict[str, str], str]] = []  # warnings: ordinal, tag, attrs, msg
        self._lines: npt.NDArray[np.int64] | None = None
        # parsed integer values by (text, lo, hi); plan files repeat a handful of values
        self._ints: dict[tuple[str, int, int], int] = {}
        # canonical decimal text -> value, for every int32 value read so far (no range implied)
        self._decimals: dict[str | None, int] = {}
        self._steps: dict[tuple[str, ...], Step] = {}
        self.header: dict[str, Any] = {}
        self.algo_ord = 0
        self.gpus: list[Gpu] = []
        # start-event ordinals of the gpu, tb and step elements, in document order
        self.gpu_ords: list[int] = []
        self.tb_ords: list[int] = []
        self.step_ords: list[int] = []
        self.tb_places: list[TbPlacement] = []
        self.chunk_places: list[ChunkPlacement] = []
        self.gpu_attrs: tuple[int, int, int, int] = (0, 0, 0, 0)
        self.tbs: list[Threadblock] = []
        self.tb_attrs: tuple[int, int | None, int | None, int] = (0, None, None, 0)
        self.steps: list[Step] = []
        self.result: Plan | None = None

    # -- locations and messages ----------------------------------------------------------

    def line(self, k: int) -> int:
        if self._lines is None:
            self._lines = _start_tag_lines(self.body)
        return int(self._lines[k]) if k < self._lines.shape[0] else 0

    def fail(self, k: int, tag: str, attrs: dict[str, str], msg: str) -> PlanError:
        return PlanError(f"{self.name}:{self.line(k)}: {_describe(tag, attrs)}: {msg}")

    def warn(self, k: int, tag: str, attrs: dict[str, str], msg: str) -> None:
        self.pending.append((k, tag, dict(attrs), msg))

    def source_map(self, plan: Plan, extra: list[str]) -> SourceMap:
        lines = _start_tag_lines(self.body)
        if lines.shape[0] != self.n:  # cannot happen for well-formed XML; be safe anyway
            lines = self._tree_lines()
        self._lines = lines
        warnings = list(extra)
        warnings += [f"{self.name}:{self.line(k)}: {_describe(tag, a)}: {msg}"
                     for k, tag, a, msg in self.pending]
        tb_counts = np.fromiter((len(g.threadblocks) for g in plan.gpus), dtype=np.int64,
                                count=len(plan.gpus))
        step_counts = np.fromiter((len(tb.steps) for g in plan.gpus for tb in g.threadblocks), dtype=np.int64)
        return SourceMap(
            file=self.name,
            algo_line=self.line(self.algo_ord),
            gpu_lines=lines[np.asarray(self.gpu_ords, dtype=np.int64)],
            tb_start=np.r_[0, np.cumsum(tb_counts)].astype(np.int64),
            tb_lines=lines[np.asarray(self.tb_ords, dtype=np.int64)],
            step_start=np.r_[0, np.cumsum(step_counts)].astype(np.int64),
            step_lines=lines[np.asarray(self.step_ords, dtype=np.int64)],
            warnings=tuple(warnings),
        )

    def _tree_lines(self) -> npt.NDArray[np.int64]:
        parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
                                 remove_comments=True, remove_pis=True, encoding="utf-8")
        root = etree.fromstring(self.body, parser)
        return np.fromiter((el.sourceline or 0 for el in root.iter()), dtype=np.int64)

    # -- attribute helpers ---------------------------------------------------------------

    def required(self, k: int, tag: str, a: dict[str, str], attr: str) -> str:
        value = a.get(attr)
        if value is None:
            raise self.fail(k, tag, a, f"missing required attribute {attr}")
        return value

    def integer(self, k: int, tag: str, a: dict[str, str], attr: str, lo: int, hi: int = _INT32_MAX,
                shown: str | None = None) -> int:
        text = self.required(k, tag, a, attr)
        key = (text, lo, hi)
        hit = self._ints.get(key)
        if hit is not None:
            return hit
        number = _parse_decimal(text)
        label = shown or attr
        if number is None:
            raise self.fail(k, tag, a, f'{label}="{_clip(text)}": {_why_not_decimal(text)}')
        if not lo <= number <= hi:
            raise self.fail(k, tag, a, f"{label}={number} is out of range (allowed {lo}..{hi})")
        self._ints[key] = number
        if _INT32_MIN <= number <= _INT32_MAX:
            self._decimals[text] = number
        return number

    def flag(self, k: int, tag: str, a: dict[str, str], attr: str) -> bool:
        text = self.required(k, tag, a, attr)
        if text not in ("0", "1"):
            raise self.fail(k, tag, a, f'{attr}="{_clip(text)}": must be 0 or 1')
        return text == "1"

    def check_attrs(self, k: int, tag: str, a: dict[str, str], known: frozenset[str]) -> None:
        if len(a) > _EXECUTOR_MAX_ATTRS and k != self.ns_at:  # else start_with_namespaces counts
            self.warn(k, tag, a, _too_many_attrs(len(a), 0))
        for key in a:
            if key in known:
                continue
            if key.startswith(f"{{{NUNA_NS}}}"):
                self.warn(k, tag, a, f"unknown attribute {NUNA_PREFIX}:{key[len(NUNA_NS) + 2:]} ignored")
            else:
                self.warn(k, tag, a, f"unknown attribute {_clip(key)} ignored")

    # -- parser target interface ---------------------------------------------------------
    # (no ``data`` method: lxml then does not call back for the whitespace between elements;
    # text content is meaningless in a plan and ignored)

    def start_ns(self, prefix: str | None, uri: str) -> None:
        # called before the start event of the element that declares the namespace
        self.ns_decls += 1
        if not prefix and uri and uri != NUNA_NS:  # lxml reports the default as ""
            self.default_ns = self.default_ns | {uri}
            self.new_default = uri

    def plain(self, tag: str) -> str:
        """``tag`` without a default namespace declared in the plan."""
        if tag[0] == "{":
            uri, _, local = tag[1:].partition("}")
            if uri in self.default_ns:
                return local
        return tag

    def start_with_namespaces(self, tag: str, a: dict[str, str]) -> None:
        """:meth:`start` for an element with namespace declarations, which lxml does not list
        among its attributes but the executors' parser does (``xmlns:nuna="..."`` is one more
        attribute to it): the attribute count includes them."""
        ns, self.ns_decls = self.ns_decls, 0
        k = self.ns_at = self.n
        mark = len(self.pending)
        default, self.new_default = self.new_default, None
        self.start(tag, a)
        if default is not None and not self.skip:
            self.pending.insert(mark, (k, self.plain(tag), dict(a),
                                       f'default namespace xmlns="{_clip(default)}" ignored (the MSCCL '
                                       "executors read element names as written)"))
        total = len(a) + ns
        if total > _EXECUTOR_MAX_ATTRS and not self.skip:  # not for elements the reader skips
            # first among the element's warnings, where check_attrs puts its count
            self.pending.insert(mark, (k, tag, dict(a), _too_many_attrs(total, ns)))

    def start(self, tag: str, a: dict[str, str]) -> None:
        if self.ns_decls:
            self.start_with_namespaces(tag, a)
            return
        if self.default_ns:
            tag = self.plain(tag)
        k = self.n
        self.n = k + 1
        if self.skip:
            self.skip += 1
            return
        ctx = self.ctx
        if ctx == "tb" and tag == "step":
            self.steps.append(self.read_step(k, a))
            self.step_ords.append(k)
            self.ctx = "step"  # steps are leaves: no stack entry, end() restores "tb"
            return
        if ctx == "gpu" and tag == "tb":
            self.read_tb(k, a)
            self.tb_ords.append(k)
            self.steps = []
        elif ctx == "algo" and tag == "gpu":
            self.read_gpu(k, a)
            self.gpu_ords.append(k)
            self.tbs = []
        elif ctx == "gpu" and tag == _NS_PLACEMENT:
            self.check_attrs(k, tag, a, frozenset())
        elif ctx == _NS_PLACEMENT and tag == _NS_CHUNK:
            self.read_chunk(k, a)
        elif ctx == "":
            if tag != "algo":
                where = "" if tag[0] != "{" else f', not one in namespace "{_clip(tag[1:tag.index("}")])}"'
                raise self.fail(k, tag, a, f"the root element must be <algo> (an MSCCL plan){where}")
            self.read_algo(k, a)
        else:
            self.warn(k, tag, a, "unknown element ignored (the MSCCL executors skip it)")
            self.skip = 1
            return
        self.stack.append(ctx)
        self.ctx = tag

    def end(self, tag: str) -> None:
        if self.default_ns:
            tag = self.plain(tag)
        if self.skip:
            self.skip -= 1
            return
        ctx = self.ctx
        if ctx == "step":
            self.ctx = "tb"
            return
        self.ctx = self.stack.pop()
        if ctx == "tb":
            tid, send, recv, chan = self.tb_attrs
            self.tbs.append(Threadblock(tid, send, recv, chan, tuple(self.steps)))
        elif ctx == "gpu":
            gid, i_chunks, o_chunks, s_chunks = self.gpu_attrs
            self.gpus.append(Gpu(gid, i_chunks, o_chunks, s_chunks, tuple(self.tbs)))
        elif ctx == "algo":
            self.result = self.finish_algo()

    def close(self) -> Plan | None:
        return self.result

    # -- elements ------------------------------------------------------------------------

    def read_algo(self, k: int, a: dict[str, str]) -> None:
        tag = "algo"
        self.algo_ord = k
        self.check_attrs(k, tag, a, _KNOWN_ALGO_ATTRS | {_NS_NAR, _NS_CONFIG, _NS_SIZE})
        defaulted: set[str] = set()
        name = a.get("name")
        if name is None:
            defaulted.add("name")
            name = ""
        name = _literal(name)
        proto_text = self.required(k, tag, a, "proto")
        protocol = _PROTOCOLS.get(proto_text)
        if protocol is None:
            raise self.fail(k, tag, a, f'proto="{_clip(proto_text)}": must be one of Simple, LL, LL128')
        coll_text = self.required(k, tag, a, "coll")
        collective = _COLLECTIVES.get(coll_text)
        if collective is None:
            known = ", ".join(sorted(_COLLECTIVES))
            raise self.fail(k, tag, a, f'coll="{_clip(coll_text)}": unsupported collective (expected one of '
                                       f"{known})")
        h = self.header
        h["name"] = name
        h["protocol"] = protocol
        h["collective"] = collective
        h["coll_spelling"] = None if coll_text == collective.value else coll_text
        h["nchannels"] = self.integer(k, tag, a, "nchannels", 1)
        h["nchunksperloop"] = self.integer(k, tag, a, "nchunksperloop", 1)
        h["ngpus"] = self.integer(k, tag, a, "ngpus", 1)
        inplace = self.flag(k, tag, a, "inplace")
        h["inplace"] = inplace
        if "outofplace" in a:
            h["outofplace"] = self.flag(k, tag, a, "outofplace")
        else:
            defaulted.add("outofplace")
            h["outofplace"] = not inplace
        for attr, field_name in (("minBytes", "min_bytes"), ("maxBytes", "max_bytes")):
            if attr in a:
                h[field_name] = self.integer(k, tag, a, attr, 0, _INT64_MAX)
            else:
                defaulted.add(attr)
                h[field_name] = 0
        h["defaulted"] = frozenset(defaulted)
        h["nar"] = None if _NS_NAR not in a else self.integer(k, tag, a, _NS_NAR, 1, shown="nuna:nar")
        config = a.get(_NS_CONFIG)
        h["config"] = None if config is None else _literal(config)
        h["size"] = None if _NS_SIZE not in a else self.integer(k, tag, a, _NS_SIZE, 1, _INT64_MAX,
                                                                 shown="nuna:size")

    def finish_algo(self) -> Plan:
        h = self.header
        placement = Placement(nar_granularity=h["nar"], threadblocks=tuple(self.tb_places),
                              chunks=tuple(self.chunk_places), config=h["config"], size_bytes=h["size"])
        return Plan(
            name=h["name"], protocol=h["protocol"], nchannels=h["nchannels"],
            nchunksperloop=h["nchunksperloop"], ngpus=h["ngpus"], collective=h["collective"],
            inplace=h["inplace"], outofplace=h["outofplace"],
            min_bytes=h["min_bytes"], max_bytes=h["max_bytes"], gpus=tuple(self.gpus),
            coll_spelling=h["coll_spelling"], defaulted=h["defaulted"], placement=placement,
        )

    def read_gpu(self, k: int, a: dict[str, str]) -> None:
        tag = "gpu"
        if len(a) != 4:
            self.check_attrs(k, tag, a, _GPU_ATTRS)
        self.gpu_attrs = (self.integer(k, tag, a, "id", 0), self.integer(k, tag, a, "i_chunks", 0),
                          self.integer(k, tag, a, "o_chunks", 0), self.integer(k, tag, a, "s_chunks", 0))

    def read_tb(self, k: int, a: dict[str, str]) -> None:
        ints = self._decimals
        get = a.get
        try:
            tid, send, recv, chan = ints[get("id")], ints[get("send")], ints[get("recv")], ints[get("chan")]
        except KeyError:
            tid = send = recv = chan = -2
        if tid < 0 or send < -1 or recv < -1 or chan < -1:
            tag = "tb"
            tid = self.integer(k, tag, a, "id", 0)
            send = self.integer(k, tag, a, "send", -1)
            recv = self.integer(k, tag, a, "recv", -1)
            # chan="-1" occurs on local-only threadblocks of committed plans; verify judges it
            chan = self.integer(k, tag, a, "chan", -1)
        self.tb_attrs = (tid, None if send == -1 else send, None if recv == -1 else recv, chan)
        if len(a) != 4:
            self.check_attrs(k, "tb", a, _TB_ATTRS | {_NS_CU})
            if _NS_CU in a:
                cu = self.integer(k, "tb", a, _NS_CU, 0, shown="nuna:cu")
                self.tb_places.append(TbPlacement(gpu=self.gpu_attrs[0], tb=tid, cu=cu))

    def read_step(self, k: int, a: dict[str, str]) -> Step:
        # the hot path of the reader. Plans repeat identical steps (rings, all-pairs, every GPU
        # running the same program on shifted chunks) and steps are immutable, so a step spelled
        # exactly like an earlier one (same attributes in the same order) is that step again
        if tuple(a) == _STEP_KEYS:
            key = tuple(a.values())
            hit = self._steps.get(key)
            if hit is None:
                hit = self._steps[key] = self._new_step(k, a)
            return hit
        return self._new_step(k, a)

    def _new_step(self, k: int, a: dict[str, str]) -> Step:
        # one dictionary lookup per attribute for values already seen (plans repeat a handful
        # of numbers); anything unusual goes to _read_step
        ints = self._decimals
        get = a.get
        try:
            index, count = ints[get("s")], ints[get("cnt")]
            src_off, dst_off = ints[get("srcoff")], ints[get("dstoff")]
            dep_tb, dep_step = ints[get("depid")], ints[get("deps")]
        except KeyError:
            return self._read_step(k, a)
        stype = _STEP_TYPES.get(get("type"))  # type: ignore[arg-type]
        src_buf = _BUFFERS.get(get("srcbuf"))  # type: ignore[arg-type]
        dst_buf = _BUFFERS.get(get("dstbuf"))  # type: ignore[arg-type]
        hasdep = get("hasdep")
        if (stype is None or src_buf is None or dst_buf is None or index < 0 or count < 0 or src_off < -1
                or dst_off < -1 or dep_tb < -1 or dep_step < -1 or (hasdep != "0" and hasdep != "1")
                or len(a) != 10):
            return self._read_step(k, a)
        return Step(index, stype,
                    None if src_off == -1 else src_buf, None if src_off == -1 else src_off,
                    None if dst_off == -1 else dst_buf, None if dst_off == -1 else dst_off,
                    count, None if dep_tb == -1 else dep_tb, None if dep_step == -1 else dep_step,
                    hasdep == "1")

    def _read_step(self, k: int, a: dict[str, str]) -> Step:
        """Careful reading of one ``<step>`` with precise error messages (the slow path)."""
        tag = "step"
        if len(a) != 10:
            self.check_attrs(k, tag, a, _STEP_ATTRS)
        type_text = a.get("type")
        stype = _STEP_TYPES.get(type_text) if type_text is not None else None
        if stype is None:
            if type_text is None:
                raise self.fail(k, tag, a, "missing required attribute type")
            known = " ".join(_STEP_TYPES)
            raise self.fail(k, tag, a, f'type="{_clip(type_text)}": unknown step type '
                                       f"(expected one of {known})")
        src_off = self.integer(k, tag, a, "srcoff", -1)
        dst_off = self.integer(k, tag, a, "dstoff", -1)
        src_text = self.required(k, tag, a, "srcbuf")
        dst_text = self.required(k, tag, a, "dstbuf")
        src_buf = _BUFFERS.get(src_text)
        dst_buf = _BUFFERS.get(dst_text)
        if src_buf is None:
            raise self.fail(k, tag, a, f'srcbuf="{_clip(src_text)}": unknown buffer (expected i, o or s)')
        if dst_buf is None:
            raise self.fail(k, tag, a, f'dstbuf="{_clip(dst_text)}": unknown buffer (expected i, o or s)')
        dep_tb = self.integer(k, tag, a, "depid", -1)
        dep_step = self.integer(k, tag, a, "deps", -1)
        return Step(
            index=self.integer(k, tag, a, "s", 0),
            type=stype,
            src_buffer=None if src_off == -1 else src_buf,
            src_offset=None if src_off == -1 else src_off,
            dst_buffer=None if dst_off == -1 else dst_buf,
            dst_offset=None if dst_off == -1 else dst_off,
            count=self.integer(k, tag, a, "cnt", 0),
            depend_tb=None if dep_tb == -1 else dep_tb,
            depend_step=None if dep_step == -1 else dep_step,
            has_dependent=self.flag(k, tag, a, "hasdep"),
        )

    def read_chunk(self, k: int, a: dict[str, str]) -> None:
        tag = _NS_CHUNK
        self.check_attrs(k, tag, a, frozenset(("buf", "off", "stack")))
        buf_text = self.required(k, tag, a, "buf")
        buf = _BUFFERS.get(buf_text)
        if buf is None:
            raise self.fail(k, tag, a, f'buf="{_clip(buf_text)}": unknown buffer (expected i, o or s)')
        self.chunk_places.append(ChunkPlacement(gpu=self.gpu_attrs[0], buffer=buf,
                                                chunk=self.integer(k, tag, a, "off", 0),
                                                stack=self.integer(k, tag, a, "stack", 0)))


def _too_many_attrs(count: int, namespaces: int) -> str:
    """The reader's warning for an element with more attributes than the executors keep."""
    counting = ""
    if namespaces:
        counting = f" (counting {namespaces} namespace declaration{'s' if namespaces > 1 else ''})"
    return f"{count} attributes{counting}; the MSCCL executors read only the first {_EXECUTOR_MAX_ATTRS}"


def _literal(value: str) -> str:
    """The attribute value as written. Without entity substitution libxml2 hands a parser
    target every literal ``&`` of an attribute as ``&#38;`` (and resolves everything else), so
    mapping ``&#38;`` back to ``&`` is exact."""
    return value.replace("&#38;", "&") if "&#38;" in value else value


def _parse_decimal(text: str) -> int | None:
    """The value of a plain decimal integer, ``None`` for anything else (see module doc)."""
    try:
        number = int(text)
    except ValueError:
        return None
    # int() also takes '+5', ' 5', '0_5', '007': only the canonical spelling is accepted
    return number if str(number) == text else None


def _why_not_decimal(text: str) -> str:
    body = text.strip().lstrip("+-")
    if body[:2].lower() == "0x":
        return ("hexadecimal is not accepted (the executors would read it as hex via strtol base 0); "
                "write the decimal value")
    if len(body) > 1 and body.isdigit() and body.startswith("0"):
        return ("leading zeros are not accepted (the executors would read this as octal via strtol base 0); "
                "write the decimal value")
    return "not a decimal integer"


def _clip(text: str, limit: int = 40) -> str:
    text = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------------------------
# writing


def canonical_placement(plan: Plan) -> Placement:
    """``plan.placement`` with its entries in the order the XML stores them: threadblock
    placements in document order of their threadblocks, chunk placements grouped by GPU in
    document order (keeping each GPU's own first-come-first-served order). Entries naming a
    GPU or threadblock the plan does not have are kept at the end in their original order, so
    :func:`dump` can report them."""
    pl = plan.placement
    gpu_rank = {g.id: i for i, g in enumerate(plan.gpus)}
    tb_rank = {(g.id, tb.id): (i, j) for i, g in enumerate(plan.gpus) for j, tb in enumerate(g.threadblocks)}
    big = (len(plan.gpus), 0)
    tbs = sorted(pl.threadblocks, key=lambda p: tb_rank.get((p.gpu, p.tb), big))
    chunks = sorted(pl.chunks, key=lambda c: gpu_rank.get(c.gpu, len(plan.gpus)))  # stable sort
    return Placement(nar_granularity=pl.nar_granularity, threadblocks=tuple(tbs), chunks=tuple(chunks),
                     config=pl.config, size_bytes=pl.size_bytes)


def dump(plan: Plan) -> str:
    """The plan as MSCCL XML text (see the module doc for the format); never mutates ``plan``."""
    return "\n".join(_Writer(plan).lines()) + "\n"


def save(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write ``dump(plan)`` to ``path`` atomically, if :func:`load` can read it back: a plan
    over :data:`MAX_PLAN_BYTES` is a ``PlanError`` and nothing is written (a placement of a
    million chunks over several stacks each came to 80 MB)."""
    text = dump(plan)
    size = len(text.encode("utf-8"))
    if size > MAX_PLAN_BYTES:
        raise PlanError(f"plan {plan.name} would be {size:,} bytes of XML, more than the {MAX_PLAN_BYTES:,} "
                        "a plan file may hold; nothing written")
    write_atomic(path, text)


def _attr_value(value: str, what: str) -> str:
    if _XML_ILLEGAL_RE.search(value):
        raise PlanError(f"{what} contains a character XML 1.0 cannot represent")
    # \t \n \r are escaped so that attribute-value normalization does not turn them into spaces
    return (value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("\t", "&#9;").replace("\n", "&#10;").replace("\r", "&#13;"))


class _Writer:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        pl = plan.placement
        self.annotated = pl != Placement()
        if self.annotated and canonical_placement(plan) != pl:
            raise PlanError("placement entries are not in document order "
                            "(use nuna.plan.xml.canonical_placement)")
        self.cu: dict[tuple[int, int], int] = {}
        for tp in pl.threadblocks:
            if (tp.gpu, tp.tb) in self.cu:
                raise PlanError(f"placement names gpu {tp.gpu} tb {tp.tb} twice")
            self.cu[(tp.gpu, tp.tb)] = tp.cu
        self.chunks: dict[int, list[ChunkPlacement]] = {}
        for cp in pl.chunks:
            self.chunks.setdefault(cp.gpu, []).append(cp)
        tb_keys = {(g.id, tb.id) for g in plan.gpus for tb in g.threadblocks}
        missing = sorted(k for k in self.cu if k not in tb_keys)
        if missing:
            raise PlanError(f"placement names gpu {missing[0][0]} tb {missing[0][1]}, "
                            "which the plan does not have")
        gpu_ids = [g.id for g in plan.gpus]
        for gid in self.chunks:
            if gid not in gpu_ids:
                raise PlanError(f"placement names chunks of gpu {gid}, which the plan does not have")
            if gpu_ids.count(gid) > 1:
                raise PlanError(f"chunk placements of gpu {gid} are ambiguous: the plan has two gpus {gid}")
        tb_count = Counter((g.id, tb.id) for g in plan.gpus for tb in g.threadblocks)
        dup_tbs = sorted(k for k in self.cu if tb_count[k] > 1)
        if dup_tbs:
            raise PlanError(f"placement of gpu {dup_tbs[0][0]} tb {dup_tbs[0][1]} is ambiguous: "
                            "the plan has two such threadblocks")
        _check_domains(plan)

    def algo_attrs(self) -> str:
        p = self.plan
        if p.name == "" and "name" in p.defaulted:
            parts = []
        else:
            parts = [f'name="{_attr_value(p.name, "plan name")}"']
        parts += [f'proto="{p.protocol.value}"', f'nchannels="{p.nchannels}"',
                  f'nchunksperloop="{p.nchunksperloop}"', f'ngpus="{p.ngpus}"',
                  f'coll="{_attr_value(p.coll_xml, "coll")}"', f'inplace="{int(p.inplace)}"']
        defaults: dict[str, int] = {"outofplace": int(not p.inplace), "minBytes": 0, "maxBytes": 0}
        values: dict[str, int] = {"outofplace": int(p.outofplace), "minBytes": p.min_bytes,
                                  "maxBytes": p.max_bytes}
        for attr in _DEFAULTABLE:
            if attr in p.defaulted and values[attr] == defaults[attr]:
                continue
            parts.append(f'{attr}="{values[attr]}"')
        if self.annotated:
            pl = p.placement
            parts.append(f'xmlns:{NUNA_PREFIX}="{NUNA_NS}"')
            if pl.nar_granularity is not None:
                parts.append(f'{NUNA_PREFIX}:nar="{pl.nar_granularity}"')
            if pl.config is not None:
                parts.append(f'{NUNA_PREFIX}:config="{_attr_value(pl.config, "placement config")}"')
            if pl.size_bytes is not None:
                parts.append(f'{NUNA_PREFIX}:size="{pl.size_bytes}"')
        return " ".join(parts)

    def lines(self) -> list[str]:
        p = self.plan
        out = [f"<algo {self.algo_attrs()}>" if p.gpus else f"<algo {self.algo_attrs()}/>"]
        if not p.gpus:
            return out
        for g in p.gpus:
            head = f'  <gpu id="{g.id}" i_chunks="{g.input_chunks}" o_chunks="{g.output_chunks}" ' \
                   f's_chunks="{g.scratch_chunks}"'
            chunks = self.chunks.get(g.id, [])
            if not g.threadblocks and not chunks:
                out.append(head + "/>")
                continue
            out.append(head + ">")
            for tb in g.threadblocks:
                cu = self.cu.get((g.id, tb.id))
                attrs = (f'id="{tb.id}" send="{_opt(tb.send_peer, "send")}" '
                         f'recv="{_opt(tb.recv_peer, "recv")}" chan="{tb.channel}"')
                if cu is not None:
                    attrs += f' {NUNA_PREFIX}:cu="{cu}"'
                if not tb.steps:
                    out.append(f"    <tb {attrs}/>")
                    continue
                out.append(f"    <tb {attrs}>")
                out.extend(_step_line(st) for st in tb.steps)
                out.append("    </tb>")
            if chunks:
                out.append(f"    <{NUNA_PREFIX}:placement>")
                out.extend(f'      <{NUNA_PREFIX}:chunk buf="{c.buffer.value}" off="{c.chunk}" '
                           f'stack="{c.stack}"/>' for c in chunks)
                out.append(f"    </{NUNA_PREFIX}:placement>")
            out.append("  </gpu>")
        out.append("</algo>")
        return out


def _opt(value: int | None, what: str) -> int:
    if value is None:
        return -1
    if value == -1:
        raise PlanError(f"{what} is -1 in the IR; absent values must be None")
    return value


def _operand(buf: Buffer | None, off: int | None, absent_letter: str, what: str) -> tuple[str, int]:
    if buf is None and off is None:
        return absent_letter, -1
    if buf is None or off is None:
        raise PlanError(f"{what}: a buffer needs an offset and an offset a buffer (got {buf}, {off})")
    if off == -1:
        raise PlanError(f"{what}: offset is -1 in the IR; an absent operand is (None, None)")
    return buf.value, off


def _step_line(st: Step) -> str:
    where = f"step s={st.index}"
    sb, so = _operand(st.src_buffer, st.src_offset, "i", f"{where} source")
    db, do = _operand(st.dst_buffer, st.dst_offset, "o", f"{where} destination")
    return (f'      <step s="{st.index}" type="{st.type.value}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" '
            f'dstoff="{do}" cnt="{st.count}" depid="{_opt(st.depend_tb, "depid")}" '
            f'deps="{_opt(st.depend_step, "deps")}" hasdep="{int(st.has_dependent)}"/>')


def _in(value: object, lo: int, hi: int, what: str) -> None:
    if not isinstance(value, int) or not lo <= value <= hi:
        raise PlanError(f"cannot write {what}={value!r}: the reader accepts integers in {lo}..{hi}")


def _check_domains(plan: Plan) -> None:
    """Refuse values the reader would refuse, so that everything written reads back equal."""
    for attr in ("nchannels", "nchunksperloop", "ngpus"):
        _in(getattr(plan, attr), 1, _INT32_MAX, attr)
    _in(plan.min_bytes, 0, _INT64_MAX, "minBytes")
    _in(plan.max_bytes, 0, _INT64_MAX, "maxBytes")
    pl = plan.placement
    if pl.nar_granularity is not None:
        _in(pl.nar_granularity, 1, _INT32_MAX, "nuna:nar")
    if pl.size_bytes is not None:
        _in(pl.size_bytes, 1, _INT64_MAX, "nuna:size")
    for tp in pl.threadblocks:
        _in(tp.cu, 0, _INT32_MAX, f"gpu {tp.gpu} tb {tp.tb} nuna:cu")
    for cp in pl.chunks:
        _in(cp.chunk, 0, _INT32_MAX, f"gpu {cp.gpu} nuna:chunk off")
        _in(cp.stack, 0, _INT32_MAX, f"gpu {cp.gpu} nuna:chunk stack")
    top = _INT32_MAX
    for g in plan.gpus:
        for value, what in ((g.id, "id"), (g.input_chunks, "i_chunks"), (g.output_chunks, "o_chunks"),
                            (g.scratch_chunks, "s_chunks")):
            _in(value, 0, top, f"gpu {g.id} {what}")
        for tb in g.threadblocks:
            where = f"gpu {g.id} tb {tb.id}"
            _in(tb.id, 0, top, f"{where} id")
            _in(tb.channel, -1, top, f"{where} chan")
            for peer, what in ((tb.send_peer, "send"), (tb.recv_peer, "recv")):
                if peer is not None:
                    _in(peer, 0, top, f"{where} {what}")
            for st in tb.steps:
                if not (0 <= st.index <= top and 0 <= st.count <= top):
                    _in(st.index, 0, top, f"{where} step s")
                    _in(st.count, 0, top, f"{where} step s={st.index} cnt")
                for opt, what in ((st.src_offset, "srcoff"), (st.dst_offset, "dstoff"),
                                  (st.depend_tb, "depid"), (st.depend_step, "deps")):
                    if opt is not None and not 0 <= opt <= top:
                        _in(opt, 0, top, f"{where} step s={st.index} {what}")
