"""Semantic check: symbolic data flow, postconditions, races; cross-checked against an
independent concrete executor (random numbers, sums modulo a prime) written here."""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict, deque
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna.errors import PlanError
from nuna.plan import xml
from nuna.plan.dag import build_dag
from nuna.plan.generate import generate
from nuna.plan.ir import Buffer, Collective, Gpu, Plan, Protocol, Step, StepType, Threadblock
from nuna.plan.semantics import SemanticsResult, check_semantics
from tests.conftest import msccl_plans

# --------------------------------------------------------------------------------------------
# An independent oracle: the executor's step semantics (reference §5) run on numbers, with
# threadblocks advanced greedily and FIFO queues per connection. It shares no code with
# nuna.plan.semantics or nuna.plan.dag.

PRIME = (1 << 61) - 1


@dataclasses.dataclass
class Outcome:
    finished: bool
    correct: bool
    first_wrong: tuple[int, str, int] | None  # (gpu, buffer letter, chunk)


def _alias(plan: Plan, g: int, buf: str, idx: int, inplace: bool) -> tuple[str, int]:
    n = plan.ngpus
    if not inplace:
        return buf, idx
    coll = plan.collective
    if coll is Collective.ALLGATHER and buf == "i":
        return "o", g * (plan.nchunksperloop // n) + idx
    if coll is Collective.ALLREDUCE and buf == "o":
        return "i", idx
    if coll is Collective.REDUCESCATTER and buf == "o":
        return "i", g * (plan.nchunksperloop // n) + idx
    if coll is Collective.ALLTOALL and buf == "o":
        return "i", idx
    return buf, idx


def run_oracle(plan: Plan, *, inplace: bool, seed: int, zero_fill: bool) -> Outcome:
    rng = random.Random(seed)
    n = plan.ngpus
    coll = plan.collective
    per_rank = coll is not Collective.ALLREDUCE
    C = plan.nchunksperloop // n if per_rank else plan.nchunksperloop
    in_len = C if coll in (Collective.ALLGATHER, Collective.ALLREDUCE) else n * C
    inputs = {(r, k): rng.randrange(PRIME) for r in range(n) for k in range(in_len)}
    mem: dict[tuple[int, str, int], int] = {}
    for (r, k), v in inputs.items():
        mem[(r, *_alias(plan, r, "i", k, inplace))] = v

    def load(g: int, buf: Buffer, idx: int) -> int:
        key = (g, *_alias(plan, g, buf.value, idx, inplace))
        if key not in mem:
            mem[key] = 0 if zero_fill else rng.randrange(PRIME)
        return mem[key]

    def store(g: int, buf: Buffer, idx: int, v: int) -> None:
        mem[(g, *_alias(plan, g, buf.value, idx, inplace))] = v

    tbs = [(g, tb) for g in plan.gpus for tb in g.threadblocks]
    pc = [0] * len(tbs)
    done: dict[tuple[int, int], int] = {}
    queues: dict[tuple[int, int, int], deque[list[int]]] = defaultdict(deque)
    progress = True
    while progress:
        progress = False
        for i, (g, tb) in enumerate(tbs):
            while pc[i] < len(tb.steps):
                s = tb.steps[pc[i]]
                if s.depend_tb is not None and done.get((g.id, s.depend_tb), -1) < (s.depend_step or 0):
                    break
                t = s.type
                got: list[int] = []
                if t.receives:
                    q = queues[(tb.recv_peer or 0, g.id, tb.channel)]
                    if not q:
                        break
                    got = q.popleft()
                cnt = s.count
                src = ([load(g.id, s.src_buffer, s.src_offset + j) for j in range(cnt)]
                       if s.src_buffer is not None and s.src_offset is not None else [])
                out: list[int] = []
                if t is StepType.SEND:
                    out = src
                elif t in (StepType.RECV, StepType.RECV_COPY_SEND):
                    out = got
                elif t is StepType.COPY:
                    out = src
                elif t is StepType.REDUCE:
                    dst = [load(g.id, s.dst_buffer, s.dst_offset + j) for j in range(cnt)]
                    out = [(a + b) % PRIME for a, b in zip(dst, src, strict=True)]
                elif t.reduces:
                    out = [(a + b) % PRIME for a, b in zip(got, src, strict=True)]
                if t in (StepType.RECV, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_COPY,
                         StepType.RECV_REDUCE_COPY_SEND, StepType.COPY, StepType.REDUCE):
                    for j, v in enumerate(out):
                        store(g.id, s.dst_buffer, s.dst_offset + j, v)
                if t.sends:
                    queues[(g.id, tb.send_peer or 0, tb.channel)].append(out)
                done[(g.id, tb.id)] = s.index
                pc[i] += 1
                progress = True
    finished = all(pc[i] == len(tb.steps) for i, (_, tb) in enumerate(tbs))

    def expect(g: int, k: int) -> int:
        if coll is Collective.ALLGATHER:
            return inputs[(k // C, k % C)]
        if coll is Collective.ALLREDUCE:
            return sum(inputs[(r, k)] for r in range(n)) % PRIME
        if coll is Collective.REDUCESCATTER:
            return sum(inputs[(r, g * C + k)] for r in range(n)) % PRIME
        return inputs[(k // C, g * C + k % C)]

    if coll is Collective.ALLREDUCE:
        result_buf, count = ("i" if inplace else "o"), C
    elif coll is Collective.REDUCESCATTER:
        result_buf, count = "o", C
    else:
        result_buf, count = "o", n * C
    for g in range(n):
        for k in range(count):
            key = (g, *_alias(plan, g, result_buf, k, inplace))
            if mem.get(key) != expect(g, k):
                return Outcome(finished, False, (g, result_buf, k))
    return Outcome(finished, True, None)


def semantics(plan: Plan) -> SemanticsResult:
    return check_semantics(plan, build_dag(plan))


def renumber(steps: list[Step]) -> tuple[Step, ...]:
    return tuple(dataclasses.replace(s, index=i) for i, s in enumerate(steps))


def replace_tb(plan: Plan, gpu: int, tb_id: int, **changes: object) -> Plan:
    gpus = []
    for g in plan.gpus:
        if g.id == gpu:
            tbs = tuple(dataclasses.replace(tb, **changes) if tb.id == tb_id else tb for tb in g.threadblocks)
            g = dataclasses.replace(g, threadblocks=tbs)
        gpus.append(g)
    return dataclasses.replace(plan, gpus=tuple(gpus))


def tb_of(plan: Plan, gpu: int, tb_id: int) -> Threadblock:
    return next(tb for g in plan.gpus if g.id == gpu for tb in g.threadblocks if tb.id == tb_id)


# --------------------------------------------------------------------------------------------
# The shared corpus

CORPUS = msccl_plans()

# Plans that compute the wrong result under the executors' step semantics (reference §5),
# with the reason; each was traced by hand (see the report of issue 2).
KNOWN_WRONG = {
    # ncclize --instances > 1 turns receives into 'rrc' (its "initialised" set mixes instanced
    # and plain offsets); the executor then adds the local source (the sender's descriptive
    # location, read locally) to the received chunk
    "allgather_sccl-dgx1-s3r4c3_n8_i4_Simple.xml": "wrong result",
    "allgather_sccl-dgx1-steps2_n8_i2_Simple.xml": "wrong result",
    # ncclize's composed allreduce: the all-gather half receives into initialised input chunks
    # with 'rrc', counting the rank's own contribution twice
    "allreduce_sccl-dgx1-compose-s4r6c2_n8_i2_Simple.xml": "twice",
    # same rrc quirk in a non-reducing collective (reference §8.1)
    "alltoall_autosynth-ndv2-relay_n16_i8_Simple.xml": "wrong result",
    # pipeline examples run on 2x the GPUs: ranks 0..n-1 reduce, ranks n..2n-1 gather;
    # labelled allreduce but not one (their Check() is commented out in msccl-tools)
    "allreduce_pipelineallpairs_n8_i1_LL.xml": "missing",
    "allreduce_pipelinering_n8_c1_i2_LL128.xml": "missing",
    # ns3-msccl hand-written toy plans (from-repos/SOURCES.md: "not semantically valid")
    "ns3msccl__examples__allstack__algorithms__allreduce_ring_2_1.xml": "wrong result",
    "ns3msccl__examples__allstack__algos__allreduce_ring.xml": "wrong result",
    "ns3msccl__examples__allstack__algos__test_x2_gpu.xml": "wrong result",
    "ns3msccl__examples__allstack__algos__test_x3_gpu.xml": "missing",
}
# Plans with data races (reference §5: the alltonext custom plans; the ndv2 relay alltoall's
# rrc steps read local scratch other threadblocks write; a toy plan)
KNOWN_RACY = {
    "custom_alltonextfwd_nodes3_i2_Simple.xml",
    "custom_alltonextbwd_nodes4_i1_Simple.xml",
    "alltoall_autosynth-ndv2-relay_n16_i8_Simple.xml",
    "ns3msccl__examples__allstack__algos__test_x3_gpu.xml",
}


def _load_corpus_plan(path: Path) -> tuple[Plan, SemanticsResult]:
    plan = xml.load(path)
    try:
        dag = build_dag(plan)
    except PlanError as err:
        pytest.skip(f"no replay DAG (structural error, reported by verify): {err}")
    return plan, check_semantics(plan, dag)


@pytest.mark.skipif(not CORPUS, reason="shared plan corpus not found")
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_plan(path: Path) -> None:
    try:
        plan, res = _load_corpus_plan(path)
    except PlanError as err:
        pytest.skip(f"the XML reader rejects it: {err}")
    for msg in (*res.errors, *res.warnings, *res.notes):
        assert "\n" not in msg
    races = [w for w in res.warnings if "data race" in w]
    if path.name in KNOWN_WRONG:
        assert res.errors, "a known-wrong plan must be rejected"
        assert KNOWN_WRONG[path.name] in res.errors[0]
    else:
        assert res.errors == ()
    assert bool(races) == (path.name in KNOWN_RACY)
    if plan.collective not in (Collective.ALLGATHER, Collective.ALLREDUCE, Collective.REDUCESCATTER,
                               Collective.ALLTOALL):
        assert any("no postcondition" in note for note in res.notes)
        return
    if races:
        return  # the oracle's interleaving is one of several possible results
    # independent cross-check: the concrete run agrees with the symbolic verdict
    inplace = plan.inplace
    zeroed = any("starts zeroed" in w for w in res.warnings)
    random_fill = run_oracle(plan, inplace=inplace, seed=1, zero_fill=False)
    assert random_fill.finished
    assert random_fill.correct == (not res.errors and not zeroed)
    if zeroed:
        assert run_oracle(plan, inplace=inplace, seed=1, zero_fill=True).correct == (not res.errors)
    if random_fill.first_wrong is not None and not zeroed:
        g, buf, k = random_fill.first_wrong
        name = {"i": "input", "o": "output"}[buf]
        # both name the same first wrong chunk (same order: gpu, then chunk)
        assert f"gpu {g} {name} chunk {k}:" in res.errors[0]


# --------------------------------------------------------------------------------------------
# Mutations that must be caught


def _corpus_file(name: str) -> Path:
    for p in CORPUS:
        if p.name == name:
            return p
    pytest.skip(f"{name} not in the shared corpus")


def test_swap_two_offsets_is_caught() -> None:
    plan = xml.load(_corpus_file("allgather_ring_n8_c1_i1_LL.xml"))
    assert semantics(plan).errors == ()
    tb = tb_of(plan, 3, 0)
    steps = list(tb.steps)
    a, b = 1, 2  # two receives: swap where they store
    steps[a], steps[b] = (dataclasses.replace(steps[a], dst_offset=steps[b].dst_offset),
                          dataclasses.replace(steps[b], dst_offset=steps[a].dst_offset))
    res = semantics(replace_tb(plan, 3, 0, steps=tuple(steps)))
    assert len(res.errors) == 1
    assert res.errors[0].startswith("wrong result: gpu 3 output chunk")
    assert "expected input[" in res.errors[0]
    assert "got input[" in res.errors[0]


def test_dropping_a_reduction_is_caught() -> None:
    plan = generate("allreduce", 4, algo="ring")
    tb = tb_of(plan, 2, 0)
    i = next(i for i, s in enumerate(tb.steps) if s.type is StepType.RECV_REDUCE_SEND)
    steps = list(tb.steps)
    # rrs -> rcs keeps the connection shape but forwards without adding the local chunk
    steps[i] = dataclasses.replace(steps[i], type=StepType.RECV_COPY_SEND)
    res = semantics(replace_tb(plan, 2, 0, steps=tuple(steps)))
    assert res.errors
    assert "missing input[2]" in res.errors[0]


def test_rrc_to_r_is_caught() -> None:
    plan = generate("reducescatter", 3, tbs_per_peer=1)
    tb = tb_of(plan, 1, 0)
    steps = [dataclasses.replace(s, type=StepType.RECV) if s.type is StepType.RECV_REDUCE_COPY else s
             for s in tb.steps]
    res = semantics(replace_tb(plan, 1, 0, steps=tuple(steps)))
    assert res.errors
    # in-place reduce-scatter: output[k] is input[rank*C + k] (reference §4)
    assert res.errors[0].startswith("wrong result: gpu 1 output chunk 0: expected input[0][1] ⊕ input[1][1] "
                                    "⊕ input[2][1], got a reduction of 2 contributions (missing input[1][1])")


def test_duplicated_reduction_is_caught() -> None:
    plan = xml.load(_corpus_file("allreduce_allpairs_n2_i1_LL.xml"))
    tb = tb_of(plan, 0, 1)
    steps = list(tb.steps)
    i = next(i for i, s in enumerate(steps) if s.type is StepType.REDUCE)
    steps.insert(i + 1, steps[i])
    # dependencies on later steps of this tb name them by s: shift them
    later = {s.index for s in steps[i + 1:]}
    mutated = replace_tb(plan, 0, 1, steps=renumber(steps))
    fixed_gpus = []
    for g in mutated.gpus:
        tbs = []
        for t in g.threadblocks:
            if g.id == 0 and t.id != 1:
                t = dataclasses.replace(t, steps=tuple(
                    dataclasses.replace(s, depend_step=s.depend_step + 1)
                    if s.depend_tb == 1 and s.depend_step in later else s for s in t.steps))
            tbs.append(t)
        fixed_gpus.append(dataclasses.replace(g, threadblocks=tuple(tbs)))
    res = semantics(dataclasses.replace(mutated, gpus=tuple(fixed_gpus)))
    assert res.errors
    assert "twice" in res.errors[0]
    assert res.errors[0].startswith("wrong result: gpu 0 input chunk")


def test_wrong_peer_is_caught() -> None:
    plan = generate("alltoall", 4, tbs_per_peer=1)
    t1, t2 = tb_of(plan, 0, 0), tb_of(plan, 0, 1)
    mutated = replace_tb(replace_tb(plan, 0, 0, send_peer=t2.send_peer), 0, 1, send_peer=t1.send_peer)
    res = semantics(mutated)
    assert res.errors[0].startswith(
        "wrong result: gpu 1 output chunk 0: expected input[0][1], got input[0][2]")
    assert run_oracle(mutated, inplace=False, seed=3, zero_fill=False).correct is False


# --------------------------------------------------------------------------------------------
# Races, on hand-made plans


def _step(i: int, t: StepType, src: tuple[Buffer, int] | None, dst: tuple[Buffer, int] | None,
          cnt: int = 1, dep: tuple[int, int] | None = None, hasdep: bool = False) -> Step:
    return Step(i, t, src[0] if src else None, src[1] if src else None, dst[0] if dst else None,
                dst[1] if dst else None, cnt, dep[0] if dep else None, dep[1] if dep else None, hasdep)


def _custom(gpus: list[list[Threadblock]], chunks: int = 4) -> Plan:
    return Plan(name="t", protocol=Protocol.SIMPLE, nchannels=1, nchunksperloop=chunks, ngpus=len(gpus),
                collective=Collective.CUSTOM, inplace=False, outofplace=True, min_bytes=0, max_bytes=0,
                gpus=tuple(Gpu(i, chunks, chunks, chunks, tuple(tbs)) for i, tbs in enumerate(gpus)))


I0, S0 = (Buffer.INPUT, 0), (Buffer.SCRATCH, 0)


def test_two_unordered_writers_warn_and_name_both_steps() -> None:
    plan = _custom([[Threadblock(0, None, None, 0, (_step(0, StepType.COPY, I0, S0),)),
                     Threadblock(1, None, None, 0, (_step(0, StepType.COPY, (Buffer.INPUT, 1), S0),))],
                    []])
    res = semantics(plan)
    assert res.errors == ()
    assert len(res.warnings) == 1
    w = res.warnings[0]
    assert w.startswith("gpu 0 scratch chunk 0: data race, two unordered writes")
    assert "tb 0 step 0 (cpy)" in w
    assert "tb 1 step 0 (cpy)" in w


def test_dependency_orders_the_writers() -> None:
    plan = _custom([[Threadblock(0, None, None, 0, (_step(0, StepType.COPY, I0, S0, hasdep=True),)),
                     Threadblock(1, None, None, 0,
                                 (_step(0, StepType.COPY, (Buffer.INPUT, 1), S0, dep=(0, 0)),))],
                    []])
    assert semantics(plan).warnings == ()


def test_read_unordered_with_write_warns() -> None:
    # tb 0 sends scratch 0 to gpu 1 while tb 1 overwrites it
    plan = _custom([[Threadblock(0, 1, None, 0, (_step(0, StepType.SEND, S0, S0),)),
                     Threadblock(1, None, None, 0, (_step(0, StepType.COPY, I0, S0),))],
                    [Threadblock(0, None, 0, 0, (_step(0, StepType.RECV, S0, S0),))]])
    res = semantics(plan)
    assert any("data race" in w and "tb 0 step 0 (s)" in w and "tb 1 step 0 (cpy)" in w for w in res.warnings)


def test_order_through_another_gpu_is_not_a_race() -> None:
    # gpu 0 tb 0 writes s0 then sends to gpu 1; gpu 1 answers; gpu 0 tb 1 receives the answer,
    # then overwrites s0: ordered by data edges only
    plan = _custom([
        [Threadblock(0, 1, None, 0, (_step(0, StepType.COPY, I0, S0), _step(1, StepType.SEND, S0, S0))),
         Threadblock(1, None, 1, 1, (_step(0, StepType.RECV, S0, (Buffer.SCRATCH, 1)),
                                     _step(1, StepType.COPY, (Buffer.INPUT, 2), S0)))],
        [Threadblock(0, 0, 0, 0, (_step(0, StepType.RECV, S0, S0),)),
         Threadblock(1, 0, None, 1, (_step(0, StepType.SEND, S0, S0, dep=(0, 0)),))],
    ])
    assert semantics(plan).warnings == ()
    # without gpu 1's dependency the answer no longer waits for the data: a race on gpu 0
    tb = tb_of(plan, 1, 1)
    unordered = replace_tb(plan, 1, 1, steps=(dataclasses.replace(tb.steps[0], depend_tb=None,
                                                                  depend_step=None),))
    assert any(w.startswith("gpu 0 scratch chunk 0: data race") for w in semantics(unordered).warnings)


# --------------------------------------------------------------------------------------------
# Result messages and modes


def test_zeroed_buffer_assumption_is_a_warning() -> None:
    plan = generate("allgather", 2, inplace=False)
    tb = tb_of(plan, 1, 0)
    # receive with a reduction into the uninitialised output: right only on a zeroed buffer
    steps = tuple(dataclasses.replace(s, type=StepType.RECV_REDUCE_COPY, src_buffer=s.dst_buffer,
                                      src_offset=s.dst_offset) if s.type is StepType.RECV else s
                  for s in tb.steps)
    res = semantics(replace_tb(plan, 1, 0, steps=steps))
    assert res.errors == ()
    assert len(res.warnings) == 1
    assert "starts zeroed" in res.warnings[0]
    assert res.warnings[0].startswith("gpu 1 output chunk 0:")


def test_cycle_is_an_error_not_a_crash() -> None:
    a = _step(0, StepType.COPY, I0, S0, dep=(1, 0), hasdep=True)
    b = _step(0, StepType.COPY, I0, S0, dep=(0, 0), hasdep=True)
    plan = _custom([[Threadblock(0, None, None, 0, (a,)), Threadblock(1, None, None, 0, (b,))], []])
    res = semantics(plan)
    assert res.errors
    assert "cycle" in res.errors[0]


def test_stale_dag_is_reported() -> None:
    plan = generate("allgather", 3)
    other = generate("allgather", 3, tbs_per_peer=2)
    res = check_semantics(plan, build_dag(other))
    assert res.errors
    assert "does not match" in res.errors[0]


def test_both_flags_check_both_conventions() -> None:
    plan = generate("allreduce", 3)  # in-place
    both = dataclasses.replace(plan, outofplace=True)
    res = semantics(both)
    # correct in place, wrong out of place (the output buffer is never written)
    assert res.errors
    assert res.errors[0].startswith("out-of-place: wrong result: gpu 0 output chunk 0")


def test_deterministic() -> None:
    plan = xml.load(_corpus_file("custom_alltonextfwd_nodes3_i2_Simple.xml"))
    assert semantics(plan) == semantics(plan)


# --------------------------------------------------------------------------------------------
# Properties over generated plans

COLLS = ["allgather", "allreduce", "reducescatter", "alltoall"]


@st.composite
def requests(draw: st.DrawFn) -> tuple[Plan, str]:
    coll = draw(st.sampled_from(COLLS))
    algo = draw(st.sampled_from(["direct", "ring"]))
    n = draw(st.integers(2, 6))
    par = draw(st.integers(1, 3))
    mult = draw(st.integers(1, 2))
    inplace = draw(st.booleans())
    if algo == "direct":
        plan = generate(coll, n, algo=algo, tbs_per_peer=par, chunks_per_peer=par * mult, inplace=inplace)
    else:
        plan = generate(coll, n, algo=algo, channels=par, chunks_per_peer=par * mult, inplace=inplace)
    return plan, coll


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_generated_plans_pass(req: tuple[Plan, str]) -> None:
    plan, _ = req
    res = semantics(plan)
    assert res == SemanticsResult((), (), ())
    assert run_oracle(plan, inplace=plan.inplace, seed=0, zero_fill=False).correct


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.data())
def test_mutated_offsets_are_caught_or_harmless(req: tuple[Plan, str], data: st.DataObject) -> None:
    plan, _ = req
    sites = [(gi, ti, si) for gi, g in enumerate(plan.gpus) for ti, tb in enumerate(g.threadblocks)
             for si, s in enumerate(tb.steps) if s.type is not StepType.NOP]
    gi, ti, si = data.draw(st.sampled_from(sites))
    step = plan.gpus[gi].threadblocks[ti].steps[si]
    fields = [f for f in ("src_offset", "dst_offset") if getattr(step, f) is not None]
    field = data.draw(st.sampled_from(fields))
    old = getattr(step, field)
    new = data.draw(st.integers(0, plan.nchunksperloop - step.count).filter(lambda v: v != old))
    g = plan.gpus[gi]
    tb = g.threadblocks[ti]
    mutated = replace_tb(plan, g.id, tb.id, steps=tuple(
        dataclasses.replace(s, **{field: new}) if j == si else s for j, s in enumerate(tb.steps)))
    res = semantics(mutated)
    if res.errors or res.warnings:
        return  # caught (a wrong result, a race, or reliance on a zeroed buffer)
    # not flagged: then it really still computes the collective (e.g. a descriptive field)
    assert run_oracle(mutated, inplace=plan.inplace, seed=5, zero_fill=False).correct


# --------------------------------------------------------------------------------------------
# Degenerate inputs (fuzzing audit): steps that access no chunk, plans without GPUs


def _zero_counts(plan: Plan) -> Plan:
    return dataclasses.replace(plan, gpus=tuple(dataclasses.replace(g, threadblocks=tuple(
        dataclasses.replace(tb, steps=tuple(dataclasses.replace(s, count=0) for s in tb.steps))
        for tb in g.threadblocks)) for g in plan.gpus))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_plan_whose_steps_move_no_chunks_is_a_wrong_result(req: tuple[Plan, str]) -> None:
    plan = _zero_counts(req[0])
    res = semantics(plan)
    # no step touches a chunk, so nothing can race; with >= 2 gpus every collective needs data
    # from a peer, so the untouched buffers are wrong
    assert res.warnings == ()
    assert len(res.errors) == 1
    assert res.errors[0].startswith("wrong result: gpu 0 ")
    assert not run_oracle(plan, inplace=plan.inplace, seed=3, zero_fill=False).correct


def test_step_moving_no_chunks_can_be_right() -> None:
    # one-gpu in-place allgather: the input already is the output, the cnt=0 copy is harmless
    cpy = _step(0, StepType.COPY, I0, (Buffer.OUTPUT, 0), cnt=0)
    plan = Plan(name="t", protocol=Protocol.SIMPLE, nchannels=1, nchunksperloop=1, ngpus=1,
                collective=Collective.ALLGATHER, inplace=True, outofplace=False, min_bytes=0, max_bytes=0,
                gpus=(Gpu(0, 0, 1, 0, (Threadblock(0, None, None, 0, (cpy,)),)),))
    assert semantics(plan) == SemanticsResult((), (), ())
    assert run_oracle(plan, inplace=True, seed=0, zero_fill=False).correct


@pytest.mark.parametrize("coll", [Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLTOALL])
def test_plan_without_gpus_is_vacuously_right(coll: Collective) -> None:
    # ngpus=0 is the structural check's to reject; the semantic check must not divide by it
    plan = Plan(name="t", protocol=Protocol.SIMPLE, nchannels=1, nchunksperloop=4, ngpus=0, collective=coll,
                inplace=False, outofplace=True, min_bytes=0, max_bytes=0, gpus=())
    assert semantics(plan) == SemanticsResult((), (), ())
