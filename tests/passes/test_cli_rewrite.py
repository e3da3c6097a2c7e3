"""``nuna rewrite``: writes an annotated plan that is still a valid MSCCL plan and reads back
identically; bad input is one stderr line and a non-zero exit status."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nuna.passes import PassContext, apply_config
from nuna.plan.generate import generate
from nuna.plan.verify import verify
from nuna.plan.xml import dump, load
from nuna.topology.spec import TopologySpec
from tests.conftest import CliResult


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "ag.xml"
    path.write_text(dump(generate("allgather", 4, tbs_per_peer=2)))
    return path


def test_rewrite_writes_the_config_placement(cli: Callable[..., CliResult], plan_file: Path, tmp_path: Path,
                                            spec: TopologySpec) -> None:
    out = tmp_path / "out.xml"
    r = cli("rewrite", plan_file, "--config", "nap+nar", "--nar-granularity", "4", "--size", "64KiB",
            "-o", out)
    assert r.code == 0, r.err
    assert "NAP+NAR" in r.out
    assert "granularity 4" in r.out
    rewritten = load(out)
    assert verify(rewritten).ok
    original = load(plan_file)
    assert rewritten.gpus == original.gpus
    assert rewritten.placement.nar_granularity == 4
    assert rewritten.placement.config == "NAP+NAR"
    assert rewritten.placement.size_bytes == 65536
    # the library gives the same annotations for the same request
    assert rewritten == apply_config(original, "NAP+NAR", PassContext(spec, 65536), 4)
    # deterministic bytes
    out2 = tmp_path / "out2.xml"
    assert cli("rewrite", plan_file, "-c", "NAP+NAR", "-g", "4", "-s", "64KiB", "-o", out2).code == 0
    assert out.read_bytes() == out2.read_bytes()


def test_rewrite_counts_chunks_and_their_extra_stacks(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    # 8 GPUs, one threadblock per peer, 1 MiB, one domain: each GPU's own slice is read by its
    # seven senders and spread over seven stacks (docs/passes.md, Budgets)
    plan_file = tmp_path / "ag8.xml"
    plan_file.write_text(dump(generate("allgather", 8, algo="direct", tbs_per_peer=1)))
    out = tmp_path / "out.xml"
    r = cli("rewrite", plan_file, "-c", "NAP+NAR", "-g", "1", "-s", "1MiB", "-o", out)
    assert r.code == 0, r.err
    chunks = load(out).placement.chunks
    distinct = {(c.gpu, c.buffer, c.chunk) for c in chunks}
    assert len(distinct) == 64
    assert len(chunks) == 64 + 8 * 6
    assert f"{len(distinct)} chunks placed ({len(chunks)} placements" in r.out


def test_rewrite_default_size_and_heuristic(cli: Callable[..., CliResult], plan_file: Path,
                                            tmp_path: Path) -> None:
    out = tmp_path / "out.xml"
    r = cli("rewrite", plan_file, "--config", "UA+NAR", "-o", out)
    assert r.code == 0, r.err
    assert "heuristic" in r.out
    placed = load(out).placement
    assert placed.size_bytes == 1024 * 1024
    assert placed.nar_granularity is not None


def test_print_between_passes(cli: Callable[..., CliResult], plan_file: Path, tmp_path: Path) -> None:
    r = cli("rewrite", plan_file, "-c", "NAP*+NAR", "-g", "2", "-o", tmp_path / "o.xml",
            "--print-between-passes")
    assert r.code == 0, r.err
    assert [line.split(":")[0] for line in r.err.splitlines()] == ["after nar", "after nap*"]


@pytest.mark.parametrize(("args", "code", "needle"), [
    (("-c", "FOO"), 1, "unknown config"),
    (("-c", "NAP", "-g", "4"), 1, "does not route with NAR"),
    (("-c", "NAP+NAR", "-g", "5"), 1, "not valid"),
    (("-c", "NAP+NAR", "-g", "many"), 1, "invalid NAR granularity"),
    (("-c", "UA", "-s", "12 parsecs"), 2, "size"),
    (("-c", "UA", "-s", "0"), 2, "size"),
])
def test_rewrite_errors(cli: Callable[..., CliResult], plan_file: Path, tmp_path: Path,
                        args: tuple[str, ...], code: int, needle: str) -> None:
    r = cli("rewrite", plan_file, *args, "-o", tmp_path / "o.xml")
    assert r.code == code
    assert needle in r.err
    assert len(r.err.strip().splitlines()) == 1
    assert not (tmp_path / "o.xml").exists()


def test_rewrite_missing_plan(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    r = cli("rewrite", tmp_path / "nope.xml", "-c", "UA", "-o", tmp_path / "o.xml")
    assert r.code == 1
    assert len(r.err.strip().splitlines()) == 1


def test_rewrite_picks_auto_granularity_in_the_replay_it_is_told(
        cli: Callable[..., CliResult], tmp_path: Path, spec: TopologySpec,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import nuna.cli.pass_cmds as pass_cmds
    from nuna.passes.configs import choose_granularity
    from nuna.sim import SimOptions

    seen: list[tuple[object, object]] = []

    def recording(*args: object, **kwargs: object) -> object:
        seen.append((kwargs.get("packet_bytes"), kwargs.get("options")))
        return choose_granularity(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pass_cmds, "choose_granularity", recording)

    plan = generate("allgather", 2, tbs_per_peer=2)
    path = tmp_path / "ag2.xml"
    path.write_text(dump(plan))
    out = tmp_path / "out.xml"
    r = cli("rewrite", path, "-c", "UA+NAR", "-g", "auto", "-s", "256KiB", "-o", out,
            "--packet-bytes", "1KiB", "--no-flow-control", "--protocol-model", "simple")
    assert r.code == 0, r.err
    opts = SimOptions(flow_control=False, protocol_model="simple")
    choice = choose_granularity(plan, "UA+NAR", PassContext(spec, 256 * 1024), "auto", packet_bytes=1024,
                                options=opts)
    assert seen == [(1024, opts)]
    assert load(out).placement.nar_granularity == choice.granularity
    assert f"NAR granularity {choice.granularity} (auto)" in r.out
    # without -g auto nothing is replayed: the options would be ignored, so they are refused
    bad = cli("rewrite", path, "-c", "UA+NAR", "-g", "4", "-o", tmp_path / "x.xml", "--packet-bytes", "1KiB")
    assert bad.code != 0
    assert "choose what -g auto replays" in bad.err
    assert "Traceback" not in bad.err
    assert not (tmp_path / "x.xml").exists()
