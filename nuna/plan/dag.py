"""The replay DAG of a plan, in compact array form.

Nodes are steps (nops included, as zero-cost ordering nodes). Control edges are program order
inside a threadblock and explicit ``depid/deps`` dependencies; data edges join the i-th
send-type step of a connection ``(sender, receiver, channel)`` to the i-th receive-type step
(FIFO matching, reference §6.5). Arrays, not Python objects, so that a 64-GPU plan with 1,008
threadblocks per GPU stays small and the simulator can hand them to its JIT-compiled loop.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import TypeVar

import networkx as nx
import numpy as np
import numpy.typing as npt

from nuna.errors import PlanError
from nuna.plan.ir import Buffer, Plan, Step, StepType

#: Order of step types in :attr:`ReplayDag.node_type` codes.
STEP_TYPES: tuple[StepType, ...] = tuple(StepType)
STEP_CODE: dict[StepType, int] = {t: i for i, t in enumerate(STEP_TYPES)}

I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]


@dataclass(frozen=True, eq=False)
class ReplayDag:
    """Array-form DAG. Node ``n`` is step ``node_step[n]`` (position in its threadblock's step
    tuple) of threadblock ``node_tb[n]`` on GPU ``node_gpu[n]``; nodes of one threadblock are
    consecutive and in program order, and threadblocks are ordered by ``(gpu, tb)``.

    ``tb_indptr`` (length ``#threadblocks + 1``) delimits each threadblock's nodes and
    ``tb_gpu``/``tb_id`` name it. ``ctrl_indptr``/``ctrl_indices`` are the CSR successor lists
    of control edges (program order + dependencies); ``ctrl_indegree`` counts control
    predecessors. ``match_recv[n]`` is, for a send-type node, the receive-type node on the peer
    that its data goes to; ``match_send[n]`` is, for a receive-type node, the send-type node its
    data comes from; ``-1`` otherwise. A fused ``rcs``/``rrs``/``rrcs`` node has both.
    """

    ngpus: int
    node_gpu: I32
    node_tb: I32
    node_step: I32
    node_type: I8
    tb_indptr: I32
    tb_gpu: I32
    tb_id: I32
    ctrl_indptr: I32
    ctrl_indices: I32
    ctrl_indegree: I32
    match_send: I32
    match_recv: I32

    @property
    def num_nodes(self) -> int:
        return int(self.node_gpu.shape[0])

    @property
    def num_threadblocks(self) -> int:
        return int(self.tb_gpu.shape[0])


#: ``None`` in the flat step arrays (IR values are small ints; this one cannot occur).
NONE = np.iinfo(np.int64).min
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

_SENDS = np.array([t.sends for t in STEP_TYPES], dtype=np.bool_)
_RECEIVES = np.array([t.receives for t in STEP_TYPES], dtype=np.bool_)
_BUF_CODE = {None: -1, Buffer.INPUT: 0, Buffer.OUTPUT: 1, Buffer.SCRATCH: 2}


@dataclass(frozen=True, slots=True, eq=False)
class FlatPlan:
    """A plan's threadblocks and steps as arrays, in replay-DAG order (threadblocks sorted by
    ``(gpu id, tb id)``, steps in program order). Shared by :func:`build_dag` and the verifier so
    that both check 100k-step plans with array operations instead of Python loops.

    ``tb_gpu_pos``/``tb_pos`` give each threadblock's position in ``Plan.gpus`` and in its
    ``Gpu.threadblocks`` (for messages and source lines); absent values are :data:`NONE`.
    Buffer codes: -1 none, 0 input, 1 output, 2 scratch.
    """

    tb_gpu_pos: I64
    tb_pos: I64
    tb_gpu: I64
    tb_id: I64
    tb_send: I64
    tb_recv: I64
    tb_chan: I64
    tb_indptr: I64
    node_tb: I64
    node_pos: I64
    index: I64
    code: I64
    count: I64
    src_buf: I64
    src_off: I64
    dst_buf: I64
    dst_off: I64
    dep_tb: I64
    dep_step: I64
    has_dep: BOOL

    @property
    def num_nodes(self) -> int:
        return int(self.node_tb.shape[0])

    def step_pos(self, node: int) -> tuple[int, int, int]:
        """``(gpu position, tb position, step position)`` of ``node`` in the plan's tuples."""
        t = int(self.node_tb[node])
        return int(self.tb_gpu_pos[t]), int(self.tb_pos[t]), int(self.node_pos[node])

    def step_name(self, node: int) -> str:
        """``node`` as messages name a step: ``"gpu 1 tb 0 step 3 (s)"`` (ids and index as in the XML)."""
        t = int(self.node_tb[node])
        return (f"gpu {int(self.tb_gpu[t])} tb {int(self.tb_id[t])} step {int(self.index[node])} "
                f"({STEP_TYPES[int(self.code[node])].value})")


@dataclass(frozen=True, slots=True)
class DagIssue:
    """A reason the plan has no well-defined replay DAG, located by positions in the plan's
    tuples (``None`` where the issue is not about one GPU/threadblock/step)."""

    message: str
    gpu_pos: int | None = None
    tb_pos: int | None = None
    step_pos: int | None = None


def _table(rows: list[tuple[int, ...]], ncols: int) -> npt.NDArray[np.int64]:
    try:
        return np.array(rows, dtype=np.int64).reshape(len(rows), ncols)
    except OverflowError:
        raise PlanError("an integer in the plan is too large (more than 64 bits)") from None


_T = TypeVar("_T")
#: their keys in a plan's program memo (``Plan.derived``)
_FLAT, _ANALYSIS = "nuna.plan.dag.flatten", "nuna.plan.dag.analyze"


def read_only_arrays(value: _T) -> _T:
    """``value`` (a dataclass of arrays) with its arrays made read-only: a value kept in a
    plan's program memo (``Plan.derived``) is handed to every caller."""
    for f in dataclasses.fields(value):  # type: ignore[arg-type]
        arr = getattr(value, f.name)
        if isinstance(arr, np.ndarray):
            arr.flags.writeable = False
    return value


def flatten(plan: Plan) -> FlatPlan:
    """The arrays of :class:`FlatPlan` for ``plan`` (read-only: made once per program, see
    ``Plan.derived``); no validation beyond integer size."""
    return plan.derived(_FLAT, lambda: read_only_arrays(_flatten(plan)))


def _flatten(plan: Plan) -> FlatPlan:
    gpu_order = sorted(range(len(plan.gpus)), key=lambda i: plan.gpus[i].id)
    tb_refs: list[tuple[int, int]] = []
    for gi in gpu_order:
        tbs = plan.gpus[gi].threadblocks
        tb_refs.extend((gi, ti) for ti in sorted(range(len(tbs)), key=lambda j: tbs[j].id))
    tb_rows: list[tuple[int, ...]] = []
    steps: list[Step] = []
    for gi, ti in tb_refs:
        g = plan.gpus[gi]
        tb = g.threadblocks[ti]
        tb_rows.append((gi, ti, g.id, tb.id, NONE if tb.send_peer is None else tb.send_peer,
                        NONE if tb.recv_peer is None else tb.recv_peer, tb.channel, len(tb.steps)))
        steps.extend(tb.steps)
    tbt = _table(tb_rows, 8)
    sizes = tbt[:, 7]
    ntb = len(tb_rows)
    indptr = np.zeros(ntb + 1, dtype=np.int64)
    np.cumsum(sizes, out=indptr[1:])
    nnodes = int(indptr[-1])
    # one row per distinct step object: readers and generators share identical steps, so most
    # rows are dictionary hits rather than ten attribute reads
    buf = _BUF_CODE
    code_of = STEP_CODE
    row_of: dict[int, tuple[int, ...]] = {}

    def row(st: Step) -> tuple[int, ...]:
        r = (st.index, code_of[st.type], st.count, buf[st.src_buffer],
             NONE if st.src_offset is None else st.src_offset, buf[st.dst_buffer],
             NONE if st.dst_offset is None else st.dst_offset,
             NONE if st.depend_tb is None else st.depend_tb,
             NONE if st.depend_step is None else st.depend_step, int(st.has_dependent))
        row_of[id(st)] = r
        return r

    get = row_of.get
    st_t = _table([get(id(st)) or row(st) for st in steps], 10)
    return FlatPlan(
        tb_gpu_pos=tbt[:, 0].copy(), tb_pos=tbt[:, 1].copy(), tb_gpu=tbt[:, 2].copy(), tb_id=tbt[:, 3].copy(),
        tb_send=tbt[:, 4].copy(), tb_recv=tbt[:, 5].copy(), tb_chan=tbt[:, 6].copy(),
        tb_indptr=indptr,
        node_tb=np.repeat(np.arange(ntb, dtype=np.int64), sizes),
        node_pos=np.arange(nnodes, dtype=np.int64) - np.repeat(indptr[:-1], sizes),
        index=st_t[:, 0].copy(), code=st_t[:, 1].copy(), count=st_t[:, 2].copy(),
        src_buf=st_t[:, 3].copy(), src_off=st_t[:, 4].copy(), dst_buf=st_t[:, 5].copy(),
        dst_off=st_t[:, 6].copy(), dep_tb=st_t[:, 7].copy(), dep_step=st_t[:, 8].copy(),
        has_dep=st_t[:, 9].astype(np.bool_),
    )


def _groups(*keys: I64) -> tuple[I64, I64, I64]:
    """Stable sort by the key columns: (order, group start offsets into order, group sizes)."""
    n = keys[0].shape[0]
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    order = np.lexsort(keys[::-1])  # lexsort's last key is the primary one; stable
    change = np.zeros(n, dtype=np.bool_)
    change[0] = True
    for k in keys:
        ks = k[order]
        change[1:] |= ks[1:] != ks[:-1]
    starts = np.flatnonzero(change)
    return order, starts, np.diff(np.append(starts, n))


class _Issues:
    def __init__(self, flat: FlatPlan, limit: int) -> None:
        self.flat = flat
        self.items: list[DagIssue] = []
        self.limit = limit

    @property
    def full(self) -> bool:
        return len(self.items) >= self.limit

    def at_tb(self, t: int, msg: str) -> None:
        if not self.full:
            self.items.append(DagIssue(msg, int(self.flat.tb_gpu_pos[t]), int(self.flat.tb_pos[t])))

    def at_node(self, n: int, msg: str) -> None:
        if not self.full:
            self.items.append(DagIssue(msg, *self.flat.step_pos(n)))


@dataclass(frozen=True, slots=True, eq=False)
class Analysis:
    """Result of :func:`analyze`: the DAG (``None`` exactly when there are issues), the issues,
    and the nodes other steps wait on through ``depid/deps`` (sorted, unique)."""

    dag: ReplayDag | None
    issues: tuple[DagIssue, ...]
    waited_nodes: I64


def analyze(plan: Plan, limit: int = 50) -> Analysis:
    """Build the replay DAG, or report (up to ``limit``) reasons why it is not well defined:
    duplicate GPU or threadblock ids, send-type steps without a send peer (receive-type
    without a receive peer), two threadblocks on one connection, dependencies naming no
    threadblock or step (or an ambiguous one), connections whose send-type and receive-type
    step counts differ, FIFO-matched pairs with different ``cnt``. Cycles are not issues here
    (:func:`find_cycle` finds them). The DAG is ``None`` exactly when there are issues.
    A DAG is built once per program (its arrays read-only, see ``Plan.derived``).
    """
    memo = plan.program_memo()
    done: Analysis | None = memo.get(_ANALYSIS)
    if done is not None:
        return done
    result = _analyze(plan, flatten(plan), limit)
    if result.dag is not None:  # issues depend on the limit; a DAG does not
        memo[_ANALYSIS] = result
    return result


def _analyze(plan: Plan, f: FlatPlan, limit: int) -> Analysis:
    issues = _Issues(f, limit)
    nnodes = f.num_nodes

    gpu_ids = sorted(g.id for g in plan.gpus)
    for a, b in itertools.pairwise(gpu_ids):
        if a == b and not issues.full:
            gi = next(i for i, g in enumerate(plan.gpus) if g.id == a)
            issues.items.append(DagIssue(f"gpu {a} is declared twice", gi))
    dup_tb = np.flatnonzero((f.tb_gpu[1:] == f.tb_gpu[:-1]) & (f.tb_id[1:] == f.tb_id[:-1])) + 1
    for t in dup_tb.tolist():
        issues.at_tb(t, f"threadblock {int(f.tb_id[t])} is declared twice on gpu {int(f.tb_gpu[t])}")

    sends = _SENDS[f.code]
    receives = _RECEIVES[f.code]
    for n in np.flatnonzero(sends & (f.tb_send[f.node_tb] == NONE)).tolist():
        issues.at_node(n, f"'{STEP_TYPES[int(f.code[n])].value}' sends but the threadblock has no send peer "
                          "(send=-1)")
    for n in np.flatnonzero(receives & (f.tb_recv[f.node_tb] == NONE)).tolist():
        issues.at_node(n, f"'{STEP_TYPES[int(f.code[n])].value}' receives but the threadblock has no receive "
                          "peer (recv=-1)")

    # one threadblock per connection (peer, channel, direction) on each GPU
    for role, peer_col in (("send to", f.tb_send), ("receive from", f.tb_recv)):
        has = np.flatnonzero(peer_col != NONE)
        order, starts, counts = _groups(f.tb_gpu[has], peer_col[has], f.tb_chan[has])
        for s, c in zip(starts[counts > 1].tolist(), counts[counts > 1].tolist(), strict=True):
            t0, t1 = int(has[order[s]]), int(has[order[s + 1]])
            issues.at_tb(t1, f"threadblocks {int(f.tb_id[t0])} and {int(f.tb_id[t1])}"
                             f"{' (and more)' if c > 2 else ''} both {role} gpu {int(peer_col[t0])} on "
                             f"channel {int(f.tb_chan[t0])}: they would share one FIFO connection")

    # dependencies: (gpu, depid) -> threadblock, deps -> step by its s attribute
    dep_nodes = np.flatnonzero((f.dep_tb != NONE) | (f.dep_step != NONE))
    dep_src: list[int] = []
    dep_dst: list[int] = []
    if dep_nodes.size:
        tb_of = {(g, t): i for i, (g, t) in enumerate(zip(f.tb_gpu.tolist(), f.tb_id.tolist(), strict=True))}
        irregular = set(np.unique(f.node_tb[f.index != f.node_pos]).tolist())
        positions: dict[int, dict[int, int]] = {}
        node_gpu = f.tb_gpu[f.node_tb[dep_nodes]].tolist()
        for n, g, dtb, dstep in zip(dep_nodes.tolist(), node_gpu, f.dep_tb[dep_nodes].tolist(),
                                    f.dep_step[dep_nodes].tolist(), strict=True):
            if dtb == NONE or dstep == NONE:
                shown = (-1 if dtb == NONE else dtb, -1 if dstep == NONE else dstep)
                issues.at_node(n, f"depid={shown[0]} deps={shown[1]}: both must be set or both -1")
                continue
            target = tb_of.get((g, dtb))
            if target is None:
                issues.at_node(n, f"depid {dtb} names no threadblock on gpu {g}")
                continue
            first, size = int(f.tb_indptr[target]), int(f.tb_indptr[target + 1] - f.tb_indptr[target])
            hit: int | None
            if target in irregular:
                pos_of = positions.get(target)
                if pos_of is None:
                    pos_of = {}
                    for p, s in enumerate(f.index[first:first + size].tolist()):
                        pos_of[s] = -1 if s in pos_of else p
                    positions[target] = pos_of
                hit = pos_of.get(dstep)
            else:
                hit = dstep if 0 <= dstep < size else None
            if hit is None:
                issues.at_node(n, f"deps {dstep} names no step of gpu {g} tb {dtb} (it has {size} steps)")
            elif hit < 0:
                issues.at_node(n, f"deps {dstep} is ambiguous: gpu {g} tb {dtb} has several steps s={dstep}")
            else:
                dep_src.append(first + hit)
                dep_dst.append(n)

    # FIFO matching per connection (sender, receiver, channel)
    match_send = np.full(nnodes, -1, dtype=np.int32)
    match_recv = np.full(nnodes, -1, dtype=np.int32)
    if not issues.items:
        s_nodes = np.flatnonzero(sends)
        r_nodes = np.flatnonzero(receives)
        s_key = (f.tb_gpu[f.node_tb[s_nodes]], f.tb_send[f.node_tb[s_nodes]], f.tb_chan[f.node_tb[s_nodes]])
        r_key = (f.tb_recv[f.node_tb[r_nodes]], f.tb_gpu[f.node_tb[r_nodes]], f.tb_chan[f.node_tb[r_nodes]])
        s_order, s_starts, s_counts = _groups(*s_key)
        r_order, r_starts, r_counts = _groups(*r_key)
        s_sorted, r_sorted = s_nodes[s_order], r_nodes[r_order]
        same = (s_starts.shape == r_starts.shape and np.array_equal(s_counts, r_counts)
                and all(np.array_equal(sk[s_order][s_starts], rk[r_order][r_starts])
                        for sk, rk in zip(s_key, r_key, strict=True)))
        if same:
            match_recv[s_sorted] = r_sorted
            match_send[r_sorted] = s_sorted
            bad = np.flatnonzero(f.count[s_sorted] != f.count[r_sorted])
            for k in bad.tolist():
                sn, rn = int(s_sorted[k]), int(r_sorted[k])
                rt = int(f.node_tb[rn])
                issues.at_node(sn, f"cnt={int(f.count[sn])} but the matching receive (gpu "
                                   f"{int(f.tb_gpu[rt])} tb {int(f.tb_id[rt])} step {int(f.index[rn])}) has "
                                   f"cnt={int(f.count[rn])}")
        else:
            _count_issues(f, issues, s_key, s_sorted, s_order, s_starts, s_counts,
                          r_key, r_sorted, r_order, r_starts, r_counts)
    waited = np.unique(np.asarray(dep_src, dtype=np.int64))
    if issues.items:
        return Analysis(None, tuple(issues.items), waited)

    # control edges: program order (consecutive nodes of one threadblock) + dependencies
    prog = np.flatnonzero(f.node_tb[1:] == f.node_tb[:-1]) if nnodes > 1 else np.zeros(0, np.int64)
    src = np.concatenate([prog, np.asarray(dep_src, dtype=np.int64)])
    dst = np.concatenate([prog + 1, np.asarray(dep_dst, dtype=np.int64)])
    width = max(nnodes, 1)
    edge_key = np.unique(src * width + dst)  # sorted by (src, dst), duplicates merged
    src = edge_key // width
    dst = edge_key % width
    ctrl_indptr = np.zeros(nnodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=nnodes), out=ctrl_indptr[1:])
    dag = ReplayDag(
        ngpus=plan.ngpus,
        node_gpu=f.tb_gpu[f.node_tb].astype(np.int32),
        node_tb=f.tb_id[f.node_tb].astype(np.int32),
        node_step=f.node_pos.astype(np.int32),
        node_type=f.code.astype(np.int8),
        tb_indptr=f.tb_indptr.astype(np.int32),
        tb_gpu=f.tb_gpu.astype(np.int32),
        tb_id=f.tb_id.astype(np.int32),
        ctrl_indptr=ctrl_indptr.astype(np.int32),
        ctrl_indices=dst.astype(np.int32),
        ctrl_indegree=np.bincount(dst, minlength=nnodes).astype(np.int32),
        match_send=match_send,
        match_recv=match_recv,
    )
    waited.flags.writeable = False
    return Analysis(read_only_arrays(dag), (), waited)


def _count_issues(f: FlatPlan, issues: _Issues, s_key: tuple[I64, ...], s_sorted: I64, s_order: I64,
                  s_starts: I64, s_counts: I64, r_key: tuple[I64, ...], r_sorted: I64, r_order: I64,
                  r_starts: I64, r_counts: I64) -> None:
    """Name every connection whose two sides have different numbers of steps."""
    def table(key: tuple[I64, ...], order: I64, starts: I64, counts: I64,
              nodes: I64) -> dict[tuple[int, int, int], tuple[int, int]]:
        cols = [k[order][starts].tolist() for k in key]
        return {(a, b, c): (n, int(nodes[s])) for a, b, c, n, s in
                zip(*cols, counts.tolist(), starts.tolist(), strict=True)}

    s_tab = table(s_key, s_order, s_starts, s_counts, s_sorted)
    r_tab = table(r_key, r_order, r_starts, r_counts, r_sorted)
    for key in sorted(s_tab.keys() | r_tab.keys()):
        a, b, c = key
        ns, s_first = s_tab.get(key, (0, -1))
        nr, r_first = r_tab.get(key, (0, -1))
        if ns == nr:
            continue
        if nr == 0:
            issues.at_node(s_first, f"unmatched send: gpu {b} has no receive-type step from gpu {a} "
                                    f"on channel {c}")
        elif ns == 0:
            issues.at_node(r_first, f"unmatched receive: gpu {a} has no send-type step to gpu {b} "
                                    f"on channel {c}")
        else:
            rt = int(f.node_tb[r_first])
            issues.at_node(s_first, f"connection gpu {a} -> gpu {b} channel {c}: {ns} send-type "
                                    f"step{'s' * (ns != 1)} but gpu {b} tb {int(f.tb_id[rt])} has {nr} "
                                    f"receive-type step{'s' * (nr != 1)}")


def format_issue(plan: Plan, issue: DagIssue) -> str:
    """``gpu G tb T step S: message`` (as much of the location as the issue has)."""
    parts = []
    if issue.gpu_pos is not None:
        g = plan.gpus[issue.gpu_pos]
        parts.append(f"gpu {g.id}")
        if issue.tb_pos is not None:
            tb = g.threadblocks[issue.tb_pos]
            parts.append(f"tb {tb.id}")
            if issue.step_pos is not None:
                parts.append(f"step {tb.steps[issue.step_pos].index}")
    return f"{' '.join(parts)}: {issue.message}" if parts else issue.message


def build_dag(plan: Plan) -> ReplayDag:
    """Build the replay DAG of ``plan`` (see :class:`ReplayDag`), once per program (its arrays
    read-only, see ``Plan.derived``).

    Dependencies name their target step by its ``s`` attribute, as the XML does. Raises
    ``PlanError`` (the first problem :func:`analyze` finds) when the plan has no well-defined
    DAG. Cycles are *not* rejected here: :func:`find_cycle` reports them, so that the verifier
    can name the steps on one.
    """
    result = analyze(plan, limit=1)
    if result.dag is None:
        raise PlanError(format_issue(plan, result.issues[0]))
    return result.dag


def _ctrl_sources(dag: ReplayDag) -> npt.NDArray[np.int64]:
    """Source node of every control edge, aligned with ``ctrl_indices``."""
    indptr = dag.ctrl_indptr.astype(np.int64)
    counts = indptr[1:] - indptr[:-1]
    return np.repeat(np.arange(dag.num_nodes, dtype=np.int64), counts)


def topological_levels(dag: ReplayDag) -> npt.NDArray[np.int64]:
    """Longest-path level of every node over control and data edges; ``-1`` for nodes that no
    topological order reaches (they are on or behind a cycle)."""
    finish = finish_times(dag, np.ones(dag.num_nodes))
    level = np.full(dag.num_nodes, -1, dtype=np.int64)
    reached = ~np.isnan(finish)
    level[reached] = finish[reached].astype(np.int64) - 1
    return level


def finish_times(dag: ReplayDag, duration: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Earliest finish of every node when node ``n`` takes ``duration[n]`` and starts once its
    control predecessors and, for a receive-type node, the send its data comes from have
    finished: the longest path ending at each node over control and data edges (NaN for nodes
    on or behind a cycle)."""
    nnodes = dag.num_nodes
    dur = np.asarray(duration, dtype=np.float64)
    if dur.shape != (nnodes,):
        raise ValueError(f"duration must have one entry per node ({nnodes}), got shape {dur.shape}")
    indptr = dag.ctrl_indptr.astype(np.int64)
    indices = dag.ctrl_indices.astype(np.int64)
    match_recv = dag.match_recv.astype(np.int64)
    indeg = dag.ctrl_indegree.astype(np.int64) + (dag.match_send >= 0)
    start = np.zeros(nnodes)
    finish = np.full(nnodes, np.nan)
    frontier = np.flatnonzero(indeg == 0)
    # one vectorized sweep per level: the number of levels is the critical-path length in steps,
    # far smaller than the node count for real plans
    while frontier.size:
        finish[frontier] = start[frontier] + dur[frontier]
        starts = indptr[frontier]
        lengths = indptr[frontier + 1] - starts
        total = int(lengths.sum())
        if total:
            offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
            ctrl_succ = indices[offsets + np.arange(total, dtype=np.int64)]
        else:
            ctrl_succ = np.zeros(0, dtype=np.int64)
        data_succ = match_recv[frontier]
        has_data = data_succ >= 0
        succ = np.concatenate([ctrl_succ, data_succ[has_data]])
        if succ.size == 0:
            break
        np.maximum.at(start, succ, finish[np.concatenate([np.repeat(frontier, lengths), frontier[has_data]])])
        uniq, counts = np.unique(succ, return_counts=True)
        indeg[uniq] -= counts
        frontier = uniq[indeg[uniq] == 0]
    return finish


def cycle_path(names: list[str], limit: int = 16) -> str:
    """A cycle's node names as messages show them: in edge order and back to the first, only the
    first and last ``limit // 2`` of a longer one."""
    shown = names if len(names) <= limit else [*names[: limit // 2], "...", *names[-(limit // 2):]]
    return " -> ".join([*shown, names[0]])


def find_cycle(dag: ReplayDag) -> list[int] | None:
    """A cycle of the replay DAG (control + data edges) as a node list in edge order, or ``None``
    when the graph is acyclic. Deterministic: it starts from the lowest unreachable node."""
    level = topological_levels(dag)
    stuck = level < 0
    if not stuck.any():
        return None
    # every stuck node has a stuck predecessor, so walking predecessors must close a cycle
    preds: dict[int, int] = {}
    src = _ctrl_sources(dag)
    dst = dag.ctrl_indices.astype(np.int64)
    both = stuck[src] & stuck[dst]
    for s, d in zip(src[both].tolist(), dst[both].tolist(), strict=True):
        if d not in preds or s < preds[d]:
            preds[d] = s
    recv_nodes = np.flatnonzero((dag.match_send >= 0) & stuck)
    for d in recv_nodes.tolist():
        s = int(dag.match_send[d])
        if stuck[s] and (d not in preds or s < preds[d]):
            preds[d] = s
    node = int(np.flatnonzero(stuck)[0])
    seen: dict[int, int] = {}
    path: list[int] = []
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = preds[node]
    cycle = path[seen[node]:]
    cycle.reverse()  # predecessors were walked backwards
    return cycle


def to_networkx(plan_or_dag: Plan | ReplayDag) -> nx.DiGraph:
    """The replay DAG as a networkx graph for export (GraphML) and inspection.

    Nodes are the integer node ids of :class:`ReplayDag` with attributes ``gpu``, ``tb``,
    ``step`` (position in the threadblock) and ``type`` (XML code); edges carry ``kind`` =
    ``program`` (consecutive steps of a threadblock), ``dependency`` (``depid/deps``) or
    ``data`` (FIFO-matched send -> receive).
    """
    dag = plan_or_dag if isinstance(plan_or_dag, ReplayDag) else build_dag(plan_or_dag)
    graph = nx.DiGraph()
    type_codes = [t.value for t in STEP_TYPES]
    node_gpu = dag.node_gpu.tolist()
    node_tb = dag.node_tb.tolist()
    node_step = dag.node_step.tolist()
    node_type = dag.node_type.tolist()
    graph.add_nodes_from(
        (n, {"gpu": node_gpu[n], "tb": node_tb[n], "step": node_step[n], "type": type_codes[node_type[n]]})
        for n in range(dag.num_nodes))
    src = _ctrl_sources(dag).tolist()
    dst = dag.ctrl_indices.tolist()
    for s, d in zip(src, dst, strict=True):
        program = d == s + 1 and node_tb[d] == node_tb[s] and node_gpu[d] == node_gpu[s]
        graph.add_edge(s, d, kind="program" if program else "dependency")
    senders = np.flatnonzero(dag.match_recv >= 0)
    for s, d in zip(senders.tolist(), dag.match_recv[senders].tolist(), strict=True):
        graph.add_edge(s, d, kind="data")
    return graph
