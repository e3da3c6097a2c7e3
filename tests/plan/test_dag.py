"""The replay DAG: every field of ReplayDag against a naive reference construction, cycle
detection against networkx, levels, the networkx export, and clean errors."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna.errors import PlanError
from nuna.plan.dag import STEP_CODE, build_dag, find_cycle, finish_times, to_networkx, topological_levels
from nuna.plan.ir import Buffer, Collective, Gpu, Plan, Protocol, Step, StepType, Threadblock
from nuna.plan.xml import load

REPO = Path(__file__).resolve().parents[2]

SEND_TYPES = [t for t in StepType if t.sends and not t.receives]
RECV_TYPES = [t for t in StepType if t.receives and not t.sends]
FUSED_TYPES = [t for t in StepType if t.sends and t.receives]
LOCAL_TYPES = [StepType.COPY, StepType.REDUCE, StepType.NOP]


def make_plan(seed: int, ngpus: int, transfers: int, local_steps: int, deps: int,
              shuffle_s: bool = False) -> Plan:
    """A random plan whose connections pair up (FIFO counts equal), with random same-GPU
    dependencies (which may form cycles) and threadblocks/GPUs listed in random order."""
    rng = random.Random(seed)
    o = Buffer.OUTPUT
    # tb key per GPU: ("s", peer, chan) / ("r", peer, chan) / ("x", peer_s, peer_r, chan) / ("l",)
    progs: dict[int, dict[tuple[object, ...], list[Step]]] = {g: {("l",): []} for g in range(ngpus)}
    for _ in range(transfers):
        a, b = rng.sample(range(ngpus), 2)
        chan = rng.randrange(2)
        count = rng.randrange(1, 3)
        s_type = rng.choice(SEND_TYPES)
        r_type = rng.choice(RECV_TYPES)
        progs[a].setdefault(("s", b, chan), []).append(Step(0, s_type, o, 0, o, 0, count))
        progs[b].setdefault(("r", a, chan), []).append(Step(0, r_type, o, 0, o, 0, count))
    if ngpus >= 3 and rng.random() < 0.7:  # a relay through a fused step: a -> b -> c
        a, b, c = rng.sample(range(ngpus), 3)
        progs[a].setdefault(("s", b, 3), []).append(Step(0, StepType.SEND, o, 0, o, 0, 1))
        progs[b].setdefault(("x", c, a, 3), []).append(Step(0, rng.choice(FUSED_TYPES), o, 0, o, 0, 1))
        progs[c].setdefault(("r", b, 3), []).append(Step(0, StepType.RECV, o, 0, o, 0, 1))
    for _ in range(local_steps):
        g = rng.randrange(ngpus)
        progs[g][("l",)].append(Step(0, rng.choice(LOCAL_TYPES), o, 0, o, 0, 1))
    gpus = []
    for g in range(ngpus):
        keys = sorted(progs[g], key=repr)
        ids = list(range(len(keys)))
        rng.shuffle(ids)
        tbs = []
        for tid, key in zip(ids, keys, strict=True):
            send = recv = None
            chan = 0
            if key[0] == "s":
                send, chan = key[1], key[2]
            elif key[0] == "r":
                recv, chan = key[1], key[2]
            elif key[0] == "x":
                send, recv, chan = key[1], key[2], key[3]
            raw = progs[g][key]
            s_values = list(range(len(raw)))
            if shuffle_s:
                s_values = rng.sample(range(10 * len(raw) + 1), len(raw))
            tbs.append(Threadblock(tid, send, recv, chan,
                                   tuple(replace(st, index=s) for st, s in zip(raw, s_values, strict=True))))
        rng.shuffle(tbs)
        gpus.append(Gpu(g, 0, 1, 0, tuple(tbs)))
    # dependencies between random steps of one GPU, naming the target by its s value
    for _ in range(deps):
        g = rng.randrange(ngpus)
        tbs = [tb for tb in gpus[g].threadblocks if tb.steps]
        if not tbs:
            continue
        waiter_tb, target_tb = rng.choice(tbs), rng.choice(tbs)
        wi = rng.randrange(len(waiter_tb.steps))
        target = rng.choice(target_tb.steps)
        new_steps = list(waiter_tb.steps)
        new_steps[wi] = replace(new_steps[wi], depend_tb=target_tb.id, depend_step=target.index)
        new_tb = replace(waiter_tb, steps=tuple(new_steps))
        gpus[g] = replace(gpus[g], threadblocks=tuple(new_tb if t is waiter_tb else t
                                                      for t in gpus[g].threadblocks))
    order = list(range(ngpus))
    rng.shuffle(order)
    return Plan("random", Protocol.SIMPLE, 4, 1, ngpus, Collective.CUSTOM, False, True, 0, 0,
                tuple(gpus[g] for g in order))


def reference_edges(plan: Plan) -> tuple[set[tuple], set[tuple], dict[tuple, tuple]]:
    """Program-order edges, dependency edges and FIFO data matches, on (gpu, tb, position)
    keys, computed the obvious way."""
    program: set[tuple] = set()
    deps: set[tuple] = set()
    sends: dict[tuple, list[tuple]] = {}
    recvs: dict[tuple, list[tuple]] = {}
    for g in plan.gpus:
        by_id = {tb.id: tb for tb in g.threadblocks}
        for tb in g.threadblocks:
            for i, step in enumerate(tb.steps):
                here = (g.id, tb.id, i)
                if i:
                    program.add(((g.id, tb.id, i - 1), here))
                if step.depend_tb is not None:
                    target = by_id[step.depend_tb]
                    pos = next(j for j, s in enumerate(target.steps) if s.index == step.depend_step)
                    deps.add(((g.id, target.id, pos), here))
                if step.type.sends:
                    sends.setdefault((g.id, tb.send_peer, tb.channel), []).append(here)
                if step.type.receives:
                    recvs.setdefault((tb.recv_peer, g.id, tb.channel), []).append(here)
    data = {}
    for key, side in sends.items():
        for s, r in zip(side, recvs[key], strict=True):
            data[s] = r
    return program, deps, data


def node_key(dag, n: int) -> tuple[int, int, int]:
    return int(dag.node_gpu[n]), int(dag.node_tb[n]), int(dag.node_step[n])


def check_against_reference(plan: Plan) -> None:
    dag = build_dag(plan)
    for name in ("node_gpu", "node_tb", "node_step", "tb_indptr", "tb_gpu", "tb_id", "ctrl_indptr",
                 "ctrl_indices", "ctrl_indegree", "match_send", "match_recv"):
        assert getattr(dag, name).dtype == np.int32, name
    assert dag.node_type.dtype == np.int8
    assert dag.ngpus == plan.ngpus
    # nodes: threadblocks sorted by (gpu, tb), steps in program order, types as the IR says
    tbs = sorted((g.id, tb.id, tb) for g in plan.gpus for tb in g.threadblocks)
    assert list(zip(dag.tb_gpu.tolist(), dag.tb_id.tolist(), strict=True)) == [(g, t) for g, t, _ in tbs]
    expected_nodes = [(g, t, i) for g, t, tb in tbs for i in range(len(tb.steps))]
    assert [node_key(dag, n) for n in range(dag.num_nodes)] == expected_nodes
    assert dag.node_type.tolist() == [STEP_CODE[st.type] for _, _, tb in tbs for st in tb.steps]
    assert np.diff(dag.tb_indptr).tolist() == [len(tb.steps) for _, _, tb in tbs]
    # control edges = program order + dependencies, as a sorted, duplicate-free CSR
    program, deps, data = reference_edges(plan)
    ctrl = set()
    for n in range(dag.num_nodes):
        succ = dag.ctrl_indices[dag.ctrl_indptr[n]:dag.ctrl_indptr[n + 1]].tolist()
        assert succ == sorted(set(succ))
        ctrl |= {(node_key(dag, n), node_key(dag, m)) for m in succ}
    assert ctrl == program | deps
    indegree = np.bincount(dag.ctrl_indices, minlength=dag.num_nodes)
    assert dag.ctrl_indegree.tolist() == indegree.tolist()
    # data edges: FIFO matching, both directions consistent
    got = {node_key(dag, n): node_key(dag, int(dag.match_recv[n]))
           for n in range(dag.num_nodes) if dag.match_recv[n] >= 0}
    assert got == data
    for n in range(dag.num_nodes):
        if dag.match_recv[n] >= 0:
            assert dag.match_send[dag.match_recv[n]] == n
        if dag.match_send[n] >= 0:
            assert dag.match_recv[dag.match_send[n]] == n
        t = StepType(list(StepType)[dag.node_type[n]])
        assert (dag.match_recv[n] >= 0) == t.sends
        assert (dag.match_send[n] >= 0) == t.receives


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), ngpus=st.integers(2, 5), transfers=st.integers(0, 12),
       local_steps=st.integers(0, 6), deps=st.integers(0, 6), shuffle_s=st.booleans())
def test_dag_matches_reference(seed: int, ngpus: int, transfers: int, local_steps: int, deps: int,
                               shuffle_s: bool) -> None:
    check_against_reference(make_plan(seed, ngpus, transfers, local_steps, deps, shuffle_s))


@pytest.mark.parametrize("name", ["ring_allreduce_n3.xml", "allreduce_scratch_n2.xml",
                                  "fig7_allgather_n2_c2.xml"])
def test_dag_matches_reference_on_examples(name: str) -> None:
    check_against_reference(load(REPO / "plans" / name))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), ngpus=st.integers(2, 4), transfers=st.integers(0, 10),
       local_steps=st.integers(0, 5), deps=st.integers(0, 8))
def test_cycles_and_levels_agree_with_networkx(seed: int, ngpus: int, transfers: int, local_steps: int,
                                              deps: int) -> None:
    plan = make_plan(seed, ngpus, transfers, local_steps, deps)
    dag = build_dag(plan)
    graph = to_networkx(dag)
    cycle = find_cycle(dag)
    levels = topological_levels(dag)
    if nx.is_directed_acyclic_graph(graph):
        assert cycle is None
        assert (levels >= 0).all()
        for u, v in graph.edges:
            assert levels[v] > levels[u]
        longest = nx.dag_longest_path_length(graph) if graph.number_of_nodes() else 0
        assert int(levels.max(initial=0)) == longest
    else:
        assert cycle is not None
        assert len(set(cycle)) == len(cycle)
        for u, v in zip(cycle, cycle[1:] + cycle[:1], strict=True):
            assert graph.has_edge(u, v)
        assert (levels[cycle] == -1).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), ngpus=st.integers(2, 4), transfers=st.integers(0, 10),
       local_steps=st.integers(0, 5), deps=st.integers(0, 8))
def test_finish_times_are_longest_weighted_paths(seed: int, ngpus: int, transfers: int, local_steps: int,
                                                 deps: int) -> None:
    plan = make_plan(seed, ngpus, transfers, local_steps, deps)
    dag = build_dag(plan)
    graph = to_networkx(dag)
    duration = np.random.default_rng(seed).uniform(0.0, 100.0, dag.num_nodes)
    finish = finish_times(dag, duration)
    if not nx.is_directed_acyclic_graph(graph):
        assert np.isnan(finish).any()
        return
    expected = np.zeros(dag.num_nodes)
    for n in nx.topological_sort(graph):
        expected[n] = max((expected[u] for u in graph.predecessors(n)), default=0.0) + duration[n]
    np.testing.assert_allclose(finish, expected, rtol=1e-12)


def test_finish_times_wants_one_duration_per_node() -> None:
    dag = build_dag(make_plan(1, 2, 2, 1, 0))
    with pytest.raises(ValueError, match="one entry per node"):
        finish_times(dag, np.ones(dag.num_nodes + 1))


def test_networkx_export_attributes() -> None:
    plan = load(REPO / "plans" / "allreduce_scratch_n2.xml")
    dag = build_dag(plan)
    graph = to_networkx(plan)
    assert graph.number_of_nodes() == dag.num_nodes
    for n, attrs in graph.nodes(data=True):
        gpu, tb, step = node_key(dag, n)
        assert attrs == {"gpu": gpu, "tb": tb, "step": step,
                         "type": plan.gpus[gpu].threadblocks[tb].steps[step].type.value}
    kinds = {}
    for _, _, kind in graph.edges(data="kind"):
        kinds[kind] = kinds.get(kind, 0) + 1
    # per GPU: 2 program edges in tb 0, 1 in tb 1; nop->tb1.s0 and re<-tb1.s1 dependencies
    assert kinds == {"program": 6, "dependency": 4, "data": 2}


def test_a_deadlock_is_a_cycle_through_both_gpus() -> None:
    plan = load(REPO / "plans" / "fig7_allgather_n2_c2.xml")
    # receive before send on both GPUs of channel 0: each waits for the other's send
    swapped = []
    for g in plan.gpus:
        tb0 = g.threadblocks[0]
        r, s = tb0.steps[1], tb0.steps[0]
        tb0 = replace(tb0, steps=(replace(r, index=0), replace(s, index=1)))
        swapped.append(replace(g, threadblocks=(tb0, *g.threadblocks[1:])))
    dag = build_dag(replace(plan, gpus=tuple(swapped)))
    cycle = find_cycle(dag)
    assert cycle is not None
    assert {int(dag.node_gpu[n]) for n in cycle} == {0, 1}
    assert len(cycle) == 4


def _edit_step(plan: Plan, g: int, t: int, s: int, **changes: object) -> Plan:
    gpu = plan.gpus[g]
    tb = gpu.threadblocks[t]
    steps = list(tb.steps)
    steps[s] = replace(steps[s], **changes)
    new_tb = replace(tb, steps=tuple(steps))
    new_gpu = replace(gpu, threadblocks=tuple(new_tb if i == t else x
                                              for i, x in enumerate(gpu.threadblocks)))
    return replace(plan, gpus=tuple(new_gpu if i == g else x for i, x in enumerate(plan.gpus)))


@pytest.mark.parametrize(("edit", "message"), [
    (lambda p: _edit_step(p, 0, 0, 2, depend_tb=9),
     "gpu 0 tb 0 step 2: depid 9 names no threadblock on gpu 0"),
    (lambda p: _edit_step(p, 0, 0, 2, depend_step=7), "deps 7 names no step of gpu 0 tb 1"),
    (lambda p: _edit_step(p, 0, 0, 2, depend_step=None), "both must be set"),
    (lambda p: _edit_step(p, 0, 0, 0, type=StepType.SEND), "'s' sends but the threadblock has no send peer"),
    (lambda p: _edit_step(p, 0, 1, 1, type=StepType.SEND),
     "connection gpu 0 -> gpu 1 channel 0: 2 send-type steps but gpu 1 tb 1 has 1 receive-type step"),
    (lambda p: _edit_step(p, 1, 1, 1, count=2), "cnt=1 but the matching receive"),
    (lambda p: replace(p, gpus=(replace(p.gpus[0], threadblocks=(*p.gpus[0].threadblocks,
                                                                 p.gpus[0].threadblocks[1])), p.gpus[1])),
     "threadblock 1 is declared twice on gpu 0"),
])
def test_build_dag_errors(edit, message: str) -> None:
    plan = load(REPO / "plans" / "allreduce_scratch_n2.xml")
    with pytest.raises(PlanError) as err:
        build_dag(edit(plan))
    assert message in str(err.value)


def test_two_threadblocks_on_one_connection() -> None:
    plan = load(REPO / "plans" / "fig7_allgather_n2_c2.xml")
    g0 = plan.gpus[0]
    moved = replace(g0.threadblocks[1], channel=0)
    with pytest.raises(PlanError, match="both send to gpu 1 on channel 0"):
        build_dag(replace(plan, gpus=(replace(g0, threadblocks=(g0.threadblocks[0], moved)), plan.gpus[1])))


def test_empty_plan_has_empty_dag() -> None:
    plan = Plan("e", Protocol.SIMPLE, 1, 1, 1, Collective.CUSTOM, False, True, 0, 0,
                (Gpu(0, 0, 0, 0, (Threadblock(0, None, None, 0, ()),)),))
    dag = build_dag(plan)
    assert dag.num_nodes == 0
    assert dag.num_threadblocks == 1
    assert find_cycle(dag) is None
    assert to_networkx(dag).number_of_nodes() == 0
