"""Semantic verification of a plan: symbolic chunk data flow and data-race detection.

The plan is executed once, symbolically, in a topological order of its replay DAG, with the
executor's meaning of every step type (reference §5): ``s`` sends local src; ``r`` writes
dst = received; ``rcs`` writes dst = received and forwards it; ``rrc`` writes
dst = received ⊕ src; ``rrs`` forwards received ⊕ src and stores nothing; ``rrcs`` writes
dst = received ⊕ src and forwards it; ``cpy`` writes dst = src; ``re`` writes dst = dst ⊕ src;
``nop`` does nothing. Data travels along the DAG's FIFO-matched data edges, never along the
descriptive remote fields of a step.

A chunk value is a multiset of *atoms* (``input[r][k]``, "uninitialised chunk", "nothing
received"), so that a contribution reduced twice or missing is detected, not just a wrong set.
Values are interned: copying a chunk costs one integer, a reduction one dictionary lookup.

A plan whose buffers hold more than :data:`MAX_SEMANTIC_CHUNKS` chunks in all is not executed
(a note says so): the run's time and memory grow with the chunks.

After the run the declared collective's postcondition is checked (allgather, allreduce,
reducescatter, alltoall; in-place conventions of reference §4). ``custom``, ``broadcast`` and
``reduce`` get the race check only, and a note.

Data races: two accesses of one chunk, at least one a write, that are unordered in the DAG
(neither happens-before the other through program order, dependencies and data edges). No
all-pairs reachability: accesses are logged during the run, grouped by chunk (numpy), chunks
touched by one threadblock or never written are dropped in bulk, and only consecutive
accesses of a chunk in execution order are compared (write → its readers → next write): if
those are ordered, every pair is, by transitivity. A comparison is answered, in order, by
program order (same threadblock), by a cache of ordered threadblock pairs, by a per-
threadblock summary of incoming dependencies (one hop), and otherwise by a depth-first search
backwards from the later access, pruned by longest-path depth (a node no deeper than the
earlier access cannot be its descendant). The 100k-step corpus plans and the 64-GPU,
1,008-threadblock benchmark plan are checked in well under a second.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nuna.plan.dag import STEP_TYPES, ReplayDag, analyze, topological_levels
from nuna.plan.ir import Buffer, Collective, Plan, Step, StepType

#: Most race warnings listed one by one; the rest are summarised in one more line.
MAX_RACE_WARNINGS = 20

#: the most chunks (over every GPU's buffers) the check executes symbolically: its time and
#: memory grow with them, about 3.5 s and 0.8 GB at this count (2 GPUs of 2**20 chunks each),
#: 24 s and 4.9 GB at four times it, and 2**26 chunks per GPU ran out of 8 GB after 46 s. Real
#: plans hold thousands (a 64-GPU alltoall at 16 threadblocks per peer: 131,072)
MAX_SEMANTIC_CHUNKS = 1 << 21

_BUF_CODE: dict[Buffer, int] = {Buffer.INPUT: 0, Buffer.OUTPUT: 1, Buffer.SCRATCH: 2}
_BUF_NAME: tuple[str, ...] = ("input", "output", "scratch")
_IN, _OUT = 0, 1

# Step kinds as small ints so the hot loop compares ints, not enum members.
_K_NOP, _K_S, _K_R, _K_RCS, _K_RRC, _K_RRS, _K_RRCS, _K_CPY, _K_RE = range(9)
_KIND: dict[StepType, int] = {
    StepType.NOP: _K_NOP,
    StepType.SEND: _K_S,
    StepType.RECV: _K_R,
    StepType.RECV_COPY_SEND: _K_RCS,
    StepType.RECV_REDUCE_COPY: _K_RRC,
    StepType.RECV_REDUCE_SEND: _K_RRS,
    StepType.RECV_REDUCE_COPY_SEND: _K_RRCS,
    StepType.COPY: _K_CPY,
    StepType.REDUCE: _K_RE,
}

#: Plans with more steps get their topological order from the vectorised level sweep.
_NUMPY_ORDER_FROM = 20_000
_KIND_OF_CODE = np.asarray([_KIND[t] for t in STEP_TYPES], dtype=np.int64)

_MODELLED = (Collective.ALLGATHER, Collective.ALLREDUCE, Collective.REDUCESCATTER, Collective.ALLTOALL)


@dataclass(frozen=True, slots=True)
class SemanticsResult:
    """Messages of the semantic check, one line each, naming gpu/buffer/chunk (and steps).

    ``errors``: the plan computes a wrong result (or cannot be executed symbolically).
    ``warnings``: data races, and results that are right only if a buffer starts zeroed.
    ``notes``: what was not checked and why.
    """

    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True, slots=True)
class _Layout:
    """The collective's buffer conventions: chunks per rank slice, aliasing, initial content."""

    collective: Collective
    inplace: bool
    ngpus: int
    slice_chunks: int  # C of reference §4
    input_chunks: int  # chunks of the user's input buffer holding input data (-1: all)
    alias_from: int  # buffer code renamed by the in-place convention, or -1
    alias_to: int
    alias_scale: int  # alias index = gpu * alias_scale + index


def _layout(plan: Plan, inplace: bool) -> tuple[_Layout | None, str | None]:
    """The layout of ``plan`` for an (in-place or out-of-place) call, or an error message."""
    coll, n = plan.collective, plan.ngpus
    if coll not in _MODELLED:
        return _Layout(coll, inplace, n, 0, -1, -1, -1, 0), None
    per_rank = coll is not Collective.ALLREDUCE
    if per_rank and n > 0 and plan.nchunksperloop % n:
        return None, (f"{coll.value}: nchunksperloop {plan.nchunksperloop} is not a multiple of "
                      f"ngpus {n}, so chunks cannot be split into rank slices")
    # no ranks, no result chunks: the postcondition holds vacuously, as for allreduce (the
    # structural check, not this one, rejects ngpus < 1)
    C = (plan.nchunksperloop // n if n > 0 else 0) if per_rank else plan.nchunksperloop
    if coll is Collective.ALLGATHER:
        return _Layout(coll, inplace, n, C, C, _IN if inplace else -1, _OUT, C), None
    if coll is Collective.ALLREDUCE:
        return _Layout(coll, inplace, n, C, C, _OUT if inplace else -1, _IN, 0), None
    if coll is Collective.REDUCESCATTER:
        return _Layout(coll, inplace, n, C, n * C, _OUT if inplace else -1, _IN, C), None
    # alltoall: reference §4 names no in-place layout; sendbuff == recvbuff aliases index to index
    return _Layout(coll, inplace, n, C, n * C, _OUT if inplace else -1, _IN, 0), None


class _Values:
    """Interned multisets of atoms. Value ids are ints; equal multisets share one id."""

    def __init__(self) -> None:
        self.atoms: list[tuple[str, int, int, int]] = []  # (kind, gpu, buffer, index)
        self._atom_ids: dict[tuple[str, int, int, int], int] = {}
        self.values: list[tuple[int, ...]] = []
        self._value_ids: dict[tuple[int, ...], int] = {}
        self._reduced: dict[tuple[int, int], int] = {}

    def atom(self, kind: str, gpu: int, buf: int, index: int) -> int:
        """The value consisting of one atom. ``kind``: 'in' (input[gpu][index]), 'un'
        (uninitialised chunk), 'rx' (receive with no matching send; ``index`` is the node),
        'nl' (an operand without a location)."""
        key = (kind, gpu, buf, index)
        aid = self._atom_ids.get(key)
        if aid is None:
            aid = len(self.atoms)
            self.atoms.append(key)
            self._atom_ids[key] = aid
        return self.intern((aid,))

    def intern(self, atoms: tuple[int, ...]) -> int:
        vid = self._value_ids.get(atoms)
        if vid is None:
            vid = len(self.values)
            self.values.append(atoms)
            self._value_ids[atoms] = vid
        return vid

    def reduce(self, a: int, b: int) -> int:
        # ⊕ is commutative (sum/prod/min/max), so the operand order does not matter
        key = (a, b) if a <= b else (b, a)
        vid = self._reduced.get(key)
        if vid is None:
            vid = self.intern(tuple(sorted(self.values[a] + self.values[b])))
            self._reduced[key] = vid
        return vid

    def atom_text(self, aid: int) -> str:
        kind, gpu, buf, index = self.atoms[aid]
        if kind == "in":
            return f"input[{gpu}][{index}]"
        if kind == "un":
            return f"uninitialised {_BUF_NAME[buf]}[{gpu}][{index}]"
        if kind == "nl":
            return "an operand without a buffer location"
        return "nothing (unmatched receive)"

    def text(self, vid: int) -> str:
        atoms = sorted(self.values[vid], key=lambda a: self.atoms[a])
        if len(atoms) <= 3:
            return " ⊕ ".join(self.atom_text(a) for a in atoms)
        return f"a reduction of {len(atoms)} contributions"

    def is_uninit(self, aid: int) -> bool:
        return self.atoms[aid][0] == "un"


@dataclass(frozen=True, slots=True)
class _Nodes:
    """Per-node facts of the DAG as Python lists (the hot loops index lists, not arrays)."""

    steps: list[Step]
    gpu: list[int]
    tbidx: list[int]  # index of the node's threadblock in the DAG's threadblock order
    tb_start: list[int]
    tb_id: list[int]


def _nodes(plan: Plan, dag: ReplayDag) -> tuple[_Nodes | None, str | None]:
    # the DAG numbers threadblocks by (gpu id, tb id) and their steps consecutively; plans
    # list them in that order almost always, so try the plan's own order first
    tb_gpu = dag.tb_gpu.tolist()
    tb_id = dag.tb_id.tolist()
    indptr = dag.tb_indptr.tolist()
    listed = [(g.id, tb) for g in plan.gpus for tb in g.threadblocks]
    if len(listed) != len(tb_gpu):
        return None, "the replay DAG does not match the plan (threadblock count differs)"
    if [g for g, _ in listed] != tb_gpu or [tb.id for _, tb in listed] != tb_id:
        listed.sort(key=lambda item: (item[0], item[1].id))
    steps: list[Step] = []
    for j, (g, tb) in enumerate(listed):
        if g != tb_gpu[j] or tb.id != tb_id[j] or len(tb.steps) != indptr[j + 1] - indptr[j]:
            return None, f"gpu {g} tb {tb.id}: the replay DAG does not match the plan (stale DAG?)"
        steps.extend(tb.steps)
    sizes = np.diff(dag.tb_indptr)
    tbidx = np.repeat(np.arange(len(tb_gpu), dtype=np.int64), sizes).tolist()
    return _Nodes(steps, dag.node_gpu.tolist(), tbidx, indptr[:-1], tb_id), None


class _Order:
    """Happens-before queries on the DAG (see the module docstring for the method)."""

    def __init__(self, dag: ReplayDag, nodes: _Nodes, depth: list[int]) -> None:
        self._tbidx = nodes.tbidx
        self._tb_start = nodes.tb_start
        self._tb_end = [*nodes.tb_start[1:], dag.num_nodes]
        self._summaries: dict[int, dict[int, tuple[list[int], list[int]]]] = {}
        self._depth = depth
        self._match_send = dag.match_send.tolist()
        # reverse CSR of the dependency edges (control edges that are not program order)
        n = dag.num_nodes
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(dag.ctrl_indptr))
        dst = dag.ctrl_indices.astype(np.int64)
        tbidx = np.asarray(nodes.tbidx, dtype=np.int64)
        program = (dst == src + 1) & (tbidx[dst] == tbidx[src]) if n else np.zeros(0, dtype=bool)
        src, dst = src[~program], dst[~program]
        order = np.argsort(dst, kind="stable")
        self._rev_indices = src[order].tolist()
        self._rev_indptr = np.concatenate(([0], np.cumsum(np.bincount(dst, minlength=n)))).tolist()

    def _summarise(self, t: int) -> dict[int, tuple[list[int], list[int]]]:
        """Per source threadblock: the nodes of threadblock ``t`` that wait on it (ascending)
        and the running maximum of the nodes they wait on."""
        out: dict[int, tuple[list[int], list[int]]] = {}
        start = self._tb_start[t]
        end = self._tb_end[t]
        tbidx, rev_indptr, rev_indices = self._tbidx, self._rev_indptr, self._rev_indices
        for y in range(start, end):
            for k in range(rev_indptr[y], rev_indptr[y + 1]):
                p = rev_indices[k]
                entry = out.get(tbidx[p])
                if entry is None:
                    out[tbidx[p]] = ([y], [p])
                else:
                    entry[0].append(y)
                    entry[1].append(max(p, entry[1][-1]))
        return out

    def before(self, u: int, v: int) -> bool:
        """True if node ``u`` happens before node ``v`` (``u`` ran earlier in the topological
        order, so ``v`` cannot happen before ``u``)."""
        tbidx, depth = self._tbidx, self._depth
        tu = tbidx[u]
        tv = tbidx[v]
        if tu == tv:
            return u < v
        # one hop: a dependency from tb(u) at or after u into tb(v) at or before v
        summary = self._summaries.get(tv)
        if summary is None:
            summary = self._summaries[tv] = self._summarise(tv)
        hop = summary.get(tu)
        if hop is not None:
            i = bisect.bisect_right(hop[0], v) - 1
            if i >= 0 and hop[1][i] >= u:
                return True
        du = depth[u]
        tb_start, rev_indptr, rev_indices, match_send = (
            self._tb_start, self._rev_indptr, self._rev_indices, self._match_send)
        # Depth-first, dependency edges first: a long-range order is nearly always a chain of
        # same-GPU dependencies, which this finds without sweeping the whole ancestor cone.
        visited: set[int] = set()
        stack = [v]
        while stack:
            x = stack.pop()
            if x in visited:
                continue
            visited.add(x)
            if x > tb_start[tbidx[x]] and depth[x - 1] > du:
                stack.append(x - 1)
            p = match_send[x]
            if p >= 0:
                if tbidx[p] == tu:
                    if p >= u:
                        return True
                elif depth[p] > du:
                    stack.append(p)
            for k in range(rev_indptr[x], rev_indptr[x + 1]):
                p = rev_indices[k]
                if tbidx[p] == tu:
                    if p >= u:
                        return True
                elif depth[p] > du:
                    stack.append(p)
        return False


def _find_races(order: _Order, nodes: _Nodes, events: _Accesses,
                stride: int) -> list[tuple[int, int, int, str]]:
    """Data races among the logged accesses (in execution order): per chunk, every write must
    be ordered after the previous write or after all reads since it, and every read after the
    last write. Chunks touched by one threadblock only, or never written, are skipped in bulk."""
    cnt = np.asarray(events.count, dtype=np.int64)
    total = int(cnt.sum())
    if total == 0:
        # cnt=0 steps log accesses of no chunk; the grouping below needs at least one
        # (``reduceat`` rejects an empty array)
        return []
    first = np.cumsum(cnt) - cnt
    key = (np.repeat(np.asarray(events.key, dtype=np.int64), cnt)
           + (np.arange(total, dtype=np.int64) - np.repeat(first, cnt)) * stride)
    node = np.repeat(np.asarray(events.node, dtype=np.int64), cnt)
    wr = np.repeat(np.asarray(events.write, dtype=bool), cnt)
    tb = np.asarray(nodes.tbidx, dtype=np.int64)[node]
    perm = np.argsort(key, kind="stable")  # groups chunks, keeps execution order inside
    key, node, wr, tb = key[perm], node[perm], wr[perm], tb[perm]
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    ends = np.append(starts[1:], key.size)
    any_write = np.logical_or.reduceat(wr, starts)
    mixed = np.minimum.reduceat(tb, starts) != np.maximum.reduceat(tb, starts)
    todo = np.flatnonzero(any_write & mixed)
    found: list[tuple[int, int, int, str]] = []
    seen: set[tuple[int, int]] = set()
    # per (tb of u, tb of v): the last ordered pair found; u' <= u and v' >= v in the same
    # threadblocks are ordered too, which answers most queries without a search
    ordered: dict[tuple[int, int], tuple[int, int]] = {}
    tbidx = nodes.tbidx

    def check(u: int, v: int, k: int, kind: str) -> None:
        pair = (tbidx[u], tbidx[v])
        if u == v or pair[0] == pair[1]:
            return
        known = ordered.get(pair)
        if known is not None and u <= known[0] and v >= known[1]:
            return
        if (u, v) in seen:
            return
        if order.before(u, v):
            ordered[pair] = (u, v)
        else:
            seen.add((u, v))
            found.append((u, v, k, kind))

    node_l, wr_l = node.tolist(), wr.tolist()
    for gi in todo.tolist():
        k = int(key[starts[gi]])
        writer = -1
        readers: list[int] = []
        for i in range(int(starts[gi]), int(ends[gi])):
            n = node_l[i]
            if wr_l[i]:
                if readers:
                    for r in readers:
                        check(r, n, k, "write unordered with a read")
                elif writer >= 0:
                    check(writer, n, k, "two unordered writes")
                writer, readers = n, []
            else:
                if writer >= 0:
                    check(writer, n, k, "read unordered with a write")
                if not readers or readers[-1] != n:
                    readers.append(n)
    found.sort(key=lambda f: (f[1], f[0], f[2]))  # execution order of the later access
    return found


class _Accesses:
    """Chunk accesses logged during the run: ``count`` consecutive chunks from location key
    ``key``, by node ``node``, reading or writing. Mutable, local to one run."""

    def __init__(self) -> None:
        self.node: list[int] = []
        self.key: list[int] = []
        self.count: list[int] = []
        self.write: list[bool] = []


def _topological(dag: ReplayDag) -> tuple[list[int], list[int]] | None:
    """(a topological order over control + data edges, longest-path depth of every node), or
    ``None`` if the graph has a cycle."""
    N = dag.num_nodes
    if N > _NUMPY_ORDER_FROM:
        levels = topological_levels(dag)
        if N and int(levels.min()) < 0:
            return None
        return np.argsort(levels, kind="stable").tolist(), levels.tolist()
    indptr = dag.ctrl_indptr.tolist()
    indices = dag.ctrl_indices.tolist()
    match_recv = dag.match_recv.tolist()
    indeg = (dag.ctrl_indegree.astype(np.int64) + (dag.match_send >= 0)).tolist()
    depth = [0] * N
    ready = [n for n in range(N) if indeg[n] == 0]
    head = 0
    while head < len(ready):
        n = ready[head]
        head += 1
        d = depth[n] + 1
        for s in indices[indptr[n]:indptr[n + 1]]:
            if depth[s] < d:
                depth[s] = d
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
        s = match_recv[n]
        if s >= 0:
            if depth[s] < d:
                depth[s] = d
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if len(ready) < N:
        return None
    return ready, depth


def check_semantics(plan: Plan, dag: ReplayDag) -> SemanticsResult:
    """Execute ``plan`` symbolically over ``dag`` (= ``build_dag(plan)``); prove the declared
    collective's postcondition and look for data races. Never raises on a bad plan: every
    finding is a message in the result. The execution runs once per program (``Plan.derived``:
    it reads no placement) when ``dag`` is the program's own; the size limit is checked at
    every call, so that the kept result never stands in for a limit it was not made under."""
    chunks = plan.total_chunks
    if chunks > MAX_SEMANTIC_CHUNKS:
        return SemanticsResult((), (), (f"semantic check not run: the plan's buffers hold {chunks:,} chunks "
                                        f"in all, more than the {MAX_SEMANTIC_CHUNKS:,} it executes",))
    if analyze(plan).dag is not dag:
        return _check_semantics(plan, dag)
    return plan.derived("nuna.plan.semantics.check_semantics", lambda: _check_semantics(plan, dag))


def _check_semantics(plan: Plan, dag: ReplayDag) -> SemanticsResult:
    nodes, problem = _nodes(plan, dag)
    if nodes is None:
        return SemanticsResult((f"semantic check not run: {problem}",), (), ())
    notes: list[str] = []
    modes: list[bool] = []
    if plan.inplace:
        modes.append(True)
    if plan.outofplace:
        modes.append(False)
    if not modes:
        notes.append("plan is marked neither in-place nor out-of-place; checked as out-of-place")
        modes.append(False)
    if plan.collective not in _MODELLED:
        notes.append(f"collective {plan.coll_xml}: no postcondition modelled; data flow checked "
                     "for races only")
    errors: list[str] = []
    warnings: list[str] = []
    for i, inplace in enumerate(modes):
        layout, problem = _layout(plan, inplace)
        if layout is None:
            errors.append(f"semantic check not run: {problem}")
            break
        e, w = _run(plan, dag, nodes, layout, check_races=(i == 0))
        where = "" if len(modes) == 1 else ("in-place: " if inplace else "out-of-place: ")
        errors.extend(where + m for m in e)
        warnings.extend(where + m for m in w)
    return SemanticsResult(tuple(errors), tuple(warnings), tuple(notes))


def _run(plan: Plan, dag: ReplayDag, nodes: _Nodes, lay: _Layout,
         check_races: bool) -> tuple[list[str], list[str]]:
    """One symbolic execution; returns (errors, warnings)."""
    topo = _topological(dag)
    if topo is None:
        return [f"{dag.num_nodes} steps cannot all run (dependency cycle); semantics not checked"], []
    order, depth = topo
    NG = max(dag.ngpus, plan.ngpus, max(nodes.gpu, default=0) + 1, 1)
    stride = 3 * NG  # key distance between consecutive chunks of one buffer
    vals = _Values()
    store: dict[int, int] = {}
    alias_from, alias_to, alias_scale = lay.alias_from, lay.alias_to, lay.alias_scale
    in_chunks, C = lay.input_chunks, lay.slice_chunks
    ag_inplace = lay.collective is Collective.ALLGATHER and lay.inplace
    unknown = vals.atom("nl", -1, -1, -1)

    def initial(key: int) -> int:
        g = key % NG
        rest = key // NG
        buf, idx = rest % 3, rest // 3
        if buf == _IN and (in_chunks < 0 or idx < in_chunks):
            return vals.atom("in", g, 0, idx)
        if ag_inplace and buf == _OUT and g * C <= idx < g * C + C:
            return vals.atom("in", g, 0, idx - g * C)
        return vals.atom("un", g, buf, idx)

    def first_key(g: int, buf: Buffer | None, off: int | None) -> int:
        """Location key of (g, buf, off) after aliasing; -1 for an operand with no location."""
        if buf is None or off is None or off < 0:
            return -1
        b = _BUF_CODE[buf]
        if b == alias_from:
            b, off = alias_to, g * alias_scale + off
        return (off * 3 + b) * NG + g

    log = _Accesses()
    log_node, log_key, log_count, log_write = log.node, log.key, log.count, log.write

    def read(g: int, buf: Buffer | None, off: int | None, cnt: int, n: int) -> list[int]:
        key = first_key(g, buf, off)
        if key < 0:
            return [unknown] * cnt
        if check_races:
            log_node.append(n)
            log_key.append(key)
            log_count.append(cnt)
            log_write.append(False)
        out = []
        for k in range(key, key + cnt * stride, stride):
            v = store.get(k)
            if v is None:
                v = store[k] = initial(k)
            out.append(v)
        return out

    def write(g: int, buf: Buffer | None, off: int | None, data: list[int], n: int) -> None:
        key = first_key(g, buf, off)
        if key < 0:
            return
        if check_races:
            log_node.append(n)
            log_key.append(key)
            log_count.append(len(data))
            log_write.append(True)
        for v in data:
            store[key] = v
            key += stride

    kinds = _KIND_OF_CODE[dag.node_type.astype(np.int64)].tolist()
    match_send = dag.match_send.tolist()
    match_recv = dag.match_recv.tolist()
    sent: dict[int, list[int]] = {}
    steps, gpus = nodes.steps, nodes.gpu
    for n in order:
        kind = kinds[n]
        if kind == _K_NOP:
            continue
        st = steps[n]
        g = gpus[n]
        cnt = st.count
        if kind == _K_S:
            data = read(g, st.src_buffer, st.src_offset, cnt, n)
            if match_recv[n] >= 0:
                sent[n] = data
        elif kind == _K_CPY:
            write(g, st.dst_buffer, st.dst_offset, read(g, st.src_buffer, st.src_offset, cnt, n), n)
        elif kind == _K_RE:
            src = read(g, st.src_buffer, st.src_offset, cnt, n)
            dst = read(g, st.dst_buffer, st.dst_offset, cnt, n)
            red = [vals.reduce(a, b) for a, b in zip(dst, src, strict=True)]
            write(g, st.dst_buffer, st.dst_offset, red, n)
        else:
            m = match_send[n]
            got = sent.pop(m, None) if m >= 0 else None
            if got is None or len(got) != cnt:
                # verify reports the unmatched receive / count mismatch; here it is just data
                # that never arrived
                missing = vals.atom("rx", g, 3, n)
                got = ([] if got is None else got[:cnt]) + [missing] * max(0, cnt - len(got or ()))
            if kind in (_K_R, _K_RCS):
                write(g, st.dst_buffer, st.dst_offset, got, n)
                out = got
            else:
                src = read(g, st.src_buffer, st.src_offset, cnt, n)
                out = [vals.reduce(a, b) for a, b in zip(got, src, strict=True)]
                if kind != _K_RRS:
                    write(g, st.dst_buffer, st.dst_offset, out, n)
            if kind not in (_K_R, _K_RRC) and match_recv[n] >= 0:
                sent[n] = out

    errors: list[str] = []
    warnings: list[str] = []
    if check_races:
        found = _find_races(_Order(dag, nodes, depth), nodes, log, stride)
        warnings.extend(_race_messages(found, nodes, NG))
    if lay.collective in _MODELLED:
        def key_of(g: int, buf: int, idx: int) -> int:
            if buf == alias_from:
                buf, idx = alias_to, g * alias_scale + idx
            return (idx * 3 + buf) * NG + g

        e, w = _postcondition(lay, vals, store, key_of, initial)
        errors.extend(e)
        warnings.extend(w)
    return errors, warnings


def _step_name(nodes: _Nodes, n: int) -> str:
    t = nodes.tbidx[n]
    st = nodes.steps[n]
    return f"gpu {nodes.gpu[n]} tb {nodes.tb_id[t]} step {st.index} ({st.type.value})"


def _race_messages(found: list[tuple[int, int, int, str]], nodes: _Nodes, NG: int) -> list[str]:
    out = []
    for u, v, key, kind in found[:MAX_RACE_WARNINGS]:
        rest = key // NG
        buf, idx = rest % 3, rest // 3
        a, b = _step_name(nodes, u), _step_name(nodes, v)
        tbs_a, tbs_b = a.split(" ", 2)[2], b.split(" ", 2)[2]
        out.append(f"gpu {key % NG} {_BUF_NAME[buf]} chunk {idx}: data race, {kind}: "
                   f"{tbs_a} and {tbs_b} are not ordered by program order, dependencies or data")
    if len(found) > MAX_RACE_WARNINGS:
        out.append(f"... and {len(found) - MAX_RACE_WARNINGS} more data races")
    return out


def _postcondition(lay: _Layout, vals: _Values, store: dict[int, int],
                   key_of: Callable[[int, int, int], int],
                   initial: Callable[[int], int]) -> tuple[list[str], list[str]]:
    """Compare every result chunk with the collective's definition (reference §4)."""
    n = lay.ngpus
    inp = [[vals.atom("in", r, 0, k) for k in range(lay.input_chunks)] for r in range(n)]
    buf, count, want_of = _expectation(lay, vals, inp)
    first: str | None = None
    wrong = 0
    wrong_gpus: set[int] = set()
    zero_first: str | None = None
    zero_count = 0
    for g in range(n):
        wants = [want_of(g, k) for k in range(count)]
        # keys of one buffer are linear in the chunk index, aliased or not
        key0 = key_of(g, buf, 0)
        stride = key_of(g, buf, 1) - key0
        keys = range(key0, key0 + count * stride, stride)
        if [store.get(key) for key in keys] == wants:
            continue
        for k, key in enumerate(keys):
            got = store.get(key)
            if got is None:
                got = initial(key)
            want = wants[k]
            if got == want:
                continue
            where = f"gpu {g} {_BUF_NAME[buf]} chunk {k}"
            atoms = vals.values[got]
            clean = tuple(a for a in atoms if not vals.is_uninit(a))
            if clean and len(clean) < len(atoms) and vals.intern(clean) == want:
                zero_count += 1
                if zero_first is None:
                    zero_first = (f"{where}: correct only if the buffer starts zeroed (its value "
                                  "reduces uninitialised memory: "
                                  f"{', '.join(vals.atom_text(a) for a in atoms if vals.is_uninit(a))})")
                continue
            wrong += 1
            wrong_gpus.add(g)
            if first is None:
                first = f"{where}: expected {vals.text(want)}, got {_describe(vals, want, got)}"
    errors, warnings = [], []
    if first is not None:
        more = (f" (and {wrong - 1} more wrong chunks on {len(wrong_gpus)} gpus)" if wrong > 1 else "")
        errors.append(f"wrong result: {first}{more}")
    if zero_first is not None:
        more = f" (and {zero_count - 1} more such chunks)" if zero_count > 1 else ""
        warnings.append(zero_first + more)
    return errors, warnings


def _expectation(lay: _Layout, vals: _Values,
                 inp: list[list[int]]) -> tuple[int, int, Callable[[int, int], int]]:
    """(result buffer as the user names it, result chunks per gpu, expected value of (g, k))."""
    n, C, coll = lay.ngpus, lay.slice_chunks, lay.collective

    def total(k: int) -> int:
        return vals.intern(tuple(sorted(vals.values[inp[r][k]][0] for r in range(n))))

    if coll is Collective.ALLGATHER:
        return _OUT, n * C, lambda g, k: inp[k // C][k % C]
    if coll is Collective.ALLREDUCE:
        sums = [total(k) for k in range(C)]
        return (_IN if lay.inplace else _OUT), C, lambda g, k: sums[k]
    if coll is Collective.REDUCESCATTER:
        sums = [total(k) for k in range(n * C)]
        return _OUT, C, lambda g, k: sums[g * C + k]
    return _OUT, n * C, lambda g, k: inp[k // C][g * C + k % C]


def _describe(vals: _Values, want: int, got: int) -> str:
    """``got`` in words, relative to ``want`` when both are reductions."""
    w, g = vals.values[want], vals.values[got]
    if len(w) <= 1 or (len(g) <= 1 and not set(g) & set(w)):
        return vals.text(got)
    need: dict[int, int] = {}
    for a in w:
        need[a] = need.get(a, 0) + 1
    have: dict[int, int] = {}
    for a in g:
        have[a] = have.get(a, 0) + 1
    missing = sorted((a for a in need if have.get(a, 0) < need[a]), key=lambda a: vals.atoms[a])
    extra = sorted((a for a in have if have[a] > need.get(a, 0)), key=lambda a: vals.atoms[a])
    parts = []
    if missing:
        parts.append("missing " + ", ".join(vals.atom_text(a) for a in missing[:3])
                     + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
    if extra:
        texts = [vals.atom_text(a) + (" twice" if need.get(a, 0) and have[a] == need[a] + 1 else
                                      f" x{have[a]}" if have[a] > 1 else "") for a in extra[:3]]
        parts.append("extra " + ", ".join(texts) + (f" and {len(extra) - 3} more" if len(extra) > 3 else ""))
    return f"a reduction of {len(g)} contributions ({'; '.join(parts)})"
