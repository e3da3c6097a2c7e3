"""Topology files: loading by name and path, shipped copies, and every bad-file case giving one
clear line through the CLI."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from nuna.errors import TopologyError
from nuna.topology import available_topologies, default_topology, load_topology, parse_topology
from tests.conftest import REPO, CliResult

SHIPPED = ("flat-switch", "mi210-like", "mi300x-like", "mi355x-like", "nuna-4die", "nuna-4die-ack",
           "nuna-4die-nar-cu", "nuna-4die-p256")
GOOD = (REPO / "topologies" / "nuna-4die.toml").read_text()


def test_every_shipped_topology_loads_and_has_a_source_per_value() -> None:
    assert set(SHIPPED) <= set(available_topologies())
    for name in SHIPPED:
        spec = load_topology(name)
        assert spec.name == name
        text = (REPO / "topologies" / f"{name}.toml").read_text()
        # one source note per { value = ... } entry in the file, plus the defaults it leaves out
        from_file = [key for key, note in spec.sources if not note.startswith("default:")]
        assert len(from_file) == len(re.findall(r"(?m)^\w+ = \{ value =", text))
        assert all(note.strip() for _, note in spec.sources)
        assert {key for key, _ in spec.sources} >= {f"router.{k}" for k in ("vcs", "vc_buffer_flits")}


def test_package_data_copies_equal_the_topologies_folder() -> None:
    data = REPO / "nuna" / "topology" / "data"
    repo_files = sorted(p.name for p in (REPO / "topologies").glob("*.toml"))
    assert repo_files == sorted(p.name for p in data.glob("*.toml"))
    for name in repo_files:
        assert (data / name).read_bytes() == (REPO / "topologies" / name).read_bytes(), name


def test_name_and_path_give_the_same_spec() -> None:
    by_name = load_topology("nuna-4die")
    by_path = load_topology(REPO / "topologies" / "nuna-4die.toml")
    assert by_name == by_path == default_topology()


def test_nuna_4die_is_the_papers_system() -> None:
    chip = default_topology().chip
    assert (chip.cols, chip.rows, chip.dies) == (24, 6, 4)
    assert chip.cus == 1008
    assert chip.io_ports == 12
    assert chip.hbm_stacks == 16
    assert chip.hbm_channels_per_stack == 16
    assert chip.flit_bytes == 256
    assert chip.memory_access_latency_ns == 120.0
    assert chip.max_outstanding_requests_per_cu == 700


def test_flat_switch_is_an_alpha_beta_pod() -> None:
    spec = load_topology("flat-switch")
    chip = spec.chip
    assert chip.kind == "flat"
    assert chip.routers == 1
    assert chip.io_ports == 1
    assert chip.hbm_stacks == 1
    assert spec.scaleup.one_way_latency_ns == 2000.0
    assert spec.scaleup.link_bandwidth_gbps * 1e9 == pytest.approx(50 * 2**30)
    assert chip.memory_access_latency_ns == 0.0
    assert math.isinf(chip.cu_vector_gflops)


def _mutate(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


BAD_FILES = {
    "unknown key": (
        _mutate("[chip]\n", '[chip]\nwarp_size = { value = 64, source = "x" }\n'),
        r"chip\.warp_size: unknown key",
    ),
    "missing key": (re.sub(r"(?m)^flit_bytes = .*\n", "", GOOD), r"chip\.flit_bytes: missing key"),
    "out of range": (
        _mutate("noc_hop_latency_ns = { value = 5.25", "noc_hop_latency_ns = { value = -1.0"),
        r"chip\.noc_hop_latency_ns: value -1\.0 out of range",
    ),
    "zero bandwidth": (
        _mutate("io_port_bandwidth_gbps = { value = 100.0", "io_port_bandwidth_gbps = { value = 0.0"),
        r"chip\.io_port_bandwidth_gbps: value 0\.0 out of range",
    ),
    "wrong type": (
        _mutate("die_cols = { value = 6,", 'die_cols = { value = "six",'),
        r"chip\.die_cols: expected an integer",
    ),
    "float count": (
        _mutate("die_cols = { value = 6,", "die_cols = { value = 6.0,"),
        r"chip\.die_cols: expected an integer",
    ),
    "no source": (
        _mutate("die_rows = { value = 6, source = ", "die_rows = { value = 6, note = "),
        r"chip\.die_rows: expected \{ value = \.\.\., source = .* \(missing source; unknown key note\)$",
    ),
    "bare value": (
        re.sub(r"(?m)^die_rows = .*$", "die_rows = 6", GOOD),
        r"chip\.die_rows: expected \{ value.* \(got a bare int: say where the value comes from in source\)$",
    ),
    "syntax": (GOOD.replace("[scaleup]", "[scaleup", 1), r"TOML syntax error"),
    "unknown section": (GOOD + "\n[extra]\n", r"extra: unknown key"),
    "bad kind": (
        _mutate('kind = { value = "mesh"', 'kind = { value = "torus"'),
        r"chip\.kind: 'torus' is not one of",
    ),
    "ports do not fit": (
        _mutate("io_ports = { value = 12,", "io_ports = { value = 14,"),
        r"chip\.io_ports: 14 ports",
    ),
    "format": (_mutate("format = 1", "format = 2"), r"format: unsupported format 2"),
    "router unknown key": (GOOD.replace("[router]", "[router]\nlanes = { value = 2, source = \"x\" }", 1),
                           r"router\.lanes: unknown key"),
    "router zero vcs": (_mutate("vcs = { value = 4,", "vcs = { value = 0,"),
                        r"router\.vcs: value 0 out of range"),
    "router float vcs": (_mutate("vcs = { value = 4,", "vcs = { value = 4.5,"),
                         r"router\.vcs: expected an integer"),
    "nar unknown key": (GOOD.replace("[nar]", "[nar]\nmode = { value = 2, source = \"x\" }", 1),
                        r"nar\.mode: unknown key"),
    "nar bad choice": (_mutate('port_choice = { value = "address"', 'port_choice = { value = "stack"'),
                       r"nar\.port_choice: 'stack' is not one of address, cu"),
    # a name, description or source is printed in headers, reports and figure titles
    "name with a newline": (_mutate('name = "nuna-4die"', 'name = "a\\nnuna: error: forged"'),
                            r"name: expected one line of printable text"),
    "description with an escape": (_mutate('description = "', 'description = "\\u001b[31m'),
                                   r"description: expected one line of printable text"),
    "source with a newline": (_mutate('value = 6, source = "', 'value = 6, source = "x\\n'),
                              r"chip\.die_cols: source must be one line of printable text"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_gives_one_line_error_naming_file_and_key(
    case: str, tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    text, pattern = BAD_FILES[case]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(TopologyError, match=pattern):
        load_topology(path)
    res = run_cli("topology", "show", str(path))
    assert res.code == 1
    lines = res.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("nuna: error: ")
    assert str(path) in lines[0]
    assert re.search(pattern, lines[0])
    assert "Traceback" not in res.err
    assert res.out == ""


def test_missing_file_and_unknown_name(tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    res = run_cli("topology", "show", str(tmp_path / "nope.toml"))
    assert res.code == 1
    assert "no such topology file" in res.err
    assert len(res.err.strip().splitlines()) == 1
    res = run_cli("topology", "show", "no-such-chip")
    assert res.code == 1
    assert "unknown topology 'no-such-chip'" in res.err
    assert "nuna-4die" in res.err


def test_not_utf8_and_folder(tmp_path: Path) -> None:
    bad = tmp_path / "latin.toml"
    bad.write_bytes(b"name = '\xff'\n")
    with pytest.raises(TopologyError, match="not UTF-8"):
        load_topology(bad)
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    with pytest.raises(TopologyError, match="is a folder"):
        load_topology(folder)


def test_a_named_pipe_is_refused_not_read(tmp_path: Path) -> None:
    import threading

    fifo = tmp_path / "chip.toml"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    raised: list[BaseException] = []

    def load() -> None:
        try:
            load_topology(fifo)
        except BaseException as err:
            raised.append(err)

    # in a thread, so that a regression (a blocked read) fails the test instead of hanging it
    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "load_topology blocked on a named pipe"
    assert len(raised) == 1
    assert isinstance(raised[0], TopologyError)
    assert "not a regular file" in str(raised[0])


@pytest.mark.parametrize(("old", "new", "match"), [
    # 4 dies of 6 columns: 42 rows make 1,008 routers, 43 make 1,032 (at most 1,024)
    ('die_rows = { value = 6,', 'die_rows = { value = 43,',
     r"chip\.dies_x: 4 dies of 6x43 routers make 1032"),
    ('cus_per_router = { value = 7,', 'cus_per_router = { value = 57,',
     r"chip\.cus_per_router: 144 routers of 57 CUs make 8208 CUs; at most 8192"),
])
def test_a_chip_too_large_to_set_up_is_refused(old: str, new: str, match: str) -> None:
    text = GOOD.replace(old, new, 1)
    assert text != GOOD
    with pytest.raises(TopologyError, match=match):
        parse_topology(text, "big.toml")


def test_the_largest_chip_loads() -> None:
    text = GOOD.replace('cus_per_router = { value = 7,', 'cus_per_router = { value = 56,', 1)
    assert parse_topology(text, "big.toml").chip.cus == 8064


def test_flat_kind_rejects_mesh_keys() -> None:
    text = (REPO / "topologies" / "flat-switch.toml").read_text()
    text = text.replace("[chip]\n", '[chip]\ndie_cols = { value = 2, source = "x" }\n', 1)
    with pytest.raises(TopologyError, match=r"chip\.die_cols: unknown key"):
        parse_topology(text, "flat.toml")


def test_router_table_is_optional_and_a_missing_key_is_noted_as_booksims() -> None:
    spec = load_topology("nuna-4die")
    assert (spec.router.vcs, spec.router.vc_buffer_flits) == (4, 8)
    assert (spec.source("router.vcs") or "").startswith("assumed: BookSim 2")
    text = re.sub(r"(?m)^vc_buffer_flits = .*\n", "", GOOD)
    text = text.replace("vcs = { value = 4,", "vcs = { value = 2,")
    partial = parse_topology(text)
    assert (partial.router.vcs, partial.router.vc_buffer_flits) == (2, 8)
    assert (partial.source("router.vc_buffer_flits") or "").startswith("default: BookSim 2")
    without = parse_topology(GOOD[: GOOD.index("[router]")])
    assert without.router == spec.router
    assert without == spec  # same values, other sources


def test_sources_do_not_affect_equality() -> None:
    a = parse_topology(GOOD, "a.toml")
    b = parse_topology(GOOD.replace("paper §5.1: 256 B cache-line-sized flits", "changed"), "b.toml")
    assert a == b
    assert hash(a) == hash(b)
    assert a.source("chip.flit_bytes") != b.source("chip.flit_bytes")


def test_installed_package_finds_names_in_package_data(monkeypatch: pytest.MonkeyPatch) -> None:
    import nuna.topology.spec as spec_module

    monkeypatch.setattr(spec_module, "_source_checkout_dir", lambda: None)
    assert set(SHIPPED) <= set(available_topologies())
    spec = load_topology("mi300x-like")
    assert spec.path == "nuna/topology/data/mi300x-like.toml"
    assert spec == load_topology(REPO / "topologies" / "mi300x-like.toml")


def test_nar_port_choice_is_optional_and_a_missing_one_is_noted_as_by_address() -> None:
    spec = load_topology("nuna-4die")
    assert spec.nar.port_choice == "address"
    assert (spec.source("nar.port_choice") or "").startswith("paper §4.1.2")
    without = parse_topology(GOOD[: GOOD.index("[nar]")])
    assert without == spec
    assert (without.source("nar.port_choice") or "").startswith("default: paper §4.1.2")
    assert load_topology("nuna-4die-nar-cu").nar.port_choice == "cu"


def test_the_nar_cu_variant_is_nuna_4die_but_for_its_name_and_nar_port_choice() -> None:
    base, variant = load_topology("nuna-4die"), load_topology("nuna-4die-nar-cu")
    assert variant != base
    assert (variant.chip, variant.scaleup, variant.router) == (base.chip, base.scaleup, base.router)
    # every other source note is nuna-4die's too, so an edit of one file shows up here
    assert dict(variant.sources) | {"nar.port_choice": ""} == dict(base.sources) | {"nar.port_choice": ""}


def test_store_completion_is_optional_and_a_missing_one_is_noted_as_at_landing() -> None:
    spec = load_topology("nuna-4die")
    assert spec.protocol.store_completion == "landing"
    assert (spec.source("protocol.store_completion") or "").startswith("assumed:")
    without = parse_topology(GOOD[: GOOD.index("[protocol]")])
    assert without == spec
    assert (without.source("protocol.store_completion") or "").startswith("default: paper §5.1")
    with pytest.raises(TopologyError, match=r"protocol\.store_completion"):
        parse_topology(GOOD.replace('value = "landing"', 'value = "posted"'))
    with pytest.raises(TopologyError, match=r"protocol\.ack: unknown key"):
        parse_topology(GOOD + 'ack = { value = 1, source = "x" }\n')


def test_the_ack_variant_is_nuna_4die_but_for_its_name_and_store_completion() -> None:
    base, variant = load_topology("nuna-4die"), load_topology("nuna-4die-ack")
    assert variant.protocol.store_completion == "response"
    assert (variant.chip, variant.scaleup, variant.router, variant.nar) == (base.chip, base.scaleup,
                                                                             base.router, base.nar)
    key = "protocol.store_completion"
    assert dict(variant.sources) | {key: ""} == dict(base.sources) | {key: ""}


def test_the_page_variant_is_nuna_4die_but_for_its_name_and_page_size() -> None:
    base, variant = load_topology("nuna-4die"), load_topology("nuna-4die-p256")
    assert variant.chip.page_bytes == 256
    assert base.chip.page_bytes == 4096
    assert dataclasses.replace(variant.chip, page_bytes=base.chip.page_bytes) == base.chip
    assert (variant.scaleup, variant.router, variant.nar) == (base.scaleup, base.router, base.nar)
    assert dict(variant.sources) | {"chip.page_bytes": ""} == dict(base.sources) | {"chip.page_bytes": ""}
