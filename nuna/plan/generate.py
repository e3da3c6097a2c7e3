"""Generators of collective plans: the paper's direct (all-pairs) algorithms and classic rings.

Every generator is a pure function returning Plan IR that passes the structural, deadlock and
semantic checks (``nuna.plan.verify``) and round-trips through the XML writer. Conventions:

* ``C`` = chunks per rank slice (``chunks_per_peer``). ``nchunksperloop`` = ``ngpus·C`` for all
  four collectives, so a chunk is ``1/(ngpus·C)`` of the collective's whole buffer
  (reference §4; allreduce buffers hold ``ngpus`` slices of ``C`` chunks).
* In-place is the default for allgather, allreduce and reducescatter (as MSCCLang's all-pairs
  programs), out-of-place for alltoall; either can be requested. In-place plans name the
  buffers the way MSCCLang does (allgather: ``o`` only, ``i_chunks=0``; allreduce and
  reducescatter: ``i`` only, ``o_chunks=0``).
* ``protocol`` only changes the header. Threadblock ids are dense from 0; step indices are
  positions; every ``nop`` carries a dependency and is followed by a step with its own one
  (the executors' rules, reference §6.3).

``direct`` (latency-optimised all-pairs, paper §5): on every GPU one threadblock per
(peer, k), ``k < tbs_per_peer``, with ``send = recv = peer`` and channel ``k`` (so each
connection (peer, channel, direction) is used by exactly one threadblock); threadblock ``k`` of
a peer moves sub-slice ``k`` (``C/K`` chunks) of every slice exchanged with that peer. Ids are
peer-major: peers in increasing rank order, then ``k``.

* allgather / alltoall: each threadblock sends its sub-slice to the peer, then receives the
  peer's. Out-of-place, the local copy ``input → own output slice`` is the last step of the
  threadblocks of the first peer (one copy per ``k``): the sends read the input, so the copy
  delays nothing and adds no threadblock, keeping ``(ngpus-1)·K`` threadblocks per GPU.
* reducescatter: threadblock (p, k) sends my contribution to p's slice and receives p's
  contribution to mine. The first peer's threadblock (the *reducer* of sub-slice k) receives
  with ``rrc`` into the accumulator; the others receive into scratch (``r``) and the reducer
  then adds them with ``re`` steps. The reducer waits for those receives through ``nop`` steps
  (one dependency each, the last on the first ``re``), as MSCCLang's ``dependence_nop`` does
  (reference §6.2), so its ``re`` steps stay dependency-free and the executor fuses them;
  beyond 17 GPUs every 16th ``re`` has ``hasdep=1``, which cuts the chain into passes of at most
  16 sources, as many as the executors' kernel takes (:mod:`nuna.plan.fusion`).
* allreduce = that reduce-scatter followed by a direct all-gather of the reduced slices, in
  the same threadblocks; a non-reducer's all-gather send depends on the reducer's last step.
* With ``C > K`` a threadblock moves ``m = C/K`` chunks per slice, a chunk per step, and its
  exchanges alternate: ``s r s r ...`` (the send of chunk j, then the receive of the peer's
  chunk j), so it is never more than one send ahead of its receives. A step of one chunk is
  one primitive call of the executors at any size; one step of all ``m`` chunks (before nuna
  0.15.0) was several calls once a chunk exceeded ``2 MiB / m`` (Simple), and from three calls
  a threadblock's send outran its connection's 8 buffer steps before it received the peer's,
  and both waited for ever (``nuna validate --size``, :mod:`nuna.sim.flowcheck`). The
  reducer's ``re`` steps stay whole (``m`` chunks: local, no connection). With the default
  ``C = K`` (``m = 1``) the plans are those of nuna 0.14.0.

``ring`` (``channels`` rings, one threadblock per ring per GPU, send to ``g+1``, receive from
``g-1``, ring ``c`` on channel ``c`` moving sub-slice ``c`` of every slice):

* allgather: ``s`` of the own slice, ``ngpus-2`` × ``rcs``, one ``r``.
* reducescatter: ``s``, ``ngpus-2`` × ``rrs``, final ``rrc`` into the own slice.
* allreduce: reduce-scatter ``s``, ``rrs``…, ``rrcs`` (own slice reduced and forwarded), then
  all-gather ``rcs``…, ``r``: ``2·ngpus-1`` steps.
* alltoall: store-and-forward along the ring. A GPU sends its own blocks farthest first, the
  first before it receives anything; after that each step receives a block from ``g-1``
  and sends one: the received block forwarded (``rcs`` through a per-ring scratch sub-slice,
  reused: the writes are in one threadblock and so ordered), or, when the block was for it
  (``r`` into the output), its next own block. So no GPU runs more than one send ahead of its
  receives, which the executors' flow control requires of a ring that forwards
  (``nuna.plan.flow``, :data:`_RING_ALLTOALL_AHEAD`; before nuna 0.13.0 a GPU sent all its
  blocks first, which deadlocks there from 4 GPUs on).
  ``ngpus·(ngpus-1)/2`` hops per sub-slice; it exists for comparison, not speed.

With ``C > channels`` a ring moves ``m = C/channels`` chunk columns, one after the other, each
column's whole pass above in one-chunk steps: never more than one send ahead of its receives,
which a forwarding ring needs (a ring's step of ``m`` chunks, before nuna 0.15.0, hung the
executors from two calls: every GPU's first send filled its ring and each forward waited for
the next GPU's). The out-of-place copy stays one step of ``m`` chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nuna.errors import UsageError
from nuna.plan.fusion import MAX_REDUCE_FUSION
from nuna.plan.ir import Buffer, Collective, Gpu, Plan, Protocol, Step, StepType, Threadblock

#: Algorithms :func:`generate` knows.
ALGORITHMS: tuple[str, ...] = ("direct", "ring")
#: Collectives :func:`generate` can produce.
COLLECTIVES: tuple[Collective, ...] = (
    Collective.ALLGATHER, Collective.ALLREDUCE, Collective.REDUCESCATTER, Collective.ALLTOALL)
#: Largest plan generated, in steps over all GPUs: a guard against requests that would exhaust
#: memory (a 64-GPU direct allreduce with 144 threadblocks per peer has ~3.5 million steps).
MAX_STEPS = 20_000_000

_DEFAULT_INPLACE: dict[Collective, bool] = {
    Collective.ALLGATHER: True,
    Collective.ALLREDUCE: True,
    Collective.REDUCESCATTER: True,
    Collective.ALLTOALL: False,
}

_I, _O, _S = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
_SEND, _RECV, _RCS = StepType.SEND, StepType.RECV, StepType.RECV_COPY_SEND
_RRC, _RRS, _RRCS = StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND
_CPY, _RE, _NOP = StepType.COPY, StepType.REDUCE, StepType.NOP


def generate(
    collective: Collective | str,
    ngpus: int,
    *,
    algo: str = "direct",
    tbs_per_peer: int = 1,
    chunks_per_peer: int | None = None,
    channels: int | None = None,
    protocol: Protocol | str = Protocol.SIMPLE,
    inplace: bool | None = None,
    name: str | None = None,
) -> Plan:
    """Generate a ``collective`` plan for ``ngpus`` GPUs (see the module docstring).

    ``tbs_per_peer`` (direct only): threadblocks per peer, K ≥ 1. ``chunks_per_peer``: chunks
    per rank slice, C; default K (direct) or ``channels`` (ring); must be a multiple of K
    (direct) or of ``channels`` (ring). ``channels`` (ring only): number of rings, default 1.
    ``inplace``: ``None`` picks the collective's default (in-place except alltoall).
    Raises ``UsageError`` for impossible requests.
    """
    coll = _collective(collective)
    proto = _protocol(protocol)
    if algo not in ALGORITHMS:
        raise UsageError(f"unknown algorithm {algo!r} (choose from {', '.join(ALGORITHMS)})")
    if isinstance(ngpus, bool) or not isinstance(ngpus, int) or ngpus < 2:
        raise UsageError(f"ngpus must be an integer >= 2, got {ngpus!r}")
    _positive("tbs_per_peer", tbs_per_peer)
    if channels is not None:
        _positive("channels", channels)
    if chunks_per_peer is not None:
        _positive("chunks_per_peer", chunks_per_peer)
    in_place = _DEFAULT_INPLACE[coll] if inplace is None else bool(inplace)

    if algo == "direct":
        if channels is not None:
            raise UsageError("channels applies to the ring algorithm; direct uses one channel per "
                             "threadblock of a peer (set tbs_per_peer)")
        K = tbs_per_peer
        C = K if chunks_per_peer is None else chunks_per_peer
        if C % K:
            raise UsageError(f"chunks_per_peer ({C}) must be a multiple of tbs_per_peer ({K})")
        check_plan_size(coll, "direct", ngpus, K, C)
        spec = _Spec(coll, ngpus, K, C // K, C, in_place)
        make = _StepCache()  # shared by all GPUs: receive steps recur on every GPU
        gpus = tuple(_direct_gpu(spec, g, make) for g in range(ngpus))
        nchannels = K
        label = f"direct_k{K}"
    else:
        if tbs_per_peer != 1:
            raise UsageError("tbs_per_peer applies to the direct algorithm; ring uses one "
                             "threadblock per ring (set channels)")
        M = 1 if channels is None else channels
        C = M if chunks_per_peer is None else chunks_per_peer
        if C % M:
            raise UsageError(f"chunks_per_peer ({C}) must be a multiple of channels ({M})")
        check_plan_size(coll, "ring", ngpus, M, C)
        spec = _Spec(coll, ngpus, M, C // M, C, in_place)
        make = _StepCache()
        gpus = tuple(_ring_gpu(spec, g, make) for g in range(ngpus))
        nchannels = M
        label = f"ring_c{M}"
    return Plan(
        name=name if name is not None else f"{coll.value}_{label}_n{ngpus}_cpp{C}",
        protocol=proto,
        nchannels=nchannels,
        nchunksperloop=ngpus * C,
        ngpus=ngpus,
        collective=coll,
        inplace=in_place,
        outofplace=not in_place,
        min_bytes=0,
        max_bytes=0,
        gpus=gpus,
    )


def _collective(value: Collective | str) -> Collective:
    text = value.value if isinstance(value, Collective) else str(value).lower()
    if text == "reduce_scatter":
        text = Collective.REDUCESCATTER.value
    for c in COLLECTIVES:
        if c.value == text:
            return c
    raise UsageError(f"cannot generate collective {text!r} (choose from "
                     f"{', '.join(c.value for c in COLLECTIVES)})")


def _protocol(value: Protocol | str) -> Protocol:
    if isinstance(value, Protocol):
        return value
    for p in Protocol:
        if p.value.lower() == str(value).lower():
            return p
    raise UsageError(f"unknown protocol {value!r} (choose from {', '.join(p.value for p in Protocol)})")


def _positive(what: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{what} must be an integer >= 1, got {value!r}")


def check_plan_size(coll: Collective, algo: str, n: int, parallel: int, C: int) -> None:
    """Refuse plans whose step count would exhaust memory (estimate, per the layouts below):
    ``UsageError``. ``generate`` calls it, and sweep specs at load, so that both refuse the same
    plans (``parallel``: threadblocks per peer of a direct plan, channels of a ring)."""
    m = C // parallel  # chunks a threadblock (ring) moves per slice, a step each
    if algo == "direct":
        per_tb = (4 if coll is Collective.ALLREDUCE else 2) * m
        steps = n * (n - 1) * parallel * per_tb + n * parallel * 2 * n
    else:
        # alltoall: n-1 sends, n(n-1)/2 receives per chunk column, and n-1 copies (in place) or 1
        per_tb = (2 * n + n * (n - 1) // 2 if coll is Collective.ALLTOALL else 2 * n) * m
        steps = n * parallel * per_tb
    if steps > MAX_STEPS:
        raise UsageError(f"the requested {algo} {coll.value} plan would have about {steps:,} steps, "
                         f"more than the {MAX_STEPS:,} supported")


@dataclass(frozen=True, slots=True)
class _Spec:
    """One generation request after validation. ``parallel`` = K (direct) or rings (ring);
    ``m`` = chunks each threadblock moves per slice; ``C`` = chunks per rank slice."""

    coll: Collective
    n: int
    parallel: int
    m: int
    C: int
    inplace: bool


class _StepCache:
    """Interns identical steps: many threadblocks share the same step values (e.g. every
    allgather threadblock of one GPU and one k sends the same sub-slice), and reusing the
    frozen instances keeps generation of 10^5-step plans fast."""

    def __init__(self) -> None:
        self._steps: dict[tuple[object, ...], Step] = {}
        self.rows: dict[int, list[list[Step]]] = {}  # per-peer receive steps of direct allgather, per k

    def __call__(self, index: int, type_: StepType, src: tuple[Buffer, int] | None,
                 dst: tuple[Buffer, int] | None, count: int, dep: tuple[int, int] | None = None,
                 has_dependent: bool = False) -> Step:
        key = (index, type_, src, dst, count, dep, has_dependent)
        st = self._steps.get(key)
        if st is None:
            st = Step(index=index, type=type_,
                      src_buffer=None if src is None else src[0], src_offset=None if src is None else src[1],
                      dst_buffer=None if dst is None else dst[0], dst_offset=None if dst is None else dst[1],
                      count=count,
                      depend_tb=None if dep is None else dep[0], depend_step=None if dep is None else dep[1],
                      has_dependent=has_dependent)
            self._steps[key] = st
        return st


# A step before indices are known: (type, src, dst, count, dependency, has_dependent).
_Proto = tuple[StepType, tuple[Buffer, int] | None, tuple[Buffer, int] | None, int,
               tuple[int, int] | None, bool]


def _tb(make: _StepCache, tb_id: int, send: int | None, recv: int | None, channel: int,
        protos: list[_Proto]) -> Threadblock:
    steps = tuple(make(i, t, s, d, c, dep, hd) for i, (t, s, d, c, dep, hd) in enumerate(protos))
    return Threadblock(id=tb_id, send_peer=send, recv_peer=recv, channel=channel, steps=steps)


def _buffer_sizes(spec: _Spec) -> tuple[int, int]:
    """(i_chunks, o_chunks) of one GPU, MSCCLang-style (reference §3.2)."""
    n, C, coll = spec.n, spec.C, spec.coll
    if coll is Collective.ALLGATHER:
        return (0 if spec.inplace else C), n * C
    if coll is Collective.REDUCESCATTER:
        return n * C, (0 if spec.inplace else C)
    return n * C, (0 if spec.inplace else n * C)


def _locations(spec: _Spec) -> tuple[Callable[[int, int], tuple[Buffer, int]],
                                     Callable[[int, int], tuple[Buffer, int]]]:
    """(where rank r holds input chunk j, where rank r's result chunk j goes), with ``j``
    indexing the collective's conventional layout and the in-place aliases applied
    (reference §4)."""
    C, coll, inplace = spec.C, spec.coll, spec.inplace
    if coll is Collective.ALLGATHER:
        if inplace:
            return (lambda r, j: (_O, r * C + j)), (lambda r, j: (_O, j))
        return (lambda r, j: (_I, j)), (lambda r, j: (_O, j))
    if coll is Collective.REDUCESCATTER:
        if inplace:
            return (lambda r, j: (_I, j)), (lambda r, j: (_I, r * C + j))
        return (lambda r, j: (_I, j)), (lambda r, j: (_O, j))
    if inplace:
        return (lambda r, j: (_I, j)), (lambda r, j: (_I, j))
    return (lambda r, j: (_I, j)), (lambda r, j: (_O, j))


def _direct_gpu(spec: _Spec, g: int, make: _StepCache) -> Gpu:
    n, K, C, coll = spec.n, spec.parallel, spec.C, spec.coll
    peers = [p for p in range(n) if p != g]
    scratch = 0
    if coll is Collective.ALLGATHER:
        tbs = _direct_gather(spec, g, peers, make)
    elif coll is Collective.ALLTOALL:
        tbs = _direct_alltoall(spec, g, peers)
    else:
        scratch = (n - 2) * C
        tbs = [_tb(make, pi * K + k, p, p, k, _direct_reduce(spec, g, p, pi, k))
               for pi, p in enumerate(peers) for k in range(K)]
    i_chunks, o_chunks = _buffer_sizes(spec)
    return Gpu(id=g, input_chunks=i_chunks, output_chunks=o_chunks, scratch_chunks=scratch,
               threadblocks=_mark_dependents(tuple(tbs)))


def _direct_gather(spec: _Spec, g: int, peers: list[int], make: _StepCache) -> list[Threadblock]:
    """Direct allgather threadblocks of GPU g. Written out by hand, without the generic step
    prototypes, because the speed benchmark generates 64 GPUs x 1,008 of them: the sends of
    sub-slice k are the same steps in every threadblock of that k, and the receives of (p, k)
    the same steps on every GPU, so only Threadblock objects are built per threadblock. Each
    threadblock alternates one-chunk sends and receives (see the module docstring)."""
    K, m, C, inplace = spec.parallel, spec.m, spec.C, spec.inplace
    sends = [[make(2 * j, _SEND, (_O, g * C + lo + j) if inplace else (_I, lo + j), (_O, g * C + lo + j), 1)
              for j in range(m)] for lo in range(0, K * m, m)]
    copies = [] if inplace else [make(2 * m, _CPY, (_I, lo), (_O, g * C + lo), m)
                                 for lo in range(0, K * m, m)]
    tbs: list[Threadblock] = []
    for pi, p in enumerate(peers):
        row = make.rows.get(p)
        if row is None:
            row = [[make(2 * j + 1, _RECV, (_O, p * C + lo + j) if inplace else (_I, lo + j),
                         (_O, p * C + lo + j), 1) for j in range(m)]
                   for lo in range(0, K * m, m)]
            make.rows[p] = row
        base = pi * K
        for k in range(K):
            steps = _alternate(sends[k], row[k])
            if not inplace and not pi:
                steps = (*steps, copies[k])
            tbs.append(Threadblock(id=base + k, send_peer=p, recv_peer=p, channel=k, steps=steps))
    return tbs


def _alternate(sends: list[Step], recvs: list[Step]) -> tuple[Step, ...]:
    """``s r s r ...``: a direct threadblock's one-chunk sends, each followed by the receive of
    the same chunk from the peer (one send ahead at most: see the module docstring)."""
    return tuple(st for pair in zip(sends, recvs, strict=True) for st in pair)


def _direct_alltoall(spec: _Spec, g: int, peers: list[int]) -> list[Threadblock]:
    """Direct alltoall threadblocks of GPU g: send block (p, k) of my input, receive p's block
    for me, a chunk at a time. Every step is distinct (offsets depend on g, p and k), so steps
    are built directly rather than through the interning cache."""
    K, m, C = spec.parallel, spec.m, spec.C
    out = _I if spec.inplace else _O
    tbs: list[Threadblock] = []
    for pi, p in enumerate(peers):
        for k in range(K):
            lo = k * m
            mine, theirs = g * C + lo, p * C + lo
            steps: tuple[Step, ...] = _alternate(
                [Step(2 * j, _SEND, _I, theirs + j, out, mine + j, 1) for j in range(m)],
                [Step(2 * j + 1, _RECV, _I, mine + j, out, theirs + j, 1) for j in range(m)])
            if pi == 0 and not spec.inplace:
                steps = (*steps, Step(2 * m, _CPY, _I, mine, _O, mine, m))
            tbs.append(Threadblock(id=pi * K + k, send_peer=p, recv_peer=p, channel=k, steps=steps))
    return tbs


def _landing(spec: _Spec, receiver: int, sender: int, lo: int) -> tuple[Buffer, int]:
    """Where ``sender``'s reduce-scatter contribution lands on ``receiver`` (descriptive only)."""
    pi = sender if sender < receiver else sender - 1  # sender's position among receiver's peers
    if pi == 0:
        return _acc(spec, receiver, lo)
    return (_S, (pi - 1) * spec.C + lo)


def _acc(spec: _Spec, g: int, lo: int) -> tuple[Buffer, int]:
    """The location of GPU g's reduced sub-slice starting at ``lo`` (within its slice)."""
    C = spec.C
    if spec.coll is Collective.REDUCESCATTER and not spec.inplace:
        return (_O, lo)
    if spec.coll is Collective.ALLREDUCE and not spec.inplace:
        return (_O, g * C + lo)
    return (_I, g * C + lo)


def _direct_reduce(spec: _Spec, g: int, p: int, pi: int, k: int) -> list[_Proto]:
    """Reduce-scatter (and, for allreduce, the all-gather after it) of threadblock (p, k); the
    exchanges with p alternate one-chunk sends and receives (see the module docstring)."""
    n, K, m, C = spec.n, spec.parallel, spec.m, spec.C
    lo = k * m
    acc = _acc(spec, g, lo)
    protos: list[_Proto] = []
    for j in range(m):
        protos.append((_SEND, (_I, p * C + lo + j), _landing(spec, p, g, lo + j), 1, None, False))
        if pi == 0:
            protos.append((_RRC, (_I, g * C + lo + j), _acc(spec, g, lo + j), 1, None, False))
        else:
            protos.append((_RECV, (_I, g * C + lo + j), (_S, (pi - 1) * C + lo + j), 1, None, False))
    received = 2 * m - 1  # the last receive of the exchange, in every threadblock
    others = n - 2  # peers whose contributions arrive in scratch
    if pi == 0:
        # wait for the other receives of this k (their last): nops carry all but the first
        # dependency, the first reduction carries that one (reference §6.3)
        for j in range(2, others + 1):
            protos.append((_NOP, None, None, 0, (j * K + k, received), False))
        for j in range(1, others + 1):
            dep = (j * K + k, received) if j == 1 else None
            # hasdep=1 ends the executors' fused pass: at most MAX_REDUCE_FUSION sources each
            cut = j % MAX_REDUCE_FUSION == 0 and j < others
            protos.append((_RE, (_S, (j - 1) * C + lo), acc, m, dep, cut))
    # the reducer's last step index, by the same construction
    reducer_last = received + max(others - 1, 0) + others
    if spec.coll is Collective.ALLREDUCE:
        for j in range(m):
            mine, theirs = _acc(spec, g, lo + j), _acc(spec, p, lo + j)
            dep = (k, reducer_last) if pi and not j else None
            protos.append((_SEND, mine, mine, 1, dep, False))
            protos.append((_RECV, theirs, theirs, 1, None, False))
    return protos


def _mark_dependents(tbs: tuple[Threadblock, ...]) -> tuple[Threadblock, ...]:
    """Set ``has_dependent`` on every step some other step waits on (reference §3.4)."""
    targets: set[tuple[int, int]] = set()
    for tb in tbs:
        for st in tb.steps:
            if st.depend_tb is not None and st.depend_step is not None:
                targets.add((st.depend_tb, st.depend_step))
    if not targets:
        return tbs
    out = []
    for tb in tbs:
        steps = tb.steps
        if any((tb.id, st.index) in targets and not st.has_dependent for st in steps):
            steps = tuple(_with_dependent(st) if (tb.id, st.index) in targets else st for st in steps)
            tb = Threadblock(id=tb.id, send_peer=tb.send_peer, recv_peer=tb.recv_peer,
                             channel=tb.channel, steps=steps)
        out.append(tb)
    return tuple(out)


def _with_dependent(st: Step) -> Step:
    return Step(index=st.index, type=st.type, src_buffer=st.src_buffer, src_offset=st.src_offset,
                dst_buffer=st.dst_buffer, dst_offset=st.dst_offset, count=st.count,
                depend_tb=st.depend_tb, depend_step=st.depend_step, has_dependent=True)


def _ring_gpu(spec: _Spec, g: int, make: _StepCache) -> Gpu:
    n, M, m, C, coll = spec.n, spec.parallel, spec.m, spec.C, spec.coll
    src_at, dst_at = _locations(spec)
    nxt, prv = (g + 1) % n, (g - 1) % n
    tbs: list[Threadblock] = []
    scratch = 0
    for c in range(M):
        lo = c * m
        # a ring moves its sub-slice a chunk column at a time, each column's whole pass before
        # the next: no more than one send ahead of its receives (see the module docstring)
        protos: list[_Proto] = []
        if coll is Collective.ALLTOALL:
            protos = _ring_alltoall(spec, g, lo)
            scratch = _ring_alltoall_scratch(spec)
        else:
            column = _ring_gather if coll is Collective.ALLGATHER else _ring_reduce
            for j in range(m):
                protos.extend(column(spec, g, lo + j))
        if not spec.inplace and coll in (Collective.ALLGATHER, Collective.ALLTOALL):
            own = g * C + lo
            src = src_at(g, lo if coll is Collective.ALLGATHER else own)
            protos.append((_CPY, src, dst_at(g, own), m, None, False))
        tbs.append(_tb(make, c, nxt, prv, c, protos))
    i_chunks, o_chunks = _buffer_sizes(spec)
    return Gpu(id=g, input_chunks=i_chunks, output_chunks=o_chunks, scratch_chunks=scratch,
               threadblocks=tuple(tbs))


def _ring_gather(spec: _Spec, g: int, lo: int) -> list[_Proto]:
    """One chunk column (chunk ``lo`` of every slice): ``s`` of the own chunk, then receive
    those of g-1, g-2, ... forwarding all but the last."""
    n, C = spec.n, spec.C
    src_at, dst_at = _locations(spec)
    protos: list[_Proto] = [(_SEND, src_at(g, lo), dst_at((g + 1) % n, g * C + lo), 1, None, False)]
    for j in range(1, n):
        origin = (g - j) % n
        slot = dst_at(g, origin * C + lo)
        came_from = src_at(origin, lo) if j == 1 else slot
        protos.append((_RCS if j < n - 1 else _RECV, came_from, slot, 1, None, False))
    return protos


def _ring_reduce(spec: _Spec, g: int, lo: int) -> list[_Proto]:
    """Reduce-scatter ring of one chunk column (the chain for slice d starts at d+1 and ends,
    reduced, at d); for allreduce the last reduction forwards the result and an all-gather ring
    follows."""
    n, C = spec.n, spec.C
    protos: list[_Proto] = []
    first = (_I, ((g - 1) % n) * C + lo)
    protos.append((_SEND, first, first, 1, None, False))
    for j in range(1, n - 1):
        part = (_I, ((g - 1 - j) % n) * C + lo)
        protos.append((_RRS, part, part, 1, None, False))
    own = (_I, g * C + lo)
    mine = _acc(spec, g, lo)
    if spec.coll is Collective.REDUCESCATTER:
        protos.append((_RRC, own, mine, 1, None, False))
        return protos
    protos.append((_RRCS, own, mine, 1, None, False))
    for j in range(1, n):
        slot = _acc(spec, (g - j) % n, lo)
        protos.append((_RCS if j < n - 1 else _RECV, slot, slot, 1, None, False))
    return protos


#: sends a ring alltoall's threadblock runs ahead of its receives. The executors' flow control
#: (nuna.plan.flow) lets a Simple sender run two sends ahead of its receiver, but a forward
#: (``rcs``) needs both a received step and a free one on the next connection: with two sends
#: ahead on every GPU, every connection round the ring is full and every forward waits for the
#: next GPU's (a cycle ``nuna validate`` finds). One ahead keeps one block on each connection.
_RING_ALLTOALL_AHEAD = 1


def _ring_alltoall(spec: _Spec, g: int, lo: int) -> list[_Proto]:
    """Store-and-forward alltoall of one ring's sub-slice (chunks ``lo`` to ``lo + m`` of every
    block), a chunk column at a time (see the module docstring for the order)."""
    n, m, C = spec.n, spec.m, spec.C
    src_at, dst_at = _locations(spec)
    protos: list[_Proto] = []
    staged = _ring_alltoall_staged(spec)

    def outgoing(r: int, dest: int, col: int) -> tuple[Buffer, int]:
        # in place, a block received for me lands where my block for its origin is: my
        # blocks go out from a copy in scratch (_ring_alltoall_scratch), made first
        return (_S, C + dest * C + col) if staged else src_at(r, dest * C + col)

    if staged:
        protos.extend((_CPY, src_at(g, ((g + h) % n) * C + lo), outgoing(g, (g + h) % n, lo), m, None, False)
                      for h in range(1, n))
    order = _ring_alltoall_order(n)
    for col in range(lo, lo + m):
        relay = (_S, col)
        for a, h in order:
            origin, dest = (g - a) % n, (g + h) % n
            if a == 0:  # one of my own blocks, to dest
                lands = dst_at((g + 1) % n, g * C + col) if h == 1 else relay
                protos.append((_SEND, outgoing(g, dest, col), lands, 1, None, False))
                continue
            came_from = outgoing(origin, dest, col) if a == 1 else relay
            if h == 0:  # origin's block for me
                protos.append((_RECV, came_from, dst_at(g, origin * C + col), 1, None, False))
            else:
                protos.append((_RCS, came_from, relay, 1, None, False))
    return protos


def _ring_alltoall_staged(spec: _Spec) -> bool:
    """Whether a ring alltoall's GPUs send their blocks from a copy: in place from 3 GPUs, where
    a block for a GPU can arrive before the GPU has sent its own block for that origin (with 2
    GPUs each sends before it receives)."""
    return spec.inplace and spec.n > 2


def _ring_alltoall_scratch(spec: _Spec) -> int:
    """Scratch chunks of a ring alltoall GPU: each ring's relay sub-slice (``C`` in all, from 3
    GPUs), and when staged (:func:`_ring_alltoall_staged`) a copy of the GPU's outgoing blocks
    after them (``n * C`` more, indexed like the buffer, its own slice unused)."""
    if spec.n == 2:
        return 0
    return spec.C + (spec.n * spec.C if _ring_alltoall_staged(spec) else 0)


def _ring_alltoall_order(n: int) -> list[tuple[int, int]]:
    """Every GPU's steps of a ring alltoall, as (hops the block has come, hops it has to go):
    (0, h) sends my block for g+h, (a, 0) receives the block of g-a for me, (a, h) receives a
    block and forwards it (``rcs``). Every GPU runs the same order, so what arrives is what its
    predecessor sent: block (a, h) sent arrives as (a+1, h-1). A GPU sends its farthest blocks
    first, :data:`_RING_ALLTOALL_AHEAD` of them before it receives, then after each receive sends
    one block (the one it forwards, else its next own), so that it never runs more sends ahead of
    its receives than the executors' flow control lets a forwarding ring run."""
    own = [(0, h) for h in range(n - 1, 0, -1)]
    sent = own[:_RING_ALLTOALL_AHEAD]
    del own[:_RING_ALLTOALL_AHEAD]
    order = list(sent)
    k = 0
    while k < len(sent):
        a, h = sent[k]
        got = (a + 1, h - 1)
        k += 1
        order.append(got)
        if got[1] > 0:  # received and forwarded in one step
            sent.append(got)
        elif own:
            order.append(own[0])
            sent.append(own.pop(0))
    return order
