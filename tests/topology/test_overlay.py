"""``nuna topology render --overlay RESULT.json``: node names parse back to node keys, a
simulation's ``chip_links`` table becomes the picture's link shading, and every bad input is one
line on stderr with exit status 1 (bad options: 2)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.collections import LineCollection

from nuna.cli.topology_cmds import _Stat
from nuna.errors import InputError, TopologyError
from nuna.plan.generate import generate
from nuna.plan.xml import save
from nuna.sim import simulate
from nuna.topology import Cu, Hbm, IoPort, Node, Router, Switch, build_gpu, load_topology
from nuna.topology.render import OVERLAY_STATS, figure_bytes, link_overlay, parse_node, topology_figure
from nuna.topology.spec import TopologySpec
from tests.conftest import CliResult

Run = Callable[..., CliResult]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def spec() -> TopologySpec:
    return load_topology("nuna-4die")


@pytest.fixture(scope="module")
def result(spec: TopologySpec) -> dict[str, Any]:
    """A 2-GPU direct allgather's ``nuna simulate --json`` content."""
    res = simulate(generate("allgather", 2, tbs_per_peer=2), spec, 64 * 1024).to_json()
    return json.loads(json.dumps(res))  # exactly what a reader of the file gets


@pytest.fixture
def result_file(tmp_path: Path, result: dict[str, Any]) -> Path:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    return path


# --- node names -------------------------------------------------------------------------------

_ints = st.integers(0, 4095)
_nodes = st.one_of(
    st.builds(Router, _ints, _ints, _ints), st.builds(Cu, _ints, _ints), st.builds(IoPort, _ints, _ints),
    st.builds(Hbm, _ints, _ints), st.builds(Switch, _ints),
)


@given(node=_nodes)
def test_node_names_parse_back_to_the_same_key(node: Node) -> None:
    parsed = parse_node(repr(node))
    assert parsed == node
    assert type(parsed) is type(node)


@pytest.mark.parametrize("text", [
    "", "Router", "Router()", "Router(gpu=0, x=1)", "Router(gpu=0, y=1, x=2)", "Router(gpu=0, x=1, y=z)",
    "Router(gpu=0, x=1, y=2", "Cu(0, 5)", "Cu(gpu=0, cu=5, cu=6)", "Disk(gpu=0, n=1)", "Cu(gpu=0, cu=5)x",
])
def test_bad_node_names_are_input_errors(text: str) -> None:
    with pytest.raises(InputError, match="not a node name"):
        parse_node(text)


# --- result -> overlay ------------------------------------------------------------------------

@pytest.mark.parametrize("stat", ["mean", "max"])
def test_overlay_maps_every_row_onto_a_chip_edge(spec: TopologySpec, result: dict[str, Any],
                                                 stat: str) -> None:
    overlay = link_overlay(spec, result, stat=stat)
    assert set(overlay.values) == set(build_gpu(spec).edges())
    for row in result["chip_links"]:
        key = (parse_node(row["src"]), parse_node(row["dst"]))
        assert overlay.values[key] == row[f"utilization_{stat}"]
    assert overlay.label == f"link utilisation, {stat} over 2 GPUs"
    assert result["plan"] in overlay.note


def test_queueing_overlay_shades_the_links_waits(spec: TopologySpec, result: dict[str, Any]) -> None:
    overlay = link_overlay(spec, result, stat="queueing")
    assert set(overlay.values) == set(build_gpu(spec).edges())
    for row in result["chip_links"]:
        assert overlay.values[parse_node(row["src"]), parse_node(row["dst"])] == row["queueing_ns_mean"]
    assert max(overlay.values.values()) > 1.0  # ns, not a fraction: nothing is clipped to 1
    assert overlay.label == "mean wait per packet (ns), over 2 GPUs"
    fig = topology_figure(spec, edge_values=overlay.values, value_label=overlay.label)
    assert fig.axes[-1].get_ylim()[1] == pytest.approx(max(overlay.values.values()))


def test_overlay_stats_are_the_clis_choices() -> None:
    assert tuple(s.value for s in _Stat) == OVERLAY_STATS


def test_figure_shades_links_by_the_overlay(spec: TopologySpec, result: dict[str, Any]) -> None:
    overlay = link_overlay(spec, result, stat="max")
    values = overlay.values
    fig = topology_figure(spec, edge_values=values, value_label=overlay.label)
    by_gid = {c.get_gid(): c for c in fig.axes[0].collections if isinstance(c, LineCollection)}
    mesh = by_gid["mesh-0"]
    shades = np.asarray(mesh.get_array())
    # each drawn segment: the larger direction of the link between its two routers
    for (a, b), shade in zip(mesh.get_segments(), shades, strict=True):
        u, v = Router(0, round(a[0]), round(a[1])), Router(0, round(b[0]), round(b[1]))
        assert shade == max(values[(u, v)], values[(v, u)])
    assert shades.max() > 0
    mesh.update_scalarmappable()  # the colours come from the colour map, not one fixed colour
    assert len({tuple(c) for c in mesh.get_edgecolor()}) > 1
    cu_links = np.asarray(by_gid["cu-links-0"].get_array())
    assert cu_links.shape == (spec.chip.cus,)
    hottest = max(v for (a, b), v in values.items() if isinstance(a, Cu) or isinstance(b, Cu))
    assert cu_links.max() == hottest
    # the scale spans what is drawn
    bar = fig.axes[-1]
    assert bar.get_gid() == "overlay-colorbar"
    assert bar.get_ylim()[1] == pytest.approx(max(values.values()))


def _broken(result: dict[str, Any], how: str) -> object:
    """``result`` broken as ``how`` says; a pair (result, stat) for the breaks only a stat reads."""
    data = copy.deepcopy(result)
    rows = data["chip_links"]
    if how == "not a dict":
        return [data]
    if how == "not a result":
        return {"topology": "nuna-4die", "chip_links": rows}
    if how == "no table":
        del data["chip_links"]
    elif how == "other topology":
        data["topology"] = "mi300x-like"
    elif how == "unknown link":
        rows[0]["dst"] = "Router(gpu=0, x=99, y=0)"
    elif how == "other gpu":
        rows[0]["src"] = rows[0]["src"].replace("gpu=0", "gpu=1")
    elif how == "bad name":
        rows[0]["src"] = "router 0 0"
    elif how == "twice":
        rows.append(dict(rows[0]))
    elif how == "not a number":
        rows[0]["utilization_mean"] = "0.5"
    elif how == "out of range":
        rows[0]["utilization_mean"] = 1.5
    elif how == "huge":
        rows[0]["utilization_mean"] = 10**400
    elif how == "no waits":
        for row in rows:
            del row["queueing_ns_mean"]
        return data, "queueing"
    elif how == "negative wait":
        rows[0]["queueing_ns_mean"] = -1.0
        return data, "queueing"
    elif how == "endless wait":  # matplotlib's colour bar overflowed, with warnings on stderr
        rows[0]["queueing_ns_mean"] = 1e308
        return data, "queueing"
    elif how == "table not a list":
        data["chip_links"] = {"rows": rows}
    return data


@pytest.mark.parametrize(("how", "error", "message"), [
    ("not a dict", InputError, "not a result of 'nuna simulate --json'"),
    ("not a result", InputError, "not a result of 'nuna simulate --json'"),
    ("no table", InputError, "no per-link table"),
    ("other topology", TopologyError, "on topology 'mi300x-like', not 'nuna-4die'"),
    ("unknown link", TopologyError, "does not exist on nuna-4die"),
    ("other gpu", TopologyError, "does not exist on nuna-4die"),
    ("bad name", InputError, "not a node name"),
    ("twice", InputError, "listed twice"),
    ("not a number", InputError, "is not a link row"),
    ("out of range", InputError, "outside \\[0, 1\\]"),
    ("huge", InputError, "is not a link row"),
    ("table not a list", InputError, "is not a list"),
    ("no waits", InputError, "no per-link waits"),
    ("negative wait", InputError, "negative wait"),
    ("endless wait", InputError, r"a wait of 1e\+308 ns, more than any replay gives \(at most 1e\+18 ns\)"),
])
def test_overlay_rejects_bad_results(spec: TopologySpec, result: dict[str, Any], how: str,
                                     error: type[Exception], message: str) -> None:
    broken, stat = _broken(result, how), "mean"
    if isinstance(broken, tuple):
        broken, stat = broken
    with pytest.raises(error, match=message):
        link_overlay(spec, broken, stat=stat, source="r.json")


# --- CLI --------------------------------------------------------------------------------------

def test_cli_renders_a_real_simulation(run_cli: Run, tmp_path: Path) -> None:
    plan, res = tmp_path / "ag2.xml", tmp_path / "ag2.json"
    save(generate("allgather", 2), plan)
    assert run_cli("simulate", plan, "--size", "32kB", "--json", res).code == 0
    png = tmp_path / "ag2.png"
    out = run_cli("topology", "render", "--overlay", res, "-o", png)
    assert out.code == 0, out.err
    assert png.read_bytes()[:8] == PNG_MAGIC
    svgs = []
    for name in ("a.svg", "b.svg"):
        svg = tmp_path / name
        assert run_cli("topology", "render", "nuna-4die", "--overlay", res, "--overlay-stat", "max",
                       "-o", svg).code == 0
        svgs.append(svg.read_bytes())
    assert svgs[0] == svgs[1]
    text = svgs[0].decode()
    assert "link utilisation, max over 2 GPUs" in text
    assert 'id="overlay-colorbar"' in text
    assert 'id="cu-links-0"' in text
    waits = tmp_path / "w.svg"
    out = run_cli("topology", "render", "--overlay", res, "--overlay-stat", "queueing", "-o", waits)
    assert out.code == 0, out.err
    assert "mean wait per packet (ns), over 2 GPUs" in waits.read_text()


@pytest.mark.parametrize(("case", "message"), [
    ("missing", "no such result file"),
    ("folder", "is a folder, not a result file"),
    ("not json", "not JSON"),
    ("binary", "not JSON"),
    ("not a result", "not a result of 'nuna simulate --json'"),
    ("no table", "no per-link table"),
    ("other topology", "not 'mi210-like'"),
    ("unknown link", "does not exist on nuna-4die"),
])
def test_cli_bad_overlay_is_one_line_exit_1(run_cli: Run, tmp_path: Path, result: dict[str, Any],
                                            case: str, message: str) -> None:
    src = tmp_path / "in"
    src.mkdir()
    path = src / "r.json"
    topology = "nuna-4die"
    if case == "folder":
        path.mkdir()
    elif case == "not json":
        path.write_text("<algo/>\n")
    elif case == "binary":
        path.write_bytes(b"\xff\xfe\x00garbage")
    elif case == "not a result":
        path.write_text(json.dumps({"hello": 1}))
    elif case == "no table":
        path.write_text(json.dumps(_broken(result, "no table")))
    elif case == "unknown link":
        path.write_text(json.dumps(_broken(result, "unknown link")))
    elif case == "other topology":
        path.write_text(json.dumps(result))
        topology = "mi210-like"
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    res = run_cli("topology", "render", topology, "--overlay", path, "-o", out_dir / "chip.png")
    assert res.code == 1
    assert res.err.startswith("nuna: error: ")
    assert len(res.err.strip().splitlines()) == 1
    assert message in res.err
    assert not list(out_dir.iterdir())


@pytest.mark.parametrize(("args", "message"), [
    (("--overlay-stat", "max"), "needs --overlay"),
    (("--overlay", "r.json", "--gpus", "2"), "use --gpus 1"),
    (("--overlay", "r.json", "--overlay-stat", "median"), "--overlay-stat"),
])
def test_cli_bad_overlay_options_are_usage_errors(run_cli: Run, tmp_path: Path, result_file: Path,
                                                  args: tuple[str, ...], message: str) -> None:
    fixed = [str(result_file) if a == "r.json" else a for a in args]
    out = tmp_path / "chip.png"
    res = run_cli("topology", "render", "-o", out, *fixed)
    assert res.code == 2
    assert message in res.err
    assert len(res.err.strip().splitlines()) == 1
    assert not out.exists()


def test_colour_map_is_the_one_the_bar_shows(spec: TopologySpec, result: dict[str, Any]) -> None:
    # an attachment line's colour is the colour map at its value on the bar's scale
    overlay = link_overlay(spec, result)
    fig = topology_figure(spec, edge_values=overlay.values)
    hottest_port = max(range(spec.chip.io_ports), key=lambda k: max(
        v for (a, b), v in overlay.values.items() if IoPort(0, k) in (a, b)))
    value = max(v for (a, b), v in overlay.values.items() if IoPort(0, hottest_port) in (a, b))
    bar = fig.axes[-1]
    lo, hi = bar.get_ylim()
    expected = mpl.colormaps["inferno_r"]((value - lo) / (hi - lo))
    colours = [line.get_color() for line in fig.axes[0].lines]
    assert any(np.allclose(mpl.colors.to_rgba(c), expected) for c in colours)
    assert figure_bytes(fig, "png")[:8] == PNG_MAGIC


def test_cli_overlays_a_result_of_changed_settings_with_the_same_settings(run_cli: Run,
                                                                         tmp_path: Path) -> None:
    # `nuna simulate --set` names its chip after the settings; render takes them too
    changed = load_topology("nuna-4die", {"router.vc_buffer_flits": 32})
    path = tmp_path / "r.json"
    path.write_text(json.dumps(simulate(generate("allgather", 2), changed, 64 * 1024).to_json()))
    out = tmp_path / "chip.png"
    plain = run_cli("topology", "render", "--overlay", path, "-o", out)
    assert plain.code == 1
    assert "'nuna-4die with router.vc_buffer_flits=32', not 'nuna-4die'" in plain.err
    assert "--set" in plain.err
    assert not out.exists()
    res = run_cli("topology", "render", "--set", "router.vc_buffer_flits=32", "--overlay", path, "-o", out)
    assert res.code == 0, res.err
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_cli_exports_the_graph_with_changed_settings(run_cli: Run, tmp_path: Path) -> None:
    plain, changed = tmp_path / "plain.graphml", tmp_path / "changed.graphml"
    assert run_cli("topology", "export", "-o", plain).code == 0
    res = run_cli("topology", "export", "--set", "chip.die_crossing_bandwidth_gbps=4580", "-o", changed)
    assert res.code == 0, res.err
    assert "4580" in changed.read_text()
    assert "4580" not in plain.read_text()
    bad = run_cli("topology", "export", "--set", "router.vcx=2", "-o", tmp_path / "bad.graphml")
    assert bad.code == 1
    assert "did you mean router.vcs?" in bad.err
    assert not (tmp_path / "bad.graphml").exists()
