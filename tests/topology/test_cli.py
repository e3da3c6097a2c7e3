"""``nuna topology show|render|export|characterize`` through the in-process CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import networkx as nx
import pytest
from lxml import etree

from nuna.topology import Cu, Hbm, Router, build_pod, default_topology, latency_summary, load_topology
from nuna.topology.render import figure_bytes, topology_figure
from tests.conftest import CliResult

Run = Callable[..., CliResult]


def _svg_ids(path: Path) -> set[str]:
    tree = etree.parse(str(path))
    return {el.get("id") for el in tree.iter() if el.get("id")}


def test_show_json_matches_the_library(run_cli: Run) -> None:
    res = run_cli("topology", "show", "--json")
    assert res.code == 0, res.err
    data = json.loads(res.out)
    summary = latency_summary(default_topology())
    assert data["counts"] == {"dies": 4, "routers": 144, "cus": 1008, "io_ports": 12, "hbm_stacks": 16}
    for part in ("cu_to_port", "port_to_stack", "remote_write_noc", "remote_store", "transfer"):
        spread = getattr(summary, part)
        assert data[part]["worst_ns"] == pytest.approx(spread.worst_ns)
        assert data[part]["mean_to_best"] == pytest.approx(spread.mean_to_best)
    keys = {row["key"] for row in data["calibration"]}
    assert {"remote_write_noc_worst_ns", "transfer_mean_to_best", "scaleup_round_trip_ns"} <= keys


def test_show_says_when_a_store_completes(run_cli: Run) -> None:
    for name, completion, words in (("nuna-4die", "landing", "when it is written"),
                                     ("nuna-4die-ack", "response", "write response is back")):
        data = json.loads(run_cli("topology", "show", name, "--json").out)
        assert data["protocol"] == {"store_completion": completion}
        assert words in run_cli("topology", "show", name).out


def test_show_text_names_counts_and_ratios(run_cli: Run) -> None:
    res = run_cli("topology", "show", "mi300x-like")
    assert res.code == 0, res.err
    assert "320 CUs" in res.out
    assert "8 I/O ports" in res.out
    assert "worst/best" in res.out


def test_render_svg_contains_dies_ports_stacks_and_legend(run_cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "chip.svg"
    res = run_cli("topology", "render", "-o", str(out))
    assert res.code == 0, res.err
    ids = _svg_ids(out)
    assert {f"die-0-{d}" for d in range(4)} <= ids
    assert {f"ioport-0-{k}" for k in range(12)} <= ids
    assert {f"hbm-0-{s}" for s in range(16)} <= ids
    assert {"legend", "cus-0", "mesh-0", "die-crossings-0"} <= ids
    assert not any(i.startswith("switch-") for i in ids)
    text = out.read_text()
    assert "I/O port" in text
    assert "HBM stack" in text
    assert "compute die" in text


def test_render_pod_with_nar_domains(run_cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "pod.svg"
    res = run_cli("topology", "render", "-o", str(out), "--gpus", "2", "--nar", "4")
    assert res.code == 0, res.err
    ids = _svg_ids(out)
    assert {f"switch-{k}" for k in range(12)} <= ids
    assert {f"ioport-1-{k}" for k in range(12)} <= ids
    assert "die-1-3" in ids
    text = out.read_text()
    assert all(f"NAR domain {d}" in text for d in range(4))
    assert "NAR domain 4" not in text


def test_render_png_and_determinism(run_cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "chip.png"
    assert run_cli("topology", "render", "mi210-like", "-o", str(out)).code == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    run_cli("topology", "render", "mi355x-like", "-o", str(a), "--nar", "2")
    run_cli("topology", "render", "mi355x-like", "-o", str(b), "--nar", "2")
    assert a.read_bytes() == b.read_bytes()


def test_render_overlay_hook_shades_links() -> None:
    spec = default_topology()
    values = {(Router(0, 5, 2), Router(0, 6, 2)): 0.9, (Router(0, 0, 0), Router(0, 1, 0)): 0.1}
    svg = figure_bytes(topology_figure(spec, edge_values=values), "svg").decode()
    assert 'id="overlay-colorbar"' in svg


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-o", "chip.txt"), "picture must end in"),
        (("-o", "chip.svg", "--nar", "5"), "not a NAR granularity"),
        (("-o", "chip.svg", "--gpus", "99"), "--gpus"),
        (("-o", "chip.svg", "--gpus", "0"), "--gpus"),
    ],
)
def test_render_bad_options_are_usage_errors(
    run_cli: Run, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    fixed = tuple(str(tmp_path / a) if a.startswith("chip.") else a for a in args)
    res = run_cli("topology", "render", *fixed)
    assert res.code == 2
    assert message in res.err
    assert len(res.err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_render_into_missing_folder_is_an_error(run_cli: Run, tmp_path: Path) -> None:
    res = run_cli("topology", "render", "-o", str(tmp_path / "no" / "chip.svg"))
    assert res.code == 1
    assert "does not exist" in res.err


def test_export_graphml(run_cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "pod.graphml"
    res = run_cli("topology", "export", "mi210-like", "-o", str(out), "--gpus", "2")
    assert res.code == 0, res.err
    graph = nx.read_graphml(out)
    expected = build_pod(load_topology("mi210-like"), 2)
    assert graph.number_of_nodes() == expected.number_of_nodes()
    assert graph.number_of_edges() == expected.number_of_edges()
    assert graph.nodes[repr(Cu(1, 3))]["kind"] == "cu"
    assert graph.nodes[repr(Hbm(0, 2))]["stack"] == 2


def test_characterize_json_and_picture(run_cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "fig4.png"
    res = run_cli(
        "topology", "characterize", "mi210-like", "mi300x-like", "-o", str(out), "--json", "--targets", "256"
    )
    assert res.code == 0, res.err
    data = json.loads(res.out)
    assert data["reference"] == "mi210-like"
    one, four = data["topologies"]
    assert (one["dies"], four["dies"]) == (1, 4)
    assert one["ratio_across_cus"] == 1.0
    assert four["ratio_across_addresses"] > 2
    assert four["ratio_across_cus"] > 2
    assert four["variation_across_cus_p95_p5_ns"] > one["variation_across_cus_p95_p5_ns"]
    assert out.read_bytes()[:4] == b"\x89PNG"
    text = run_cli("topology", "characterize", "mi210-like", "--targets", "64")
    assert text.code == 0
    assert "across addresses" in text.out


def test_show_flat_chip_json_is_strict(run_cli: Run) -> None:
    res = run_cli("topology", "show", "flat-switch", "--json")
    assert res.code == 0, res.err

    def reject(constant: str) -> None:
        raise AssertionError(f"non-JSON constant {constant}")

    data = json.loads(res.out, parse_constant=reject)
    assert data["remote_write_noc"]["worst_to_best"] is None
    assert data["remote_store"]["best_ns"] == 2000.0
    assert data["transfer"]["worst_to_best"] == 1.0


@pytest.mark.parametrize("fmt", ["svg", "pdf", "png"])
def test_pictures_carry_no_library_version_or_date(fmt: str) -> None:
    # before, SVG and PDF named "Matplotlib v3.x.y": the same picture changed bytes with the library
    import matplotlib

    data = figure_bytes(topology_figure(default_topology()), fmt)
    assert matplotlib.__version__.encode() not in data
    assert b"Matplotlib v" not in data
    assert b"CreationDate" not in data
    assert b"<dc:date>" not in data
