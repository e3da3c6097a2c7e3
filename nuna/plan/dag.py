"""The replay DAG of a plan, in compact array form.

Nodes are steps (nops included, as zero-cost ordering nodes). Control edges are program order
inside a threadblock and explicit ``depid/deps`` dependencies; data edges join the i-th
send-type step of a connection ``(sender, receiver, channel)`` to the i-th receive-type step
(FIFO matching, reference §6.5). Arrays, not Python objects, so that a 64-GPU plan with 1,008
threadblocks per GPU stays small and the simulator can hand them to its JIT-compiled loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nuna.plan.ir import StepType

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
