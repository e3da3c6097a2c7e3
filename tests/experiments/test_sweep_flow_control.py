"""``[fixed] flow_control``: a sweep can let senders run ahead of their receivers without limit,
as nuna <= 0.12.0 did (``nuna.sim.SimOptions.flow_control``); ``true``, the default, leaves specs,
points and their ids as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nuna.errors import InputError
from nuna.experiments.points import point_sim_options
from nuna.experiments.spec import expand, parse_sweep_spec
from nuna.experiments.sweep import load_results, run_sweep
from tests.conftest import PLANS_MSCCL
from tests.experiments.spec_helpers import spec_ids, with_fixed

RING_PLAN = PLANS_MSCCL / "allreduce_ring_n8_c1_i1_Simple.xml"
BASE: dict[str, Any] = {
    "grid": {"plans": [str(RING_PLAN)], "sizes": ["1MiB"], "configs": ["UA"]},
}


def _with_flow_control(value: Any) -> dict[str, Any]:
    return with_fixed(BASE, "flow_control", value)


@pytest.mark.skipif(not RING_PLAN.is_file(), reason="the shared corpus is not here")
def test_no_flow_control_is_a_fixed_setting_of_its_own() -> None:
    plain = parse_sweep_spec(BASE)
    spec = parse_sweep_spec(_with_flow_control(False))
    assert plain.flow_control is True
    assert spec.flow_control is False
    assert all("flow_control" not in p.as_dict() for p in expand(plain))
    assert "flow_control" not in plain.to_json()["fixed"]
    assert all(p.as_dict()["flow_control"] is False for p in expand(spec))
    assert spec.to_json()["fixed"]["flow_control"] is False
    assert set(spec_ids(BASE)).isdisjoint(spec_ids(_with_flow_control(False)))
    assert expand(spec)[0].label().endswith(" no-flow-control")
    assert "flow-control" not in expand(plain)[0].label()
    # true is the default: the same spec, points and ids
    assert parse_sweep_spec(_with_flow_control(True)) == plain
    assert spec_ids(_with_flow_control(True)) == spec_ids(BASE)


@pytest.mark.parametrize("value", ["no", 0, ["false"]])
def test_a_value_that_is_not_a_flag_is_refused_in_one_line(value: Any) -> None:
    with pytest.raises(InputError, match=r"^spec\.toml: \[fixed\] flow_control: must be true or false"):
        parse_sweep_spec(_with_flow_control(value), source="spec.toml")


def test_a_point_tells_the_simulator() -> None:
    assert point_sim_options({"flow_control": False}) == {"flow_control": False}
    assert point_sim_options({"flow_control": True}) == {}
    assert point_sim_options({}) == {}


@pytest.mark.skipif(not RING_PLAN.is_file(), reason="the shared corpus is not here")
def test_a_sweep_replays_as_told(tmp_path: Path) -> None:
    times = {}
    for flag in (True, False):
        out = tmp_path / str(flag)
        summary = run_sweep(parse_sweep_spec(_with_flow_control(flag)), out, jobs=1)
        assert summary.complete, summary.failed
        [record] = load_results(out)
        assert record["point"].get("flow_control", True) is flag
        times[flag] = record["result"]["time_ns"]
    assert times[True] != times[False]
