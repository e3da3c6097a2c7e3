"""Which ``re`` steps the MSCCL executors fuse into one pass, and which of them nuna fuses.

Both executors (``msccl_parser.cc`` in the new one, ``xml.cc`` in the old; reference §5)
merge, while parsing a threadblock, a ``re`` into the previous transmission when that was a
``re`` with the same ``dstbuf``, ``dstoff`` and ``srcbuf``, the new one has ``depid = -1``,
and the chain was not cut: a ``re`` with ``hasdep=1`` ends its chain, and so does the
threadblock's 16th ``re`` (``MSCCL_MAX_REDUCE_FUSION``; the counter is the threadblock's, so
this cut happens once). ``nop`` steps are not transmissions and do not break a chain. The
kernel then loads ``dst`` and every source once per element and stores ``dst`` once: ``k``
fused steps move ``k + 2`` chunks, not ``3k``.

nuna replays the executor's groups (``docs/simulator.md`` §3) except where executing them as
fused would not do what the plan says, which :func:`nuna.plan.verify.verify` reports:

* a group of more than 16 ``re`` steps: the executors' kernel has room for 16 sources (it
  would write past its array); nuna splits it every 16;
* steps of different ``cnt``: the fused pass reduces the last one's ``cnt`` chunks of every
  source; nuna does not fuse across the change;
* a ``nop`` with a dependency inside a chain: the executor fuses across it and the dependency
  is waited for only after the fused pass; nuna ends the chain at the ``nop``, which it honours.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nuna.plan.dag import NONE, STEP_CODE, FlatPlan
from nuna.plan.ir import StepType

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

#: ``MSCCL_MAX_REDUCE_FUSION``: the most ``re`` steps one fused pass reduces (both executors).
MAX_REDUCE_FUSION = 16

_RE = STEP_CODE[StepType.REDUCE]
_NOP = STEP_CODE[StepType.NOP]


@dataclass(frozen=True, slots=True, eq=False)
class ReduceFusion:
    """Per node of a :class:`~nuna.plan.dag.FlatPlan`: ``head[n]`` is the node whose fused pass
    does ``re`` node ``n``'s work (-1: none, ``n`` is a group's first step or not a ``re``),
    as nuna replays it. The other arrays list nodes where the executors would fuse otherwise:
    ``too_long`` the 17th step of an executor group and every 16th after it, ``cnt_change`` a
    step the executors fuse although its ``cnt`` differs from the previous one's,
    ``nop_inside`` a step the executors fuse across a ``nop`` with a dependency.
    ``hasdep_cuts`` lists ``re`` steps whose ``hasdep=1`` is what keeps the next step out of
    their pass (a way to cut a chain: :func:`nuna.plan.generate.generate` cuts long ones so)."""

    head: I64
    too_long: I64
    cnt_change: I64
    nop_inside: I64
    hasdep_cuts: I64

    @property
    def fused(self) -> int:
        """Steps done by another step's fused pass."""
        return int((self.head >= 0).sum())

    @property
    def passes(self) -> int:
        """Fused passes: groups of more than one step."""
        return int(np.unique(self.head[self.head >= 0]).shape[0])


def _heads(is_re: BOOL, cont: BOOL, idx: I64) -> I64:
    """Per node, the latest ``re`` at or before it that does not continue a chain (valid for the
    continuations, whose chain head is in their threadblock)."""
    return np.maximum.accumulate(np.where(is_re & ~cont, idx, -1))


def reduce_fusion(flat: FlatPlan) -> ReduceFusion:
    """The executors' ``re`` groups of ``flat`` and nuna's (module docstring), in array form."""
    nn = flat.num_nodes
    idx = np.arange(nn, dtype=np.int64)
    code = flat.code
    is_re = code == _RE
    is_nop = code == _NOP
    empty = np.zeros(0, dtype=np.int64)
    if not is_re.any():
        return ReduceFusion(np.full(nn, -1, dtype=np.int64), empty, empty, empty, empty)
    tb = flat.node_tb
    first = flat.tb_indptr[tb]
    # the previous transmission of each node in its threadblock (nops are not transmissions)
    prev = np.maximum.accumulate(np.where(~is_nop, idx, -1))
    prev = np.concatenate(([-1], prev[:-1]))
    prev = np.where(prev >= first, prev, -1)
    p = np.maximum(prev, 0)
    # the threadblock's count of re steps up to and including each node
    cum = np.cumsum(is_re)
    rank = cum - np.concatenate(([0], cum))[first]
    same = (is_re & (prev >= 0) & is_re[p] & (flat.dst_buf == flat.dst_buf[p])
            & (flat.dst_off == flat.dst_off[p]) & (flat.src_buf == flat.src_buf[p])
            & (flat.dep_tb == NONE))
    executor = same & ~flat.has_dep[p] & (rank[p] != MAX_REDUCE_FUSION)
    # nops with a dependency between a node and its previous transmission
    dep_nops = np.cumsum(is_nop & (flat.dep_tb != NONE))
    nop_between = dep_nops[np.maximum(idx - 1, 0)] - dep_nops[p] > 0
    cnt_change = executor & (flat.count != flat.count[p])
    nop_inside = executor & nop_between
    ours = executor & ~cnt_change & ~nop_inside
    # split every MAX_REDUCE_FUSION steps (positions count re steps: nops lie between)
    def split(cont: BOOL) -> tuple[BOOL, BOOL]:
        pos = rank - rank[np.maximum(_heads(is_re, cont, idx), 0)]
        cut = cont & (pos % MAX_REDUCE_FUSION == 0)
        return cont & ~cut, cut

    ours, _ = split(ours)
    _, too_long = split(executor)
    head = np.where(ours, _heads(is_re, ours, idx), -1)
    return ReduceFusion(head.astype(np.int64), np.flatnonzero(too_long), np.flatnonzero(cnt_change),
                        np.flatnonzero(nop_inside), np.unique(prev[same & flat.has_dep[p]]))
