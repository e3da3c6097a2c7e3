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

from nuna.plan.dag import FlatPlan, ReplayDag
from nuna.plan.slices import Slicing

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class SlicedNodes:
    """The replay's nodes after slicing. ``origin[q]`` is the plan step (node of the unsliced
    DAG, of ``steps``) that node ``q`` is part of, ``slice_of[q]`` its slice (of ``slices``)."""

    steps: int
    slices: int
    flat: FlatPlan
    dag: ReplayDag
    n_addr: I64
    n_bytes: I64
    n_peer: I64
    origin: I64
    slice_of: I64


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
    src = np.concatenate([prog, dsrc])
    dst = np.concatenate([prog + 1, ddst])
    key = np.unique(src * total + dst)
    src, dst = key // total, key % total
    indptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=total), out=indptr[1:])

    # data edges: call k of slice s of a send feeds call k of slice s of its receive
    def matched(m: npt.NDArray[np.int32]) -> I64:
        peer = m.astype(np.int64)[origin]
        has = peer >= 0
        safe = np.where(has, peer, 0)
        return np.where(has, first(safe, sl) + call, -1)

    tb_indptr = S * tb_base
    new_flat = replace(
        flat, tb_indptr=tb_indptr, node_tb=node_tb, node_pos=flat.node_pos[origin], index=flat.index[origin],
        code=flat.code[origin], count=this_count, src_buf=flat.src_buf[origin], src_off=flat.src_off[origin],
        dst_buf=flat.dst_buf[origin], dst_off=flat.dst_off[origin], dep_tb=flat.dep_tb[origin],
        dep_step=flat.dep_step[origin], has_dep=flat.has_dep[origin])
    new_dag = replace(
        dag, node_gpu=dag.node_gpu[origin], node_tb=dag.node_tb[origin], node_step=dag.node_step[origin],
        node_type=dag.node_type[origin], tb_indptr=tb_indptr.astype(np.int32),
        ctrl_indptr=indptr.astype(np.int32), ctrl_indices=dst.astype(np.int32),
        ctrl_indegree=np.bincount(dst, minlength=total).astype(np.int32),
        match_send=matched(dag.match_send).astype(np.int32),
        match_recv=matched(dag.match_recv).astype(np.int32))
    return SlicedNodes(nn, S, new_flat, new_dag, new_addr, new_bytes, n_peer[origin], origin, sl)
