"""Sweep specs: validation messages, expansion (count, order, uniqueness) and point identity."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import InputError, NunaError, UsageError
from nuna.experiments.spec import (
    AUTO,
    CONFIGS,
    DEFAULT_POINT_FUNCTION,
    HEURISTIC,
    MAX_NAME_CHARS,
    Point,
    SweepSpec,
    config_uses_nar,
    expand,
    fast_forward_spec,
    is_point_id,
    line_setups_spec,
    load_sweep_spec,
    packet_cap_spec,
    packet_credit_spec,
    parse_sweep_spec,
    point_id,
    restrict_grid,
    windowed_spec,
)

REPO = Path(__file__).resolve().parents[2]

BASE: dict[str, Any] = {
    "grid": {"collectives": ["allgather"], "gpus": [8], "sizes": ["1MB"], "configs": ["UA"]},
}


def _with(section: str, key: str, value: Any) -> dict[str, Any]:
    data = {name: dict(table) for name, table in BASE.items()}
    data.setdefault(section, {})[key] = value
    return data


# --- loading and defaults ---------------------------------------------------------------------


def test_minimal_spec_gets_documented_defaults(write_spec: Callable[..., Path]) -> None:
    path = write_spec('[grid]\ncollectives = ["allgather"]\ngpus = [8]\nsizes = ["1MB"]\nconfigs = ["UA"]\n',
                      name="mini.toml")
    spec = load_sweep_spec(path)
    assert spec.name == "mini"
    assert spec.point_function == DEFAULT_POINT_FUNCTION
    assert spec.sizes_bytes == (1_000_000,)
    assert (spec.topologies, spec.tbs_per_peer, spec.gemm_bytes) == (("nuna-4die",), (1,), (0,))
    assert spec.nar_granularities == (HEURISTIC,)
    assert (spec.algo, spec.packet_bytes, spec.seed) == ("direct", (256,), 0)


def test_values_are_normalised() -> None:
    data = _with("grid", "collectives", ["reduce_scatter", "AllGather"])
    data["grid"] |= {"configs": ["nap+nar", "ua"], "sizes": ["1MiB", 4096, "100kB"],
                     "gemm_sizes": ["none", "4MB"], "gpus": 8, "nar_granularities": [AUTO, 4]}
    data["fixed"] = {"packet_bytes": "auto", "seed": 7, "algo": "ring"}
    spec = parse_sweep_spec(data)
    assert spec.collectives == ("reducescatter", "allgather")
    assert spec.configs == ("NAP+NAR", "UA")
    assert spec.sizes_bytes == (2**20, 4096, 100_000)
    assert spec.gemm_bytes == (0, 4_000_000)
    assert spec.gpus == (8,)
    assert spec.nar_granularities == (AUTO, 4)
    assert (spec.packet_bytes, spec.seed, spec.algo) == ((AUTO,), 7, "ring")
    # TOML writes 1e6 as a float: a whole number of bytes is a size all the same, 1.5 is not
    data["grid"]["sizes"] = [1e6, "2e3", 4096]
    assert parse_sweep_spec(data).sizes_bytes == (10**6, 2000, 4096)
    data["grid"]["sizes"] = [1.5]
    with pytest.raises(NunaError, match=r"sizes\[0\]: expected an integer"):
        parse_sweep_spec(data)
    # a float is held to the cap a string is (1e100 got past it to the memory check)
    data["grid"]["sizes"] = [1e100]
    with pytest.raises(NunaError, match=r"sizes\[0\]: size \d+ is larger than 1152921504606846976 bytes"):
        parse_sweep_spec(data)
    data["grid"]["sizes"] = [4096]
    data["grid"]["gemm_sizes"] = [0.0, 1e6]  # GEMM sizes take whole floats too
    assert parse_sweep_spec(data).gemm_bytes == (0, 10**6)
    del data["grid"]["gemm_sizes"]
    data["grid"]["sizes"] = [4096]
    # a packet size with a unit, as max_packet_bytes and the sizes take: the same point as 1024
    for value in ("1KiB", 1024):
        data["fixed"] = {"packet_bytes": value}
        assert parse_sweep_spec(data).packet_bytes == (1024,)


def test_topology_paths_resolve_against_the_spec_folder(write_spec: Callable[..., Path],
                                                        tmp_path: Path) -> None:
    (tmp_path / "chips").mkdir()
    (tmp_path / "chips" / "mine.toml").write_bytes((REPO / "topologies" / "nuna-4die.toml").read_bytes())
    path = write_spec('[grid]\ncollectives = ["allgather"]\ngpus = [8]\nsizes = ["1MB"]\nconfigs = ["UA"]\n'
                      'topologies = ["nuna-4die", "chips/mine.toml"]\n')
    spec = load_sweep_spec(path)
    assert spec.topologies == ("nuna-4die", str((tmp_path / "chips" / "mine.toml").resolve()))


@pytest.mark.parametrize("also", [False, True])
def test_two_topology_files_of_one_file_name_are_refused(write_spec: Callable[..., Path], tmp_path: Path,
                                                         also: bool) -> None:
    # results record a topology file by its file name (spec.portable_topology), which must
    # then name one file
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "chip.toml").write_bytes((REPO / "topologies" / "nuna-4die.toml").read_bytes())
    grid = '[grid]\ncollectives = ["allgather"]\ngpus = [8]\nsizes = ["1MB"]\nconfigs = ["UA"]\n'
    if also:
        text = grid + 'topologies = ["x/chip.toml"]\n[[grid.also]]\ntopologies = ["y/chip.toml"]\n'
    else:
        text = grid + 'topologies = ["x/chip.toml", "y/chip.toml"]\n'
    with pytest.raises(InputError, match=r"spec\.toml: \[grid\] topologies: .*/x/chip\.toml and "
                                         r".*/y/chip\.toml have the same file name"):
        load_sweep_spec(write_spec(text))
    # one file named by two grids (two spellings of its path) is one topology
    spec = load_sweep_spec(write_spec(grid + 'topologies = ["x/chip.toml"]\n[[grid.also]]\n'
                                      'topologies = ["x/../x/chip.toml"]\n'))
    assert len(expand(spec)) == 1


# --- validation: one clear InputError naming the file and the key ------------------------------

BAD_VALUES = [
    ("grid", "collectives", ["allgatherr"], "collectives[0]"),
    ("grid", "collectives", [], "collectives"),
    ("grid", "gpus", [1], "gpus[0]"),
    ("grid", "gpus", [8.0], "gpus[0]"),
    ("grid", "gpus", [True], "gpus[0]"),
    ("grid", "gpus", [8, 8], "gpus[1]"),
    ("grid", "sizes", ["10QB"], "sizes[0]"),
    ("grid", "sizes", ["1MB", 1_000_000], "sizes[1]"),
    ("grid", "sizes", [0], "sizes[0]"),
    ("grid", "sizes", ["-5kB"], "sizes[0]"),
    ("grid", "configs", ["NAP+NAP"], "configs[0]"),
    ("grid", "nar_granularities", [0], "nar_granularities[0]"),
    ("grid", "nar_granularities", ["many"], "nar_granularities[0]"),
    ("grid", "tbs_per_peer", [0], "tbs_per_peer[0]"),
    ("grid", "topologies", [""], "topologies[0]"),
    ("grid", "gemm_sizes", [-1], "gemm_sizes[0]"),
    ("fixed", "algo", "tree", "[fixed] algo"),
    ("fixed", "packet_bytes", 0, "[fixed] packet_bytes"),
    ("fixed", "packet_bytes", "big", "[fixed] packet_bytes"),
    ("fixed", "seed", -1, "[fixed] seed"),
    ("sweep", "point_function", "nuna.experiments.points.simulate_point", "[sweep] point_function"),
    ("sweep", "point_function", "not a module:f", "[sweep] point_function"),
    ("sweep", "name", "", "[sweep] name"),
]


@pytest.mark.parametrize(("section", "key", "value", "where"), BAD_VALUES)
def test_bad_values_name_file_and_key(section: str, key: str, value: Any, where: str) -> None:
    with pytest.raises(InputError) as info:
        parse_sweep_spec(_with(section, key, value), source="bad.toml")
    message = str(info.value)
    assert message.startswith("bad.toml: ")
    assert where in message
    assert "\n" not in message


def test_unknown_key_is_named_with_a_suggestion() -> None:
    with pytest.raises(InputError, match=r"bad.toml: \[grid\]: unknown key 'size'.*did you mean 'sizes'"):
        parse_sweep_spec(_with("grid", "size", ["1MB"]), source="bad.toml")


def test_unknown_section_is_named() -> None:
    data = dict(BASE) | {"grids": {}}
    with pytest.raises(InputError, match=r"bad\.toml: unknown section or top-level key 'grids'"):
        parse_sweep_spec(data, source="bad.toml")


@pytest.mark.parametrize("key", ["collectives", "gpus", "sizes", "configs"])
def test_missing_required_key_is_named(key: str) -> None:
    data = {"grid": {k: v for k, v in BASE["grid"].items() if k != key}}
    with pytest.raises(InputError, match=rf"bad.toml: \[grid\]: missing required key '{key}'"):
        parse_sweep_spec(data, source="bad.toml")


def test_missing_grid_and_non_table_section() -> None:
    with pytest.raises(InputError, match="missing section"):
        parse_sweep_spec({"sweep": {}}, source="bad.toml")
    with pytest.raises(InputError, match=r"\[fixed\] must be a table"):
        parse_sweep_spec(dict(BASE) | {"fixed": 3}, source="bad.toml")


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such sweep spec file"):
        load_sweep_spec(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[grid\ncollectives = ", encoding="utf-8")
    with pytest.raises(InputError, match=r"broken.toml: invalid TOML"):
        load_sweep_spec(broken)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match=r"binary\.toml"):
        load_sweep_spec(binary)


@settings(max_examples=60, deadline=None)
@given(key=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12),
       section=st.sampled_from(["sweep", "grid", "fixed"]))
def test_any_unknown_key_is_rejected_by_name(key: str, section: str) -> None:
    # the keys the section accepts (hypothesis once drew [grid] also, the [[grid.also]] tables)
    from nuna.experiments.spec import _SECTIONS

    required, optional = _SECTIONS[section]
    if key in required | optional:
        return
    with pytest.raises(InputError) as info:
        parse_sweep_spec(_with(section, key, 1), source="x.toml")
    assert f"[{section}]: unknown key {key!r}" in str(info.value)


# --- expansion ---------------------------------------------------------------------------------

grids = st.fixed_dictionaries({
    "collectives": st.lists(st.sampled_from(["allgather", "allreduce", "reducescatter", "alltoall"]),
                            min_size=1, max_size=4, unique=True),
    "gpus": st.lists(st.integers(2, 64), min_size=1, max_size=3, unique=True),
    "sizes": st.lists(st.integers(1, 10**9), min_size=1, max_size=3, unique=True),
    "configs": st.lists(st.sampled_from(CONFIGS), min_size=1, max_size=8, unique=True),
    "nar_granularities": st.lists(st.sampled_from([AUTO, HEURISTIC, 1, 2, 3, 4, 6, 12]), min_size=1,
                                  max_size=4, unique=True),
    "tbs_per_peer": st.lists(st.integers(1, 144), min_size=1, max_size=2, unique=True),
    "topologies": st.lists(st.sampled_from(["nuna-4die", "mi300x-like", "flat-switch"]),
                           min_size=1, max_size=2, unique=True),
    "gemm_sizes": st.lists(st.integers(0, 10**8), min_size=1, max_size=2, unique=True),
})


@settings(max_examples=80, deadline=None)
@given(grid=grids)
def test_expand_count_order_and_uniqueness(grid: dict[str, list[Any]]) -> None:
    spec = parse_sweep_spec({"grid": grid})
    points = expand(spec)
    # Independent count: a configuration without NAR contributes one point per other combination.
    per_config = sum(len(grid["nar_granularities"]) if c.endswith("+NAR") else 1 for c in grid["configs"])
    others = math.prod(len(grid[k]) for k in ("collectives", "gpus", "sizes", "tbs_per_peer", "topologies",
                                               "gemm_sizes"))
    assert len(points) == per_config * others
    assert len(set(points)) == len(points)
    assert expand(spec) == points
    ids = [point_id(p.as_dict(), spec.point_function) for p in points]
    assert len(set(ids)) == len(ids)
    for p in points:
        assert p.collective in grid["collectives"]
        assert p.gpus in grid["gpus"]
        assert p.size_bytes in grid["sizes"]
        assert p.config in grid["configs"]
        assert (p.nar_granularity is None) == (not config_uses_nar(p.config))
        assert p.nar_granularity is None or p.nar_granularity in grid["nar_granularities"]
    # Topologies are the outermost dimension, sizes nest outside configs: file order is kept.
    topo_rank = [grid["topologies"].index(p.topology) for p in points]
    assert topo_rank == sorted(topo_rank)
    first = [p for p in points if p.topology == points[0].topology and p.collective == points[0].collective
             and p.gpus == points[0].gpus]
    size_rank = [grid["sizes"].index(p.size_bytes) for p in first]
    assert size_rank == sorted(size_rank)


def test_expand_keeps_file_order_within_a_dimension() -> None:
    spec = parse_sweep_spec(_with("grid", "sizes", ["1GB", "100kB", "10MB"]))
    assert [p.size_bytes for p in expand(spec)] == [10**9, 10**5, 10**7]


# --- point identity ------------------------------------------------------------------------------

POINT = Point(collective="allgather", gpus=8, size_bytes=10**6, config="NAP+NAR", nar_granularity=4,
              tbs_per_peer=1, topology="nuna-4die", gemm_bytes=0, algo="direct", packet_bytes=256, seed=0)

changes = st.sampled_from([
    ("collective", "allreduce"), ("gpus", 16), ("size_bytes", 10**6 + 1), ("config", "NAP*+NAR"),
    ("nar_granularity", AUTO), ("nar_granularity", 12), ("tbs_per_peer", 2), ("topology", "mi300x-like"),
    ("gemm_bytes", 1), ("algo", "ring"), ("packet_bytes", AUTO), ("seed", 1), ("windowed", True),
    ("windowed", False), ("max_packet_bytes", 4096),
])


@settings(max_examples=40, deadline=None)
@given(change=changes)
def test_point_id_depends_on_every_input(change: tuple[str, Any]) -> None:
    field_name, value = change
    other = dataclasses.replace(POINT, **{field_name: value})
    assert point_id(other.as_dict(), "m:f") != point_id(POINT.as_dict(), "m:f")


def test_point_ids_have_the_form_the_store_accepts_and_paths_do_not() -> None:
    ids = {point_id(POINT.as_dict(), "m:f", version) for version in ("0.1.0", "0.9.0", "1.0")}
    assert all(is_point_id(i) for i in ids)
    for bad in ("../outside", "ABCDEF0123456789", "0123456789abcde", 1234567890123456, None):
        assert not is_point_id(bad)


def test_point_id_depends_on_function_and_version_not_key_order() -> None:
    base = point_id(POINT.as_dict(), "m:f", "0.1.0")
    assert point_id(POINT.as_dict(), "m:g", "0.1.0") != base
    assert point_id(POINT.as_dict(), "m:f", "0.1.1") != base
    reordered = dict(reversed(list(POINT.as_dict().items())))
    assert point_id(reordered, "m:f", "0.1.0") == base
    assert len(base) == 16
    assert int(base, 16) >= 0


def test_as_dict_names_every_field_and_is_json_data() -> None:
    import json

    data = POINT.as_dict()
    # "windowed" only when set, so that the ids of points stored before it existed still hold
    assert "windowed" not in data
    assert dataclasses.replace(POINT, windowed=False).as_dict()["windowed"] is False
    assert "max_packet_bytes" not in data
    assert "fast_forward" not in data
    assert "line_setups" not in data
    assert "reduce_fusion" not in data
    assert "executor_slices" not in data
    assert "protocol_model" not in data
    assert "flow_control" not in data
    assert "packet_credit_lines" not in data
    data = dataclasses.replace(POINT, windowed=True, max_packet_bytes=4096, fast_forward=True,
                               line_setups="series", reduce_fusion=False, executor_slices=True,
                               protocol_model="simple", flow_control=False,
                               packet_credit_lines=1).as_dict()
    assert set(data) == {f.name for f in dataclasses.fields(Point)}
    assert json.loads(json.dumps(data)) == data


def test_windowed_is_a_fixed_setting_of_its_own(write_spec: Callable[..., Path]) -> None:
    plain = parse_sweep_spec(BASE)
    spec = parse_sweep_spec(_with("fixed", "windowed", True))
    off = parse_sweep_spec(_with("fixed", "windowed", False))
    # not set: the simulator's default, and the points carry no windowed field
    assert plain.windowed is None
    assert all(p.windowed is None and "windowed" not in p.as_dict() for p in expand(plain))
    assert spec.windowed is True
    assert off.windowed is False
    assert all(p.windowed for p in expand(spec))
    assert all(p.windowed is False for p in expand(off))
    assert spec.to_json()["fixed"]["windowed"] is True
    assert off.to_json()["fixed"]["windowed"] is False
    assert "windowed" not in plain.to_json()["fixed"]
    # a figure run with --windowed / --one-queue is a sweep of its own, whatever the command line restricts
    named = windowed_spec(restrict_grid(plain, {"gpus": ["4"]}))
    assert named.name.endswith("-windowed")
    assert all(p.windowed for p in expand(named))
    one = windowed_spec(plain, False)
    assert one.name.endswith("-one-queue")
    assert all(p.windowed is False for p in expand(one))
    assert restrict_grid(spec, {"gpus": ["4"]}).windowed
    with pytest.raises(InputError, match=r"\[fixed\] windowed.*true or false"):
        parse_sweep_spec(_with("fixed", "windowed", "yes"))


def test_a_packet_cap_is_a_fixed_setting_of_auto_packets() -> None:
    auto = _with("fixed", "packet_bytes", AUTO)
    plain = parse_sweep_spec(auto)
    assert plain.max_packet_bytes is None
    assert all("max_packet_bytes" not in p.as_dict() for p in expand(plain))
    assert "max_packet_bytes" not in plain.to_json()["fixed"]
    auto["fixed"]["max_packet_bytes"] = "4KiB"
    capped = parse_sweep_spec(auto)
    assert capped.max_packet_bytes == 4096
    assert all(p.max_packet_bytes == 4096 for p in expand(capped))
    assert "packets<=4KiB" in expand(capped)[0].label()
    assert capped.to_json()["fixed"]["max_packet_bytes"] == 4096
    # `nuna figure --max-packet-bytes`: a sweep of its own
    named = packet_cap_spec(plain, 16384)
    assert named.name == f"{plain.name}-packets16KiB"
    assert all(p.max_packet_bytes == 16384 for p in expand(named))
    with pytest.raises(InputError, match=r"\[fixed\] max_packet_bytes.*no packet_bytes is 'auto'"):
        parse_sweep_spec({**_with("fixed", "max_packet_bytes", 4096)})
    for bad in (3000, 0, "lots"):
        auto["fixed"]["max_packet_bytes"] = bad
        with pytest.raises(InputError, match=r"\[fixed\] max_packet_bytes"):
            parse_sweep_spec(auto)
    with pytest.raises(UsageError, match="power of two"):
        packet_cap_spec(plain, 3000)
    with pytest.raises(UsageError, match="applies to packet_bytes = 'auto'"):
        packet_cap_spec(parse_sweep_spec(BASE), 4096)


def test_spec_equality_ignores_source() -> None:
    a = parse_sweep_spec(BASE, source="a.toml")
    b = parse_sweep_spec(BASE, source="b.toml")
    assert a == b
    assert isinstance(a, SweepSpec)


def test_shipped_quick_spec_is_valid_and_small() -> None:
    path = Path(__file__).resolve().parents[2] / "scripts" / "sweeps" / "quick.toml"
    spec = load_sweep_spec(path)
    assert spec.point_function == DEFAULT_POINT_FUNCTION
    assert 24 <= len(expand(spec)) <= 60  # "a few dozen points"


def test_restrict_grid_replaces_axes_names_the_result_and_keeps_point_identities() -> None:
    full = load_sweep_spec(Path(__file__).resolve().parents[2] / "scripts" / "sweeps" / "fig9.toml")
    part = restrict_grid(full, {"gpus": ["2", "8"], "sizes": ["10MiB"], "configs": ["UA", "NAP+NAR"]})
    assert (part.gpus, part.sizes_bytes, part.configs) == ((2, 8), (10 << 20,), ("UA", "NAP+NAR"))
    assert (part.collectives, part.tbs_per_peer, part.packet_bytes) == (
        full.collectives, full.tbs_per_peer, full.packet_bytes)
    assert part.name == "fig9-gpus2_8-sizes10MiB-configsUA_NAP+NAR"
    # the same points as the full grid's: their result files are shared
    full_ids = {point_id(p.as_dict(), full.point_function) for p in expand(full)}
    part_ids = {point_id(p.as_dict(), part.point_function) for p in expand(part)}
    assert part_ids < full_ids
    assert len(part_ids) == 3 * 2 * 1 * 2


def test_restrict_grid_keeps_a_long_name_short_and_distinct() -> None:
    full = load_sweep_spec(Path(__file__).resolve().parents[2] / "scripts" / "sweeps" / "fig9.toml")
    many = [f"{n}KiB" for n in range(100, 140)]
    names = {restrict_grid(full, {"sizes": sizes}).name for sizes in (many, many[:-1], many[1:])}
    assert len(names) == 3
    for name in names:
        assert len(name) == MAX_NAME_CHARS
        assert re.fullmatch(r"fig9-sizes10[01]KiB_10[12]KiB_[0-9KiB_]+-[0-9a-f]{12}", name), name
    assert restrict_grid(full, {"sizes": many}).name in names  # the same restriction, the same name
    assert restrict_grid(full, {"sizes": many[:3]}).name == "fig9-sizes100KiB_101KiB_102KiB"


@pytest.mark.parametrize("length", [100, 101])
def test_a_sweep_name_has_at_most_100_characters(write_spec: Callable[..., Path], length: int) -> None:
    doc = {"sweep": {"name": "n" * length}, "grid": BASE["grid"]}
    path = write_spec(_toml(doc), name="named.toml")
    if length <= MAX_NAME_CHARS:
        assert load_sweep_spec(path).name == "n" * length
    else:
        with pytest.raises(InputError, match=r"name: the name has 101 characters, more than the 100 "):
            load_sweep_spec(path)


@pytest.mark.parametrize(("axis", "values", "message"), [
    ("gpus", ["1"], r"gpus\[0\]: GPU count must be between 2"),
    ("gpus", ["eight"], r"gpus\[0\]: expected an integer"),
    ("sizes", ["10XB"], r"sizes\[0\]: invalid size"),
    ("configs", ["NAP+XYZ"], r"configs\[0\]"),
    ("collectives", ["allgather", "allgather"], r"duplicate value"),
])
def test_restrict_grid_checks_values_as_a_spec_file_would(axis: str, values: list[str], message: str) -> None:
    full = parse_sweep_spec(BASE)
    with pytest.raises(InputError, match=message):
        restrict_grid(full, {axis: values})


def test_restrict_grid_rejects_other_axes() -> None:
    from nuna.errors import UsageError

    with pytest.raises(UsageError, match="cannot override grid axis 'nar_granularities'"):
        restrict_grid(parse_sweep_spec(BASE), {"nar_granularities": ["4"]})


def test_restrict_grid_moves_the_grid_to_another_topology() -> None:
    full = load_sweep_spec(Path(__file__).resolve().parents[2] / "scripts" / "sweeps" / "fig9.toml")
    moved = restrict_grid(full, {"topologies": ["nuna-4die-p256"], "sizes": ["100KiB"]})
    assert moved.topologies == ("nuna-4die-p256",)
    assert moved.name == "fig9-topologiesnuna-4die-p256-sizes100KiB"
    # the same grid, point for point, on the other machine: new points, none shared
    same = restrict_grid(full, {"sizes": ["100KiB"]})
    ours = [p.as_dict() for p in expand(moved)]
    theirs = [p.as_dict() for p in expand(same)]
    assert [dict(p, topology="x") for p in ours] == [dict(p, topology="x") for p in theirs]
    assert not {point_id(p, moved.point_function) for p in ours} & {
        point_id(p, same.point_function) for p in theirs}
    # a file is named by its stem
    by_path = restrict_grid(full, {"topologies": ["/some/where/my-chip.toml"]})
    assert by_path.name == "fig9-topologiesmy-chip"
    assert by_path.topologies == ("/some/where/my-chip.toml",)


# --- [[grid.also]]: a union of grids ------------------------------------------------------------

ALSO_TOML = """
[sweep]
name = "union"

[grid]
collectives = ["allgather", "alltoall"]
gpus = [2, 8]
sizes = ["100kB", "1MB", "1GB"]
configs = ["UA", "NAP+NAR"]
tbs_per_peer = [1]

[[grid.also]]
sizes = ["100kB", "1MB"]
tbs_per_peer = [4, 16]

[[grid.also]]
gpus = [64]
sizes = ["1MB"]
"""


def test_grid_also_adds_the_patched_grids_after_the_main_one(write_spec: Callable[..., Path]) -> None:
    spec = load_sweep_spec(write_spec(ALSO_TOML, name="also.toml"))
    points = expand(spec)
    main = [p for p in points if p.tbs_per_peer == 1 and p.gpus != 64]
    assert points[:len(main)] == tuple(main)  # the main grid first, in its own order
    assert len(main) == 2 * 2 * 3 * 2
    more_k = [p for p in points if p.tbs_per_peer > 1]
    assert len(more_k) == 2 * 2 * 2 * 2 * 2
    assert {p.size_bytes for p in more_k} == {100_000, 1_000_000}  # not at 1 GB
    big = [p for p in points if p.gpus == 64]
    assert {(p.size_bytes, p.tbs_per_peer) for p in big} == {(1_000_000, 1)}
    assert len(big) == 2 * 2
    assert len(points) == len(main) + len(more_k) + len(big)
    # a table written in another key order is the same spec
    swapped = ALSO_TOML.replace('sizes = ["100kB", "1MB"]\ntbs_per_peer = [4, 16]',
                                'tbs_per_peer = [4, 16]\nsizes = ["100kB", "1MB"]')
    assert load_sweep_spec(write_spec(swapped, name="also2.toml")) == spec
    assert spec.to_json()["grid"]["also"] == [
        {"sizes_bytes": [100_000, 1_000_000], "tbs_per_peer": [4, 16]},
        {"gpus": [64], "sizes_bytes": [1_000_000]},
    ]
    assert "also" not in parse_sweep_spec(BASE).to_json()["grid"]  # older specs keep their index bytes


def test_grid_also_points_already_in_the_main_grid_appear_once() -> None:
    data = _with("grid", "also", [{"tbs_per_peer": [1, 2]}])
    points = expand(parse_sweep_spec(data))
    assert [p.tbs_per_peer for p in points] == [1, 2]


@pytest.mark.parametrize(("also", "message"), [
    ([{}], r"\[\[grid.also\]\] #1: replaces no axis"),
    ([{"tbs_per_peer": [4]}, {"threads": [1]}], r"\[\[grid.also\]\] #2: unknown grid axis 'threads'"),
    ([{"tbs_peer": [4]}], r"did you mean 'tbs_per_peer'"),
    ([{"sizes": ["10QB"]}], r"\[\[grid.also\]\] #1 sizes\[0\]: invalid size"),
    ([{"gpus": []}], r"\[\[grid.also\]\] #1 gpus: must list at least one value"),
    (["tbs"], r"\[\[grid.also\]\] #1: must be a table"),
])
def test_grid_also_errors_name_the_table_and_key(also: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_sweep_spec(_with("grid", "also", also))


def test_restrict_grid_keeps_what_the_command_line_allows_of_an_also_grid(
    write_spec: Callable[..., Path],
) -> None:
    spec = load_sweep_spec(write_spec(ALSO_TOML, name="also.toml"))
    small = restrict_grid(spec, {"sizes": ["100kB"]})
    assert {(p.size_bytes, p.tbs_per_peer) for p in expand(small)} == {(10**5, 1), (10**5, 4), (10**5, 16)}
    assert [dict(patch.axes) for patch in small.also] == [{"sizes": (100_000,), "tbs_per_peer": (4, 16)}]
    only_k1 = restrict_grid(spec, {"tbs_per_peer": ["1"]})
    assert {p.tbs_per_peer for p in expand(only_k1)} == {1}
    assert len(only_k1.also) == 1  # the 64-GPU table replaces no threadblock count: kept
    # every point of a restriction is a point of the full spec: result files are shared
    assert set(expand(small)) <= set(expand(spec))
    assert set(expand(only_k1)) <= set(expand(spec))


def test_a_spec_tells_topology_files_from_names_as_the_loader_does() -> None:
    from nuna.experiments import spec as sweep_spec
    from nuna.topology.spec import TOPOLOGY_FILE_SUFFIX, is_topology_path

    assert sweep_spec._TOPOLOGY_FILE_SUFFIX == TOPOLOGY_FILE_SUFFIX
    for text in ("nuna-4die", "chip.toml", "chips/a", "chips\\a", "chip.TOML", "toml"):
        assert sweep_spec._is_topology_path(text) == is_topology_path(text), text
    assert is_topology_path("chip.toml")
    assert not is_topology_path("nuna-4die")


@pytest.mark.parametrize(("key", "named_as", "suffix", "label"), [
    ("fast_forward", fast_forward_spec, "-ff", "fast-forward"),
])
def test_a_model_switch_is_a_fixed_setting_of_its_own(key: str, named_as: Callable[[SweepSpec], SweepSpec],
                                                      suffix: str, label: str) -> None:
    plain = parse_sweep_spec(BASE)
    spec = parse_sweep_spec(_with("fixed", key, True))
    assert getattr(plain, key) is False
    assert all(key not in p.as_dict() for p in expand(plain))  # ids of older points kept
    assert key not in plain.to_json()["fixed"]
    assert all(p.as_dict()[key] is True for p in expand(spec))
    assert spec.to_json()["fixed"][key] is True
    assert len(expand(spec)) == len(expand(plain))
    ids = {point_id(p.as_dict(), plain.point_function) for p in expand(plain)}
    assert ids.isdisjoint(point_id(p.as_dict(), spec.point_function) for p in expand(spec))
    named = named_as(restrict_grid(plain, {"gpus": ["4"]}))
    assert named.name.endswith(suffix)
    assert all(getattr(p, key) for p in expand(named))
    assert label in expand(named)[0].label()
    with pytest.raises(InputError, match=rf"\[fixed\] {key}.*true or false"):
        parse_sweep_spec(_with("fixed", key, 1))


def _check_fixed_setting(key: str, values: tuple[object, ...], named_spec: Any, suffix: str,
                         label: str) -> SweepSpec:
    """A ``[fixed]`` setting that is off by default: absent from the points (older ids kept) and
    the spec's JSON until set; set, in every point, the JSON and the ids (new ones), and the
    named spec of the figure commands carries it in its name and labels. ``suffix`` and
    ``label`` are formats of the value. Returns the plain spec."""
    plain = parse_sweep_spec(BASE)
    assert getattr(plain, key) is None
    assert all(key not in p.as_dict() for p in expand(plain))
    assert key not in plain.to_json()["fixed"]
    ids = {point_id(p.as_dict(), plain.point_function) for p in expand(plain)}
    for value in values:
        spec = parse_sweep_spec(_with("fixed", key, value))
        assert all(p.as_dict()[key] == value for p in expand(spec))
        assert spec.to_json()["fixed"][key] == value
        assert ids.isdisjoint(point_id(p.as_dict(), spec.point_function) for p in expand(spec))
        named = named_spec(restrict_grid(plain, {"gpus": ["4"]}), value)
        assert named.name.endswith(suffix.format(value))
        assert all(getattr(p, key) == value for p in expand(named))
        assert label.format(value) in expand(named)[0].label()
    return plain


def test_line_setups_is_a_fixed_setting_of_its_own() -> None:
    plain = _check_fixed_setting("line_setups", ("one", "series", "overlap"), line_setups_spec,
                                 "-setups-{}", "setups-{}")
    with pytest.raises(InputError, match=r"\[fixed\] line_setups.*one of"):
        parse_sweep_spec(_with("fixed", "line_setups", "twice"))
    with pytest.raises(UsageError, match="twice"):
        line_setups_spec(plain, "twice")
    with pytest.raises(InputError, match="setup_per_line"):  # the 0.8.0 switch is gone, loudly
        parse_sweep_spec(_with("fixed", "setup_per_line", True))


def test_packet_credit_lines_is_a_fixed_setting_of_its_own() -> None:
    plain = _check_fixed_setting("packet_credit_lines", (1, 3), packet_credit_spec, "-credit{}", "credit-{}")
    for bad in (0, 1.5, "2", True, 1 << 21):
        with pytest.raises(InputError, match=r"\[fixed\] packet_credit_lines"):
            parse_sweep_spec(_with("fixed", "packet_credit_lines", bad))
    with pytest.raises(UsageError, match="between 1 and"):
        packet_credit_spec(plain, 0)


def test_a_figure_with_another_credit_is_a_sweep_of_its_own() -> None:
    from nuna.experiments.figures import FigureOptions, figure_spec
    from nuna.sim.replay import DEFAULT_PACKET_CREDIT_LINES
    plain = figure_spec("fig12", FigureOptions(quick=True))
    same = figure_spec("fig12", FigureOptions(quick=True, packet_credit_lines=DEFAULT_PACKET_CREDIT_LINES))
    assert same == plain  # the default is no change: the same points, reused
    one = figure_spec("fig12", FigureOptions(quick=True, packet_credit_lines=1))
    assert one.name == f"{plain.name}-credit1"
    assert all(p.packet_credit_lines == 1 for p in expand(one))


def test_packet_credit_bounds_are_the_simulators() -> None:
    from nuna.experiments.spec import MAX_CREDIT_LINES
    from nuna.sim.replay import _OPTION_COUNTS, DEFAULT_PACKET_CREDIT_LINES
    assert _OPTION_COUNTS["packet_credit_lines"] == (1, MAX_CREDIT_LINES)
    assert 1 <= DEFAULT_PACKET_CREDIT_LINES <= MAX_CREDIT_LINES


def test_line_setups_are_the_simulators() -> None:
    from nuna.experiments.spec import LINE_SETUPS
    from nuna.sim.replay import DEFAULT_LINE_SETUPS, LINE_SETUP_RULES
    assert tuple(sorted(LINE_SETUP_RULES)) == LINE_SETUPS
    assert DEFAULT_LINE_SETUPS in LINE_SETUPS


# --- names that become paths, files that are not files, values the layers below refuse ---------


@pytest.mark.parametrize("name", ["/tmp/x/owned", "../../escaped", "a/b", "a\\b", "..", ".hidden", "-x",
                                  "fig 9", "a\x00b"])
def test_a_name_that_is_not_a_plain_file_name_is_refused(name: str) -> None:
    # `nuna figure` writes OUT/NAME.png and OUT/sweeps/NAME: a path there writes anywhere
    with pytest.raises(InputError) as info:
        parse_sweep_spec(_with("sweep", "name", name), source="bad.toml")
    assert str(info.value).startswith("bad.toml: [sweep] name: ")
    assert "\n" not in str(info.value)


def test_plain_names_and_the_names_derived_from_them_are_accepted(write_spec: Callable[..., Path]) -> None:
    assert parse_sweep_spec(_with("sweep", "name", "fig9.v2_a+b-c")).name == "fig9.v2_a+b-c"
    text = '[grid]\ncollectives = ["allgather"]\ngpus = [8]\nsizes = ["1MB"]\nconfigs = ["UA"]\n'
    # the default, the file's name, is respelled where it can be, refused where it cannot
    assert load_sweep_spec(write_spec(text, name="my spec.toml")).name == "my_spec"
    with pytest.raises(InputError, match=r"\.\.\.toml: \[sweep\] name: the default.*'\.\.'.*set \[sweep"):
        load_sweep_spec(write_spec(text, name="...toml"))
    spec = parse_sweep_spec(BASE)
    assert restrict_grid(spec, {"configs": ["UA", "nap*+nar"]}).name == "sweep-configsUA_nap_+nar"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_as_the_spec_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    driver = "import sys\nfrom nuna.cli import main\nsys.argv[0] = 'nuna'\nmain()\n"
    # in a subprocess with a timeout: reading the pipe would block this test forever
    out = subprocess.run([sys.executable, "-c", driver, "sweep", str(fifo), "-o", str(tmp_path / "out")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr == f"nuna: error: {fifo}: not a regular file\n"
    assert not (tmp_path / "out").exists()


def _not_a_topology(tmp_path: Path) -> str:
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    return str(tmp_path / "passwd")


def _fifo_topology(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "pipe.toml")
    return str(tmp_path / "pipe.toml")


def _toml(doc: dict[str, dict[str, Any]]) -> str:
    """``doc`` as TOML (JSON's strings, numbers and arrays are TOML's; ``also`` lists tables)."""
    lines = []
    for section, table in doc.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in table.items() if key != "also"]
        for patch in table.get("also", []):
            lines.append(f"[[{section}.also]]")
            lines += [f"{key} = {json.dumps(value)}" for key, value in patch.items()]
    return "\n".join(lines) + "\n"


NAR_GRID = {"configs": ["UA", "UA+NAR"]}

REFUSED_AT_LOAD: list[tuple[dict[str, Any], dict[str, Any], str]] = [
    # (grid keys, fixed keys, where and what the message says)
    ({"topologies": ["nope"]}, {}, r"\[grid\] topologies\[0\]: unknown topology 'nope'"),
    ({"topologies": ["nuna-4die", "missing.toml"]}, {},
     r"\[grid\] topologies\[1\]: .*missing\.toml: no such topology file"),
    ({"topologies": ["{tmp}/"]}, {}, r"\[grid\] topologies\[0\]: .*: is a folder, not a topology file"),
    ({"topologies": ["{passwd}"]}, {}, r"\[grid\] topologies\[0\]: .*passwd: TOML syntax error"),
    ({"topologies": ["{fifo}"]}, {}, r"\[grid\] topologies\[0\]: .*pipe\.toml: not a regular file"),
    ({}, {"packet_bytes": 100},
     r"\[fixed\] packet_bytes: .*multiple of the 256-byte flit of nuna-4die, got 100"),
    ({}, {"packet_bytes": 384}, r"\[fixed\] packet_bytes: .*256-byte flit"),
    ({}, {"packet_bytes": 1 << 63}, r"\[fixed\] packet_bytes: packet size must be at most 1099511627776 B"),
    ({}, {"packet_bytes": "auto", "max_packet_bytes": 128}, r"\[fixed\] max_packet_bytes: .*256-byte flit"),
    (NAR_GRID | {"nar_granularities": [2, 5]}, {}, r"\[grid\] nar_granularities\[1\]: NAR granularity 5 is "
     r"not valid for nuna-4die \(valid: 1, 2, 3, 4, 6, 12"),
    (NAR_GRID | {"topologies": ["nuna-4die", "mi300x-like"], "nar_granularities": [12]}, {},
     r"\[grid\] nar_granularities\[0\]: NAR granularity 12 is not valid for mi300x-like"),
    (NAR_GRID | {"also": [{"nar_granularities": [5]}]}, {},
     r"\[\[grid.also\]\] #1 nar_granularities\[0\]: NAR granularity 5"),
    ({"tbs_per_peer": [1, 100000000]}, {},
     r"\[grid\] tbs_per_peer\[1\]: .*more than the 20,000,000 supported \(8 GPUs, 100000000 threadblocks"),
    ({"gpus": [8, 4096], "collectives": ["allreduce"]}, {}, r"\[grid\] gpus\[1\]: .*steps, more than"),
    ({"also": [{"gpus": [64], "tbs_per_peer": [50000]}]}, {}, r"\[\[grid.also\]\] #1 tbs_per_peer\[0\]"),
    ({"tbs_per_peer": [1, 4]}, {"algo": "ring"}, r"\[grid\] tbs_per_peer\[1\]: .*direct algorithm"),
    ({"sizes": ["1MiB", "577GiB"]}, {}, r"\[grid\] sizes\[1\]: 577GiB is more than a GPU of nuna-4die holds "
     r"\(576GiB in 16 HBM stacks\)"),
    ({"also": [{"sizes": ["100000GiB"]}]}, {}, r"\[\[grid.also\]\] #1 sizes\[0\]: 100000GiB is more than"),
    ({"gemm_sizes": [0, "1MiB"]}, {}, r"\[grid\] gemm_sizes\[1\]: the default point function replays the "
     r"collective alone; a concurrent GEMM needs \[sweep\] point_function = "
     r"'nuna.experiments.gemm:gemm_point'"),
]


@pytest.mark.parametrize(("grid", "fixed", "message"), REFUSED_AT_LOAD)
def test_values_the_topology_simulator_or_generator_refuse_are_named_at_load(
        write_spec: Callable[..., Path], tmp_path: Path, grid: dict[str, Any], fixed: dict[str, Any],
        message: str) -> None:
    """Each passed `--dry-run` and then failed every point of the run."""
    values = {"tmp": str(tmp_path), "passwd": _not_a_topology(tmp_path),
              "fifo": _fifo_topology(tmp_path) if "{fifo}" in str(grid) else ""}
    grid = {k: [v.format(**values) if isinstance(v, str) else v for v in vs] if k == "topologies" else vs
            for k, vs in grid.items()}
    doc = {"grid": BASE["grid"] | grid, "fixed": fixed}
    path = write_spec(_toml(doc), name="bad.toml")
    with pytest.raises(InputError) as info:
        load_sweep_spec(path)
    assert str(info.value).startswith(f"{path}: ")
    assert re.search(message, str(info.value)), str(info.value)
    assert "\n" not in str(info.value)


def test_load_checks_against_the_topology_without_loading_the_simulator(
        write_spec: Callable[..., Path]) -> None:
    path = write_spec('[grid]\ncollectives = ["allgather"]\ngpus = [8]\nsizes = ["1MB"]\n'
                      'configs = ["UA+NAR"]\nnar_granularities = [5]\n')
    code = ("import sys\nfrom nuna.experiments.sweep import load_sweep_spec\n"
            "try:\n    load_sweep_spec(sys.argv[1])\nexcept Exception as err:\n    print(err)\n"
            "print(','.join(m for m in ('nuna.sim', 'nuna.passes', 'numba') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True,
                         check=True)
    error, heavy = out.stdout.splitlines()
    assert "nar_granularities[0]: NAR granularity 5 is not valid" in error
    assert heavy == ""
    # what the layers below take passes: 768 B, three flits (the simulator takes any whole
    # number); 5 NAR domains where no configuration uses NAR; 144 threadblocks per peer at
    # 64 GPUs (Fig 13); the shipped specs
    doc = {"grid": BASE["grid"] | {"gpus": [64], "tbs_per_peer": [144], "nar_granularities": [5],
                                   "collectives": ["allreduce"]}, "fixed": {"packet_bytes": 768}}
    spec = load_sweep_spec(write_spec(_toml(doc), name="good.toml"))
    assert (spec.packet_bytes, spec.tbs_per_peer) == ((768,), (144,))
    # a GPU's whole memory (nuna-4die: 16 stacks of 36 GiB) is the largest size refused only per point
    doc = {"grid": BASE["grid"] | {"sizes": ["576GiB"]}}
    assert load_sweep_spec(write_spec(_toml(doc), name="full.toml")).sizes_bytes == (576 << 30,)
    for name in ("fig9", "fig10", "fig11", "fig12", "fig13", "fig14", "quick", "headroom"):
        load_sweep_spec(REPO / "scripts" / "sweeps" / f"{name}.toml")


def test_the_default_packet_size_is_named_when_a_chips_flit_refuses_it(write_spec: Callable[..., Path],
                                                                        tmp_path: Path) -> None:
    # the spec never set packet_bytes: the message says where the 256 came from
    chip = (REPO / "topologies" / "nuna-4die.toml").read_text()
    (tmp_path / "f512.toml").write_text(chip.replace("flit_bytes = { value = 256,",
                                                     "flit_bytes = { value = 512,"))
    path = write_spec('[grid]\ncollectives = ["allgather"]\ngpus = [2]\nsizes = ["64KiB"]\nconfigs = ["UA"]\n'
                      f'topologies = ["{tmp_path / "f512.toml"}"]\n')
    with pytest.raises(InputError, match=r"\[fixed\] packet_bytes: .*512-byte flit of nuna-4die, got 256 "
                                         r"\(256 is the default: set \[fixed\] packet_bytes to a multiple"):
        load_sweep_spec(path)
