"""The points' estimated cost (the progress bar's weights): the jobs it counts are the
simulator's, it grows with the work, the runner reports it, and the bar follows it."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.cli.common import SweepProgressBar
from nuna.experiments.cost import estimated_jobs, estimated_lines, point_cost, worker_start_cost
from nuna.experiments.executors import default_jobs, started_workers
from nuna.experiments.gemm import gemm_point
from nuna.experiments.points import simulate_point
from nuna.experiments.spec import DEFAULT_POINT_FUNCTION, GEMM_POINT_FUNCTION, Point, expand
from nuna.experiments.sweep import SweepProgress, load_sweep_spec, run_sweep, tasks_of
from nuna.sim import SimOptions
from nuna.topology.address import nar_granularities
from nuna.topology.spec import load_topology

COLLECTIVES = ("allgather", "allreduce", "alltoall", "reducescatter")


def _point(collective: str, gpus: int, size_bytes: int, *, tbs: int = 1, packet: int | str = "auto",
           config: str = "UA") -> dict[str, object]:
    return Point(collective=collective, gpus=gpus, size_bytes=size_bytes, config=config,
                 nar_granularity=None, tbs_per_peer=tbs, topology="nuna-4die", gemm_bytes=0,
                 algo="direct", packet_bytes=packet, seed=0).as_dict()


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize(("gpus", "tbs", "size"), [(2, 1, 96 * 1024), (3, 1, 96 * 1024), (4, 4, 96 * 1024),
                                                   (8, 1, 96 * 1024), (16, 1, 100 * 1024),
                                                   (8, 16, 100 * 1024), (5, 3, 100 * 1024)])
def test_the_jobs_counted_are_the_simulators(collective: str, gpus: int, tbs: int, size: int) -> None:
    # 100 KiB does not split into whole lines per threadblock: each step rounds its share up
    point = _point(collective, gpus, size, tbs=tbs)
    assert estimated_jobs(point) == simulate_point(dict(point))["jobs"]


def test_auto_groups_lines_as_the_simulator_does() -> None:
    cap = SimOptions().auto_max_jobs
    small = _point("allgather", 8, 1 << 20)
    large = _point("allgather", 64, 1 << 30)
    assert estimated_jobs(small) == estimated_lines("allgather", 8, 1 << 20)  # flits
    lines = estimated_lines("allgather", 64, 1 << 30)
    assert lines > 100 * cap
    # 64 KiB packets, the simulator's cap: 256 lines each
    assert estimated_jobs(large) == -(-lines // 256)
    capped = dict(large, max_packet_bytes=4096)
    assert estimated_jobs(capped) == -(-lines // 16)
    assert estimated_jobs(dict(large, packet_bytes=1024)) == -(-lines // 4)


SIZES = st.integers(min_value=1, max_value=1 << 31)


@settings(max_examples=60, deadline=None)
@given(collective=st.sampled_from(COLLECTIVES), gpus=st.integers(2, 128), size=SIZES, more=SIZES,
       packet=st.sampled_from([256, 1024, 65536]))
def test_cost_grows_with_the_work_at_a_fixed_packet(collective: str, gpus: int, size: int, more: int,
                                                    packet: int) -> None:
    base = point_cost(DEFAULT_POINT_FUNCTION, _point(collective, gpus, size, packet=packet))
    assert base > 0
    assert point_cost(DEFAULT_POINT_FUNCTION, _point(collective, gpus, size + more, packet=packet)) >= base
    # a larger pod: more steps, each a smaller share; where both pods' shares are whole lines
    # (as in the simulator, rounding each share up can otherwise count fewer lines in all)
    whole = 256 * gpus * (gpus + 1) * -(-size // (256 * gpus * (gpus + 1)))
    assert point_cost(DEFAULT_POINT_FUNCTION, _point(collective, gpus + 1, whole, packet=packet)) > \
        point_cost(DEFAULT_POINT_FUNCTION, _point(collective, gpus, whole, packet=packet))


@settings(max_examples=60, deadline=None)
@given(collective=st.sampled_from(COLLECTIVES), gpus=st.integers(2, 128), size=SIZES)
def test_auto_never_counts_more_jobs_than_flits_nor_far_more_than_its_target(
        collective: str, gpus: int, size: int) -> None:
    auto = estimated_jobs(_point(collective, gpus, size))
    flits = estimated_jobs(_point(collective, gpus, size, packet=256))
    assert auto <= flits
    if auto < flits:  # grouped: down to about the target, unless the largest packet stops it
        lines_per_largest = SimOptions().max_packet_bytes // 256
        assert auto <= 2 * SimOptions().auto_max_jobs or auto == -(-flits // lines_per_largest)


@settings(max_examples=40, deadline=None)
@given(collective=st.sampled_from(COLLECTIVES), gpus=st.integers(2, 64), size=SIZES,
       tbs=st.integers(1, 16))
def test_placements_that_read_the_accesses_cost_more(collective: str, gpus: int, size: int, tbs: int) -> None:
    cost = {config: point_cost(DEFAULT_POINT_FUNCTION, _point(collective, gpus, size, tbs=tbs, config=config))
            for config in ("UA", "UA+NAR", "NAP+NAR", "NUMA+NAR")}
    assert cost["UA"] < cost["UA+NAR"] < cost["NAP+NAR"] < cost["NUMA+NAR"]
    # more threadblocks, more steps to place; at a line per step (a chunk of one line) also
    # more jobs (with larger shares, rounding each up to whole lines may count fewer in all)
    tiny = [point_cost(DEFAULT_POINT_FUNCTION, _point(collective, gpus, 256 * gpus, tbs=k))
            for k in (tbs, tbs + 1)]
    assert tiny[1] > tiny[0]


def test_other_point_functions_weigh_every_point_alike() -> None:
    point = _point("allgather", 64, 1 << 30)
    assert point_cost("sweep_fake_points:echo_point", point) == 1.0
    assert point_cost("sweep_fake_points:echo_point", _point("allgather", 2, 1024)) == 1.0
    # without a GEMM a GEMM point replays the collective alone
    assert point_cost(GEMM_POINT_FUNCTION, point) == point_cost(DEFAULT_POINT_FUNCTION, point)


def test_an_auto_granularity_counts_a_replay_per_candidate() -> None:
    point = dict(_point("allgather", 8, 1 << 20, config="UA+NAR"), nar_granularity=4)
    candidates = len(nar_granularities(load_topology("nuna-4die")))
    assert candidates > 1
    assert point_cost(DEFAULT_POINT_FUNCTION, dict(point, nar_granularity="auto")) == pytest.approx(
        (1 + candidates) * point_cost(DEFAULT_POINT_FUNCTION, point))


@pytest.mark.parametrize("gpus", [2, 8])
def test_a_concurrent_gemms_jobs_are_counted(gpus: int) -> None:
    point = dict(_point("allgather", gpus, 1 << 20, packet=256), gemm_bytes=1000 * 1024)
    jobs = gemm_point(dict(point))["jobs"]
    assert estimated_jobs(point) == jobs
    alone = dict(point, gemm_bytes=0)
    assert jobs > estimated_jobs(alone)
    # a GEMM's job weighs more than a collective's (its line loads two operands: Fig 14's
    # points took 1.9 times the collective's rate per GEMM line)
    empty = dict(alone, size_bytes=0)
    per_job = (point_cost(GEMM_POINT_FUNCTION, alone) - point_cost(GEMM_POINT_FUNCTION, empty)) \
        / (estimated_jobs(alone) - estimated_jobs(empty))
    extra = point_cost(GEMM_POINT_FUNCTION, point) - point_cost(GEMM_POINT_FUNCTION, alone)
    assert extra > 1.5 * per_job * (jobs - estimated_jobs(alone))


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_runner_reports_the_estimated_cost(write_spec: Callable[..., Path], tmp_path: Path,
                                               jobs: int) -> None:
    spec = load_sweep_spec(write_spec(
        '[sweep]\nname = "cost"\n[grid]\ncollectives = ["allgather"]\ngpus = [2, 4, 8]\n'
        'sizes = ["64KiB"]\nconfigs = ["UA"]\n[fixed]\npacket_bytes = "auto"\n'))
    costs = {task.point_id: point_cost(task.point_function, task.point) for task, _ in tasks_of(spec)}
    assert len(set(costs.values())) == 3  # the larger pod, the dearer
    start = worker_start_cost(spec.point_function)
    assert start > 0
    events: list[SweepProgress] = []
    run_sweep(spec, tmp_path / "out", jobs=jobs, progress=events.append)
    first, *points = events
    assert len(points) == len(expand(spec))
    # each worker's start is charged to one of the first points to finish
    assert first.cost_to_run == pytest.approx(sum(costs.values()) + jobs * start)
    done = [e.cost_completed for e in points]
    expected, running = [], 0.0
    for k, e in enumerate(points, 1):
        running += costs[e.point_id] + (start if k <= jobs else 0.0)
        expected.append(running)
    assert done == pytest.approx(expected)
    assert done[-1] == pytest.approx(first.cost_to_run)


def test_workers_started_are_counted_as_the_pool_starts_them() -> None:
    assert started_workers(4, None, 10) == 4
    assert started_workers(4, None, 3) == 3  # no idle workers
    assert started_workers(None, None, 10_000) == default_jobs()
    assert started_workers(4, "tcp://head:8786", 10) == 0  # the cluster's own
    assert started_workers(4, None, 0) == 0
    assert worker_start_cost("sweep_fake_points:echo_point") == 0.0


def test_the_bar_and_its_eta_follow_the_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = io.StringIO()
    monkeypatch.setattr(sys, "stderr", drawn)
    bar = SweepProgressBar(enabled=True)
    bar(SweepProgress("start", total=3, to_run=2, completed=0, failed=0, cost_to_run=10.0))
    bar._bar.start_t -= 90.0  # the sweep started a minute and a half ago
    bar(SweepProgress("point", 3, 2, 1, 1, "a", "a", "failed", cost_to_run=10.0, cost_completed=9.0))
    bar._bar.refresh()
    line = drawn.getvalue().rsplit("\r", 1)[-1]
    assert line.startswith("sweep 1/2 pt:  90%|")
    # nine tenths of the cost in 90 s: the last tenth in 10 s (by count: 90 s)
    assert "[01:30<00:10, failed=1]" in line
    bar(SweepProgress("point", 3, 2, 2, 1, "b", "b", "ok", cost_to_run=10.0, cost_completed=9.999))
    bar.close()
    last = drawn.getvalue().rsplit("\r", 1)[-1]
    assert last.startswith("sweep 2/2 pt: 100%|")
