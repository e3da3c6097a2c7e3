"""Plan generators: structure of the direct and ring plans, verification, XML round trip,
option errors, and the ``nuna generate`` command."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import UsageError
from nuna.plan import xml
from nuna.plan.generate import ALGORITHMS, COLLECTIVES, generate
from nuna.plan.ir import Buffer, Collective, Plan, Protocol, Step, StepType
from nuna.plan.verify import verify
from tests.conftest import CliResult

COLLS = [c.value for c in COLLECTIVES]


def make(coll: str, n: int, algo: str, par: int, mult: int = 1, **kw: object) -> Plan:
    if algo == "direct":
        return generate(coll, n, algo=algo, tbs_per_peer=par, chunks_per_peer=par * mult, **kw)  # type: ignore[arg-type]
    return generate(coll, n, algo=algo, channels=par, chunks_per_peer=par * mult, **kw)  # type: ignore[arg-type]


def most_sends_ahead(steps: Iterable[Step]) -> int:
    """The most sends a threadblock's steps run ahead of its receives (``rcs`` counts as both)."""
    ahead = most = 0
    for s in steps:
        ahead += s.type.sends - s.type.receives
        most = max(most, ahead)
    return most


def connections(plan: Plan) -> Counter[tuple[int, int, int, str]]:
    seen: Counter[tuple[int, int, int, str]] = Counter()
    for g in plan.gpus:
        for tb in g.threadblocks:
            if tb.send_peer is not None:
                seen[(g.id, tb.send_peer, tb.channel, "send")] += 1
            if tb.recv_peer is not None:
                seen[(g.id, tb.recv_peer, tb.channel, "recv")] += 1
    return seen


# --------------------------------------------------------------------------------------------
# every small configuration verifies cleanly and round-trips


SMALL = list(itertools.product(COLLS, ALGORITHMS, [2, 3, 5], [1, 2], [True, False]))


@pytest.mark.parametrize(("coll", "algo", "n", "par", "inplace"), SMALL)
def test_small_plans_verify_and_round_trip(coll: str, algo: str, n: int, par: int, inplace: bool) -> None:
    plan = make(coll, n, algo, par, 2, inplace=inplace)
    report = verify(plan, strict=True)
    assert report.errors == ()
    assert xml.loads(xml.dump(plan), "gen") == plan
    assert plan.inplace is inplace
    assert plan.outofplace is not inplace
    assert plan.nchunksperloop == n * 2 * par


@settings(max_examples=25, deadline=None)
@given(coll=st.sampled_from(COLLS), algo=st.sampled_from(ALGORITHMS), n=st.integers(2, 9),
       par=st.integers(1, 4), mult=st.integers(1, 3), inplace=st.booleans(),
       proto=st.sampled_from(list(Protocol)))
def test_random_plans_verify(coll: str, algo: str, n: int, par: int, mult: int, inplace: bool,
                             proto: Protocol) -> None:
    plan = make(coll, n, algo, par, mult, inplace=inplace, protocol=proto)
    report = verify(plan)
    assert report.errors == ()
    assert not [w for w in report.warnings if "race" in w or "zeroed" in w]
    assert xml.loads(xml.dump(plan), "gen") == plan
    for g in plan.gpus:
        for tb in g.threadblocks:
            # one chunk a send or receive, never more than one send ahead of the receives:
            # the executors' flow control cannot hang such a threadblock at any size
            assert all(s.count == 1 for s in tb.steps if s.type.sends or s.type.receives)
            assert most_sends_ahead(tb.steps) <= 1


@pytest.mark.parametrize("coll", COLLS)
@pytest.mark.parametrize("algo", ALGORITHMS)
def test_64_gpus_verify(coll: str, algo: str) -> None:
    plan = make(coll, 64, algo, 1)
    report = verify(plan)
    assert report.errors == ()
    assert not [w for w in report.warnings if "race" in w]


# --------------------------------------------------------------------------------------------
# structure of direct plans


@pytest.mark.parametrize("coll", COLLS)
@pytest.mark.parametrize(("n", "K"), [(2, 1), (4, 3), (8, 1), (8, 4)])
def test_direct_threadblocks_one_per_peer_and_k(coll: str, n: int, K: int) -> None:
    plan = make(coll, n, "direct", K)
    assert plan.nchannels == K
    for g in plan.gpus:
        assert len(g.threadblocks) == (n - 1) * K
        assert [tb.id for tb in g.threadblocks] == list(range((n - 1) * K))
        pairs = {(tb.send_peer, tb.channel) for tb in g.threadblocks}
        assert pairs == {(p, k) for p in range(n) if p != g.id for k in range(K)}
        assert all(tb.send_peer == tb.recv_peer for tb in g.threadblocks)
    # every connection (gpu, peer, channel, direction) belongs to exactly one threadblock
    assert set(connections(plan).values()) == {1}


@pytest.mark.parametrize("coll", ["allgather", "alltoall"])
@pytest.mark.parametrize("inplace", [True, False])
def test_direct_each_tb_moves_its_share_a_chunk_at_a_time(coll: str, inplace: bool) -> None:
    n, K, C = 5, 2, 6
    m = C // K
    plan = generate(coll, n, tbs_per_peer=K, chunks_per_peer=C, inplace=inplace)
    for g in plan.gpus:
        for tb in g.threadblocks:
            net = [s for s in tb.steps if s.type in (StepType.SEND, StepType.RECV)]
            # s r s r ...: never more than one send ahead of the receives
            assert [s.type for s in net] == [StepType.SEND, StepType.RECV] * m
            assert all(s.count == 1 for s in net)
            k, p = tb.channel, tb.send_peer
            assert p is not None
            # alltoall sends the peer's block, allgather its own slice (or its input)
            base = {"alltoall": p * C, "allgather": g.id * C if inplace else 0}[coll]
            sent = [s.src_offset for s in net if s.type is StepType.SEND]
            assert sent == [base + k * m + j for j in range(m)]
            got = [s.dst_offset for s in net if s.type is StepType.RECV]
            assert got == [p * C + k * m + j for j in range(m)]


@pytest.mark.parametrize("coll", ["allreduce", "reducescatter"])
def test_direct_reduction_exchanges_a_chunk_at_a_time(coll: str) -> None:
    n, K, C = 4, 2, 6
    plan = generate(coll, n, tbs_per_peer=K, chunks_per_peer=C)
    for g in plan.gpus:
        for tb in g.threadblocks:
            net = [s for s in tb.steps if s.type.sends or s.type.receives]
            assert all(s.count == 1 for s in net)
            kinds = ["s" if s.type is StepType.SEND else "r" for s in net]
            phases = 2 if coll == "allreduce" else 1
            assert "".join(kinds) == "sr" * (C // K) * phases
            # the reductions of scratch are local and whole: one step per source
            assert all(s.count == C // K for s in tb.steps if s.type is StepType.REDUCE)


def test_paper_threadblock_counts() -> None:
    # 1 threadblock per peer (7 per GPU at 8 GPUs) up to 144 per peer (1,008 per GPU)
    assert {len(g.threadblocks) for g in generate("allgather", 8).gpus} == {7}
    assert {len(g.threadblocks) for g in generate("allgather", 8, tbs_per_peer=144).gpus} == {1008}
    big = generate("allgather", 64, tbs_per_peer=16)
    assert {len(g.threadblocks) for g in big.gpus} == {1008}
    assert sum(len(tb.steps) for g in big.gpus for tb in g.threadblocks) == 64 * 1008 * 2


def test_inplace_allgather_has_no_copy_and_no_input() -> None:
    plan = generate("allgather", 4, tbs_per_peer=2)
    steps = [s for g in plan.gpus for tb in g.threadblocks for s in tb.steps]
    assert StepType.COPY not in {s.type for s in steps}
    assert Buffer.INPUT not in {s.src_buffer for s in steps} | {s.dst_buffer for s in steps}
    assert all(g.input_chunks == 0 and g.output_chunks == 8 for g in plan.gpus)


def test_out_of_place_copy_sits_in_first_peer_threadblocks() -> None:
    n, K = 4, 2
    plan = generate("allgather", n, tbs_per_peer=K, inplace=False)
    for g in plan.gpus:
        with_copy = [tb.id for tb in g.threadblocks if any(s.type is StepType.COPY for s in tb.steps)]
        assert with_copy == list(range(K))
        for tb in g.threadblocks[:K]:
            assert tb.steps[-1].type is StepType.COPY


@pytest.mark.parametrize("coll", ["allreduce", "reducescatter"])
@pytest.mark.parametrize("n", [3, 4, 6])
def test_direct_reduction_follows_executor_dependency_rules(coll: str, n: int) -> None:
    plan = generate(coll, n, tbs_per_peer=2)
    for g in plan.gpus:
        waited = {(s.depend_tb, s.depend_step) for tb in g.threadblocks for s in tb.steps
                  if s.depend_tb is not None}
        for tb in g.threadblocks:
            for i, s in enumerate(tb.steps):
                assert s.index == i
                assert s.has_dependent == ((tb.id, s.index) in waited)
                if s.type is StepType.NOP:
                    # a nop carries a dependency and the next real step has its own (§6.3)
                    assert s.depend_tb is not None
                    nxt = next(x for x in tb.steps[i:] if x.type is not StepType.NOP)
                    assert nxt.depend_tb is not None
            res = [s for s in tb.steps if s.type is StepType.REDUCE]
            # only the first reduction waits, so the executor can fuse the rest
            assert all(s.depend_tb is None for s in res[1:])
            if res:
                assert len({(s.dst_buffer, s.dst_offset) for s in res}) == 1


# --------------------------------------------------------------------------------------------
# structure of ring plans


@pytest.mark.parametrize(("coll", "steps"), [("allgather", lambda n: n), ("reducescatter", lambda n: n),
                                             ("allreduce", lambda n: 2 * n - 1)])
@pytest.mark.parametrize("n", [2, 3, 8])
def test_ring_shape(coll: str, steps: Callable[[int], int], n: int) -> None:
    M = 3
    plan = generate(coll, n, algo="ring", channels=M)
    assert plan.nchannels == M
    for g in plan.gpus:
        assert len(g.threadblocks) == M
        for c, tb in enumerate(g.threadblocks):
            assert (tb.send_peer, tb.recv_peer, tb.channel) == ((g.id + 1) % n, (g.id - 1) % n, c)
            assert len(tb.steps) == steps(n)
    first = plan.gpus[0].threadblocks[0].steps
    if coll == "allgather":
        assert [s.type for s in first] == [StepType.SEND, *[StepType.RECV_COPY_SEND] * (n - 2), StepType.RECV]
    if coll == "allreduce" and n > 2:
        assert StepType.RECV_REDUCE_SEND in {s.type for s in first}
        assert StepType.RECV_REDUCE_COPY_SEND in {s.type for s in first}


@pytest.mark.parametrize("coll", COLLS)
def test_ring_moves_one_chunk_column_after_another(coll: str) -> None:
    # a ring's sub-slice of m chunks goes round a column at a time, one-chunk steps, each
    # column's pass as the whole pass of a one-chunk ring: never more than one send ahead
    n, M, m = 4, 2, 3
    one = generate(coll, n, algo="ring", channels=M)
    plan = generate(coll, n, algo="ring", channels=M, chunks_per_peer=M * m)
    for g, g1 in zip(plan.gpus, one.gpus, strict=True):
        for tb, tb1 in zip(g.threadblocks, g1.threadblocks, strict=True):
            net = [s for s in tb.steps if s.type.sends or s.type.receives]
            assert all(s.count == 1 for s in net)
            pattern = [s.type for s in tb1.steps if s.type.sends or s.type.receives]
            assert [s.type for s in net] == pattern * m
            assert most_sends_ahead(net) <= 1


def test_ring_alltoall_relays_every_block() -> None:
    n = 5
    plan = generate("alltoall", n, algo="ring")
    tb = plan.gpus[0].threadblocks[0]
    sends = sum(1 for s in tb.steps if s.type.sends)
    # own n-1 blocks plus relays: block for distance h crosses h links
    assert sends == sum(range(1, n))
    assert sum(1 for s in tb.steps if s.type is StepType.RECV) == n - 1


# --------------------------------------------------------------------------------------------
# header, determinism, errors


def test_protocol_changes_only_the_header() -> None:
    a = generate("allreduce", 4, tbs_per_peer=2)
    b = generate("allreduce", 4, tbs_per_peer=2, protocol="LL128")
    assert b.protocol is Protocol.LL128
    assert dataclasses.replace(b, protocol=Protocol.SIMPLE) == a


def test_deterministic_bytes() -> None:
    assert xml.dump(generate("alltoall", 6, algo="ring", channels=2)) == \
        xml.dump(generate("alltoall", 6, algo="ring", channels=2))


def test_defaults_follow_msccl() -> None:
    assert generate("allgather", 2).inplace
    assert generate("allreduce", 2).inplace
    assert generate("reducescatter", 2).inplace
    assert not generate("alltoall", 2).inplace
    assert generate("reduce_scatter", 2).collective is Collective.REDUCESCATTER


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"ngpus": 1}, "ngpus must be"),
    ({"ngpus": 0}, "ngpus must be"),
    ({"tbs_per_peer": 0}, "tbs_per_peer must be"),
    ({"tbs_per_peer": 2, "chunks_per_peer": 3}, "multiple of tbs_per_peer"),
    ({"chunks_per_peer": 0}, "chunks_per_peer must be"),
    ({"channels": 2}, "channels applies to the ring"),
    ({"algo": "ring", "tbs_per_peer": 2}, "tbs_per_peer applies to the direct"),
    ({"algo": "ring", "channels": 2, "chunks_per_peer": 3}, "multiple of channels"),
    ({"algo": "ring", "channels": 0}, "channels must be"),
    ({"algo": "tree"}, "unknown algorithm"),
    ({"collective": "broadcast"}, "cannot generate collective"),
    ({"protocol": "LL64"}, "unknown protocol"),
    ({"ngpus": 4096, "tbs_per_peer": 4}, "steps"),
])
def test_impossible_requests(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"collective": "allgather", "ngpus": 4, **kwargs}
    coll, n = args.pop("collective"), args.pop("ngpus")
    with pytest.raises(UsageError, match=match):
        generate(coll, n, **args)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# the command


@pytest.fixture
def cli(run_cli: Callable[..., CliResult],
        monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    """``run_cli``: the commands are registered on the root app."""
    return run_cli


def test_cli_writes_a_verifiable_plan(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    out = tmp_path / "ag.xml"
    res = cli("generate", "allgather", "--gpus", "8", "--tbs-per-peer", "2", "--protocol", "LL", "-o", out)
    assert res.code == 0, res.err
    assert res.out.count("\n") == 1
    assert "14 threadblocks/GPU" in res.out
    plan = xml.load(out)
    assert plan == generate("allgather", 8, tbs_per_peer=2, protocol=Protocol.LL)
    assert verify(plan).errors == ()


def test_cli_ring_options(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    out = tmp_path / "ar.xml"
    res = cli("generate", "allreduce", "--gpus", "4", "--algo", "ring", "--channels", "2",
              "--chunks-per-peer", "4", "--out-of-place", "-o", out)
    assert res.code == 0, res.err
    want = generate("allreduce", 4, algo="ring", channels=2, chunks_per_peer=4, inplace=False)
    assert xml.load(out) == want


def test_cli_bad_request_is_one_line(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    out = tmp_path / "x.xml"
    res = cli("generate", "allgather", "--gpus", "1", "-o", out)
    assert res.code == 1
    assert res.err.count("\n") == 1
    assert "ngpus must be" in res.err
    assert not out.exists()


def test_cli_unknown_collective_is_usage_error(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    res = cli("generate", "gather", "--gpus", "4", "-o", tmp_path / "x.xml")
    assert res.code == 2
    assert "Traceback" not in res.err


def test_cli_missing_folder(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    res = cli("generate", "allgather", "--gpus", "2", "-o", tmp_path / "nope" / "x.xml")
    assert res.code == 1
    assert res.err.count("\n") == 1
