"""CLI commands of the passes layer: ``nuna rewrite``, ``nuna diff``, ``nuna demo``.

Thin: parse options, call :mod:`nuna.passes` (and :mod:`nuna.passes.report` for the
comparison and the demo's figures), print. Bad input is a ``NunaError`` the root turns into one
stderr line.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import typer

from nuna.cli.common import (
    EXECUTOR_SLICES_HELP,
    FLOW_CONTROL_HELP,
    PROTOCOL_MODEL_HELP,
    REDUCE_FUSION_HELP,
    SET_HELP,
    ProtocolModel,
    check_outputs,
    naming_the_plan,
    parse_packet_bytes_option,
    parse_size_option,
    topology_with_settings,
    write_json,
)
from nuna.errors import UsageError
from nuna.fsutil import make_folder, write_atomic
from nuna.passes import PassContext, PlanPass, get_config
from nuna.passes.configs import apply_choice, choose_granularity, config_names, parse_granularity
from nuna.plan.ir import Plan
from nuna.plan.xml import load, save
from nuna.topology.spec import DEFAULT_TOPOLOGY
from nuna.units import format_size

_TOPO_HELP = "Topology name or .toml path."
_CONFIG_HELP = "Configuration: UA, UA+NAR, NUMA, NUMA+NAR, NAP, NAP+NAR, NAP*, NAP*+NAR."

#: ``--size`` default of ``rewrite``: 1 MiB, the size of the paper's Fig 10 as the figures run it
#: (binary sizes: ``docs/results.md``, Sizes).
DEFAULT_REWRITE_SIZE_BYTES = 1024 * 1024


def _size(text: str | None) -> int | None:
    return None if text is None else parse_size_option(text)


def register(app: typer.Typer) -> None:
    """Add ``rewrite``, ``diff`` and ``demo`` to the root app."""

    @app.command("rewrite")
    def rewrite_cmd(
        plan_path: Path = typer.Argument(..., metavar="PLAN", help="Plan file (MSCCL XML)."),
        config: str = typer.Option(..., "--config", "-c", help=_CONFIG_HELP),
        nar_granularity: str | None = typer.Option(
            None, "--nar-granularity", "-g",
            help="+NAR configs: NAR domains G (a divisor of the port count, at most the stack count), or "
                 "'auto' (simulate every G, keep the fastest). Default: the size-threshold heuristic."),
        topology: str = typer.Option(DEFAULT_TOPOLOGY, "--topology", "-t", help=_TOPO_HELP),
        settings: list[str] = typer.Option([], "--set", metavar="SECTION.KEY=VALUE", help=SET_HELP),
        size: str | None = typer.Option(
            None, "--size", "-s",
            help="Collective size the placement is for (budgets depend on it). Default: 1MiB."),
        output: Path = typer.Option(..., "--output", "-o", help="Annotated plan to write (MSCCL XML)."),
        print_between: bool = typer.Option(False, "--print-between-passes",
                                           help="Print each pass and a summary of its placement to stderr."),
        packet_bytes: str | None = typer.Option(
            None, "--packet-bytes", help="With -g auto: the packet size of the replays it picks with (a "
            "multiple of the flit, or auto). Default: one flit of the topology.", show_default=False),
        reduce_fusion: bool | None = typer.Option(None, "--reduce-fusion/--no-reduce-fusion",
                                                  help=f"With -g auto: {REDUCE_FUSION_HELP}",
                                                  show_default=False),
        executor_slices: bool | None = typer.Option(None, "--executor-slices",
                                                    help=f"With -g auto: {EXECUTOR_SLICES_HELP}",
                                                    show_default=False),
        protocol_model: ProtocolModel | None = typer.Option(None, "--protocol-model",
                                                            help=f"With -g auto: {PROTOCOL_MODEL_HELP}",
                                                            show_default=False),
        flow_control: bool | None = typer.Option(None, "--flow-control/--no-flow-control",
                                                 help=f"With -g auto: {FLOW_CONTROL_HELP}",
                                                 show_default=False),
    ) -> None:
        """Rewrite a plan with a configuration's placement/routing annotations (still valid MSCCL XML)."""
        cfg = get_config(config)
        granularity = parse_granularity(nar_granularity)
        packets = parse_packet_bytes_option(packet_bytes)
        models = {"reduce_fusion": reduce_fusion, "executor_slices": executor_slices,
                  "protocol_model": None if protocol_model is None else protocol_model.value,
                  "flow_control": flow_control}
        given: dict[str, Any] = {k: v for k, v in models.items() if v is not None}
        options = None
        if granularity == "auto":
            from nuna.sim.replay import SimOptions  # the simulator (numba) loads only to replay

            options = dataclasses.replace(SimOptions(), **given)
        elif given or packets is not None:
            raise UsageError("the replay options (--packet-bytes and the models) choose what -g auto "
                             "replays; nuna rewrite replays nothing else")
        check_outputs(output, inputs=(plan_path, topology))
        spec = topology_with_settings(topology, settings)
        plan = load(plan_path)
        size_bytes = _size(size)
        if size_bytes is None:
            size_bytes = DEFAULT_REWRITE_SIZE_BYTES
        ctx = PassContext(spec, size_bytes)

        def observe(p: PlanPass, out: Plan) -> None:
            pl = out.placement
            print(f"after {p.name}: nar={pl.nar_granularity} threadblocks={len(pl.threadblocks)} "
                  f"chunks={len(pl.chunks)}", file=sys.stderr)

        with naming_the_plan(plan_path):
            choice = choose_granularity(plan, cfg.name, ctx, granularity, packet_bytes=packets,
                                        options=options)
            out = apply_choice(plan, cfg.name, ctx, choice, observe=observe if print_between else None)
        save(out, output)
        pl = out.placement
        g = "" if choice.granularity is None else f", NAR granularity {choice.granularity} ({choice.method})"
        chunks = len({(c.gpu, c.buffer, c.chunk) for c in pl.chunks})
        spread = "" if len(pl.chunks) == chunks else f" ({len(pl.chunks)} placements: some on several stacks)"
        typer.echo(f"wrote {output}: {cfg.name}{g}, size {format_size(size_bytes)}, "
                   f"{len(pl.threadblocks)} threadblocks and {chunks} chunks placed{spread}")

    @app.command("diff")
    def diff_cmd(
        plan_path: Path = typer.Argument(..., metavar="PLAN", help="Plan file (MSCCL XML)."),
        size: str = typer.Option(..., "--size", "-s", help="Collective size, e.g. 1MB."),
        configs: str = typer.Option("UA,NAP+NAR", "--configs",
                                    help="Comma-separated configurations; the first is the reference."),
        nar_granularity: str | None = typer.Option(
            None, "--nar-granularity", "-g", help="G or 'auto' for the +NAR configs (default: heuristic)."),
        topology: str = typer.Option(DEFAULT_TOPOLOGY, "--topology", "-t", help=_TOPO_HELP),
        settings: list[str] = typer.Option([], "--set", metavar="SECTION.KEY=VALUE", help=SET_HELP),
        seed: int = typer.Option(0, "--seed", help="Simulator seed."),
        json_path: Path | None = typer.Option(None, "--json", help="Also write the comparison as JSON."),
        packet_bytes: str | None = typer.Option(
            None, "--packet-bytes", help="Packet size of every replay (and of -g auto's): a multiple of "
            "the flit, or auto. Default: one flit of the topology.", show_default=False),
        reduce_fusion: bool = typer.Option(True, "--reduce-fusion/--no-reduce-fusion",
                                           help=REDUCE_FUSION_HELP),
        executor_slices: bool = typer.Option(False, "--executor-slices", help=EXECUTOR_SLICES_HELP),
        protocol_model: ProtocolModel = typer.Option(ProtocolModel.PLAN, "--protocol-model",
                                                     help=PROTOCOL_MODEL_HELP),
        flow_control: bool = typer.Option(True, "--flow-control/--no-flow-control", help=FLOW_CONTROL_HELP),
    ) -> None:
        """Simulate a plan under several configurations and show them side by side (each replay, and
        -g auto's, with the replay options given here; nuna simulate describes them)."""
        from nuna.passes.report import compare, format_comparison
        from nuna.sim.replay import SimOptions

        names = config_names(configs)
        check_outputs(json_path, inputs=(plan_path, topology))
        spec = topology_with_settings(topology, settings)
        plan = load(plan_path)
        size_bytes = _size(size)
        assert size_bytes is not None
        packets = parse_packet_bytes_option(packet_bytes)
        options = SimOptions(reduce_fusion=reduce_fusion, executor_slices=executor_slices,
                             protocol_model=protocol_model.value, flow_control=flow_control)
        with naming_the_plan(plan_path):
            comparison = compare(plan, spec, size_bytes, names, parse_granularity(nar_granularity), seed=seed,
                                 packet_bytes=packets, options=options)
        if json_path is not None:  # before printing: a closed pipe must not cost the result
            write_json(json_path, comparison.to_json())
        typer.echo(format_comparison(comparison))

    @app.command("demo")
    def demo_cmd(
        output: Path = typer.Option(Path("nuna-demo"), "--output", "-o", help="Folder for the figures."),
        topology: str = typer.Option(DEFAULT_TOPOLOGY, "--topology", "-t", help=_TOPO_HELP),
        settings: list[str] = typer.Option([], "--set", metavar="SECTION.KEY=VALUE", help=SET_HELP),
        tbs_per_peer: int | None = typer.Option(
            None, "--tbs-per-peer", "-k", min=1,
            help="Threadblocks per peer of the direct allgather (default: search 1, 4 and 16)."),
    ) -> None:
        """The main job on defaults: 8-GPU direct allgather at 100 KiB and 1 MiB, UA vs NAP+NAR."""
        from nuna.passes.report import format_search, run_demo

        make_folder(output)  # before the run, not after it
        spec = topology_with_settings(topology, settings)
        result = run_demo(spec, tbs_per_peer=tbs_per_peer)
        for name, data in result.files:  # before printing: a closed pipe must not cost them
            write_atomic(output / name, data)
        for search in result.searches:
            typer.echo(format_search(search))
            typer.echo("")
        for name, _ in result.files:
            typer.echo(f"wrote {output / name}")
