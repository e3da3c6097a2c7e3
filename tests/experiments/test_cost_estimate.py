"""The estimate of a sweep's work before it runs (``nuna sweep --dry-run``): the split of the
estimated cost by axis, the spec-order schedule on the workers, and what the dry run counts
(only the points a run would compute)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.experiments.cost import (
    estimate_work,
    point_cost,
    schedule_wall_s,
    split_by_axes,
    worker_start_cost,
)
from nuna.experiments.spec import DEFAULT_POINT_FUNCTION
from nuna.experiments.sweep import load_sweep_spec, run_sweep, sweep_estimate, tasks_of

SIM_SPEC = """
[sweep]
name = "est"

[grid]
collectives = ["allgather", "allreduce"]
gpus = [2, 64]
sizes = ["100KiB", "1GiB"]
configs = ["UA", "NAP+NAR"]
"""

costs_st = st.lists(st.floats(min_value=0.0, max_value=1e4, allow_nan=False), max_size=40)


@settings(max_examples=200, deadline=None)
@given(costs_st, st.integers(1, 8), st.floats(min_value=0.0, max_value=10.0))
def test_the_schedule_is_bounded_by_the_work_and_the_dearest_point(costs: list[float], workers: int,
                                                                    start: float) -> None:
    wall = schedule_wall_s(costs, workers, start)
    if not costs:
        assert wall == 0.0
        return
    eps = 1e-9 * (1 + sum(costs))
    assert wall >= start + max(costs) - eps
    assert wall >= start + math.fsum(costs) / workers - eps
    assert wall <= start + math.fsum(costs) + eps
    # greedy list scheduling is within twice the optimum (Graham): never worse than this
    assert wall <= start + math.fsum(costs) / workers + max(costs) + eps


def test_one_worker_runs_everything_in_turn_and_points_go_to_the_first_worker_free() -> None:
    assert schedule_wall_s([1.0, 2.0, 3.0], 1, 0.5) == pytest.approx(6.5)
    # spec order: 5 and 1 start, 1's worker takes 1 then 1 (at 2), then 5 on whichever is free
    # first (the second, at 2): it ends at 7, where costliest first would end at 6
    assert schedule_wall_s([5.0, 1.0, 1.0, 5.0], 2) == pytest.approx(7.0)
    assert schedule_wall_s([5.0, 5.0, 1.0, 1.0], 2) == pytest.approx(6.0)
    assert schedule_wall_s([2.0], 4, 1.0) == pytest.approx(3.0)


def test_work_splits_by_each_varying_axis_in_natural_order() -> None:
    rows = [({"gpus": 64, "size_bytes": 1 << 30, "config": "UA", "nar_granularity": None}, 10.0),
            ({"gpus": 8, "size_bytes": 100 * 1024, "config": "UA", "nar_granularity": None}, 1.0),
            ({"gpus": 8, "size_bytes": 1 << 30, "config": "UA", "nar_granularity": 4}, 2.0),
            ({"gpus": 16, "size_bytes": 100 * 1024, "config": "UA", "nar_granularity": 12}, 4.0)]
    split = dict(split_by_axes(rows))
    assert split["size_bytes"] == (("100KiB", 5.0), ("1GiB", 12.0))  # by bytes, not by label
    assert split["gpus"] == (("8 GPUs", 3.0), ("16 GPUs", 4.0), ("64 GPUs", 10.0))
    assert "config" not in split  # one value: nothing to split
    # points without NAR have no granularity: left out of that axis, not counted as "None"
    assert split["nar_granularity"] == (("4", 2.0), ("12", 4.0))
    assert dict(split_by_axes(rows, ("config",), varying_only=False)) == {"config": (("UA", 17.0),)}
    plans = [({"plan": "/a/ring.xml"}, 1.0), ({"plan": "b/direct.xml"}, 2.0), ({"plan": "/a/ring.xml"}, 3.0)]
    # plan files by name, as points' labels name them (in the order of their paths)
    assert split_by_axes(plans) == (("plan", (("ring.xml", 4.0), ("direct.xml", 2.0))),)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([2, 8, 64]), st.sampled_from(["UA", "NAP+NAR", "UA+NAR"]),
                          st.sampled_from([4, "heuristic", None]),
                          st.floats(min_value=0.0, max_value=1e3, allow_nan=False)), max_size=30))
def test_each_axis_accounts_for_the_work_of_the_points_that_have_it(
        rows: list[tuple[int, str, Any, float]]) -> None:
    points = [({"gpus": g, "config": c, "nar_granularity": n}, t) for g, c, n, t in rows]
    for axis, cells in split_by_axes(points, varying_only=False):
        having = [t for p, t in points if p[axis] is not None]
        assert sum(t for _, t in cells) == pytest.approx(sum(having)), axis
        assert len(cells) == len({p[axis] for p, _ in points if p[axis] is not None})


def test_a_point_function_the_model_does_not_know_gets_a_count_and_no_time() -> None:
    est = estimate_work("pkg.mod:func", [({"gpus": 2}, "a"), ({"gpus": 4}, "b")], workers=2)
    assert (est.points, est.known, est.work_s, est.wall_s, est.by_axis, est.costliest) == \
        (2, False, 2.0, None, (), ())


def test_the_dry_run_estimate_is_the_pending_points_costs_scheduled_in_spec_order(
        write_spec: Callable[..., Path], tmp_path: Path) -> None:
    spec = load_sweep_spec(write_spec(SIM_SPEC))
    status, est = sweep_estimate(spec, tmp_path / "out", jobs=2)
    assert (status.total, status.pending) == (16, 16)
    points = [p.as_dict() for _, p in tasks_of(spec)]
    costs = [point_cost(DEFAULT_POINT_FUNCTION, p) for p in points]
    assert (est.points, est.known, est.workers) == (16, True, 2)
    assert est.work_s == pytest.approx(math.fsum(costs))
    assert est.wall_s == pytest.approx(schedule_wall_s(costs, 2, worker_start_cost(DEFAULT_POINT_FUNCTION)))
    # the 64-GPU 1 GiB points are the dearest, and the pod split says so
    assert all("64gpu 1GiB" in label for _, label in est.costliest)
    assert [s for s, _ in est.costliest] == sorted((s for s, _ in est.costliest), reverse=True)
    pods = dict(dict(est.by_axis)["gpus"])
    assert pods["64 GPUs"] > 10 * pods["2 GPUs"]
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
    # a cluster's workers are its own: the work, no time
    _, on_cluster = sweep_estimate(spec, tmp_path / "out", executor="dask", scheduler="tcp://127.0.0.1:1")
    assert (on_cluster.workers, on_cluster.wall_s, on_cluster.work_s) == (0, None, est.work_s)


def test_the_dry_run_estimates_only_what_the_run_would_compute(
        fake_points: str, write_spec: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_sweep_spec(write_spec())
    total = len(tasks_of(spec))
    assert sweep_estimate(spec, tmp_path / "out")[1].points == total
    monkeypatch.setenv("NUNA_FAKE_FAIL_GPUS", "8")
    summary = run_sweep(spec, tmp_path / "out", jobs=1)
    assert 0 < len(summary.failed) < total
    status, est = sweep_estimate(spec, tmp_path / "out")
    assert (status.pending, len(status.failed), est.points) == (0, len(summary.failed), 0)
    _, again = sweep_estimate(spec, tmp_path / "out", retry_failed=True, jobs=4)
    assert (again.points, again.known, again.wall_s) == (len(summary.failed), False, None)


def test_nuna_sweep_dry_run_prints_the_estimate(run_cli: Callable[..., Any], write_spec: Callable[..., Path],
                                                tmp_path: Path) -> None:
    dry = run_cli("sweep", write_spec(SIM_SPEC), "-o", tmp_path / "out", "--dry-run", "-j", "2")
    assert dry.code == 0, dry.err
    lines = dry.out.splitlines()
    assert lines[0] == "sweep est: 16 points: 0 done, 0 failed, 16 pending"
    assert lines[1].startswith("estimate: ")
    assert "for 16 points, about " in lines[1]
    assert "on 2 workers" in lines[1]
    pods = next(line for line in lines if line.startswith("  by pod: "))
    shares = [int(cell.rsplit(" ", 1)[1].rstrip("%")) for cell in pods.removeprefix("  by pod: ").split(", ")]
    assert abs(sum(shares) - 100) <= len(shares)  # each share rounded
    assert sum(line.startswith("  costliest: ") for line in lines) == 3


def test_a_dry_run_refuses_a_point_function_the_run_would_refuse(
        run_cli: Callable[..., Any], write_spec: Callable[..., Path], tmp_path: Path) -> None:
    typo = 'name = "est"\npoint_function = "nuna.experiments.points:nope"'
    spec = write_spec(SIM_SPEC.replace('name = "est"', typo))
    for extra in ((), ("--dry-run",)):
        res = run_cli("sweep", spec, "-o", tmp_path / "out", *extra)
        assert res.code == 1, extra
        assert res.err.count("\n") == 1
        assert "has no function 'nope'" in res.err
    assert not (tmp_path / "out").exists()
