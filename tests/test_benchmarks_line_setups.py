"""The ablation switch of ``benchmarks/bench_line_setups.py`` (``--set SECTION.KEY=VALUE``): it
rewrites nuna-4die's text, so the topology parser checks the changed value as it checks a file.
The replays themselves take minutes and are left to the benchmark's users."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nuna.topology.spec import load_topology, parse_topology
from tests.conftest import benchmark_module


def test_set_changes_only_the_named_keys() -> None:
    bench = benchmark_module("bench_line_setups")
    base = load_topology("nuna-4die")
    spec = parse_topology(bench._topology_text(["router.vc_buffer_flits=32",
                                                "chip.die_crossing_bandwidth_gbps=4580.0"]))
    want = replace(base, router=replace(base.router, vc_buffer_flits=32),
                   chip=replace(base.chip, die_crossing_bandwidth_gbps=4580.0))
    assert spec == want
    assert parse_topology(bench._topology_text([])) == base


@pytest.mark.parametrize("item", ["router.nope=3", "nope.vcs=3", "router.vcs=", "vcs=3",
                                  "scaleup.vcs=4"])
def test_set_refuses_a_key_nuna_4die_lacks(item: str) -> None:
    bench = benchmark_module("bench_line_setups")
    with pytest.raises(SystemExit, match="no key"):
        bench._topology_text([item])


def test_ports_line_names_the_longest_waits() -> None:
    bench = benchmark_module("bench_line_setups")
    r = {"longest_port_wait": [0, 3, "port_to_mesh", 1594.89], "ports_waited_into_mesh": [2, 24],
         "longest_link_wait": ["IoPort(gpu=0, port=3)", "Router(gpu=0, x=0, y=3)", 1047.25]}
    line = bench._ports("ag2", "flits", r)
    assert "longest port wait 1594.9 ns (GPU 0 port 3, port_to_mesh)" in line
    assert "2/24 receiving ports" in line
    assert line.endswith("1047.2 ns IoPort(gpu=0, port=3) -> Router(gpu=0, x=0, y=3)")
    assert "longest port wait none;" in bench._ports("ag2", "one", {**r, "longest_port_wait": None})
