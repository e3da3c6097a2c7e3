"""How the MSCCL executors cut a plan's chunks into slices and its steps into primitive calls.

Both executors run a threadblock's whole step list once per *slice* (reference §7): the kernel
walks each chunk in pieces of the protocol's slice size (``gridOffset`` in
``msccl_kernel_impl.h``), and every step of iteration ``i`` moves piece ``i`` of each of its
chunks, with its dependencies counted per iteration (``COMPUTE_FLAG(workIndex, iter, step)``).
Within an iteration a step of ``cnt`` chunks is ``ceil(cnt / maxAllowedCount)`` primitive calls
(``mscclSetupCount``), each over contiguous data: a chunk's piece when there are several
slices, else up to ``maxAllowedCount`` whole chunks.

The sizes come from NCCL's default buffer sizes (``init.cc``) and ``NCCL_STEPS = 8``:

* slice (the kernel's ``chunkSize``): Simple ``4 MiB / 8 * MSCCL_CHUNKSTEPS (4)`` = 2 MiB; LL
  ``512 KiB / 8 / 2`` = 32 KiB; LL128 ``4,915,200 / 8 * 15 / 16`` = 576,000 B;
* ``chunkEffectiveSize`` (for ``maxAllowedCount``): Simple ``512 KiB * chunkSteps``, with
  ``chunkSteps`` 4, or 1 for broadcast and reduce (``collectives.h``); LL and LL128 their slice.

A primitive call itself moves its data in *parts* (NCCL's own "slices", ``SlicePerChunk`` of
``StepPerSlice`` buffer steps each, ``prims_simple.h``'s ``genericOp``): a Simple call in two
parts of two steps (``ProtoSimple<MSCCL_CHUNKSTEPS / MSCCL_SLICESTEPS, MSCCL_SLICESTEPS>``), each
waited for, fenced and posted on its own, the first ``max(ceil(n / 32) * 16, stepSize *
StepPerSlice / 32)`` of the call's ``n`` elements (at least 32 KiB) and the second the rest,
which may be nothing (an empty part still takes its two steps); an LL or LL128 call in one part
of one step.

nuna replays whole chunks unless asked (``nuna.sim.SimOptions.executor_slices``): the paper's
model says nothing of slices, and every figure is replayed without them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nuna.plan.ir import Collective, Plan, Protocol

#: NCCL's default connection buffer per protocol (``init.cc``) and its ``NCCL_STEPS``
BUFFER_BYTES = {Protocol.SIMPLE: 4 << 20, Protocol.LL: 512 << 10, Protocol.LL128: 4_915_200}
NCCL_STEPS = 8
MSCCL_CHUNKSTEPS = NCCL_STEPS // 2
#: buffer steps of one part of a Simple call (NCCL's ``StepPerSlice``)
MSCCL_SLICESTEPS = NCCL_STEPS // 4
#: ``MSCCL_MAX_COUNT``: ``maxAllowedCount`` stays below it
MSCCL_MAX_COUNT = 72
_ONE_STEP_COLLECTIVES = frozenset({Collective.BROADCAST, Collective.REDUCE})


@dataclass(frozen=True, slots=True)
class Slicing:
    """How an executor runs a plan's steps at one size: ``slices`` iterations over slices of
    ``slice_bytes`` (the last one what remains of a chunk), and steps of more than
    ``max_count`` chunks split into calls of at most that many."""

    slice_bytes: int
    slices: int
    max_count: int
    #: parts per call (NCCL's ``SlicePerChunk``) and the least bytes of a call's first part
    parts: int
    part_min_bytes: int

    def to_json(self) -> dict[str, int]:
        return {"slices": self.slices, "slice_bytes": self.slice_bytes, "max_count": self.max_count,
                "parts_per_call": self.parts, "part_min_bytes": self.part_min_bytes}


def _step_bytes(protocol: Protocol, chunk_steps: int) -> int:
    """Payload bytes of ``chunk_steps`` of the connection's ``NCCL_STEPS`` buffer steps: all of a
    Simple step, half of an LL step (a flag per data word), 15/16 of an LL128 step (a flag word
    per 128-byte line); LL and LL128 move one step at a time."""
    step = BUFFER_BYTES[protocol] // NCCL_STEPS
    if protocol is Protocol.SIMPLE:
        return step * chunk_steps
    return step // 2 if protocol is Protocol.LL else step // 16 * 15


def call_parts(protocol: Protocol) -> int:
    """How many parts a primitive call moves its data in (NCCL's ``SlicePerChunk``)."""
    return MSCCL_CHUNKSTEPS // MSCCL_SLICESTEPS if protocol is Protocol.SIMPLE else 1


def part_steps(protocol: Protocol) -> int:
    """Buffer steps one part of a call takes (NCCL's ``StepPerSlice``)."""
    return MSCCL_SLICESTEPS if protocol is Protocol.SIMPLE else 1


def part_min_bytes(protocol: Protocol, element_bytes: int) -> int:
    """The least bytes of a call's first part: ``stepSize * StepPerSlice / 32`` elements."""
    step_elems = BUFFER_BYTES[protocol] // NCCL_STEPS // element_bytes
    return max(1, step_elems * part_steps(protocol) // 32) * element_bytes


def first_part_bytes(protocol: Protocol, call_bytes: npt.NDArray[np.int64],
                     element_bytes: int) -> npt.NDArray[np.int64]:
    """Bytes of the first part of calls of ``call_bytes`` (all of a call of one part):
    ``genericOp``'s ``max(divUp(nelem, 16 * SlicePerChunk) * 16, sliceSize / 32)`` elements, at
    most the call."""
    calls = np.asarray(call_bytes, dtype=np.int64)
    parts = call_parts(protocol)
    if parts == 1:
        return calls.copy()
    nelem = -(-calls // element_bytes)
    per = -(-nelem // (16 * parts)) * 16 * element_bytes
    return np.minimum(calls, np.maximum(per, part_min_bytes(protocol, element_bytes)))


def slice_bytes(protocol: Protocol, element_bytes: int) -> int:
    """The kernel's slice for ``protocol``, a whole number of elements (its ``chunkSize``)."""
    return max(1, _step_bytes(protocol, MSCCL_CHUNKSTEPS) // element_bytes) * element_bytes


def effective_chunk_bytes(protocol: Protocol, collective: Collective) -> int:
    """``chunkEffectiveSize`` of ``mscclSetupCount``: how much one primitive call may move."""
    return _step_bytes(protocol, 1 if collective in _ONE_STEP_COLLECTIVES else MSCCL_CHUNKSTEPS)


def executor_slicing(plan: Plan, chunk_bytes: int, element_bytes: int = 4) -> Slicing:
    """The executors' slices and primitive-call limit for ``plan`` with chunks of
    ``chunk_bytes`` (:func:`nuna.plan.verify.chunk_bytes_for`)."""
    sb = slice_bytes(plan.protocol, element_bytes)
    slices = max(1, -(-chunk_bytes // sb))
    allowed = max(1, effective_chunk_bytes(plan.protocol, plan.collective) // max(1, chunk_bytes))
    parts = call_parts(plan.protocol)
    return Slicing(slice_bytes=sb, slices=slices, max_count=min(allowed, MSCCL_MAX_COUNT - 1), parts=parts,
                   part_min_bytes=part_min_bytes(plan.protocol, element_bytes) if parts > 1 else 0)
