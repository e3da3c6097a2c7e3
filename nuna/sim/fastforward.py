"""The replay's driver: pauses that let Ctrl-C through, and fast-forward of steady states (skip
the middle of long collectives, replay their ends).

Without fast-forward the loop still pauses about every :data:`PAUSE_EVERY_S` of wall time (a
large replay runs in compiled code for minutes, where the interpreter hears no signal): a
paused loop called again goes on exactly as if it had not paused, so the pauses change no
result (tested), whatever the machine's speed makes of their simulated times.

A large collective spends most of its time in a steady state: every running step moves its
lines at a rate that the network, the memory and the CUs' windows set, and the state of the
pod (queues, packets in flight, windows) looks the same from one microsecond to the next.
With ``SimOptions(fast_forward=FastForward())`` the replay runs in windows of
``window_ns``; once the set of running steps has been the same for ``min_span_windows``
windows and the pod's job rate has not drifted between the two halves of that span, it skips
``fraction`` of the time until the first running step would run out of jobs: every running
step is credited with the jobs it completes at its measured rate in that time (their bytes
land exactly; link busy time, grant counts, waits and the latency histogram are extrapolated
from the span), and the replay goes on from the same engine state with a clock that runs
``skipped_ns`` behind. No state is shifted: the jobs in flight, the queues and every time in
the engine stay as they were, so the skipped time only adds to the times the replay records
after it (:func:`shift_times`). Steps never start or end inside a skip, so dependencies, the
ends of steps and the drain at the end of the collective are replayed event by event.

This is sampled simulation in the sense of SMARTS (Wunderlich et al., ISCA 2003): a
statistical shortcut, not a different model. Its error against the full replay is measured in
``docs/simulator.md`` §7. Layer: sim (driven by :func:`nuna.sim.replay.simulate`).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from nuna.errors import SimulationError, UsageError
from nuna.sim import engine as eng
from nuna.sim.result import Skip

I64 = npt.NDArray[np.int64]

#: windows a span keeps (rates come from its more recent half beyond this): the per-step job
#: counts of a 64-GPU pod's 8,000 steps are 64 KB a window
_MAX_SPAN = 256


#: The shortest sampling window: each window is a call into the replay loop, and a window of a
#: few flit times measures nothing (1e-9 ns passed the check once and never finished).
MIN_WINDOW_NS = 10.0


@dataclass(frozen=True, slots=True)
class FastForward:
    """When and how far the replay skips a steady state (defaults: ``docs/simulator.md`` §7).

    ``window_ns``: the sampling window, about one remote-store latency on nuna-4die (1.2 us
    mean at Fig 10a), the time over which a CU turns its window of requests over once.
    ``min_span_windows``: windows of unchanged running steps measured before a skip (rates are
    averaged over them: 8 windows of 500 ns erred by up to +2.2 % on the cases of §7).
    ``max_drift``: the largest relative change of the pod's job rate between the span's two
    halves beyond counting noise (a larger one means a transient: the span restarts at its
    middle). ``min_span_jobs``: jobs every non-starved step must complete in the span (fewer
    4 KiB packets on 8 GPUs erred by +3.5 %). ``fraction``: the share of the time left until the first
    running step runs out of jobs that one skip takes. ``max_skip_spans``: the longest skip, in
    spans (a pod's rate can creep over hundreds of us: one longer skip erred by +37 %).
    ``min_skip_windows``: skips shorter than this many windows are not worth the measuring."""

    window_ns: float = 1000.0
    min_span_windows: int = 10
    max_drift: float = 0.01
    fraction: float = 0.9
    min_skip_windows: float = 4.0
    max_skip_spans: float = 10.0
    min_span_jobs: int = 500

    def check(self) -> None:
        """Raise ``UsageError`` for parameters that cannot work."""
        if not (MIN_WINDOW_NS <= self.window_ns < math.inf and type(self.min_span_windows) is int
                and self.min_span_windows >= 2 and self.max_drift >= 0
                and 0 < self.fraction < 1 and self.min_skip_windows >= 0 and self.max_skip_spans > 0
                and self.min_span_jobs >= 1):
            raise UsageError(f"invalid fast-forward parameters: {self}")


@dataclass
class _Snapshot:
    """What the driver reads at a window's end: per step, jobs done and whether it runs."""

    t_ns: float
    done: I64
    running: npt.NDArray[np.bool_]


@dataclass
class _Stats:
    """The statistics a skip extrapolates (per-edge rows: a few MB on a 64-GPU pod, so only the
    last ``min_span_windows + 1`` windows' are kept)."""

    t_ns: float
    busy: npt.NDArray[np.float64]
    grants: npt.NDArray[np.float64]
    ewait: npt.NDArray[np.float64]
    hist: npt.NDArray[np.float64]
    stat: npt.NDArray[np.float64]
    events: float


#: wall time between two pauses of the loop without fast-forward, when Ctrl-C is heard
PAUSE_EVERY_S = 0.25
#: the shortest stretch of simulated time between two such pauses (a floor for the adaptation:
#: a stretch with no event in it costs a call and nothing else)
MIN_PAUSE_NS = 100.0


def _run_pausing(net: Any, st: Any, R: Any) -> Any:
    """Run the replay loop to its end, pausing it about every :data:`PAUSE_EVERY_S` of wall
    time: each call runs the events before a stop time, whose stretch of simulated time
    adapts to the last call's wall time (within 1/4x-4x a call, at least
    :data:`MIN_PAUSE_NS`). A pause leaves the windowed loop's totals in its domains
    (``F_GATHER_PAUSED`` 0), so the sums are those of a run without pauses."""
    stretch = 1000.0
    stop = 0.0
    while True:
        stop += stretch
        R.par_f[eng.F_STOP] = stop
        started = time.perf_counter()
        st, status = _loop(net, st, R)
        if status == eng.DONE:
            break
        took = time.perf_counter() - started
        stretch = max(MIN_PAUSE_NS, stretch * min(4.0, max(0.25, PAUSE_EVERY_S / max(took, 1e-9))))
    R.par_f[eng.F_STOP] = np.inf
    return st


def _stats(st: Any, R: Any, t_ns: float) -> _Stats:
    return _Stats(t_ns, st.ef[:, eng.EF_BUSY].copy(), st.ei[:, eng.EI_PKTS].astype(np.float64),
                  st.ewait.copy(), R.hist.copy(), R.stat_f.copy(), float(st.ctr[eng.C_EVENTS]))


def _loop(net: Any, st: Any, R: Any) -> tuple[Any, int]:
    """Run the replay loop until it is done or paused (growing the heap when it must)."""
    while True:
        status = eng.replay_loop(net, st, R)
        if status == eng.NEED_HEAP:
            st = eng.grow_heap(st, 2 * eng.heap_capacity(st))
            continue
        if status not in (eng.DONE, eng.PAUSED):
            raise SimulationError(f"internal error: replay pools overflowed "
                                  f"(code {int(R.rc[eng.R_LOSTJOB])})")
        return st, status


def run(net: Any, st: Any, R: Any, n_job_ptr: I64,
        params: FastForward | None) -> tuple[Any, tuple[Skip, ...]]:
    """Run the replay to its end, fast-forwarding steady states when ``params`` is given.
    Returns the (possibly regrown) engine state and the skips made. ``params`` must have
    passed :meth:`FastForward.check`. ``R.par_f[F_STOP]`` starts infinite (no pause) and is
    left so."""
    if params is None:
        return _run_pausing(net, st, R), ()
    S = params.window_ns
    R.par_f[eng.F_GATHER_PAUSED] = 1.0  # the statistics are read at every pause
    ends = n_job_ptr[1:]
    total = np.diff(n_job_ptr)
    skips: list[Skip] = []
    span: list[_Snapshot] = []  # snapshots since the running set formed (the first is its start)
    recent: deque[_Stats] = deque(maxlen=params.min_span_windows + 1)  # the span's last windows
    prev: _Snapshot | None = None
    k = 0
    while True:
        k += 1
        R.par_f[eng.F_STOP] = k * S
        st, status = _loop(net, st, R)
        if status == eng.DONE:
            break
        cur = _Snapshot(k * S, total - R.n_jobs_left, (R.n_state == eng.N_RUN) & (R.n_next_job < ends))
        if prev is None or not np.array_equal(cur.running, prev.running) or not cur.running.any():
            span = []  # the window after a change is warm-up: the span starts at its end
            recent.clear()
            prev = cur
            continue
        prev = cur
        span.append(cur)
        recent.append(_stats(st, R, cur.t_ns))
        if len(span) > _MAX_SPAN:
            span = span[len(span) // 2:]  # rates from the recent half: memory stays bounded
        if len(span) - 1 < params.min_span_windows:
            continue
        base, mid = span[0], span[(len(span) - 1) // 2]
        nodes = np.flatnonzero(cur.running)
        jobs_a = float((mid.done[nodes] - base.done[nodes]).sum())
        jobs_b = float((cur.done[nodes] - mid.done[nodes]).sum())
        rate_a, rate_b = jobs_a / (mid.t_ns - base.t_ns), jobs_b / (cur.t_ns - mid.t_ns)
        # a drift within the counting noise of the halves (two standard deviations of a count)
        # is no drift: few large packets would otherwise never look steady
        drift = max(params.max_drift, 2.0 / np.sqrt(max(jobs_b, 1.0)))
        if rate_b <= 0.0 or abs(rate_a - rate_b) > drift * rate_b:
            span = span[(len(span) - 1) // 2:]  # the first half was still a transient
            while recent[0].t_ns < span[0].t_ns:
                recent.popleft()
            continue
        width = cur.t_ns - base.t_ns
        count = cur.done[nodes] - base.done[nodes]
        # a step's completions come in bursts (a packet of many lines, a window turned over): its
        # rate is as good as the jobs counted, so the span grows until every step that is not
        # starved (under a tenth of the median count: its few credited jobs matter little) has
        # enough; a starved step is credited what it did, maybe nothing
        busy = count >= max(1.0, 0.1 * float(np.median(count)))
        if not busy.any() or count[busy].min() < params.min_span_jobs:
            continue
        rate = count / width
        left = ends[nodes] - R.n_next_job[nodes]
        moving = rate > 0
        first_out = float(np.min(left[moving] / rate[moving]))
        skip_ns = min(params.fraction * first_out, params.max_skip_spans * width)
        if skip_ns < params.min_skip_windows * S:
            continue
        jobs = np.minimum(np.floor(rate * skip_ns).astype(np.int64), left - 1)
        first, last = recent[0], recent[-1]
        events = _credit(st, R, nodes, jobs, first, last, skip_ns / (last.t_ns - first.t_ns))
        skips.append(Skip(cur.t_ns, skip_ns, int(jobs.sum()), events))
        span = []
        recent.clear()
    R.par_f[eng.F_STOP] = np.inf
    R.par_f[eng.F_GATHER_PAUSED] = 0.0
    return st, tuple(skips)


def _credit(st: Any, R: Any, nodes: I64, jobs: I64, base: _Stats, cur: _Stats, scale: float) -> float:
    """Credit each running step in ``nodes`` with its next ``jobs`` jobs as done: their remote
    bytes land (exact); link, wait and latency statistics grow by ``scale`` times what the
    span's last windows added. Returns the flit-hop events the skipped time would have taken."""
    st.ef[:, eng.EF_BUSY] += (cur.busy - base.busy) * scale
    st.ei[:, eng.EI_PKTS] += np.round((cur.grants - base.grants) * scale).astype(st.ei.dtype)
    st.ewait[:] += (cur.ewait - base.ewait) * scale
    R.hist[:] += (cur.hist - base.hist) * scale
    for s in (eng.S_LAT_SUM, eng.S_LAT_W, eng.S_READY_SUM):
        R.stat_f[s] += (cur.stat[s] - base.stat[s]) * scale
    for n, k in zip(nodes.tolist(), jobs.tolist(), strict=True):
        if k <= 0:
            continue
        j0 = int(R.n_next_job[n])
        remote = int(R.j_bytes[j0:j0 + k][R.j_cls[j0:j0 + k, 3] >= 0].sum())
        R.n_next_job[n] += k
        R.n_jobs_left[n] -= k
        if remote:
            R.landed[R.n_gpu[n], R.n_peer[n]] += remote
            R.n_land[R.match_recv[n]] -= remote
            R.stat_f[eng.S_REMOTE_BYTES] += remote
    return (cur.events - base.events) * scale


def shift_times(times: npt.NDArray[np.float64], skips: tuple[Skip, ...]) -> None:
    """Move times recorded on the replay's clock (in place) onto the collective's: a time at
    or after a skip is later by that skip."""
    shift = np.zeros_like(times)
    for s in skips:
        shift += np.where(times >= s.at_ns, s.skipped_ns, 0.0)
    times += shift
