"""``[fixed] executor_slices``: a sweep can replay its plans slice by slice as the executors run
them (``nuna.sim.SimOptions.executor_slices``); ``false``, the default, leaves specs, points and
their ids as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nuna.errors import InputError
from nuna.experiments.points import point_sim_options
from nuna.experiments.spec import expand, parse_sweep_spec, point_id, restrict_grid, slices_spec
from nuna.experiments.sweep import load_results, run_sweep
from tests.experiments.spec_helpers import spec_ids, with_fixed

# LL slices of 32 KiB: 1 MiB over 2 GPUs is 512 KiB chunks, 16 slices each
BASE: dict[str, Any] = {
    "grid": {"collectives": ["allgather"], "gpus": [2], "sizes": ["1MiB"], "configs": ["UA"]},
}


def _with_slices(value: Any) -> dict[str, Any]:
    return with_fixed(BASE, "executor_slices", value)


def test_true_is_a_fixed_setting_of_its_own() -> None:
    plain = parse_sweep_spec(BASE)
    spec = parse_sweep_spec(_with_slices(True))
    assert plain.executor_slices is False
    assert spec.executor_slices is True
    assert all("executor_slices" not in p.as_dict() for p in expand(plain))
    assert "executor_slices" not in plain.to_json()["fixed"]
    assert all(p.as_dict()["executor_slices"] is True for p in expand(spec))
    assert spec.to_json()["fixed"]["executor_slices"] is True
    assert set(spec_ids(BASE)).isdisjoint(spec_ids(_with_slices(True)))
    assert expand(spec)[0].label().endswith(" slices")
    assert "slices" not in expand(plain)[0].label()
    assert restrict_grid(spec, {"sizes": ["64KiB"]}).executor_slices is True
    # false is the default: the same spec, points and ids
    assert parse_sweep_spec(_with_slices(False)) == plain
    assert spec_ids(_with_slices(False)) == spec_ids(BASE)


@pytest.mark.parametrize("value", ["true", 1, [True]])
def test_a_value_that_is_not_a_boolean_is_refused_in_one_line(value: Any) -> None:
    with pytest.raises(InputError, match=r"^spec\.toml: \[fixed\] executor_slices: .*true or false"):
        parse_sweep_spec(_with_slices(value), source="spec.toml")


def test_a_sliced_point_tells_the_simulator() -> None:
    point = expand(parse_sweep_spec(_with_slices(True)))[0].as_dict()
    assert point_sim_options(point) == {"executor_slices": True}
    assert "executor_slices" not in point_sim_options(point | {"executor_slices": False})


def test_a_sliced_sweep_replays_slices(tmp_path: Path) -> None:
    from nuna.passes import PassContext, apply_config
    from nuna.plan.generate import generate
    from nuna.sim import SimOptions, simulate
    from nuna.topology.spec import load_topology

    data = _with_slices(True)
    data["grid"]["sizes"] = ["8MiB"]  # Simple slices of 2 MiB: 4 MiB chunks, 2 slices
    summary = run_sweep(parse_sweep_spec(data), tmp_path, jobs=1)
    assert summary.complete, summary.failed
    [record] = load_results(tmp_path)
    assert record["result"]["executor_slices"]["slices"] == 2
    size = 8 << 20
    topology = load_topology("nuna-4die")
    plan = apply_config(generate("allgather", 2, algo="direct", tbs_per_peer=1), "UA",
                        PassContext(topology, size), None, seed=0)
    sliced = simulate(plan, topology, size, packet_bytes=256, seed=0,
                      options=SimOptions(executor_slices=True))
    assert record["result"]["time_ns"] == sliced.time_ns
    assert sliced.time_ns != simulate(plan, topology, size, packet_bytes=256, seed=0).time_ns


def test_slices_spec_names_the_sweep_apart() -> None:
    plain = parse_sweep_spec(BASE | {"sweep": {"name": "fig9"}})
    named = slices_spec(plain)
    assert named.name == "fig9-slices"
    assert named.executor_slices is True
    assert plain.executor_slices is False  # a copy, the spec itself unchanged
    assert set(spec_ids(BASE)).isdisjoint(point_id(p.as_dict(), named.point_function) for p in expand(named))
