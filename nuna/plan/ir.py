"""The plan IR: immutable, value-comparable records of an MSCCL collective plan.

Mirrors the XML one to one (``../shared/reference/msccl-xml.md`` §3) so that
``load(dump(p)) == p``: enums carry the XML codes as values, ``-1`` sentinels become ``None``
at the parser boundary, sequences are tuples. Placement annotations written by the passes
(:class:`Placement`) travel with the plan and are emitted in their own XML namespace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar, cast

_T = TypeVar("_T")


class Buffer(str, Enum):
    """Buffer kinds; values are the XML ``srcbuf``/``dstbuf`` codes."""

    INPUT = "i"
    OUTPUT = "o"
    SCRATCH = "s"


class StepType(str, Enum):
    """Step types; values are the XML ``type`` codes (reference §5)."""

    SEND = "s"
    RECV = "r"
    RECV_COPY_SEND = "rcs"
    RECV_REDUCE_COPY = "rrc"
    RECV_REDUCE_SEND = "rrs"
    RECV_REDUCE_COPY_SEND = "rrcs"
    COPY = "cpy"
    REDUCE = "re"
    NOP = "nop"

    @property
    def sends(self) -> bool:
        """True for steps that are the send end of a connection (use the tb's ``send`` peer)."""
        return self in _SENDING

    @property
    def receives(self) -> bool:
        """True for steps that are the receive end of a connection (use the tb's ``recv`` peer)."""
        return self in _RECEIVING

    @property
    def reduces(self) -> bool:
        """True for steps that combine two operands with the reduction operator."""
        return self in _REDUCING


_SENDING = frozenset({StepType.SEND, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_SEND,
                      StepType.RECV_REDUCE_COPY_SEND})
_RECEIVING = frozenset({StepType.RECV, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_COPY,
                        StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND})
_REDUCING = frozenset({StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_SEND,
                       StepType.RECV_REDUCE_COPY_SEND, StepType.REDUCE})


class Collective(str, Enum):
    """Collectives; values are the canonical ``coll`` codes (``reduce_scatter`` is read as
    :attr:`REDUCESCATTER`, and :attr:`Algo.coll_spelling` keeps the file's spelling)."""

    ALLGATHER = "allgather"
    ALLREDUCE = "allreduce"
    REDUCESCATTER = "reducescatter"
    ALLTOALL = "alltoall"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    CUSTOM = "custom"


class Protocol(str, Enum):
    """NCCL protocols; values are the XML ``proto`` codes."""

    SIMPLE = "Simple"
    LL = "LL"
    LL128 = "LL128"


@dataclass(frozen=True, slots=True)
class Step:
    """One ``<step>``. ``index`` is the ``s`` attribute; ``None`` replaces ``-1`` offsets and
    dependencies. ``src_*``/``dst_*`` follow the XML, including its descriptive remote fields
    (reference §5: on ``s`` the dst names where data lands on the peer)."""

    index: int
    type: StepType
    src_buffer: Buffer | None
    src_offset: int | None
    dst_buffer: Buffer | None
    dst_offset: int | None
    count: int
    depend_tb: int | None = None
    depend_step: int | None = None
    has_dependent: bool = False


@dataclass(frozen=True, slots=True)
class Threadblock:
    """One ``<tb>``: a sequential program on one CU with at most one send and one receive peer."""

    id: int
    send_peer: int | None
    recv_peer: int | None
    channel: int
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Gpu:
    """One ``<gpu>`` (rank) with its buffer sizes in chunks and its threadblocks."""

    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    threadblocks: tuple[Threadblock, ...]


@dataclass(frozen=True, slots=True)
class TbPlacement:
    """Threadblock ``tb`` of ``gpu`` runs on compute unit ``cu`` (index into the chip's CUs)."""

    gpu: int
    tb: int
    cu: int


@dataclass(frozen=True, slots=True)
class ChunkPlacement:
    """Chunk ``chunk`` of ``buffer`` on ``gpu`` prefers HBM stack ``stack``.

    Pages are realised from these at simulation time (4 KiB pages; the first chunk that
    touches a page fixes its stack, in the order the placements are listed: first come,
    first served, paper §4.2.2), so the annotation is valid for any collective size. A chunk
    listed with several stacks has its pages dealt over them in turn, in the order its
    placements are listed (NAP spreads a chunk whose bandwidth demand is more than one stack's
    budget); its first placement is where it stands in the first-come-first-served order.
    """

    gpu: int
    buffer: Buffer
    chunk: int
    stack: int


@dataclass(frozen=True, slots=True)
class Placement:
    """Annotations the passes add; the empty default means baseline (UA) everywhere.

    ``nar_granularity`` ``None`` means baseline address hashing over all I/O ports; ``G`` means
    the plan's buffers live in the NAR segment of granularity ``G`` (paper §4.1). Chunks without
    a :class:`ChunkPlacement` and threadblocks without a :class:`TbPlacement` use the baseline
    policies. ``config`` and ``size_bytes`` record provenance (which configuration produced it,
    for which collective size).
    """

    nar_granularity: int | None = None
    threadblocks: tuple[TbPlacement, ...] = ()
    chunks: tuple[ChunkPlacement, ...] = ()
    config: str | None = None
    size_bytes: int | None = None

    @property
    def is_baseline(self) -> bool:
        return self.nar_granularity is None and not self.threadblocks and not self.chunks


@dataclass(frozen=True, slots=True)
class Plan:
    """An immutable collective plan (``<algo>``). Passes return new plans; nothing mutates one.

    ``outofplace``, ``min_bytes`` and ``max_bytes`` are always set: the reader fills the
    reference's defaults (``!inplace``, 0, 0 = unlimited) and records in ``defaulted`` which
    attributes were absent, so the writer reproduces the file's header faithfully.
    """

    name: str
    protocol: Protocol
    nchannels: int
    nchunksperloop: int
    ngpus: int
    collective: Collective
    inplace: bool
    outofplace: bool
    min_bytes: int
    max_bytes: int
    gpus: tuple[Gpu, ...]
    coll_spelling: str | None = None
    defaulted: frozenset[str] = frozenset()
    placement: Placement = field(default_factory=Placement)
    # values derived from the program, i.e. every field but the placement (:meth:`derived`: the
    # flat arrays and replay DAG, the semantic check, the passes' workload): a verified plan's
    # DAG was built four times per simulated point (the input's check, its memory check, the
    # passes' walk, the replay), 21 % of a 64-GPU point of 16 threadblocks per peer. Not part
    # of the value (equality, hash, repr, pickles)
    _program_memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __getstate__(self) -> list[Any]:
        return [getattr(self, f.name) for f in dataclasses.fields(self) if f.init]

    def __setstate__(self, state: list[Any]) -> None:
        for f, value in zip((f for f in dataclasses.fields(self) if f.init), state, strict=True):
            object.__setattr__(self, f.name, value)
        object.__setattr__(self, "_program_memo", {})

    def program_memo(self) -> dict[str, Any]:
        """The values derived from this plan's program (every field but the placement), by key
        (:meth:`derived` fills it); :meth:`with_placement` shares it."""
        return self._program_memo

    def derived(self, key: str, make: Callable[[], _T]) -> _T:
        """The value ``make()`` derives from this plan's program, made once: ``key`` names it in
        the program memo (a module's qualified name, as ``nuna.passes.access.workload``).
        ``make`` must read the program alone, never the placement, and return an immutable
        value (arrays read-only)."""
        memo = self._program_memo
        if key not in memo:
            memo[key] = make()
        return cast(_T, memo[key])

    def with_placement(self, placement: Placement) -> Plan:
        """This plan with ``placement`` in place of its own: the same program, so the values
        derived from the program alone are shared, not derived again."""
        out = dataclasses.replace(self, placement=placement)
        object.__setattr__(out, "_program_memo", self._program_memo)
        return out

    @property
    def coll_xml(self) -> str:
        """The ``coll`` attribute as written to XML (the file's own spelling when read)."""
        return self.coll_spelling if self.coll_spelling is not None else self.collective.value

    @property
    def total_chunks(self) -> int:
        """Chunks in every GPU's input, output and scratch buffers together."""
        return sum(g.input_chunks + g.output_chunks + g.scratch_chunks for g in self.gpus)
