"""The ablation switch of ``benchmarks/bench_line_setups.py`` (``--set SECTION.KEY=VALUE``): the
topology's own overrides (``nuna simulate --set``), checked before any replay. The replays
themselves take minutes and are left to the benchmark's users."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nuna.topology.spec import load_topology
from tests.conftest import benchmark_module


def test_set_changes_only_the_named_keys() -> None:
    bench = benchmark_module("bench_line_setups")
    base = load_topology("nuna-4die")
    spec = bench.topology(["router.vc_buffer_flits=32", "chip.die_crossing_bandwidth_gbps=4580.0"])
    want = replace(base, name=spec.name, router=replace(base.router, vc_buffer_flits=32),
                   chip=replace(base.chip, die_crossing_bandwidth_gbps=4580.0))
    assert spec == want
    assert bench.topology([]) == base


@pytest.mark.parametrize("items", [["router.nope=3"], ["nope.vcs=3"], ["router.vcs="], ["vcs=3"],
                                   ["scaleup.vcs=4"], ["router.vcs=0"], ["router.vcs=2", "router.vcs=3"]])
def test_set_refuses_a_parameter_nuna_4die_lacks_a_bad_value_or_one_set_twice(items: list[str]) -> None:
    bench = benchmark_module("bench_line_setups")
    with pytest.raises(SystemExit, match=r"^--set: "):
        bench.topology(items)


def test_ports_line_names_the_longest_waits() -> None:
    bench = benchmark_module("bench_line_setups")
    r = {"longest_port_wait": [0, 3, "port_to_mesh", 1594.89], "ports_waited_into_mesh": [2, 24],
         "longest_link_wait": ["IoPort(gpu=0, port=3)", "Router(gpu=0, x=0, y=3)", 1047.25]}
    line = bench._ports("ag2", "flits", r)
    assert "longest port wait 1594.9 ns (GPU 0 port 3, port_to_mesh)" in line
    assert "2/24 receiving ports" in line
    assert line.endswith("1047.2 ns IoPort(gpu=0, port=3) -> Router(gpu=0, x=0, y=3)")
    assert "longest port wait none;" in bench._ports("ag2", "one", {**r, "longest_port_wait": None})


def _baseline_plan() -> tuple[Any, Any]:
    from nuna.plan.generate import generate

    return generate("allgather", 2, algo="direct", tbs_per_peer=4), load_topology("nuna-4die")


def test_move_cu_moves_only_the_named_cus_threadblocks() -> None:
    from nuna.sim.layout import baseline_cus

    bench = benchmark_module("bench_line_setups")
    plan, spec = _baseline_plan()
    base = baseline_cus(plan, spec)
    src = base[(0, 0)]
    moved, n = bench.move_threadblocks(plan, spec, {src: 105})
    got = {(p.gpu, p.tb): p.cu for p in moved.placement.threadblocks}
    assert n == sum(cu == src for cu in base.values()) == 2  # one per GPU
    assert got == {key: 105 if cu == src else cu for key, cu in base.items()}
    assert moved.placement.chunks == plan.placement.chunks
    assert moved.placement.nar_granularity == plan.placement.nar_granularity
    # a CU no threadblock runs on moves nothing
    unused = next(cu for cu in range(spec.chip.cus) if cu not in base.values())
    same, n = bench.move_threadblocks(plan, spec, {unused: 3})
    assert n == 0
    assert {(p.gpu, p.tb): p.cu for p in same.placement.threadblocks} == base


def test_move_cu_keeps_a_configurations_own_placement() -> None:
    from nuna.passes import PassContext, apply_config

    bench = benchmark_module("bench_line_setups")
    plan, spec = _baseline_plan()
    nap = apply_config(plan, "NAP+NAR", PassContext(spec, 1 << 20))
    own = {(p.gpu, p.tb): p.cu for p in nap.placement.threadblocks}
    src = own[(1, 2)]
    moved, n = bench.move_threadblocks(nap, spec, {src: 0})
    got = {(p.gpu, p.tb): p.cu for p in moved.placement.threadblocks}
    assert n >= 1
    assert got == {key: 0 if cu == src else cu for key, cu in own.items()}


def test_written_out_placement_replays_as_the_baseline() -> None:
    from nuna.sim import simulate

    bench = benchmark_module("bench_line_setups")
    plan, spec = _baseline_plan()
    same, _ = bench.move_threadblocks(plan, spec, {0: 0})
    assert same.placement.threadblocks
    assert plan.placement.is_baseline
    a = simulate(plan, spec, 1 << 20, packet_bytes=256)
    b = simulate(same, spec, 1 << 20, packet_bytes=256)
    assert (a.time_ns, a.events) == (b.time_ns, b.events)


@pytest.mark.parametrize(("items", "match"), [(["0-42"], "expected FROM:TO"), (["0:"], "expected FROM:TO"),
                                               (["0:1008"], "CUs 0-1007"), (["0:1", "0:2"], "moved twice")])
def test_move_cu_refuses_bad_values(items: list[str], match: str) -> None:
    bench = benchmark_module("bench_line_setups")
    with pytest.raises(SystemExit, match=match):
        bench.parse_moves(items, 1008)
    assert bench.parse_moves(["0:105", "7:0"], 1008) == {0: 105, 7: 0}
