"""CLI commands of the topology layer: ``nuna topology show|render|export|characterize``."""

from __future__ import annotations

import dataclasses
import json
import math
from enum import StrEnum
from pathlib import Path

import typer

from nuna.cli.common import SET_HELP, check_outputs, echo_json, topology_with_settings
from nuna.errors import InputError
from nuna.fsutil import read_input, write_atomic
from nuna.topology import (
    DEFAULT_TOPOLOGY,
    atomic_round_trips,
    build_gpu,
    build_pod,
    calibration_report,
    latency_summary,
    load_topology,
    nar_granularities,
    to_graphml,
)
from nuna.topology.latency import Spread
from nuna.topology.render import (
    FORMATS,
    MAX_RENDER_GPUS,
    LinkOverlay,
    characterization_figure,
    figure_bytes,
    link_overlay,
    topology_figure,
)
from nuna.topology.spec import TopologySpec

topology_app = typer.Typer(
    name="topology",
    help="Inspect topologies: latency spreads, pictures, GraphML export, NUNA characterization.",
    rich_markup_mode=None,  # plain help, as the root app (nuna.cli) says why
    no_args_is_help=True,
)

_CHARACTERIZE_DEFAULT = ("mi210-like", "mi355x-like", "mi300x-like", DEFAULT_TOPOLOGY)
_TOPOLOGY_HELP = "Topology name (topologies/NAME.toml) or path to a .toml file."


def _picture_format(path: Path) -> str:
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise typer.BadParameter(
            f"{path}: picture must end in {', '.join('.' + f for f in FORMATS)}", param_hint="'-o'"
        )
    return fmt


def _spread_line(label: str, s: Spread) -> str:
    return (
        f"  {label:<26} best {s.best_ns:8.1f}  mean {s.mean_ns:8.1f}  worst {s.worst_ns:8.1f} ns"
        f"   worst/best {s.worst_to_best:5.2f}  mean/best {s.mean_to_best:5.2f}"
    )


@topology_app.command("show")
def show(
    topology: str = typer.Argument(DEFAULT_TOPOLOGY, help=_TOPOLOGY_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    settings: list[str] = typer.Option([], "--set", metavar="SECTION.KEY=VALUE", help=SET_HELP),
) -> None:
    """Counts and uncontended best / mean / worst latencies, with the paper's calibration targets."""
    spec = topology_with_settings(topology, settings)
    summary = latency_summary(spec)
    rows = calibration_report(spec)
    if as_json:
        payload = summary.as_dict()
        payload["description"] = spec.description
        payload["router"] = dataclasses.asdict(spec.router)
        payload["nar"] = dataclasses.asdict(spec.nar)
        payload["protocol"] = dataclasses.asdict(spec.protocol)
        payload["calibration"] = [
            {
                "key": r.key,
                "target": r.target,
                "achieved": _finite(r.achieved),
                "unit": r.unit,
                "source": r.source,
            }
            for r in rows
        ]
        echo_json(payload)
        return
    chip = spec.chip
    typer.echo(f"{spec.name}: {spec.description}")
    typer.echo(
        f"  {chip.kind} chip: {chip.dies} die(s) ({chip.dies_x}x{chip.dies_y}), "
        f"{chip.cols}x{chip.rows} mesh = {chip.routers} routers, {chip.cus} CUs, {chip.io_ports} I/O ports, "
        f"{chip.hbm_stacks} HBM stacks x {chip.hbm_channels_per_stack} channels"
    )
    typer.echo(
        f"  scale-up: {spec.scaleup.kind}, round trip {summary.scaleup_round_trip_ns:.1f} ns; "
        f"memory access {summary.memory_access_latency_ns:.1f} ns"
    )
    rt = spec.router
    typer.echo(
        f"  routers: {rt.vcs} VCs x {rt.vc_buffer_flits} flits, credits back after "
        f"{rt.credit_delay_cycles:g} cycles, head set-up {rt.head_setup_cycles:g} cycles "
        f"(cycle = {chip.noc_hop_latency_ns / 5:g} ns)"
    )
    choice = {"address": "the domain owning the destination address",
              "cu": "the domain nearest the storing CU"}[spec.nar.port_choice]
    typer.echo(f"  NAR: a store hashes over the ports of {choice}")
    done = {"landing": "when it is written in the destination stack",
            "response": "when the stack's write response is back at the CU"}[spec.protocol.store_completion]
    typer.echo(f"  stores: complete, and free their CU's request slots, {done}")
    typer.echo("uncontended latency (uniform over CUs, ports and stacks):")
    typer.echo(_spread_line("CU -> I/O port", summary.cu_to_port))
    typer.echo(_spread_line("I/O port -> HBM stack", summary.port_to_stack))
    typer.echo(_spread_line("remote write, NoC part", summary.remote_write_noc))
    typer.echo(_spread_line("remote store", summary.remote_store))
    typer.echo(_spread_line("GPU-to-GPU transfer", summary.transfer))
    typer.echo("paper figures that nuna-4die is calibrated to (target -> this topology):")
    for r in rows:
        typer.echo(
            f"  {r.key:<32} {r.target:9.2f} -> {r.achieved:9.2f} {r.unit:<2} ({r.error:+.1%})  {r.source}"
        )


class _Stat(StrEnum):
    """``--overlay-stat`` values: ``OVERLAY_STATS`` of the renderer."""

    MEAN = "mean"
    MAX = "max"
    QUEUEING = "queueing"


def _read_overlay(path: Path, spec: TopologySpec, stat: str) -> LinkOverlay:
    """Parse a ``nuna simulate --json`` file (here: the topology layer does not read files of
    the sim layer) and map its per-link table onto ``spec``'s chip."""
    raw = read_input(path, "result file")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise InputError(f"{path}: not JSON (expected the file of 'nuna simulate --json')") from None
    return link_overlay(spec, data, stat=stat, source=str(path))


@topology_app.command("render")
def render(
    topology: str = typer.Argument(DEFAULT_TOPOLOGY, help=_TOPOLOGY_HELP),
    output: Path = typer.Option(..., "-o", "--output", help="Picture to write: .svg, .png or .pdf."),
    gpus: int = typer.Option(
        1, "--gpus", min=1, max=MAX_RENDER_GPUS, help="Draw a pod of N GPUs with its Clos."
    ),
    nar: int | None = typer.Option(None, "--nar", help="Colour the NAR domains of granularity G."),
    overlay: Path | None = typer.Option(
        None, "--overlay",
        help="Shade the chip's links by utilisation (or queueing) from a 'nuna simulate --json' file."
    ),
    overlay_stat: _Stat | None = typer.Option(
        None, "--overlay-stat",
        help="With --overlay: each link's utilisation, mean (default) or max over the GPUs, or "
             "queueing: its packets' mean wait for it (ns), where hot spots show.",
    ),
    settings: list[str] = typer.Option([], "--set", metavar="SECTION.KEY=VALUE",
                                       help=SET_HELP + " A result of 'nuna simulate --set' overlays the "
                                            "topology with the same settings."),
) -> None:
    """Draw the chip (dies, mesh, CUs, I/O ports, HBM stacks), optionally the pod, NAR domains,
    or the link utilisation of a simulation."""
    fmt = _picture_format(output)
    check_outputs(output, inputs=(topology, overlay))
    if overlay_stat is not None and overlay is None:
        raise typer.BadParameter("needs --overlay", param_hint="'--overlay-stat'")
    if overlay is not None and gpus > 1:
        raise typer.BadParameter(
            "an overlay shades one chip (aggregated over the result's GPUs): use --gpus 1",
            param_hint="'--gpus'",
        )
    spec = topology_with_settings(topology, settings)
    if nar is not None and nar not in nar_granularities(spec):
        valid = ", ".join(str(g) for g in nar_granularities(spec))
        raise typer.BadParameter(
            f"{nar} is not a NAR granularity of {spec.name} (valid: {valid})", param_hint="'--nar'"
        )
    if overlay is None:
        fig = topology_figure(spec, ngpus=gpus, nar=nar)
    else:
        shade = _read_overlay(overlay, spec, (overlay_stat or _Stat.MEAN).value)
        fig = topology_figure(
            spec, nar=nar, edge_values=shade.values, value_label=shade.label, note=shade.note
        )
    write_atomic(output, figure_bytes(fig, fmt))
    typer.echo(f"wrote {output}")


@topology_app.command("export")
def export(
    topology: str = typer.Argument(DEFAULT_TOPOLOGY, help=_TOPOLOGY_HELP),
    output: Path = typer.Option(..., "-o", "--output", help="GraphML file to write."),
    gpus: int = typer.Option(1, "--gpus", min=1, max=1024, help="Export a pod of N GPUs (default: one GPU)."),
    settings: list[str] = typer.Option([], "--set", metavar="SECTION.KEY=VALUE", help=SET_HELP),
) -> None:
    """Write the chip (or pod) graph as GraphML, node keys stringified."""
    check_outputs(output, inputs=(topology,))
    spec = topology_with_settings(topology, settings)
    graph = build_gpu(spec) if gpus == 1 else build_pod(spec, gpus)
    write_atomic(output, to_graphml(graph))
    typer.echo(f"wrote {output} ({graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges)")


@topology_app.command("characterize")
def characterize(
    topologies: list[str] | None = typer.Argument(
        None, help="Topologies to compare (default: mi210-like mi355x-like mi300x-like nuna-4die)."
    ),
    output: Path | None = typer.Option(
        None, "-o", "--output", help="Violin plot to write: .svg, .png or .pdf."
    ),
    targets: int = typer.Option(2048, "--targets", min=1, max=1 << 16, help="Target addresses per chip."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the target address draw."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """The paper's Fig 4 on the models: remote atomics from every CU over a remote address range.

    Variation is a standard deviation: across addresses = mean over CUs of the std over targets;
    across CUs = mean over targets of the std over CUs. Ratios are relative to the first topology."""
    names = list(topologies) if topologies else list(_CHARACTERIZE_DEFAULT)
    fmt = _picture_format(output) if output is not None else None
    check_outputs(output, inputs=names)
    results = [atomic_round_trips(load_topology(name), targets=targets, seed=seed) for name in names]
    first = results[0]

    def ratio(a: float, b: float) -> float | None:
        return a / b if b > 0 else None

    rows = []
    for res in results:
        row = res.as_dict()
        row["ratio_across_addresses"] = ratio(res.across_addresses_ns, first.across_addresses_ns)
        row["ratio_across_cus"] = ratio(res.across_cus_ns, first.across_cus_ns)
        rows.append(row)
    if fmt is not None and output is not None:
        write_atomic(output, figure_bytes(characterization_figure(results), fmt))
    if as_json:
        echo_json({"reference": first.topology, "targets": targets, "seed": seed, "topologies": rows})
        return
    typer.echo(f"remote atomic round trip, {targets} targets (std in ns; ratio vs {first.topology}):")
    for res, row in zip(results, rows, strict=True):
        ra, rc = row["ratio_across_addresses"], row["ratio_across_cus"]
        typer.echo(
            f"  {res.topology:<14} dies {res.dies}  mean {res.latency_ns.mean():7.1f}  "
            f"across addresses {res.across_addresses_ns:6.1f} ({_fmt_ratio(ra)})  "
            f"across CUs {res.across_cus_ns:6.1f} ({_fmt_ratio(rc)})"
        )
    if output is not None:
        typer.echo(f"wrote {output}")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _fmt_ratio(value: object) -> str:
    return f"{value:.2f}x" if isinstance(value, float) else "n/a"


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(topology_app, name="topology")
