"""The dask executor: the same spec on an existing scheduler and on a local cluster gives the
same files as the local process pool. Skipped when dask.distributed is not installed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nuna.errors import UsageError
from nuna.experiments.spec import expand, point_id
from nuna.experiments.sweep import load_results, load_sweep_spec, run_sweep

distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed (optional)")


@pytest.fixture
def scheduler_address(fake_points: str) -> Iterator[str]:
    """An in-process cluster (threads, no worker processes): fast, and a real scheduler address."""
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def _compared(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "timing"} for r in records]


def test_existing_scheduler_matches_local_pool(scheduler_address: str, write_spec: Callable[..., Path],
                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_sweep_spec(write_spec())
    monkeypatch.setenv("NUNA_FAKE_FAIL_GPUS", "8")
    on_dask = run_sweep(spec, tmp_path / "dask", executor="dask", scheduler=scheduler_address)
    on_pool = run_sweep(spec, tmp_path / "pool", executor="local", jobs=2)
    assert on_dask.ran == on_dask.total
    assert on_dask.ok == on_pool.ok
    assert {f.point_id for f in on_dask.failed} == {f.point_id for f in on_pool.failed} == {
        point_id(p.as_dict(), spec.point_function) for p in expand(spec) if p.gpus == 8}
    assert (tmp_path / "dask" / "index.json").read_bytes() == (tmp_path / "pool" / "index.json").read_bytes()
    assert _compared(load_results(tmp_path / "dask")) == _compared(load_results(tmp_path / "pool"))

    # Resume on dask: only the retried failures run.
    monkeypatch.delenv("NUNA_FAKE_FAIL_GPUS")
    again = run_sweep(spec, tmp_path / "dask", executor="dask", scheduler=scheduler_address,
                      retry_failed=True)
    assert again.ran == len(on_dask.failed)
    assert again.complete


def test_local_dask_cluster_runs_the_spec(fake_points: str, write_spec: Callable[..., Path],
                                          tmp_path: Path) -> None:
    text = ('[sweep]\npoint_function = "sweep_fake_points:echo_point"\n'
            '[grid]\ncollectives = ["allgather"]\ngpus = [2, 4, 8]\nsizes = ["1MB"]\nconfigs = ["UA"]\n')
    spec = load_sweep_spec(write_spec(text))
    summary = run_sweep(spec, tmp_path / "out", executor="dask", jobs=1)
    assert summary.complete
    assert summary.ran == 3
    records = load_results(tmp_path / "out")
    assert [r["point"]["gpus"] for r in records] == [2, 4, 8]
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["counts"]["ok"] == 3


def test_unreachable_scheduler_is_a_usage_error(fake_points: str, write_spec: Callable[..., Path],
                                                tmp_path: Path) -> None:
    spec = load_sweep_spec(write_spec())
    with pytest.raises(UsageError, match="cannot connect to dask scheduler"):
        run_sweep(spec, tmp_path / "out", executor="dask", scheduler="nosuchproto://nowhere:1")
