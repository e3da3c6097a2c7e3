"""The pass framework: the context a pass runs in, the pass protocol and the pipeline runner.

A pass is a small frozen dataclass with a ``name`` class variable and one method,
``run(plan, ctx) -> Plan``. It takes a verified plan and returns a *new* plan that differs only
in its :class:`~nuna.plan.ir.Placement` annotations: it never changes what the plan computes.
:func:`run_pipeline` runs passes in order, verifies the plan before the first and after every
pass, and calls an optional observer after each one (the ``--print-between-passes`` hook).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, Protocol

from nuna.errors import PassError, UsageError
from nuna.plan.ir import ChunkPlacement, Placement, Plan, TbPlacement
from nuna.plan.verify import chunk_bytes_for, verify, verify_placement
from nuna.sim.layout import memory_fit_problem
from nuna.units import check_size_bytes

if TYPE_CHECKING:
    from nuna.topology.spec import TopologySpec


@dataclass(frozen=True, slots=True)
class PassContext:
    """What every pass may read: the topology the plan will run on and the collective size.

    ``size_bytes`` is the collective size as the simulator counts it (chunk bytes are
    ``size_bytes / nchunksperloop``); placement budgets depend on it, so a rewritten plan records
    it in ``Placement.size_bytes``.
    """

    topology: TopologySpec
    size_bytes: int

    def __post_init__(self) -> None:
        try:
            check_size_bytes(self.size_bytes)
        except UsageError as err:
            raise PassError(f"collective {err}") from None


class PlanPass(Protocol):
    """Takes a verified plan, returns a new plan with the same data flow and new placement."""

    name: ClassVar[str]

    def run(self, plan: Plan, ctx: PassContext) -> Plan: ...


#: Called after each pass with the pass and the plan it returned.
Observer = Callable[[PlanPass, Plan], None]


def verify_plan(plan: Plan) -> None:
    """Raise ``PlanError`` unless ``plan`` passes the plans layer's structural check."""
    verify(plan, strict=False).raise_on_error()


#: the most chunks (over every GPU's buffers) a pipeline places. A placement pass writes an
#: element per chunk and stack, about 51 bytes of XML: a 2-GPU plan of 2**20 chunks per GPU took
#: 63 s and 2.2 GB and wrote a 108 MB plan that nuna.plan.xml then refused (MAX_PLAN_BYTES,
#: 64 MiB), and 2**26 per GPU ran out of 8 GB. Below this count, chunks spread over several
#: stacks can still pass that limit: nuna.plan.xml.save then refuses to write the plan. Real
#: plans hold thousands of chunks (64-GPU alltoall, 16 per peer: 131,072)
MAX_PLACED_CHUNKS = 1 << 20


def check_input(plan: Plan, ctx: PassContext, *, verify_it: bool = True) -> None:
    """What a pipeline checks of its input before any pass sees it: a chunk size at
    ``ctx.size_bytes`` (``UsageError``), a plan that verifies (``PlanError``; skipped when not
    ``verify_it``) and buffers that fit the chip's memory at that size (``PassError``, in the
    simulator's words: before, NUMA+NAR placed an 8-GPU allgather of 1000 GiB in 14 s and 0.9 GB
    of memory, and 100000 GiB ran out of memory, where the replay refuses both at once), and at
    most :data:`MAX_PLACED_CHUNKS` chunks (``PassError``)."""
    chunks = plan.total_chunks
    if chunks > MAX_PLACED_CHUNKS:
        raise PassError(f"plan {plan.name}: its buffers hold {chunks:,} chunks in all; the passes place at "
                        f"most {MAX_PLACED_CHUNKS:,} (an XML element or more each, and a plan file holds at "
                        "most 64 MiB)")
    chunk_bytes_for(plan, ctx.size_bytes)
    if verify_it:
        verify_plan(plan)
    problem = memory_fit_problem(plan, ctx.topology, ctx.size_bytes)
    if problem is not None:
        raise PassError(problem)


def run_pipeline(plan: Plan, passes: Sequence[PlanPass], ctx: PassContext, *,
                 observe: Observer | None = None, check: bool = True) -> Plan:
    """Run ``passes`` on ``plan`` in order and return the final plan.

    With ``check`` (the default) the input is verified first and every intermediate plan is
    checked before the next pass sees it (its program is the input's, its placement
    verifies), so a pass that breaks a plan is named at once. A
    plan with no chunk size (``nchunksperloop`` < 1) is a ``UsageError``, as in the simulator.
    """
    check_input(plan, ctx, verify_it=check)
    for p in passes:
        out = p.run(plan, ctx)
        _check_output(plan, out, f"pass {p.name!r}", check)
        if observe is not None:
            observe(p, out)
        plan = out
    return plan


def check_placed(plan: Plan, placed: Plan, ctx: PassContext, label: str, *,
                 input_verified: bool = False) -> Plan:
    """``placed``, after the checks :func:`run_pipeline` makes of a pipeline's input ``plan``
    and output: both verify and they differ at most in their placement (``label`` names what
    placed it in the error). ``input_verified``: the caller has verified ``plan`` already
    (:func:`check_input`), before it placed it."""
    if not input_verified:
        check_input(plan, ctx)
    _check_output(plan, placed, label, True)
    return placed


def _check_output(before: Plan, after: Plan, label: str, verify_after: bool) -> None:
    """``after`` has ``before``'s program (else ``PassError``) and, with ``verify_after``, a
    placement that verifies. ``before`` verified, so only the placement needs checking: the
    whole check again cost 0.5-0.9 s a plan at 64 GPUs (docs/passes.md)."""
    if not _same_program(before, after):
        raise PassError(f"{label} changed the plan's program, not just its placement")
    if verify_after:
        verify_placement(after, strict=False).raise_on_error()


def _same_program(a: Plan, b: Plan) -> bool:
    """True when ``a`` and ``b`` differ at most in their placement (cheap: tuples compare by
    identity first, and passes reuse the input's ``gpus`` tuple)."""
    return dataclasses.replace(a, placement=b.placement) == b


class _Keep(Enum):
    """Marker for "keep the input plan's value" in :func:`replace_placement`."""

    KEEP = "keep"


KEEP = _Keep.KEEP


def replace_placement(plan: Plan, ctx: PassContext, *,
                      nar_granularity: int | _Keep | None = KEEP,
                      threadblocks: tuple[TbPlacement, ...] | _Keep = KEEP,
                      chunks: tuple[ChunkPlacement, ...] | _Keep = KEEP) -> Plan:
    """A copy of ``plan`` with the given placement fields replaced, recording ``ctx.size_bytes``.

    ``config`` is reset: it names the configuration that produced the *whole* placement and is
    set by :func:`nuna.passes.configs.apply_config` after its last pass.
    """
    old = plan.placement
    placement = Placement(
        nar_granularity=old.nar_granularity if isinstance(nar_granularity, _Keep) else nar_granularity,
        threadblocks=old.threadblocks if isinstance(threadblocks, _Keep) else threadblocks,
        chunks=old.chunks if isinstance(chunks, _Keep) else chunks,
        config=None,
        size_bytes=ctx.size_bytes,
    )
    return plan.with_placement(placement)
