"""Placement annotations against a chip (``nuna.topology.fit``) and ``nuna validate --topology``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.passes import PassContext, apply_config
from nuna.plan.generate import generate
from nuna.plan.ir import Plan, TbPlacement
from nuna.plan.xml import save
from nuna.topology.address import nar_granularities
from nuna.topology.fit import placement_problems
from nuna.topology.spec import load_topology

NUNA = load_topology("nuna-4die")
SMALL = load_topology("mi300x-like")  # 320 CUs, 8 HBM stacks, 8 I/O ports


def _placed(config: str = "NAP+NAR") -> Plan:
    return apply_config(generate("allgather", 4, tbs_per_peer=2), config, PassContext(NUNA, 1 << 20))


def test_a_placement_made_for_a_chip_fits_it() -> None:
    for config in ("UA", "NUMA+NAR", "NAP+NAR"):
        assert placement_problems(_placed(config), NUNA) == ()
    assert placement_problems(generate("allgather", 4), SMALL) == ()  # no annotations


def test_what_a_smaller_chip_lacks_is_named_once_per_kind() -> None:
    plan = _placed()
    big_cus = [tp for tp in plan.placement.threadblocks if tp.cu >= SMALL.chip.cus]
    big_stacks = [cp for cp in plan.placement.chunks if cp.stack >= SMALL.chip.hbm_stacks]
    # NAP+NAR on nuna-4die uses CUs and stacks mi300x-like lacks
    assert big_cus
    assert big_stacks
    problems = placement_problems(plan, SMALL)
    assert len(problems) == 2
    assert problems[0].startswith(f"placement: {len(big_cus)} threadblock")
    assert f"(it has 320: 0..319), first gpu {big_cus[0].gpu} tb {big_cus[0].tb} on CU {big_cus[0].cu}" \
        in problems[0]
    assert problems[1].startswith(f"placement: {len(big_stacks)} chunk placement")
    twelve = replace(plan, placement=replace(plan.placement, nar_granularity=12))
    assert 12 in nar_granularities(NUNA)
    assert 12 not in nar_granularities(SMALL)
    assert placement_problems(twelve, NUNA) == ()
    assert "NAR granularity 12 is not valid for mi300x-like (valid: 1, 2, 4, 8)" in \
        placement_problems(twelve, SMALL)[0]


@settings(max_examples=40, deadline=None)
@given(cus=st.lists(st.integers(0, 2 * NUNA.chip.cus), min_size=1, max_size=8))
def test_a_cu_is_refused_exactly_when_the_chip_has_no_such_cu(cus: list[int]) -> None:
    plan = generate("allgather", 2, tbs_per_peer=len(cus))
    tbs = [(g.id, tb.id) for g in plan.gpus for tb in g.threadblocks][:len(cus)]
    placements = tuple(TbPlacement(g, tb, cu) for (g, tb), cu in zip(tbs, cus, strict=True))
    placed = replace(plan, placement=replace(plan.placement, threadblocks=placements))
    over = [cu for cu in cus if cu >= NUNA.chip.cus]
    problems = placement_problems(placed, NUNA)
    assert len(problems) == (1 if over else 0)
    if over:
        assert problems[0].startswith(f"placement: {len(over)} threadblock")
        assert problems[0].endswith(f"on CU {over[0]}")


def test_cli_validate_checks_the_placement_against_a_topology(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "nap.xml"
    save(_placed(), path)
    assert run_cli("validate", str(path)).code == 0
    assert run_cli("validate", str(path), "--topology", "nuna-4die").code == 0
    small = run_cli("validate", str(path), "--topology", "mi300x-like")
    assert small.code == 1
    assert small.out.startswith(f"{path}: invalid (2 errors")
    assert small.err.count("\n") == 2
    assert "on a CU that mi300x-like does not have" in small.err
    assert all(line.startswith(f"nuna: error: {path}: placement: ") for line in small.err.splitlines())
    report = json.loads(run_cli("validate", str(path), "--topology", "mi300x-like", "--json").out)
    assert report["topology"] == "mi300x-like"
    assert not report["ok"]
    assert len(report["plans"][0]["errors"]) == 2
    assert json.loads(run_cli("validate", str(path), "--json").out)["topology"] is None
    unknown = run_cli("validate", str(path), "--topology", "no-such-chip")
    assert unknown.code == 1
    assert unknown.err.startswith("nuna: error: unknown topology 'no-such-chip'")
    assert unknown.err.count("\n") == 1


@settings(max_examples=60, deadline=None)
@given(size=st.integers(-512, 1 << 20), flit=st.sampled_from([64, 256, 200]))
def test_packet_sizes_are_auto_or_whole_flits_and_caps_powers_of_two_flits(size: int, flit: int) -> None:
    from nuna.topology.fit import packet_cap_problem, packet_problem

    assert packet_problem("auto", flit) is None
    assert (packet_problem(size, flit) is None) == (size >= flit and size % flit == 0)
    lines = size // flit
    assert (packet_cap_problem(size, flit) is None) == (size >= flit and size % flit == 0
                                                        and lines & (lines - 1) == 0)
    assert "of nuna-4die" in (packet_problem(flit + 1, flit, "nuna-4die") or "")


@pytest.mark.parametrize("size", [(1 << 40) + 256, 1 << 63, 1 << 70])
def test_a_packet_or_cap_beyond_a_tebibyte_is_refused(size: int) -> None:
    # 2**63 bytes overflowed the replay's int64 sums (an internal error, not a message)
    from nuna.topology.fit import MAX_PACKET_BYTES, packet_cap_problem, packet_problem

    assert packet_problem(MAX_PACKET_BYTES, 256) is None
    assert packet_cap_problem(MAX_PACKET_BYTES, 256) is None
    assert f"at most {MAX_PACKET_BYTES} B" in (packet_problem(size, 256) or "")
    assert f"at most {MAX_PACKET_BYTES} B" in (packet_cap_problem(size, 256) or "")
