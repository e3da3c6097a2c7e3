"""simulate_point: imports nothing heavy up front, wires the layers' documented interfaces, and
turns a missing layer into a clear NunaError. The layers are replaced by recording stubs."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from nuna.errors import NunaError, SimulationError, UsageError
from nuna.experiments.executors import Task, execute, resolve_point_function
from nuna.experiments.spec import DEFAULT_POINT_FUNCTION, Point

REPO = Path(__file__).resolve().parents[2]

POINT = Point(collective="allgather", gpus=8, size_bytes=10**6, config="NAP+NAR", nar_granularity=4,
              tbs_per_peer=3, topology="nuna-4die", gemm_bytes=0, algo="direct", packet_bytes="auto",
              seed=5).as_dict()


class _Plan:
    def __init__(self, label: str, nar: int | None = None) -> None:
        self.label = label
        self.placement = types.SimpleNamespace(nar_granularity=nar)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Plan) and other.label == self.label

    __hash__ = None  # type: ignore[assignment]


class _Result:
    def __init__(self, payload: dict[str, Any]) -> None:
        self._payload = payload

    def to_json(self, *, chip_links: bool = True) -> dict[str, Any]:
        assert not chip_links  # sweeps leave the per-link table out
        return dict(self._payload)


@pytest.fixture
def layers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Stub plan/topology/passes/sim modules that record their calls."""
    calls: list[tuple[str, Any]] = []

    def generate(collective: str, ngpus: int, *, algo: str, tbs_per_peer: int) -> _Plan:
        calls.append(("generate", (collective, ngpus, algo, tbs_per_peer)))
        return _Plan("plan")

    def load_topology(name: str) -> str:
        calls.append(("load_topology", name))
        return "topo"

    def pass_context(topology: str, size_bytes: int) -> tuple[str, int]:
        return (topology, size_bytes)

    def apply_config(plan: _Plan, config: str, ctx: tuple[str, int], nar_granularity: int | str | None, *,
                     seed: int, packet_bytes: int | str, options: Any = None) -> _Plan:
        # packet_bytes and options: an "auto" granularity is chosen in the point's own replay
        calls.append(("apply_config", (plan.label, config, ctx, nar_granularity, seed, packet_bytes,
                                       options)))
        return _Plan("plan+" + config, 6 if config.endswith("+NAR") else None)

    def simulate(plan: _Plan, topology: str, size_bytes: int, *, packet_bytes: int | str,
                 seed: int, options: Any = None) -> _Result:
        calls.append(("simulate", (plan.label, topology, size_bytes, packet_bytes, seed)))
        calls.append(("simulate options", options))
        return _Result({"time_ns": 1234.5, "wall_s": 0.7})

    for name, attrs in {"nuna.plan.generate": {"generate": generate},
                        "nuna.topology.spec": {"load_topology": load_topology},
                        "nuna.passes": {"apply_config": apply_config, "PassContext": pass_context},
                        "nuna.sim": {"simulate": simulate,
                                     "SimOptions": lambda **kw: ("SimOptions", tuple(sorted(kw.items())))}
                        }.items():
        module = types.ModuleType(name)
        for key, value in attrs.items():
            setattr(module, key, value)
        monkeypatch.setitem(sys.modules, name, module)
    return calls


def test_default_point_function_resolves_without_importing_the_layers() -> None:
    code = ("import sys\nfrom nuna.experiments.executors import resolve_point_function\n"
            f"resolve_point_function({DEFAULT_POINT_FUNCTION!r})\n"
            "heavy = [m for m in ('nuna.sim', 'nuna.passes', 'nuna.topology', 'numba') if m in sys.modules]\n"
            "print(','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_wires_generate_config_and_simulate(layers: list[tuple[str, Any]]) -> None:
    simulate_point = resolve_point_function(DEFAULT_POINT_FUNCTION)
    result = simulate_point(dict(POINT))
    assert dict(layers) == {
        "load_topology": "nuna-4die",
        "generate": ("allgather", 8, "direct", 3),
        "apply_config": ("plan", "NAP+NAR", ("topo", 10**6), 4, 5, "auto", None),
        "simulate": ("plan+NAP+NAR", "topo", 10**6, "auto", 5),
        "simulate options": None,
    }
    assert result == {"time_ns": 1234.5, "timing": {"wall_s": 0.7}, "nar_granularity_used": 6}


@pytest.mark.parametrize(("config", "granularity", "passed"), [
    ("UA", None, None),              # every configuration goes through the passes, UA too
    ("NAP+NAR", "heuristic", None),  # the passes' None is their heuristic
    ("NAP+NAR", "auto", "auto"),
    ("UA+NAR", 12, 12),
])
def test_granularity_is_translated_for_the_passes(layers: list[tuple[str, Any]], config: str,
                                                  granularity: int | str | None,
                                                  passed: int | str | None) -> None:
    result = resolve_point_function(DEFAULT_POINT_FUNCTION)(POINT | {"config": config,
                                                                      "nar_granularity": granularity})
    assert dict(layers)["apply_config"][1] == config
    assert dict(layers)["apply_config"][3] == passed
    assert result["nar_granularity_used"] == (6 if config.endswith("+NAR") else None)


def test_gemm_needs_a_simulator_that_takes_it(layers: list[tuple[str, Any]]) -> None:
    with pytest.raises(UsageError, match="concurrent GEMM"):
        resolve_point_function(DEFAULT_POINT_FUNCTION)(POINT | {"gemm_bytes": 4096})


@pytest.mark.parametrize(("hidden", "named"), [
    ("nuna.plan.generate", "nuna.plan.generate.generate"),
    ("nuna.topology.spec", "nuna.topology.spec.load_topology"),
    ("nuna.sim", "nuna.sim.simulate"),
    ("nuna.passes", "nuna.passes.PassContext"),
])
def test_missing_layer_is_a_clear_nuna_error(layers: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch,
                                             hidden: str, named: str) -> None:
    monkeypatch.setitem(sys.modules, hidden, None)  # makes `import hidden` raise ImportError
    with pytest.raises(SimulationError, match=f"needs {named}"):
        resolve_point_function(DEFAULT_POINT_FUNCTION)(dict(POINT))
    # In a sweep this is the point's recorded failure, not a crash.
    outcome = execute(Task("0" * 16, DEFAULT_POINT_FUNCTION, dict(POINT)))
    assert not outcome.ok
    assert outcome.error_type == "SimulationError"
    assert named in outcome.error_message
    assert issubclass(SimulationError, NunaError)


def test_resolve_rejects_bad_names() -> None:
    for name, fragment in [("nuna.experiments.points", "expected"), ("no_such_mod_q:f", "cannot import"),
                           ("nuna.experiments.points:nope", "no function")]:
        with pytest.raises(UsageError, match=fragment):
            resolve_point_function(name)


@pytest.mark.parametrize("function", [DEFAULT_POINT_FUNCTION, "nuna.experiments.gemm:gemm_point"])
def test_windowed_and_packet_cap_reach_the_simulator(function: str) -> None:
    from nuna.experiments.points import point_sim_options

    point = Point(collective="allgather", gpus=2, size_bytes=100_000, config="UA", nar_granularity=None,
                  tbs_per_peer=1, topology="nuna-4die", gemm_bytes=0, algo="direct", packet_bytes="auto",
                  seed=0, windowed=False, max_packet_bytes=3000).as_dict()
    assert point_sim_options(point) == {"windowed": False, "max_packet_bytes": 3000}
    assert point_sim_options(POINT) == {}
    with pytest.raises(UsageError, match="power-of-two multiple"):  # the simulator's own check
        resolve_point_function(function)(point)
    result = resolve_point_function(function)(point | {"max_packet_bytes": 4096})
    assert result["window_ns"] == 0.0
    assert 0.0 < result["timing"]["loop_s"] <= result["timing"]["wall_s"]  # wall clock: under timing
    assert not {"loop_s", "wall_s"} & result.keys()
    assert result["packet_bytes"] == 256
    fast = point | {"max_packet_bytes": 4096, "fast_forward": True}
    assert "fast_forward" in point_sim_options(fast)
    assert "fast_forward" in resolve_point_function(function)(fast)  # on, even where nothing is skipped
    assert point_sim_options(point | {"line_setups": "series"})["line_setups"] == "series"
    assert "line_setups" not in point_sim_options(point)
    assert point_sim_options(point | {"packet_credit_lines": 1})["packet_credit_lines"] == 1
    assert "packet_credit_lines" not in point_sim_options(point)



def test_an_auto_granularity_is_chosen_in_the_points_own_replay(layers: list[tuple[str, Any]]) -> None:
    point = POINT | {"nar_granularity": "auto", "protocol_model": "simple", "packet_bytes": 1024}
    resolve_point_function(DEFAULT_POINT_FUNCTION)(point)
    options = ("SimOptions", (("protocol_model", "simple"),))
    assert dict(layers)["apply_config"][3:] == ("auto", 5, 1024, options)
    assert dict(layers)["simulate options"] == options


def test_a_workers_points_of_one_plan_share_its_generation(layers: list[tuple[str, Any]]) -> None:
    simulate_point = resolve_point_function(DEFAULT_POINT_FUNCTION)
    generated = lambda: [args for name, args in layers if name == "generate"]  # noqa: E731
    simulate_point(dict(POINT))
    simulate_point(POINT | {"size_bytes": 10**7, "config": "UA", "nar_granularity": None})
    assert generated() == [("allgather", 8, "direct", 3)]
    simulate_point(POINT | {"tbs_per_peer": 4})
    simulate_point(dict(POINT))  # two plans are kept: a grid's threadblock counts alternate
    assert generated() == [("allgather", 8, "direct", 3), ("allgather", 8, "direct", 4)]
    simulate_point(POINT | {"gpus": 4})
    simulate_point(POINT | {"tbs_per_peer": 4})  # the least recently used went
    assert generated()[2:] == [("allgather", 4, "direct", 3), ("allgather", 8, "direct", 4)]


def test_a_kept_plan_gives_the_points_results_of_a_fresh_one() -> None:
    from nuna.experiments import points

    simulate_point = resolve_point_function(DEFAULT_POINT_FUNCTION)
    point = Point(collective="allreduce", gpus=4, size_bytes=100_000, config="NAP+NAR",
                  nar_granularity="heuristic", tbs_per_peer=2, topology="nuna-4die", gemm_bytes=0,
                  algo="direct", packet_bytes="auto", seed=0).as_dict()
    others = [point | {"config": "UA", "nar_granularity": None}, point | {"config": "NUMA+NAR"}]
    kept = []
    for p in [point, *others]:  # the first generates the plan, the others reuse it and its DAG
        kept.append(simulate_point(p))
    fresh = []
    for p in [*others, point]:
        points._generated.cache_clear()
        fresh.append(simulate_point(p))
    untimed = lambda r: {k: v for k, v in r.items() if k != "timing"}  # noqa: E731
    assert [untimed(r) for r in kept] == [untimed(r) for r in [fresh[2], fresh[0], fresh[1]]]
