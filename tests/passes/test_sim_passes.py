"""The passes against the simulator: UA is exactly the simulator's baseline, NAR confines
traffic to its domains' ports, ``auto`` picks the fastest granularity, and ``nuna diff`` /
``nuna demo`` report what the simulator measured."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from nuna.passes import PassContext, apply_config, choose_granularity
from nuna.passes.access import remote_stores
from nuna.passes.nar import estimate
from nuna.passes.report import compare, format_comparison
from nuna.plan.generate import generate
from nuna.plan.ir import ChunkPlacement, Plan
from nuna.plan.wire import protocol_wire
from nuna.plan.xml import dump, load
from nuna.sim.replay import SimOptions, simulate
from nuna.topology.address import cu_nar_domains, nar_domain_ports, nar_domain_stacks, nar_granularities
from nuna.topology.spec import TopologySpec, load_topology
from tests.conftest import PLANS_MSCCL, CliResult

FIG7 = PLANS_MSCCL / "allgather_allpairs_n2_i2_LL128.xml"


def _deterministic(result_json: dict[str, object]) -> dict[str, object]:
    """The result without what measures the run itself or records provenance."""
    return {k: v for k, v in result_json.items() if k not in ("run", "wall_s", "events_per_s", "config")}


@pytest.mark.parametrize(("coll", "n", "k"), [("allgather", 4, 2), ("allreduce", 3, 1), ("alltoall", 4, 1)])
def test_ua_is_the_simulators_baseline(spec: TopologySpec, coll: str, n: int, k: int) -> None:
    plan = generate(coll, n, tbs_per_peer=k)
    size = plan.nchunksperloop * 3000
    ua = apply_config(plan, "UA", PassContext(spec, size))
    assert len(ua.placement.threadblocks) == sum(len(g.threadblocks) for g in plan.gpus)
    assert not ua.placement.chunks
    assert ua.placement.nar_granularity is None
    base = simulate(plan, spec, size)
    annotated = simulate(ua, spec, size)
    assert _deterministic(annotated.to_json()) == _deterministic(base.to_json())


@pytest.mark.skipif(not FIG7.is_file(), reason="shared plan corpus not available")
def test_nar_uses_only_its_domains_ports(spec: TopologySpec) -> None:
    plan = load(FIG7)
    size = 65536  # 16 KiB chunks: whole pages, so no page is shared between groups
    g = nar_granularities(spec)[-1]
    routed = apply_config(plan, "NAP+NAR", PassContext(spec, size), g)
    r = simulate(routed, spec, size)
    # four groups, dealt to domains 0-3: only those domains' ports carry traffic, on both GPUs
    used = sorted({p for d in range(4) for p in nar_domain_ports(spec, g)[d]})
    unused = [p for p in range(spec.chip.io_ports) if p not in used]
    assert r.port_egress_bytes[:, unused].sum() == 0
    assert r.port_ingress_bytes[:, unused].sum() == 0
    assert (r.port_egress_bytes[:, used].sum(axis=0) > 0).all()
    # every 256-byte line crosses a port with its LL128 flags (nuna.plan.wire)
    per_line = protocol_wire(plan.protocol).wire_bytes(256)
    assert int(r.port_egress_bytes.sum()) == r.remote_bytes // 256 * per_line
    # without NAR the same placement hashes over every port
    hashed = simulate(apply_config(plan, "NAP", PassContext(spec, size)), spec, size)
    assert (hashed.port_egress_bytes.sum(axis=0) > 0).all()


@pytest.mark.parametrize("g", [2, 12])
def test_nar_by_cu_uses_only_the_ports_of_each_storing_cus_domain(spec: TopologySpec, g: int) -> None:
    by_cu = load_topology("nuna-4die-nar-cu")
    plan = generate("allgather", 4, tbs_per_peer=2)
    size = plan.nchunksperloop * 8192
    placed = apply_config(plan, "UA+NAR", PassContext(by_cu, size), g)
    r = simulate(placed, by_cu, size)
    domains = cu_nar_domains(by_cu, g)
    for gi, gpu in enumerate(placed.gpus):
        cus = [t.cu for t in placed.placement.threadblocks if t.gpu == gpu.id]
        allowed = {p for cu in cus for p in nar_domain_ports(by_cu, g)[domains[cu]]}
        assert {int(p) for p in r.port_egress_bytes[gi].nonzero()[0]} <= allowed
    assert int(r.port_egress_bytes.sum()) == r.remote_bytes
    # the heuristic's port model follows the same rule; with one port per domain it is exact
    est = estimate(placed, by_cu, size)
    busiest = max(int(r.port_egress_bytes.max()), int(r.port_ingress_bytes.max()))
    if g == by_cu.chip.io_ports:
        assert est.max_port_bytes == busiest
    else:
        assert est.max_port_bytes <= busiest * 1.5
    # choosing ports by address spreads the same placement over other ports; without NAR the
    # two topologies are the same machine
    by_address = simulate(placed, spec, size)
    assert not (by_address.port_egress_bytes == r.port_egress_bytes).all()
    base = apply_config(plan, "UA", PassContext(by_cu, size))
    assert simulate(base, by_cu, size).time_ns == simulate(base, spec, size).time_ns


def test_auto_picks_the_fastest_simulated_granularity(spec: TopologySpec) -> None:
    plan = generate("allgather", 3, tbs_per_peer=2)
    ctx = PassContext(spec, plan.nchunksperloop * 2048)
    choice = choose_granularity(plan, "NAP+NAR", ctx, "auto")
    assert [g for g, _ in choice.simulated_ns] == list(nar_granularities(spec))
    best = min(t for _, t in choice.simulated_ns)
    assert dict(choice.simulated_ns)[choice.granularity] == best  # type: ignore[index]
    placed = apply_config(plan, "NAP+NAR", ctx, "auto")
    assert placed.placement.nar_granularity == choice.granularity
    assert simulate(placed, spec, ctx.size_bytes).time_ns == best


def test_auto_picks_in_the_replay_it_is_given(spec: TopologySpec) -> None:
    # an LL plan in 1 KiB packets, replayed as Simple: each candidate is timed as the placed plan
    # will be replayed, not with the simulator's defaults
    plan = generate("allgather", 3, tbs_per_peer=2, protocol="LL")
    ctx = PassContext(spec, plan.nchunksperloop * 4096)
    opts = SimOptions(protocol_model="simple")
    choice = choose_granularity(plan, "UA+NAR", ctx, "auto", packet_bytes=1024, options=opts)
    default = choose_granularity(plan, "UA+NAR", ctx, "auto")
    for g, t in choice.simulated_ns:
        placed = apply_config(plan, "UA+NAR", ctx, g)
        assert t == simulate(placed, spec, ctx.size_bytes, packet_bytes=1024, options=opts).time_ns
    assert choice.simulated_ns != default.simulated_ns
    placed = apply_config(plan, "UA+NAR", ctx, "auto", packet_bytes=1024, options=opts)
    assert placed.placement.nar_granularity == choice.granularity


def test_compare_reports_the_simulation(spec: TopologySpec) -> None:
    plan = generate("allgather", 4, tbs_per_peer=1)
    size = plan.nchunksperloop * 4096
    c = compare(plan, spec, size, ["UA", "UA", "NAP+NAR"], 4)
    ua, ua2, nap = c.rows
    assert ua.speedup == 1.0
    assert ua2.time_ns == ua.time_ns
    assert ua2.threadblocks_moved == 0
    assert ua2.pages_moved == 0
    ref = simulate(apply_config(plan, "NAP+NAR", PassContext(spec, size), 4), spec, size)
    assert nap.time_ns == ref.time_ns
    assert nap.speedup == pytest.approx(ua.time_ns / ref.time_ns)
    assert nap.latency_mean_ns == ref.remote_store_latency.mean_ns
    assert nap.latency_zero_load_ns == ref.remote_store_zero_load_ns["total"] > 0
    assert nap.die_crossing_bytes == ref.die_crossing_bytes
    assert nap.remote_store_sender_hops == ref.noc_hops["remote_store_sender_mean"]
    assert nap.remote_store_receiver_hops == ref.noc_hops["remote_store_receiver_mean"]
    assert "sender: CU -> I/O port" in format_comparison(c)
    # G given: no word on the heuristic; left to it, the table says how to search instead
    assert "(heuristic)" not in format_comparison(c)
    chosen = compare(plan, spec, size, ["UA", "NAP+NAR"])
    assert chosen.rows[1].granularity_method == "heuristic"
    assert format_comparison(chosen).endswith("-g auto simulates every G and keeps the fastest")
    assert nap.wait_port_out_ns == ref.queueing.get("port_to_mesh", {}).get("mean", 0.0)
    assert nap.longest_port_wait == ref.longest_port_wait()
    if ref.longest_port_wait() is not None:
        gpu, port, link, wait_ns = nap.longest_port_wait  # type: ignore[misc]
        assert f"{wait_ns:.1f} (GPU {gpu} port {port}, {link})" in format_comparison(c)
    assert sum(nap.tbs_per_domain) == sum(len(g.threadblocks) for g in plan.gpus)
    assert nap.domains_counted == 4
    assert nap.ports_used == int((ref.port_egress_bytes > 0).sum())
    eg = ref.port_egress_bytes
    assert nap.port_balance == pytest.approx(eg.max() / eg.mean())
    assert 0 < nap.threadblocks_moved <= sum(nap.tbs_per_domain)
    assert nap.pages_moved > 0
    doc = c.to_json()
    assert [r["config"] for r in doc["configs"]] == ["UA", "UA", "NAP+NAR"]
    hot = ua.longest_port_wait
    assert doc["configs"][0]["longest_port_wait"] == (None if hot is None else {
        "gpu": hot[0], "port": hot[1], "link": hot[2], "queueing_ns_mean": hot[3]})
    assert json.loads(json.dumps(doc)) == doc


def test_cli_diff(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    plan_file = tmp_path / "p.xml"
    plan_file.write_text(dump(generate("allgather", 3)))
    out = tmp_path / "d.json"
    r = cli("diff", plan_file, "--size", "24KiB", "--configs", "UA,UA+NAR,NAP+NAR", "-g", "2", "--json", out)
    assert r.code == 0, r.err
    doc = json.loads(out.read_text())
    assert [c["config"] for c in doc["configs"]] == ["UA", "UA+NAR", "NAP+NAR"]
    assert doc["configs"][1]["nar_granularity"] == 2
    assert doc["configs"][0]["speedup"] == 1.0
    for c in doc["configs"]:
        assert c["config"] in r.out
    # the floor no configuration beats, and how far the first one is from it
    assert 0 < doc["placement_floor_ns"] <= min(c["time_ns"] for c in doc["configs"])
    ratio = doc["configs"][0]["time_ns"] / doc["placement_floor_ns"]
    assert f"more than {ratio:.2f}x faster than UA" in r.out
    # and what share of that distance each configuration closes
    ua, floor = doc["configs"][0]["time_ns"], doc["placement_floor_ns"]
    for c in doc["configs"]:
        assert c["headroom_taken"] == pytest.approx((ua - c["time_ns"]) / (ua - floor))
    nap = doc["configs"][2]["headroom_taken"]
    assert f"NAP+NAR {nap * 100:.0f}%" in r.out
    assert doc["packet_bytes"] == 256
    assert doc["replay"] == {"reduce_fusion": True, "executor_slices": False, "protocol_model": "plan",
                             "flow_control": True}
    bad = cli("diff", plan_file, "--size", "24KiB", "--configs", "UA,XYZ")
    assert bad.code == 1
    assert "unknown config" in bad.err


def test_cli_diff_replays_with_the_options_given(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    plan = generate("allreduce", 3, protocol="LL")
    plan_file = tmp_path / "p.xml"
    plan_file.write_text(dump(plan))
    out = tmp_path / "d.json"
    r = cli("diff", plan_file, "--size", "96KiB", "--configs", "UA,NAP+NAR", "--json", out, "--packet-bytes",
            "1KiB", "--no-reduce-fusion", "--protocol-model", "simple", "--no-flow-control")
    assert r.code == 0, r.err
    assert "96KiB, packets of 1024 B, each re alone, protocol model simple, no flow control;" in r.out
    doc = json.loads(out.read_text())
    assert doc["packet_bytes"] == 1024
    assert doc["replay"] == {"reduce_fusion": False, "executor_slices": False, "protocol_model": "simple",
                             "flow_control": False}
    opts = SimOptions(reduce_fusion=False, protocol_model="simple", flow_control=False)
    for row in doc["configs"]:
        placed = apply_config(plan, row["config"], PassContext(load_topology("nuna-4die"), 96 * 1024))
        assert row["time_ns"] == simulate(placed, load_topology("nuna-4die"), 96 * 1024, packet_bytes=1024,
                                          options=opts).time_ns
    bad = cli("diff", plan_file, "--size", "96KiB", "--packet-bytes", "0")
    assert bad.code == 2
    assert "invalid packet size" in bad.err


def test_cli_demo(cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nuna.passes.report as report

    # the real demo (8 GPUs, 100 KiB and 1 MiB, 1/4/16 per peer) is the README's job; here a
    # small one, same code
    monkeypatch.setattr(report, "DEMO_GPUS", 3)
    monkeypatch.setattr(report, "DEMO_SIZES_BYTES", (12_000, 48_000))
    monkeypatch.setattr(report, "DEMO_TBS_PER_PEER", (1, 2))
    out = tmp_path / "demo"
    r = cli("demo", "-o", out)
    assert r.code == 0, r.err
    pngs = sorted(p.name for p in out.iterdir())
    assert "latency-12kB.png" in pngs
    assert "latency-48kB.png" in pngs
    assert any(p.startswith("chip-nar") for p in pngs)
    for p in out.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert r.out.count("best threadblock count") == 2
    assert r.out.count("in detail at ") == 2
    again = tmp_path / "again"
    assert cli("demo", "-o", again).code == 0
    for p in out.iterdir():
        assert (again / p.name).read_bytes() == p.read_bytes()
    one = cli("demo", "-o", tmp_path / "one", "--tbs-per-peer", "2")
    assert one.code == 0, one.err
    assert one.out.count("in detail at 2 per peer") == 2
    assert one.out.count(": 2 threadblocks per peer") == 2
    assert "best threadblock count" not in one.out
    assert cli("demo", "-o", tmp_path / "bad", "--tbs-per-peer", "0").code != 0


def test_count_search_compares_each_configuration_at_its_fastest_count(spec: TopologySpec) -> None:
    from nuna.passes.report import format_search, search_counts

    configs = ("UA", "NAP+NAR")
    s = search_counts("allgather", 3, spec, 24_000, configs, (1, 2))
    assert s.configs == configs
    assert s.counts == (1, 2)
    for i, name in enumerate(configs):
        # every entry is that configuration's own replay of the plan at that count
        for k, t in zip(s.counts, s.time_ns[i], strict=True):
            plan = generate("allgather", 3, tbs_per_peer=k)
            ctx = PassContext(spec, 24_000)
            g = choose_granularity(plan, name, ctx, None).granularity
            assert simulate(apply_config(plan, name, ctx, g), spec, 24_000).time_ns == t
        k, t = s.best(i)
        assert t == min(s.time_ns[i])
        assert s.time_ns[i][s.counts.index(k)] == t
    assert s.speedup(0) == 1.0
    assert s.speedup(1) == pytest.approx(min(s.time_ns[0]) / min(s.time_ns[1]))
    # the detail is the comparison at the rewrite's fastest count
    assert s.shown_count == s.best(1)[0]
    assert [r.time_ns for r in s.detail.rows] == [s.time_ns[i][s.counts.index(s.shown_count)]
                                                   for i in range(2)]
    text = format_search(s)
    assert f"in detail at {s.shown_count} per peer" in text
    assert f"{s.speedup(1):.2f}x" in text


def test_line_sized_pages_put_nap_chunks_where_nap_chose(spec: TopologySpec) -> None:
    # the page-size ablation (topologies/nuna-4die-p256.toml): at 100 KiB an 8-GPU allgather's
    # slices are not whole 4 KiB pages, so first-come-first-served pages put part of each group's
    # data in another domain; with 256-byte pages only the lines chunks share do
    size = 100 * 1024
    plan = generate("allgather", 8, tbs_per_peer=4)
    hops = {}
    for topo in (spec, load_topology("nuna-4die-p256")):
        ctx = PassContext(topo, size)
        g = choose_granularity(plan, "NAP+NAR", ctx, None).granularity
        placed = apply_config(plan, "NAP+NAR", ctx, g)
        result = simulate(placed, topo, size)
        assert result.landed_bytes.sum() == result.sent_bytes.sum()
        hops[topo.name] = (result.noc_hops["load_mean"], result.noc_hops["remote_store_mean"])
    (load4k, store4k), (load256, store256) = hops["nuna-4die"], hops["nuna-4die-p256"]
    assert load256 < 0.5 * load4k
    assert store256 < 0.5 * store4k


def test_the_estimate_models_a_spread_chunk_on_all_its_stacks(spec: TopologySpec) -> None:
    # a chunk listed on several stacks has its pages dealt evenly over them (nuna.sim.layout),
    # so the heuristic's model of it is the mean of the model with it on each stack alone
    import dataclasses

    size = 24_000
    plan = generate("allgather", 3, tbs_per_peer=1)
    ctx = PassContext(spec, size)
    placed = apply_config(plan, "UA+NAR", ctx, 2)
    target = next(s.target for s in remote_stores(placed) if s.target is not None)
    gpu, buf, chunk = target.gpu, target.buffer, target.chunk
    others = tuple(c for c in placed.placement.chunks if (c.gpu, c.buffer, c.chunk) != (gpu, buf, chunk))

    def with_stacks(*stacks: int) -> Plan:
        mine = tuple(ChunkPlacement(gpu, buf, chunk, s) for s in stacks)
        return dataclasses.replace(placed, placement=dataclasses.replace(placed.placement,
                                                                         chunks=mine + others))

    far, near = (stacks[0] for stacks in nar_domain_stacks(spec, 2))  # one stack of each domain
    one, two, both = (estimate(with_stacks(*s), spec, size) for s in ((far,), (near,), (far, near)))
    assert one.latency_ns != two.latency_ns
    assert both.latency_ns == pytest.approx((one.latency_ns + two.latency_ns) / 2, rel=1e-12)
    # the two stacks' domains share its port bytes
    assert both.max_port_bytes <= max(one.max_port_bytes, two.max_port_bytes)


def test_compare_uses_the_topologys_flit(spec: TopologySpec) -> None:
    # it replayed 256-byte packets on every chip: refused on a 512-byte flit, coarse on 64
    from nuna.topology.spec import parse_topology

    text = (Path(__file__).parents[2] / "nuna" / "topology" / "data" / "nuna-4die.toml").read_text()
    plan = generate("allgather", 2, tbs_per_peer=1)
    size = plan.nchunksperloop * 8192
    for flit in (64, 512):
        chip = parse_topology(text.replace("flit_bytes = { value = 256,", f"flit_bytes = {{ value = {flit},"))
        (row,) = compare(plan, chip, size, ["UA"]).rows
        assert row.result.packet_bytes == flit
        assert row.time_ns == simulate(apply_config(plan, "UA", PassContext(chip, size)), chip, size).time_ns
