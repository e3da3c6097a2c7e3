"""CLI commands of the plan layer: ``nuna validate``, ``nuna info``, ``nuna dag``.

Thin: parse options, call :mod:`nuna.plan`, print. ``validate`` checks several files and keeps
going after a bad one; its exit status is 0 when every plan is valid and 1 otherwise. Each
error goes to stderr as one ``nuna: error: ...`` line; results, warnings and notes go to stdout.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from nuna.cli.common import check_outputs, echo_json, parse_size_option
from nuna.errors import NunaError
from nuna.fsutil import write_atomic
from nuna.plan.dag import build_dag, find_cycle, to_networkx
from nuna.plan.flow import flow_control_depth, with_flow_control
from nuna.plan.ir import Plan, Protocol
from nuna.plan.verify import Report, defaulted_warnings, gpu_count_mismatch, summarize, verify
from nuna.plan.wire import protocol_wire
from nuna.plan.xml import load_with_source
from nuna.text import one_line
from nuna.units import format_size

if TYPE_CHECKING:
    from nuna.topology.spec import TopologySpec


def _size(text: str | None) -> int | None:
    return None if text is None else parse_size_option(text)


def _err(msg: str) -> None:
    print(f"nuna: error: {one_line(msg)}", file=sys.stderr)


def _validate_one(path: Path, strict: bool, spec: TopologySpec | None,
                  size_bytes: int | None) -> tuple[Report, dict[str, Any] | None]:
    try:
        plan, source = load_with_source(path)
    except NunaError as err:
        return Report((str(err),), (), ()), None
    report = verify(plan, strict=strict, source=source)
    if spec is not None:
        from nuna.topology.fit import placement_problems

        # named by file, as verify's findings are: several plans may be checked at once
        problems = tuple(f"{path}: {p}" for p in placement_problems(plan, spec))
        report = dataclasses.replace(report, errors=report.errors + problems)
    if size_bytes is not None and report.ok:
        # only a plan with a replay DAG and no deadlock step by step has calls to check
        from nuna.sim.flowcheck import flow_deadlock

        found = flow_deadlock(plan, size_bytes)
        if found is not None:
            report = dataclasses.replace(report, errors=(*report.errors, f"{path}: {found}"))
    s = summarize(plan)
    return report, {"collective": s.collective, "ngpus": s.ngpus, "threadblocks": sum(s.threadblocks_per_gpu),
                    "steps": s.total_steps}


def validate(
    plans: list[Path] = typer.Argument(..., help="Plan files (MSCCL XML).", show_default=False),
    json_out: bool = typer.Option(False, "--json", help="Print a structured report of every plan."),
    strict: bool = typer.Option(False, "--strict", help="Treat every warning (races, executor limits, "
                                "defaulted attributes) as an error."),
    topology: str | None = typer.Option(None, "--topology", "-t", help="Also check the placement annotations "
                                        "against this chip (name or .toml path): CUs, HBM stacks, NAR "
                                        "granularity."),
    size: str | None = typer.Option(None, "--size", "-s", help="Also check that the executors' flow control "
                                    "cannot deadlock the plan at this collective size (100kB, 1GiB, ...), "
                                    "with its steps run as the executors' slices, calls and parts."),
) -> None:
    """Check plans: structure, FIFO matching, deadlock freedom and the collective's result."""
    size_bytes = _size(size)
    spec = None
    if topology is not None:
        from nuna.topology.spec import load_topology  # only when asked: validate stays light

        spec = load_topology(topology)
    results = [(path, *_validate_one(path, strict, spec, size_bytes)) for path in plans]
    all_ok = all(report.ok for _, report, _ in results)
    if json_out:
        echo_json({"ok": all_ok, "strict": strict, "topology": None if spec is None else spec.name,
                   **({} if size_bytes is None else {"size_bytes": size_bytes}),
                   "plans": [{"path": str(path), **report.to_dict(), "summary": info}
                             for path, report, info in results]})
    else:
        for path, report, info in results:
            counts = f"{len(report.warnings)} warning{'s' * (len(report.warnings) != 1)}"
            if report.ok and info is not None:
                typer.echo(f"{path}: ok: {info['collective']}, {info['ngpus']} GPUs, {info['threadblocks']} "
                           f"threadblocks, {info['steps']} steps ({counts})")
            else:
                typer.echo(f"{path}: invalid ({len(report.errors)} error{'s' * (len(report.errors) != 1)}, "
                           f"{counts})")
            for msg in report.errors:
                _err(msg)
            for msg in report.warnings:
                typer.echo(f"warning: {msg}")
            for msg in report.notes:
                typer.echo(f"note: {msg}")
    if not all_ok:
        raise typer.Exit(1)


def info(
    plan_path: Path = typer.Argument(..., metavar="PLAN", help="Plan file (MSCCL XML).", show_default=False),
    size: str | None = typer.Option(None, "--size", "-s", help="Collective size (100kB, 1MB, 1GiB, ...): "
                                    "also show the bytes each GPU sends and receives."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Summarize a plan: collective, GPUs, threadblocks, steps by type, chunks, traffic."""
    size_bytes = _size(size)
    plan, source = load_with_source(plan_path)
    s = summarize(plan, size_bytes)
    warnings = _structure_warnings(plan) + list(source.warnings) + list(defaulted_warnings(plan, source))
    if json_out:
        echo_json({"path": str(plan_path), **s.to_dict(), "warnings": warnings})
        return
    tbs = s.threadblocks_per_gpu
    tb_text = "none" if not tbs else (str(tbs[0]) if min(tbs) == max(tbs) else f"{min(tbs)}-{max(tbs)}")
    lines = [
        f"plan: {one_line(s.name) or '(unnamed)'} ({plan_path})",
        f"collective: {s.collective}  protocol: {s.protocol}  inplace: {int(s.inplace)}  "
        f"outofplace: {int(s.outofplace)}",
        *([_wire_text(plan.protocol)] if plan.protocol is not Protocol.SIMPLE else []),
        f"GPUs: {s.ngpus}  channels: {s.nchannels}  chunks per loop: {s.nchunksperloop}",
        f"threadblocks per GPU: {tb_text} (total {sum(tbs)})",
        f"steps: {s.total_steps} (" + ", ".join(f"{t} {n}" for t, n in s.steps_by_type) + ")",
        *([f"fused re passes: {s.fused_re[1]} ({s.fused_re[0]} re steps; the executors fuse them, and so "
           "does the replay)"] if s.fused_re[1] else []),
        *([_flow_text(*s.flow_control)] if s.flow_control is not None and s.flow_control[1] else []),
        "chunks per GPU (input/output/scratch): " + _chunk_text(s.chunks_per_gpu),
        f"placement: {s.placement}",
    ]
    for line in lines:
        typer.echo(line)
    if s.size_bytes is not None and s.sent_bytes is not None and s.received_bytes is not None:
        typer.echo(f"size: {format_size(s.size_bytes)} ({s.size_bytes} B), chunk: {s.chunk_bytes} B")
        typer.echo(f"{'gpu':>5} {'sent_bytes':>14} {'received_bytes':>14}")
        for g, sent, got in zip((g.id for g in plan.gpus), s.sent_bytes, s.received_bytes, strict=True):
            typer.echo(f"{g:>5} {sent:>14} {got:>14}")
        typer.echo(f"{'total':>5} {sum(s.sent_bytes):>14} {sum(s.received_bytes):>14}")
        if s.slicing is not None:
            sl = s.slicing
            typer.echo(f"executor slices: {sl.slices} of {sl.slice_bytes} B per chunk, calls of up to "
                       f"{sl.max_count} chunk{'s' * (sl.max_count != 1)}"
                       + (f", each in {sl.parts} parts (the first at least {sl.part_min_bytes} B)"
                          if sl.parts > 1 else "")
                       + " (nuna simulate --executor-slices replays them)")
        note = s.fit.note() if s.fit is not None else None
        if note is not None:
            typer.echo(f"note: {note}")
    for msg in warnings:
        typer.echo(f"warning: {msg}")


def _wire_text(protocol: Protocol) -> str:
    """How an LL or LL128 plan's data travels (``nuna.plan.wire``), as ``nuna simulate`` models it."""
    w = protocol_wire(protocol)
    return (f"on the wire: {w.num / w.den:.3g}x the payload (flags in every line), sends do not wait for "
            "their stores (nuna simulate models both; --protocol-model simple replays it as Simple)")


def _flow_text(depth: int, waiting: int, sends: int) -> str:
    """How many sends the executors' flow control holds back (``nuna.plan.flow``)."""
    return (f"flow control: {waiting} of {sends} sends wait for a credit from the receive {depth} sends "
            f"earlier on their connection (nuna simulate models it; --no-flow-control replays without)")


def _structure_warnings(plan: Plan) -> list[str]:
    """What makes the plan unsimulatable yet still describable by info and dag."""
    mismatch = gpu_count_mismatch(plan)
    return [] if mismatch is None else [f"{mismatch} (the plan cannot be simulated; see 'nuna validate')"]


def _chunk_text(chunks: tuple[tuple[int, int, int], ...]) -> str:
    distinct = sorted(set(chunks))
    if len(distinct) == 1:
        i, o, s = distinct[0]
        return f"{i}/{o}/{s}"
    return ", ".join(f"{i}/{o}/{s}" for i, o, s in distinct[:4]) + (" ..." if len(distinct) > 4 else "") + \
        " (varies)"


def dag(
    plan_path: Path = typer.Argument(..., metavar="PLAN", help="Plan file (MSCCL XML).", show_default=False),
    output: Path = typer.Option(..., "-o", "--output", help="GraphML file to write.", show_default=False),
) -> None:
    """Export the replay DAG (steps; program, dependency and data edges) as GraphML."""
    import networkx as nx

    check_outputs(output, inputs=(plan_path,))
    plan, _ = load_with_source(plan_path)
    replay = build_dag(plan)
    graph = to_networkx(replay)
    kinds: dict[str, int] = {"program": 0, "dependency": 0, "data": 0}
    for _, _, kind in graph.edges(data="kind"):
        kinds[kind] += 1
    write_atomic(output, "\n".join(nx.generate_graphml(graph)) + "\n")
    typer.echo(f"wrote {output}: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges "
               f"({kinds['program']} program, {kinds['dependency']} dependency, {kinds['data']} data)")
    for msg in _structure_warnings(plan):
        typer.echo(f"warning: {msg}")
    cycle = find_cycle(replay)
    if cycle is not None:
        typer.echo(f"warning: the graph has a cycle through {len(cycle)} steps (the plan deadlocks); "
                   "see 'nuna validate'")
        return
    cycle = find_cycle(with_flow_control(replay, flow_control_depth(plan.protocol)))
    if cycle is not None:
        typer.echo(f"warning: with the executors' flow control the plan deadlocks through {len(cycle)} "
                   "steps; see 'nuna validate'")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("validate")(validate)
    app.command("info")(info)
    app.command("dag")(dag)
