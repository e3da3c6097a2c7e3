"""The plan commands through the CLI: validate, info and dag (outputs checked against the
library, exit codes, usage errors)."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

from nuna.plan.dag import build_dag
from nuna.plan.generate import generate
from nuna.plan.verify import summarize, verify
from nuna.plan.xml import load, load_with_source, save

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "plans").glob("*.xml"))
FIG7 = REPO / "plans" / "fig7_allgather_n2_c2.xml"
SCRATCH = REPO / "plans" / "allreduce_scratch_n2.xml"


@pytest.fixture
def old_header(tmp_path: Path) -> Path:
    """FIG7 without the newer header attributes (as microsoft/msccl-tools writes it)."""
    path = tmp_path / "old.xml"
    path.write_text(FIG7.read_text().replace(' outofplace="0" minBytes="0" maxBytes="0"', ""))
    return path


@pytest.fixture
def dangling(tmp_path: Path) -> Path:
    path = tmp_path / "dangling.xml"
    path.write_text(SCRATCH.read_text().replace('depid="1" deps="1"', 'depid="6" deps="1"', 1))
    return path


def test_validate_examples(run_cli) -> None:
    res = run_cli("validate", *map(str, EXAMPLES))
    assert res.code == 0
    assert res.err == ""
    lines = res.out.splitlines()
    assert len(lines) == len(EXAMPLES)
    for path, line in zip(EXAMPLES, lines, strict=True):
        plan = load(path)
        steps = sum(len(tb.steps) for g in plan.gpus for tb in g.threadblocks)
        assert line.startswith(f"{path}: ok: {plan.coll_xml}, {plan.ngpus} GPUs")
        assert f"{steps} steps (0 warnings)" in line


def test_validate_reports_each_plan_and_fails_if_any_is_invalid(run_cli, dangling: Path,
                                                                 old_header: Path) -> None:
    res = run_cli("validate", str(FIG7), str(dangling), str(old_header))
    assert res.code == 1
    out = res.out.splitlines()
    assert out[0].startswith(f"{FIG7}: ok")
    assert out[1] == f"{dangling}: invalid (1 error, 0 warnings)"
    assert out[2].startswith(f"{old_header}: ok")
    assert out[3].startswith(f"warning: {old_header}:1: <algo>: outofplace, minBytes, maxBytes absent")
    assert res.err == f"nuna: error: {dangling}:6: gpu 0 tb 0 step 2: depid 6 names no threadblock on gpu 0\n"


def test_validate_json(run_cli, dangling: Path, old_header: Path) -> None:
    res = run_cli("validate", "--json", str(dangling), str(old_header))
    assert res.code == 1
    payload = json.loads(res.out)
    assert payload["ok"] is False
    assert payload["strict"] is False
    assert [p["path"] for p in payload["plans"]] == [str(dangling), str(old_header)]
    for entry in payload["plans"]:
        plan, source = load_with_source(entry["path"])
        expected = verify(plan, source=source).to_dict()
        assert {k: entry[k] for k in expected} == expected
    summary = {"collective": "allgather", "ngpus": 2, "threadblocks": 4, "steps": 8}
    assert payload["plans"][1]["summary"] == summary
    # deterministic bytes
    assert run_cli("validate", "--json", str(dangling), str(old_header)).out == res.out


def test_validate_strict_turns_warnings_into_errors(run_cli, old_header: Path) -> None:
    assert run_cli("validate", str(old_header)).code == 0
    res = run_cli("validate", "--strict", str(old_header))
    assert res.code == 1
    assert "outofplace, minBytes, maxBytes absent" in res.err


def test_validate_a_plan_whose_steps_move_no_chunks(run_cli, tmp_path: Path) -> None:
    # fuzzing found cnt=0 on every step crashing the race check (exit 3); it is a wrong result
    path = tmp_path / "cnt0.xml"
    path.write_text(FIG7.read_text().replace('cnt="1"', 'cnt="0"'))
    assert 'cnt="1"' not in path.read_text()
    res = run_cli("validate", str(path))
    assert res.code == 1
    assert res.out.startswith(f"{path}: invalid (1 error, 1 warning)")
    assert "cnt=0 on a 's' step moves no data" in res.out
    assert res.err.startswith(f"nuna: error: {path}: wrong result: gpu 0 output chunk ")
    assert res.err.count("\n") == 1


def test_validate_needs_a_plan(run_cli) -> None:
    res = run_cli("validate")
    assert res.code == 2
    assert res.err.count("\n") == 1


def test_info_text(run_cli) -> None:
    res = run_cli("info", str(FIG7), "--size", "1MB")
    assert res.code == 0
    assert res.err == ""
    out = res.out
    assert "collective: allgather" in out
    assert "GPUs: 2  channels: 2  chunks per loop: 4" in out
    assert "threadblocks per GPU: 2 (total 4)" in out
    assert "steps: 8 (s 4, r 4)" in out
    assert "chunk: 250000 B" in out
    s = summarize(load(FIG7), 10**6)
    assert s.sent_bytes is not None
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["1"])]
    assert [int(r[1]) for r in rows] == list(s.sent_bytes)
    assert [int(r[2]) for r in rows] == list(s.received_bytes or ())
    total = next(line.split() for line in out.splitlines() if line.split()[:1] == ["total"])
    assert int(total[1]) == sum(s.sent_bytes) == 2 * 500000
    assert "MSCCL would not select" not in out  # 250,000 floats divide into 4 chunks
    # a Simple plan's 250,000-byte chunks: one 2 MiB slice, 8 chunks a call, each call in two parts
    assert ("executor slices: 1 of 2097152 B per chunk, calls of up to 8 chunks, each in 2 parts (the first "
            "at least 32768 B)") in out
    assert "on the wire" not in out  # a Simple plan moves its payload only


@pytest.mark.parametrize(("protocol", "ratio"), [("LL", "2x"), ("LL128", "1.07x")])
def test_info_says_how_an_ll_plan_travels(run_cli, tmp_path: Path, protocol: str, ratio: str) -> None:
    path = tmp_path / "ll.xml"
    save(generate("allgather", 2, protocol=protocol), path)
    res = run_cli("info", str(path))
    assert res.code == 0, res.err
    assert f"on the wire: {ratio} the payload (flags in every line), sends do not wait" in res.out


def test_info_notes_a_size_the_executors_would_not_select(run_cli) -> None:
    res = run_cli("info", str(FIG7), "--size", "1000002")  # 250,000.5 floats
    assert res.code == 0
    assert "note: MSCCL would not select this plan at 1000002 B" in res.out
    assert "250001 B" in res.out  # the padded chunk


def test_info_json_matches_the_library(run_cli, old_header: Path) -> None:
    res = run_cli("info", str(old_header), "--size", "4KiB", "--json")
    assert res.code == 0
    payload = json.loads(res.out)
    expected = summarize(load(old_header), 4096).to_dict()
    assert {k: payload[k] for k in expected} == expected
    assert payload["chunk_bytes"] == 1024
    assert payload["executor_slices"]["slices"] == 1
    assert len(payload["warnings"]) == 1
    assert "outofplace, minBytes, maxBytes absent" in payload["warnings"][0]


def test_info_reports_defaulted_attributes(run_cli, old_header: Path) -> None:
    res = run_cli("info", str(old_header))
    assert res.code == 0
    assert "warning: " in res.out
    assert "defaulted to outofplace=0 minBytes=0 maxBytes=0" in res.out


@pytest.mark.parametrize("size", ["1XB", "-5", "abc", "0"])
def test_info_bad_size_is_a_usage_error(run_cli, size: str) -> None:
    res = run_cli("info", str(FIG7), "--size", size)
    assert res.code == 2
    assert res.err.count("\n") == 1
    assert "Traceback" not in res.err


def test_info_pads_a_size_that_does_not_split_into_chunks(run_cli) -> None:
    exact = run_cli("info", str(FIG7), "--size", "1004", "--json")
    padded = run_cli("info", str(FIG7), "--size", "1001", "--json")
    assert exact.code == padded.code == 0
    assert json.loads(padded.out)["chunk_bytes"] == json.loads(exact.out)["chunk_bytes"] == 251


def test_dag_graphml(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "dag.graphml"
    res = run_cli("dag", str(SCRATCH), "-o", str(out))
    assert res.code == 0
    graph = nx.read_graphml(out, node_type=int)
    dag = build_dag(load(SCRATCH))
    assert graph.number_of_nodes() == dag.num_nodes
    kinds = [k for _, _, k in graph.edges(data="kind")]
    assert sorted(set(kinds)) == ["data", "dependency", "program"]
    assert kinds.count("data") == int((dag.match_recv >= 0).sum())
    assert kinds.count("program") + kinds.count("dependency") == dag.ctrl_indices.shape[0]
    for n, attrs in graph.nodes(data=True):
        assert (attrs["gpu"], attrs["tb"], attrs["step"]) == (int(dag.node_gpu[n]), int(dag.node_tb[n]),
                                                              int(dag.node_step[n]))
    assert f"wrote {out}: {dag.num_nodes} nodes" in res.out
    first = out.read_bytes()
    assert run_cli("dag", str(SCRATCH), "-o", str(out)).code == 0
    assert out.read_bytes() == first


def test_dag_of_a_broken_plan(run_cli, tmp_path: Path, dangling: Path) -> None:
    out = tmp_path / "x.graphml"
    res = run_cli("dag", str(dangling), "-o", str(out))
    assert res.code == 1
    assert res.err == "nuna: error: gpu 0 tb 0 step 2: depid 6 names no threadblock on gpu 0\n"
    assert not out.exists()


def test_dag_into_a_missing_folder(run_cli, tmp_path: Path) -> None:
    res = run_cli("dag", str(FIG7), "-o", str(tmp_path / "no" / "such" / "dag.graphml"))
    assert res.code == 1
    assert res.err.count("\n") == 1
    assert "does not exist" in res.err


def test_dag_needs_an_output(run_cli) -> None:
    res = run_cli("dag", str(FIG7))
    assert res.code == 2


@pytest.mark.parametrize("ngpus", [1, 3, 1000])
def test_info_and_dag_warn_when_ngpus_disagrees_with_the_gpus(run_cli, tmp_path: Path, ngpus: int) -> None:
    plan = tmp_path / "miscounted.xml"
    plan.write_text(FIG7.read_text().replace('ngpus="2"', f'ngpus="{ngpus}"', 1))
    expected = f"ngpus={ngpus} but the plan has 2 <gpu> elements"
    text = run_cli("info", str(plan), "--size", "4KiB")
    assert text.code == 0
    assert f"warning: {expected} (the plan cannot be simulated" in text.out
    as_json = run_cli("info", str(plan), "--json")
    assert as_json.code == 0
    assert any(w.startswith(expected) for w in json.loads(as_json.out)["warnings"])
    res = run_cli("dag", str(plan), "-o", str(tmp_path / "d.graphml"))
    assert res.code == 0
    assert f"warning: {expected}" in res.out
    assert "warning" not in run_cli("info", str(FIG7)).out
