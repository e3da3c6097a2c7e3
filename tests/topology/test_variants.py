"""Topology variants: a file with ``base = "NAME"`` is the shipped topology NAME with the file's
entries in place of its own, checked as a whole file (topologies/README.md, "Variants")."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nuna.errors import NunaError, TopologyError
from nuna.topology.spec import available_topologies, load_topology

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"

VARIANT = '''format = 1
base = "nuna-4die"
name = "nuna-4die-buf32"

[router]
vc_buffer_flits = { value = 32, source = "ablation: four times BookSim's buffer" }
'''


def _write(tmp_path: Path, text: str, name: str = "variant.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_variant_is_its_base_with_its_entries(tmp_path: Path) -> None:
    base = load_topology("nuna-4die")
    spec = load_topology(_write(tmp_path, VARIANT))
    assert spec == replace(base, name="nuna-4die-buf32", router=replace(base.router, vc_buffer_flits=32))
    assert spec.description == base.description  # not given: the base's
    assert spec.source("router.vc_buffer_flits") == "ablation: four times BookSim's buffer"
    assert spec.source("router.vcs") == base.source("router.vcs")
    # and a setting for one run applies on top of it
    assert load_topology(_write(tmp_path, VARIANT), {"router.vcs": 8}).router == \
        replace(base.router, vc_buffer_flits=32, vcs=8)


def _doc(name: str) -> dict[str, Any]:
    with open(TOPOLOGIES / f"{name}.toml", "rb") as fh:
        return tomllib.load(fh)


@pytest.mark.parametrize("name", ["nuna-4die-ack", "nuna-4die-nar-cu", "nuna-4die-p256"])
def test_the_shipped_ablations_are_nuna_4die_variants(tmp_path: Path, name: str) -> None:
    # each written as a variant holding only the entries where it differs from nuna-4die
    base, full = _doc("nuna-4die"), _doc(name)
    lines = ["format = 1", 'base = "nuna-4die"', f"name = {full['name']!r}".replace("'", '"')]
    for section, table in full.items():
        if not isinstance(table, dict):
            continue
        own = base.get(section, {})
        changed = {k: v for k, v in table.items() if own.get(k, {}).get("value") != v["value"]}
        if changed:
            lines.append(f"[{section}]")
            lines += [f"{k} = {{ value = {v['value']!r}, source = \"differs\" }}".replace("'", '"')
                      for k, v in changed.items()]
    spec = load_topology(_write(tmp_path, "\n".join(lines) + "\n"))
    assert spec == replace(load_topology(name), description=load_topology("nuna-4die").description)


@pytest.mark.parametrize(("text", "message"), [
    (VARIANT.replace('"nuna-4die"', '"topologies/nuna-4die.toml"'), "base: expected the name of a shipped"),
    (VARIANT.replace('"nuna-4die"', "4"), "base: expected the name of a shipped"),
    (VARIANT.replace('"nuna-4die"', '"nuna-9die"'), "unknown topology 'nuna-9die'"),
    (VARIANT.replace('name = "nuna-4die-buf32"\n', ""), "name: missing key .a variant of nuna-4die"),
    (VARIANT.replace("format = 1\n", ""), "format: missing key"),
    (VARIANT.replace("value = 32", "value = 0"),
     r"variant\.toml: router\.vc_buffer_flits: value 0 out of range"),
    (VARIANT + "[chip]\ncus = { value = 8, source = \"x\" }\n", "variant.toml: chip.cus: unknown key"),
])
def test_a_bad_variant_is_refused_naming_it(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        load_topology(_write(tmp_path, text))


def test_no_shipped_topology_is_a_variant() -> None:
    # a variant's base is never itself a variant (the loader does not follow chains)
    for name in available_topologies():
        assert "base" not in _doc(name), name


def test_a_sweep_takes_a_variant_file_as_a_topology(tmp_path: Path) -> None:
    from nuna.experiments.spec import expand
    from nuna.experiments.sweep import load_sweep_spec

    grid = '[grid]\ncollectives = ["allgather"]\ngpus = [2]\nsizes = ["64KiB"]\nconfigs = ["UA"]\n'
    _write(tmp_path, VARIANT, "buf32.toml")
    spec_path = _write(tmp_path, grid + 'topologies = ["nuna-4die", "buf32.toml"]\n', "spec.toml")
    points = expand(load_sweep_spec(spec_path))
    assert [p.record()["topology"] for p in points] == ["nuna-4die", "buf32.toml"]
    assert load_topology(points[1].topology).router.vc_buffer_flits == 32
    bad = _write(tmp_path, VARIANT.replace("value = 32", "value = 0"), "bad.toml")
    with pytest.raises(NunaError, match=r"bad\.toml: router\.vc_buffer_flits"):
        load_sweep_spec(_write(tmp_path, grid + f'topologies = ["{bad.name}"]\n', "spec2.toml"))
