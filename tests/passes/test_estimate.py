"""The NAR heuristic's model (``nuna.passes.nar.estimate``) against its definition, written
here as the plain loop over remote stores the module doc states: one term per chunk stored,
a chunk spread over several stacks counting on each in equal parts. The implementation sums
by distinct key in first-occurrence order, so the two must agree to the last bit: the choice
of ``G`` compares rounded times, and a sweep's results must not move with how they are summed."""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.passes.access import ChunkKey, decompose, remote_stores, workload
from nuna.passes.nar import GranularityEstimate, estimate, store_rows
from nuna.plan.generate import generate
from nuna.plan.ir import ChunkPlacement, Placement, Plan, TbPlacement
from nuna.plan.verify import chunk_bytes_for
from nuna.plan.xml import load
from nuna.topology.address import nar_domain_ports, nar_domain_stacks, nar_granularities, store_domains_by_cu
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec, default_topology, load_topology
from tests.conftest import PLANS_MSCCL, REPO


def _definition(plan: Plan, spec: TopologySpec, size_bytes: int) -> GranularityEstimate:
    chip = spec.chip
    geo = chip_geometry(chip)
    P, S, C = chip.io_ports, chip.hbm_stacks, chip.cus
    g = plan.placement.nar_granularity or 1
    by_cu = store_domains_by_cu(spec, g)
    ports_of = nar_domain_ports(spec, g)
    port_dist = np.zeros((S, P))  # a store to stack s: a port of s's domain, evenly
    for ports, stacks in zip(ports_of, nar_domain_stacks(spec, g), strict=True):
        for s in stacks:
            port_dist[s, list(ports)] = 1.0 / len(ports)
    cu_dist = np.zeros((C, P))  # by CU: a port of the CU's domain
    if by_cu is not None:
        for cu, d in enumerate(by_cu):
            cu_dist[cu, list(ports_of[d])] = 1.0 / len(ports_of[d])
    cu_of = {(t.gpu, t.tb): t.cu for t in plan.placement.threadblocks}
    stacks_of: dict[ChunkKey, list[int]] = {}
    for c in plan.placement.chunks:
        stacks_of.setdefault(ChunkKey(c.chunk, c.buffer, c.gpu), []).append(c.stack)
    gpu_index = {gp.id: i for i, gp in enumerate(plan.gpus)}
    latency = total = 0.0
    by_src: dict[tuple[int, int], float] = {}
    by_dst: dict[tuple[int, int], float] = {}
    by_pair: dict[tuple[int, int], float] = {}
    for s in remote_stores(plan):
        cu = cu_of.get((s.gpu, s.tb), C)
        cu = cu if 0 <= cu < C else C  # C: any CU
        for k in range(s.chunks):
            found = None if s.target is None else stacks_of.get(s.target._replace(chunk=s.target.chunk + k))
            for st_ in ([x if 0 <= x < S else S for x in found] if found else [S]):  # S: any stack
                share = 1.0 / (len(found) if found else 1)
                by_pair[(cu, st_)] = by_pair.get((cu, st_), 0.0) + share
                pick = cu if by_cu is not None else st_
                key_s, key_d = (gpu_index[s.gpu], pick), (gpu_index[s.peer], pick)
                by_src[key_s] = by_src.get(key_s, 0.0) + share
                by_dst[key_d] = by_dst.get(key_d, 0.0) + share
    p_port = np.vstack([port_dist, port_dist.mean(axis=0)])
    p_cu = np.vstack([cu_dist, cu_dist.mean(axis=0)])
    port_stack = geo.port_stack.latency_ns
    dst_lat = np.append((port_dist * port_stack.T).sum(axis=1), 0.0)
    dst_lat[S] = dst_lat[:S].mean()
    cu_port = np.vstack([geo.cu_port.latency_ns, geo.cu_port.latency_ns.mean(axis=0)])
    stack_lat = np.hstack([port_stack, port_stack.mean(axis=1, keepdims=True)])
    for (cu, st_), n in by_pair.items():
        if by_cu is not None:
            latency += n * (float(cu_port[cu] @ p_cu[cu]) + float(p_cu[cu] @ stack_lat[:, st_]))
        else:
            latency += n * (float(cu_port[cu] @ p_port[st_]) + float(dst_lat[st_]))
    total = sum(by_pair.values())
    dist = p_cu if by_cu is not None else p_port
    side = {"src": np.zeros((plan.ngpus, P)), "dst": np.zeros((plan.ngpus, P))}
    chunk_bytes = chunk_bytes_for(plan, size_bytes)
    for name, counts in (("src", by_src), ("dst", by_dst)):
        for (gi, pick), n in counts.items():
            side[name][gi] += n * chunk_bytes * dist[pick]
    bw = min(chip.io_port_bandwidth_gbps, spec.scaleup.link_bandwidth_gbps,
             spec.scaleup.switch_port_bandwidth_gbps)
    max_bytes = float(max(side["src"].max(initial=0.0), side["dst"].max(initial=0.0)))
    return GranularityEstimate(g, latency / total if total else 0.0, max_bytes / bw, max_bytes)


@cache
def _topology(name: str) -> TopologySpec:
    return default_topology() if name == "nuna-4die" else load_topology(REPO / "topologies" / f"{name}.toml")


@cache
def _plan(coll: str, n: int, k: int) -> Plan:
    return generate(coll, n, tbs_per_peer=k)


@st.composite
def _placed(draw: st.DrawFn) -> tuple[Plan, TopologySpec, int]:
    spec = _topology(draw(st.sampled_from(["nuna-4die", "nuna-4die-nar-cu"])))
    plan = _plan(draw(st.sampled_from(["allgather", "allreduce", "alltoall"])), draw(st.integers(2, 4)),
                 draw(st.integers(1, 2)))
    chip = spec.chip
    tbs = [(g.id, tb.id) for g in plan.gpus for tb in g.threadblocks]
    # a placement for some threadblocks (a CU out of range counts as unplaced) and some of the
    # chunks stored into, each on one to three stacks (a stack out of range: any stack)
    cu = st.integers(-1, chip.cus)
    placed_tbs = [TbPlacement(g, t, draw(cu)) for g, t in tbs if draw(st.booleans())]
    targets = sorted({ChunkKey(s.target.chunk + k, s.target.buffer, s.target.gpu)
                      for s in remote_stores(plan) if s.target is not None for k in range(s.chunks)})
    chunks = [ChunkPlacement(c.gpu, c.buffer, c.chunk, stack)
              for c in targets if draw(st.booleans())
              for stack in draw(st.lists(st.integers(0, chip.hbm_stacks), min_size=1, max_size=3))]
    placement = Placement(nar_granularity=draw(st.sampled_from(nar_granularities(spec))),
                          threadblocks=tuple(placed_tbs), chunks=tuple(chunks))
    size = plan.nchunksperloop * draw(st.integers(1, 1 << 16))
    return dataclasses.replace(plan, placement=placement), spec, size


@settings(max_examples=60, deadline=None)
@given(_placed())
def test_estimate_is_its_definition_to_the_last_bit(case: tuple[Plan, TopologySpec, int]) -> None:
    plan, spec, size = case
    want = _definition(plan, spec, size)
    assert estimate(plan, spec, size) == want
    assert estimate(plan, spec, size, remote_stores(plan)) == want
    assert estimate(plan, spec, size, store_rows(plan)) == want


def test_workload_is_decompose_and_remote_stores_in_one_walk() -> None:
    msccl = PLANS_MSCCL / "allgather_allpairs_n8_i1_LL.xml"  # a compiler's plan, where the corpus is
    plans = [_plan("allreduce", 3, 2), _plan("alltoall", 4, 1),
             load(REPO / "plans" / "ring_allreduce_n3.xml"), *([load(msccl)] if msccl.is_file() else [])]
    for plan in plans:
        accesses, stores = workload(plan)
        assert accesses == decompose(plan)
        assert stores == remote_stores(plan)
        assert accesses
