"""The pass framework and every pass on random generated plans: the result verifies, computes
the same thing, round-trips through XML and is deterministic; NAP respects its budgets; the
registry is consistent. (The shared corpus is in test_corpus.py.)"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna.errors import PassError, PlanError
from nuna.passes import CONFIGS, PASSES, NapPass, NarPass, PassContext, apply_config, run_pipeline
from nuna.passes.access import decompose
from nuna.passes.base import replace_placement
from nuna.passes.configs import apply_choice, choose_granularity
from nuna.passes.nap import nap_placement
from nuna.plan.generate import generate
from nuna.plan.ir import Buffer, Plan, TbPlacement
from nuna.plan.verify import chunk_bytes_for, verify
from nuna.plan.xml import dump, loads
from nuna.topology.address import nar_domain_stacks, nar_granularities
from nuna.topology.spec import TopologySpec


def test_registry_names_match() -> None:
    assert PASSES
    for key, cls in PASSES.items():
        assert key == cls.name
    assert set(CONFIGS) == {"UA", "UA+NAR", "NUMA", "NUMA+NAR", "NAP", "NAP+NAR", "NAP*", "NAP*+NAR"}
    for key, cfg in CONFIGS.items():
        assert key == cfg.name


def _size(plan: Plan, target: int = 1_000_000) -> int:
    n = plan.nchunksperloop
    return max(n, target - target % n)



def test_pipeline_verifies_and_observes(spec: TopologySpec) -> None:
    plan = generate("allgather", 4, tbs_per_peer=2)
    ctx = PassContext(spec, _size(plan))
    seen: list[tuple[str, int | None]] = []
    out = run_pipeline(plan, [NarPass(4), NapPass()], ctx,
                       observe=lambda p, q: seen.append((p.name, q.placement.nar_granularity)))
    assert seen == [("nar", 4), ("nap", 4)]
    assert out.placement.nar_granularity == 4
    assert out.placement.chunks


def test_pipeline_rejects_a_bad_input_and_a_bad_pass(spec: TopologySpec) -> None:
    plan = generate("allgather", 3)
    tb = plan.gpus[0].threadblocks[0]
    # a threadblock that lost its receive: the connection's send and receive counts differ
    short = dataclasses.replace(tb, steps=tb.steps[:1])
    gpu0 = dataclasses.replace(plan.gpus[0], threadblocks=(short, *plan.gpus[0].threadblocks[1:]))
    broken = dataclasses.replace(plan, gpus=(gpu0, *plan.gpus[1:]))
    ctx = PassContext(spec, _size(plan))
    with pytest.raises(PlanError):
        run_pipeline(broken, [NapPass()], ctx)

    @dataclasses.dataclass(frozen=True)
    class Meddler:
        name = "meddler"

        def run(self, plan: Plan, ctx: PassContext) -> Plan:
            return dataclasses.replace(plan, name=plan.name + "x")

    with pytest.raises(PassError, match="meddler"):
        run_pipeline(plan, [Meddler()], ctx)  # type: ignore[list-item]

    @dataclasses.dataclass(frozen=True)
    class Misplacer:
        name = "misplacer"

        def run(self, plan: Plan, ctx: PassContext) -> Plan:
            return replace_placement(plan, ctx, threadblocks=(TbPlacement(0, 99, 0),))

    # the program is unchanged, so only the placement is checked again: and it is wrong
    with pytest.raises(PlanError, match="gpu 0 tb 99 does not exist"):
        run_pipeline(plan, [Misplacer()], ctx)  # type: ignore[list-item]
    assert run_pipeline(plan, [Misplacer()], ctx, check=False).placement.threadblocks[0].tb == 99  # type: ignore[list-item]


def test_bad_options(spec: TopologySpec) -> None:
    plan = generate("allgather", 3)
    ctx = PassContext(spec, _size(plan))
    with pytest.raises(PassError):
        NarPass(5).run(plan, ctx)
    with pytest.raises(PassError):
        NapPass(domains=7).run(plan, ctx)
    routed = NarPass(4).run(plan, ctx)
    with pytest.raises(PassError, match="granularity 4"):
        NapPass(domains=6).run(routed, ctx)
    with pytest.raises(PassError):
        PassContext(spec, 0)


# --- random generated plans --------------------------------------------------------------------

def _make(coll: str, algo: str, n: int, par: int, mult: int) -> Plan:
    if algo == "direct":
        return generate(coll, n, algo="direct", tbs_per_peer=par, chunks_per_peer=par * mult)
    return generate(coll, n, algo="ring", channels=par, chunks_per_peer=par * mult)


plans = st.builds(
    _make,
    st.sampled_from(["allgather", "allreduce", "reducescatter", "alltoall"]),
    st.sampled_from(["direct", "ring"]),
    st.integers(2, 6), st.integers(1, 3), st.integers(1, 2))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans, kb=st.integers(1, 4000), config=st.sampled_from(sorted(CONFIGS)))
def test_every_config_preserves_semantics(spec: TopologySpec, plan: Plan, kb: int, config: str) -> None:
    ctx = PassContext(spec, _size(plan, kb * 1000))
    out = apply_config(plan, config, ctx)
    assert dataclasses.replace(out, placement=plan.placement) == plan
    report = verify(out, strict=False)
    assert report.ok, report.errors[:3]
    assert out.placement.config == config
    assert loads(dump(out), "x") == out
    assert apply_config(plan, config, ctx) == out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans, kb=st.integers(1, 20000), g=st.sampled_from([1, 2, 3, 4, 6, 12]),
       memory=st.booleans())
def test_nap_respects_budgets(spec: TopologySpec, plan: Plan, kb: int, g: int, memory: bool) -> None:
    size = _size(plan, kb * 1000)
    r = nap_placement(plan, spec, size, g, place_memory=memory)
    # the reported loads are exactly the sums of the demands placed
    cu_of = {(t.gpu, t.tb): t.cu for t in r.threadblocks}
    load: dict[tuple[int, int], int] = defaultdict(int)
    for gpu, tb, demand in r.tb_demand:
        assert 0 < demand <= r.cu_budget or demand == 0
        load[(gpu, cu_of[(gpu, tb)])] += demand
    assert tuple((a, b, v) for (a, b), v in sorted(load.items())) == r.cu_load
    # every access of a threadblock to a placed chunk charges each of the chunk's stacks its share
    stacks_of: dict[tuple[int, Buffer, int], list[int]] = {}
    for c in r.chunks:
        stacks_of.setdefault((c.gpu, c.buffer, c.chunk), []).append(c.stack)
    stack_load: dict[tuple[int, int], int] = defaultdict(int)
    accesses: Counter[tuple[int, Buffer, int]] = Counter()
    if memory:
        for w in decompose(plan):
            for c in w.chunks:
                key = (c.gpu, c.buffer, c.chunk)
                accesses[key] += 1
                placed = stacks_of.get(key, [])
                for stack in placed:
                    stack_load[(c.gpu, stack)] += -(-r.chunk_demand_bytes // len(placed))
    assert tuple((a, b, v) for (a, b), v in sorted(stack_load.items())) == r.stack_load
    # a chunk is spread over as many distinct stacks as its accesses' demand needs: one when it
    # fits one stack's budget, never more than its pages or its domain's stacks
    pages = -(-chunk_bytes_for(plan, size) // spec.chip.page_bytes)
    domains = nar_domain_stacks(spec, g)
    dom_of = {}
    for grp, d in zip(r.groups, r.group_domain, strict=True):
        for c in grp.chunks:
            dom_of[(c.gpu, c.buffer, c.chunk)] = d
    for key, stacks in stacks_of.items():
        assert len(set(stacks)) == len(stacks)
        need = -(-accesses[key] * r.chunk_demand_bytes // r.stack_budget)
        assert len(stacks) == min(need, pages, len(domains[dom_of[key]]))
    # a CU budget is exceeded only where every CU was too full for the threadblock
    over_cu = {o.gpu for o in r.overflows if o.kind == "cu"}
    for (gpu, _cu), v in load.items():
        if v > r.cu_budget:
            assert gpu in over_cu
    max_demand = max((d for _, _, d in r.tb_demand), default=0)
    for gpu in over_cu:
        for cu in range(spec.chip.cus):
            assert load.get((gpu, cu), 0) > r.cu_budget - max_demand
    # an overflow happens only when no candidate had room at that moment
    for o in r.overflows:
        budget = r.cu_budget if o.kind == "cu" else r.stack_budget
        assert o.least_load + o.demand > budget
    # every group's chunks are in its domain's stacks; NAP* places no memory
    if not memory:
        assert r.chunks == ()
    for c in r.chunks:
        assert c.stack in domains[dom_of[(c.gpu, c.buffer, c.chunk)]]
    # every accessed chunk is placed (memory on), each on its stacks
    if memory:
        accessed = {(c.gpu, c.buffer, c.chunk) for w in decompose(plan) for c in w.chunks}
        assert set(stacks_of) == accessed


@pytest.mark.parametrize("config", sorted(c for c in CONFIGS if c.endswith("+NAR")))
def test_heuristic_placer_matches_the_pipeline(spec: TopologySpec, config: str) -> None:
    from nuna.passes.configs import _placer, get_config

    plan = generate("allgather", 4, tbs_per_peer=2)
    ctx = PassContext(spec, _size(plan, 100_000))
    cfg = get_config(config)
    place = _placer(plan, cfg, ctx)
    for g in nar_granularities(spec):
        assert place(g) == run_pipeline(plan, cfg.passes(g), ctx, check=False), g


@pytest.mark.parametrize("config", sorted(c for c in CONFIGS if c.endswith("+NAR")))
@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_apply_config_keeps_the_heuristics_plan_only_when_it_is_the_pipelines(
        spec: TopologySpec, config: str, collective: str) -> None:
    # without an observer apply_config returns the plan the heuristic placed at the chosen G;
    # an observer makes it run the pipeline again: the two must be the same plan
    plan = generate(collective, 4, tbs_per_peer=2)
    ctx = PassContext(spec, _size(plan, 100_000))
    seen: list[str] = []
    piped = apply_config(plan, config, ctx, observe=lambda p, _out: seen.append(p.name))
    assert seen
    assert apply_config(plan, config, ctx) == piped
    assert piped.placement.config == config


@pytest.mark.parametrize("config", ["UA", "NAP+NAR", "NUMA+NAR", "UA+NAR"])
def test_apply_choice_places_once_and_gives_apply_configs_plan(
        spec: TopologySpec, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # nuna rewrite / diff / demo choose G, report it, then apply that choice: the heuristic's
    # placements are not made again
    import nuna.passes.configs as configs

    plan = generate("allgather", 4, tbs_per_peer=2)
    ctx = PassContext(spec, _size(plan, 100_000))
    expected = apply_config(plan, config, ctx)
    choice = choose_granularity(plan, config, ctx)
    calls: list[int | None] = []
    real = configs._place
    monkeypatch.setattr(configs, "_place", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    assert apply_choice(plan, config, ctx, choice) == expected
    assert calls == ([] if choice.placed is not None else [choice.granularity])
    assert (choice.placed is not None) == config.endswith("+NAR")


def test_apply_config_checks_the_kept_plan(spec: TopologySpec, monkeypatch: pytest.MonkeyPatch) -> None:
    # a placer that changed the program is caught on the kept path as in the pipeline
    import nuna.passes.configs as configs

    plan = generate("allgather", 4, tbs_per_peer=1)
    ctx = PassContext(spec, _size(plan, 100_000))
    real = configs._placer

    def broken(p: Plan, cfg, c):  # type: ignore[no-untyped-def]
        place = real(p, cfg, c)
        return lambda g: dataclasses.replace(place(g), name="not the same program")

    monkeypatch.setattr(configs, "_placer", broken)
    with pytest.raises(PassError, match="changed the plan's program"):
        apply_config(plan, "UA+NAR", ctx)


def test_nap_spreads_a_chunk_read_by_many_over_the_nearest_stacks(spec: TopologySpec) -> None:
    # 8-GPU direct allgather, one threadblock per peer, 1 MiB: each GPU's own 128 KiB slice is
    # read by its seven senders, 7 x 120 kB of demand, so seven stacks (docs/passes.md)
    from nuna.topology.address import stacks_by_distance

    plan = generate("allgather", 8, algo="direct", tbs_per_peer=1)
    r = nap_placement(plan, spec, 1 << 20, 1)
    key = (r.chunks[0].gpu, r.chunks[0].buffer, r.chunks[0].chunk)
    stacks = [c.stack for c in r.chunks if (c.gpu, c.buffer, c.chunk) == key]
    readers = [w for w in decompose(plan) if any((c.gpu, c.buffer, c.chunk) == key for c in w.chunks)]
    assert len(readers) >= 7
    assert len(stacks) == min(-(-len(readers) * r.chunk_demand_bytes // r.stack_budget), 16)
    cu = next(t.cu for t in r.threadblocks if (t.gpu, t.tb) == (readers[0].gpu, readers[0].tb))
    assert stacks == list(stacks_by_distance(spec, cu)[:len(stacks)])  # nearest first, all free
    # a chunk that fits one stack's budget keeps one stack (8 KiB chunks at 16 per peer)
    small = nap_placement(generate("allgather", 8, algo="direct", tbs_per_peer=16), spec, 1 << 20, 4)
    assert len({(c.gpu, c.buffer, c.chunk) for c in small.chunks}) == len(small.chunks)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_plan_whose_ngpus_disagrees_with_its_gpus_is_refused_by_every_configuration(
        spec: TopologySpec, config: str) -> None:
    # the NAR heuristic walked such a plan before any check and indexed past its arrays
    plan = generate("allgather", 3)
    bad = dataclasses.replace(plan, ngpus=2)
    with pytest.raises(PlanError, match="ngpus=2 but the plan has 3 <gpu> elements"):
        apply_config(bad, config, PassContext(spec, 1 << 16))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.sampled_from(sorted(CONFIGS)), second=st.sampled_from(sorted(CONFIGS)),
       collective=st.sampled_from(["allgather", "alltoall"]), gpus=st.sampled_from([2, 4]))
def test_a_configuration_replaces_the_placement_a_plan_carries(
        spec: TopologySpec, first: str, second: str, collective: str, gpus: int) -> None:
    # a rewritten plan rewritten again: the second configuration's placement and routing alone,
    # as on the bare plan (a NAR granularity left by a +NAR rewrite used to route UA/NAP/NUMA)
    plan = generate(collective, gpus, tbs_per_peer=2)
    ctx = PassContext(spec, _size(plan))
    placed = apply_config(plan, first, ctx)
    again = apply_config(placed, second, ctx)
    assert again.placement == apply_config(plan, second, ctx).placement
    assert (again.placement.nar_granularity is None) is not CONFIGS[second].nar


def test_a_nar_rewrite_then_ua_routes_over_every_port(spec: TopologySpec) -> None:
    plan = generate("allgather", 4, tbs_per_peer=2)
    ctx = PassContext(spec, _size(plan))
    nap = apply_config(plan, "NAP+NAR", ctx)
    assert nap.placement.nar_granularity is not None
    choice = choose_granularity(nap, "UA", ctx)
    for out in (apply_config(nap, "UA", ctx), apply_choice(nap, "UA", ctx, choice)):
        assert out.placement.nar_granularity is None
        assert out.placement == apply_config(plan, "UA", ctx).placement
