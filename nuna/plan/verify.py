"""Plan verification: structure, FIFO connection matching, deadlock freedom, then semantics.

:func:`verify` collects every finding into a :class:`Report` instead of stopping at the first,
so ``nuna validate`` can list them all. Severity follows what breaks a faithful replay
(reference ``msccl-xml.md`` §9):

* **errors**: the plan cannot be replayed or computes the wrong result: missing/duplicate ids,
  peers out of range or to self, chunk ranges outside the declared buffers, dangling
  dependencies, connections whose send-type and receive-type steps do not pair up in FIFO order
  with equal counts, two threadblocks on one connection, a cycle of program order +
  dependencies + data edges (deadlock), a wrong collective result;
* **warnings**: things the MSCCL executors reject or tolerate although they are dangerous, but
  which a replay handles (defaulted header attributes, ``chan`` beyond ``nchannels``, more
  than 64 steps, ``depid > 127``, dependencies on steps without ``hasdep``, ``nop`` oddities,
  chains of ``re`` steps the executors fuse into a pass that differs from the plan
  (:mod:`nuna.plan.fusion`), data races from the semantic check). ``strict=True`` turns every
  warning into an error;
* **notes**: facts worth knowing that are not wrong.

Repetitive warnings are reported once with a count. With a :class:`~nuna.plan.xml.SourceMap`
every message starts ``file:line:``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from nuna.errors import PlanError, UsageError
from nuna.plan.dag import (
    NONE,
    STEP_CODE,
    STEP_TYPES,
    DagIssue,
    FlatPlan,
    ReplayDag,
    _groups,
    analyze,
    cycle_path,
    find_cycle,
    flatten,
)
from nuna.plan.flow import credit_sources, flow_control_depth, flow_rule_text, with_flow_control
from nuna.plan.fusion import MAX_REDUCE_FUSION, ReduceFusion, reduce_fusion
from nuna.plan.ir import Buffer, Collective, Plan, StepType
from nuna.plan.slices import Slicing, executor_slicing
from nuna.plan.xml import SourceMap, canonical_placement
from nuna.units import check_size_bytes

#: Errors listed one by one; further ones are summarised in one line.
MAX_ERRORS = 50
#: Limits of the MSCCL executors (reference §3, §9) that produce warnings.
EXECUTOR_MAX_CHANNEL = 32
EXECUTOR_MAX_STEPS_NEW = 64
EXECUTOR_MAX_STEPS_OLD = 256
EXECUTOR_MAX_COUNT = 72
EXECUTOR_MAX_TBS = 1024
EXECUTOR_MAX_TBS_PER_CHANNEL = 32
EXECUTOR_MAX_DEPID = 127
EXECUTOR_MAX_STR = 255
EXECUTOR_MAX_CHILDREN = 1024

# (reads a local source, writes a local destination) per step type (reference §5)
_LOCAL_OPERANDS: dict[StepType, tuple[bool, bool]] = {
    StepType.SEND: (True, False),
    StepType.RECV: (False, True),
    StepType.RECV_COPY_SEND: (False, True),
    StepType.RECV_REDUCE_COPY: (True, True),
    StepType.RECV_REDUCE_SEND: (True, False),
    StepType.RECV_REDUCE_COPY_SEND: (True, True),
    StepType.COPY: (True, True),
    StepType.REDUCE: (True, True),
    StepType.NOP: (False, False),
}
_READS = np.array([_LOCAL_OPERANDS[t][0] for t in STEP_TYPES], dtype=np.bool_)
_WRITES = np.array([_LOCAL_OPERANDS[t][1] for t in STEP_TYPES], dtype=np.bool_)
_MODELLED = (Collective.ALLGATHER, Collective.ALLREDUCE, Collective.REDUCESCATTER, Collective.ALLTOALL)
_NOP = STEP_CODE[StepType.NOP]
_RRC = STEP_CODE[StepType.RECV_REDUCE_COPY]
_BUF_NAMES = ("input", "output", "scratch")
_BUF_ATTRS = ("i_chunks", "o_chunks", "s_chunks")


@dataclass(frozen=True, slots=True)
class Report:
    """Findings of :func:`verify`, one line each. The plan is valid when ``errors`` is empty."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_on_error(self) -> None:
        """Raise ``PlanError`` with the first error (and how many more) if there is one."""
        if self.errors:
            more = len(self.errors) - 1
            raise PlanError(self.errors[0] + (f" (and {more} more error{'s' * (more > 1)})" if more else ""))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"ok": self.ok, "errors": list(self.errors), "warnings": list(self.warnings),
                "notes": list(self.notes)}


class _Findings:
    """Accumulates messages; groups repeated warnings of one kind into one line."""

    def __init__(self, plan: Plan, source: SourceMap | None) -> None:
        self.plan = plan
        self.source = source
        self.errors: list[str] = []
        self.extra_errors = 0
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self._grouped: dict[str, tuple[str, int]] = {}
        self._group_order: list[str] = []

    # locations ------------------------------------------------------------------------

    def at_plan(self) -> str:
        return self.source.at_algo() if self.source is not None else ""

    def at_gpu(self, gi: int) -> str:
        prefix = self.source.at_gpu(gi) if self.source is not None else ""
        return f"{prefix}gpu {self.plan.gpus[gi].id}: "

    def at_tb(self, gi: int, ti: int) -> str:
        prefix = self.source.at_tb(gi, ti) if self.source is not None else ""
        g = self.plan.gpus[gi]
        return f"{prefix}gpu {g.id} tb {g.threadblocks[ti].id}: "

    def at_step(self, gi: int, ti: int, si: int) -> str:
        prefix = self.source.at_step(gi, ti, si) if self.source is not None else ""
        g = self.plan.gpus[gi]
        tb = g.threadblocks[ti]
        return f"{prefix}gpu {g.id} tb {tb.id} step {tb.steps[si].index}: "

    # recording ------------------------------------------------------------------------

    def error(self, msg: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(msg)
        else:
            self.extra_errors += 1

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def warn_grouped(self, kind: str, msg: str) -> None:
        """Record a warning that may repeat many times; only the first is spelled out."""
        hit = self._grouped.get(kind)
        if hit is None:
            self._grouped[kind] = (msg, 1)
            self._group_order.append(kind)
        else:
            self._grouped[kind] = (hit[0], hit[1] + 1)

    def note(self, msg: str) -> None:
        self.notes.append(msg)

    def report(self, strict: bool) -> Report:
        warnings = list(self.warnings)
        for kind in self._group_order:
            msg, count = self._grouped[kind]
            warnings.append(msg if count == 1 else f"{msg} (and {count - 1} more like it)")
        errors = list(self.errors)
        if self.extra_errors:
            errors.append(f"{self.at_plan()}... and {self.extra_errors} more errors")
        if strict:
            errors.extend(warnings)
            warnings = []
        return Report(tuple(errors), tuple(warnings), tuple(self.notes))


def verify(plan: Plan, *, strict: bool = False, source: SourceMap | None = None,
           semantics: bool = True) -> Report:
    """Check ``plan`` and return every finding (see the module doc for what is checked).

    ``source`` (from :func:`nuna.plan.xml.load_with_source`) adds ``file:line:`` prefixes and
    the reader's own warnings. ``semantics=False`` skips the symbolic data-flow check (the
    structural and deadlock checks still run). Checks run in levels (GPUs, threadblocks,
    steps, connections and dependencies, deadlock, semantics) and stop after the first level
    with errors, so one mistake yields one message, not a cascade.
    """
    f = _Findings(plan, source)
    if source is not None:
        for msg in source.warnings:
            f.warn(msg)
    _check_header(plan, f)
    try:
        flat = flatten(plan)
    except PlanError as err:
        f.error(f"{f.at_plan()}{err}")
        return f.report(strict)
    # later checks rely on what earlier ones establish (GPU ids before threadblock ids before
    # steps, all of it before matching connections); stopping at the first level that fails
    # keeps one mistake to one message
    if _check_gpus(plan, f):
        _check_threadblocks(plan, flat, f)
    if not f.errors:
        _check_steps(plan, flat, f)
    _check_placement(plan, f)
    if f.errors:
        return f.report(strict)
    result = analyze(plan, limit=MAX_ERRORS)
    for issue in result.issues:
        where = _issue_prefix(f, issue)
        f.error(f"{where}{issue.message}")
    if result.dag is None:
        return f.report(strict)
    fusion = reduce_fusion(flat)
    _check_hasdep(flat, result.waited_nodes, fusion, f)
    _check_fusion(flat, fusion, f)
    if f.errors:
        return f.report(strict)
    dag = result.dag
    cycle = find_cycle(dag)
    if cycle is not None:
        f.error(_cycle_message(flat, dag, cycle, f))
        return f.report(strict)
    # the executors' connections hold a few sends' data: a sender waits for its receiver's
    # credit, which acyclic dependencies alone do not guarantee (nuna.plan.flow)
    depth = flow_control_depth(plan.protocol)
    cycle = find_cycle(with_flow_control(dag, depth))
    if cycle is not None:
        f.error(_cycle_message(flat, dag, cycle, f, through_flow_control=True))
        return f.report(strict)
    if semantics:
        _run_semantics(plan, dag, f)
    return f.report(strict)


def verify_placement(plan: Plan, *, strict: bool = False) -> Report:
    """Check only ``plan``'s placement annotations (what :func:`verify` checks of them), for a
    plan whose program is that of a plan :func:`verify` passed: a pass's output, which may
    differ from its input only in its placement (``nuna.passes.base``)."""
    f = _Findings(plan, None)
    _check_placement(plan, f)
    return f.report(strict)


def _issue_prefix(f: _Findings, issue: DagIssue) -> str:
    if issue.gpu_pos is None:
        return f.at_plan()
    if issue.tb_pos is None:
        return f.at_gpu(issue.gpu_pos)
    if issue.step_pos is None:
        return f.at_tb(issue.gpu_pos, issue.tb_pos)
    return f.at_step(issue.gpu_pos, issue.tb_pos, issue.step_pos)


# ---------------------------------------------------------------------------------------------


def _check_defaulted(plan: Plan, f: _Findings) -> None:
    """Warn about header attributes the file left out and the reader filled in."""
    at = f.at_plan()
    absent = [a for a in ("outofplace", "minBytes", "maxBytes") if a in plan.defaulted]
    if absent:
        values = {"outofplace": int(plan.outofplace), "minBytes": plan.min_bytes, "maxBytes": plan.max_bytes}
        shown = " ".join(f"{a}={values[a]}" for a in absent)
        f.warn(f"{at}<algo>: {', '.join(absent)} absent, defaulted to {shown} (reference §3.1; the current "
               "MSCCL executor requires them)")
    if "name" in plan.defaulted:
        f.warn(f"{at}<algo>: name absent (the old MSCCL executor requires it)")


def _check_header(plan: Plan, f: _Findings) -> None:
    at = f.at_plan()
    _check_defaulted(plan, f)
    for attr in ("ngpus", "nchannels", "nchunksperloop"):
        if getattr(plan, attr) < 1:
            f.error(f"{at}<algo>: {attr}={getattr(plan, attr)} must be at least 1")
    for attr, xml_name in (("min_bytes", "minBytes"), ("max_bytes", "maxBytes")):
        if getattr(plan, attr) < 0:
            f.error(f"{at}<algo>: {xml_name}={getattr(plan, attr)} must not be negative")
    if len(plan.name) > EXECUTOR_MAX_STR:
        f.warn(f"{at}<algo>: name is {len(plan.name)} characters; the executors read at most "
               f"{EXECUTOR_MAX_STR}")
    if plan.max_bytes and plan.min_bytes > plan.max_bytes:
        f.warn(f"{at}<algo>: minBytes {plan.min_bytes} > maxBytes {plan.max_bytes}: the plan is never "
               "selected")
    elif plan.max_bytes and plan.min_bytes == plan.max_bytes:
        # reference §4: the old executor selects minBytes <= size < maxBytes, the current one
        # minBytes <= size <= maxBytes, so a one-size range is the current executor's alone
        f.note(f"{at}<algo>: minBytes = maxBytes = {plan.max_bytes}: the old MSCCL executor, whose maxBytes "
               "is exclusive, never selects the plan (the current one selects it at exactly that size)")
    if not plan.inplace and not plan.outofplace:
        f.warn(f"{at}<algo>: inplace=0 and outofplace=0: the plan is never selected")
    if plan.collective is Collective.CUSTOM:
        f.note(f"{at}<algo>: coll=\"custom\" is the old executor's; the current executor does not accept it")
    if plan.coll_spelling == "reduce_scatter":
        f.note(f"{at}<algo>: coll=\"reduce_scatter\" is the old executor's spelling; the current executor "
               "expects \"reducescatter\"")


def gpu_count_mismatch(plan: Plan) -> str | None:
    """What is wrong when ``ngpus`` disagrees with the ``<gpu>`` elements, else None.

    One wording for every command that meets such a plan: validate reports it as an error,
    simulate refuses the plan, info and dag (which describe the structure as written) warn.
    """
    if plan.ngpus == len(plan.gpus):
        return None
    return f"ngpus={plan.ngpus} but the plan has {len(plan.gpus)} <gpu> elements"


def self_peer_threadblocks(flat: FlatPlan) -> tuple[tuple[str, npt.NDArray[np.intp]], ...]:
    """Per role (``send``, ``recv``), the threadblocks (rows of ``flat``'s threadblock arrays)
    whose peer is their own GPU: an error for validate, and a plan the simulator refuses (an
    executor has no connection from a GPU to itself)."""
    return tuple((role, np.flatnonzero((col != NONE) & (col == flat.tb_gpu)))
                 for role, col in (("send", flat.tb_send), ("recv", flat.tb_recv)))


def self_peer_message(flat: FlatPlan, role: str, t: int) -> str:
    """What is wrong with threadblock row ``t`` of :func:`self_peer_threadblocks`."""
    col = flat.tb_send if role == "send" else flat.tb_recv
    return f"{role} peer is the gpu itself ({role}={int(col[t])})"


def _check_gpus(plan: Plan, f: _Findings) -> bool:
    """Ids and buffer sizes; False when later checks cannot index GPUs by id."""
    at = f.at_plan()
    ok = True
    mismatch = gpu_count_mismatch(plan)
    if plan.ngpus >= 1 and mismatch is not None:
        f.error(f"{at}<algo>: {mismatch}")
        ok = False
    seen: Counter[int] = Counter(g.id for g in plan.gpus)
    for gi, g in enumerate(plan.gpus):
        if seen[g.id] > 1:
            f.error(f"{f.at_gpu(gi)}gpu id {g.id} is declared {seen[g.id]} times")
            seen[g.id] = 0  # report each duplicate id once
            ok = False
        elif g.id < 0 or g.id >= max(len(plan.gpus), plan.ngpus):
            f.error(f"{f.at_gpu(gi)}gpu id {g.id} is out of range 0..{max(len(plan.gpus), plan.ngpus) - 1}")
            ok = False
        for attr, xml_name in (("input_chunks", "i_chunks"), ("output_chunks", "o_chunks"),
                               ("scratch_chunks", "s_chunks")):
            if getattr(g, attr) < 0:
                f.error(f"{f.at_gpu(gi)}{xml_name}={getattr(g, attr)} must not be negative")
        # the old executor's consistency check (reference §3.2); the new one does not check
        coll = plan.collective
        in_mult = plan.ngpus if coll is Collective.ALLGATHER else 1
        out_mult = plan.ngpus if coll is Collective.REDUCESCATTER else 1
        if coll is not Collective.CUSTOM and (
                (g.input_chunks > 0 and g.input_chunks * in_mult != plan.nchunksperloop)
                or (g.output_chunks > 0 and g.output_chunks * out_mult != plan.nchunksperloop)):
            f.warn_grouped("chunks-vs-loop",
                           f"{f.at_gpu(gi)}i_chunks={g.input_chunks} o_chunks={g.output_chunks} do not match "
                           f"nchunksperloop={plan.nchunksperloop} for {coll.value} (the old MSCCL executor "
                           "rejects this)")
    if ok and sorted(seen) != list(range(len(plan.gpus))):
        f.error(f"{at}<algo>: gpu ids must be 0..{len(plan.gpus) - 1}")
        ok = False
    declared = sum(g.input_chunks + g.output_chunks + g.scratch_chunks for g in plan.gpus)
    if plan.collective in _MODELLED and plan.gpus and plan.nchunksperloop > declared:
        # the result of these collectives alone takes nchunksperloop chunks or more, summed over
        # the GPUs; the semantic check would otherwise enumerate a result that cannot exist
        f.error(f"{at}<algo>: nchunksperloop={plan.nchunksperloop} is more than all declared buffers hold "
                f"({declared} chunks over {len(plan.gpus)} gpus)")
        ok = False
    return ok


def _check_threadblocks(plan: Plan, flat: FlatPlan, f: _Findings) -> bool:
    """Ids, peers and channels; False when the DAG checks would only produce a cascade."""
    ok = True
    ntb = int(flat.tb_gpu.shape[0])
    if ntb == 0:
        return ok
    at_tb = _TbNamer(flat, f)
    # threadblocks are sorted by (gpu, id); within a gpu the k-th must have id k
    gpu_start = np.flatnonzero(np.r_[True, flat.tb_gpu[1:] != flat.tb_gpu[:-1]])
    group = np.repeat(gpu_start, np.diff(np.r_[gpu_start, ntb]))
    rank = np.arange(ntb, dtype=np.int64) - group
    dup = np.r_[False, (flat.tb_gpu[1:] == flat.tb_gpu[:-1]) & (flat.tb_id[1:] == flat.tb_id[:-1])]
    for t in np.flatnonzero(dup).tolist():
        f.error(f"{at_tb(t)}threadblock id {int(flat.tb_id[t])} is declared more than once on gpu "
                f"{int(flat.tb_gpu[t])}")
        ok = False
    if ok:
        for t in np.flatnonzero(flat.tb_id != rank).tolist()[:1]:
            g = int(flat.tb_gpu[t])
            n = int(np.count_nonzero(flat.tb_gpu == g))
            f.error(f"{f.at_gpu(int(flat.tb_gpu_pos[t]))}threadblock ids must be 0..{n - 1} "
                    f"(tb {int(flat.tb_id[t])} is the {_ordinal(int(rank[t]) + 1)} lowest id)")
            ok = False
    sizes = np.diff(np.r_[gpu_start, ntb])
    for s in np.flatnonzero(sizes > EXECUTOR_MAX_TBS).tolist():
        t = int(gpu_start[s])
        f.warn_grouped("many-tbs", f"{f.at_gpu(int(flat.tb_gpu_pos[t]))}{int(sizes[s])} threadblocks; the "
                                   f"MSCCL executor runs at most {EXECUTOR_MAX_TBS}")
    for role, own in self_peer_threadblocks(flat):
        for t in own.tolist():
            f.error(f"{at_tb(t)}{self_peer_message(flat, role, t)}")
            ok = False
    for role, col in (("send", flat.tb_send), ("recv", flat.tb_recv)):
        has = col != NONE
        for t in np.flatnonzero(has & (col != flat.tb_gpu) & ((col < 0) | (col >= plan.ngpus))).tolist():
            f.error(f"{at_tb(t)}{role}={int(col[t])} is not a gpu (ngpus={plan.ngpus})")
            ok = False
        # per (gpu, channel): at most 32 threadblocks with a peer of this role
        idx = np.flatnonzero(has)
        order, starts, counts = _groups(flat.tb_gpu[idx], flat.tb_chan[idx])
        for s, c in zip(starts[counts > EXECUTOR_MAX_TBS_PER_CHANNEL].tolist(),
                        counts[counts > EXECUTOR_MAX_TBS_PER_CHANNEL].tolist(), strict=True):
            t = int(idx[order[s]])
            f.warn_grouped("tbs-per-chan", f"{f.at_gpu(int(flat.tb_gpu_pos[t]))}{c} threadblocks with a "
                                           f"{role} peer on channel {int(flat.tb_chan[t])} (the MSCCL "
                                           f"executors allow {EXECUTOR_MAX_TBS_PER_CHANNEL})")
    has_peer = (flat.tb_send != NONE) | (flat.tb_recv != NONE)
    for t in np.flatnonzero((flat.tb_chan < 0) & has_peer).tolist():
        f.error(f"{at_tb(t)}chan={int(flat.tb_chan[t])} must be >= 0 for a threadblock with peers")
        ok = False
    for t in np.flatnonzero((flat.tb_chan < 0) & ~has_peer).tolist():
        f.warn_grouped("neg-chan", f"{at_tb(t)}chan={int(flat.tb_chan[t])} on a local-only threadblock (the "
                                   "MSCCL executors reject chan < 0)")
    for t in np.flatnonzero(has_peer & (flat.tb_chan >= plan.nchannels)).tolist():
        f.warn_grouped("chan-range", f"{at_tb(t)}chan={int(flat.tb_chan[t])} >= nchannels={plan.nchannels}: "
                                     "the executors set up connections only for channels < nchannels")
    for t in np.flatnonzero(flat.tb_chan > EXECUTOR_MAX_CHANNEL).tolist():
        f.warn_grouped("chan-max", f"{at_tb(t)}chan={int(flat.tb_chan[t])} > {EXECUTOR_MAX_CHANNEL} (the "
                                   "MSCCL executors reject it)")
    return ok


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class _TbNamer:
    """``file:line: gpu G tb T: `` of a threadblock given by its flat index."""

    def __init__(self, flat: FlatPlan, f: _Findings) -> None:
        self.flat = flat
        self.f = f

    def __call__(self, t: int) -> str:
        return self.f.at_tb(int(self.flat.tb_gpu_pos[t]), int(self.flat.tb_pos[t]))


def _check_steps(plan: Plan, flat: FlatPlan, f: _Findings) -> None:
    """Per-step checks over the flat arrays; Python loops only over the offending steps."""
    if flat.num_nodes == 0:
        return

    def at(n: int) -> str:
        return f.at_step(*flat.step_pos(n))

    at_tb = _TbNamer(flat, f)
    code = flat.code
    is_nop = code == _NOP
    tb_sizes = np.diff(flat.tb_indptr)
    # s numbering: the executors count steps by position
    odd_tbs = np.unique(flat.node_tb[flat.index != flat.node_pos])
    for t in odd_tbs.tolist():
        lo, hi = int(flat.tb_indptr[t]), int(flat.tb_indptr[t + 1])
        values = flat.index[lo:hi]
        what = ("s values repeat" if np.unique(values).shape[0] < values.shape[0]
                else "s values are not 0, 1, 2, ... in document order")
        f.warn_grouped("s-order", f"{at_tb(t)}{what}: the executors number steps by position, so "
                                  "dependencies naming s may wait for another step")
    for t in np.flatnonzero(tb_sizes > EXECUTOR_MAX_STEPS_NEW).tolist():
        n = int(tb_sizes[t])
        old = n > EXECUTOR_MAX_STEPS_OLD
        who = "both MSCCL executors reject" if old else "the current MSCCL executor's default build rejects"
        f.warn_grouped("many-steps", f"{at_tb(t)}{n} steps ({who} more than "
                                     f"{EXECUTOR_MAX_STEPS_OLD if old else EXECUTOR_MAX_STEPS_NEW})")
    count = flat.count
    for n in np.flatnonzero(count < 0).tolist():
        f.error(f"{at(n)}cnt={int(count[n])} must not be negative")
    for n in np.flatnonzero(~is_nop & (count == 0)).tolist():
        f.warn_grouped("cnt0", f"{at(n)}cnt=0 on a '{STEP_TYPES[int(code[n])].value}' step moves no data")
    for n in np.flatnonzero(~is_nop & (count >= EXECUTOR_MAX_COUNT)).tolist():
        f.warn_grouped("cnt-max", f"{at(n)}cnt={int(count[n])} (the MSCCL executors accept cnt < "
                                  f"{EXECUTOR_MAX_COUNT})")
    # operands each type reads/writes locally must exist and lie inside the declared buffers
    size_tab = np.array([[g.input_chunks, g.output_chunks, g.scratch_chunks] for g in plan.gpus],
                        dtype=np.int64).reshape(-1, 3)
    node_gpu_pos = flat.tb_gpu_pos[flat.node_tb]
    span = np.maximum(count, 1)
    for role, needs, buf, off in (("source", _READS[code], flat.src_buf, flat.src_off),
                                  ("destination", _WRITES[code], flat.dst_buf, flat.dst_off)):
        missing = needs & ((buf < 0) | (off == NONE))
        for n in np.flatnonzero(missing).tolist():
            f.error(f"{at(n)}'{STEP_TYPES[int(code[n])].value}' needs a {role} chunk but has "
                    "none (offset -1)")
        present = needs & ~missing
        size = np.where(present, size_tab[node_gpu_pos, np.where(present, buf, 0)], 0)
        outside = present & ((off < 0) | (off + span > size))
        for n in np.flatnonzero(outside).tolist():
            b = int(buf[n])
            o, last = int(off[n]), int(off[n] + span[n] - 1)
            rng = f"chunk {o}" if o == last else f"chunks {o}..{last}"
            msg = (f"{at(n)}{role} {_BUF_NAMES[b]} {rng} outside the buffer "
                   f"({_BUF_ATTRS[b]}={int(size[n])})")
            if code[n] == _RRC and role == "source" and o >= 0:
                # ncclize writes the sender's location into an rrc's src fields, and the
                # executors never bounds-check rrc (reference §5, §9): real plans read past here
                f.warn_grouped("rrc-src-range", f"{msg}: the executors do not bounds-check rrc and read "
                                                "past the buffer")
            else:
                f.error(msg)
    for n in np.flatnonzero(flat.dep_tb > EXECUTOR_MAX_DEPID).tolist():
        f.warn_grouped("depid-int8", f"{at(n)}depid {int(flat.dep_tb[n])} > {EXECUTOR_MAX_DEPID}: the "
                                     "executors store it in an int8 and wait for the wrong threadblock")
    following = next_non_nop(code, flat.tb_indptr, flat.node_tb).tolist()
    for n in np.flatnonzero(is_nop).tolist():
        _check_nop(flat, n, following[n], at(n), f)


def next_non_nop(code: npt.NDArray[np.int64], tb_indptr: npt.NDArray[np.int64],
                 node_tb: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Per node, the next node of its threadblock that is not a nop, or -1.

    One binary search per node: a forward scan from every nop was quadratic in a run of
    trailing nops (`nuna validate` of a plan with 40k of them: 41.9 s, 2.1 s now)."""
    real = np.flatnonzero(code != _NOP)
    nodes = np.arange(code.shape[0], dtype=np.int64)
    pos = np.searchsorted(real, nodes, side="right")
    nxt = np.append(real, -1)[pos]
    beyond = (nxt < 0) | (nxt >= tb_indptr[node_tb + 1])
    return np.where(beyond, -1, nxt).astype(np.int64)


def _check_nop(flat: FlatPlan, n: int, following: int, at: str, f: _Findings) -> None:
    if flat.dep_tb[n] == NONE:
        f.warn_grouped("nop-nodep", f"{at}nop without a dependency (the executors' step counter then "
                                    "disagrees with s)")
    if flat.has_dep[n]:
        f.warn_grouped("nop-hasdep", f"{at}hasdep=1 on a nop: the executors never publish a nop's progress")
    if following < 0:
        f.warn_grouped("nop-trailing", f"{at}nop at the end of its threadblock (the executors drop it)")
    elif flat.dep_tb[n] != NONE and flat.dep_tb[following] == NONE:
        f.warn_grouped("nop-inherit", f"{at}nop's dependency is inherited by step "
                                      f"{int(flat.index[following])}, "
                                      "which has no depid of its own (the MSCCL executors reject this)")


def _check_hasdep(flat: FlatPlan, waited_nodes: npt.NDArray[np.int64], fusion: ReduceFusion,
                  f: _Findings) -> None:
    waited = np.zeros(flat.num_nodes, dtype=np.bool_)
    waited[waited_nodes] = True
    not_nop = flat.code != _NOP
    for n in np.flatnonzero(waited & ~flat.has_dep & not_nop).tolist():
        f.warn_grouped("hasdep-missing", f"{f.at_step(*flat.step_pos(n))}other threadblocks wait on "
                                         "this step but hasdep=0: the executors publish progress only "
                                         "after hasdep=1 steps")
    # a re's hasdep=1 that cuts a chain of fused re steps has a use
    waited[fusion.hasdep_cuts] = True
    for n in np.flatnonzero(flat.has_dep & ~waited & not_nop).tolist():
        f.warn_grouped("hasdep-unused", f"{f.at_step(*flat.step_pos(n))}hasdep=1 but no threadblock "
                                        "waits on this step")


def _check_fusion(flat: FlatPlan, fusion: ReduceFusion, f: _Findings) -> None:
    """Chains of ``re`` steps the executors fuse into a pass that does not do what the plan says
    (:mod:`nuna.plan.fusion`; nuna replays them as written there)."""
    if fusion.fused:
        f.note(f"{f.at_plan()}{fusion.fused + fusion.passes} re steps run as {fusion.passes} fused passes, "
               "as the executors fuse them (docs/simulator.md section 3)")
    for n in fusion.too_long.tolist():
        f.warn_grouped("fusion-long", f"{f.at_step(*flat.step_pos(n))}the executors fuse this re into a "
                                      f"pass of more than {MAX_REDUCE_FUSION} reductions, more sources than "
                                      "their kernel has room for; hasdep=1 on an earlier re of the chain "
                                      f"cuts it (nuna splits it every {MAX_REDUCE_FUSION})")
    for n in fusion.cnt_change.tolist():
        f.warn_grouped("fusion-cnt", f"{f.at_step(*flat.step_pos(n))}the executors fuse this re with the "
                                     "previous one although its cnt differs, and reduce the last cnt of "
                                     "every source (nuna does not fuse them)")
    for n in fusion.nop_inside.tolist():
        f.warn_grouped("fusion-nop", f"{f.at_step(*flat.step_pos(n))}the executors fuse this re across a "
                                     "nop with a dependency, which they then wait for only after the fused "
                                     "pass (nuna ends the chain at the nop)")


def _check_placement(plan: Plan, f: _Findings) -> None:
    pl = plan.placement
    if pl.is_baseline and pl.config is None and pl.size_bytes is None:
        return
    at = f.at_plan()
    if pl.nar_granularity is not None and pl.nar_granularity < 1:
        f.error(f"{at}placement: NAR granularity {pl.nar_granularity} must be at least 1")
    if pl.size_bytes is not None and pl.size_bytes < 1:
        f.error(f"{at}placement: size {pl.size_bytes} must be positive")
    gpus = {g.id: g for g in plan.gpus}
    # a set per GPU: scanning its threadblocks per placement was quadratic (1,008 per GPU at
    # 16 per peer on 64 GPUs)
    tb_ids = {g.id: {tb.id for tb in g.threadblocks} for g in plan.gpus}
    seen_tbs: set[tuple[int, int]] = set()
    for tp in pl.threadblocks:
        g = gpus.get(tp.gpu)
        if g is None or tp.tb not in tb_ids[tp.gpu]:
            f.error(f"{at}placement: gpu {tp.gpu} tb {tp.tb} does not exist")
        elif (tp.gpu, tp.tb) in seen_tbs:
            f.error(f"{at}placement: gpu {tp.gpu} tb {tp.tb} is placed twice")
        if tp.cu < 0:
            f.error(f"{at}placement: gpu {tp.gpu} tb {tp.tb} on compute unit {tp.cu} (must be >= 0)")
        seen_tbs.add((tp.gpu, tp.tb))
    seen_chunks: set[tuple[int, Buffer, int, int]] = set()
    for cp in pl.chunks:
        g = gpus.get(cp.gpu)
        if g is None:
            f.error(f"{at}placement: chunk of gpu {cp.gpu}, which does not exist")
            continue
        size = {Buffer.INPUT: g.input_chunks, Buffer.OUTPUT: g.output_chunks,
                Buffer.SCRATCH: g.scratch_chunks}[cp.buffer]
        if not 0 <= cp.chunk < size:
            f.error(f"{at}placement: gpu {cp.gpu} {cp.buffer.name.lower()} chunk {cp.chunk} is outside the "
                    f"buffer ({size} chunks)")
        if cp.stack < 0:
            f.error(f"{at}placement: gpu {cp.gpu} {cp.buffer.name.lower()} chunk {cp.chunk} on stack "
                    f"{cp.stack} (must be >= 0)")
        key = (cp.gpu, cp.buffer, cp.chunk, cp.stack)
        if key in seen_chunks:  # several stacks deal a chunk's pages; one stack twice is a slip
            f.warn_grouped("chunk-twice", f"{at}placement: gpu {cp.gpu} {cp.buffer.name.lower()} chunk "
                                          f"{cp.chunk} is placed on stack {cp.stack} twice")
        seen_chunks.add(key)
    per_gpu = Counter(cp.gpu for cp in pl.chunks)
    for gid, n in sorted(per_gpu.items()):
        if n > EXECUTOR_MAX_CHILDREN:
            f.warn_grouped("placement-children", f"{at}placement: {n} chunk placements on gpu {gid} in one "
                                                 f"<nuna:placement> element; the MSCCL executors' parser "
                                                 f"handles at most {EXECUTOR_MAX_CHILDREN} children")
    if canonical_placement(plan) != pl:
        f.warn(f"{at}placement entries are not in document order (nuna.plan.xml.dump refuses them; "
               "use canonical_placement)")


def _cycle_message(flat: FlatPlan, dag: ReplayDag, cycle: list[int], f: _Findings,
                   through_flow_control: bool = False) -> str:
    """The deadlock message for ``cycle``; ``through_flow_control``: the cycle closes only
    through the executors' flow control (the depth rule, step by step)."""
    plan = f.plan

    def name(n: int) -> str:
        gi, ti, si = flat.step_pos(n)
        g = plan.gpus[gi]
        tb = g.threadblocks[ti]
        return f"gpu {g.id} tb {tb.id} step {tb.steps[si].index}"

    names = [name(n) for n in cycle]
    kind = "cross-GPU deadlock" if len({int(dag.node_gpu[n]) for n in cycle}) > 1 else "dependency cycle"
    prefix = f.source.at_step(*flat.step_pos(cycle[0])) if f.source is not None else ""
    why = "" if not through_flow_control else (
        f" through the executors' flow control ({flow_rule_text(plan.protocol, by_steps=False)}; "
        "'nuna simulate --no-flow-control' replays without it)")
    return f"{prefix}deadlock: {kind} of {len(cycle)} steps{why}: {cycle_path(names)}"


def _run_semantics(plan: Plan, dag: ReplayDag, f: _Findings) -> None:
    # imported here so the structural checks stay usable on their own and import cycles
    # between the plan modules cannot arise
    from nuna.plan.semantics import check_semantics

    result = check_semantics(plan, dag)
    prefix = f"{f.source.file}: " if f.source is not None else ""
    for msg in result.errors:
        f.error(prefix + msg)
    for msg in result.warnings:
        f.warn(prefix + msg)
    for msg in result.notes:
        f.note(prefix + msg)


def iter_messages(report: Report) -> Iterable[tuple[str, str]]:
    """``(severity, message)`` pairs in report order: errors, warnings, notes."""
    for msg in report.errors:
        yield "error", msg
    for msg in report.warnings:
        yield "warning", msg
    for msg in report.notes:
        yield "note", msg


# ---------------------------------------------------------------------------------------------
# summary (``nuna info``)


@dataclass(frozen=True, slots=True)
class PlanSummary:
    """What ``nuna info`` shows about a plan. Byte figures are present only when a collective
    size was given: ``chunk_bytes = size_bytes / nchunksperloop`` for every collective (the
    nccl-tests size convention, reference §4), and a GPU's ``sent_bytes``/``received_bytes`` sum
    ``cnt x chunk_bytes`` over its send-type/receive-type steps."""

    name: str
    collective: str
    protocol: str
    ngpus: int
    nchannels: int
    nchunksperloop: int
    inplace: bool
    outofplace: bool
    threadblocks_per_gpu: tuple[int, ...]
    steps_per_gpu: tuple[int, ...]
    steps_by_type: tuple[tuple[str, int], ...]
    chunks_per_gpu: tuple[tuple[int, int, int], ...]  # (input, output, scratch) per GPU
    placement: str
    size_bytes: int | None = None
    sent_bytes: tuple[int, ...] | None = None
    received_bytes: tuple[int, ...] | None = None
    fit: SizeFit | None = None  # with a size: chunk bytes, and whether an executor selects the plan
    # re steps the executors fuse into passes of several (nuna.plan.fusion): (steps, passes)
    fused_re: tuple[int, int] = (0, 0)
    # with a size: how the executors slice the chunks and split steps (nuna.plan.slices)
    slicing: Slicing | None = None
    # the executors' flow control (nuna.plan.flow): (sends a sender may run ahead, send-type
    # steps that wait for a receive's credit, send-type steps); None without a replay DAG
    flow_control: tuple[int, int, int] | None = None

    @property
    def chunk_bytes(self) -> int | None:
        return self.fit.chunk_bytes if self.fit is not None else None

    @property
    def total_steps(self) -> int:
        return sum(self.steps_per_gpu)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (per-GPU lists indexed like ``Plan.gpus``)."""
        out: dict[str, Any] = {
            "name": self.name, "collective": self.collective, "protocol": self.protocol,
            "ngpus": self.ngpus, "nchannels": self.nchannels, "nchunksperloop": self.nchunksperloop,
            "inplace": self.inplace, "outofplace": self.outofplace,
            "threadblocks_per_gpu": list(self.threadblocks_per_gpu),
            "steps_per_gpu": list(self.steps_per_gpu), "total_steps": self.total_steps,
            "steps_by_type": dict(self.steps_by_type),
            "chunks_per_gpu": [{"input": i, "output": o, "scratch": s} for i, o, s in self.chunks_per_gpu],
            "placement": self.placement,
        }
        if self.size_bytes is not None:
            out["size_bytes"] = self.size_bytes
            out["chunk_bytes"] = self.chunk_bytes
            out["sent_bytes"] = list(self.sent_bytes or ())
            out["received_bytes"] = list(self.received_bytes or ())
        if self.fit is not None:
            out["padding_bytes"] = self.fit.padding_bytes
            out["msccl_selectable"] = self.fit.msccl_selectable
        out["fused_re"] = {"steps": self.fused_re[0], "passes": self.fused_re[1]}
        if self.slicing is not None:
            out["executor_slices"] = self.slicing.to_json()
        if self.flow_control is not None:
            depth, waiting, sends = self.flow_control
            out["flow_control"] = {"depth": depth, "waiting_sends": waiting, "sends": sends}
        return out


def chunk_bytes_for(plan: Plan, size_bytes: int) -> int:
    """Bytes per chunk for a collective of ``size_bytes`` (reference §4): ``size /
    nchunksperloop``, rounded up. The executors only select a plan for exact multiples; nuna
    pads instead, so that any size of a sweep (1 MB with 1,152 chunks, say) can be replayed;
    the padding is under ``nchunksperloop`` bytes in all. ``UsageError`` for a size that is not
    a whole number of bytes from 1 to 2**60 (:func:`nuna.units.check_size_bytes`)."""
    n = plan.nchunksperloop
    size_bytes = check_size_bytes(size_bytes)
    if n <= 0:
        raise UsageError(f"plan has nchunksperloop={n}; no chunk size can be derived")
    return -(-size_bytes // n)


@dataclass(frozen=True, slots=True)
class SizeFit:
    """How a collective of ``size_bytes`` splits into a plan's chunks (reference §4).

    The executors select a plan only when the element count divides into its chunks
    (``(count * sizeMultiplier) % nchunksperloop == 0``, ``msccl_lifecycle.cc``, i.e. the whole
    collective buffer's elements) and the size is in the plan's ``minBytes``..``maxBytes``
    (the current executor's inclusive range, ``maxBytes`` 0 = unlimited: ``in_range``);
    otherwise the call falls back to NCCL's own algorithms. nuna replays it anyway, with
    ``padding_bytes`` added over all chunks."""

    size_bytes: int
    element_bytes: int
    nchunksperloop: int
    chunk_bytes: int
    padding_bytes: int
    msccl_selectable: bool
    min_bytes: int = 0
    max_bytes: int = 0  # 0: unlimited

    @property
    def in_range(self) -> bool:
        return self.min_bytes <= self.size_bytes and (not self.max_bytes or self.size_bytes <= self.max_bytes)

    def note(self) -> str | None:
        """One line for the user when an executor would not run the plan at this size."""
        if self.msccl_selectable:
            return None
        if not self.in_range:
            top = f"{self.max_bytes} B" if self.max_bytes else "unlimited"
            return (f"MSCCL would not select this plan at {self.size_bytes} B (outside its "
                    f"minBytes..maxBytes, {self.min_bytes} B..{top}); nuna replays it all the same")
        if self.size_bytes % self.element_bytes:
            why = f"{self.size_bytes} B is not a whole number of {self.element_bytes}-byte elements"
        else:
            why = (f"its {self.size_bytes // self.element_bytes} elements do not divide into "
                   f"{self.nchunksperloop} chunks")
        if self.padding_bytes:
            how = f"nuna pads each chunk to {self.chunk_bytes} B ({self.padding_bytes} B in all)"
        else:
            how = f"nuna replays it with chunks of {self.chunk_bytes} B, not whole elements"
        return f"MSCCL would not select this plan at {self.size_bytes} B ({why}); {how}"


def size_fit(plan: Plan, size_bytes: int, element_bytes: int = 4) -> SizeFit:
    """:class:`SizeFit` of ``plan`` at ``size_bytes`` with elements of ``element_bytes`` (4:
    float, the nccl-tests default). ``UsageError`` as :func:`chunk_bytes_for`."""
    if element_bytes <= 0:
        raise UsageError(f"element size must be positive, got {element_bytes}")
    chunk = chunk_bytes_for(plan, size_bytes)
    n = plan.nchunksperloop
    divides = size_bytes % element_bytes == 0 and (size_bytes // element_bytes) % n == 0
    fit = SizeFit(size_bytes=size_bytes, element_bytes=element_bytes, nchunksperloop=n, chunk_bytes=chunk,
                  padding_bytes=chunk * n - size_bytes, msccl_selectable=divides,
                  min_bytes=max(plan.min_bytes, 0), max_bytes=max(plan.max_bytes, 0))
    return fit if fit.in_range else dataclasses.replace(fit, msccl_selectable=False)


def summarize(plan: Plan, size_bytes: int | None = None) -> PlanSummary:
    """Counts and (with ``size_bytes``) per-GPU traffic of ``plan``; never fails on a plan the
    reader accepted, except for a size that does not split into chunks."""
    counts: Counter[StepType] = Counter()
    steps_per_gpu: list[int] = []
    sent: list[int] = []
    received: list[int] = []
    for g in plan.gpus:
        n_steps = 0
        s_chunks = r_chunks = 0
        for tb in g.threadblocks:
            n_steps += len(tb.steps)
            for st in tb.steps:
                counts[st.type] += 1
                if st.type.sends:
                    s_chunks += st.count
                if st.type.receives:
                    r_chunks += st.count
        steps_per_gpu.append(n_steps)
        sent.append(s_chunks)
        received.append(r_chunks)
    pl = plan.placement
    if pl.is_baseline:
        placement = "baseline (no annotations)"
    else:
        parts = [f"config {pl.config}" if pl.config else "annotated",
                 f"NAR granularity {pl.nar_granularity}" if pl.nar_granularity is not None else "no NAR",
                 f"{len(pl.threadblocks)} threadblock placements", f"{len(pl.chunks)} chunk placements"]
        if pl.size_bytes is not None:
            parts.append(f"for size {pl.size_bytes} B")
        placement = ", ".join(parts)
    fit = size_fit(plan, size_bytes) if size_bytes is not None else None
    chunk = fit.chunk_bytes if fit is not None else None
    fused_re = (0, 0)
    flow = None
    # an integer past 64 bits: neither fusion nor flow control is said
    with contextlib.suppress(PlanError):
        flat = flatten(plan)
        if counts[StepType.REDUCE] > 1:
            fusion = reduce_fusion(flat)
            fused_re = (fusion.fused + fusion.passes, fusion.passes)
        dag = analyze(plan, limit=1).dag  # None: no replay DAG, nothing to say of credits
        if dag is not None:
            depth = flow_control_depth(plan.protocol)
            flow = (depth, int((credit_sources(dag, depth) >= 0).sum()), int((dag.match_recv >= 0).sum()))
    return PlanSummary(
        name=plan.name, collective=plan.coll_xml, protocol=plan.protocol.value, ngpus=plan.ngpus,
        nchannels=plan.nchannels, nchunksperloop=plan.nchunksperloop, inplace=plan.inplace,
        outofplace=plan.outofplace,
        threadblocks_per_gpu=tuple(len(g.threadblocks) for g in plan.gpus),
        steps_per_gpu=tuple(steps_per_gpu),
        steps_by_type=tuple((t.value, counts[t]) for t in StepType if counts[t]),
        chunks_per_gpu=tuple((g.input_chunks, g.output_chunks, g.scratch_chunks) for g in plan.gpus),
        placement=placement,
        size_bytes=size_bytes,
        sent_bytes=None if chunk is None else tuple(c * chunk for c in sent),
        received_bytes=None if chunk is None else tuple(c * chunk for c in received),
        fit=fit,
        fused_re=fused_re,
        slicing=None if chunk is None else executor_slicing(plan, chunk),
        flow_control=flow,
    )


def defaulted_warnings(plan: Plan, source: SourceMap | None = None) -> tuple[str, ...]:
    """The header warnings of :func:`verify` alone (defaulted attributes), for ``nuna info``."""
    f = _Findings(plan, source)
    _check_defaulted(plan, f)
    return tuple(f.warnings)
