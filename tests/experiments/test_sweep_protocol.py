"""``[fixed] protocol_model``: a sweep can replay LL and LL128 plans as Simple, as nuna <= 0.11.0
did (``nuna.sim.SimOptions.protocol_model``); ``"plan"``, the default, leaves specs, points and
their ids as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nuna.errors import InputError
from nuna.experiments.points import point_sim_options
from nuna.experiments.spec import PROTOCOL_MODELS, expand, parse_sweep_spec
from nuna.experiments.sweep import load_results, run_sweep
from tests.conftest import PLANS_MSCCL
from tests.experiments.spec_helpers import spec_ids, with_fixed

LL_PLAN = PLANS_MSCCL / "allgather_allpairs_n8_i1_LL.xml"
BASE: dict[str, Any] = {
    "grid": {"plans": [str(LL_PLAN)], "sizes": ["256KiB"], "configs": ["UA"]},
}


def _with_model(value: Any) -> dict[str, Any]:
    return with_fixed(BASE, "protocol_model", value)


def test_the_models_are_the_simulators() -> None:
    from nuna.sim.replay import PROTOCOL_MODELS as SIM_MODELS
    assert PROTOCOL_MODELS == SIM_MODELS


@pytest.mark.skipif(not LL_PLAN.is_file(), reason="the shared corpus is not here")
def test_simple_is_a_fixed_setting_of_its_own() -> None:
    plain = parse_sweep_spec(BASE)
    spec = parse_sweep_spec(_with_model("simple"))
    assert plain.protocol_model == "plan"
    assert spec.protocol_model == "simple"
    assert all("protocol_model" not in p.as_dict() for p in expand(plain))
    assert "protocol_model" not in plain.to_json()["fixed"]
    assert all(p.as_dict()["protocol_model"] == "simple" for p in expand(spec))
    assert spec.to_json()["fixed"]["protocol_model"] == "simple"
    assert set(spec_ids(BASE)).isdisjoint(spec_ids(_with_model("simple")))
    assert expand(spec)[0].label().endswith(" protocol-simple")
    assert "protocol-" not in expand(plain)[0].label()
    # "plan" is the default: the same spec, points and ids
    assert parse_sweep_spec(_with_model("plan")) == plain
    assert spec_ids(_with_model("plan")) == spec_ids(BASE)


@pytest.mark.parametrize("value", ["LL", True, ["simple"]])
def test_a_value_that_is_not_a_model_is_refused_in_one_line(value: Any) -> None:
    expected = r"^spec\.toml: \[fixed\] protocol_model: expected one of plan, simple"
    with pytest.raises(InputError, match=expected):
        parse_sweep_spec(_with_model(value), source="spec.toml")


def test_a_point_tells_the_simulator() -> None:
    assert point_sim_options({"protocol_model": "simple"}) == {"protocol_model": "simple"}
    assert point_sim_options({"protocol_model": "plan"}) == {}
    assert point_sim_options({}) == {}


@pytest.mark.skipif(not LL_PLAN.is_file(), reason="the shared corpus is not here")
def test_a_sweep_replays_as_told(tmp_path: Path) -> None:
    times = {}
    for model in PROTOCOL_MODELS:
        out = tmp_path / model
        summary = run_sweep(parse_sweep_spec(_with_model(model)), out, jobs=1)
        assert summary.complete, summary.failed
        [record] = load_results(out)
        assert record["result"]["protocol"]["model"] == model
        times[model] = record["result"]["time_ns"]
    assert times["plan"] > times["simple"]  # LL's twice the bytes on the wire
