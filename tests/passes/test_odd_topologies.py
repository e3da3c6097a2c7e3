"""Topologies at the edges of what a file may say still rewrite and replay, or fail with a
one-line error: found by replaying mutated copies of nuna-4die.toml under NAP+NAR."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nuna.errors import PassError, TopologyError
from nuna.passes import CONFIGS, PassContext, apply_config
from nuna.passes.nap import stack_budget_bytes
from nuna.plan.generate import generate
from nuna.sim import simulate
from nuna.topology.address import nar_granularities
from nuna.topology.spec import available_topologies, load_topology, parse_topology

NUNA_4DIE = (Path(__file__).resolve().parents[2] / "topologies" / "nuna-4die.toml").read_text()


def _with(key: str, value: str) -> str:
    text, n = re.subn(rf"(?m)^({key} = {{ value = )[^,]+", rf"\g<1>{value}", NUNA_4DIE)
    assert n == 1
    return text


def test_every_nar_domain_owns_a_stack() -> None:
    # 7 stacks cannot give 12 domains one each: NAP had no stack to place a domain's data in
    spec = parse_topology(_with("hbm_stacks", "7"), "seven.toml")
    assert nar_granularities(spec) == (1, 2, 3, 4, 6)
    ctx = PassContext(spec, 1 << 16)
    with pytest.raises(PassError, match=r"12 is not valid for nuna-4die \(valid: 1, 2, 3, 4, 6\)"):
        apply_config(generate("allgather", 4), "NAP+NAR", ctx, 12)
    for g in nar_granularities(spec):
        plan = apply_config(generate("allgather", 4, tbs_per_peer=2), "NAP+NAR", ctx, g)
        assert simulate(plan, spec, 1 << 16).time_ns > 0


@pytest.mark.parametrize(("key", "value"), [("hbm_stack_bandwidth_gbps", "1e-9"),
                                            ("memory_access_latency_ns", "1e-9"),
                                            ("hbm_stack_bandwidth_gbps", "inf")])
def test_nap_places_with_a_stack_budget_under_one_byte_or_unbounded(key: str, value: str) -> None:
    # the budget is bandwidth x latency: under a byte it divided by zero, inf did not convert
    spec = parse_topology(_with(key, value), "tiny.toml")
    plan = apply_config(generate("allgather", 4, tbs_per_peer=2), "NAP+NAR", PassContext(spec, 1 << 16), None)
    assert plan.placement.chunks
    assert simulate(plan, spec, 1 << 16).time_ns > 0


@pytest.mark.parametrize(("key", "value"), [("die_crossing_bandwidth_gbps", "1e12"),
                                            ("hbm_stack_bandwidth_gbps", "1e308")])
def test_a_router_buffer_beyond_the_engines_columns_is_a_topology_error(key: str, value: str) -> None:
    spec = parse_topology(_with(key, value), "fast.toml")
    with pytest.raises(TopologyError, match=r"router buffer would hold \S+ bytes per virtual channel"):
        simulate(generate("allgather", 4), spec, 1 << 16)


def test_an_ideal_stack_of_zero_latency_has_an_unbounded_budget() -> None:
    # flat-switch's memory: inf GB/s times 0 ns was nan, and every NAP configuration failed on it
    text = _with("hbm_stack_bandwidth_gbps", "inf")
    text = text.replace("access_latency_ns = { value = 120.0", "access_latency_ns = { value = 0.0")
    spec = parse_topology(text, "ideal.toml")
    assert spec.chip.memory_access_latency_ns == 0.0
    assert stack_budget_bytes(spec) == 1 << 62


@pytest.mark.parametrize("topology", available_topologies())
def test_every_configuration_rewrites_and_replays_on_every_shipped_topology(topology: str) -> None:
    spec = load_topology(topology)
    plan = generate("allgather", 2, tbs_per_peer=2)
    for config in CONFIGS:
        placed = apply_config(plan, config, PassContext(spec, 1 << 16))
        assert simulate(placed, spec, 1 << 16).time_ns > 0, config
