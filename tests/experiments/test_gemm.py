"""The Fig 14 GEMM merge: chunk refinement keeps the collective, GEMM threadblocks are local
``re`` steps on naive CUs, and the collective's own finish time is measured apart."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import UsageError
from nuna.experiments.gemm import (
    GEMM_TILES,
    add_gemm,
    collective_time_ns,
    gemm_cus,
    gemm_point,
    refine_chunks,
)
from nuna.passes import PassContext, apply_config
from nuna.plan.generate import generate
from nuna.plan.ir import Buffer, StepType
from nuna.plan.verify import verify
from nuna.sim import simulate
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import load_topology

TOPO = load_topology("nuna-4die")


def _placed(collective: str, ngpus: int, config: str, size: int) -> object:
    return apply_config(generate(collective, ngpus), config, PassContext(TOPO, size), None)


@settings(max_examples=12, deadline=None)
@given(collective=st.sampled_from(["allgather", "allreduce", "alltoall"]), ngpus=st.sampled_from([2, 3, 4]),
       factor=st.integers(1, 6))
def test_refined_plan_moves_the_same_bytes_and_stays_correct(collective: str, ngpus: int,
                                                             factor: int) -> None:
    plan = generate(collective, ngpus)
    fine = refine_chunks(plan, factor)
    assert fine.nchunksperloop == plan.nchunksperloop * factor
    assert not verify(fine).errors
    for g0, g1 in zip(plan.gpus, fine.gpus, strict=True):
        assert g1.output_chunks == g0.output_chunks * factor
        for t0, t1 in zip(g0.threadblocks, g1.threadblocks, strict=True):
            # bytes per step = count * size / nchunks: unchanged by the split
            assert [s.count / plan.nchunksperloop for s in t0.steps] == \
                   pytest.approx([s.count / fine.nchunksperloop for s in t1.steps])


def test_refinement_expands_chunk_placements_in_order() -> None:
    plan = _placed("allgather", 4, "NAP+NAR", 100_000)
    assert plan.placement.chunks, "NAP should place chunks"
    fine = refine_chunks(plan, 3)
    assert len(fine.placement.chunks) == 3 * len(plan.placement.chunks)
    for i, c in enumerate(plan.placement.chunks):
        parts = fine.placement.chunks[3 * i: 3 * i + 3]
        assert [p.chunk for p in parts] == [3 * c.chunk, 3 * c.chunk + 1, 3 * c.chunk + 2]
        assert {p.stack for p in parts} == {c.stack}


@pytest.mark.parametrize("config", ["UA", "NAP+NAR"])
def test_merged_plan_keeps_semantics_and_places_gemm_naively(config: str) -> None:
    size, gemm = 1_000_000, 4_000_000
    plan = _placed("allgather", 8, config, size)
    merged, info = add_gemm(plan, TOPO, size, gemm)
    report = verify(merged)
    assert not report.errors, report.errors
    assert info.tile_bytes * GEMM_TILES == gemm
    assert info.tile_chunks * info.chunk_bytes == info.tile_bytes
    assert info.chunk_bytes * merged.nchunksperloop == size
    geo = chip_geometry(TOPO.chip)
    dies = TOPO.chip.dies
    placed = {(p.gpu, p.tb): p.cu for p in merged.placement.threadblocks}
    original = {(p.gpu, p.tb): p.cu for p in plan.placement.threadblocks}
    for g in merged.gpus:
        gemm_tbs = [tb for tb in g.threadblocks if tb.id >= info.first_tb]
        assert len(gemm_tbs) == GEMM_TILES
        coll_cus = {placed[(g.id, tb.id)] for tb in g.threadblocks if tb.id < info.first_tb
                    if (g.id, tb.id) in placed}
        for i, tb in enumerate(sorted(gemm_tbs, key=lambda t: t.id)):
            (step,) = tb.steps
            assert step.type is StepType.REDUCE
            assert (tb.send_peer, tb.recv_peer) == (None, None)
            assert (step.src_buffer, step.dst_buffer) == (Buffer.SCRATCH, Buffer.SCRATCH)
            assert step.dst_offset + step.count <= g.scratch_chunks
            cu = placed[(g.id, tb.id)]
            assert int(geo.cu_die[cu]) == i % dies  # round-robin over dies
            assert cu not in coll_cus  # the scheduler prefers free CUs
    # the configuration's own placements are untouched
    for key, cu in original.items():
        assert placed[key] == cu


def test_gemm_placement_is_the_same_for_every_configuration_when_free() -> None:
    size = 1_000_000
    ua = gemm_cus(_placed("allgather", 8, "UA", size), TOPO, GEMM_TILES)
    assert len(set(ua)) == GEMM_TILES  # 100 tiles fit on distinct CUs of a 4-die chip


@pytest.mark.parametrize(("size", "gemm", "match"), [
    (1_000_000, 1_000_001, "GEMM size 1000001 bytes does not split into 100 equal tiles"),
    (1_000_001, 1_000_000, "collective size 1000001 bytes is not a whole number of the plan's 8 chunks"),
    (1_000_000, 0, "GEMM size 0 bytes does not split into 100 equal tiles"),
    # chunks of 125,000 B and tiles of 10,001 B share 1 byte: 125,000 chunks per collective chunk
    (1_000_000, 1_000_100, r"GEMM tiles of 10001 bytes need chunks of 1 bytes \(125000 per collective chunk"),
])
def test_bad_sizes_are_usage_errors(size: int, gemm: int, match: str) -> None:
    plan = generate("allgather", 8)
    with pytest.raises(UsageError, match=match):
        add_gemm(plan, TOPO, size, gemm)


def test_collective_time_is_measured_apart_from_the_gemm() -> None:
    size = 10_000
    plan = _placed("allgather", 2, "UA", size)
    # a GEMM of a few large tiles (a few CUs, each limited to its outstanding requests)
    # outlives the small collective and stays cheap to simulate
    merged, info = add_gemm(plan, TOPO, size, 400_000, tiles=4)
    result = simulate(merged, TOPO, size)
    alone = simulate(plan, TOPO, size)
    coll = collective_time_ns(merged, result, info)
    assert 0 < coll < result.time_ns
    # sharing the chip cannot make the collective faster than it is alone (5% slack for
    # arbitration order effects)
    assert coll >= 0.95 * alone.time_ns


def test_gemm_point_without_gemm_is_the_plain_collective() -> None:
    point = {"algo": "direct", "collective": "allgather", "config": "UA", "gemm_bytes": 0, "gpus": 2,
             "nar_granularity": None, "packet_bytes": 256, "seed": 0, "size_bytes": 100_000,
             "tbs_per_peer": 1, "topology": "nuna-4die"}
    out = gemm_point(point)
    assert out["gemm"] is None
    assert out["collective_time_ns"] == out["time_ns"]
    with_gemm = gemm_point({**point, "gemm_bytes": 1_000_000})
    assert with_gemm["gemm"]["tiles"] == GEMM_TILES
    assert with_gemm["collective_time_ns"] <= with_gemm["time_ns"]
    assert "wall_s" not in with_gemm
    assert "wall_s" in with_gemm["timing"]
