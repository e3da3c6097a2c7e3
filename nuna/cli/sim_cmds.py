"""CLI commands of the sim layer: ``nuna noc`` (synthetic NoC traffic) and ``nuna simulate``.

Thin: parse options, call :mod:`nuna.sim`, print. Results go to stdout, JSON files are written
atomically with sorted keys.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import typer

from nuna.cli.common import (
    EXECUTOR_SLICES_HELP,
    FLOW_CONTROL_HELP,
    LINE_SETUPS_HELP,
    PACKET_CREDIT_HELP,
    PROTOCOL_MODEL_HELP,
    REDUCE_FUSION_HELP,
    SET_HELP,
    LineSetups,
    ProtocolModel,
    check_outputs,
    naming_the_plan,
    parse_packet_bytes_option,
    parse_size_option,
    topology_with_settings,
    write_json,
)
from nuna.errors import NunaError, UsageError
from nuna.experiments.spec import MAX_CREDIT_LINES
from nuna.text import one_line
from nuna.units import format_size

if TYPE_CHECKING:  # the simulator (numba) loads when a command needs it, not for --help
    from nuna.plan.ir import Plan
    from nuna.sim.result import SimResult

_MESH_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def _mesh(text: str) -> tuple[int, int]:
    m = _MESH_RE.match(text)
    if m is None:
        raise typer.BadParameter(f"invalid mesh {text!r}: expected WxH, e.g. 8x8")
    width, height = int(m.group(1)), int(m.group(2))
    if width < 1 or height < 1 or width * height > 4096:
        raise typer.BadParameter(f"invalid mesh {text!r}: sides must be >= 1 and W*H <= 4096")
    return width, height


def _stat(value: float, digits: int) -> str:
    """A statistic of the NoC run, 'n/a' where no packet gave one (NaN)."""
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def noc(
    mesh: str | None = typer.Option(None, "--mesh", help="Mesh size WxH (one terminal per router; up to "
                                    "about 36x36: every pair's path is built). Default: 8x8, or the "
                                    "--topology chip's mesh.", show_default=False),
    traffic: str = typer.Option("uniform", "--traffic",
                                help="uniform | transpose | edges (to the two short edges)."),
    rate: float = typer.Option(..., "--rate", help="Offered load in flits per node per cycle, in (0, 1]."),
    packet_flits: int = typer.Option(1, "--packet-flits", help="Packet length L in flits."),
    cycles: int = typer.Option(10_000, "--cycles", help="Injection cycles (the first fifth warms up)."),
    seed: int = typer.Option(1, "--seed", help="Seed of the Bernoulli sources."),
    router: str = typer.Option("iq", "--router", help="iq: input-queued VC routers (BookSim-like); "
                               "oq: ideal output queues."),
    json_file: Path | None = typer.Option(None, "--json", help="Write the result as JSON to this file."),
    topology: str | None = typer.Option(None, "--topology", "-t", help="A chip (name or .toml path) whose "
                                        "[router] table, and mesh unless --mesh is given, to use. Links "
                                        "stay the synthetic mode's cycles: no die crossings, ports or "
                                        "stacks.", show_default=False),
    settings: list[str] = typer.Option([], "--set", metavar="SECTION.KEY=VALUE",
                                       help="With --topology: " + SET_HELP),
) -> None:
    """Run synthetic traffic on a mesh NoC (validation against BookSim 2)."""
    from nuna.sim.network import RouterParams
    from nuna.sim.noc import run_noc  # imported here: numba start-up only for sim commands

    check_outputs(json_file, inputs=(topology,))
    params, chip = None, ""
    width, height = _mesh(mesh or "8x8")
    if settings and topology is None:
        raise UsageError("--set changes a parameter of the --topology chip; give one")
    if topology is not None:
        spec = topology_with_settings(topology, settings)
        if spec.chip.kind != "mesh":
            raise UsageError(f"topology {spec.name} is a {spec.chip.kind} chip: it has no mesh for the "
                             "synthetic NoC mode")
        if mesh is None:
            width, height = _mesh(f"{spec.chip.cols}x{spec.chip.rows}")
        params = RouterParams.from_topology(spec, input_queued=router == "iq")
        chip = f" topology={spec.name}"
    res = run_noc(width, height, traffic, rate, packet_flits, cycles=cycles, seed=seed, router=router,
                  params=params)
    if json_file is not None:  # before printing: a closed pipe must not cost the result
        write_json(json_file, {**res.to_json(), **({"topology": spec.name} if topology is not None else {})})
    typer.echo(f"mesh {width}x{height} {traffic} L={packet_flits} router={router}{chip} "
               f"offered {res.offered_flit_rate:.4f} accepted {res.accepted_flit_rate:.4f} flits/node/cycle, "
               f"packet latency avg {_stat(res.packet_latency_avg, 2)} "
               f"max {_stat(res.packet_latency_max, 0)} cycles, "
               f"hops {_stat(res.hops_avg, 2)}{', SATURATED' if res.saturated else ''}")


def _size(text: str) -> int:
    return parse_size_option(text)


def _plan_warnings(plan: Plan, path: Path, size_bytes: int) -> list[str]:
    """What a replay of ``plan`` as written times but a user would want to know: a result the
    plan does not compute (``nuna validate``'s semantic errors; the replay times the data
    movement all the same) and a placement made for another collective size."""
    from nuna.plan.dag import build_dag
    from nuna.plan.semantics import check_semantics

    out = []
    made_for = plan.placement.size_bytes
    if made_for is not None and made_for != size_bytes and not plan.placement.is_baseline:
        config = f"{plan.placement.config} " if plan.placement.config else ""
        out.append(f"{path}: its {config}placement was made for {format_size(made_for)} (nuna:size) and is "
                   f"replayed at {format_size(size_bytes)}; budgets and the NAR granularity depend on the "
                   "size (rewrite it for this size, or give --config)")
    try:
        dag = build_dag(plan)
    except NunaError:  # the replay refuses the plan, with this error
        return out
    errors = check_semantics(plan, dag).errors
    if errors:
        more = f" (and {len(errors) - 1} more: nuna validate lists them)" if len(errors) > 1 else ""
        out.append(f"{path}: {one_line(errors[0])}{more}; the replay times the plan's data movement as "
                   "written")
    return out


def _busiest_port(res: SimResult) -> tuple[float, str]:
    """The highest busy share of an I/O port's direction over the run, and where it is
    (`` (GPU g port p egress)``, empty when no port was busy); the lowest GPU and port, egress
    first, on a tie."""
    t = max(res.time_ns, 1e-9)
    best, where = 0.0, ""
    for direction, busy in (("egress", res.port_egress_busy_ns), ("ingress", res.port_ingress_busy_ns)):
        if busy.size == 0:
            continue
        g, k = np.unravel_index(int(np.argmax(busy)), busy.shape)
        share = float(busy[g, k] / t)
        if share > best:
            best, where = share, f" (GPU {g} port {k} {direction})"
    return best, where


def simulate(
    plan_file: Path = typer.Argument(..., help="Plan file (MSCCL XML).", show_default=False),
    size: str = typer.Option(..., "--size", "-s", help="Collective size, nccl-tests convention (allgather: "
                             "output buffer; allreduce: the buffer; reducescatter: input; alltoall: "
                             "per-rank buffer)."),
    topology: str = typer.Option("nuna-4die", "--topology", "-t", help="Topology name or .toml path."),
    settings: list[str] = typer.Option([], "--set", metavar="SECTION.KEY=VALUE", help=SET_HELP),
    packet_bytes: str | None = typer.Option(
        None, "--packet-bytes", help="Packet size: a multiple of the flit (1024, 1KiB), or auto (larger "
        "packets for large transfers). Default: one flit of the topology (256 B on the shipped chips).",
        show_default=False),
    seed: int = typer.Option(0, "--seed", help="Recorded in the result (the model makes no random choices)."),
    json_file: Path | None = typer.Option(None, "--json", help="Write the full result as JSON to this file."),
    trace_file: Path | None = typer.Option(None, "--trace",
                                           help="Write a Chrome/Perfetto trace to this file."),
    config: str | None = typer.Option(None, "--config", "-c", help="Rewrite the plan with a named "
                                      "configuration first (UA, UA+NAR, NUMA, NUMA+NAR, NAP, NAP+NAR, NAP*, "
                                      "NAP*+NAR)."),
    nar_granularity: str | None = typer.Option(None, "--nar-granularity", "-g",
                                               help="With --config: NAR granularity G or auto."),
    windowed: bool | None = typer.Option(None, "--windowed/--one-queue", help="One event queue per GPU, run "
                                         "in windows of the shortest cross-GPU latency (the same model, "
                                         "equal-time events of different GPUs in GPU order; not with "
                                         "--trace), or one queue for the pod. Default: windowed from 16 "
                                         "GPUs with packets under 32 KiB, where it is faster, unless "
                                         "--trace.", show_default=False),
    max_packet_bytes: str | None = typer.Option(None, "--max-packet-bytes", help="With --packet-bytes "
                                                "auto: the largest packet it may pick (a power-of-two "
                                                "multiple of the flit; default 64KiB). Packets of more "
                                                "than one line are coarse (approximate); a smaller cap "
                                                "is closer, and slower.",
                                                show_default=False),
    fast_forward: bool = typer.Option(False, "--fast-forward", help="Skip the middle of steady states "
                                      "and replay their ends (sampled simulation: -4.2% to +7.3% against "
                                      "the full replay where measured, docs/simulator.md section 7; "
                                      "not with --trace)."),
    line_setups: LineSetups | None = typer.Option(None, "--line-setups", help=LINE_SETUPS_HELP,
                                                  show_default=False),
    packet_credit_lines: int | None = typer.Option(None, "--packet-credit-lines", min=1, max=MAX_CREDIT_LINES,
                                                   help=PACKET_CREDIT_HELP, show_default=False),
    threads: int | None = typer.Option(None, "--threads", min=1, help="Threads a windowed replay runs its "
                                       "GPUs on (the result does not depend on it). Default: every core.",
                                       show_default=False),
    reduce_fusion: bool = typer.Option(True, "--reduce-fusion/--no-reduce-fusion", help=REDUCE_FUSION_HELP),
    executor_slices: bool = typer.Option(False, "--executor-slices", help=EXECUTOR_SLICES_HELP),
    protocol_model: ProtocolModel = typer.Option(ProtocolModel.PLAN, "--protocol-model",
                                                 help=PROTOCOL_MODEL_HELP),
    flow_control: bool = typer.Option(True, "--flow-control/--no-flow-control", help=FLOW_CONTROL_HELP),
    bounds_only: bool = typer.Option(False, "--bounds-only", help="Only the lower bound and the placement "
                                     "floor (what no placement or routing beats), without the replay: "
                                     "seconds where a large replay takes minutes."),
) -> None:
    """Replay a plan on a pod of multi-die GPUs and report the collective's time and bandwidth."""
    from nuna.plan.ir import Collective
    from nuna.plan.xml import load
    from nuna.sim.fastforward import FastForward
    from nuna.sim.replay import SimOptions, placement_bounds
    from nuna.sim.replay import simulate as run
    from nuna.sim.result import coarse_packet_note, protocol_note
    from nuna.sim.trace import chrome_trace

    size_bytes = _size(size)
    packets = parse_packet_bytes_option(packet_bytes)
    if max_packet_bytes is not None and packets != "auto":
        raise UsageError("--max-packet-bytes caps what --packet-bytes auto picks; give one or the other")
    if nar_granularity is not None and config is None:  # it would be ignored
        raise UsageError("--nar-granularity applies to a --config that routes with NAR")
    check_outputs(json_file, trace_file, inputs=(plan_file, topology))
    options = SimOptions(windowed=windowed, fast_forward=FastForward() if fast_forward else None,
                         threads=threads, reduce_fusion=reduce_fusion, executor_slices=executor_slices,
                         protocol_model=protocol_model.value, flow_control=flow_control)
    if line_setups is not None:
        options = dataclasses.replace(options, line_setups=line_setups.value)
    if packet_credit_lines is not None:
        options = dataclasses.replace(options, packet_credit_lines=packet_credit_lines)
    if max_packet_bytes is not None:
        options = dataclasses.replace(options, max_packet_bytes=_size(max_packet_bytes))
    spec = topology_with_settings(topology, settings)
    plan = load(plan_file)
    if config is not None:
        from nuna.passes import apply_config
        from nuna.passes.base import PassContext
        from nuna.passes.configs import parse_granularity

        with naming_the_plan(plan_file):
            ctx = PassContext(spec, size_bytes)
            # an "auto" granularity is the fastest in the replay this command then runs
            plan = apply_config(plan, config, ctx, parse_granularity(nar_granularity), seed=seed,
                                packet_bytes=packets, options=options)
    if bounds_only:
        if trace_file is not None:
            raise UsageError("--bounds-only replays nothing, so it has no --trace")
        with naming_the_plan(plan_file):
            lower, floor = placement_bounds(plan, spec, size_bytes, packet_bytes=packets,
                                            options=options)
        if json_file is not None:
            write_json(json_file, {"plan": plan.name, "topology": spec.name, "size_bytes": size_bytes,
                                   "lower_bound_ns": lower, "placement_floor_ns": floor})
        typer.echo(f"# {one_line(plan.name)}: {plan.collective.value}, {plan.ngpus} GPUs, {spec.name}, "
                   f"{format_size(size_bytes)}: lower bound {lower:.1f} ns, placement floor {floor:.1f} ns "
                   f"(no replay)")
        _warn(plan, plan_file, size_bytes, config)
        return
    with naming_the_plan(plan_file):
        res = run(plan, spec, size_bytes, packet_bytes=packets, seed=seed,
                  trace=trace_file is not None, options=options)
    # the files first: the summary goes to a pipe that may close early (| head), and a closed
    # pipe must not cost the user a replay's result
    if json_file is not None:
        write_json(json_file, res.to_json())
    if trace_file is not None:
        write_json(trace_file, chrome_trace(plan, res, spec))
    lat = res.remote_store_latency
    typer.echo(f"# {one_line(plan.name)}: {plan.collective.value}, {plan.ngpus} GPUs, {spec.name}, "
               f"packets of {res.packet_bytes} B")
    typer.echo(f"#{'size':>12} {'count':>12} {'type':>6} {'time':>10} {'algbw':>8} {'busbw':>8}")
    typer.echo(f"#{'(B)':>12} {'(elements)':>12} {'':>6} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}")
    # nccl-tests' count column is its paramcount: per rank, but for allreduce the whole buffer
    count = size_bytes // 4 if plan.collective is Collective.ALLREDUCE else size_bytes // 4 // plan.ngpus
    typer.echo(f" {size_bytes:>12} {count:>12} {'float':>6} {res.time_ns / 1000:>10.2f} "
               f"{res.algbw_gbps:>8.2f} {res.busbw_gbps:>8.2f}")
    busiest, where = _busiest_port(res)
    typer.echo(f"# {format_size(size_bytes)}: {res.time_ns:.1f} ns "
               f"(lower bound {res.lower_bound_ns:.1f} ns, placement floor {res.placement_floor_ns:.1f} ns); "
               f"remote stores: {lat.count} lines, latency mean {lat.mean_ns:.0f} p50 {lat.p50_ns:.0f} "
               f"p99 {lat.p99_ns:.0f} max {lat.max_ns:.0f} ns; "
               f"busiest I/O port {busiest * 100:.0f}% busy{where} over the run; "
               f"{res.die_crossing_bytes} B across dies; {res.events} events in {res.wall_s:.2f} s")
    parts = res.remote_store_zero_load_ns
    if parts and lat.count:
        # the sum as printed adds up: waiting is the rounded mean less the rounded total
        mean, total = round(lat.mean_ns), round(parts["total"])
        typer.echo(f"# remote store latency: mean {mean} ns = without waiting {total} (sender chip "
                   f"{parts['sender_chip']:.0f}, scale-up {parts['scale_up']:.0f}, receiver chip "
                   f"{parts['receiver_chip']:.0f}, memory write {parts['memory_write']:.0f}) + waiting "
                   f"{mean - total} (JSON remote_store_zero_load_ns, queueing_ns)")
    hot = res.longest_port_wait()
    if hot is not None:
        gpu, port, link, wait_ns = hot
        typer.echo(f"# longest wait at an I/O port: {wait_ns:.1f} ns per packet for {link} at GPU {gpu} "
                   f"port {port} (JSON io_ports: queueing_ns_mean)")
    if res.fast_forward:
        typer.echo(f"# fast-forward: {len(res.fast_forward)} steady state(s) skipped, "
                   f"{res.skipped_ns:.1f} ns of {res.time_ns:.1f} ns, about {res.events_skipped:.0f} events "
                   "not replayed")
    if res.one_queue_for_trace:
        typer.echo("# note: --trace replayed with one event queue, where this pod replays windowed "
                   "without it: the same model, other orders of equal-time events, so the --json "
                   "queueing and latency figures may differ slightly from a replay without --trace")
    for note in (res.size_fit.note(), coarse_packet_note(res.packet_bytes), protocol_note(plan, res)):
        if note is not None:
            typer.echo(f"# note: {note}")
    _warn(plan, plan_file, size_bytes, config)


def _warn(plan: Plan, path: Path, size_bytes: int, config: str | None) -> None:
    """After a replay (one that fails says why itself): :func:`_plan_warnings` on stderr. Not
    after ``--config``, which checks its input and refuses such plans."""
    if config is None:
        for warning in _plan_warnings(plan, path, size_bytes):
            typer.echo(f"nuna: warning: {warning}", err=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("noc")(noc)
    app.command("simulate")(simulate)
