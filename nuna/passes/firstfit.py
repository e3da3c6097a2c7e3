"""Algorithm 1's first-fit choices, compiled: the loops of NAP's ``physical_placement`` and of
the NUMA pass's CU choice over every threadblock of a plan.

The rule ("First fit" in :mod:`nuna.passes.nap`'s doc): candidates come as *classes* of equally
near resources, nearest class first. A demand goes to the least-loaded candidate (earliest in
its class among equals) of the first class whose least load is under the budget and fits the
demand; when no class has room, to the least-loaded candidate of all (earliest in list order
among equals), recorded as an overflow. Loads only grow, so a class found full stays full: each
candidate list keeps, per GPU, the index of its first class that may still have room.

Why compiled: the NAR heuristic places a plan at each of six granularities, and a 64-GPU plan
with 16 threadblocks per peer has 64,512 threadblocks; in Python the six placements of the
1 MiB allreduce took about 11 s, as long as the point's replay (``docs/passes.md``, "Compiled
first fit").

Arrays in, arrays out (the callers in ``nap`` and ``numa`` convert to and from the IR). GPUs
are indices ``0..n-1`` here. A candidate list is ``(cand, ptr, c0, c1)``: classes ``c0..c1-1``,
class ``i`` holding ``cand[ptr[i]:ptr[i + 1]]``. Errors come back as codes, never raised
inside a kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

I8 = npt.NDArray[np.int64]

#: error codes of :func:`place_nap`
OK = 0
NO_STACK = 1  # a chunk with no candidate stack, or a demand of zero bytes (nothing to divide)


@njit(cache=True, inline="always")
def _charge(load: Any, touched: Any, g: int, r: int, amount: int) -> None:
    """Add ``amount`` to resource ``r`` of GPU ``g`` and mark it charged."""
    load[g, r] += amount
    touched[g, r] = True


@njit(cache=True, inline="always")
def _overflow(ov: Any, n: int, kind: int, g: int, r: int, demand: int, domain: int, least: int) -> int:
    """Record an overflow in row ``n`` of ``ov``; the next free row."""
    ov[n, 0] = kind
    ov[n, 1] = g
    ov[n, 2] = r
    ov[n, 3] = demand
    ov[n, 4] = domain
    ov[n, 5] = least
    return n + 1


@njit(cache=True, inline="always")
def _least(load: Any, g: int, cand: Any, lo: int, hi: int) -> tuple[int, int]:
    """The least-loaded of ``cand[lo:hi]`` on GPU ``g`` (the earliest among equals; loads are
    never negative, so a free one ends the scan) and its load."""
    least = -1
    best = -1
    for j in range(lo, hi):
        r = cand[j]
        have = load[g, r]
        if best < 0 or have < least:
            least = have
            best = r
            if have == 0:
                break
    return best, least


@njit(cache=True)
def _take(load: Any, touched: Any, g: int, cand: Any, ptr: Any, c0: int, c1: int,
          memo: Any, mkey: int, budget: int, demand: int) -> tuple[int, bool, int]:
    """First fit of ``demand`` among classes ``c0..c1-1`` on GPU ``g`` (see the module doc);
    ``memo[g, mkey]``: the list's first class that may have room, relative to ``c0`` (a key
    must always name the same classes). Returns the resource, whether it fitted and the least
    load among the candidates considered before the charge."""
    start = memo[g, mkey]
    leading = True  # in the run of full classes the scan starts with
    for i in range(c0 + start, c1):
        best, least = _least(load, g, cand, ptr[i], ptr[i + 1])
        if leading:
            if least >= budget:
                start = i - c0 + 1
                continue
            leading = False
            memo[g, mkey] = start
        if least + demand <= budget:
            _charge(load, touched, g, best, demand)
            return best, True, least
    if leading:
        memo[g, mkey] = start
    best, least = _least(load, g, cand, ptr[c0], ptr[c1])
    _charge(load, touched, g, best, demand)
    return best, False, least


@njit(cache=True)
def _take_other(load: Any, touched: Any, g: int, order: Any, n: int, taken: Any, ntaken: int,
                budget: int, demand: int) -> tuple[int, bool, int]:
    """First fit among the strict order ``order[:n]`` (one candidate per class: stack orders)
    without the candidates ``taken[:ntaken]``; no class memo (the further stacks of a chunk)."""
    best = -1
    least = -1
    for j in range(n):
        r = order[j]
        skip = False
        for t in range(ntaken):
            if taken[t] == r:
                skip = True
                break
        if skip:
            continue
        have = load[g, r]
        if have + demand <= budget:
            _charge(load, touched, g, r, demand)
            return r, True, have
        if best < 0 or have < least:
            least = have
            best = r
    _charge(load, touched, g, best, demand)
    return best, False, least


@njit(cache=True)
def take_each(item_gpu: Any, item_list: Any, item_demand: Any, cand: Any, ptr: Any, lists: Any,
              budget: int, n_resources: int) -> Any:
    """First fit for a sequence of demands, each among the candidate list ``item_list[i]``
    (classes ``lists[l]..lists[l + 1]-1``), loads starting at zero: the resource of each."""
    n_gpu = item_gpu.max() + 1 if item_gpu.shape[0] else 0
    load = np.zeros((n_gpu, n_resources), dtype=np.int64)
    touched = np.zeros((n_gpu, n_resources), dtype=np.bool_)
    memo = np.zeros((n_gpu, lists.shape[0] - 1), dtype=np.int64)
    out = np.empty(item_gpu.shape[0], dtype=np.int64)
    for i in range(item_gpu.shape[0]):
        lst = item_list[i]
        out[i] = _take(load, touched, item_gpu[i], cand, ptr, lists[lst], lists[lst + 1],
                       memo, lst, budget, item_demand[i])[0]
    return out


@njit(cache=True)
def place_nap(nar_max: int, place_memory: bool,
              m_gpu: Any, m_group: Any, m_demand: Any, m_ptr: Any, m_chunk: Any, m_new: Any,
              c_gpu: Any, c_accesses: Any,
              cand: Any, ptr: Any, dom_cls: Any, near: Any, near_ptr: Any, own: Any, by_dist: Any,
              cu_budget: int, stack_budget: int, c_demand: int, chunk_pages: int,
              cu_load: Any, cu_touched: Any, st_load: Any, st_touched: Any,
              tb_cu: Any, ov: Any, chunk_out: Any) -> tuple[int, int, int]:
    """Algorithm 1 lines 11-22 (``nuna.passes.nap.physical_placement``, whose doc says what is
    chosen and why) over members ``m`` in group order: member ``m`` of group ``m_group[m]``
    accesses chunks ``m_chunk[m_ptr[m]:m_ptr[m + 1]]`` (``m_new``: first touched by its group).
    Domain ``d``'s CU classes are ``dom_cls[d]..dom_cls[d + 1]-1`` of ``(cand, ptr)``, its
    stacks by distance to its ports ``near[near_ptr[d]:near_ptr[d + 1]]``, its own stacks
    ``own[d]``; ``by_dist[cu]``: all stacks by round trip from ``cu``.

    Fills ``tb_cu``, the overflows ``ov`` (rows: kind 0 CU / 1 stack, GPU, resource, demand,
    domain, least load), ``chunk_out`` (rows: chunk, stack, in first-come-first-served order)
    and the loads (``*_touched``: charged at least once); returns (overflows, chunk
    placements, error code)."""
    n_ov = 0
    n_out = 0
    n_gpu, n_cus = cu_load.shape
    n_stacks = own.shape[1]
    n_chunks = c_gpu.shape[0]
    # the first class with room of each candidate list, per GPU: CU lists by domain, stack
    # lists by domain (remote) and by (CU, domain) (local)
    cu_memo = np.zeros((n_gpu, nar_max), dtype=np.int64)
    st_memo = np.zeros((n_gpu, nar_max * (n_cus + 1)), dtype=np.int64)
    c_stacks = np.zeros((n_chunks, n_stacks), dtype=np.int64)  # a placed chunk's stacks
    c_nst = np.zeros(n_chunks, dtype=np.int64)  # and how many (0: not placed yet)
    pending = np.zeros(n_chunks, dtype=np.int64)  # accesses before it was placed
    buf = np.empty(n_stacks, dtype=np.int64)  # a local chunk's candidate stacks
    ident = np.arange(n_stacks + 1)  # class bounds of a strict order: one candidate per class
    for m in range(m_gpu.shape[0]):
        g = m_gpu[m]
        nar = m_group[m] % nar_max  # Fig 7 caption: the first group uses domain 0
        demand = m_demand[m]
        cu, fitted, least = _take(cu_load, cu_touched, g, cand, ptr, dom_cls[nar], dom_cls[nar + 1],
                                  cu_memo, nar, cu_budget, demand)
        tb_cu[m] = cu
        if not fitted:
            n_ov = _overflow(ov, n_ov, 0, g, cu, demand, nar, least)
        if not place_memory:
            continue
        for j in range(m_ptr[m], m_ptr[m + 1]):
            c = m_chunk[j]
            cg = c_gpu[c]
            k = c_nst[c]
            if k > 0:  # placed before: this access still loads its stacks
                share = -(-c_demand // k)
                if share:
                    for s in range(k):
                        _charge(st_load, st_touched, cg, c_stacks[c, s], share)
                continue
            if not m_new[j]:  # another group's chunk, not placed yet: charged when it is
                pending[c] += 1
                continue
            if cg == g:  # local: the CU's nearest stacks of the domain
                n = 0
                for s in range(n_stacks):
                    st = by_dist[cu, s]
                    if own[nar, st]:
                        buf[n] = st
                        n += 1
                order = buf[:n]
                key = nar_max + cu * nar_max + nar
            else:  # remote: near the same port ordinals on the peer
                order = near[near_ptr[nar]:near_ptr[nar + 1]]
                n = order.shape[0]
                key = nar
            k = min(-(-c_accesses[c] * c_demand // stack_budget), chunk_pages, n)
            if k <= 0:
                return n_ov, n_out, NO_STACK
            share = -(-c_demand // k)
            st, fitted, least = _take(st_load, st_touched, cg, order, ident, 0, n, st_memo, key,
                                      stack_budget, share)
            c_stacks[c, 0] = st
            c_nst[c] = 1
            if not fitted:
                n_ov = _overflow(ov, n_ov, 1, cg, st, share, nar, least)
            for _ in range(k - 1):
                st, fitted, least = _take_other(st_load, st_touched, cg, order, n, c_stacks[c], c_nst[c],
                                                stack_budget, share)
                c_stacks[c, c_nst[c]] = st
                c_nst[c] += 1
                if not fitted:
                    n_ov = _overflow(ov, n_ov, 1, cg, st, share, nar, least)
            extra = share * pending[c]
            pending[c] = 0
            for s in range(c_nst[c]):
                st = c_stacks[c, s]
                if extra:
                    _charge(st_load, st_touched, cg, st, extra)
                chunk_out[n_out, 0] = c
                chunk_out[n_out, 1] = st
                n_out += 1
    return n_ov, n_out, OK


def class_arrays(lists: list[tuple[tuple[int, ...], ...]]) -> tuple[I8, I8, I8]:
    """``(cand, ptr, bounds)`` of candidate lists: list ``l`` is classes
    ``bounds[l]..bounds[l + 1]-1`` of ``(cand, ptr)``."""
    sizes = [len(cls) for classes in lists for cls in classes]
    cand = np.fromiter((r for classes in lists for cls in classes for r in cls), dtype=np.int64,
                       count=sum(sizes))
    ptr = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    bounds = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([len(classes) for classes in lists], out=bounds[1:])
    return cand, ptr, bounds
