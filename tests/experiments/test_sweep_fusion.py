"""``[fixed] reduce_fusion``: a sweep (and ``nuna figure --no-reduce-fusion``) can replay each
``re`` step on its own (``nuna.sim.SimOptions.reduce_fusion = False``); ``true``, the default,
leaves specs, points and their ids as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nuna.errors import InputError
from nuna.experiments.points import point_sim_options
from nuna.experiments.spec import (
    expand,
    no_fusion_spec,
    parse_sweep_spec,
    point_id,
    restrict_grid,
)
from nuna.experiments.sweep import load_results, run_sweep
from tests.experiments.spec_helpers import spec_ids, with_fixed

BASE: dict[str, Any] = {
    "grid": {"collectives": ["reducescatter"], "gpus": [4], "sizes": ["64KiB"], "configs": ["UA"]},
}


def _with_fusion(value: Any, base: dict[str, Any] = BASE) -> dict[str, Any]:
    return with_fixed(base, "reduce_fusion", value)


def test_false_is_a_fixed_setting_of_its_own() -> None:
    plain = parse_sweep_spec(BASE)
    spec = parse_sweep_spec(_with_fusion(False))
    assert plain.reduce_fusion is True
    assert spec.reduce_fusion is False
    assert all("reduce_fusion" not in p.as_dict() for p in expand(plain))
    assert "reduce_fusion" not in plain.to_json()["fixed"]
    assert all(p.as_dict()["reduce_fusion"] is False for p in expand(spec))
    assert spec.to_json()["fixed"]["reduce_fusion"] is False
    assert len(expand(spec)) == len(expand(plain))
    assert set(spec_ids(BASE)).isdisjoint(spec_ids(_with_fusion(False)))
    assert expand(spec)[0].label().endswith(" nofusion")
    assert "nofusion" not in expand(plain)[0].label()
    # the fixed table written back (restrict_grid re-reads it) keeps the setting
    restricted = restrict_grid(spec, {"sizes": ["16KiB"]})
    assert restricted.reduce_fusion is False
    assert all(p.as_dict()["reduce_fusion"] is False for p in expand(restricted))


def test_true_leaves_the_spec_and_its_points_unchanged() -> None:
    plain = parse_sweep_spec(BASE)
    spec = parse_sweep_spec(_with_fusion(True))
    assert spec == plain
    assert spec.to_json() == plain.to_json()
    assert [p.as_dict() for p in expand(spec)] == [p.as_dict() for p in expand(plain)]
    assert spec_ids(_with_fusion(True)) == spec_ids(BASE)


@pytest.mark.parametrize("value", ["false", "no", 0, 1, [False]])
def test_a_value_that_is_not_a_boolean_is_refused_in_one_line(value: Any) -> None:
    with pytest.raises(InputError, match=r"^spec\.toml: \[fixed\] reduce_fusion: .*true or false") as info:
        parse_sweep_spec(_with_fusion(value), source="spec.toml")
    assert "\n" not in str(info.value)


def test_no_fusion_spec_names_the_sweep_apart() -> None:
    plain = parse_sweep_spec(BASE | {"sweep": {"name": "fig9"}})
    named = no_fusion_spec(plain)
    assert named.name == "fig9-nofusion"
    assert named.reduce_fusion is False
    assert plain.reduce_fusion is True  # a copy, the spec itself unchanged
    assert all(p.as_dict()["reduce_fusion"] is False for p in expand(named))
    assert set(spec_ids(BASE)).isdisjoint(point_id(p.as_dict(), named.point_function) for p in expand(named))


def test_a_point_without_fusion_tells_the_simulator() -> None:
    point = expand(parse_sweep_spec(_with_fusion(False)))[0].as_dict()
    assert point_sim_options(point) == {"reduce_fusion": False}
    assert point_sim_options(expand(parse_sweep_spec(BASE))[0].as_dict()) == {}
    assert "reduce_fusion" not in point_sim_options(point | {"reduce_fusion": True})

    from nuna.sim import SimOptions
    assert SimOptions(**point_sim_options(point)).reduce_fusion is False


def test_a_sweep_without_fusion_replays_each_re_on_its_own(tmp_path: Path) -> None:
    from nuna.passes import PassContext, apply_config
    from nuna.plan.generate import generate
    from nuna.sim import SimOptions, simulate
    from nuna.topology.spec import load_topology

    times = {}
    for fused, data in ((True, BASE), (False, _with_fusion(False))):
        out = tmp_path / ("fused" if fused else "unfused")
        summary = run_sweep(parse_sweep_spec(data), out, jobs=1)
        assert summary.complete, summary.failed
        [record] = load_results(out)
        assert ("reduce_fusion" in record["point"]) is not fused
        times[fused] = record["result"]["time_ns"]
    assert times[True] != times[False]  # the direct reduce-scatter's chains of re are fused

    size = 64 * 1024
    topology = load_topology("nuna-4die")
    plan = apply_config(generate("reducescatter", 4, algo="direct", tbs_per_peer=1), "UA",
                        PassContext(topology, size), None, seed=0)
    alone = simulate(plan, topology, size, packet_bytes=256, seed=0, options=SimOptions(reduce_fusion=False))
    assert times[False] == alone.time_ns
    assert times[True] == simulate(plan, topology, size, packet_bytes=256, seed=0).time_ns
