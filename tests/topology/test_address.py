"""Address model: pages and stacks, the port hash, NAR domains and placement distances."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import TopologyError
from nuna.topology import (
    baseline_physical_address,
    baseline_stack,
    chip_geometry,
    cu_nar_domains,
    default_topology,
    io_port,
    io_ports_array,
    load_topology,
    nar_domain_cus,
    nar_domain_ports,
    nar_domain_stacks,
    nar_granularities,
    nar_port_table,
    nar_segment_cycle,
    nar_segment_stack,
    nearest_cus,
    nearest_stack,
    nearest_stacks,
    physical_address,
    stack_domain,
    stack_domains,
    stack_of_address,
    stacks_by_distance,
)
from nuna.topology.address import address_space_bytes, mix64, mix64_array, page_slot_of_address

SPEC = default_topology()
CHIP = SPEC.chip
MESH_CHIPS = [SPEC] + [load_topology(n) for n in ("mi210-like", "mi355x-like", "mi300x-like")]
addresses = st.integers(0, address_space_bytes(SPEC) - 1)


def test_granularities_are_the_divisors_of_the_port_count() -> None:
    assert nar_granularities(SPEC) == (1, 2, 3, 4, 6, 12)
    assert nar_granularities(load_topology("mi210-like")) == (1, 2, 4)
    for bad in (0, 5, 7, 24, -2):
        with pytest.raises(TopologyError, match="NAR granularity"):
            nar_domain_ports(SPEC, bad)


@pytest.mark.parametrize("spec", MESH_CHIPS, ids=lambda s: s.name)
def test_nar_domains_partition_ports_and_stacks(spec: object) -> None:
    geo = chip_geometry(spec.chip)  # type: ignore[attr-defined]
    ports_n, stacks_n = spec.chip.io_ports, spec.chip.hbm_stacks  # type: ignore[attr-defined]
    for g in nar_granularities(spec):  # type: ignore[arg-type]
        ports = nar_domain_ports(spec, g)  # type: ignore[arg-type]
        stacks = nar_domain_stacks(spec, g)  # type: ignore[arg-type]
        assert len(ports) == len(stacks) == g
        assert sorted(p for d in ports for p in d) == list(range(ports_n))
        assert sorted(s for d in stacks for s in d) == list(range(stacks_n))
        for d in ports:  # adjacent ports: consecutive indices (perimeter neighbours)
            assert list(d) == list(range(d[0], d[0] + ports_n // g))
        sizes = {len(d) for d in stacks}
        assert max(sizes) - min(sizes) <= 1
        for d, owned in enumerate(stacks):
            for s in owned:
                assert stack_domain(spec, g, s) == d  # type: ignore[arg-type]
        # the array forms the compiled code indexes agree with the tuples
        assert nar_port_table(spec, g).tolist() == [list(d) for d in ports]  # type: ignore[arg-type]
        owner = stack_domains(spec, g)  # type: ignore[arg-type]
        assert [int(owner[s]) for s in range(stacks_n)] == [
            stack_domain(spec, g, s) for s in range(stacks_n)  # type: ignore[arg-type]
        ]
        # ownership is near: a stack's own domain is among the two cheapest for it, by mean latency
        mean = np.stack(
            [
                (geo.port_stack.latency_ns[list(p)] + geo.stack_port.latency_ns[:, list(p)].T).mean(axis=0)
                for p in ports
            ]
        )  # (G, S)
        for d, owned in enumerate(stacks):
            for s in owned:
                assert d in np.argsort(mean[:, s], kind="stable")[: min(g, 3)], (g, s)


def test_nar_domains_of_the_paper_system() -> None:
    assert nar_domain_ports(SPEC, 2) == (tuple(range(6)), tuple(range(6, 12)))
    left, right = nar_domain_stacks(SPEC, 2)
    geo = chip_geometry(CHIP)
    # left-edge ports own the stacks of the left half of the chip
    assert all(geo.router_xy[geo.stack_router[s], 0] < 12 for s in left)
    assert all(geo.router_xy[geo.stack_router[s], 0] >= 12 for s in right)
    assert len(left) == len(right) == 8
    assert nar_domain_stacks(SPEC, 1) == (tuple(range(16)),)


@given(
    st.integers(0, CHIP.hbm_stacks - 1),
    st.integers(0, CHIP.pages_per_stack - 1),
    st.integers(0, CHIP.page_bytes - 1),
)
def test_physical_address_round_trip(stack: int, slot: int, offset: int) -> None:
    addr = physical_address(SPEC, stack, slot, offset)
    assert stack_of_address(SPEC, addr) == stack
    assert page_slot_of_address(SPEC, addr) == slot
    assert addr % CHIP.page_bytes == offset


@given(st.integers(0, 10**7))
def test_baseline_pages_go_round_robin_and_map_identically(page: int) -> None:
    assert baseline_stack(SPEC, page) == page % 16
    addr = page * CHIP.page_bytes + 123
    assert baseline_physical_address(SPEC, addr) == addr
    assert stack_of_address(SPEC, addr) == baseline_stack(SPEC, page)


@pytest.mark.parametrize("g", [2, 3, 4, 6, 12])
def test_nar_segment_pages_are_dealt_evenly_to_domains_then_their_stacks(g: int) -> None:
    stacks = nar_domain_stacks(SPEC, g)
    n = 16 * g * 60  # a whole number of periods
    placed = [nar_segment_stack(SPEC, j, g) for j in range(n)]
    per_domain = Counter(stack_domain(SPEC, g, s) for s in placed)
    assert sorted(per_domain) == list(range(g))
    assert len(set(per_domain.values())) == 1  # uniform over domains (paper §4.1.2), even at 16/12
    for own in stacks:
        mine = Counter(s for s in placed if s in own)
        assert set(mine) == set(own)
        assert len(set(mine.values())) == 1  # round-robin within a domain


@pytest.mark.parametrize("g", [None, 1, 2, 3, 4, 6, 12])
def test_nar_segment_cycle_is_one_period_of_the_page_policy(g: int | None) -> None:
    cycle = nar_segment_cycle(SPEC, g)
    assert [nar_segment_stack(SPEC, j, g) for j in range(3 * len(cycle) + 5)] == \
        [cycle[j % len(cycle)] for j in range(3 * len(cycle) + 5)]
    # G times the lcm of the domains' stack counts (nuna-4die: 8/8, 5/5/6, 4x4, 2-3, 1-2)
    assert len(cycle) == {None: 16, 1: 16, 2: 16, 3: 90, 4: 16, 6: 36, 12: 24}[g]


@given(st.integers(0, 10**6))
def test_nar_segment_without_domains_is_the_baseline(page: int) -> None:
    assert nar_segment_stack(SPEC, page, None) == baseline_stack(SPEC, page)
    assert nar_segment_stack(SPEC, page, 1) == baseline_stack(SPEC, page)


def test_nar_segment_rejects_bad_input() -> None:
    with pytest.raises(TopologyError):
        nar_segment_stack(SPEC, -1, 4)
    with pytest.raises(TopologyError):
        nar_segment_stack(SPEC, 0, 5)


@settings(max_examples=300)
@given(addresses, st.sampled_from([None, 1, 2, 3, 4, 6, 12]))
def test_io_port_stays_in_the_domain_of_the_address_stack(addr: int, g: int | None) -> None:
    port = io_port(SPEC, addr, g)
    assert 0 <= port < CHIP.io_ports
    if g is not None:
        domain = stack_domain(SPEC, g, stack_of_address(SPEC, addr))
        assert port in nar_domain_ports(SPEC, g)[domain]
    # the same 256-byte line always leaves through the same port
    line_start = addr - addr % CHIP.address_hash_granularity_bytes
    assert io_port(SPEC, line_start, g) == port
    assert io_port(SPEC, addr, 1) == io_port(SPEC, addr, None)


@settings(max_examples=50)
@given(st.lists(addresses, min_size=1, max_size=50), st.sampled_from([None, 2, 3, 4, 6, 12]))
def test_vectorised_port_hash_equals_scalar(addrs: list[int], g: int | None) -> None:
    assert io_ports_array(SPEC, addrs, g).tolist() == [io_port(SPEC, a, g) for a in addrs]


def test_mix64_is_a_bijective_looking_mixer() -> None:
    values = list(range(1000))
    assert mix64_array(values).tolist() == [mix64(v) for v in values]
    assert len({mix64(v) for v in values}) == 1000
    # flipping one input bit flips about half the output bits (avalanche)
    flips = [bin(mix64(v) ^ mix64(v ^ (1 << b))).count("1") for v in range(50) for b in range(40)]
    assert 28 < float(np.mean(flips)) < 36


def test_baseline_hash_balances_consecutive_lines_over_ports() -> None:
    lines = np.arange(120_000, dtype=np.int64) * CHIP.address_hash_granularity_bytes
    counts = Counter(io_ports_array(SPEC, lines, None).tolist())
    assert sorted(counts) == list(range(12))
    assert max(counts.values()) / min(counts.values()) < 1.06


def test_bad_addresses() -> None:
    with pytest.raises(TopologyError, match="outside"):
        io_port(SPEC, address_space_bytes(SPEC), None)
    with pytest.raises(TopologyError, match="outside"):
        io_ports_array(SPEC, [-1], None)
    with pytest.raises(TopologyError, match="HBM stack 16"):
        physical_address(SPEC, 16, 0, 0)
    with pytest.raises(TopologyError, match="offset"):
        physical_address(SPEC, 0, 0, 4096)


def test_nearest_cus_are_ordered_by_mean_latency_to_the_ports() -> None:
    geo = chip_geometry(CHIP)
    for ports in ((0,), (0, 1, 2), (6, 7, 8, 9, 10, 11), tuple(range(12))):
        order = nearest_cus(SPEC, ports)
        assert sorted(order) == list(range(CHIP.cus))
        cost = geo.cu_port.latency_ns[list(order)][:, list(ports)].mean(axis=1)
        assert np.all(np.diff(cost) >= -1e-9)
    # the seven CUs of the port's own router come first
    first = nearest_cus(SPEC, (0,))[:7]
    assert {int(geo.cu_router[c]) for c in first} == {int(geo.port_router[0])}
    assert nearest_cus(SPEC, [3]) == nearest_cus(SPEC, (3,))
    with pytest.raises(TopologyError):
        nearest_cus(SPEC, ())


def test_nearest_stacks_and_stack_distance_orders() -> None:
    geo = chip_geometry(CHIP)
    order = nearest_stacks(SPEC, (0, 1))
    assert sorted(order) == list(range(16))
    cost = (geo.port_stack.latency_ns[[0, 1]] + geo.stack_port.latency_ns[:, [0, 1]].T).mean(axis=0)[
        list(order)
    ]
    assert np.all(np.diff(cost) >= -1e-9)
    for cu in (0, 500, 1007):
        ranked = stacks_by_distance(SPEC, cu)
        rt = geo.cu_stack.latency_ns[cu] + geo.stack_cu.latency_ns[:, cu]
        assert nearest_stack(SPEC, cu) == ranked[0]
        assert rt[ranked[0]] == rt.min()
    with pytest.raises(TopologyError):
        nearest_stack(SPEC, 1008)


def test_nar_domain_cus_partition_the_cus() -> None:
    for g in nar_granularities(SPEC):
        groups = nar_domain_cus(SPEC, g)
        assert sorted(c for grp in groups for c in grp) == list(range(CHIP.cus))
    left, _right = nar_domain_cus(SPEC, 2)
    geo = chip_geometry(CHIP)
    assert all(geo.router_xy[geo.cu_router[c], 0] < 12 for c in left)


BY_CU = load_topology("nuna-4die-nar-cu")


@pytest.mark.parametrize("g", [2, 3, 4, 6, 12])
def test_a_cus_nar_domain_is_the_one_with_the_nearest_ports_on_average(g: int) -> None:
    geo = chip_geometry(CHIP)
    domains = cu_nar_domains(SPEC, g)
    assert len(domains) == CHIP.cus
    ports = nar_domain_ports(SPEC, g)
    mean = np.stack([geo.cu_port.latency_ns[:, list(p)].mean(axis=1) for p in ports], axis=1)
    assert np.all(mean[np.arange(CHIP.cus), domains] <= mean.min(axis=1) + 1e-6)
    # the same rule groups the CUs for pictures and reports
    assert all(domains[c] == d for d, cus in enumerate(nar_domain_cus(SPEC, g)) for c in cus)


@settings(max_examples=200)
@given(addresses, st.integers(0, CHIP.cus - 1), st.sampled_from([None, 1, 2, 3, 4, 6, 12]))
def test_io_port_by_cu_stays_in_the_cus_domain(addr: int, cu: int, g: int | None) -> None:
    port = io_port(BY_CU, addr, g, cu)
    if g is None or g == 1:
        assert port == io_port(SPEC, addr, g)  # no NAR: the same hash over every port
    else:
        assert port in nar_domain_ports(BY_CU, g)[cu_nar_domains(BY_CU, g)[cu]]
        # the hash within the domain is the address's, as with the choice by address
        assert port % (CHIP.io_ports // g) == io_port(SPEC, addr, g) % (CHIP.io_ports // g)
    assert io_ports_array(BY_CU, [addr], g, [cu]).tolist() == [port]


def test_io_port_by_cu_needs_the_cu() -> None:
    with pytest.raises(TopologyError, match="issuing CU"):
        io_port(BY_CU, 0, 4)
    with pytest.raises(TopologyError, match="issuing CU"):
        io_port(BY_CU, 0, 4, CHIP.cus)
    with pytest.raises(TopologyError, match="issuing CU"):
        io_ports_array(BY_CU, [0], 4)
    with pytest.raises(TopologyError, match="CU outside"):
        io_ports_array(BY_CU, [0], 4, [-1])
    assert io_port(BY_CU, 0, None) == io_port(SPEC, 0, None)  # baseline routing needs none
