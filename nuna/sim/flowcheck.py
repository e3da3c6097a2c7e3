"""Whether the executors' flow control can deadlock a plan at one size.

``nuna validate`` applies flow control step by step (:mod:`nuna.plan.verify`): it knows no size.
At a size the executors run a step as slices, primitive calls and parts (:mod:`nuna.plan.slices`),
and a step of several calls takes several calls' buffer steps on its connection, so a plan that
passes step by step can hang at a large size: two threadblocks that each send one step of three
calls before receiving the other's wait for each other's credit for ever. :func:`flow_deadlock`
builds the nodes a replay with ``executor_slices`` runs (:func:`nuna.sim.slicing.executor_nodes`),
adds their credit edges and looks for a cycle. It needs no topology, only the plan's chunk size.

Two slices stand for any number: every edge (program order, dependency, data, credit) runs from a
slice to the same or a later one, so a cycle lies within one slice, and a slice's credit edges
within itself are those of the first slice of the same structure (its sends need the steps of
the same receives, offset by the earlier slices' steps). Slices of one size repeat the first;
only the last, shorter one may split its calls into parts differently. So the check expands the
first and the last slice (``every_slice`` expands them all, the same answer at far more nodes).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nuna.plan.dag import STEP_CODE, build_dag, cycle_path, find_cycle, flatten
from nuna.plan.flow import flow_rule_text, with_credit_edges
from nuna.plan.ir import Plan, StepType
from nuna.plan.slices import executor_slicing
from nuna.plan.verify import chunk_bytes_for
from nuna.sim.slicing import executor_nodes, piece_label


def flow_deadlock(plan: Plan, size_bytes: int, element_bytes: int = 4, *,
                  every_slice: bool = False) -> str | None:
    """The message of a deadlock the executors' flow control closes in ``plan`` at ``size_bytes``
    (its steps run as the executors' slices, calls and parts), or ``None`` when there is none.

    The plan must have a replay DAG (``DagError`` otherwise: verify it first); ``UsageError`` for
    a size out of range (:func:`nuna.plan.verify.chunk_bytes_for`)."""
    flat = flatten(plan)
    dag = build_dag(plan)
    cb = chunk_bytes_for(plan, size_bytes)
    slicing = executor_slicing(plan, cb, element_bytes)
    S = slicing.slices
    # the first and the last slice, as chunks of those two pieces, with the size's call limit
    check_cb, check = cb, slicing
    if S > 2 and not every_slice:
        check_cb = slicing.slice_bytes + cb - (S - 1) * slicing.slice_bytes
        check = dataclasses.replace(slicing, slices=2)
    nn = flat.num_nodes
    n_bytes = flat.count.astype(np.int64) * check_cb
    n_bytes[flat.code == STEP_CODE[StepType.NOP]] = 0
    # no addresses: the nodes' structure does not depend on where their data lies
    no_addr = np.full((nn, 1), -1, dtype=np.int64)
    nodes, credit = executor_nodes(flat, dag, no_addr, n_bytes, np.zeros(nn, dtype=np.int64), check_cb, check,
                                   plan.protocol, element_bytes)
    if nodes is not None and check is not slicing:
        nodes = dataclasses.replace(nodes, slices=S, slice_of=np.where(nodes.slice_of > 0, S - 1, 0))
    run_dag, run_flat = (dag, flat) if nodes is None else (nodes.dag, nodes.flat)
    cycle = find_cycle(with_credit_edges(run_dag, credit))
    if cycle is None:
        return None
    names = [run_flat.step_name(n) + ("" if nodes is None else piece_label(nodes, n)) for n in cycle]
    kind = "cross-GPU deadlock" if len({int(run_dag.node_gpu[n]) for n in cycle}) > 1 else "deadlock"
    rule = flow_rule_text(plan.protocol, by_steps=nodes is not None and nodes.in_parts)
    slices = f"{S} slice{'s' * (S != 1)}"
    calls = f"calls of up to {slicing.max_count} chunk{'s' * (slicing.max_count != 1)}"
    return (f"deadlock at {size_bytes} B ({cb} B chunks, {slices}, {calls}): {kind} of {len(cycle)} calls "
            f"or parts through the executors' flow control ({rule}; 'nuna simulate --no-flow-control' "
            f"replays without it): {cycle_path(names)}")
