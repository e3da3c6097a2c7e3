"""Topology parameters set for one run (``load_topology(..., overrides)``, ``--set
SECTION.KEY=VALUE``): the same spec as a file with the value changed, checked as a file's,
with the setting in the chip's name and the parameter's source."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import TopologyError
from nuna.plan.generate import generate
from nuna.plan.xml import save
from nuna.topology.spec import load_topology, parse_override


@pytest.mark.parametrize(("item", "want"), [
    ("router.vcs=8", ("router.vcs", 8)),
    ("chip.io_port_bandwidth_gbps = 2.5e2", ("chip.io_port_bandwidth_gbps", 250.0)),
    ("nar.port_choice=cu", ("nar.port_choice", "cu")),
    ('protocol.store_completion="response"', ("protocol.store_completion", "response")),
    ("router.credit_delay_cycles=true", ("router.credit_delay_cycles", True)),
])
def test_a_setting_reads_its_value_as_toml_or_as_a_word(item: str, want: tuple[str, Any]) -> None:
    assert parse_override(item) == want


@pytest.mark.parametrize("item", ["vcs=8", "router.vcs", "router.vcs=", ".vcs=3", "router.=3", "=3"])
def test_a_malformed_setting_is_one_error(item: str) -> None:
    with pytest.raises(TopologyError, match=r"expected SECTION\.KEY=VALUE"):
        parse_override(item)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(1, 64), st.floats(1.0, 1e4, allow_nan=False))
def test_settings_give_the_spec_of_a_file_with_those_values(buffer: int, vcs: int, port_gbps: float) -> None:
    base = load_topology("nuna-4die")
    spec = load_topology("nuna-4die", {"router.vc_buffer_flits": buffer, "router.vcs": vcs,
                                       "chip.io_port_bandwidth_gbps": port_gbps})
    want = replace(base, name=spec.name, router=replace(base.router, vc_buffer_flits=buffer, vcs=vcs),
                   chip=replace(base.chip, io_port_bandwidth_gbps=port_gbps))
    assert spec == want
    assert spec.name == (f"nuna-4die with router.vc_buffer_flits={buffer}, router.vcs={vcs}, "
                         f"chip.io_port_bandwidth_gbps={port_gbps!r}")


def test_a_set_parameter_says_so_in_its_source_and_no_setting_is_the_file() -> None:
    base = load_topology("nuna-4die")
    assert load_topology("nuna-4die", {}) == base
    spec = load_topology("nuna-4die", {"router.vc_buffer_flits": 32})
    source = spec.source("router.vc_buffer_flits")
    assert source is not None
    assert source.startswith("set for this run: router.vc_buffer_flits=32, replacing 8 (")
    assert source.endswith(f"{base.source('router.vc_buffer_flits')})")
    assert spec.source("router.vcs") == base.source("router.vcs")


def test_an_optional_table_the_file_lacks_takes_the_setting() -> None:
    base = load_topology("mi300x-like")  # no [nar] table: the default port choice
    spec = load_topology("mi300x-like", {"nar.port_choice": "cu"})
    assert spec.nar.port_choice == "cu" != base.nar.port_choice
    assert spec.source("nar.port_choice") == "set for this run: nar.port_choice=cu"


@pytest.mark.parametrize(("setting", "message"), [
    ({"router.vcx": 3}, r"cannot set router.vcx: no such topology parameter \(did you mean router.vcs\?\)"),
    ({"chips.cus_per_router": 3}, r"no such topology parameter \(did you mean chip.cus_per_router\?\)"),
    ({"router.vcs": 0}, r"with router.vcs=0: router.vcs: value 0 out of range"),
    ({"router.vcs": 2.5}, r"router.vcs: "),
    ({"chip.kind": "torus"}, r"chip.kind: 'torus' is not one of mesh, flat"),
    ({"nar.port_choice": "dice"}, r"nar.port_choice: 'dice' is not one of"),
    ({"chip.cus": 8}, r"chip.cus: unknown key"),  # a flat chip's key on a mesh chip
])
def test_a_bad_setting_is_refused_naming_it(setting: dict[str, Any], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        load_topology("nuna-4die", setting)


def test_simulate_with_set_is_the_changed_chip(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    from nuna.sim import simulate

    plan_path = tmp_path / "ag4.xml"
    save(generate("allgather", 4), plan_path)
    out = tmp_path / "r.json"
    res = run_cli("simulate", plan_path, "--size", "64KiB", "--set", "chip.io_port_bandwidth_gbps=25",
                  "--set", "router.vc_buffer_flits=2", "--json", out)
    assert res.code == 0, res.err
    got = json.loads(out.read_text())
    spec = load_topology("nuna-4die", {"chip.io_port_bandwidth_gbps": 25, "router.vc_buffer_flits": 2})
    assert got["topology"] == spec.name
    want = simulate(generate("allgather", 4), spec, 64 << 10)
    assert got["time_ns"] == pytest.approx(want.time_ns, rel=1e-12)
    plain = simulate(generate("allgather", 4), load_topology("nuna-4die"), 64 << 10)
    assert got["time_ns"] > plain.time_ns  # a quarter of the port bandwidth: slower

    bad = run_cli("simulate", plan_path, "--size", "64KiB", "--set", "router.vcx=3")
    assert bad.code == 1
    assert bad.err.startswith("nuna: error: ")
    assert "did you mean router.vcs" in bad.err
    assert len(bad.err.strip().splitlines()) == 1
    twice = run_cli("topology", "show", "--set", "router.vcs=2", "--set", "router.vcs=3")
    assert twice.code != 0
    assert "router.vcs is set twice (router.vcs=2 and router.vcs=3)" in twice.err
    assert "router.vcs=2" in run_cli("topology", "show", "--set", "router.vcs=2").out
    lone = run_cli("noc", "--rate", "0.1", "--set", "router.vcs=2")
    assert lone.code != 0
    assert "--topology" in lone.err
