"""scripts/slices_corpus.py: a corpus's plans replayed without and with the executors' slices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nuna.plan.generate import generate
from nuna.plan.xml import save
from nuna.sim import SimOptions, simulate
from nuna.topology.spec import load_topology
from tests.conftest import script_module


def _script() -> Any:
    return script_module("slices_corpus")


def test_the_script_replays_each_plan_of_its_protocols_both_ways(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "plans"
    (corpus / "sub").mkdir(parents=True)
    simple = generate("allgather", 2, algo="ring")
    save(simple, corpus / "sub" / "ring.xml")
    save(generate("allgather", 2, protocol="LL"), corpus / "ll.xml")
    out = tmp_path / "rows.json"
    assert _script().main([str(corpus), "--size", "256KiB", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert list(rows) == ["sub/ring.xml"]  # LL plans are left out unless asked for
    spec = load_topology("nuna-4die")
    sliced = simulate(simple, spec, 256 << 10, packet_bytes=256, options=SimOptions(executor_slices=True))
    whole = simulate(simple, spec, 256 << 10, packet_bytes=256)
    row = rows["sub/ring.xml"]
    assert row["sliced_us"] == pytest.approx(sliced.time_ns / 1e3)
    assert row["whole_us"] == pytest.approx(whole.time_ns / 1e3)
    assert row["replay_nodes"] == sliced.replay_nodes > whole.steps  # 64 KiB calls: two parts each
    assert "1 plan at 256KiB: ratios" in capsys.readouterr().out
    assert _script().main([str(corpus), "--size", "256KiB", "--sliced-only", "--protocols", "LL"]) == 0
    assert "ll.xml:" in capsys.readouterr().out


def test_a_missing_corpus_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main([str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err.strip().count("\n") == 0
