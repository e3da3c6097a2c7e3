"""Library calls with bad values raise nuna's typed errors, found by an audit of the public API
(2026-12-05): each case below once raised a builtin error, allocated gigabytes or never ended."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nuna.errors import InputError, PassError, TopologyError, UsageError
from nuna.experiments.spec import MAX_POINTS, parse_sweep_spec
from nuna.passes.base import PassContext
from nuna.plan.generate import generate
from nuna.plan.xml import load
from nuna.sim.fastforward import FastForward
from nuna.topology import load_topology, parse_topology
from nuna.units import check_size_bytes, parse_size
from tests.conftest import REPO


@pytest.mark.parametrize("size", [1.5, 4096.0, math.nan, math.inf, True, "1MB", None, 0, -1, 10**30])
def test_a_size_must_be_a_whole_positive_number_of_bytes(size: object) -> None:
    # a float reached the compiled kernels (numba TypingError), 10**30 an OverflowError
    with pytest.raises(UsageError, match="size"):
        check_size_bytes(size)
    with pytest.raises(PassError, match="size"):
        PassContext(load_topology("nuna-4die"), size)  # type: ignore[arg-type]


def test_simulate_refuses_a_float_size_before_the_kernels() -> None:
    from nuna.sim import simulate

    with pytest.raises(UsageError, match="whole number of bytes"):
        simulate(generate("allreduce", 2), load_topology("nuna-4die"), 1.5)  # type: ignore[arg-type]


def test_a_size_string_longer_than_any_size_is_refused() -> None:
    # Python refuses to convert more than 4,300 digits: a ValueError escaped
    with pytest.raises(UsageError, match="5000 characters"):
        parse_size("1" * 5000)
    assert parse_size("1" * 18) == 111_111_111_111_111_111


@pytest.mark.parametrize(("field", "value"), [("window_ns", 1e-9), ("window_ns", math.inf),
                                              ("min_span_windows", 2.5)])
def test_fast_forward_refuses_windows_it_cannot_run(field: str, value: float) -> None:
    # a 1e-9 ns window passed the check and the replay never finished
    with pytest.raises(UsageError, match="fast-forward"):
        FastForward(**{field: value}).check()  # type: ignore[arg-type]
    FastForward().check()


def _mutated(name: str, old: str, new: str) -> str:
    text = (REPO / "topologies" / f"{name}.toml").read_text()
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(("name", "old", "new", "key"), [
    ("nuna-4die", "max_outstanding_requests_per_cu = { value = 700,",
     "max_outstanding_requests_per_cu = { value = 1073741824,", "max_outstanding_requests_per_cu"),
    ("flat-switch", "cus = { value = 1024,", "cus = { value = 1048576,", "cus"),
])
def test_topology_values_that_would_take_gigabytes_are_refused(name: str, old: str, new: str,
                                                                key: str) -> None:
    # accepted before, then a 2-GPU replay allocated 512 GiB (1.25 GiB for the CUs)
    with pytest.raises(TopologyError, match=rf"chip\.{key}: value .* out of range"):
        parse_topology(_mutated(name, old, new))
    parse_topology((REPO / "topologies" / f"{name}.toml").read_text())  # the shipped values load


@pytest.mark.parametrize("path", ["a\x00b.xml", "\ud800.xml"])
def test_a_path_the_file_system_cannot_take_is_an_input_error(path: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a valid file name"):
        load(path)
    with pytest.raises(TopologyError, match="not a valid file name"):
        load_topology(str(tmp_path / path.replace(".xml", ".toml")))


def test_a_topology_name_too_long_for_a_file_is_refused() -> None:
    with pytest.raises(TopologyError, match="5000 characters"):
        load_topology("a" * 5000)


def test_a_sweep_grid_of_too_many_points_is_refused_before_it_is_listed() -> None:
    grid = {"collectives": ["allgather"], "gpus": list(range(2, 102)),
            "sizes": [f"{i}kB" for i in range(1, 101)], "configs": ["UA"],
            "tbs_per_peer": list(range(1, 102))}
    assert MAX_POINTS < 100 * 100 * 101
    with pytest.raises(InputError, match=r"big\.toml: \[grid\]: up to 1,010,000 points"):
        parse_sweep_spec({"grid": grid}, source="big.toml")
    grid["tbs_per_peer"] = [1]
    parse_sweep_spec({"grid": grid}, source="ok.toml")


@pytest.mark.parametrize("config", ["UA", "UA+NAR", "NUMA+NAR", "NAP", "NAP+NAR"])
def test_every_configuration_refuses_a_size_beyond_the_gpus_memory(config: str) -> None:
    # before: NUMA+NAR placed an 8-GPU allgather of 1000 GiB (the chip holds 576 GiB) in 14 s and
    # 0.9 GB, and 100000 GiB ran out of memory, where `nuna simulate` refused both at once
    from nuna.passes.configs import apply_config

    ctx = PassContext(load_topology("nuna-4die"), 1000 << 30)
    with pytest.raises(PassError, match=r"^gpu 0: buffers of 262144000 pages .* exceed its memory"):
        apply_config(generate("allgather", 8), config, ctx)


@settings(max_examples=60, deadline=None)
@given(collective=st.sampled_from(["allgather", "allreduce", "alltoall"]),
       algo=st.sampled_from(["direct", "ring"]),
       ngpus=st.integers(2, 4), pages=st.integers(1, 64), size_kib=st.integers(1, 4096))
@example("allreduce", "ring", 4, 32, 2048)  # 512 pages: its buffers fit, not with its 640 of receive buffers
@example("allgather", "direct", 2, 64, 1)  # fits
def test_the_passes_refuse_exactly_the_sizes_the_replay_cannot_lay_out(collective: str, algo: str, ngpus: int,
                                                                       pages: int, size_kib: int) -> None:
    import dataclasses

    from nuna.errors import SimulationError
    from nuna.plan.dag import build_dag, flatten
    from nuna.sim.layout import memory_fit_problem, memory_layout

    base = load_topology("nuna-4die")
    chip = dataclasses.replace(base.chip, hbm_stack_capacity_bytes=pages * base.chip.page_bytes)
    spec = dataclasses.replace(base, chip=chip)
    plan = generate(collective, ngpus, algo=algo)
    size = size_kib * 1024
    problem = memory_fit_problem(plan, spec, size)
    flat = flatten(plan)
    match_send = build_dag(plan).match_send
    if problem is None:
        memory_layout(plan, spec, size, flat, match_send)
    else:
        with pytest.raises(SimulationError) as info:
            memory_layout(plan, spec, size, flat, match_send)
        assert str(info.value) == problem


def _huge_allgather(chunks_per_gpu: int) -> str:
    """A 2-GPU direct allgather whose two chunks are ``chunks_per_gpu / 2`` chunks each."""
    from nuna.plan.xml import dump

    half = chunks_per_gpu // 2
    text = dump(generate("allgather", 2))
    for old, new in (('nchunksperloop="2"', f'nchunksperloop="{chunks_per_gpu}"'),
                     ('o_chunks="2"', f'o_chunks="{chunks_per_gpu}"'), ('cnt="1"', f'cnt="{half}"'),
                     ('srcoff="1"', f'srcoff="{half}"'), ('dstoff="1"', f'dstoff="{half}"')):
        assert old in text
        text = text.replace(old, new)
    return text


def test_a_plan_of_more_chunks_than_can_be_checked_or_placed_is_named(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # 2**26 chunks per GPU: before, validate ran out of 8 GB after 46 s in the semantic check, and
    # NAP+NAR did too in the placement (2**20 per GPU: 63 s, then a 108 MB plan nuna could not read)
    plan = tmp_path / "huge.xml"
    plan.write_text(_huge_allgather(1 << 26))
    checked = run_cli("validate", plan)
    assert checked.code == 0, checked.err
    assert "semantic check not run: the plan's buffers hold 134,217,728 chunks in all, more than the " \
           "2,097,152 it executes" in checked.out
    placed = run_cli("rewrite", plan, "--config", "NAP+NAR", "--size", "1GiB", "-o", tmp_path / "out.xml")
    assert placed.code == 1
    assert placed.err == ("nuna: error: plan allgather_direct_k1_n2_cpp1: its buffers hold 134,217,728 "
                          "chunks in all; the passes place at most 1,048,576 (an XML element or more each, "
                          "and a plan file holds at most 64 MiB)\n")
    assert not (tmp_path / "out.xml").exists()


def test_the_chunk_limits_are_where_the_checks_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    from nuna.passes import base
    from nuna.passes.configs import apply_config
    from nuna.plan import semantics
    from nuna.plan.verify import verify
    from nuna.plan.xml import loads

    plan = loads(_huge_allgather(8), "ag")  # 16 chunks in all
    wrong = loads(_huge_allgather(8).replace('dstoff="4"', 'dstoff="0"', 1), "wrong")
    monkeypatch.setattr(semantics, "MAX_SEMANTIC_CHUNKS", 16)
    assert not verify(plan).notes
    assert verify(wrong).errors  # executed: the wrong result is found
    monkeypatch.setattr(semantics, "MAX_SEMANTIC_CHUNKS", 15)
    assert verify(wrong).notes == ("semantic check not run: the plan's buffers hold 16 chunks in all, more "
                                   "than the 15 it executes",)
    ctx = PassContext(load_topology("nuna-4die"), 1 << 20)
    monkeypatch.setattr(base, "MAX_PLACED_CHUNKS", 16)
    apply_config(plan, "NAP+NAR", ctx)
    monkeypatch.setattr(base, "MAX_PLACED_CHUNKS", 15)
    with pytest.raises(PassError, match="its buffers hold 16 chunks in all; the passes place at most 15 "):
        apply_config(plan, "NAP+NAR", ctx)


def test_a_plan_too_large_to_read_back_is_not_written(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # a million chunks placed over several stacks each came to 80 MB of XML, which load refuses
    from nuna.errors import PlanError
    from nuna.plan import xml

    plan = generate("allgather", 8)
    size = len(xml.dump(plan).encode())
    monkeypatch.setattr(xml, "MAX_PLAN_BYTES", size)
    xml.save(plan, tmp_path / "fits.xml")
    assert xml.load(tmp_path / "fits.xml") == plan
    monkeypatch.setattr(xml, "MAX_PLAN_BYTES", size - 1)
    with pytest.raises(PlanError, match=rf"would be {size:,} bytes of XML, more than the {size - 1:,} "):
        xml.save(plan, tmp_path / "big.xml")
    assert not (tmp_path / "big.xml").exists()
    res = run_cli("generate", "allgather", "--gpus", "8", "-o", tmp_path / "cli.xml")
    assert res.code == 1
    assert res.err.count("\n") == 1
    assert "nothing written" in res.err
    assert not (tmp_path / "cli.xml").exists()
