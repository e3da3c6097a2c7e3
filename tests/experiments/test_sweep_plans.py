"""Sweeps of plan files (``[grid] plans``): hand-written or compiler-made plans swept over sizes,
configurations, NAR granularities and topologies as generated plans are."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nuna.errors import InputError, UsageError
from nuna.experiments.executors import resolve_point_function
from nuna.experiments.figures import figure_data, render
from nuna.experiments.spec import (
    DEFAULT_POINT_FUNCTION,
    PLAN_ALGO,
    PLAN_TBS_PER_PEER,
    PlanPoint,
    Point,
    expand,
    load_sweep_spec,
    parse_sweep_spec,
    plan_file_sha256,
    point_id,
    recorded_plan_file,
    recorded_topology_file,
    restrict_grid,
)
from nuna.experiments.sweep import load_results, run_sweep, tasks_of
from nuna.plan.generate import generate
from nuna.plan.xml import load, save
from tests.conftest import PLANS_MSCCL, script_module

REPO = Path(__file__).resolve().parents[2]
#: the smallest real plan of the shared corpus: a 2-GPU ring allgather of msccl-tools
MSCCL_PLAN = PLANS_MSCCL / "allgather_ring_n2_c2_i1_LL128.xml"
SIZE = 16 * 1024


def _write_plans(folder: Path) -> None:
    """Two generated plans (plans/ag2.xml, plans/ar4.xml) and, when the corpus is there, a real
    one beside the project (../shared/ring.xml)."""
    (folder / "plans").mkdir(parents=True)
    save(generate("allgather", 2, algo="direct", tbs_per_peer=1), folder / "plans" / "ag2.xml")
    save(generate("allreduce", 4, algo="ring", tbs_per_peer=1), folder / "plans" / "ar4.xml")
    if MSCCL_PLAN.is_file():
        (folder.parent / "shared").mkdir(exist_ok=True)
        shutil.copyfile(MSCCL_PLAN, folder.parent / "shared" / "ring.xml")


def _plans_line() -> str:
    plans = ['"plans/ag2.xml"', '"plans/ar4.xml"']
    if MSCCL_PLAN.is_file():
        plans.append('"../shared/ring.xml"')
    return f"plans = [{', '.join(plans)}]\n"


def _spec_text(point_function: str = DEFAULT_POINT_FUNCTION, sizes: str = '["16KiB"]') -> str:
    return (f'[sweep]\nname = "mine"\npoint_function = "{point_function}"\n'
            f'[grid]\n{_plans_line()}sizes = {sizes}\nconfigs = ["UA", "NAP+NAR"]\n')


@pytest.fixture(scope="module")
def plan_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real sweep (the default point function) of the plan files: (project folder, output)."""
    folder = tmp_path_factory.mktemp("plan_sweep") / "project"
    _write_plans(folder)
    (folder / "spec.toml").write_text(_spec_text())
    out = folder / "out"
    summary = run_sweep(load_sweep_spec(folder / "spec.toml"), out, jobs=1)
    assert summary.complete, summary.failed
    return folder, out


def _files(folder: Path) -> dict[str, Path]:
    """The sweep's plan files by the name its records give them."""
    files = {"ag2.xml": folder / "plans" / "ag2.xml", "ar4.xml": folder / "plans" / "ar4.xml"}
    if MSCCL_PLAN.is_file():
        files["ring.xml"] = folder.parent / "shared" / "ring.xml"
    return files


def test_records_take_collective_and_pod_from_the_files_and_name_them_by_file_name(
        plan_sweep: tuple[Path, Path]) -> None:
    folder, out = plan_sweep
    records = load_results(out)
    files = _files(folder)
    assert len(records) == 2 * len(files)
    expected = {"ag2.xml": ("allgather", 2), "ar4.xml": ("allreduce", 4), "ring.xml": ("allgather", 2)}
    for record in records:
        point = record["point"]
        assert (point["collective"], point["gpus"]) == expected[point["plan"]]
        assert (point["tbs_per_peer"], point["algo"]) == (PLAN_TBS_PER_PEER, PLAN_ALGO)
    # expansion order: plans outermost (after topologies), then sizes, then configurations
    assert [(r["point"]["plan"], r["point"]["config"]) for r in records] == [
        (name, config) for name in files for config in ("UA", "NAP+NAR")]
    # no local path in the index or a result; the index lists the files by name
    index = (out / "index.json").read_text()
    assert str(folder.parent) not in index
    assert all(str(folder.parent) not in p.read_text() for p in (out / "results").iterdir())
    spec = json.loads(index)["spec"]
    assert spec["grid"]["plans"] == list(files)
    assert not {"collectives", "gpus", "tbs_per_peer"} & set(spec["grid"])
    assert "algo" not in spec["fixed"]


def test_a_plan_point_is_the_plan_placed_and_simulated(plan_sweep: tuple[Path, Path]) -> None:
    from nuna.passes import PassContext, apply_config
    from nuna.sim import simulate
    from nuna.topology.spec import load_topology

    folder, out = plan_sweep
    files = _files(folder)
    topology = load_topology("nuna-4die")
    for record in load_results(out):
        point = record["point"]
        placed = apply_config(load(files[point["plan"]]), point["config"], PassContext(topology, SIZE), None,
                              seed=0)
        result = simulate(placed, topology, SIZE, packet_bytes=256, seed=0)
        assert record["result"]["time_ns"] == result.time_ns, point
        assert record["result"]["nar_granularity_used"] == placed.placement.nar_granularity


def test_labels_figures_and_the_headroom_script_read_plan_records(plan_sweep: tuple[Path, Path]) -> None:
    folder, out = plan_sweep
    spec = load_sweep_spec(folder / "spec.toml")
    labels = [p.label() for p in expand(spec)]
    assert labels[:2] == ["allgather 2gpu 16KiB UA plan=ag2.xml nuna-4die",
                          "allgather 2gpu 16KiB NAP+NAR G=heuristic plan=ag2.xml nuna-4die"]
    assert not any("K=" in label for label in labels)  # no threadblock count of their own
    records = load_results(out)
    data = figure_data("fig9", records)
    assert len(data["rows"]) == len(records)
    assert all(r["speedup"] is not None for r in data["rows"])
    assert {r["tbs_per_peer"] for r in data["rows"]} == {PLAN_TBS_PER_PEER}
    figure = render("fig13", figure_data("fig13", records))
    legend = figure.axes[0].get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == ["the plan files' threadblocks"]
    assert "fastest of" not in figure.get_suptitle()
    # scripts/headroom.py: a row per plan, told apart by a plan column
    headroom = script_module("headroom")
    rows = headroom.headroom_rows(out)
    assert sorted(r["inputs"]["plan"] for r in rows) == sorted(_files(folder))
    # floors recomputed from the plan files found again (by file name and bytes) are the stored ones
    folders = (folder / "plans", folder.parent / "shared")
    again = headroom.headroom_rows(out, recompute=True, topology_dirs=folders)
    assert [r["floor_ns"] for r in again] == [r["floor_ns"] for r in rows]
    table = headroom.table(rows)
    assert "| plan |" in table[0]
    # a plan file's point has no threadblock count to show ([K] would print a made-up 0)
    assert not any("[0]" in line for line in table[2:])


def test_ids_follow_a_plan_files_bytes_not_its_folder(fake_points: str, tmp_path: Path) -> None:
    specs = []
    for place in ("a", "b/deeper"):
        _write_plans(tmp_path / place)
        (tmp_path / place / "spec.toml").write_text(_spec_text("sweep_fake_points:echo_point"))
        specs.append(load_sweep_spec(tmp_path / place / "spec.toml"))
    first, second = specs
    assert [t.point_id for t, _ in tasks_of(first)] == [t.point_id for t, _ in tasks_of(second)]
    run_sweep(first, tmp_path / "a" / "out", jobs=1)
    run_sweep(second, tmp_path / "b" / "out", jobs=1)
    index = (tmp_path / "a" / "out" / "index.json").read_bytes()
    assert index == (tmp_path / "b" / "out" / "index.json").read_bytes()
    assert str(tmp_path) not in index.decode()
    # the point function gets the file's path; the id holds its bytes
    task, point = tasks_of(second)[0]
    path = tmp_path / "b" / "deeper" / "plans" / "ag2.xml"
    assert task.inputs is not None
    assert task.inputs["plan"] == str(path.resolve())
    assert task.point["plan"] == "ag2.xml"
    assert task.point_id == point_id(point.record(), second.point_function,
                                     plan_sha256=plan_file_sha256(str(path)))
    # the moved project adopts the results
    moved = run_sweep(second, tmp_path / "fresh", jobs=1, reuse=[tmp_path / "a" / "out"])
    assert (moved.ran, moved.already_done) == (0, len(tasks_of(second)))
    # the same name and header, other bytes: that file's points are new points, the others' are not
    before = {t.point["plan"] + t.point["config"]: t.point_id for t, _ in tasks_of(first)}
    save(generate("allgather", 2, algo="direct", tbs_per_peer=2), tmp_path / "a" / "plans" / "ag2.xml")
    after = {t.point["plan"] + t.point["config"]: t.point_id for t, _ in tasks_of(load_sweep_spec(
        tmp_path / "a" / "spec.toml"))}
    assert {key for key in before if before[key] != after[key]} == {"ag2.xmlUA", "ag2.xmlNAP+NAR"}
    # the loaded spec sees the edit too: ids are taken from the files when the sweep runs
    assert {t.point["plan"] + t.point["config"]: t.point_id for t, _ in tasks_of(first)} == after
    edited = run_sweep(first, tmp_path / "a" / "out", jobs=1)
    assert (edited.ran, edited.already_done) == (2, len(after) - 2)


def test_a_record_finds_its_plan_and_topology_files_again(fake_points: str, tmp_path: Path) -> None:
    chip = (REPO / "topologies" / "nuna-4die.toml").read_text().replace('name = "nuna-4die"',
                                                                       'name = "my-chip"')
    _write_plans(tmp_path / "p")
    (tmp_path / "p" / "chip.toml").write_text(chip)
    (tmp_path / "p" / "spec.toml").write_text(
        '[sweep]\npoint_function = "sweep_fake_points:echo_point"\n[grid]\nplans = ["plans/ag2.xml"]\n'
        'sizes = ["16KiB"]\nconfigs = ["UA"]\ntopologies = ["chip.toml", "nuna-4die"]\n')
    run_sweep(load_sweep_spec(tmp_path / "p" / "spec.toml"), tmp_path / "out", jobs=1)
    on_file, shipped = load_results(tmp_path / "out")
    folders = [tmp_path / "p", tmp_path / "p" / "plans"]
    assert recorded_plan_file(on_file, folders) == str(tmp_path / "p" / "plans" / "ag2.xml")
    assert recorded_topology_file(on_file, folders) == str(tmp_path / "p" / "chip.toml")
    plan = tmp_path / "p" / "plans" / "ag2.xml"
    assert recorded_plan_file(shipped, [plan.parent]) == str(plan)
    assert recorded_topology_file(shipped, []) == "nuna-4die"
    # the plan file's bytes are part of the id: without it, the topology file is not taken either
    with pytest.raises(InputError, match=r"topology file chip\.toml .* \(with plan file ag2\.xml\)"):
        recorded_topology_file(on_file, [tmp_path / "p"])
    save(generate("allgather", 2, algo="direct", tbs_per_peer=3), tmp_path / "p" / "plans" / "ag2.xml")
    with pytest.raises(InputError, match=r"plan file ag2\.xml with the bytes it was computed with is not in"):
        recorded_plan_file(shipped, [tmp_path / "p" / "plans"])
    generated = {**shipped, "point": {k: v for k, v in shipped["point"].items() if k != "plan"}}
    assert recorded_plan_file(generated, folders) is None


def test_the_cli_sweeps_plan_files(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    _write_plans(tmp_path / "p")
    spec = tmp_path / "p" / "spec.toml"
    spec.write_text('[grid]\nplans = ["plans/ag2.xml"]\nsizes = ["4KiB"]\nconfigs = ["UA", "UA+NAR"]\n'
                    'nar_granularities = [2]\n')
    dry = run_cli("sweep", spec, "-o", tmp_path / "out", "--dry-run")
    assert dry.code == 0, dry.err
    assert "2 points: 0 done, 0 failed, 2 pending" in dry.out
    first = run_cli("sweep", spec, "-o", tmp_path / "out", "-j", "1")
    assert first.code == 0, first.err
    assert "2 points, 0 already done, 2 ran (2 ok, 0 failed)" in first.out
    again = run_cli("sweep", spec, "-o", tmp_path / "out", "-j", "1")
    assert "2 points, 2 already done, 0 ran" in again.out
    records = load_results(tmp_path / "out")
    assert [(r["point"]["plan"], r["point"]["nar_granularity"], r["result"]["nar_granularity_used"])
            for r in records] == [("ag2.xml", None, None), ("ag2.xml", 2, 2)]
    (tmp_path / "p" / "bad.toml").write_text(spec.read_text() + 'gpus = [2]\n')
    bad = run_cli("sweep", tmp_path / "p" / "bad.toml", "-o", tmp_path / "bad")
    assert bad.code == 1
    assert bad.err.count("\n") == 1
    assert "bad.toml: [grid] gpus: not with [grid] plans" in bad.err
    assert not (tmp_path / "bad").exists()


def _refused(tmp_path: Path, text: str, message: str) -> str:
    path = tmp_path / "p" / "spec.toml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_sweep_spec(path)
    error = str(info.value)
    assert error.startswith(f"{path}: "), error
    assert "\n" not in error
    assert re.search(message, error), error
    return error


_HEAD = '[grid]\nplans = ["plans/ag2.xml"]\nsizes = ["4KiB"]\nconfigs = ["UA"]\n'


@pytest.mark.parametrize(("text", "message"), [
    (_HEAD + 'collectives = ["allgather"]\n', r": \[grid\] collectives: not with \[grid\] plans"),
    (_HEAD + "gpus = [2]\n", r": \[grid\] gpus: not with \[grid\] plans"),
    (_HEAD + "tbs_per_peer = [1]\n", r": \[grid\] tbs_per_peer: not with \[grid\] plans"),
    (_HEAD + '[fixed]\nalgo = "direct"\n', r": \[fixed\] algo: not with \[grid\] plans"),
    (_HEAD + 'gemm_sizes = [0, "1MiB"]\n',
     r": \[grid\] gemm_sizes\[1\]: a concurrent GEMM .* not with \[grid\] plans"),
    ('[sweep]\npoint_function = "nuna.experiments.gemm:gemm_point"\n' + _HEAD,
     r": \[sweep\] point_function: nuna\.experiments\.gemm:gemm_point generates"),
    (_HEAD + '[[grid.also]]\ntbs_per_peer = [4]\n',
     r": \[\[grid\.also\]\] #1 tbs_per_peer: not with \[grid\] plans"),
    (_HEAD + '[[grid.also]]\nplans = ["plans/ar4.xml"]\ngemm_sizes = ["1MiB"]\n',
     r": \[\[grid\.also\]\] #1 gemm_sizes\[0\]: a concurrent GEMM"),
    ('[grid]\ncollectives = ["allgather"]\ngpus = [2]\nsizes = ["4KiB"]\nconfigs = ["UA"]\n'
     '[[grid.also]]\nplans = ["plans/ag2.xml"]\n',
     r": \[\[grid\.also\]\] #1 plans: only with \[grid\] plans"),
    ('[grid]\nsizes = ["4KiB"]\nconfigs = ["UA"]\n', r": \[grid\]: missing required key 'collectives'"),
    (_HEAD.replace('"plans/ag2.xml"', '"plans/ag2.xml", "other/ag2.xml"'),
     r": \[grid\] plans: .*ag2\.xml and .*ag2\.xml have the same file name"),
    (_HEAD.replace('"plans/ag2.xml"', '"plans/ag2.xml", "./plans/ag2.xml"'),
     r": \[grid\] plans\[1\]: duplicate"),
    (_HEAD.replace("ag2", "none"), r": \[grid\] plans\[0\]: .*none\.xml: no such plan file"),
    (_HEAD.replace("ag2", "broken"), r": \[grid\] plans\[0\]: .*broken\.xml:1: .*<algo>"),
    (_HEAD.replace("ag2", "wrong"),
     r": \[grid\] plans\[0\]: .*wrong\.xml:\d+: .*; the passes refuse a plan with errors"),
    (_HEAD.replace('"plans/ag2.xml"', ""), r": \[grid\] plans: must list at least one value"),
    # in-place allgather buffers hold 400 GiB; alltoall's input and output together do not fit
    (_HEAD.replace("ag2", "a2a").replace('"4KiB"', '"4KiB", "400GiB"'),
     r": \[grid\] sizes\[1\]: 400GiB of plan a2a\.xml does not fit nuna-4die: gpu 0: buffers of"),
])
def test_refusals_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    _write_plans(tmp_path / "p")
    plans = tmp_path / "p" / "plans"
    (tmp_path / "p" / "other").mkdir()
    shutil.copyfile(plans / "ag2.xml", tmp_path / "p" / "other" / "ag2.xml")
    (plans / "broken.xml").write_text("<algo name='x'>\n")
    # a peer outside the pod: the plan reads but does not verify
    (plans / "wrong.xml").write_text((plans / "ag2.xml").read_text().replace('send="1"', 'send="7"', 1))
    save(generate("alltoall", 2, algo="direct", tbs_per_peer=1), plans / "a2a.xml")
    _refused(tmp_path, text, message)


def test_a_plan_that_computes_a_wrong_result_is_refused(tmp_path: Path) -> None:
    real = PLANS_MSCCL / "allgather_sccl-dgx1-steps2_n8_i2_Simple.xml"
    if not real.is_file():
        pytest.skip(f"shared corpus missing: {real}")
    (tmp_path / "p").mkdir()
    shutil.copyfile(real, tmp_path / "p" / "wrong.xml")
    _refused(tmp_path, _HEAD.replace("plans/ag2", "wrong"), r"plans\[0\]: .*wrong\.xml: wrong result: ")


def test_spec_form_and_expansion_of_plan_files(tmp_path: Path) -> None:
    _write_plans(tmp_path / "p")
    (tmp_path / "p" / "spec.toml").write_text(
        '[grid]\nplans = ["plans/ag2.xml"]\nsizes = ["4KiB", "16KiB"]\nconfigs = ["UA", "UA+NAR"]\n'
        'nar_granularities = [2, 4]\ntopologies = ["nuna-4die", "nuna-4die-p256"]\n'
        '[[grid.also]]\nplans = ["plans/ar4.xml", "plans/ag2.xml"]\nsizes = ["4KiB"]\n')
    spec = load_sweep_spec(tmp_path / "p" / "spec.toml")
    assert (spec.collectives, spec.gpus, spec.tbs_per_peer) == ((), (), ())
    assert [(p.collective, p.gpus, Path(p.path).name) for p in spec.plans] == [("allgather", 2, "ag2.xml")]
    points = expand(spec)
    # per topology: 2 sizes x (UA + UA+NAR at 2 and 4) of ag2.xml, then ar4.xml's 4 KiB points
    assert len(points) == 2 * 2 * 3 + 2 * 3
    assert all(isinstance(p, PlanPoint) for p in points)
    assert [(p.topology, Path(p.plan or "").name, p.size_bytes) for p in points[:7:3]] == [
        ("nuna-4die", "ag2.xml", 4096), ("nuna-4die", "ag2.xml", 16384), ("nuna-4die-p256", "ag2.xml", 4096)]
    assert {(p.collective, p.gpus) for p in points[12:]} == {("allreduce", 4)}
    assert spec.to_json()["grid"]["also"] == [{"plans": ["ar4.xml", "ag2.xml"], "sizes_bytes": [4096]}]
    # a partial grid keeps the files; the generator's axes are the files'
    restricted = restrict_grid(spec, {"sizes": ["4KiB"]})
    assert restricted.plans == spec.plans
    assert {t.point_id for t, _ in tasks_of(restricted)} <= {t.point_id for t, _ in tasks_of(spec)}
    with pytest.raises(UsageError, match=r"cannot override grid axis 'gpus': .* sweeps plan files"):
        restrict_grid(spec, {"gpus": ["2"]})


def test_generated_points_and_specs_keep_their_form() -> None:
    """Every existing spec keeps its points' ids and its index bytes: no plan anywhere."""
    spec = parse_sweep_spec({"grid": {"collectives": ["allgather"], "gpus": [2], "sizes": ["1MB"],
                                      "configs": ["UA"]}})
    assert "plans" not in spec.to_json()["grid"]
    assert spec.to_json()["fixed"]["algo"] == "direct"
    (point,) = expand(spec)
    assert type(point) is Point
    assert point.plan is None
    assert "plan" not in point.as_dict()
    assert "plan" not in {f.name for f in dataclasses.fields(Point)}
    assert point.label() == "allgather 2gpu 1MB UA K=1 nuna-4die"
    assert point_id(point.record(), DEFAULT_POINT_FUNCTION) == point_id(
        point.record(), DEFAULT_POINT_FUNCTION, topology_sha256=None, plan_sha256=None)


def test_a_plan_point_records_the_file_name_and_gives_the_path() -> None:
    point = PlanPoint(collective="allgather", gpus=2, size_bytes=4096, config="UA", nar_granularity=None,
                      tbs_per_peer=PLAN_TBS_PER_PEER, topology="nuna-4die", gemm_bytes=0, algo=PLAN_ALGO,
                      packet_bytes=256, seed=0, plan="/somewhere/plans/mine.xml")
    assert point.as_dict()["plan"] == "/somewhere/plans/mine.xml"
    assert point.record()["plan"] == "mine.xml"
    assert json.loads(json.dumps(point.record())) == point.record()


def test_a_point_whose_file_changed_since_the_spec_was_read_fails(tmp_path: Path) -> None:
    save(generate("allreduce", 2, algo="direct", tbs_per_peer=1), tmp_path / "p.xml")
    point = {"collective": "allgather", "gpus": 2, "size_bytes": 4096, "config": "UA",
             "nar_granularity": None, "tbs_per_peer": 0, "topology": "nuna-4die", "gemm_bytes": 0,
             "algo": PLAN_ALGO, "packet_bytes": 256, "seed": 0, "plan": str(tmp_path / "p.xml")}
    with pytest.raises(InputError, match=r"p\.xml: a plan for allreduce on 2 GPUs, but the point is "
                                         r"allgather on 2 GPUs \(the file changed"):
        resolve_point_function(DEFAULT_POINT_FUNCTION)(point)


def test_the_plan_size_limit_is_the_readers() -> None:
    from nuna.experiments import spec
    from nuna.plan import xml

    assert spec._MAX_PLAN_BYTES == xml.MAX_PLAN_BYTES


@pytest.mark.parametrize("edited", ["plan", "topology"])
def test_a_file_edited_during_the_sweep_fails_its_points(tmp_path: Path, edited: str) -> None:
    # a point is named by its files' bytes when the sweep starts; a file changed before the
    # point ran used to have the new file's result stored under the old bytes' id
    save(generate("allgather", 2, tbs_per_peer=1), tmp_path / "a.xml")
    chip = (REPO / "topologies" / "nuna-4die.toml").read_text()
    (tmp_path / "chip.toml").write_text(chip)
    (tmp_path / "spec.toml").write_text('[grid]\nplans = ["a.xml"]\nsizes = ["16KiB"]\n'
                                        'configs = ["UA"]\ntopologies = ["chip.toml"]\n')
    (task, _), = tasks_of(load_sweep_spec(tmp_path / "spec.toml"))
    inputs = dict(task.inputs or {})
    assert set(inputs["file_sha256"]) == {"topology", "plan"}
    assert "file_sha256" not in task.point  # not part of the point's record, nor its id
    point_function = resolve_point_function(DEFAULT_POINT_FUNCTION)
    assert point_function(dict(inputs))["time_ns"] > 0
    if edited == "plan":  # the same collective and pod: only the bytes tell
        save(generate("allgather", 2, tbs_per_peer=2), tmp_path / "a.xml")
    else:
        (tmp_path / "chip.toml").write_text(chip.replace("flit_bytes = { value = 256",
                                                         "flit_bytes = { value = 128"))
    with pytest.raises(InputError, match=f"the {edited} file changed since the sweep read it"):
        point_function(dict(inputs))


def test_a_figure_refuses_two_plan_files_of_one_collective_and_pod(tmp_path: Path) -> None:
    # the bars of two plans would be drawn on top of each other (they were, unsaid)
    from nuna.experiments.figures import FigureOptions, run_figure

    for name, k in (("a.xml", 1), ("b.xml", 2)):
        save(generate("allgather", 2, tbs_per_peer=k), tmp_path / name)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "fig9.toml").write_text('[sweep]\nname = "fig9"\n[grid]\nplans = ["../a.xml", "../b.xml"]\n'
                                     'sizes = ["16KiB"]\nconfigs = ["UA", "NAP+NAR"]\n')
    with pytest.raises(InputError, match=r"fig9 draws one bar per collective and pod, but plan files a\.xml "
                                         r"and b\.xml are both allgather on 2 GPUs"):
        run_figure("fig9", tmp_path / "out", FigureOptions(spec_dir=specs), jobs=1)
    assert not (tmp_path / "out").exists()
    # one plan per collective and pod is drawn, its rows naming the file
    (specs / "fig9.toml").write_text('[sweep]\nname = "fig9"\n[grid]\nplans = ["../a.xml"]\n'
                                     'sizes = ["16KiB"]\nconfigs = ["UA", "NAP+NAR"]\n')
    result = run_figure("fig9", tmp_path / "out", FigureOptions(spec_dir=specs), jobs=1)
    assert {row["plan"] for row in result.data["rows"]} == {"a.xml"}
