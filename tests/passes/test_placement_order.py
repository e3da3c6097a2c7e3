"""Algorithm 1's CU order and its ties: the classes of equally near CUs NAP deals a domain's
threadblocks over, the first-fit rule inside a class (least loaded, spread over routers), and
what that does to NAP and NUMA placements. Expectations are computed here from the topology's
geometry, not from the code under test."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path
from random import Random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.passes import PassContext, apply_config, firstfit
from nuna.passes.nap import domain_cu_classes, nap_placement, spread_class_arrays, spread_classes
from nuna.plan.generate import generate
from nuna.topology.address import nar_domain_ports, nar_granularities
from nuna.topology.geometry import chip_geometry, port_positions
from nuna.topology.spec import TopologySpec, parse_topology

NUNA_4DIE = (Path(__file__).resolve().parents[2] / "topologies" / "nuna-4die.toml").read_text()


def _router_xy(spec: TopologySpec, cu: int) -> tuple[int, int]:
    """(x, y) of a CU's router from the documented numbering: dies in a row, x-major then y."""
    chip = spec.chip
    router = cu // chip.cus_per_router
    per_die = chip.die_cols * chip.die_rows
    die, local = divmod(router, per_die)
    return die * chip.die_cols + local // chip.die_rows, local % chip.die_rows


def test_router_numbering_matches_the_geometry(spec: TopologySpec) -> None:
    # the helper above is what the other tests trust; check it against the port positions
    geo = chip_geometry(spec.chip)
    for k, (x, y) in enumerate(port_positions(spec.chip)):
        nearest = int(np.argmin(geo.cu_port.latency_ns[:, k]))
        assert _router_xy(spec, nearest) == (x, y)


@pytest.mark.parametrize("g", [1, 2, 3, 4, 6, 12])
def test_domain_classes_partition_the_cus_by_mean_then_nearest_port(spec: TopologySpec, g: int) -> None:
    lat = chip_geometry(spec.chip).cu_port.latency_ns
    for ports in nar_domain_ports(spec, g):
        classes = domain_cu_classes(spec, ports)
        assert sorted(c for cls in classes for c in cls) == list(range(spec.chip.cus))
        keys = [(lat[c, list(ports)].mean(), lat[c, list(ports)].min()) for c in range(spec.chip.cus)]
        prev: tuple[float, float] | None = None
        for cls in classes:
            k0 = keys[cls[0]]
            for c in cls:
                assert keys[c] == pytest.approx(k0, abs=1e-6)
            if prev is not None:
                assert prev[0] < k0[0] - 1e-7 or (abs(prev[0] - k0[0]) < 1e-6 and prev[1] < k0[1] - 1e-7)
            prev = k0


@pytest.mark.parametrize("g", [1, 2, 3, 4, 6, 12])
def test_first_class_sits_next_to_the_domains_ports(spec: TopologySpec, g: int) -> None:
    positions = port_positions(spec.chip)
    for ports in nar_domain_ports(spec, g):
        first = domain_cu_classes(spec, ports)[0]
        port_routers = {positions[k] for k in ports}
        assert {_router_xy(spec, c) for c in first} <= port_routers
        xs = {x for x, _ in (positions[k] for k in ports)}
        if len(xs) > 1:  # ports on both short edges: the first class has both edges too
            assert {x for x, _ in (_router_xy(spec, c) for c in first)} == xs


def test_g1_is_both_edges_not_die_0(spec: TopologySpec) -> None:
    first = domain_cu_classes(spec, nar_domain_ports(spec, 1)[0])[0]
    xs = [_router_xy(spec, c)[0] for c in first]
    # the first four choices already alternate between the edges
    assert {xs[0], xs[1], xs[2], xs[3]} == {0, spec.chip.cols - 1}


@pytest.mark.parametrize("g", [1, 4, 12])
def test_spread_order_visits_every_router_before_doubling(spec: TopologySpec, g: int) -> None:
    for ports in nar_domain_ports(spec, g):
        for cls in domain_cu_classes(spec, ports):
            routers = [c // spec.chip.cus_per_router for c in cls]
            n = len(set(routers))
            assert len(set(routers[:n])) == n


def test_spread_classes_groups_equal_costs(spec: TopologySpec) -> None:
    cost = np.zeros(spec.chip.cus)
    cost[::2] = 1.0
    classes = spread_classes(spec, cost)
    assert [len(c) for c in classes] == [spec.chip.cus - spec.chip.cus // 2, spec.chip.cus // 2]
    assert all(c % 2 == 1 for c in classes[0])


_SPECS = {per_router: parse_topology(re.sub(r"(?m)^(cus_per_router = \{ value = )[^,]+",
                                             rf"\g<1>{per_router}", NUNA_4DIE), f"cus-{per_router}.toml")
          for per_router in (1, 3, 7)}


def _reference_spread(spec: TopologySpec, *keys: np.ndarray) -> list[list[int]]:
    """The spread order written out: classes of equal rounded keys, nearest first; within a
    class, the first CU (by index) of every router (by index), then the second, and so on."""
    per_router = spec.chip.cus_per_router
    key_of = [tuple(round(float(k[c]), 6) for k in keys) for c in range(spec.chip.cus)]
    out = []
    for value in sorted(set(key_of)):
        members = [c for c in range(spec.chip.cus) if key_of[c] == value]
        rank = {c: sum(1 for d in members if d // per_router == c // per_router and d < c) for c in members}
        out.append(sorted(members, key=lambda c: (rank[c], c // per_router)))
    return out


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(_SPECS)), st.integers(1, 6), st.integers(1, 60), st.booleans(), st.randoms())
def test_spread_classes_and_their_arrays_follow_the_rule(per_router: int, rows: int, levels: int,
                                                          fractional: bool, rnd: Random) -> None:
    spec = _SPECS[per_router]
    n = spec.chip.cus
    # few levels make many ties; keys that differ below 1e-6 ns are one class
    keys = np.array([[rnd.randrange(levels) * 0.37 + (rnd.random() * 1e-8 if fractional else 0.0)
                      for _ in range(n)] for _ in range(rows)])
    want = [_reference_spread(spec, k) for k in keys]
    cand, ptr, bounds = spread_class_arrays(spec, keys)
    assert cand.dtype == ptr.dtype == bounds.dtype == np.int64
    got = [[cand[ptr[c]:ptr[c + 1]].tolist() for c in range(bounds[r], bounds[r + 1])] for r in range(rows)]
    assert got == want
    assert [list(map(list, spread_classes(spec, k))) for k in keys] == want
    # two keys: the second breaks the first's ties
    both = keys[0], keys[-1]
    assert list(map(list, spread_classes(spec, *both))) == _reference_spread(spec, *both)


@st.composite
def _scenario(draw: st.DrawFn) -> tuple[tuple[tuple[int, ...], ...], list[int], int]:
    n = draw(st.integers(1, 12))
    perm = draw(st.permutations(range(n)))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    classes = tuple(tuple(perm[a:b]) for a, b in pairwise(bounds))
    demands = draw(st.lists(st.integers(1, 12), min_size=1, max_size=40))
    return classes, demands, draw(st.integers(1, 20))


class _Compiled:
    """The compiled first-fit helpers (``nuna.passes.firstfit``) over resources ``0..n-1`` of
    two GPUs, with what ``place_nap`` keeps between calls: loads, touched marks, class memos."""

    def __init__(self, budget: int, n: int, lists: int) -> None:
        self.budget = budget
        self.load = np.zeros((2, n), dtype=np.int64)
        self.touched = np.zeros((2, n), dtype=np.bool_)
        self.memo = np.zeros((2, lists), dtype=np.int64)

    def take(self, gpu: int, classes: tuple[tuple[int, ...], ...], demand: int, key: int
             ) -> tuple[int, bool, int]:
        cand, ptr, _ = firstfit.class_arrays([classes])
        r, fitted, least = firstfit._take(self.load, self.touched, gpu, cand, ptr, 0, len(classes), self.memo,
                                          key, self.budget, demand)
        return int(r), bool(fitted), int(least)

    def take_other(self, gpu: int, order: tuple[int, ...], demand: int, taken: tuple[int, ...]
                   ) -> tuple[int, bool, int]:
        arr = np.asarray(order, dtype=np.int64)
        got = np.asarray((*taken, 0), dtype=np.int64)  # never empty
        r, fitted, least = firstfit._take_other(self.load, self.touched, gpu, arr, len(order), got,
                                                len(taken), self.budget, demand)
        return int(r), bool(fitted), int(least)

    def charge(self, gpu: int, r: int, amount: int) -> None:  # as place_nap charges a stack
        if amount:
            self.load[gpu, r] += amount
            self.touched[gpu, r] = True

    def loads(self) -> tuple[tuple[int, int, int], ...]:
        rows, cols = np.nonzero(self.touched)
        return tuple((int(g), int(r), int(self.load[g, r])) for g, r in zip(rows, cols, strict=True))


@settings(max_examples=200, deadline=None)
@given(_scenario())
def test_first_fit_takes_the_least_loaded_of_the_nearest_class_with_room(
        case: tuple[tuple[tuple[int, ...], ...], list[int], int]) -> None:
    classes, demands, budget = case
    ff = _Compiled(budget, sum(len(c) for c in classes), 1)
    load: dict[int, int] = defaultdict(int)
    where = {r: (i, j) for i, cls in enumerate(classes) for j, r in enumerate(cls)}
    for d in demands:
        before = dict(load)
        r, fitted, least = ff.take(0, classes, d, 0)
        fits = [c for c in where if before.get(c, 0) + d <= budget]
        if fits:
            assert fitted
            ci, cj = where[r]
            assert before.get(r, 0) + d <= budget
            assert all(where[c][0] >= ci for c in fits)  # no nearer class had room
            same = [c for c in fits if where[c][0] == ci]
            assert (before.get(r, 0), cj) == min((before.get(c, 0), where[c][1]) for c in same)
            assert least == before.get(r, 0)
        else:
            assert not fitted
            low = min(before.get(c, 0) for c in where)
            assert before.get(r, 0) == low == least
            assert where[r] == min(where[c] for c in where if before.get(c, 0) == low)
        load[r] += d
    assert ff.loads() == tuple((0, r, v) for r, v in sorted(load.items()))


def test_nap_gives_each_threadblock_of_a_group_its_own_cu(spec: TopologySpec) -> None:
    # 8-GPU direct allgather, one threadblock per peer, 100 kB: a threadblock needs 98 of a
    # CU's 700 requests, so first-fit in index order would stack all seven on one CU
    plan = generate("allgather", 8, tbs_per_peer=1)
    r = nap_placement(plan, spec, 100_000, 4)
    per_gpu: dict[int, list[int]] = defaultdict(list)
    for t in r.threadblocks:
        per_gpu[t.gpu].append(t.cu)
    assert all(demand <= r.cu_budget // 7 for _, _, demand in r.tb_demand)
    for gpu, cus in per_gpu.items():
        assert len(set(cus)) == len(cus), gpu
        domain = {d for g, _, d in r.tb_domain if g == gpu}
        assert len(domain) == 1
        first = domain_cu_classes(spec, nar_domain_ports(spec, 4)[domain.pop()])[0]
        assert set(cus) <= set(first)


def test_nap_at_g1_places_outwards_on_both_edges(spec: TopologySpec) -> None:
    plan = generate("allgather", 8, tbs_per_peer=1)
    r = nap_placement(plan, spec, 1_000_000, 1)
    edges = {0, spec.chip.cols - 1}
    per_gpu: dict[int, set[int]] = defaultdict(set)
    for t in r.threadblocks:
        x = _router_xy(spec, t.cu)[0]
        assert x in edges
        per_gpu[t.gpu].add(x)
    assert all(xs == edges for xs in per_gpu.values())


def test_numa_does_not_stack_threadblocks_while_a_same_router_cu_is_free(spec: TopologySpec) -> None:
    plan = generate("allgather", 8, tbs_per_peer=4)
    placed = apply_config(plan, "NUMA", PassContext(spec, 100_000))
    per = spec.chip.cus_per_router
    count: dict[int, Counter[int]] = defaultdict(Counter)
    for t in placed.placement.threadblocks:
        count[t.gpu][t.cu] += 1
    for gpu, cus in count.items():
        for cu, n in cus.items():
            if n > 1:
                router = cu // per
                assert all(cus[c] > 0 for c in range(router * per, (router + 1) * per)), (gpu, cu)


def test_every_granularity_places_every_threadblock(spec: TopologySpec) -> None:
    plan = generate("allgather", 4, tbs_per_peer=2)
    for g in nar_granularities(spec):
        r = nap_placement(plan, spec, plan.nchunksperloop * 5000, g)
        assert len(r.threadblocks) == sum(len(x.threadblocks) for x in plan.gpus)


def _classes(draw: st.DrawFn, n: int) -> tuple[tuple[int, ...], ...]:
    members = draw(st.permutations(range(n)))[:draw(st.integers(1, n))]
    cuts = sorted(draw(st.sets(st.integers(1, len(members) - 1), max_size=len(members) - 1))) \
        if len(members) > 1 else []
    return tuple(tuple(members[a:b]) for a, b in pairwise([0, *cuts, len(members)]))


@st.composite
def _mixed(draw: st.DrawFn) -> tuple[int, list[tuple[tuple[int, ...], ...]], list[tuple[object, ...]]]:
    n = draw(st.integers(1, 14))
    lists = [_classes(draw, n) for _ in range(draw(st.integers(1, 3)))]
    op = st.one_of(
        st.tuples(st.just("take"), st.integers(0, len(lists) - 1), st.integers(0, 1), st.integers(0, 9)),
        st.tuples(st.just("other"), st.integers(0, len(lists) - 1), st.integers(0, 1), st.integers(0, 9),
                  st.sets(st.integers(0, n - 1), max_size=3)),
        st.tuples(st.just("charge"), st.integers(0, 1), st.integers(0, n - 1), st.integers(0, 9)))
    return draw(st.integers(1, 20)), lists, draw(st.lists(op, min_size=1, max_size=60))


def _least_first(load: dict[int, int], classes: tuple[tuple[int, ...], ...]) -> tuple[int, int]:
    """(resource, load) of the least-loaded candidate, the earliest among equals."""
    flat = [r for cls in classes for r in cls]
    low = min(load.get(r, 0) for r in flat)
    return next(r for r in flat if load.get(r, 0) == low), low


@settings(max_examples=300, deadline=None)
@given(_mixed())
def test_first_fit_with_shared_resources_and_charges_chooses_as_specified(
        case: tuple[int, list[tuple[tuple[int, ...], ...]], list[tuple[object, ...]]]) -> None:
    # several candidate lists over the same resources of a GPU (a domain's CU classes, the
    # stack orders), charges between choices and spread takes: the compiled first fit keeps a
    # first-class pointer per list, which must never make it choose other than the rule
    budget, lists, ops = case
    ff = _Compiled(budget, 14, len(lists))
    loads: dict[int, dict[int, int]] = {0: {}, 1: {}}
    for op in ops:
        if op[0] == "charge":
            _, gpu, r, amount = op
            ff.charge(gpu, r, amount)
            if amount:  # a zero charge records nothing
                loads[gpu][r] = loads[gpu].get(r, 0) + amount
            continue
        kind, which, gpu, d = op[:4]
        load = loads[gpu]
        classes = lists[which]
        if kind == "take":
            got = ff.take(gpu, classes, d, which)
            # a class has room when a candidate is below the budget and fits the demand
            room = [cls for cls in classes if any(load.get(r, 0) < budget for r in cls)]
            fitting = [cls for cls in room if min(load.get(r, 0) for r in cls) + d <= budget]
        else:
            # spread takes run over stack orders: one candidate per class
            taken = tuple(op[4])
            order = tuple(r for cls in classes for r in cls)
            classes = tuple((r,) for r in order if r not in taken)
            if not classes:
                continue
            got = ff.take_other(gpu, order, d, taken)
            fitting = [cls for cls in classes if min(load.get(r, 0) for r in cls) + d <= budget]
        if fitting:
            r, low = _least_first(load, fitting[:1])
            assert got == (r, True, low)
        else:
            r, low = _least_first(load, classes)
            assert got == (r, False, low)
        load[r] = low + d
    assert ff.loads() == tuple(sorted((g, r, v) for g, load in loads.items() for r, v in load.items()))
