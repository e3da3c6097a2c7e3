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

nuna replays whole chunks unless asked (``nuna.sim.SimOptions.executor_slices``): the paper's
model says nothing of slices, and every figure is replayed without them.
"""

from __future__ import annotations

from dataclasses import dataclass

from nuna.plan.ir import Collective, Plan, Protocol

#: NCCL's default connection buffer per protocol (``init.cc``) and its ``NCCL_STEPS``
BUFFER_BYTES = {Protocol.SIMPLE: 4 << 20, Protocol.LL: 512 << 10, Protocol.LL128: 4_915_200}
NCCL_STEPS = 8
MSCCL_CHUNKSTEPS = NCCL_STEPS // 2
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

    def to_json(self) -> dict[str, int]:
        return {"slices": self.slices, "slice_bytes": self.slice_bytes, "max_count": self.max_count}


def _step_bytes(protocol: Protocol, chunk_steps: int) -> int:
    """Payload bytes of ``chunk_steps`` of the connection's ``NCCL_STEPS`` buffer steps: all of a
    Simple step, half of an LL step (a flag per data word), 15/16 of an LL128 step (a flag word
    per 128-byte line); LL and LL128 move one step at a time."""
    step = BUFFER_BYTES[protocol] // NCCL_STEPS
    if protocol is Protocol.SIMPLE:
        return step * chunk_steps
    return step // 2 if protocol is Protocol.LL else step // 16 * 15


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
    return Slicing(slice_bytes=sb, slices=slices, max_count=min(allowed, MSCCL_MAX_COUNT - 1))
