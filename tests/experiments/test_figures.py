"""Figures 9-14: numbers from synthetic sweep records, the structure of the rendered figures,
byte-stable files, the reduced grids, and one real ``nuna figure fig10 --quick`` run."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import InputError, UsageError
from nuna.experiments import figures, store
from nuna.experiments.figures import (
    FIGURES,
    QUICK_GPUS,
    figure_data,
    figure_spec_path,
    quick_spec,
    render,
    save_figure,
)
from nuna.experiments.spec import expand, restrict_grid
from nuna.experiments.sweep import load_sweep_spec
from nuna.sim.result import COARSE_PACKET_BYTES
from nuna.units import format_size

REPO = Path(__file__).resolve().parents[2]


def record(config: str, time_ns: float, *, collective: str = "allgather", gpus: int = 8,
           size: int = 1_000_000, gran: Any = None, tbs: int = 1, gemm: int = 0,
           extra: dict[str, Any] | None = None) -> dict[str, Any]:
    point = {"algo": "direct", "collective": collective, "config": config, "gemm_bytes": gemm, "gpus": gpus,
             "nar_granularity": gran, "packet_bytes": "auto", "seed": 0, "size_bytes": size,
             "tbs_per_peer": tbs, "topology": "nuna-4die"}
    result = {"time_ns": time_ns, "nar_granularity_used": gran, **(extra or {})}
    return {"point": point, "result": result}


def bar_heights(ax: Any) -> list[float]:
    return [p.get_height() for p in ax.patches]


# ---------------------------------------------------------------------------------------------
# numbers

def test_a_topology_file_is_titled_by_the_chips_name() -> None:
    # points record a file by its file name; the figure names the chip as the file does
    records = []
    for config, t in (("UA", 200.0), ("NAP+NAR", 100.0)):
        rec = record(config, t, extra={"topology": "my-2die"})
        rec["point"]["topology"] = "my2die.toml"
        records.append(rec)
    data = figure_data("fig9", records)
    assert data["topologies"] == ["my2die.toml"]
    assert data["topology_names"] == {"my2die.toml": "my-2die"}
    assert render("fig9", data).get_suptitle().endswith("\non my-2die")
    # results without the name (an older nuna) and figure data without the map: the file's stem
    for rec in records:
        del rec["result"]["topology"]
    older = figure_data("fig9", records)
    assert older["topology_names"] == {"my2die.toml": "my2die"}
    del older["topology_names"]
    assert render("fig9", older).get_suptitle().endswith("\non my2die")


@settings(max_examples=40, deadline=None)
@given(times=st.lists(st.floats(10.0, 1e6), min_size=4, max_size=4))
def test_speedup_is_baseline_time_over_config_time(times: list[float]) -> None:
    configs = ["UA", "UA+NAR", "NUMA+NAR", "NAP+NAR"]
    records = [record(c, t) for c, t in zip(configs, times, strict=True)]
    rows = figure_data("fig9", records)["rows"]
    for row, t in zip(rows, times, strict=True):
        assert row["speedup"] == pytest.approx(times[0] / t)
    assert rows[0]["speedup"] == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["fig9", "fig10", "fig12", "fig14"])
def test_figure_data_counts_points_the_executors_would_not_select(name: str) -> None:
    # None: a result written before nuna recorded the flag, so not counted
    cases = [("UA", 1_000_000, True), ("NAP+NAR", 1_000_000, False), ("UA", 2_000_000, None),
             ("NAP+NAR", 2_000_000, False)]
    records = []
    for config, size, flag in cases:
        extra: dict[str, Any] = {"remote_store_latency_ns": _LATENCY}
        if flag is not None:
            extra["msccl_selectable"] = flag
        records.append(record(config, 100.0, size=size, extra=extra))
    assert figure_data(name, records).get("msccl_unselectable_points") == 2
    selectable = [dict(r, result={**r["result"], "msccl_selectable": True}) for r in records]
    assert "msccl_unselectable_points" not in figure_data(name, selectable)


_LATENCY = {"count": 1, "mean": 1.0, "p50": 1.0, "p99": 1.0, "max": 1.0,
            "histogram": {"bin_ns": 1.0, "counts": [1]}}


def test_speedup_pairs_only_points_that_differ_in_configuration() -> None:
    records = [record("UA", 100.0, gpus=2), record("UA", 400.0, gpus=8),
               record("NAP+NAR", 50.0, gpus=2), record("NAP+NAR", 200.0, gpus=8),
               record("NAP+NAR", 80.0, gpus=4)]  # no UA twin
    rows = figure_data("fig9", records)["rows"]
    assert [r["speedup"] for r in rows[:4]] == pytest.approx([1.0, 1.0, 2.0, 2.0])
    assert rows[4]["speedup"] is None


def test_fig14_uses_the_collective_time_relative_to_ua_alone() -> None:
    records = [record("UA", 1000.0, gemm=0), record("NAP+NAR", 800.0, gemm=0),
               record("UA", 5000.0, gemm=10**6, extra={"collective_time_ns": 2000.0}),
               record("NAP+NAR", 4000.0, gemm=10**6, extra={"collective_time_ns": 900.0})]
    rows = figure_data("fig14", records)["rows"]
    assert [r["relative_time"] for r in rows] == pytest.approx([1.0, 0.8, 2.0, 0.9])


def test_fig12_utilisation_is_the_mean_port_egress_utilisation() -> None:
    ports = [{"egress_utilization": u} for u in (0.2, 0.4, 0.6, 0.0)]
    records = [record("UA", 100.0, gpus=2), record("NAP+NAR", 50.0, gpus=2, extra={"io_ports": ports})]
    rows = figure_data("fig12", records)["rows"]
    assert rows[1]["utilisation"] == pytest.approx(0.3)


def test_unknown_figure_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"unknown figure 'fig99' \(choose from fig9, fig10, "):
        figure_data("fig99", [])
    with pytest.raises(UsageError, match=r"unknown figure 'fig8' \(choose from fig9, "):
        render("fig8", {})


# ---------------------------------------------------------------------------------------------
# pictures

def fig9_records() -> list[dict[str, Any]]:
    out = []
    for coll in ("allgather", "alltoall"):
        for n in (2, 8, 64):
            for size in (100_000, 10**9):
                for k, config in enumerate(("UA", "UA+NAR", "NAP+NAR")):
                    out.append(record(config, 1000.0 / (1 + 0.1 * k), collective=coll, gpus=n, size=size))
    return out


def test_fig9_has_one_panel_per_collective_and_pod_with_grouped_bars() -> None:
    data = figure_data("fig9", fig9_records())
    fig = render("fig9", data)
    axes = fig.axes
    assert len(axes) == 2 * 3
    assert {ax.get_title() for ax in axes} == {f"{c}, {n} GPUs" for c in ("allgather", "alltoall")
                                               for n in (2, 8, 64)}
    legend = axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["UA+NAR", "NAP+NAR"]  # UA is the 1.0 line
    for ax in axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["100kB", "1GB"]
        # 2 sizes x 2 non-baseline configs; heights are the speedups
        assert sorted(bar_heights(ax)) == pytest.approx(sorted([1.1, 1.1, 1.2, 1.2]))


def test_fig9_marks_the_most_any_configuration_can_gain() -> None:
    # UA's best count (4) over the lowest floor of the point, whichever count or configuration
    # reported it; a point without floors (older results) has no mark
    floor = {"placement_floor_ns": 0.0}
    records = [record("UA", 300.0, tbs=1, extra={"placement_floor_ns": 150.0}),
               record("UA", 200.0, tbs=4, extra={"placement_floor_ns": 140.0}),
               record("NAP+NAR", 160.0, tbs=1, extra={"placement_floor_ns": 150.0}),
               record("NAP+NAR", 180.0, tbs=4, extra={"placement_floor_ns": 125.0}),
               record("UA", 100.0, size=10**9), record("NAP+NAR", 90.0, size=10**9, extra=floor)]
    data = figure_data("fig9", records)
    (ceiling,) = data["ceilings"]
    assert ceiling["size_bytes"] == 1_000_000
    assert ceiling["floor_ns"] == 125.0
    assert ceiling["max_speedup"] == pytest.approx(200.0 / 125.0)
    (ax,) = render("fig9", data).axes
    (marks,) = ax.collections
    (segment,) = marks.get_segments()
    assert segment[:, 1] == pytest.approx([1.6, 1.6])
    assert segment[:, 0].mean() == pytest.approx(0.0)  # over the first size group
    assert "no placement beats (floor)" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_ylim()[1] >= 1.6


def test_fig9_hatches_speedups_from_coarse_packets_on_either_side() -> None:
    # a speedup inherits the packet error of its configuration and of its UA twin
    def rec(config: str, time_ns: float, size: int, packet: int) -> dict[str, Any]:
        return record(config, time_ns, size=size, extra={"packet_bytes": packet})

    fine, coarse = COARSE_PACKET_BYTES, 2 * COARSE_PACKET_BYTES
    records = [rec("UA", 100.0, 10**6, 256), rec("NAP+NAR", 80.0, 10**6, fine),
               rec("UA", 100.0, 10**8, coarse), rec("NAP+NAR", 80.0, 10**8, fine),
               rec("UA", 100.0, 10**9, fine), rec("NAP+NAR", 80.0, 10**9, coarse)]
    data = figure_data("fig9", records)
    assert data["coarse_packet_bytes"] == COARSE_PACKET_BYTES
    sizes = {r["size_bytes"]: (r["packet_bytes"], r["baseline_packet_bytes"]) for r in data["rows"]
             if r["config"] == "NAP+NAR"}
    assert sizes == {10**6: (fine, 256), 10**8: (fine, coarse), 10**9: (coarse, fine)}
    assert data["coarse_rows"] == 3  # both 10**8 rows (UA's own packets) and NAP+NAR at 10**9
    (ax,) = render("fig9", data).axes
    hatched = {round(p.get_x() + p.get_width() / 2): bool(p.get_hatch()) for p in ax.patches}
    assert hatched == {0: False, 1: True, 2: True}
    legend = ax.get_legend()
    keys = dict(zip([t.get_text() for t in legend.get_texts()], legend.legend_handles, strict=True))
    assert keys[f"packets > {format_size(COARSE_PACKET_BYTES)} (approximate)"].get_hatch()
    assert not keys["NAP+NAR"].get_hatch()  # configurations are keyed by colour alone
    fine_only = figure_data("fig9", records[:2])
    assert fine_only["coarse_rows"] == 0  # always there, as the docs describe the key
    (ax,) = render("fig9", fine_only).axes
    assert not any(p.get_hatch() for p in ax.patches)
    assert all("packets" not in t.get_text() for t in ax.get_legend().get_texts())


def test_fig10_marks_mean_and_max_on_each_histogram() -> None:
    def panel(config: str, mean: float, mx: float) -> dict[str, Any]:
        counts = [0] * 900 + [5, 10, 20, 10, 5] + [0] * 3 + [1]
        lat = {"mean": mean, "max": mx, "p50": mean, "p99": mx, "count": 52,
               "histogram": {"bin_ns": 1.0, "counts": counts}}
        return record(config, 1000.0, extra={"remote_store_latency_ns": lat})

    data = figure_data("fig10", [panel("UA", 920.0, 1320.0), panel("NAP+NAR", 780.0, 1180.0)])
    fig = render("fig10", data)
    assert [ax.get_title() for ax in fig.axes] == ["(a) UA", "(b) NAP+NAR"]
    for ax, (mean, mx) in zip(fig.axes, [(920.0, 1320.0), (780.0, 1180.0)], strict=True):
        xs = sorted(line.get_xdata()[0] for line in ax.get_lines())
        assert xs == pytest.approx([mean, mx])
        assert sum(bar_heights(ax)) == pytest.approx(1.0)  # fractions of stores
        assert ax.get_xlabel() == "remote store latency (ns)"


def test_fig9_shared_y_axis_fits_the_tallest_bar_of_any_panel() -> None:
    """The panels share their y axis: a tall bar in the first panel must not be clipped by the
    limit a later, flatter panel would pick for itself."""
    records = [record("UA", 100.0, gpus=2), record("NAP+NAR", 50.0, gpus=2),
               record("UA", 100.0, gpus=8), record("NAP+NAR", 90.0, gpus=8)]
    fig = render("fig9", figure_data("fig9", records))
    for ax in fig.axes:
        assert ax.get_ylim()[1] >= 2.0


def test_fig11_shows_every_configuration_per_size() -> None:
    configs = ["UA", "UA+NAR", "NUMA", "NUMA+NAR", "NAP*", "NAP*+NAR", "NAP", "NAP+NAR"]
    records = [record(c, 100.0 + i, size=s) for s in (100_000, 10**7) for i, c in enumerate(configs)]
    fig = render("fig11", figure_data("fig11", records))
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == configs
    assert len(ax.patches) == 2 * len(configs)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["100kB", "10MB"]


def test_fig12_has_speedup_bars_and_a_utilisation_axis() -> None:
    records = []
    for i, s in enumerate((100_000, 10**6, 10**9)):
        ports = [{"egress_utilization": 0.1 * (i + 1)}]
        records += [record("UA", 100.0, gpus=2, size=s), record("NAP+NAR", 100.0 / (1.5 - 0.2 * i), gpus=2,
                                                               size=s, extra={"io_ports": ports})]
    fig = render("fig12", figure_data("fig12", records))
    ax, twin = fig.axes
    assert bar_heights(ax) == pytest.approx([1.5, 1.3, 1.1])
    (line,) = twin.get_lines()
    assert list(line.get_ydata()) == pytest.approx([10.0, 20.0, 30.0])
    assert "utilisation" in twin.get_ylabel()


def test_fig13_groups_by_granularity_with_many_and_few_threadblocks() -> None:
    records = []
    for k in (144, 1):
        records.append(record("UA", 1000.0, tbs=k))
        records += [record("UA+NAR", 1000.0 / (1 + g / 100), gran=g, tbs=k) for g in (2, 3, 4, 6, 12)]
    fig = render("fig13", figure_data("fig13", records))
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "3", "4", "6", "12"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["1008 threadblocks per GPU (144 per peer)", "7 threadblocks per GPU (1 per peer)"]
    assert len(ax.patches) == 10


def test_fig14_draws_one_line_per_configuration() -> None:
    records = [record(c, 1000.0 * f, gemm=g) for g, f in ((0, 1.0), (10**6, 1.5)) for c in ("UA", "NAP+NAR")]
    fig = render("fig14", figure_data("fig14", records))
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["UA", "NAP+NAR"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["none", "1MB"]


def test_saved_files_are_byte_stable(tmp_path: Path) -> None:
    data = figure_data("fig9", fig9_records())
    a = save_figure(render("fig9", data), tmp_path / "a")
    b = save_figure(render("fig9", data), tmp_path / "b")
    for pa, pb in zip(a, b, strict=True):
        assert pa.read_bytes() == pb.read_bytes()
    svg = a[1].read_text()
    assert "<dc:date>" not in svg
    assert "allgather, 8 GPUs" in svg  # text kept as text
    assert a[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------
# specs and the command

@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_has_a_spec_and_a_small_quick_grid(name: str) -> None:
    spec = load_sweep_spec(figure_spec_path(name, REPO / "scripts" / "sweeps"))
    full = expand(spec)
    quick = quick_spec(name, spec)
    points = expand(quick)
    assert 0 < len(points) <= len(full)
    assert len(points) <= 16
    assert {p.gpus for p in points} == {QUICK_GPUS}
    assert {p.config for p in points} == {p.config for p in full}  # every series kept


def test_quick_keeps_the_axes_the_user_gave() -> None:
    # --quick --gpus 4 ran a 2-GPU pod under a name that said gpus4
    spec = restrict_grid(load_sweep_spec(figure_spec_path("fig9", REPO / "scripts" / "sweeps")),
                         {"gpus": ["4"], "sizes": ["1MiB"], "collectives": ["allgather"]})
    points = expand(quick_spec("fig9", spec, keep=("gpus", "sizes", "collectives")))
    assert {(p.gpus, p.size_bytes, p.collective) for p in points} == {(4, 1 << 20, "allgather")}
    assert {p.tbs_per_peer for p in points} == {1}  # not given: reduced as ever
    assert {p.gpus for p in expand(quick_spec("fig9", spec))} == {QUICK_GPUS}


def test_fig9_spec_is_the_papers_grid() -> None:
    spec = load_sweep_spec(figure_spec_path("fig9", REPO / "scripts" / "sweeps"))
    points = expand(spec)
    main = [p for p in points if p.tbs_per_peer == 1]
    assert len(main) == 3 * 6 * 5 * 4  # the grid, one threadblock per peer
    searched = [p for p in points if p.tbs_per_peer != 1]
    assert len(searched) == 3 * 6 * 2 * 4 * 2  # 4 and 16 per peer, at 100 KiB and 1 MiB only
    assert {p.size_bytes for p in searched} == {100 * 1024, 1 << 20}


@pytest.mark.parametrize("name", ["fig9", "fig10", "fig11", "fig12", "fig14"])
def test_figure_specs_use_sizes_the_executors_select(name: str) -> None:
    # docs/results.md, "Sizes": the figures run at sizes whose element count divides into every
    # plan's chunks, so that each point is a plan MSCCL would run (Fig 13's 1,152-chunk plan
    # divides no power of two)
    from nuna.plan.generate import generate
    from nuna.plan.verify import size_fit

    spec = load_sweep_spec(figure_spec_path(name, REPO / "scripts" / "sweeps"))
    plans: dict[tuple[str, int, int], Any] = {}
    for p in expand(spec):
        key = (p.collective, p.gpus, p.tbs_per_peer)
        if key not in plans:
            plans[key] = generate(p.collective, p.gpus, algo=spec.algo, tbs_per_peer=p.tbs_per_peer)
        fit = size_fit(plans[key], p.size_bytes)
        assert fit.msccl_selectable, (p, fit.note())


def test_every_fig14_point_merges_its_gemm() -> None:
    # the GEMM's tiles must be whole numbers of the collective's (refined) chunks: a spec whose
    # sizes do not allow it would fail its points one by one at run time
    from nuna.experiments.gemm import add_gemm
    from nuna.plan.generate import generate
    from nuna.topology.spec import load_topology

    spec = load_sweep_spec(figure_spec_path("fig14", REPO / "scripts" / "sweeps"))
    topo = load_topology(spec.topologies[0])
    seen = set()
    for p in expand(spec):
        key = (p.tbs_per_peer, p.size_bytes, p.gemm_bytes)
        if p.gemm_bytes == 0 or key in seen:
            continue
        seen.add(key)
        plan = generate(p.collective, p.gpus, algo=spec.algo, tbs_per_peer=p.tbs_per_peer)
        _, info = add_gemm(plan, topo, p.size_bytes, p.gemm_bytes)
        assert info.tile_bytes * info.tiles == p.gemm_bytes
    assert len(seen) == 15  # 3 counts x 5 GEMM sizes


def test_missing_spec_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        figure_spec_path("fig9", tmp_path)


def test_packaged_specs_equal_the_scripts_folder_and_are_package_data() -> None:
    repo_files = sorted(p.name for p in (REPO / "scripts" / "sweeps").glob("*.toml"))
    assert repo_files == sorted(p.name for p in figures.PACKAGED_SPEC_DIR.glob("*.toml"))
    for name in repo_files:
        packaged = (figures.PACKAGED_SPEC_DIR / name).read_bytes()
        assert packaged == (REPO / "scripts" / "sweeps" / name).read_bytes(), name
    # and the wheel takes them: pyproject's package-data globs match every copy
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["nuna"]
    for name in repo_files:
        relative = (figures.PACKAGED_SPEC_DIR / name).relative_to(REPO / "nuna").as_posix()
        assert any(fnmatch.fnmatch(relative, glob) for glob in globs), relative


def test_an_installed_package_finds_the_figure_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    # a wheel or a non-editable install has no scripts/sweeps beside it ('nuna figure' failed)
    assert figures.default_spec_dir() == REPO / "scripts" / "sweeps"
    monkeypatch.setattr(figures, "_checkout_spec_dir", lambda: None)
    assert figures.default_spec_dir() == figures.PACKAGED_SPEC_DIR
    for name in FIGURES:
        assert figure_spec_path(name).parent == figures.PACKAGED_SPEC_DIR
        assert expand(load_sweep_spec(figure_spec_path(name))) == expand(
            load_sweep_spec(figure_spec_path(name, REPO / "scripts" / "sweeps")))


def test_cli_figure_fig10_quick_end_to_end(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    res = run_cli("figure", "fig10", "--quick", "-o", tmp_path, "--jobs", "1", "-q")
    assert res.code == 0, res.err
    data = json.loads((tmp_path / "fig10-quick.json").read_text())
    assert [p["config"] for p in data["panels"]] == ["UA", "NAP+NAR"]
    for p in data["panels"]:
        assert 0 < p["mean_ns"] <= p["max_ns"]
        assert sum(p["counts"]) > 0
    assert (tmp_path / "fig10-quick.png").stat().st_size > 0
    assert (tmp_path / "sweeps" / "fig10-quick" / "index.json").is_file()
    first_svg = (tmp_path / "fig10-quick.svg").read_bytes()
    # a second run reuses the sweep's results and writes the same figure
    again = run_cli("figure", "fig10", "--quick", "-o", tmp_path, "--jobs", "1", "-q")
    assert again.code == 0
    assert "0 ran" in again.out
    assert (tmp_path / "fig10-quick.svg").read_bytes() == first_svg


def test_cli_figure_retries_failed_points_on_request(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    # a first sweep on a cold numba cache once failed every point; its figure must be able to
    # run them again without deleting the folder
    args = ("figure", "fig10", "--quick", "-o", tmp_path, "--jobs", "1", "-q")
    assert run_cli(*args).code == 0
    folder = tmp_path / "sweeps" / "fig10-quick"
    result = sorted((folder / "results").glob("*.json"))[0]
    record = json.loads(result.read_text())
    record = {key: value for key, value in record.items() if key not in ("result", "format")}
    record |= {"format": store.FAILURE_FORMAT, "error": {"type": "RuntimeError", "message": "injected"}}
    (folder / "failures").mkdir(exist_ok=True)
    (folder / "failures" / result.name).write_text(json.dumps(record))
    result.unlink()
    left_out = run_cli(*args)
    assert left_out.code == 1
    assert "0 ran" in left_out.out
    assert "RuntimeError: injected" in left_out.err
    assert "--retry-failed" in left_out.err.splitlines()[-1]
    retried = run_cli(*args, "--retry-failed")
    assert retried.code == 0, retried.err
    assert "(1 ran, " in retried.out
    assert result.is_file()
    assert not (folder / "failures" / result.name).exists()


def test_cli_figure_notes_coarse_packets_and_caps_them_on_request(run_cli: Callable[..., Any],
                                                                  tmp_path: Path) -> None:
    # 'auto' picks coarse packets only for large collectives: force the size instead (8 KiB)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "fig11.toml").write_text(
        '[sweep]\nname = "fig11"\n[grid]\ncollectives = ["allgather"]\ngpus = [2]\nsizes = ["1MiB"]\n'
        'configs = ["UA", "NAP+NAR"]\n[fixed]\npacket_bytes = 8192\n')
    res = run_cli("figure", "fig11", "--spec-dir", specs, "-o", tmp_path / "out", "--jobs", "1", "-q")
    assert res.code == 0, res.err
    over = format_size(COARSE_PACKET_BYTES)
    assert f"note: 2 of the figure's bars come from packets over {over} (hatched" in res.out
    data = json.loads((tmp_path / "out" / "fig11.json").read_text())
    assert data["coarse_rows"] == 2
    assert {r["packet_bytes"] for r in data["rows"]} == {8192}
    # a cap applies to 'auto' packets only: a clear error, nothing run
    capped = run_cli("figure", "fig11", "--spec-dir", specs, "-o", tmp_path / "out", "-q",
                        "--max-packet-bytes", "1KiB")
    assert capped.code != 0
    assert "applies to packet_bytes = 'auto'" in capped.err
    assert not (tmp_path / "out" / "sweeps" / "fig11-packets1KiB").exists()


@pytest.mark.parametrize(("flag", "windowed"), [("--windowed", True), ("--one-queue", False)])
def test_cli_figure_forces_the_scheduling_into_a_sweep_of_its_own(
        run_cli: Callable[..., Any], tmp_path: Path, flag: str, windowed: bool) -> None:
    res = run_cli("figure", "fig10", "--quick", flag, "-o", tmp_path, "--jobs", "1", "-q")
    assert res.code == 0, res.err
    name = f"fig10-quick-{flag[2:]}"
    assert (tmp_path / f"{name}.png").stat().st_size > 0
    results = sorted((tmp_path / "sweeps" / name / "results").glob("*.json"))
    assert results
    for path in results:
        point = json.loads(path.read_text())
        assert point["point"]["windowed"] is windowed
        assert (point["result"]["window_ns"] > 0) is windowed


def test_cli_figure_runs_a_partial_grid(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    res = run_cli("figure", "fig9", "--quick", "--collectives", "allgather", "--configs", "UA,NAP+NAR",
                     "-o", tmp_path, "--jobs", "1", "-q")
    assert res.code == 0, res.err
    stem = "fig9-collectivesallgather-configsUA_NAP+NAR-quick"
    data = json.loads((tmp_path / f"{stem}.json").read_text())
    assert {(r["collective"], r["config"]) for r in data["rows"]} == {("allgather", "UA"),
                                                                      ("allgather", "NAP+NAR")}
    assert (tmp_path / f"{stem}.png").stat().st_size > 0
    # a grid whose points another grid of the figure computed reuses them
    sub = run_cli("figure", "fig9", "--quick", "--collectives", "allgather", "--configs", "UA",
                     "-o", tmp_path, "--jobs", "1", "-q")
    assert sub.code == 0, sub.err
    assert "0 ran" in sub.out
    sub_rows = json.loads((tmp_path / "fig9-collectivesallgather-configsUA-quick.json").read_text())["rows"]
    assert sub_rows == [r for r in data["rows"] if r["config"] == "UA"]
    # a dry run of the whole quick grid counts those points as done and estimates the rest,
    # writing nothing
    dry = run_cli("figure", "fig9", "--quick", "--dry-run", "-o", tmp_path, "--jobs", "2")
    assert dry.code == 0, dry.err
    lines = dry.out.splitlines()
    assert lines[0] == ("sweep fig9-quick: 12 points: 2 done (2 from fig9's other sweeps), 0 failed, "
                        "10 pending")
    assert lines[1].startswith("estimate: ")
    assert "for 10 points, about " in lines[1]
    assert "on 2 workers" in lines[1]
    assert not (tmp_path / "sweeps" / "fig9-quick").exists()
    assert not (tmp_path / "fig9-quick.png").exists()
    for args in (("--gpus", "1"), ("--gpus", "1", "--dry-run")):  # the dry run checks as the run does
        bad = run_cli("figure", "fig9", *args, "-o", tmp_path, "-q")
        assert bad.code == 1
        assert bad.err.count("\n") == 1
        assert "GPU count must be between 2" in bad.err


def test_cli_figure_runs_its_grid_on_another_topology(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    args = ("figure", "fig10", "--quick", "-o", tmp_path, "--jobs", "1", "-q")
    assert run_cli(*args).code == 0
    res = run_cli(*args, "--topology", "nuna-4die-p256")
    assert res.code == 0, res.err
    assert "0 reused" in res.out  # other points than nuna-4die's
    stem = "fig10-topologiesnuna-4die-p256-quick"
    index = json.loads((tmp_path / "sweeps" / stem / "index.json").read_text())
    assert {p["point"]["topology"] for p in index["points"]} == {"nuna-4die-p256"}
    assert (tmp_path / f"{stem}.png").stat().st_size > 0
    data = json.loads((tmp_path / f"{stem}.json").read_text())
    assert data["topologies"] == ["nuna-4die-p256"]
    assert "on nuna-4die-p256" in (tmp_path / f"{stem}.svg").read_text()
    assert "on nuna-4die" not in (tmp_path / "fig10-quick.svg").read_text()
    bad = run_cli(*args, "--topology", "no-such-chip")
    assert bad.code == 1
    assert bad.err.count("\n") == 1
    assert "no-such-chip" in bad.err


def test_cli_figure_rejects_unknown_names_and_bad_spec_dirs(run_cli: Callable[..., Any],
                                                              tmp_path: Path) -> None:
    bad = run_cli("figure", "fig99", "-o", tmp_path)
    assert bad.code == 2
    assert "fig99" in bad.err
    missing = run_cli("figure", "fig9", "-o", tmp_path, "--spec-dir", tmp_path / "nope")
    assert missing.code == 1
    assert missing.err.count("\n") == 1


@pytest.mark.parametrize("blocked", ["out", "out/sweeps"])
def test_cli_figure_names_a_file_in_the_way_of_its_folders(run_cli: Callable[..., Any], tmp_path: Path,
                                                            blocked: str) -> None:
    (tmp_path / "out").mkdir()
    in_the_way = tmp_path / blocked
    if blocked == "out":
        (tmp_path / "out").rmdir()
    in_the_way.write_text("mine")
    res = run_cli("figure", "fig10", "-o", tmp_path / "out", "--quick", "-j", "1", "-q")
    assert res.code == 1
    assert res.err == f"nuna: error: {in_the_way}: not a folder\n"
    assert in_the_way.read_text() == "mine"


def test_cli_figure_refuses_two_topologies_where_it_draws_one(run_cli: Callable[..., Any],
                                                               tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    text = (REPO / "scripts" / "sweeps" / "fig11.toml").read_text()
    assert "topologies" not in text
    two_machines = '[grid]\ntopologies = ["nuna-4die", "mi300x-like"]'
    (specs / "fig11.toml").write_text(text.replace("[grid]", two_machines, 1))
    two = run_cli("figure", "fig11", "-o", tmp_path / "out", "--spec-dir", specs, "--quick")
    assert two.code == 1
    assert two.err.count("\n") == 1
    assert "fig11 draws one topology" in two.err
    assert "mi300x-like" in two.err
    assert not (tmp_path / "out" / "sweeps").exists()  # refused before anything ran


@pytest.mark.parametrize("name", ["../../escaped", "{tmp}/victim/owned"])
def test_cli_figure_refuses_a_spec_name_that_is_a_path(run_cli: Callable[..., Any], tmp_path: Path,
                                                      name: str) -> None:
    # the name names OUT/NAME.png, OUT/NAME.json and OUT/sweeps/NAME: a path there wrote anywhere
    specs = tmp_path / "specs"
    specs.mkdir()
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "owned.json").write_text("mine")
    name = name.format(tmp=tmp_path)
    text = (REPO / "scripts" / "sweeps" / "fig10.toml").read_text()
    (specs / "fig10.toml").write_text(re.sub(r'(?m)^name = ".*"$', f'name = "{name}"', text))
    out = tmp_path / "a" / "b"
    res = run_cli("figure", "fig10", "-o", out, "--spec-dir", specs, "--quick", "-j", "1", "-q")
    assert res.code == 1
    assert res.err.count("\n") == 1
    assert f"fig10.toml: [sweep] name: '{name}' is not a plain file name" in res.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["specs", "victim"]
    assert (tmp_path / "victim" / "owned.json").read_text() == "mine"


def test_cli_figure_refuses_a_spec_name_too_long_for_a_file_before_making_folders(
        run_cli: Callable[..., Any], tmp_path: Path) -> None:
    # 300 characters made OUT/sweeps and then failed with "File name too long"
    specs = tmp_path / "specs"
    specs.mkdir()
    text = (REPO / "scripts" / "sweeps" / "fig10.toml").read_text()
    (specs / "fig10.toml").write_text(re.sub(r'(?m)^name = ".*"$', f'name = "{"y" * 300}"', text))
    res = run_cli("figure", "fig10", "-o", tmp_path / "out", "--spec-dir", specs, "--quick", "-j", "1",
                     "-q")
    assert res.code == 1
    assert res.err.count("\n") == 1
    assert "fig10.toml: [sweep] name: the name has 300 characters, more than the 100" in res.err
    assert not (tmp_path / "out").exists()


def test_cli_figure_checks_command_line_values_against_the_spec_before_running(
        run_cli: Callable[..., Any], tmp_path: Path) -> None:
    res = run_cli("figure", "fig10", "--quick", "-o", tmp_path / "out", "--tbs-per-peer", "100000000")
    assert res.code == 1
    assert res.err.count("\n") == 1
    assert "tbs_per_peer[0]: the requested direct allgather plan would have about" in res.err
    assert not (tmp_path / "out").exists()  # refused before any point ran


def test_title_names_the_threadblock_counts_searched_per_range_of_sizes() -> None:
    def title(records: list[dict[str, Any]]) -> str:
        fig = render("fig9", figure_data("fig9", records))
        return fig._suptitle.get_text()  # type: ignore[union-attr]

    one = [record(c, 100.0, size=s) for c in ("UA", "NAP+NAR") for s in (100_000, 10**9)]
    assert "threadblocks" not in title(one)
    searched = one + [record(c, 90.0, size=s, tbs=k) for c in ("UA", "NAP+NAR") for s in (100_000, 10**6)
                      for k in (4, 16)] + [record(c, 100.0, size=10**6) for c in ("UA", "NAP+NAR")]
    assert title(searched).endswith("per peer: 1, 4, 16 at 100kB-1MB; 1 at 1GB")
    everywhere = searched + [record(c, 90.0, size=10**9, tbs=k) for c in ("UA", "NAP+NAR") for k in (4, 16)]
    assert title(everywhere).endswith("at its fastest of 1, 4, 16 threadblocks per peer")


def test_cli_figure_runs_the_executors_slices_into_a_sweep_of_its_own(run_cli: Callable[..., Any],
                                                                     tmp_path: Path) -> None:
    res = run_cli("figure", "fig10", "--quick", "--executor-slices", "-o", tmp_path, "--jobs", "1", "-q")
    assert res.code == 0, res.err
    name = "fig10-quick-slices"
    assert (tmp_path / f"{name}.png").stat().st_size > 0
    results = sorted((tmp_path / "sweeps" / name / "results").glob("*.json"))
    assert results
    for path in results:
        point = json.loads(path.read_text())
        assert point["point"]["executor_slices"] is True
        assert point["result"]["executor_slices"]["slices"] >= 1
