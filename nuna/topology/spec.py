"""Topology specs: the frozen description of a chip and its scale-up network, read from TOML.

A topology file (``topologies/<name>.toml``, documented in ``topologies/README.md``) has
top-level ``format = 1``, ``name`` and ``description`` strings, two tables, ``[chip]`` and
``[scaleup]``, and an optional ``[router]`` table (the on-chip routers' virtual channels, buffers
and pipeline; BookSim 2's setting when absent), optional ``[nar]`` (how a NAR store picks its
domain) and ``[protocol]`` (when a store is complete) tables. Every parameter is an inline table
``{ value = ..., source = "..." }``: the source says where the number comes from (the paper,
a public figure with its citation, or the calibration). Units are part of every key name
(``*_ns``, ``*_gbps`` = GB/s = bytes per ns, ``*_bytes``, ``*_gflops`` = GFLOP/s = flops per
ns, ``*_cycles`` = router cycles); bandwidths may be ``inf`` (no limit).

``chip.kind`` selects the schema: ``"mesh"`` (dies of routers in a global X-then-Y mesh, I/O
ports on the two short edges, HBM stacks on the two long edges) or ``"flat"`` (no NoC: one
router, one I/O port, one HBM stack, free on-chip movement; for comparing the scale-up network
with closed-form alpha-beta models). A flat chip is stored as a 1x1 mesh with zero on-chip
latency and unlimited on-chip bandwidth, so every consumer handles one shape.

Name lookup: ``load_topology("nuna-4die")`` reads ``topologies/nuna-4die.toml`` of the source
checkout when the package runs from one, else the copy shipped as package data in
``nuna/topology/data/`` (a test keeps the two identical). Anything with a ``/`` or a
``.toml`` suffix is read as a path.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, cast

from nuna.errors import TopologyError
from nuna.fsutil import checkout_folder, looks_like_path, read_input

DEFAULT_TOPOLOGY = "nuna-4die"
FORMAT_VERSION = 1
_MAX_FILE_BYTES = 1 << 20
#: the largest mesh chip, 7 times the default's 144 routers: each key has its own range, but the
#: path tables (CU -> port, CU -> stack, ...) grow with the products. Measured (topologies/README.md):
#: 4 dies of 16x16 routers set up in 2 s and 355 MB, 4 of 32x32 in 8.4 s and 932 MB, and 64x64
#: dies of 256x256 routers did not finish within a minute
MAX_MESH_ROUTERS = 1024
MAX_MESH_CUS = 8192


@dataclass(frozen=True, slots=True)
class ChipSpec:
    """One GPU socket. Geometry: ``dies_x * dies_y`` dies of ``die_cols x die_rows`` routers
    form a ``cols x rows`` mesh (x along the long edge); each router hosts ``cus_per_router``
    CUs. Latencies are per traversal of one directed edge (see :mod:`nuna.topology.build`)."""

    kind: str
    dies_x: int
    dies_y: int
    die_cols: int
    die_rows: int
    cus_per_router: int
    io_ports: int
    hbm_stacks: int
    hbm_channels_per_stack: int
    hbm_stack_capacity_bytes: int
    hbm_stack_bandwidth_gbps: float
    flit_bytes: int
    page_bytes: int
    address_hash_granularity_bytes: int
    max_outstanding_requests_per_cu: int
    cu_vector_gflops: float
    memory_access_latency_ns: float
    noc_hop_latency_ns: float
    die_crossing_latency_ns: float
    cu_attach_latency_ns: float
    io_port_latency_ns: float
    hbm_attach_latency_ns: float
    noc_link_bandwidth_gbps: float
    die_crossing_bandwidth_gbps: float
    cu_link_bandwidth_gbps: float
    io_port_bandwidth_gbps: float

    @property
    def cols(self) -> int:
        return self.dies_x * self.die_cols

    @property
    def rows(self) -> int:
        return self.dies_y * self.die_rows

    @property
    def dies(self) -> int:
        return self.dies_x * self.dies_y

    @property
    def routers(self) -> int:
        return self.cols * self.rows

    @property
    def cus(self) -> int:
        return self.routers * self.cus_per_router

    @property
    def ports_left(self) -> int:
        """I/O ports on the left short edge (x = 0); the rest are on the right edge."""
        return (self.io_ports + 1) // 2

    @property
    def stacks_top(self) -> int:
        """HBM stacks on the top long edge (y = rows-1); the rest are on the bottom edge."""
        return (self.hbm_stacks + 1) // 2

    @property
    def pages_per_stack(self) -> int:
        return self.hbm_stack_capacity_bytes // self.page_bytes

    @property
    def memory_pages(self) -> int:
        """Pages one GPU holds: what its buffers may take at most."""
        return self.hbm_stacks * self.pages_per_stack


@dataclass(frozen=True, slots=True)
class ScaleUpSpec:
    """Single-level rail-optimised Clos: switch plane ``k`` joins I/O port ``k`` of every GPU.
    ``link_*`` is one GPU-to-switch cable in each direction (SerDes, FEC and flight time);
    ``switch_latency_ns`` is the switch's port-to-port latency."""

    kind: str
    link_latency_ns: float
    link_bandwidth_gbps: float
    switch_latency_ns: float
    switch_port_bandwidth_gbps: float

    @property
    def one_way_latency_ns(self) -> float:
        """I/O port to I/O port of another GPU: up-link, switch, down-link."""
        return 2.0 * self.link_latency_ns + self.switch_latency_ns

    @property
    def round_trip_latency_ns(self) -> float:
        return 2.0 * self.one_way_latency_ns


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """The NoC's input-queued routers (the simulator's flit model, ``docs/simulator.md`` §1).
    Cycles are router cycles: ``chip.noc_hop_latency_ns / 5``, as a mesh hop is BookSim's
    4 router stages plus 1 link cycle. The defaults are BookSim 2's setting of the validation
    (``shared/reference/noc-reference-8x8.md``): 4 VCs of 8 flits, credits back 2 cycles after
    the flit left (credit_delay 1 plus a 1-cycle channel), 2 cycles of route computation and
    VC allocation for a packet that becomes head of its VC behind another one."""

    vcs: int = 4
    vc_buffer_flits: int = 8
    credit_delay_cycles: float = 2.0
    head_setup_cycles: float = 2.0


#: source note of a router parameter a file leaves out
ROUTER_DEFAULT_SOURCE = (
    "default: BookSim 2 setting of the NoC validation (shared/reference/noc-reference-8x8.md)"
)


#: How a NAR store picks its domain (``[nar] port_choice``): the domain that owns the destination
#: address (the segment partitioned into per-domain ranges, paper §4.1.2 and Fig 5), or the
#: domain nearest the issuing CU ("a subset of I/O ports physically closer to the CU", §4.1; the
#: account of Fig 13 in §6.5, where few threadblocks leave domains unused).
NAR_PORT_CHOICES = ("address", "cu")


@dataclass(frozen=True, slots=True)
class NarSpec:
    """NUNA-aware routing in hardware: ``port_choice`` is one of :data:`NAR_PORT_CHOICES`.
    Within the chosen domain a store's port is the address hash over the domain's ports."""

    port_choice: str = "address"


#: source note of the NAR port choice when a file leaves it out
NAR_DEFAULT_SOURCE = (
    "default: paper §4.1.2 and Fig 5 (address bits select the segment and its domain's ports)"
)


#: When a store is complete (``[protocol] store_completion``): as its data is written in the
#: destination stack (the direct remote-store model the paper evaluates, §5.1), or when the
#: stack's write response is back at the storing CU. A store holds its CU's request slots, and
#: its step stays open, until it is complete.
STORE_COMPLETIONS = ("landing", "response")


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    """Transaction protocol: ``store_completion`` is one of :data:`STORE_COMPLETIONS`. A write
    response is a small message that travels back along the store's route, uncontended (the
    simulator does not queue responses, see ``docs/simulator.md`` §3)."""

    store_completion: str = "landing"


#: source note of the store completion when a file leaves it out
PROTOCOL_DEFAULT_SOURCE = (
    "default: paper §5.1 (the direct remote-store model: a store completes when it is written)"
)


@dataclass(frozen=True, slots=True)
class TopologySpec:
    """A chip plus the scale-up network joining copies of it. ``sources`` maps each dotted key
    (``chip.noc_hop_latency_ns``) to its source note; it and ``path`` are provenance only and
    take no part in equality or hashing."""

    name: str
    description: str
    chip: ChipSpec
    scaleup: ScaleUpSpec
    router: RouterSpec = RouterSpec()
    nar: NarSpec = NarSpec()
    protocol: ProtocolSpec = ProtocolSpec()
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    path: str | None = field(default=None, compare=False)

    def source(self, key: str) -> str | None:
        """Source note of dotted key ``key`` (``'chip.flit_bytes'``), if the file gave one."""
        return dict(self.sources).get(key)


# --- schema -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Key:
    type: type
    low: float
    high: float
    low_open: bool = False  # True: value must be > low (bandwidths, rates)


_COUNT = _Key(int, 1, 1 << 16)
_LAT = _Key(float, 0.0, 1e9)
_BW = _Key(float, 0.0, math.inf, low_open=True)

_CHIP_COMMON: dict[str, _Key] = {
    "hbm_stack_capacity_bytes": _Key(int, 1, 1 << 50),
    "hbm_stack_bandwidth_gbps": _BW,
    "flit_bytes": _Key(int, 1, 1 << 20),
    "page_bytes": _Key(int, 1, 1 << 30),
    "address_hash_granularity_bytes": _Key(int, 1, 1 << 30),
    # a replay's event heap keeps room for 16 events per request of a CU: 1 << 30 made a 2-GPU
    # replay allocate 512 GiB; 1 << 20 is flat-switch's "effectively unlimited" window
    "max_outstanding_requests_per_cu": _Key(int, 1, 1 << 20),
    "cu_vector_gflops": _BW,
    "memory_access_latency_ns": _LAT,
}

_CHIP_MESH: dict[str, _Key] = {
    "dies_x": _Key(int, 1, 64),
    "dies_y": _Key(int, 1, 64),
    "die_cols": _Key(int, 1, 256),
    "die_rows": _Key(int, 1, 256),
    "cus_per_router": _Key(int, 1, 4096),
    "io_ports": _Key(int, 1, 1024),
    "hbm_stacks": _Key(int, 1, 1024),
    "hbm_channels_per_stack": _Key(int, 1, 1024),
    **_CHIP_COMMON,
    "noc_hop_latency_ns": _LAT,
    "die_crossing_latency_ns": _LAT,
    "cu_attach_latency_ns": _LAT,
    "io_port_latency_ns": _LAT,
    "hbm_attach_latency_ns": _LAT,
    "noc_link_bandwidth_gbps": _BW,
    "die_crossing_bandwidth_gbps": _BW,
    "cu_link_bandwidth_gbps": _BW,
    "io_port_bandwidth_gbps": _BW,
}

# as many CUs as a mesh chip may have (MAX_MESH_CUS): 1 << 20 made a 2-GPU replay allocate 1.25 GiB
_CHIP_FLAT: dict[str, _Key] = {"cus": _Key(int, 1, MAX_MESH_CUS), **_CHIP_COMMON}

_SCALEUP: dict[str, _Key] = {
    "link_latency_ns": _LAT,
    "link_bandwidth_gbps": _BW,
    "switch_latency_ns": _LAT,
    "switch_port_bandwidth_gbps": _BW,
}

_ROUTER: dict[str, _Key] = {
    "vcs": _Key(int, 1, 64),
    "vc_buffer_flits": _Key(int, 1, 1 << 16),
    "credit_delay_cycles": _Key(float, 0.0, 1e6),
    "head_setup_cycles": _Key(float, 0.0, 1e6),
}


def _key_problem(value: object, rule: _Key) -> str | None:
    """Why ``value`` breaks ``rule`` (its type, then its range), or None."""
    if rule.type is int:
        if type(value) is not int:
            return f"expected an integer, got {value!r}"
    elif type(value) not in (int, float):
        return f"expected a number, got {value!r}"
    number = cast(float, value)  # an int or a float (not a bool), checked just above
    if isinstance(value, float) and math.isnan(value):  # not on an int: 10**400 has no float
        return "nan is not allowed"
    too_low = number <= rule.low if rule.low_open else number < rule.low
    if too_low or number > rule.high:
        low = f"> {rule.low:g}" if rule.low_open else f">= {rule.low:g}"
        return f"value {value!r} out of range (must be {low} and <= {rule.high:g})"
    return None


#: the ``[router]`` table's keys, the fields :func:`router_value_problem` checks
ROUTER_KEYS: tuple[str, ...] = tuple(_ROUTER)


def router_value_problem(key: str, value: object) -> str | None:
    """Why ``value`` cannot be the router parameter ``key`` (one of :data:`ROUTER_KEYS`) under
    the ``[router]`` table's rule, or None: the replay holds router parameters given in code to
    the rule a topology file's are held to."""
    return _key_problem(value, _ROUTER[key])


_CHIP_KINDS = ("mesh", "flat")
_SCALEUP_KINDS = ("rail-clos",)


# --- loading -----------------------------------------------------------------------------


def _source_checkout_dir() -> Path | None:
    return checkout_folder("topologies")


#: Suffix of topology files; a name with it (or with a path separator) is read as a file.
TOPOLOGY_FILE_SUFFIX = ".toml"


def is_topology_path(name_or_path: str) -> bool:
    """True when ``name_or_path`` names a file rather than a shipped topology (``load_topology``'s
    rule: a path separator or a ``.toml`` suffix)."""
    return looks_like_path(name_or_path, TOPOLOGY_FILE_SUFFIX)


def available_topologies() -> tuple[str, ...]:
    """Names that :func:`load_topology` resolves without a path, sorted."""
    names: set[str] = set()
    checkout = _source_checkout_dir()
    if checkout is not None:
        names.update(p.stem for p in checkout.glob("*.toml"))
    data = resources.files("nuna.topology") / "data"
    if data.is_dir():
        names.update(Path(entry.name).stem for entry in data.iterdir() if entry.name.endswith(".toml"))
    return tuple(sorted(names))


#: The longest name of a shipped topology (a file name, less its suffix, must stay under 255 bytes).
_MAX_NAME_CHARS = 200


def _resolve(name_or_path: str) -> tuple[str, bytes]:
    """Return (display path, file bytes) for a name or a path."""
    if is_topology_path(name_or_path):
        path = Path(name_or_path)
        return str(path), read_input(path, "topology file", limit_bytes=_MAX_FILE_BYTES, error=TopologyError)
    if not name_or_path or not all(ch.isalnum() or ch in "-_." for ch in name_or_path):
        raise TopologyError(f"invalid topology name {name_or_path!r}")
    if len(name_or_path) > _MAX_NAME_CHARS:  # the file system would refuse the file's name
        raise TopologyError(f"invalid topology name {name_or_path[:20]!r}...: {len(name_or_path)} "
                            f"characters, more than {_MAX_NAME_CHARS}")
    checkout = _source_checkout_dir()
    if checkout is not None and (checkout / f"{name_or_path}.toml").is_file():
        found = checkout / f"{name_or_path}.toml"
        return str(found), found.read_bytes()
    entry = resources.files("nuna.topology") / "data" / f"{name_or_path}.toml"
    if entry.is_file():
        return f"nuna/topology/data/{name_or_path}.toml", entry.read_bytes()
    known = ", ".join(available_topologies()) or "none"
    raise TopologyError(f"unknown topology {name_or_path!r} (known: {known}; or give a path to a .toml file)")


def load_topology(name_or_path: str | Path = DEFAULT_TOPOLOGY,
                  overrides: Mapping[str, Any] | None = None) -> TopologySpec:
    """Read and validate a topology by name (``'nuna-4die'``) or path; raise ``TopologyError``
    naming the file and the key on any problem. ``overrides``: parameters to change for this
    load, ``{"router.vc_buffer_flits": 32}`` (:func:`with_overrides`)."""
    where, doc = _read(str(name_or_path))
    doc = _derived(doc, where)
    if overrides:
        doc, where = with_overrides(doc, overrides, where)
    return _Parser(where).topology(doc)


def parse_topology(text: str, where: str = "<string>") -> TopologySpec:
    """Parse topology TOML ``text``; ``where`` names it in error messages. A variant's base
    (``base = "NAME"``) is read from the shipped topologies."""
    return _Parser(where).topology(_derived(_toml(text, where), where))


def _read(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """Where a topology by name or path is, and its TOML document (size and encoding checked)."""
    where, data = _resolve(name_or_path)
    if len(data) > _MAX_FILE_BYTES:
        raise TopologyError(f"{where}: file larger than {_MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TopologyError(f"{where}: not UTF-8 text") from None
    return where, _toml(text, where)


def _toml(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise TopologyError(f"{where}: TOML syntax error: {err}") from None


def _derived(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """A document with ``base = "NAME"``: the shipped topology ``NAME`` with the document's
    entries in place of its own, table by table (a variant in a few lines, checked as a whole
    file). The base must be a shipped name, not a path: a sweep's point names a topology file
    by its bytes, and the edits of a base file would not reach it (a shipped file changes only
    with nuna's version, which is part of every point). A variant has a name of its own, and
    its base none."""
    if "base" not in doc:
        return doc
    base = doc["base"]
    if not isinstance(base, str) or is_topology_path(base):
        known = ", ".join(available_topologies())
        raise TopologyError(f"{where}: base: expected the name of a shipped topology ({known}), not "
                            f"{base!r}")
    for key in ("format", "name"):  # a file of the format, and a chip of its own
        if key not in doc:
            raise TopologyError(f"{where}: {key}: missing key (a variant of {base} gives its own)")
    _, base_doc = _read(base)
    if "base" in base_doc:  # pragma: no cover - no shipped topology has one (a test checks it)
        raise TopologyError(f"{where}: base: {base} is itself a variant")
    out = _tables_copied(base_doc)
    for key, value in doc.items():
        if key == "base":
            continue
        old = out.get(key)
        out[key] = {**old, **value} if isinstance(old, dict) and isinstance(value, dict) else value
    return out


def _tables_copied(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with each of its tables copied, to change entries without touching ``doc``."""
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in doc.items()}


#: the parameters of each table, for naming a mistyped one (the parser checks the values)
_PARAMETERS: dict[str, tuple[str, ...]] = {
    "chip": ("kind", *_CHIP_MESH, *(k for k in _CHIP_FLAT if k not in _CHIP_MESH)),
    "scaleup": ("kind", *_SCALEUP),
    "router": tuple(_ROUTER),
    # the optional tables' keys are their specs' fields (the parser reads each by that name)
    "nar": tuple(f.name for f in fields(NarSpec)),
    "protocol": tuple(f.name for f in fields(ProtocolSpec)),
}


def parse_override(item: str) -> tuple[str, Any]:
    """``SECTION.KEY=VALUE`` as ``("SECTION.KEY", value)``: ``VALUE`` read as a TOML value
    (``32``, ``2.5``, ``true``, ``"cu"``), or as the text itself where it is none (a bare word
    such as ``cu``, for a choice)."""
    key, sep, text = item.partition("=")
    key, text = key.strip(), text.strip()
    section, dot, name = key.partition(".")
    if not (sep and dot and section and name and text):
        raise TopologyError(f"invalid parameter setting {item!r}: expected SECTION.KEY=VALUE, "
                            "e.g. router.vc_buffer_flits=32")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return key, value


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Several ``SECTION.KEY=VALUE`` settings (:func:`parse_override`) as the ``overrides`` of
    :func:`load_topology`; a key set twice is refused (which one was meant is not known)."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, value = parse_override(item)
        if key in overrides:
            raise TopologyError(f"{key} is set twice ({key}={_shown(overrides[key])} and {item.strip()})")
        overrides[key] = value
    return overrides


def _shown(value: Any) -> str:
    """A setting's value as TOML writes it (``true``, not ``True``)."""
    if isinstance(value, str):
        return value
    return repr(value).lower() if isinstance(value, bool) else repr(value)


def with_overrides(doc: Mapping[str, Any], overrides: Mapping[str, Any], where: str
                   ) -> tuple[dict[str, Any], str]:
    """A topology document (parsed TOML) with ``overrides`` (``"section.key" -> value``) set,
    and its description for messages. The parser then checks each value as it checks a file's;
    a changed entry's source says it was set, and what it replaced. The topology's name gains
    the settings (``nuna-4die with router.vc_buffer_flits=32``): results name the chip they
    ran on. ``TopologyError`` for a parameter the format does not have."""
    out = _tables_copied(doc)
    said = []
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        known = _PARAMETERS.get(section)
        if known is None or name not in known:
            every = [f"{s}.{k}" for s, keys in _PARAMETERS.items() for k in keys]
            close = difflib.get_close_matches(key, every, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise TopologyError(f"{where}: cannot set {key}: no such topology parameter{hint}")
        table = out.setdefault(section, {})
        if not isinstance(table, dict):
            raise TopologyError(f"{where}: {section}: expected a table")
        old = table.get(name)
        was = (f", replacing {_shown(old['value'])} ({old.get('source')})"
               if isinstance(old, dict) and "value" in old else "")
        table[name] = {"value": value, "source": f"set for this run: {key}={_shown(value)}{was}"}
        said.append(f"{key}={_shown(value)}")
    settings = ", ".join(said)
    if isinstance(out.get("name"), str):
        out["name"] = f"{out['name']} with {settings}"
    return out, f"{where} with {settings}"


def default_topology() -> TopologySpec:
    """The system the paper evaluates (``nuna-4die``)."""
    return load_topology(DEFAULT_TOPOLOGY)


#: what a name, a description or a source must be (each is printed where one line is expected)
_ONE_LINE = "one line of printable text (no newline, tab or control character)"



def _entry_problem(item: Any) -> str:
    """What a ``{ value, source }`` entry lacks or has too many of, for the error (a bare value
    or a missing ``source`` only said what was expected: every number says where it comes from)."""
    if not isinstance(item, dict):
        return f" (got a bare {type(item).__name__}: say where the value comes from in source)"
    missing = [k for k in ("value", "source") if k not in item]
    extra = sorted(set(item) - {"value", "source"})
    parts = ([f"missing {' and '.join(missing)}"] if missing else []) + (
        [f"unknown key{'s' if len(extra) > 1 else ''} {', '.join(extra)}"] if extra else [])
    return f" ({'; '.join(parts)})" if parts else ""


class _Parser:
    """Validation state of one file: where it is and the source notes collected so far."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.sources: list[tuple[str, str]] = []

    def fail(self, key: str, problem: str) -> TopologyError:
        return TopologyError(f"{self.where}: {key}: {problem}")

    def topology(self, doc: Mapping[str, Any]) -> TopologySpec:
        allowed = {"format", "name", "description", "chip", "scaleup", "router", "nar", "protocol"}
        for key in doc:
            if key not in allowed:
                raise self.fail(key, f"unknown key (expected one of {', '.join(sorted(allowed))})")
        for key in ("format", "name", "description", "chip", "scaleup"):
            if key not in doc:
                raise self.fail(key, "missing key")
        if type(doc["format"]) is not int or doc["format"] != FORMAT_VERSION:
            raise self.fail(
                "format", f"unsupported format {doc['format']!r} (this nuna reads {FORMAT_VERSION})"
            )
        name = self.string(doc, "name")
        description = self.string(doc, "description")
        chip = self.chip(self.table(doc, "chip"))
        scaleup = self.scaleup(self.table(doc, "scaleup"))
        router = self.router(self.table(doc, "router") if "router" in doc else {})
        nar = self.nar(self.table(doc, "nar") if "nar" in doc else {})
        protocol = self.protocol(self.table(doc, "protocol") if "protocol" in doc else {})
        return TopologySpec(name, description, chip, scaleup, router, nar, protocol, tuple(self.sources),
                            self.where)

    def string(self, doc: Mapping[str, Any], key: str) -> str:
        value = doc[key]
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, "expected a non-empty string")
        if not value.isprintable():  # printed in reports, headers and figure titles
            raise self.fail(key, f"expected {_ONE_LINE}")
        return value

    def table(self, doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
        value = doc[key]
        if not isinstance(value, dict):
            raise self.fail(key, "expected a table")
        return value

    def entry(self, section: str, table: Mapping[str, Any], key: str) -> Any:
        """The ``value`` of ``{ value = ..., source = "..." }`` at ``section.key``."""
        dotted = f"{section}.{key}"
        if key not in table:
            raise self.fail(dotted, "missing key")
        item = table[key]
        if not isinstance(item, dict) or set(item) != {"value", "source"}:
            raise self.fail(dotted, 'expected { value = ..., source = "..." }' + _entry_problem(item))
        source = item["source"]
        if not isinstance(source, str) or not source.strip():
            raise self.fail(dotted, "source must be a non-empty string")
        if not source.isprintable():
            raise self.fail(dotted, f"source must be {_ONE_LINE}")
        self.sources.append((dotted, source))
        return item["value"]

    def number(self, section: str, table: Mapping[str, Any], key: str, rule: _Key) -> float | int:
        value = self.entry(section, table, key)
        problem = _key_problem(value, rule)
        if problem is not None:
            raise self.fail(f"{section}.{key}", problem)
        return value if rule.type is int else float(value)

    def numbers(
        self, section: str, table: Mapping[str, Any], schema: Mapping[str, _Key], extra: tuple[str, ...]
    ) -> dict[str, Any]:
        for key in table:
            if key not in schema and key not in extra:
                raise self.fail(f"{section}.{key}", "unknown key")
        return {key: self.number(section, table, key, rule) for key, rule in schema.items()}

    def choice(self, section: str, table: Mapping[str, Any], key: str, options: tuple[str, ...]) -> str:
        value = self.entry(section, table, key)
        if value not in options:
            raise self.fail(f"{section}.{key}", f"{value!r} is not one of {', '.join(options)}")
        return str(value)

    def chip(self, table: Mapping[str, Any]) -> ChipSpec:
        kind = self.choice("chip", table, "kind", _CHIP_KINDS)
        if kind == "flat":
            v = self.numbers("chip", table, _CHIP_FLAT, ("kind",))
            free, unlimited = 0.0, math.inf
            cus = v.pop("cus")
            v.update(
                dies_x=1,
                dies_y=1,
                die_cols=1,
                die_rows=1,
                cus_per_router=cus,
                io_ports=1,
                hbm_stacks=1,
                hbm_channels_per_stack=1,
                noc_hop_latency_ns=free,
                die_crossing_latency_ns=free,
                cu_attach_latency_ns=free,
                io_port_latency_ns=free,
                hbm_attach_latency_ns=free,
                noc_link_bandwidth_gbps=unlimited,
                die_crossing_bandwidth_gbps=unlimited,
                cu_link_bandwidth_gbps=unlimited,
                io_port_bandwidth_gbps=unlimited,
            )
        else:
            v = self.numbers("chip", table, _CHIP_MESH, ("kind",))
        chip = ChipSpec(kind=kind, **v)
        self.check_chip(chip)
        return chip

    def check_chip(self, chip: ChipSpec) -> None:
        if chip.kind == "mesh" and chip.routers > MAX_MESH_ROUTERS:
            raise self.fail("chip.dies_x", f"{chip.dies} dies of {chip.die_cols}x{chip.die_rows} routers "
                            f"make {chip.routers} routers; at most {MAX_MESH_ROUTERS} are supported")
        if chip.kind == "mesh" and chip.cus > MAX_MESH_CUS:
            raise self.fail("chip.cus_per_router", f"{chip.routers} routers of {chip.cus_per_router} CUs "
                            f"make {chip.cus} CUs; at most {MAX_MESH_CUS} are supported")
        if chip.ports_left > chip.rows or chip.io_ports - chip.ports_left > chip.rows:
            raise self.fail(
                "chip.io_ports",
                f"{chip.io_ports} ports do not fit one per router on the two "
                f"short edges of {chip.rows} routers",
            )
        if chip.stacks_top > chip.cols or chip.hbm_stacks - chip.stacks_top > chip.cols:
            raise self.fail(
                "chip.hbm_stacks",
                f"{chip.hbm_stacks} stacks do not fit one per router on the "
                f"two long edges of {chip.cols} routers",
            )
        if chip.page_bytes & (chip.page_bytes - 1):
            raise self.fail("chip.page_bytes", f"{chip.page_bytes} is not a power of two")
        if chip.page_bytes % chip.address_hash_granularity_bytes:
            raise self.fail(
                "chip.address_hash_granularity_bytes",
                f"{chip.address_hash_granularity_bytes} does not divide page_bytes {chip.page_bytes}",
            )
        if chip.page_bytes % chip.flit_bytes:
            raise self.fail(
                "chip.flit_bytes", f"{chip.flit_bytes} does not divide page_bytes {chip.page_bytes}"
            )
        if chip.hbm_stack_capacity_bytes % chip.page_bytes:
            raise self.fail(
                "chip.hbm_stack_capacity_bytes",
                f"{chip.hbm_stack_capacity_bytes} is not a whole number of {chip.page_bytes}-byte pages",
            )

    def router(self, table: Mapping[str, Any]) -> RouterSpec:
        """``[router]``: every key optional; a missing one takes BookSim's value, noted as such."""
        for key in table:
            if key not in _ROUTER:
                raise self.fail(f"router.{key}", "unknown key")
        values: dict[str, Any] = {}
        for key, rule in _ROUTER.items():
            if key in table:
                values[key] = self.number("router", table, key, rule)
            else:
                self.sources.append((f"router.{key}", ROUTER_DEFAULT_SOURCE))
        return RouterSpec(**values)

    def nar(self, table: Mapping[str, Any]) -> NarSpec:
        """``[nar]``: optional; a missing ``port_choice`` is ``"address"``, noted as a default."""
        return NarSpec(self.lone_choice("nar", table, "port_choice", NAR_PORT_CHOICES,
                                        NarSpec().port_choice, NAR_DEFAULT_SOURCE))

    def protocol(self, table: Mapping[str, Any]) -> ProtocolSpec:
        """``[protocol]``: optional; a missing ``store_completion`` is ``"landing"``, noted as a
        default."""
        return ProtocolSpec(self.lone_choice("protocol", table, "store_completion", STORE_COMPLETIONS,
                                             ProtocolSpec().store_completion, PROTOCOL_DEFAULT_SOURCE))

    def lone_choice(self, section: str, table: Mapping[str, Any], key: str, options: tuple[str, ...],
                    default: str, default_note: str) -> str:
        """The one key of an optional table: one of ``options``, or ``default`` (noted with
        ``default_note``) when the table leaves it out."""
        for other in table:
            if other != key:
                raise self.fail(f"{section}.{other}", "unknown key")
        if key not in table:
            self.sources.append((f"{section}.{key}", default_note))
            return default
        return self.choice(section, table, key, options)

    def scaleup(self, table: Mapping[str, Any]) -> ScaleUpSpec:
        kind = self.choice("scaleup", table, "kind", _SCALEUP_KINDS)
        v = self.numbers("scaleup", table, _SCALEUP, ("kind",))
        return ScaleUpSpec(kind=kind, **v)
