"""Point functions: turn one sweep point (a plain dict of inputs) into one result dict.

:func:`simulate_point` is the default point function of a sweep: generate the plan (or read it
from the point's plan file: ``[grid] plans``), apply the configuration's passes, replay it on
the topology and return the simulator's JSON. The layers it needs are imported when a point
runs, not when this module is imported, so the sweep runner works (and can be tested) before
every layer exists; a missing layer is a clear :class:`~nuna.errors.SimulationError` recorded
as that point's failure.

Interfaces used:

- ``nuna.plan.generate.generate(collective, ngpus, *, algo, tbs_per_peer) -> Plan``, or for a
  point with ``plan`` ``nuna.plan.xml.load(path) -> Plan``
- ``nuna.topology.spec.load_topology(name_or_path) -> TopologySpec``
- ``nuna.passes.PassContext(topology, size_bytes)`` and
  ``nuna.passes.apply_config(plan, config, ctx, nar_granularity, *, seed, packet_bytes[, options]) -> Plan``
  (granularity ``None`` = the passes' heuristic, ``"auto"`` = simulated search with the point's
  own packet size and options, or ``G``)
- ``nuna.sim.simulate(plan, topology, size_bytes, *, packet_bytes, seed[, gemm_bytes, options]) -> SimResult``
  with ``SimResult.to_json(*, chip_links=False) -> dict``, and ``nuna.sim.SimOptions(windowed=...,
  max_packet_bytes=...)`` for points that set them (:func:`point_sim_options`; without them, the
  simulator's defaults)
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

from nuna.errors import InputError, SimulationError, UsageError
from nuna.experiments.executors import TIMING_KEY
from nuna.experiments.spec import HEURISTIC, file_changed_problem

# Result keys that carry wall-clock figures; they go to the timing part of the result file.
_WALL_CLOCK_KEYS = ("wall_s",)


def _require(module_name: str, attribute: str) -> Any:
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise SimulationError(f"simulate_point needs {module_name}.{attribute}, which this nuna "
                              f"does not provide yet ({err})") from None
    value = getattr(module, attribute, None)
    if value is None:
        raise SimulationError(f"simulate_point needs {module_name}.{attribute}, which this nuna "
                              f"does not provide yet")
    return value


def _granularity(point: dict[str, Any]) -> int | str | None:
    """The point's granularity in the passes' terms (their ``None`` is the heuristic)."""
    value = point.get("nar_granularity")
    return None if value in (None, HEURISTIC) else value


def point_sim_options(point: dict[str, Any]) -> dict[str, Any]:
    """The ``nuna.sim.SimOptions`` fields a point sets (``windowed``, ``max_packet_bytes``,
    ``fast_forward`` with its default parameters, ``line_setups``, ``packet_credit_lines``,
    ``reduce_fusion`` when ``False``, ``executor_slices`` when ``True``, ``protocol_model`` when
    not ``"plan"``, ``flow_control`` when ``False``); the simulator's defaults for the rest."""
    keys = ("windowed", "max_packet_bytes", "line_setups", "packet_credit_lines")
    options = {key: point[key] for key in keys if point.get(key) is not None}
    if point.get("fast_forward"):
        options["fast_forward"] = _require("nuna.sim.fastforward", "FastForward")()
    if point.get("reduce_fusion") is False:
        options["reduce_fusion"] = False
    if point.get("executor_slices") is True:
        options["executor_slices"] = True
    if point.get("protocol_model", "plan") != "plan":
        options["protocol_model"] = point["protocol_model"]
    if point.get("flow_control") is False:
        options["flow_control"] = False
    return options


def check_files(point: dict[str, Any]) -> None:
    """``InputError`` when the point's topology or plan file no longer holds the bytes the sweep
    named the point by (a file edited during the sweep: its result would be stored under the
    old bytes' id). Point functions call it first."""
    problem = file_changed_problem(point)
    if problem is not None:
        raise InputError(problem)


@functools.lru_cache(maxsize=2)
def _generated(generate: Any, collective: str, gpus: int, algo: str, tbs_per_peer: int) -> Any:
    """A generated plan, kept for the worker's next points: a sweep's points of one plan (its
    sizes and configurations) then share it, and with it what is derived from its program once
    (``Plan.derived``: the DAG, the semantic check, the passes' workload). At 64 GPUs with 16
    threadblocks per peer (an allreduce), generating the plan took 1.8 s and verifying it 4.1 s,
    0.6 s the second time, with its DAG and semantic check kept. Two plans: a grid's innermost
    dimension is the threadblocks per peer, and the Fig 9 search has two counts (a 64-GPU plan
    of 16 per peer with what is derived from it: about 200 MB)."""
    return generate(collective, gpus, algo=algo, tbs_per_peer=tbs_per_peer)


def _plan(point: dict[str, Any]) -> Any:
    """The point's plan: its plan file's (``plan``), else generated."""
    path = point.get("plan")
    if path is None:
        generate = _require("nuna.plan.generate", "generate")
        return _generated(generate, point["collective"], int(point["gpus"]), point["algo"],
                          int(point["tbs_per_peer"]))
    plan = _require("nuna.plan.xml", "load")(path)
    # the point took both from the file when the spec was read: an edited file is another plan
    found = (plan.collective.value, plan.ngpus)
    if found != (point["collective"], int(point["gpus"])):
        raise InputError(f"{path}: a plan for {found[0]} on {found[1]} GPUs, but the point is "
                         f"{point['collective']} on {point['gpus']} GPUs (the file changed since the spec "
                         "was read: load it again)")
    return plan


def simulate_point(point: dict[str, Any]) -> dict[str, Any]:
    """Simulate one point of a sweep (keys as in :meth:`nuna.experiments.spec.Point.as_dict`).

    The result is the simulator's JSON with ``wall_s`` moved under ``timing``, plus
    ``nar_granularity_used``: the number of NAR domains the configuration ended up with
    (``null`` without NAR). A point with ``plan`` replays that plan file (its own placement, if
    any, replaced by the configuration's) instead of a generated plan.
    """
    load_topology = _require("nuna.topology.spec", "load_topology")
    pass_context = _require("nuna.passes", "PassContext")
    apply_config = _require("nuna.passes", "apply_config")
    simulate = _require("nuna.sim", "simulate")

    check_files(point)
    size_bytes = int(point["size_bytes"])
    seed = int(point["seed"])
    topology = load_topology(point["topology"])
    plan = _plan(point)
    options: dict[str, Any] = {"packet_bytes": point["packet_bytes"], "seed": seed}
    sim_options = point_sim_options(point)
    if sim_options:
        options["options"] = _require("nuna.sim", "SimOptions")(**sim_options)
    # "auto" NAR granularity replays each candidate as the point itself is replayed
    plan = apply_config(plan, point["config"], pass_context(topology, size_bytes), _granularity(point),
                        seed=seed, packet_bytes=point["packet_bytes"], options=options.get("options"))

    gemm_bytes = int(point.get("gemm_bytes", 0))
    if gemm_bytes:
        if "gemm_bytes" not in inspect.signature(simulate).parameters:
            raise UsageError("this simulator cannot run a concurrent GEMM (no gemm_bytes option)")
        options["gemm_bytes"] = gemm_bytes
    result = simulate(plan, topology, size_bytes, **options)

    payload = point_payload(result)
    payload["nar_granularity_used"] = plan.placement.nar_granularity
    return payload


def point_payload(result: Any) -> dict[str, Any]:
    """A replay's JSON as a sweep point stores it: without the per-link table (about 0.5 MB on
    nuna-4die, which would dominate a sweep's disk use; a point that needs an overlay is one
    ``nuna simulate --json`` away), its wall-clock figures under ``timing`` (``wall_s``, and
    ``loop_s`` from the result's attribute: the part of it in the event loop), so that the rest
    is the same for the same inputs."""
    payload: dict[str, Any] = dict(result.to_json(chip_links=False))
    timing = {key: payload.pop(key) for key in _WALL_CLOCK_KEYS if key in payload}
    loop_s = getattr(result, "loop_s", None)  # a simulator without it (tests' stand-ins) has none
    if isinstance(loop_s, float):
        timing["loop_s"] = loop_s
    if timing:
        payload[TIMING_KEY] = timing
    return payload
