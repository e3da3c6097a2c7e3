"""How far a sender may run ahead of its receiver on a connection: the executors' flow control.

Every connection ``(sender, receiver, channel)`` of the MSCCL executors is a ring of
``NCCL_STEPS = 8`` buffer steps (reference §6.5, NCCL's ``src/include/device.h``). A primitive
call of a Simple send takes ``MSCCL_CHUNKSTEPS = 4`` of them whatever its size (the Simple
primitives post every slice of a chunk, sent or not), an LL or LL128 call one. The sender waits
for the receiver to free a step (its ``head``, written into the sender's memory) before it
writes there, so the i-th send-type call on a connection cannot start before the receiver has
finished the call ``depth`` earlier: 2 for Simple, 8 for LL and LL128.

nuna applies the rule node by node (``nuna.sim.SimOptions.flow_control``): a node is a whole
step, which the executors may run as several calls (the rule then lets the sender run further
ahead than they would), or with ``executor_slices`` a part of a call (``nuna.plan.slices``: a
Simple call moves its data in up to two parts of two steps, each waiting for its own two
steps), where :func:`credit_sources_by_steps` counts the steps themselves. A plan whose
dependencies are acyclic can still deadlock through it: two threadblocks that each send three
times before they receive from each other wait for each other's credit for ever.
:func:`with_flow_control` adds the rule's edges so that :func:`nuna.plan.dag.find_cycle` finds
such deadlocks; :func:`with_credit_edges` adds those of any credit table (``nuna validate --size``
checks a plan's calls and parts at a size so, ``nuna.sim.flowcheck``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from nuna.plan.dag import ReplayDag
from nuna.plan.ir import Protocol

#: buffer steps per connection (NCCL's ``NCCL_STEPS``)
NCCL_STEPS = 8
#: buffer steps one primitive call takes (Simple: ``MSCCL_CHUNKSTEPS``; LL, LL128: one)
_STEPS_PER_CALL = {Protocol.SIMPLE: NCCL_STEPS // 2, Protocol.LL: 1, Protocol.LL128: 1}

I64 = npt.NDArray[np.int64]


def flow_control_depth(protocol: Protocol) -> int:
    """How many send-type calls a sender may have ahead of its receiver's finished ones."""
    return NCCL_STEPS // _STEPS_PER_CALL[protocol]


def credit_sources(dag: ReplayDag, depth: int) -> I64:
    """Per node, the receive-type node whose end frees the buffer step this send-type node
    writes: the receive of the send ``depth`` earlier on its connection; -1 for every other node
    (receive-only nodes and a connection's first ``depth`` sends).

    A threadblock has one send connection, so its send-type nodes in node order are the
    connection's sends in FIFO order, and ``match_recv`` names each one's receive."""
    if depth < 1:
        raise ValueError(f"flow-control depth must be at least 1, got {depth}")
    nn = dag.num_nodes
    out = np.full(nn, -1, dtype=np.int64)
    sends = np.flatnonzero(dag.match_recv >= 0)
    if sends.size <= depth:
        return out
    tb = np.searchsorted(dag.tb_indptr, sends, side="right") - 1
    later = np.arange(depth, sends.size)
    same = tb[later] == tb[later - depth]
    out[sends[later[same]]] = dag.match_recv[sends[later[same] - depth]]
    return out


def credit_sources_by_steps(dag: ReplayDag, node_steps: I64, first_steps: int) -> I64:
    """Per node, the receive-type node whose end lets this send-type node write, counting
    buffer steps: send node ``k`` of a connection takes ``node_steps[k]`` steps from the
    connection's step ``b_k`` (the sum over its earlier sends) and waits before its first part
    (``first_steps`` steps: the protocol's ``StepPerSlice``) until the receiver has freed step
    ``b_k + first_steps - NCCL_STEPS``, which the end of the first receive whose steps reach
    there does. A send whose source is its predecessor's gets -1: program order already holds it
    back. With uniform calls this is :func:`credit_sources` (``depth = NCCL_STEPS // steps per
    call``)."""
    nn = dag.num_nodes
    out = np.full(nn, -1, dtype=np.int64)
    sends = np.flatnonzero(dag.match_recv >= 0)
    if sends.size == 0:
        return out
    steps = np.asarray(node_steps, dtype=np.int64)[sends]
    tb = np.searchsorted(dag.tb_indptr, sends, side="right") - 1
    new_tb = np.ones(sends.size, dtype=bool)
    new_tb[1:] = tb[1:] != tb[:-1]
    ends = np.cumsum(steps)
    # each connection's steps count from its first send
    tb_start = np.maximum.accumulate(np.where(new_tb, np.arange(sends.size), 0))
    offset = (ends - steps)[tb_start]
    end = ends - offset
    begin = end - steps
    need = begin + first_steps - NCCL_STEPS
    # the first send of the connection whose end reaches ``need``: ends increase along a
    # connection, and a key per connection (threadblock) keeps them apart
    key = tb.astype(np.int64) * (int(end.max()) + NCCL_STEPS + 1)
    src = np.searchsorted(key + end, key + need, side="left")
    has = need > 0
    dup = np.zeros(sends.size, dtype=bool)
    dup[1:] = has[1:] & has[:-1] & ~new_tb[1:] & (src[1:] == src[:-1])
    keep = has & ~dup
    out[sends[keep]] = dag.match_recv[sends[src[keep]]]
    return out


def flow_rule_text(protocol: Protocol, by_steps: bool) -> str:
    """The rule a deadlock message cites: in sends (:func:`credit_sources`, a node a call) or,
    when nodes are the parts of calls (:func:`credit_sources_by_steps`), in buffer steps."""
    if not by_steps:
        return (f"a sender runs at most {flow_control_depth(protocol)} sends ahead of its receiver on a "
                "connection")
    per_call = _STEPS_PER_CALL[protocol]
    parts = " in parts of 2" if protocol is Protocol.SIMPLE else ""
    return (f"a sender writes at most {NCCL_STEPS} buffer steps ahead of those its receiver has freed on a "
            f"connection, a call taking {per_call} step{'s' * (per_call != 1)}{parts}")


def with_credit_edges(dag: ReplayDag, credit: I64) -> ReplayDag:
    """``dag`` with a control edge from each receive-type node to the send-type node its end
    gives a credit to (``credit``: per node its source or -1, as :func:`credit_sources` gives
    it): for cycle and level analyses. The replay keeps these edges apart (a credit crosses the
    network: it takes time and another GPU's queue)."""
    dst = np.flatnonzero(credit >= 0)
    if dst.size == 0:
        return dag
    nn = dag.num_nodes
    ptr = dag.ctrl_indptr.astype(np.int64)
    src_old = np.repeat(np.arange(nn, dtype=np.int64), ptr[1:] - ptr[:-1])
    src = np.concatenate([src_old, credit[dst]])
    tgt = np.concatenate([dag.ctrl_indices.astype(np.int64), dst])
    key = np.unique(src * nn + tgt)
    src, tgt = key // nn, key % nn
    indptr = np.zeros(nn + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=nn), out=indptr[1:])
    return dataclasses.replace(dag, ctrl_indptr=indptr.astype(np.int32), ctrl_indices=tgt.astype(np.int32),
                               ctrl_indegree=np.bincount(tgt, minlength=nn).astype(np.int32))


def with_flow_control(dag: ReplayDag, depth: int) -> ReplayDag:
    """``dag`` with the credit edges of the depth rule (:func:`with_credit_edges`)."""
    return with_credit_edges(dag, credit_sources(dag, depth))
