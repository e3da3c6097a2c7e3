"""Replays of fused ``re`` passes (nuna.plan.fusion): each group loads its sources and its
destination once and stores once, its other steps move nothing, and the bounds still hold."""

from __future__ import annotations

import json

import pytest

from nuna.errors import UsageError
from nuna.plan.dag import flatten
from nuna.plan.fusion import reduce_fusion
from nuna.plan.generate import generate
from nuna.sim import SimOptions, simulate
from nuna.topology.spec import load_topology


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


@pytest.mark.parametrize(("collective", "ngpus", "k", "size", "packet", "windowed"), [
    ("reducescatter", 8, 1, 1 << 20, None, None), ("reducescatter", 8, 2, 3 << 16, None, None),
    ("allreduce", 4, 1, 1 << 18, None, None), ("allreduce", 20, 1, 20 << 12, None, None),
    # packets of 16 lines, windowed: the pools hold a fused job's 17 loads (replay._pools)
    ("allreduce", 20, 1, 20 << 16, 4096, True), ("reducescatter", 8, 1, 1 << 22, 4096, False)])
def test_a_fused_pass_saves_a_load_and_a_store_per_fused_step(  # type: ignore[no-untyped-def]
        spec, collective: str, ngpus: int, k: int, size: int, packet: int | None,
        windowed: bool | None) -> None:
    plan = generate(collective, ngpus, tbs_per_peer=k)
    fused = reduce_fusion(flatten(plan)).fused
    assert fused > 0
    on = simulate(plan, spec, size, packet_bytes=packet, options=SimOptions(windowed=windowed))
    off = simulate(plan, spec, size, packet_bytes=packet,
                   options=SimOptions(reduce_fusion=False, windowed=windowed))
    line = spec.chip.flit_bytes
    lines = -(-on.chunk_bytes // line)  # every re here moves one chunk
    request = SimOptions().request_bytes
    # an HBM link carries a load's request in and its data out, and a store's data in
    saved = off.link_classes["hbm"]["bytes"] - on.link_classes["hbm"]["bytes"]
    assert saved == fused * lines * (request + 2 * line)
    # the same data crosses the pod, and no replay beats its bounds
    assert (on.port_egress_bytes == off.port_egress_bytes).all()
    assert on.time_ns >= on.placement_floor_ns >= on.lower_bound_ns
    assert on.time_ns < off.time_ns


def test_without_re_chains_fusion_changes_nothing(spec) -> None:  # type: ignore[no-untyped-def]
    plan = generate("allgather", 4)
    on, off = (simulate(plan, spec, 1 << 18, options=SimOptions(reduce_fusion=f)).to_json()
               for f in (True, False))
    on.pop("wall_s")
    off.pop("wall_s")
    assert json.dumps(on, sort_keys=True) == json.dumps(off, sort_keys=True)


@pytest.mark.parametrize("value", [1, "no", None])
def test_reduce_fusion_must_be_a_bool(spec, value: object) -> None:  # type: ignore[no-untyped-def]
    plan = generate("reducescatter", 4)
    with pytest.raises(UsageError, match=r"SimOptions\.reduce_fusion must be True or False"):
        simulate(plan, spec, 1 << 16, options=SimOptions(reduce_fusion=value))  # type: ignore[arg-type]


@pytest.mark.parametrize(("collective", "ngpus", "fusion"), [
    ("allgather", 4, True), ("reducescatter", 4, False), ("reducescatter", 8, True), ("allreduce", 6, True)])
def test_load_hops_of_every_load(spec, collective: str, ngpus: int, fusion: bool) -> None:  # type: ignore[no-untyped-def]
    """``noc_hops.load_all_mean`` weighs each load of each line once (``load_mean``: the first
    operand only), against a loop over the replay's jobs and their load columns."""
    from nuna.sim.replay import _prepare

    plan = generate(collective, ngpus)
    size = ngpus << 16
    opts = SimOptions(reduce_fusion=fusion)
    res = simulate(plan, spec, size, options=opts)
    prep = _prepare(plan, spec, size, None, opts)
    geo, line = prep.net.geo, spec.chip.flit_bytes
    node_of_job = [n for n in range(prep.n_job_ptr.shape[0] - 1)
                   for _ in range(int(prep.n_job_ptr[n]), int(prep.n_job_ptr[n + 1]))]
    hop_lines = {"first": 0, "all": 0}
    load_lines = {"first": 0, "all": 0}
    loads_per_line = 0
    for j, n in enumerate(node_of_job):
        cu = int(prep.tb_cu[prep.flat.node_tb[n]])
        lines = -(-int(prep.j_bytes[j]) // line)
        row = [int(x) for x in prep.j_cls[j]]
        stacks = [s for c, s in enumerate(row) if (c < 2 or c >= 5) and s >= 0]
        loads_per_line = max(loads_per_line, len(stacks))
        for k, s in enumerate(stacks):
            h = int(geo.cu_stack.hops[cu, s] + geo.stack_cu.hops[s, cu]) * lines
            for key in ("first", "all") if k == 0 else ("all",):
                hop_lines[key] += h
                load_lines[key] += lines
    assert res.noc_hops["load_mean"] == pytest.approx(hop_lines["first"] / load_lines["first"])
    assert res.noc_hops["load_all_mean"] == pytest.approx(hop_lines["all"] / load_lines["all"])
    if loads_per_line == 1:  # an allgather's sends load once
        assert res.noc_hops["load_all_mean"] == res.noc_hops["load_mean"]
    else:  # a reduction loads two operands, a fused pass up to 1 + its sources
        assert load_lines["all"] > load_lines["first"]
        assert (loads_per_line > 2) if fusion else (loads_per_line == 2)
