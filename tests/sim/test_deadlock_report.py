"""The replay's deadlock report (``nuna.sim.replay._deadlock_message``): each blocked
threadblock's first unfinished step is named with what holds it (control predecessors, data
from a named send, or its own data movement), and the list is cut after the first six."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nuna.errors import SimulationError
from nuna.plan.dag import build_dag, flatten
from nuna.plan.xml import loads
from nuna.sim import engine as eng
from nuna.sim import simulate
from nuna.sim.replay import _deadlock_message
from nuna.topology.spec import load_topology
from tests.sim.test_replay import DEADLOCK, ONE_SEND

#: how many blocked threadblocks the report names before "(and N more)"
LISTED = 6


@pytest.fixture(scope="module")
def spec():  # type: ignore[no-untyped-def]
    return load_topology("nuna-4die")


def _deadlock(plan_xml: str, spec) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(SimulationError, match=r"^deadlock: ") as info:
        simulate(loads(plan_xml), spec, 512)
    message = str(info.value)
    assert "\n" not in message
    return message


def _entries(message: str) -> list[str]:
    """The report's entries (one per named threadblock), its "(and N more)" tail removed."""
    body = message.split(" cannot finish: ", 1)[1]
    return body.split(" (and ")[0].split("; ")


def _step(s: int, kind: str, src: int, dst: int, dep: tuple[int, int] = (-1, -1), hasdep: int = 0) -> str:
    return (f'<step s="{s}" type="{kind}" srcbuf="o" srcoff="{src}" dstbuf="o" dstoff="{dst}" cnt="1" '
            f'depid="{dep[0]}" deps="{dep[1]}" hasdep="{hasdep}"/>')


def _ring(ngpus: int, waiters: int) -> str:
    """A ring that deadlocks: tb 0 of GPU g receives from g-1 before it sends to g+1, so every
    receive waits for a send that waits for it. Each GPU also has ``waiters`` more threadblocks
    (ids 1..waiters) whose only step, a copy, depends on that receive. The GPUs are written in
    descending id order, so the report's order is the replay's (by gpu, then tb), not the
    file's."""
    gpus = []
    for g in reversed(range(ngpus)):
        nxt, prev = (g + 1) % ngpus, (g - 1) % ngpus
        tbs = [f'<tb id="0" send="{nxt}" recv="{prev}" chan="0">'
               + _step(0, "r", prev, prev, hasdep=int(waiters > 0)) + _step(1, "s", g, g) + "</tb>"]
        tbs += [f'<tb id="{t}" send="-1" recv="-1" chan="0">' + _step(0, "cpy", prev, g, dep=(0, 0)) + "</tb>"
                for t in range(1, waiters + 1)]
        gpus.append(f'<gpu id="{g}" i_chunks="0" o_chunks="{ngpus}" s_chunks="0">' + "".join(tbs) + "</gpu>")
    head = (f'<algo name="ring-dl" proto="Simple" nchannels="1" nchunksperloop="{ngpus}" ngpus="{ngpus}" '
            f'coll="allgather" inplace="1">')
    return head + "".join(gpus) + "</algo>"


def _expected_entry(ngpus: int, g: int, t: int) -> str:
    """What the report says of tb ``t`` of GPU ``g`` in :func:`_ring`."""
    if t == 0:
        return f"gpu {g} tb 0 step 0 (r) waits for data from gpu {(g - 1) % ngpus} tb 0 step 1 (s)"
    return f"gpu {g} tb {t} step 0 (cpy) waits for gpu {g} tb 0 step 0 (r)"


def test_a_step_behind_a_blocked_dependency_names_it(spec) -> None:  # type: ignore[no-untyped-def]
    # the 2-GPU DEADLOCK plan plus a second threadblock on GPU 0: a copy that finishes, then
    # one that depends on tb 0's blocked receive. The second waits for that receive only (its
    # other control predecessor, the first copy, is done), not for data
    waiter = ('<tb id="1" send="-1" recv="-1" chan="0">' + _step(0, "cpy", 0, 1)
              + _step(1, "cpy", 0, 1, dep=(0, 0)) + "</tb>")
    plan_xml = DEADLOCK.replace('</tb></gpu><gpu id="1"', "</tb>" + waiter + '</gpu><gpu id="1"', 1)
    assert plan_xml != DEADLOCK
    message = _deadlock(plan_xml, spec)
    assert message.startswith("deadlock: 3 threadblocks cannot finish: ")
    assert _entries(message) == [
        "gpu 0 tb 0 step 0 (r) waits for data from gpu 1 tb 0 step 1 (s)",
        "gpu 0 tb 1 step 1 (cpy) waits for gpu 0 tb 0 step 0 (r)",
        "gpu 1 tb 0 step 0 (r) waits for data from gpu 0 tb 0 step 1 (s)",
    ]
    assert "more)" not in message


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ngpus=st.integers(2, 8), waiters=st.integers(0, 3))
# the cut's edges: exactly LISTED blocked, one more, and an 8-GPU pod with ten left unnamed
@example(ngpus=6, waiters=0)
@example(ngpus=7, waiters=0)
@example(ngpus=8, waiters=1)
def test_report_names_the_first_blocked_threadblocks_and_counts_the_rest(  # type: ignore[no-untyped-def]
        spec, ngpus: int, waiters: int) -> None:
    message = _deadlock(_ring(ngpus, waiters), spec)
    # every threadblock of the ring is blocked: its receive or a step behind that receive
    blocked = [(g, t) for g in range(ngpus) for t in range(waiters + 1)]
    assert message.startswith(f"deadlock: {len(blocked)} threadblocks cannot finish: ")
    assert _entries(message) == [_expected_entry(ngpus, g, t) for g, t in blocked[:LISTED]]
    hidden = len(blocked) - LISTED
    if hidden > 0:
        assert message.endswith(f" (and {hidden} more)")
    else:
        assert "more)" not in message


def test_a_step_whose_data_movement_never_ends_is_stuck_moving_data() -> None:
    """No valid plan reaches this branch through ``simulate``: a step with no unfinished control
    predecessor that is not waiting for data has started moving data, and the network always
    delivers (endpoints sink everything, mesh routes are X-then-Y: docs/simulator.md), so its
    jobs finish. The report is built here from the state such a lost job would leave: ONE_SEND's
    send running and its receive waiting for the data."""
    plan = loads(ONE_SEND)
    flat = flatten(plan)
    dag = build_dag(plan)
    send, recv = 0, 1  # one step per threadblock, gpu 0's first
    assert dag.match_recv[send] == recv
    assert dag.match_send[recv] == send
    state = np.array([eng.N_RUN, eng.N_DATA], dtype=np.int8)
    replay = SimpleNamespace(n_state=state, n_indeg=np.zeros(2, dtype=np.int64))
    message = _deadlock_message(flat, dag, replay, np.full(2, -1, dtype=np.int64), "", None)
    assert message == ("deadlock: 2 threadblocks cannot finish: gpu 0 tb 0 step 0 (s) is stuck moving data; "
                       "gpu 1 tb 0 step 0 (r) waits for data from gpu 0 tb 0 step 0 (s)")
    # a step queued but never started (ready, yet still N_WAIT) is reported the same way
    replay.n_state = np.array([eng.N_WAIT, eng.N_DONE], dtype=np.int8)
    message = _deadlock_message(flat, dag, replay, np.full(2, -1, dtype=np.int64), "", None)
    assert message == "deadlock: 1 threadblock cannot finish: gpu 0 tb 0 step 0 (s) is stuck moving data"
