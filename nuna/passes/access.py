"""Collective decomposition: which chunks each threadblock's own memory requests touch.

This is the first step of NAP (paper §4): the workload ``W = {(gpu, tb, C_tb)}`` of
Algorithm 1, with chunks named by the paper's tuple ``(chunk_id, buffer_type, gpu_id)``.

A threadblock *accesses* a chunk when the CU it runs on issues loads or stores to it, in the
load/store model the simulator replays (``nuna.sim.replay``: direct remote stores):

- local reads: the source of ``s``, ``cpy``, ``rrc``, ``rrs``, ``rrcs``; both operands of ``re``;
- local writes: the destination of ``cpy``, ``re``, ``rcs``, ``rrc``, ``rrcs``;
- remote writes: a send-type step stores into the peer, at the destination of the receive step
  it is FIFO-matched with when that is a plain ``r`` (the descriptive remote fields of the XML
  are never trusted, reference §5). A fused receive (``rcs``, ``rrc``, ``rrs``, ``rrcs``) takes
  its data in the receiving threadblock's receive buffer (``nuna.sim.layout``), which is not a
  plan chunk, so such a send has no remote chunk to place (and the fused receive's read of that
  buffer none either).

A plain ``r`` touches nothing: the sender's remote store already put the data in place, the
receiving threadblock only waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from nuna.plan.dag import build_dag
from nuna.plan.ir import Buffer, Gpu, Plan, Step, StepType, Threadblock


class ChunkKey(NamedTuple):
    """A chunk as the paper names it: ``(chunk_id, buffer_type, gpu_id)``."""

    chunk: int
    buffer: Buffer
    gpu: int


@dataclass(frozen=True, slots=True)
class TbAccess:
    """One element of the workload ``W``: threadblock ``tb`` of ``gpu`` and the chunks it
    accesses, in first-touch order (so later first-come-first-served choices are stable).
    Chunks whose ``gpu`` differs from the threadblock's are remote writes."""

    gpu: int
    tb: int
    chunks: tuple[ChunkKey, ...]

    @property
    def local(self) -> tuple[ChunkKey, ...]:
        return tuple(c for c in self.chunks if c.gpu == self.gpu)

    @property
    def remote(self) -> tuple[ChunkKey, ...]:
        return tuple(c for c in self.chunks if c.gpu != self.gpu)


_READS_SRC = frozenset({StepType.SEND, StepType.COPY, StepType.REDUCE, StepType.RECV_REDUCE_COPY,
                        StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND})
_TOUCHES_DST = frozenset({StepType.COPY, StepType.REDUCE, StepType.RECV_REDUCE_COPY,
                          StepType.RECV_REDUCE_COPY_SEND, StepType.RECV_COPY_SEND})
#: Receive types whose data the sender stores straight into the receive step's destination.
IN_PLACE_RECEIVES = frozenset({StepType.RECV})


def _span(sizes: dict[tuple[int, Buffer], int], gpu: int, buffer: Buffer | None, offset: int | None,
          count: int) -> list[ChunkKey]:
    """The chunks of an operand, clipped to the buffer: executors do not bounds-check every
    operand (reference §9) and compiler-made plans do read past a buffer's end; such bytes
    have no chunk to place."""
    if buffer is None or offset is None or offset < 0:
        return []
    end = min(offset + max(count, 0), sizes.get((gpu, buffer), 0))
    return [ChunkKey(k, buffer, gpu) for k in range(offset, end)]


def _buffer_sizes(plan: Plan) -> dict[tuple[int, Buffer], int]:
    return {(g.id, b): n for g in plan.gpus
            for b, n in ((Buffer.INPUT, g.input_chunks), (Buffer.OUTPUT, g.output_chunks),
                         (Buffer.SCRATCH, g.scratch_chunks))}


def _walk(plan: Plan) -> tuple[list[tuple[Gpu, Threadblock]], list[Step], list[int], list[int]]:
    """Threadblocks in DAG order, every step in node order, and for every node the matched
    receive node (``-1`` if none) and the node's GPU."""
    dag = build_dag(plan)
    # node n of the DAG is the n-th step in (gpu, tb id, position) order
    order = [(g, tb) for g in sorted(plan.gpus, key=lambda x: x.id)
             for tb in sorted(g.threadblocks, key=lambda t: t.id)]
    steps = [st for _, tb in order for st in tb.steps]
    return order, steps, dag.match_recv.tolist(), dag.node_gpu.tolist()


def decompose(plan: Plan) -> tuple[TbAccess, ...]:
    """The workload of ``plan``: one :class:`TbAccess` per threadblock, ordered by
    ``(gpu, tb id)``. Raises ``PlanError`` (from the DAG builder) on a plan whose send and
    receive steps cannot be matched."""
    return workload(plan)[0]


@dataclass(frozen=True, slots=True)
class RemoteStore:
    """``chunks`` consecutive chunks stored by threadblock ``tb`` of ``gpu`` into ``peer``: into
    ``target`` (the first chunk) when the receive lands data in place, else (``target`` is
    ``None``) into the connection's receive buffer on the peer."""

    gpu: int
    tb: int
    peer: int
    target: ChunkKey | None
    chunks: int


def remote_stores(plan: Plan) -> tuple[RemoteStore, ...]:
    """Every matched send-type step of ``plan`` as a :class:`RemoteStore`, in DAG node order."""
    return workload(plan)[1]


def workload(plan: Plan) -> tuple[tuple[TbAccess, ...], tuple[RemoteStore, ...]]:
    """:func:`decompose` and :func:`remote_stores` from one walk of the plan's DAG (the NAR
    heuristic of a NAP or NUMA configuration needs both; building the DAG twice was a few
    seconds at 64 GPUs with 16 threadblocks per peer), once per program (``Plan.derived``: a
    sweep worker's points of one plan share it; 1.5 s a point at that size)."""
    return plan.derived("nuna.passes.access.workload", lambda: _workload(plan))


def _workload(plan: Plan) -> tuple[tuple[TbAccess, ...], tuple[RemoteStore, ...]]:
    order, steps, match_recv, node_gpu = _walk(plan)
    sizes = _buffer_sizes(plan)
    tb_out: list[TbAccess] = []
    store_out: list[RemoteStore] = []
    node = 0
    for g, tb in order:
        seen: dict[ChunkKey, None] = {}  # an ordered set: first touch wins
        for st in tb.steps:
            if st.type in _READS_SRC:
                seen.update(dict.fromkeys(_span(sizes, g.id, st.src_buffer, st.src_offset, st.count)))
            if st.type in _TOUCHES_DST:
                seen.update(dict.fromkeys(_span(sizes, g.id, st.dst_buffer, st.dst_offset, st.count)))
            peer_node = match_recv[node]
            if st.type.sends and peer_node >= 0:
                rst = steps[peer_node]
                peer = node_gpu[peer_node]
                in_place = rst.type in IN_PLACE_RECEIVES
                if in_place:
                    seen.update(dict.fromkeys(_span(sizes, peer, rst.dst_buffer, rst.dst_offset, rst.count)))
                first = _span(sizes, peer, rst.dst_buffer, rst.dst_offset, 1)
                target = first[0] if first and in_place else None
                store_out.append(RemoteStore(g.id, tb.id, peer, target, max(st.count, 0)))
            node += 1
        tb_out.append(TbAccess(g.id, tb.id, tuple(seen)))
    return tuple(tb_out), tuple(store_out)
