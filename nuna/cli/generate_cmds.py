"""``nuna generate``: write a generated collective plan (direct all-pairs or ring) as MSCCL XML."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer

from nuna.cli.common import check_outputs
from nuna.plan.generate import generate
from nuna.plan.ir import Protocol
from nuna.plan.xml import save


class _Coll(StrEnum):
    ALLGATHER = "allgather"
    ALLREDUCE = "allreduce"
    REDUCESCATTER = "reducescatter"
    ALLTOALL = "alltoall"


class _Algo(StrEnum):
    DIRECT = "direct"
    RING = "ring"


class _Proto(StrEnum):
    SIMPLE = "Simple"
    LL = "LL"
    LL128 = "LL128"


def register(app: typer.Typer) -> None:
    """Add the ``generate`` command to the root app."""

    @app.command("generate")
    def generate_cmd(
        collective: _Coll = typer.Argument(..., help="Collective to generate."),
        gpus: int = typer.Option(..., "--gpus", "-n", help="Number of GPUs (>= 2)."),
        algo: _Algo = typer.Option(_Algo.DIRECT, "--algo", help="direct (all-pairs) or ring."),
        tbs_per_peer: int = typer.Option(
            1, "--tbs-per-peer", "-k", help="direct: threadblocks per peer, each on its own channel."),
        chunks_per_peer: int | None = typer.Option(
            None, "--chunks-per-peer",
            help="Chunks per rank slice; a multiple of --tbs-per-peer (direct) or --channels (ring). "
                 "Default: that number. More moves them a chunk per step: a direct threadblock "
                 "alternates sends and receives, a ring takes one chunk column after another."),
        channels: int | None = typer.Option(None, "--channels", help="ring: number of rings (default 1)."),
        protocol: _Proto = typer.Option(_Proto.SIMPLE, "--protocol", help="Protocol written in the header."),
        inplace: bool | None = typer.Option(
            None, "--inplace/--out-of-place",
            help="Buffer convention; default in-place, except out-of-place for alltoall."),
        output: Path = typer.Option(..., "--output", "-o", help="Plan file to write (MSCCL XML)."),
    ) -> None:
        """Generate a collective plan and write it as MSCCL XML."""
        check_outputs(output)
        plan = generate(collective.value, gpus, algo=algo.value, tbs_per_peer=tbs_per_peer,
                        chunks_per_peer=chunks_per_peer, channels=channels,
                        protocol=Protocol(protocol.value), inplace=inplace)
        save(plan, output)
        tbs = len(plan.gpus[0].threadblocks)
        steps = sum(len(tb.steps) for g in plan.gpus for tb in g.threadblocks)
        mode = "in-place" if plan.inplace else "out-of-place"
        typer.echo(f"wrote {output}: {plan.collective.value} {algo.value}, {plan.ngpus} GPUs, "
                   f"{tbs} threadblocks/GPU, {steps} steps, {plan.nchunksperloop} chunks/loop, "
                   f"{plan.protocol.value}, {mode}")
