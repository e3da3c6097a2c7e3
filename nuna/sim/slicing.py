"""A replay's nodes as the executors run them: one per step, slice and primitive call.

With ``SimOptions(executor_slices=True)`` the replay follows :mod:`nuna.plan.slices`: each
threadblock runs its whole step list once per slice, in order, and a step of more chunks than
one call may move is several calls. Each (step, slice, call) is a replay node with its own
bytes and addresses, so a step fences (its stores written before the next begins) once per
call, as a primitive does, and the next slice's steps wait for this slice's. Dependencies hold
within a slice (the executors' flags carry the iteration); the i-th call of a send on a
connection feeds the i-th of its receive, slice by slice.

The expansion works on the arrays :func:`nuna.sim.replay._prepare` builds (the flat plan, the
DAG, each node's addresses and bytes) and leaves them as they are when the executors would run
every step once on its whole chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from nuna.errors import SimulationError
from nuna.plan.dag import FlatPlan, ReplayDag
from nuna.plan.flow import credit_sources, credit_sources_by_steps, flow_control_depth
from nuna.plan.ir import Protocol
from nuna.plan.slices import Slicing, call_parts, first_part_bytes, part_steps

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class SlicedNodes:
    """The replay's nodes after slicing. ``origin[q]`` is the plan step (node of the unsliced
    DAG, of ``steps``) that node ``q`` is part of, ``slice_of[q]`` its slice (of ``slices``),
    ``call_of[q]`` its primitive call in that slice and ``part_of[q]`` its part of that call."""

    steps: int
    slices: int
    flat: FlatPlan
    dag: ReplayDag
    n_addr: I64
    n_bytes: I64
    n_peer: I64
    origin: I64
    slice_of: I64
    call_of: I64
    part_of: I64

    @property
    def in_parts(self) -> bool:
        """Whether some call moves in two parts (its credits then count buffer steps)."""
        return bool(self.part_of.any())


def slice_nodes(flat: FlatPlan, dag: ReplayDag, n_addr: I64, n_bytes: I64, n_peer: I64, chunk_bytes: int,
                slicing: Slicing) -> SlicedNodes | None:
    """The nodes of ``slicing`` (``None`` when every step is one node: one slice, and no step
    of more than ``slicing.max_count`` chunks)."""
    nn = flat.num_nodes
    S = slicing.slices
    mac = slicing.max_count
    count = np.maximum(flat.count.astype(np.int64), 1)
    calls = np.where(n_bytes > 0, -(-count // mac), 1)
    if S == 1 and (nn == 0 or int(calls.max()) == 1):
        return None
    # one slice's nodes: node n's calls are base positions bstart[n] .. bstart[n] + calls[n]
    bstart = np.zeros(nn + 1, dtype=np.int64)
    np.cumsum(calls, out=bstart[1:])
    tb_base = bstart[flat.tb_indptr]  # each threadblock's first base position, and the end
    tb_len = np.diff(tb_base)
    base_node = np.repeat(np.arange(nn, dtype=np.int64), calls)
    base_call = np.arange(int(bstart[-1]), dtype=np.int64) - np.repeat(bstart[:-1], calls)

    def first(node: I64, s: I64) -> I64:
        """The replay position of the first call of ``node`` in slice ``s``: threadblocks in
        order, each its slices in order, each slice its steps' calls in order."""
        t = flat.node_tb[node]
        return S * tb_base[t] + s * tb_len[t] + (bstart[node] - tb_base[t])

    nb = base_node.shape[0]
    total = S * nb
    slices = np.arange(S, dtype=np.int64)
    pos = (first(base_node[None, :], slices[:, None]) + base_call[None, :]).ravel()
    origin = np.empty(total, dtype=np.int64)
    sl = np.empty(total, dtype=np.int64)
    call = np.empty(total, dtype=np.int64)
    origin[pos] = np.tile(base_node, S)
    sl[pos] = np.repeat(slices, nb)
    call[pos] = np.tile(base_call, S)

    # bytes and addresses: slice s of each chunk, then whole chunks call by call
    cb = chunk_bytes
    piece = np.minimum(slicing.slice_bytes, cb - sl * slicing.slice_bytes)
    this_count = np.minimum(mac, count[origin] - call * mac)
    moving = n_bytes[origin] > 0
    new_bytes = np.where(moving, piece * this_count, 0).astype(np.int64)
    shift = sl * slicing.slice_bytes + call * mac * cb
    base_addr = n_addr[origin]
    new_addr = np.where(base_addr >= 0, base_addr + shift[:, None], -1).astype(np.int64)

    # control edges: program order, and each dependency slice by slice (last call -> first call)
    node_tb = flat.node_tb[origin]
    prog = np.flatnonzero(node_tb[1:] == node_tb[:-1])
    ptr = dag.ctrl_indptr.astype(np.int64)
    src0 = np.repeat(np.arange(nn, dtype=np.int64), np.diff(ptr))
    dst0 = dag.ctrl_indices.astype(np.int64)
    dep = ~((dst0 == src0 + 1) & (flat.node_tb[dst0] == flat.node_tb[src0]))
    ds, dd = src0[dep], dst0[dep]
    dsrc = (first(ds[None, :], slices[:, None]) + calls[ds][None, :] - 1).ravel()
    ddst = first(dd[None, :], slices[:, None]).ravel()
    indptr, dst = _csr(np.concatenate([prog, dsrc]), np.concatenate([prog + 1, ddst]), total)

    # data edges: call k of slice s of a send feeds call k of slice s of its receive
    def matched(m: npt.NDArray[np.int32]) -> I64:
        peer = m.astype(np.int64)[origin]
        has = peer >= 0
        safe = np.where(has, peer, 0)
        return np.where(has, first(safe, sl) + call, -1)

    tb_indptr = S * tb_base
    new_flat, new_dag = _take(flat, dag, origin, tb_indptr, this_count, indptr, dst,
                              matched(dag.match_send), matched(dag.match_recv))
    return SlicedNodes(nn, S, new_flat, new_dag, new_addr, new_bytes, n_peer[origin], origin, sl, call,
                       np.zeros(total, dtype=np.int64))


def _csr(src: I64, dst: I64, total: int) -> tuple[I64, I64]:
    """Edges ``src -> dst`` among ``total`` nodes, without repeats, as CSR (pointers, targets)."""
    key = np.unique(src * total + dst)
    indptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(np.bincount(key // total, minlength=total), out=indptr[1:])
    return indptr, key % total


def _take(flat: FlatPlan, dag: ReplayDag, rep: I64, tb_indptr: I64, count: I64, indptr: I64, dst: I64,
          match_send: I64, match_recv: I64) -> tuple[FlatPlan, ReplayDag]:
    """The flat plan and DAG of new nodes, node ``q`` a piece of old node ``rep[q]``, with the
    new threadblock bounds, chunk counts, control edges (CSR) and data edges."""
    new_flat = replace(
        flat, tb_indptr=tb_indptr, node_tb=flat.node_tb[rep], node_pos=flat.node_pos[rep],
        index=flat.index[rep], code=flat.code[rep], count=count, src_buf=flat.src_buf[rep],
        src_off=flat.src_off[rep], dst_buf=flat.dst_buf[rep], dst_off=flat.dst_off[rep],
        dep_tb=flat.dep_tb[rep], dep_step=flat.dep_step[rep], has_dep=flat.has_dep[rep])
    new_dag = replace(
        dag, node_gpu=dag.node_gpu[rep], node_tb=dag.node_tb[rep], node_step=dag.node_step[rep],
        node_type=dag.node_type[rep], tb_indptr=tb_indptr.astype(np.int32),
        ctrl_indptr=indptr.astype(np.int32), ctrl_indices=dst.astype(np.int32),
        ctrl_indegree=np.bincount(dst, minlength=rep.shape[0]).astype(np.int32),
        match_send=match_send.astype(np.int32), match_recv=match_recv.astype(np.int32))
    return new_flat, new_dag


def identity_nodes(flat: FlatPlan, dag: ReplayDag, n_addr: I64, n_bytes: I64, n_peer: I64) -> SlicedNodes:
    """The unsliced nodes as :class:`SlicedNodes` (one slice, a node per step)."""
    nn = flat.num_nodes
    zero = np.zeros(nn, dtype=np.int64)
    return SlicedNodes(nn, 1, flat, dag, n_addr, n_bytes, n_peer, np.arange(nn, dtype=np.int64), zero, zero,
                       zero)


def split_parts(nodes: SlicedNodes, protocol: Protocol, element_bytes: int) -> tuple[SlicedNodes, I64] | None:
    """Each call of a connection as the parts NCCL's primitives move it in
    (:func:`nuna.plan.slices.first_part_bytes`): a call of a Simple send or receive of more than
    its first part becomes two nodes, the second moving the rest, each fenced and posted on its
    own, and the second part of a send feeding the second of its receive (so a receive of a
    large call starts on its first part's data). Local steps stay whole: their parts post to no
    one and do not fence.

    Returns the nodes and, per node, the buffer steps it takes on its connection (for
    :func:`nuna.plan.flow.credit_sources_by_steps`), or ``None`` when no call has two parts."""
    dag, flat = nodes.dag, nodes.flat
    nn = flat.num_nodes
    steps = part_steps(protocol)
    parts = call_parts(protocol)
    # a connection's payload per call: its own for a send, its sender's for a receive (FIFO
    # pairs have the same count, so a forward's two roles agree)
    ms = dag.match_send.astype(np.int64)
    mr = dag.match_recv.astype(np.int64)
    conn = (ms >= 0) | (mr >= 0)
    payload = np.where(mr >= 0, nodes.n_bytes, np.where(ms >= 0, nodes.n_bytes[np.maximum(ms, 0)], 0))
    first = first_part_bytes(protocol, payload, element_bytes)
    two = conn & (payload > first)
    if not two.any():
        return None
    if np.any(two[mr[mr >= 0]] != two[mr >= 0]):
        raise SimulationError("internal error: a send and its receive split their calls differently")
    k = 1 + two.astype(np.int64)
    pos = np.zeros(nn + 1, dtype=np.int64)
    np.cumsum(k, out=pos[1:])
    total = int(pos[-1])
    rep = np.repeat(np.arange(nn, dtype=np.int64), k)
    part = np.arange(total, dtype=np.int64) - pos[rep]

    # bytes and addresses: the first part, then the rest
    own_first = np.minimum(nodes.n_bytes, first)
    rest = nodes.n_bytes - own_first
    new_bytes = np.where(two[rep], np.where(part == 0, own_first[rep], rest[rep]), nodes.n_bytes[rep])
    shift = np.where(part == 1, own_first[rep], 0)
    base_addr = nodes.n_addr[rep]
    new_addr = np.where(base_addr >= 0, base_addr + shift[:, None], -1).astype(np.int64)

    # control edges: the parts in order, and every edge from a node's last part to the next's first
    ptr = dag.ctrl_indptr.astype(np.int64)
    src0 = np.repeat(np.arange(nn, dtype=np.int64), np.diff(ptr))
    dst0 = dag.ctrl_indices.astype(np.int64)
    inner = np.flatnonzero(part == 1)
    indptr, dst = _csr(np.concatenate([pos[src0 + 1] - 1, inner - 1]), np.concatenate([pos[dst0], inner]),
                       total)

    def matched(m: I64) -> I64:
        peer = m[rep]
        return np.where(peer >= 0, pos[np.maximum(peer, 0)] + part, -1)

    tb_indptr = pos[flat.tb_indptr.astype(np.int64)]
    new_flat, new_dag = _take(flat, dag, rep, tb_indptr, flat.count[rep], indptr, dst, matched(ms),
                              matched(mr))
    out = SlicedNodes(nodes.steps, nodes.slices, new_flat, new_dag, new_addr, new_bytes.astype(np.int64),
                      nodes.n_peer[rep], nodes.origin[rep], nodes.slice_of[rep], nodes.call_of[rep], part)
    # a part of a split call takes its own steps, a call of one part those of its empty part too
    return out, np.where(two[rep], steps, steps * parts).astype(np.int64)


def executor_nodes(flat: FlatPlan, dag: ReplayDag, n_addr: I64, n_bytes: I64, n_peer: I64, chunk_bytes: int,
                   slicing: Slicing, protocol: Protocol,
                   element_bytes: int) -> tuple[SlicedNodes | None, I64]:
    """The nodes the executors run a plan's steps as (:func:`slice_nodes`, then
    :func:`split_parts`; ``None`` when those are the steps themselves) and, per node, the
    receive-type node whose end gives it its flow-control credit (-1 for none): by buffer steps
    when calls come in parts (:func:`nuna.plan.flow.credit_sources_by_steps`), else by calls."""
    sliced = slice_nodes(flat, dag, n_addr, n_bytes, n_peer, chunk_bytes, slicing)
    split = split_parts(sliced or identity_nodes(flat, dag, n_addr, n_bytes, n_peer), protocol, element_bytes)
    if split is not None:
        nodes, conn_steps = split
        return nodes, credit_sources_by_steps(nodes.dag, conn_steps, part_steps(protocol))
    out_dag = dag if sliced is None else sliced.dag
    return sliced, credit_sources(out_dag, flow_control_depth(protocol))


def piece_label(nodes: SlicedNodes, q: int) -> str:
    """Which piece of its plan step node ``q`` is, for messages: ``" (slice 2 of 2, call 1 of
    3, part 2 of 2)"``, naming only what a step has more than one of ("" for a whole step)."""
    same_step = (nodes.origin == nodes.origin[q]) & (nodes.slice_of == nodes.slice_of[q])
    same_call = same_step & (nodes.call_of == nodes.call_of[q])
    what = [("slice", int(nodes.slice_of[q]), nodes.slices),
            ("call", int(nodes.call_of[q]), int(nodes.call_of[same_step].max()) + 1),
            ("part", int(nodes.part_of[q]), int(same_call.sum()))]
    named = [f"{name} {k + 1} of {n}" for name, k, n in what if n > 1]
    return f" ({', '.join(named)})" if named else ""
