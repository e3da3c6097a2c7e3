"""``nuna simulate``: the nccl-tests row, JSON and trace files, errors as one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nuna.plan.generate import generate
from nuna.plan.xml import save
from tests.sim.test_replay import DEADLOCK


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "ag4.xml"
    save(generate("allgather", 4, tbs_per_peer=2), path)
    return path


def test_simulate_prints_row_and_writes_files(run_cli, plan_file: Path, tmp_path: Path) -> None:
    out, trace = tmp_path / "r.json", tmp_path / "t.json"
    res = run_cli("simulate", plan_file, "--size", "256kB", "--json", out, "--trace", trace)
    assert res.code == 0, res.err
    rows = [line for line in res.out.splitlines() if not line.startswith("#")]
    assert len(rows) == 1
    size, count, kind, time_us, algbw, busbw = rows[0].split()
    data = json.loads(out.read_text())
    assert int(size) == data["size_bytes"] == 256_000
    assert int(count) == 256_000 // 4 // 4  # nccl-tests' count of an allgather: per rank
    assert kind == "float"
    assert float(time_us) == pytest.approx(data["time_ns"] / 1000, abs=0.01)
    assert float(busbw) == pytest.approx(float(algbw) * 3 / 4, abs=0.02)
    for key in ("time_ns", "lower_bound_ns", "placement_floor_ns", "busbw_gbps", "remote_store_latency_ns",
                "io_ports", "links", "noc_hops", "die_crossing_bytes", "events", "wall_s"):
        assert key in data
    lat = data["remote_store_latency_ns"]
    assert lat["count"] == sum(lat["histogram"]["counts"])
    assert lat["p50"] <= lat["p99"] <= lat["max"] + lat["histogram"]["bin_ns"]
    events = json.loads(trace.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in slices} == {0, 1, 2, 3}
    assert any(e["ph"] == "C" and e["name"].startswith("io port") for e in events)
    assert max(e["ts"] + e["dur"] for e in slices) == pytest.approx(data["time_ns"] / 1000)
    # each threadblock's track says where it ran, as the baseline placed it
    from nuna.plan.dag import flatten
    from nuna.plan.xml import load
    from nuna.sim.layout import threadblock_cus
    from nuna.topology import chip_geometry, load_topology

    spec = load_topology("nuna-4die")
    plan = load(plan_file)
    flat = flatten(plan)
    geo = chip_geometry(spec.chip)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert len(names) == flat.tb_gpu.shape[0]
    for t, cu in enumerate(threadblock_cus(plan, spec, flat).tolist()):
        x, y = geo.router_xy[geo.cu_router[cu]]
        assert names[(int(flat.tb_gpu[t]), int(flat.tb_id[t]))].endswith(
            f") CU {cu}, die {geo.cu_die[cu]}, router ({x}, {y})")
    # the summary names the port link with the longest mean wait, as the JSON has it
    waits = [(p["queueing_ns_mean"][link], p["gpu"], p["port"], link)
             for p in data["io_ports"] for link in p["queueing_ns_mean"]]
    wait_ns, gpu, port, link = max(waits, key=lambda w: w[0])
    assert wait_ns > 0
    assert f"{wait_ns:.1f} ns per packet for {link} at GPU {gpu} port {port}" in res.out
    # 64,000 floats divide into the plan's 8 chunks: nothing padded, nothing to note
    assert data["msccl_selectable"] is True
    assert data["padding_bytes"] == 0
    assert "MSCCL" not in res.out


def test_simulate_notes_a_size_the_executors_would_not_select(run_cli, plan_file: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = run_cli("simulate", plan_file, "--size", "100004", "--json", out)  # 25,001 floats, 8 chunks
    assert res.code == 0, res.err
    data = json.loads(out.read_text())
    assert data["msccl_selectable"] is False
    assert data["padding_bytes"] == 8 * data["chunk_bytes"] - 100_004 > 0
    assert "# note: MSCCL would not select this plan at 100004 B" in res.out


@pytest.mark.parametrize(("packet", "coarse"), [("256", False), ("512", True)])
def test_simulate_notes_coarse_packets(run_cli, plan_file: Path, packet: str, coarse: bool) -> None:
    # every packet of several lines is coarse (nuna.sim.result.COARSE_PACKET_BYTES)
    res = run_cli("simulate", plan_file, "--size", "1MiB", "--packet-bytes", packet)
    assert res.code == 0, res.err
    assert ("# note: packets of 512B are coarse (over 256B)" in res.out) is coarse
    assert ("coarse" in res.out) is coarse


def test_simulate_json_is_deterministic(run_cli, plan_file: Path, tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        path = tmp_path / f"r{i}.json"
        res = run_cli("simulate", plan_file, "--size", "100kB", "--json", path, "--packet-bytes", "auto")
        assert res.code == 0
        data = json.loads(path.read_text())
        data.pop("wall_s")
        outs.append(data)
    assert outs[0] == outs[1]


@pytest.mark.parametrize(("args", "code"), [
    (("--size", "1xB"), 2),
    (("--size", "1MB", "--packet-bytes", "big"), 2),
    (("--size", "1MB", "--packet-bytes", "300"), 1),
    (("--size", "1MB", "--topology", "no-such-topology"), 1),
])
def test_simulate_errors_are_one_line(run_cli, plan_file: Path, args: tuple[str, ...], code: int) -> None:
    res = run_cli("simulate", plan_file, *args)
    assert res.code == code
    assert res.err.count("\n") == 1
    assert "Traceback" not in res.err


def test_simulate_reports_deadlock(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "dl.xml"
    path.write_text(DEADLOCK)
    res = run_cli("simulate", path, "--size", "512")
    assert res.code == 1
    assert res.err.startswith(f"nuna: error: {path}: deadlock:")  # which of the user's plans
    assert res.err.count("\n") == 1


@pytest.mark.parametrize("extra", [(), ("--bounds-only",)])
def test_simulate_checks_ngpus_against_the_gpus_before_using_it(run_cli, plan_file: Path, tmp_path: Path,
                                                                extra: tuple[str, ...]) -> None:
    # a plan claiming a million GPUs over its four <gpu> elements: named as such at once (a
    # claim of 2**31 used to be expanded into a list of GPU ids and exhaust the memory)
    path = tmp_path / "big.xml"
    path.write_text(plan_file.read_text().replace('ngpus="4"', 'ngpus="1000000"', 1))
    res = run_cli("simulate", path, "--size", "64KiB", *extra)
    assert res.code == 1
    assert res.err.count("\n") == 1
    assert "ngpus=1000000 but the plan has 4 <gpu> elements" in res.err


def test_simulate_missing_plan(run_cli, tmp_path: Path) -> None:
    res = run_cli("simulate", tmp_path / "nope.xml", "--size", "1MB")
    assert res.code == 1
    assert res.err.count("\n") == 1


def test_simulate_config_rewrites_before_the_replay(run_cli, tmp_path) -> None:
    import json

    from nuna.plan.generate import generate
    from nuna.plan.xml import dump

    plan_path = tmp_path / "ag2.xml"
    plan_path.write_text(dump(generate("allgather", 2)))
    out = tmp_path / "r.json"
    res = run_cli("simulate", plan_path, "--size", "100kB", "--config", "UA+NAR",
                  "--nar-granularity", "4", "--json", out)
    assert res.code == 0, res.err
    result = json.loads(out.read_text())
    assert (result["config"], result["nar_granularity"]) == ("UA+NAR", 4)
    bad = run_cli("simulate", plan_path, "--size", "100kB", "--config", "BOGUS")
    assert bad.code == 1
    assert bad.err.count("\n") == 1


def test_simulate_windowed(run_cli, plan_file: Path, tmp_path: Path) -> None:
    out, plain = tmp_path / "w.json", tmp_path / "p.json"
    assert run_cli("simulate", plan_file, "--size", "256kB", "--json", plain).code == 0
    res = run_cli("simulate", plan_file, "--size", "256kB", "--windowed", "--json", out)
    assert res.code == 0, res.err
    windowed, one_queue = json.loads(out.read_text()), json.loads(plain.read_text())
    assert windowed["window_ns"] > 0
    assert one_queue["window_ns"] == 0
    assert windowed["events"] == one_queue["events"]
    forced = tmp_path / "o.json"
    assert run_cli("simulate", plan_file, "--size", "256kB", "--one-queue", "--json", forced).code == 0
    assert json.loads(forced.read_text())["window_ns"] == 0
    # a trace samples every GPU at one time: refused in one line, nothing written
    trace = tmp_path / "t.json"
    res = run_cli("simulate", plan_file, "--size", "256kB", "--windowed", "--trace", trace)
    assert res.code != 0
    assert "windowed scheduling cannot record a trace" in res.err
    assert "Traceback" not in res.err
    assert not trace.exists()


def test_simulate_says_when_a_trace_kept_a_windowed_pod_in_one_queue(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    note = "--trace replayed with one event queue"
    plan = tmp_path / "ag16.xml"
    assert run_cli("generate", "allgather", "--gpus", "16", "-o", plan).code == 0
    traced = run_cli("simulate", plan, "--size", "64KiB", "--trace", tmp_path / "t.json")
    assert traced.code == 0, traced.err
    assert f"# note: {note}" in traced.out
    assert note not in run_cli("simulate", plan, "--size", "64KiB").out
    asked = run_cli("simulate", plan, "--size", "64KiB", "--one-queue", "--trace", tmp_path / "u.json")
    assert note not in asked.out


def test_simulate_bounds_only_gives_the_replays_bounds_without_replaying(run_cli, plan_file: Path,  # type: ignore[no-untyped-def]
                                                                         tmp_path: Path) -> None:
    full, bounds = tmp_path / "r.json", tmp_path / "b.json"
    replay = run_cli("simulate", plan_file, "--size", "1MiB", "--packet-bytes", "auto", "--json", full)
    assert replay.code == 0, replay.err
    res = run_cli("simulate", plan_file, "--size", "1MiB", "--packet-bytes", "auto", "--bounds-only",
                  "--json", bounds)
    assert res.code == 0, res.err
    replayed, data = json.loads(full.read_text()), json.loads(bounds.read_text())
    assert (data["lower_bound_ns"], data["placement_floor_ns"]) == (replayed["lower_bound_ns"],
                                                                     replayed["placement_floor_ns"])
    assert "events" not in data
    assert f"placement floor {data['placement_floor_ns']:.1f} ns (no replay)" in res.out
    bad = run_cli("simulate", plan_file, "--size", "1MiB", "--bounds-only", "--trace", tmp_path / "t.json")
    assert bad.code != 0
    assert len(bad.err.strip().splitlines()) == 1
    assert not (tmp_path / "t.json").exists()


def test_simulate_names_the_busiest_port(run_cli, plan_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "r.json"
    res = run_cli("simulate", plan_file, "--size", "1MiB", "--json", out)
    assert res.code == 0, res.err
    ports = json.loads(out.read_text())["io_ports"]
    share, gpu, port, direction = max((p[f"{d}_utilization"], -p["gpu"], -p["port"], d == "egress")
                                       for p in ports for d in ("egress", "ingress"))
    assert share > 0
    where = f"GPU {-gpu} port {-port} {'egress' if direction else 'ingress'}"
    assert f"busiest I/O port {share * 100:.0f}% busy ({where}) over the run;" in res.out


def test_simulate_warns_of_a_plan_that_computes_a_wrong_result(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # steps that move no chunk: structurally sound, so replayed, but the allgather is not done
    path = tmp_path / "cnt0.xml"
    save(generate("allgather", 2), path)
    path.write_text(path.read_text().replace('cnt="1"', 'cnt="0"'))
    res = run_cli("simulate", path, "--size", "1MiB")
    assert res.code == 0, res.err
    assert res.err.startswith(f"nuna: warning: {path}: wrong result: gpu 0 output chunk 1")
    assert res.err.endswith("the replay times the plan's data movement as written\n")
    assert res.err.count("\n") == 1
    # a configuration refuses such a plan instead (it checks its input)
    refused = run_cli("simulate", path, "--size", "1MiB", "--config", "UA")
    assert refused.code == 1
    assert refused.err.startswith(f"nuna: error: {path}: wrong result: ")


def test_simulate_warns_of_a_placement_made_for_another_size(run_cli, plan_file: Path,  # type: ignore[no-untyped-def]
                                                             tmp_path: Path) -> None:
    placed = tmp_path / "nap.xml"
    assert run_cli("rewrite", plan_file, "-c", "NAP+NAR", "-s", "1MiB", "-o", placed).code == 0
    same = run_cli("simulate", placed, "--size", "1MiB")
    assert same.code == 0
    assert same.err == ""
    other = run_cli("simulate", placed, "--size", "4MiB")
    assert other.code == 0
    assert other.err == (f"nuna: warning: {placed}: its NAP+NAR placement was made for 1MiB (nuna:size) "
                         "and is replayed at 4MiB; budgets and the NAR granularity depend on the size "
                         "(rewrite it for this size, or give --config)\n")
    # --config places it afresh for the size asked
    assert run_cli("simulate", placed, "--size", "4MiB", "--config", "NAP+NAR").err == ""


def test_simulate_packets_default_to_the_topologys_flit(run_cli, plan_file: Path,  # type: ignore[no-untyped-def]
                                                        tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "nuna" / "topology" / "data" / "nuna-4die.toml").read_text()
    assert text.count("flit_bytes = { value = 256,") == 1
    chip = tmp_path / "flit128.toml"
    chip.write_text(text.replace("flit_bytes = { value = 256,", "flit_bytes = { value = 128,"))
    for topology, packet in ((chip, 128), ("nuna-4die", 256)):
        res = run_cli("simulate", plan_file, "--size", "64KiB", "--topology", topology)
        assert res.code == 0, res.err
        assert f"packets of {packet} B" in res.out
    # a size with a unit is a packet size too
    kib = run_cli("simulate", plan_file, "--size", "64KiB", "--packet-bytes", "1KiB")
    assert kib.code == 0
    assert "packets of 1024 B" in kib.out


@pytest.mark.parametrize("command", [
    ("simulate", "--size", "1MiB"),
    ("simulate", "--size", "1MiB", "--bounds-only"),
    ("simulate", "-s", "1MiB", "-c", "UA"),
    ("rewrite", "-c", "NAP+NAR", "-o", "out.xml"),
    ("diff", "-s", "1MiB"),
])
def test_a_plan_error_names_the_file(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                     command: tuple[str, ...]) -> None:
    # a dependency on a threadblock that does not exist: the library says where in the plan,
    # the command which file (validate named it; simulate, rewrite and diff did not)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "dangling.xml"
    save(generate("allgather", 2), path)
    path.write_text(path.read_text().replace('depid="-1" deps="-1"', 'depid="5" deps="0"'))
    res = run_cli(command[0], path, *command[1:])
    assert res.code == 1
    assert res.err.startswith(f"nuna: error: {path}: gpu 0 tb 0 step 0: depid 5 names no threadblock")
    assert res.err.count("\n") == 1
    assert not (tmp_path / "out.xml").exists()


@pytest.mark.parametrize(("old", "new", "says"), [
    ('nuna:cu="', 'nuna:cu="4000', "tb 0: placement names CU 4000"),
    ('off="0" stack="', 'off="0" stack="7', "chunk placement names HBM stack 7"),
])
def test_a_placement_the_chip_lacks_names_the_file(run_cli, tmp_path: Path, old: str, new: str,  # type: ignore[no-untyped-def]
                                                   says: str) -> None:
    placed, bad = tmp_path / "placed.xml", tmp_path / "bad.xml"
    save(generate("allgather", 2), tmp_path / "ag.xml")
    assert run_cli("rewrite", tmp_path / "ag.xml", "-c", "NAP+NAR", "-s", "1MiB", "-o", placed).code == 0
    text = placed.read_text()
    assert old in text
    bad.write_text(text.replace(old, new))  # CU 4000-4xxx of 1,008; stack 7x of 16
    for command in (("simulate", bad, "--size", "1MiB"), ("simulate", bad, "-s", "1MiB", "--bounds-only")):
        res = run_cli(*command)
        assert res.code == 1
        assert res.err.startswith(f"nuna: error: {bad}: gpu 0"), res.err
        assert says in res.err
        assert "nuna-4die's chip has" in res.err
        assert res.err.count("\n") == 1


def test_simulate_splits_the_remote_store_latency(run_cli, plan_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "r.json"
    res = run_cli("simulate", plan_file, "--size", "1MiB", "--json", out)
    assert res.code == 0, res.err
    data = json.loads(out.read_text())
    mean, parts = data["remote_store_latency_ns"]["mean"], data["remote_store_zero_load_ns"]
    assert set(parts) == {"sender_chip", "scale_up", "receiver_chip", "memory_write", "total"}
    assert mean >= parts["total"] > 0
    line = next(x for x in res.out.splitlines() if x.startswith("# remote store latency:"))
    assert line.startswith(f"# remote store latency: mean {round(mean)} ns = without waiting "
                           f"{round(parts['total'])} (sender chip {parts['sender_chip']:.0f}, scale-up "
                           f"{parts['scale_up']:.0f}, receiver chip {parts['receiver_chip']:.0f}, "
                           f"memory write {parts['memory_write']:.0f}) + waiting ")
    # the equation as printed adds up
    numbers = [int(n) for n in re.findall(r"(?:mean|without waiting|\+ waiting) (-?\d+)", line)]
    assert numbers[0] == numbers[1] + numbers[2]


@pytest.mark.parametrize(("collective", "per_rank"), [
    ("allreduce", False), ("reducescatter", True), ("alltoall", True)])
def test_simulate_count_column_is_nccl_tests(run_cli, tmp_path: Path, collective: str,  # type: ignore[no-untyped-def]
                                             per_rank: bool) -> None:
    # nccl-tests prints its paramcount: elements per rank, the whole buffer's for allreduce
    path = tmp_path / f"{collective}.xml"
    save(generate(collective, 4), path)
    res = run_cli("simulate", path, "--size", "64KiB")
    assert res.code == 0, res.err
    size, count = next(line for line in res.out.splitlines() if not line.startswith("#")).split()[:2]
    assert int(size) == 65536
    assert int(count) == (65536 // 4 // 4 if per_rank else 65536 // 4)


def test_a_flat_chips_trace_names_no_router(run_cli, plan_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.json"
    assert run_cli("simulate", plan_file, "--size", "64KiB", "-t", "flat-switch", "--trace", trace).code == 0
    names = [e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"]
    assert names
    assert all(" CU " in n and "router" not in n for n in names)


def test_simulate_replays_re_chains_fused_unless_told_not_to(run_cli, tmp_path: Path) -> None:
    from nuna.sim import SimOptions, simulate
    from nuna.topology.spec import load_topology

    plan = generate("reducescatter", 8)
    path = tmp_path / "rs8.xml"
    save(plan, path)
    times = {}
    for flag in ("--reduce-fusion", "--no-reduce-fusion"):
        out = tmp_path / f"{flag}.json"
        res = run_cli("simulate", path, "--size", "256KiB", "--json", out, flag)
        assert res.code == 0, res.err
        times[flag] = json.loads(out.read_text())["time_ns"]
    spec = load_topology("nuna-4die")
    assert times["--reduce-fusion"] == simulate(plan, spec, 256 * 1024).time_ns
    assert times["--no-reduce-fusion"] == simulate(plan, spec, 256 * 1024,
                                                   options=SimOptions(reduce_fusion=False)).time_ns
    assert times["--reduce-fusion"] < times["--no-reduce-fusion"]


def test_simulate_runs_the_executors_slices_when_told(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "ring4.xml"
    save(generate("allgather", 4, algo="ring", protocol="LL"), path)
    out = {flag: tmp_path / f"{i}.json" for i, flag in enumerate(("", "--executor-slices"))}
    for flag, json_file in out.items():
        res = run_cli("simulate", path, "--size", "1MiB", "--json", json_file, *([flag] if flag else []))
        assert res.code == 0, res.err
        assert "# note: replayed as Simple" not in res.out  # LL is modelled, sliced or not
    whole, sliced = (json.loads(f.read_text()) for f in out.values())
    assert "executor_slices" not in whole
    assert sliced["executor_slices"]["slices"] == 8  # 256 KiB chunks of 32 KiB LL slices
    assert sliced["steps"] == whole["steps"]
    assert sliced["time_ns"] != whole["time_ns"]


def test_simulate_replays_an_ll_plan_as_simple_when_told(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "ring4.xml"
    save(generate("allgather", 4, algo="ring", protocol="LL"), path)
    data = {}
    for model in ("plan", "simple"):
        json_file = tmp_path / f"{model}.json"
        res = run_cli("simulate", path, "--size", "1MiB", "--json", json_file, "--protocol-model", model)
        assert res.code == 0, res.err
        # only the replay as Simple says what it leaves out
        noted = "# note: replayed as Simple: this LL plan's 2x bytes on the wire" in res.out
        assert noted is (model == "simple")
        data[model] = json.loads(json_file.read_text())
    assert data["plan"]["protocol"] == {"name": "LL", "model": "plan", "wire_bytes_per_payload_byte": 2.0,
                                        "fenced_sends": False}
    assert data["simple"]["protocol"] == {"name": "LL", "model": "simple", "wire_bytes_per_payload_byte": 1.0,
                                          "fenced_sends": True}
    assert data["plan"]["landed_bytes"] == data["simple"]["landed_bytes"]
    bad = run_cli("simulate", path, "--size", "1MiB", "--protocol-model", "wire")
    assert bad.code != 0
    assert "Traceback" not in bad.err
