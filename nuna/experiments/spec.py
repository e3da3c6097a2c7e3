"""Sweep specifications: the TOML file format, its validation, and the expansion into points.

A sweep spec names a Cartesian product of simulation inputs (``[grid]``), optionally joined by
further products that replace some of its axes (``[[grid.also]]``: e.g. more threadblock counts
at the small sizes only), settings shared by every point (``[fixed]``) and the point function
that turns one point into one result (``[sweep]``). :func:`load_sweep_spec` validates everything
up front so that a typo is one clear :class:`~nuna.errors.InputError` naming the file and the
key, not a failure hours into a run. :func:`expand` turns a spec into :class:`Point` records in
a documented, deterministic order; a point's identity (:func:`point_id`) is a hash of its
inputs, the point function and the nuna version, so a result file can be found again by anyone
who holds the same inputs.

A grid either generates its plans (``collectives`` x ``gpus`` x ``tbs_per_peer`` with ``[fixed]
algo``: ``nuna.plan.generate``) or sweeps plan files (``plans``: hand-written or compiler-made
MSCCL XML), each point taking its collective and pod from its file.

The format is documented in ``docs/sweeps.md``.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import json
import math
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nuna import __version__
from nuna.errors import InputError, NunaError, UsageError
from nuna.fsutil import looks_like_path, read_input
from nuna.text import one_line
from nuna.units import check_size_bytes, format_size, parse_size

if TYPE_CHECKING:  # the plan layer (lxml, numpy) loads only for specs that name plan files
    from nuna.plan.ir import Plan

#: ``nuna.topology.spec.TOPOLOGY_FILE_SUFFIX`` (a test checks they agree): not imported, so that
#: expanding a spec and naming its points do not load the topology layer (networkx and all);
#: only :func:`check_spec_inputs` does
_TOPOLOGY_FILE_SUFFIX = ".toml"
#: ``nuna.plan.xml.MAX_PLAN_BYTES``, for the same reason (a test checks they agree)
_MAX_PLAN_BYTES = 64 * 2**20


def _is_topology_path(topology: str) -> bool:
    return looks_like_path(topology, _TOPOLOGY_FILE_SUFFIX)


def portable_topology(topology: str) -> str:
    """How a point records a topology: a shipped name as it is, a file by its file name
    (``chip.toml``). Where the file lives is no input (its bytes are hashed apart:
    :func:`point_id`), so a project moved, copied or run on another machine keeps its points'
    ids and results, and no local path lands in a result, an index or a figure."""
    if not _is_topology_path(topology):
        return topology
    name = Path(topology).name
    # a file without the suffix stays a path ('./chip'): bare, it would read as a shipped name
    return name if _is_topology_path(name) else f"./{name}"


def recorded_topology_file(record: Mapping[str, Any], folders: Sequence[str | Path]) -> str:
    """The path of the topology file a result record names by its file name
    (:func:`portable_topology`): the first ``folders`` entry holding a file of that name whose
    bytes give the record's id (:func:`point_id`), so that a file edited since, or another of
    the same name, is never taken for it. A shipped name is returned as it is. A record of a
    plan file's point (``plan``) holds that file's bytes in its id too: it is looked for in
    ``folders`` as well (:func:`recorded_plan_file`). ``InputError`` when no folder holds it."""
    topology = str(record["point"]["topology"])
    if not _is_topology_path(topology):
        return topology
    return _recorded_files(record, folders, "topology")[0]


def recorded_plan_file(record: Mapping[str, Any], folders: Sequence[str | Path]) -> str | None:
    """The path of the plan file a result record names by its file name (``plan``: a point of a
    ``[grid] plans`` sweep), found as :func:`recorded_topology_file` finds a topology file (a
    topology file of the record is looked for in ``folders`` as well); ``None`` for a record of
    a generated plan. ``InputError`` when no folder holds it."""
    if record["point"].get("plan") is None:
        return None
    return _recorded_files(record, folders, "plan")[1]


def _recorded_files(record: Mapping[str, Any], folders: Sequence[str | Path],
                    wanted: str) -> tuple[str, str | None]:
    """The topology (a path, or a shipped name) and the plan file (``None``: a generated plan)
    whose bytes give ``record``'s id, each file looked for by its file name in ``folders``."""
    point = record["point"]
    topology = str(point["topology"])
    plan = point.get("plan")

    def found(name: str, digest_of: Callable[[str], str | None]) -> list[tuple[str, str | None]]:
        out: list[tuple[str, str | None]] = []
        for folder in folders:
            candidate = str(Path(folder) / Path(name).name)
            digest = digest_of(candidate)
            if digest not in (None, "missing"):
                out.append((candidate, digest))
        return out

    topologies = (found(topology, topology_file_sha256) if _is_topology_path(topology)
                  else [(topology, None)])
    plans: list[tuple[str | None, str | None]] = (
        [(None, None)] if plan is None else list(found(str(plan), plan_file_sha256)))
    for (topology_path, topology_digest), (plan_path, plan_digest) in itertools.product(topologies, plans):
        if point_id(point, str(record["point_function"]), str(record["nuna_version"]), topology_digest,
                    plan_digest) == record["id"]:
            return topology_path, plan_path
    where = ", ".join(str(f) for f in folders) or "no folder"
    name = Path(topology).name if wanted == "topology" else Path(str(plan)).name
    other = ""
    if wanted == "topology" and plan is not None:
        other = f" (with plan file {Path(str(plan)).name})"
    elif wanted == "plan" and _is_topology_path(topology):
        other = f" (with topology file {Path(topology).name})"
    raise InputError(f"result {record['id']}: {wanted} file {name} with the bytes it was computed with "
                     f"is not in {where}{other}")


#: The point function used when a spec does not name one.
DEFAULT_POINT_FUNCTION = "nuna.experiments.points:simulate_point"
#: the point function of Fig 14's sweep: the collective beside a GEMM (``gemm_sizes``)
GEMM_POINT_FUNCTION = "nuna.experiments.gemm:gemm_point"

#: ``tbs_per_peer`` of a point whose plan is a file (``[grid] plans``): its threadblocks are the
#: plan's own, so no count per peer applies (labels and figures print none)
PLAN_TBS_PER_PEER = 0
#: ``algo`` of such a point: no generator made its plan
PLAN_ALGO = "plan"
#: ``[grid]`` keys that a spec with ``[grid] plans`` does not take (nor ``[fixed] algo``): each
#: plan file gives its points their collective (``coll``), pod (``ngpus``) and threadblocks
_GENERATOR_KEYS = ("collectives", "gpus", "tbs_per_peer")

#: Collectives the plan generators provide (``reduce_scatter`` is accepted as a spelling).
COLLECTIVES: tuple[str, ...] = ("allgather", "allreduce", "reducescatter", "alltoall")

#: The paper's configurations (§5.3), in its order; names are matched case-insensitively.
CONFIGS: tuple[str, ...] = ("UA", "UA+NAR", "NUMA", "NUMA+NAR", "NAP", "NAP+NAR", "NAP*", "NAP*+NAR")

ALGOS: tuple[str, ...] = ("direct", "ring")
#: ``[fixed] line_setups``: the simulator's head set-up rules (``nuna.sim.replay.LINE_SETUP_RULES``,
#: spelled out so that reading a spec does not load the simulator)
LINE_SETUPS: tuple[str, ...] = ("one", "overlap", "series")
#: ``[fixed] packet_credit_lines``' largest value (``nuna.sim.SimOptions``' bound, spelled out
#: for the same reason as ``LINE_SETUPS``)
MAX_CREDIT_LINES = 1 << 20
#: ``[fixed] protocol_model``: the simulator's (``nuna.sim.replay.PROTOCOL_MODELS``, the default
#: first; spelled out for the same reason)
PROTOCOL_MODELS: tuple[str, ...] = ("plan", "simple")

#: ``packet_bytes`` value that lets the simulator pick; ``nar_granularities`` value that
#: simulates every valid number of NAR domains and keeps the fastest (nuna.passes' ``"auto"``).
AUTO = "auto"

#: ``nar_granularities`` value (the default) for the passes' size-threshold heuristic.
HEURISTIC = "heuristic"

_SECTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # section: (required keys, optional keys)
    "sweep": (frozenset(), frozenset({"name", "point_function"})),
    # collectives and gpus are required too unless plans is given (_check_keys)
    "grid": (
        frozenset({"sizes", "configs"}),
        frozenset({"collectives", "gpus", "nar_granularities", "tbs_per_peer", "packet_bytes", "topologies",
                   "gemm_sizes", "also", "plans"}),
    ),
    "fixed": (frozenset(), frozenset({"algo", "packet_bytes", "max_packet_bytes", "seed", "windowed",
                                      "fast_forward", "line_setups", "packet_credit_lines",
                                      "reduce_fusion", "executor_slices", "protocol_model",
                                      "flow_control"})),
}

#: grid axes: spec-file key -> SweepSpec field, in expansion order (outermost first)
GRID_AXES: dict[str, str] = {
    "topologies": "topologies", "plans": "plans", "collectives": "collectives", "gpus": "gpus",
    "sizes": "sizes_bytes", "configs": "configs", "nar_granularities": "nar_granularities",
    "tbs_per_peer": "tbs_per_peer", "packet_bytes": "packet_bytes", "gemm_sizes": "gemm_bytes",
}

# Far beyond the paper's 64 GPUs; catches a unit slip such as gpus = 8000000.
_MAX_GPUS = 4096

T = TypeVar("T")


def config_uses_nar(config: str) -> bool:
    """True for configurations that route with NAR (and so take a NAR granularity)."""
    return config.endswith("+NAR")


def portable_plan(path: str) -> str:
    """How a point records a plan file (``[grid] plans``): by its file name, as
    :func:`portable_topology` records a topology file (its bytes are hashed apart:
    :func:`point_id`)."""
    return Path(path).name


@dataclass(frozen=True, slots=True)
class PlanFile:
    """One ``[grid] plans`` value: the plan file's path (absolute when the spec came from a file)
    and what its header declares, which its points take: the collective (``coll``, in the
    spelling of :data:`COLLECTIVES` where it is one of them) and the pod (``ngpus``)."""

    path: str
    collective: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Point:
    """One simulation's inputs. :meth:`as_dict` is the plain dict handed to the point function.

    ``nar_granularity`` is ``None`` for configurations without NAR, a number of NAR domains,
    ``"heuristic"`` (the passes' size-threshold estimate) or ``"auto"`` (simulate every valid
    number and keep the fastest). ``gemm_bytes`` is the size of each matrix
    of the concurrent GEMM (paper §6.6), ``0`` for none. ``packet_bytes`` is a byte count or
    ``"auto"`` (the simulator picks). ``windowed`` ``True`` replays with one event queue per GPU,
    ``False`` with one queue for the pod, ``None`` as the simulator chooses (``nuna.sim.SimOptions``:
    windowed from 16 GPUs with packets under 32 KiB): the same model, equal-time events of
    different GPUs in GPU order or in insertion order, so a set choice is a point of its own.
    ``max_packet_bytes`` caps the packets ``"auto"`` picks (``None``: the simulator's cap).
    ``fast_forward`` skips the middle of steady states (``nuna.sim.fastforward``: a statistical
    shortcut, so a point of its own). ``line_setups`` names the router head set-ups behind a
    packet of several lines (``nuna.sim.SimOptions.line_setups``; ``None``: the simulator's
    default): another model of coarse packets, so a set rule is a point of its own.
    ``packet_credit_lines`` the flits of buffer credit a packet of several takes on entering a
    buffer (``nuna.sim.SimOptions.packet_credit_lines``; ``None``: the simulator's default):
    likewise.
    ``reduce_fusion`` ``False`` replays each ``re`` step on its own rather than chains of them
    as the executors' fused passes (``nuna.sim.SimOptions.reduce_fusion``, as nuna <= 0.9.0
    did): another model of reductions, so a point of its own. ``executor_slices`` ``True`` runs
    each threadblock's steps once per slice of the plan's protocol, as the executors do
    (``nuna.sim.SimOptions.executor_slices``): another model of a step, so a point of its own.
    ``protocol_model`` ``"simple"`` replays LL and LL128 plans as Simple, without their wire
    bytes and unfenced sends (``nuna.sim.SimOptions.protocol_model``, as nuna <= 0.11.0 did):
    another model of a protocol, so a point of its own. ``flow_control`` ``False`` lets senders
    run ahead of their receivers without limit (``nuna.sim.SimOptions.flow_control``, as nuna
    <= 0.12.0 did): another model of a connection, so a point of its own.

    :attr:`plan` is ``None``: the point's plan is generated. A point of a plan file is a
    :class:`PlanPoint`.
    """

    collective: str
    gpus: int
    size_bytes: int
    config: str
    nar_granularity: int | str | None
    tbs_per_peer: int
    topology: str
    gemm_bytes: int
    algo: str
    packet_bytes: int | str
    seed: int
    windowed: bool | None = None
    max_packet_bytes: int | None = None
    fast_forward: bool = False
    line_setups: str | None = None
    reduce_fusion: bool = True
    executor_slices: bool = False
    protocol_model: str = "plan"
    flow_control: bool = True
    packet_credit_lines: int | None = None

    @property
    def plan(self) -> str | None:
        """The path of the plan file the point replays (:class:`PlanPoint`), ``None`` for a
        generated plan."""
        return None

    def as_dict(self) -> dict[str, Any]:
        # "windowed", "max_packet_bytes", "fast_forward", "line_setups", "packet_credit_lines",
        # "reduce_fusion", "executor_slices", "protocol_model", "flow_control" and "plan" only
        # when set, so that points without them keep their ids
        return {**({"windowed": self.windowed} if self.windowed is not None else {}),
            **({"plan": self.plan} if self.plan is not None else {}),
            **({"max_packet_bytes": self.max_packet_bytes} if self.max_packet_bytes is not None else {}),
            **({"fast_forward": True} if self.fast_forward else {}),
            **({"line_setups": self.line_setups} if self.line_setups is not None else {}),
            **({"packet_credit_lines": self.packet_credit_lines}
               if self.packet_credit_lines is not None else {}),
            **({"reduce_fusion": False} if not self.reduce_fusion else {}),
            **({"executor_slices": True} if self.executor_slices else {}),
            **({"protocol_model": self.protocol_model} if self.protocol_model != "plan" else {}),
            **({"flow_control": False} if not self.flow_control else {}),
            "algo": self.algo,
            "collective": self.collective,
            "config": self.config,
            "gemm_bytes": self.gemm_bytes,
            "gpus": self.gpus,
            "nar_granularity": self.nar_granularity,
            "packet_bytes": self.packet_bytes,
            "seed": self.seed,
            "size_bytes": self.size_bytes,
            "tbs_per_peer": self.tbs_per_peer,
            "topology": self.topology,
        }

    def record(self) -> dict[str, Any]:
        """:meth:`as_dict` as a sweep records and hashes it: the topology by
        :func:`portable_topology`, a plan file by its file name (:func:`portable_plan`); the point
        function gets :meth:`as_dict`, with the files' paths."""
        recorded = {**self.as_dict(), "topology": portable_topology(self.topology)}
        if self.plan is not None:
            recorded["plan"] = portable_plan(self.plan)
        return recorded

    def label(self) -> str:
        """A short human description for progress lines and failure lists."""
        parts = [self.collective, f"{self.gpus}gpu", format_size(self.size_bytes), self.config]
        if self.nar_granularity is not None:
            parts.append(f"G={self.nar_granularity}")
        # a plan file's point has the plan's own threadblocks: its file, not a K, says which
        parts.append(f"K={self.tbs_per_peer}" if self.plan is None else f"plan={portable_plan(self.plan)}")
        if self.gemm_bytes:
            parts.append(f"gemm={format_size(self.gemm_bytes)}")
        parts.append(portable_topology(self.topology))
        if self.windowed is not None:
            parts.append("windowed" if self.windowed else "one-queue")
        if self.packet_bytes != 256:
            size = self.packet_bytes
            parts.append(f"packets={size if isinstance(size, str) else format_size(size)}")
        if self.max_packet_bytes is not None:
            parts.append(f"packets<={format_size(self.max_packet_bytes)}")
        if self.fast_forward:
            parts.append("fast-forward")
        if self.line_setups is not None:
            parts.append(f"setups-{self.line_setups}")
        if self.packet_credit_lines is not None:
            parts.append(f"credit-{self.packet_credit_lines}")
        if not self.reduce_fusion:
            parts.append("nofusion")
        if self.executor_slices:
            parts.append("slices")
        if self.protocol_model != "plan":
            parts.append(f"protocol-{self.protocol_model}")
        if not self.flow_control:
            parts.append("no-flow-control")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class PlanPoint(Point):
    """A point whose plan is a file (``[grid] plans``) at path ``plan``: its ``collective`` and
    ``gpus`` are the file's (``coll``, ``ngpus``), its ``tbs_per_peer`` is
    :data:`PLAN_TBS_PER_PEER` (0: the plan's own threadblocks) and its ``algo``
    :data:`PLAN_ALGO` (``"plan"``). :meth:`Point.as_dict` gives ``plan`` the path,
    :meth:`Point.record` the file name.

    A class of its own rather than a field of :class:`Point` that is ``None`` elsewhere, so that
    a :class:`Point`'s fields stay exactly the keys of its :meth:`~Point.as_dict` with every
    setting set (what keeps a point's id a function of its fields)."""

    plan: str = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class GridPatch:
    """One ``[[grid.also]]`` table: the axes it replaces in the main grid (spec-file keys, with
    validated values in the file's order); every other axis is the main grid's."""

    axes: tuple[tuple[str, tuple[Any, ...]], ...]

    def to_json(self) -> dict[str, list[Any]]:
        return {GRID_AXES[key]: _portable_axis(key, values) for key, values in self.axes}


def _portable_axis(key: str, values: Sequence[Any]) -> list[Any]:
    """An axis's values as an index records them (topology and plan files by file name)."""
    if key == "topologies":
        return [portable_topology(v) for v in values]
    if key == "plans":
        return [portable_plan(v.path) for v in values]
    return list(values)


def _grid_axes(grid: SweepSpec) -> tuple[str, ...]:
    """The spec-file keys of the axes ``grid`` expands: ``plans`` in place of the generator's
    ``collectives``, ``gpus`` and ``tbs_per_peer`` when it has plan files, else those; and
    ``packet_bytes`` only when it has several values (one packet size is a ``[fixed]`` setting,
    as a spec writes and records it: the same spec written either way is equal and recorded
    the same)."""
    left_out: tuple[str, ...] = _GENERATOR_KEYS if grid.plans else ("plans",)
    if len(grid.packet_bytes) == 1:
        left_out += ("packet_bytes",)
    return tuple(key for key in GRID_AXES if key not in left_out)


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """A validated sweep: the grid's value lists (in the file's order), the grids joined to it
    (``also``: each the main grid with some axes replaced) and the fixed settings. ``plans``
    set, each point's plan is one of those files instead of a generated one.

    ``source`` (the file the spec came from) is for messages only and takes no part in equality.
    """

    name: str
    point_function: str
    collectives: tuple[str, ...]
    gpus: tuple[int, ...]
    sizes_bytes: tuple[int, ...]
    configs: tuple[str, ...]
    nar_granularities: tuple[int | str, ...] = (HEURISTIC,)
    tbs_per_peer: tuple[int, ...] = (1,)
    #: packet sizes (bytes or ``"auto"``): ``[fixed] packet_bytes`` or the ``[grid]`` axis
    packet_bytes: tuple[int | str, ...] = (256,)
    topologies: tuple[str, ...] = ("nuna-4die",)
    gemm_bytes: tuple[int, ...] = (0,)
    #: plan files swept in place of generated plans (``[grid] plans``); when set, the generator's
    #: ``collectives``, ``gpus`` and ``tbs_per_peer`` (empty then) take no part in the expansion
    plans: tuple[PlanFile, ...] = ()
    algo: str = "direct"
    seed: int = 0
    windowed: bool | None = None
    max_packet_bytes: int | None = None
    fast_forward: bool = False
    line_setups: str | None = None
    reduce_fusion: bool = True
    executor_slices: bool = False
    protocol_model: str = "plan"
    flow_control: bool = True
    packet_credit_lines: int | None = None
    also: tuple[GridPatch, ...] = ()
    source: str = field(default="<spec>", compare=False)
    #: the table the main grid's packet sizes were given in (``"[fixed]"`` or ``"[grid]"``), for
    #: messages only, as ``source``
    packet_table: str = field(default="[fixed]", compare=False)

    def packet_sizes(self) -> tuple[int | str, ...]:
        """Every packet size of the spec's grids (the main grid's first), without duplicates."""
        return tuple(dict.fromkeys(size for grid in self.grids() for size in grid.packet_bytes))

    def grids(self) -> tuple[SweepSpec, ...]:
        """The Cartesian products whose union the spec is: the main grid, then one per
        ``also`` table (each without ``also`` of its own)."""
        main = dataclasses.replace(self, also=())
        grids = [main]
        for patch in self.also:
            patched: dict[str, Any] = {GRID_AXES[key]: values for key, values in patch.axes}
            grids.append(dataclasses.replace(main, **patched))
        return tuple(grids)

    def to_json(self) -> dict[str, Any]:
        """The normalised spec as plain JSON data (recorded in the sweep's index)."""
        # "plans" only when set, so that other specs keep their index bytes; the axes it replaces
        # are then left out (each plan file gives them)
        grid: dict[str, Any] = {GRID_AXES[key]: _portable_axis(key, getattr(self, GRID_AXES[key]))
                                for key in _grid_axes(self)}
        if self.also:  # absent otherwise, so specs without it keep their index bytes
            grid["also"] = [patch.to_json() for patch in self.also]
        return {
            "name": self.name,
            "point_function": self.point_function,
            "grid": grid,
            "fixed": _fixed(self),
        }


def canonical_json(payload: Any) -> str:
    """Compact JSON with sorted keys: the byte form that identities are hashed from."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def point_id(point: Mapping[str, Any], point_function: str, version: str = __version__,
             topology_sha256: str | None = None, plan_sha256: str | None = None) -> str:
    """Identity of a point's result: a hash of its inputs, the point function and nuna's version,
    and, for a topology given as a file, the file's bytes (``topology_sha256``): a file can be
    edited under the same path, a shipped topology changes only with nuna's version. A point
    of a plan file (``[grid] plans``) adds the file's bytes the same way (``plan_sha256``).

    Sixteen hex digits (64 bits) keep file names short; a collision within one sweep of even a
    million points has a probability below 10^-7.
    """
    payload = {"nuna_version": version, "point": dict(point), "point_function": point_function}
    if topology_sha256 is not None:  # absent otherwise, so shipped topologies keep their ids
        payload["topology_sha256"] = topology_sha256
    if plan_sha256 is not None:  # absent otherwise, so points of generated plans keep their ids
        payload["plan_sha256"] = plan_sha256
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()[:POINT_ID_DIGITS]


#: hex digits of a :func:`point_id`
POINT_ID_DIGITS = 16


def is_point_id(value: Any) -> bool:
    """Whether ``value`` has the form of a :func:`point_id`: it names a file under a sweep's
    ``results/``, so a string read from an index must be one and never a path."""
    return (isinstance(value, str) and len(value) == POINT_ID_DIGITS
            and all(ch in "0123456789abcdef" for ch in value))


def topology_file_sha256(topology: str) -> str | None:
    """SHA-256 of a topology file's bytes (``None`` for a shipped name; ``"missing"`` for a file
    that cannot be read, whose points then fail with the loader's message)."""
    if not _is_topology_path(topology):
        return None
    try:
        return hashlib.sha256(read_input(topology, "topology file")).hexdigest()
    except NunaError:  # a pipe too: read_input does not wait on it
        return "missing"


#: key of a point function's input dict that holds the SHA-256 of the point's topology and plan
#: files as the sweep hashed them into its id (``{"topology": ..., "plan": ...}``, ``None`` for
#: a shipped topology or a generated plan; absent when the point has no file): the point
#: function checks the files still hold those bytes (:func:`file_changed_problem`), so a file
#: edited during a sweep cannot store another file's result under the old bytes' id
FILE_DIGESTS_KEY = "file_sha256"


def file_changed_problem(point: Mapping[str, Any]) -> str | None:
    """Why a point's topology or plan file no longer holds the bytes its id was made from
    (:data:`FILE_DIGESTS_KEY`), else None."""
    digests = point.get(FILE_DIGESTS_KEY) or {}
    for kind, path, digest_of in (("topology", point.get("topology"), topology_file_sha256),
                                  ("plan", point.get("plan"), plan_file_sha256)):
        expected = digests.get(kind)
        if expected is not None and path is not None and digest_of(str(path)) != expected:
            return (f"{path}: the {kind} file changed since the sweep read it (a point is named by its "
                    "files' bytes): run the sweep again")
    return None


def plan_file_sha256(path: str) -> str:
    """SHA-256 of a plan file's bytes (``"missing"`` for a file that cannot be read or is larger
    than a plan file may be, whose points then fail with the loader's message)."""
    try:
        return hashlib.sha256(read_input(path, "plan file", limit_bytes=_MAX_PLAN_BYTES)).hexdigest()
    except NunaError:
        return "missing"


def expand(spec: SweepSpec) -> tuple[Point, ...]:
    """Every point of the spec's grids, without duplicates, in a deterministic order.

    The main grid's points come first, then each ``also`` grid's in the file's order, less the
    points already listed. Within a grid, dimensions nest in this order (outermost first):
    topologies, collectives, gpus, sizes, configs, nar_granularities, tbs_per_peer, packet_bytes,
    gemm_sizes (a grid of plan files: topologies, plans, sizes, configs, nar_granularities,
    packet_bytes, gemm_sizes); within a dimension the file's order is kept. A configuration
    without NAR takes no granularity, so its points are generated once (with
    ``nar_granularity = None``) rather than once per granularity.
    """
    points: list[Point] = []
    seen: set[Point] = set()
    for grid in spec.grids():
        for point in _expand_one(grid):
            if point not in seen:
                seen.add(point)
                points.append(point)
    return tuple(points)


def _expand_one(spec: SweepSpec) -> list[Point]:
    # (topology, collective, gpus, size, config, granularity, tbs_per_peer, packet, gemm, plan), in
    # the documented nesting: a plan file stands where the generator's collective and pod are
    combos: Iterable[tuple[str, str, int, int, str, int | str, int, int | str, int, str | None]]
    if spec.plans:
        combos = ((topology, plan.collective, plan.gpus, size, config, nar, PLAN_TBS_PER_PEER, packet, gemm,
                   plan.path)
                  for topology, plan, size, config, nar, packet, gemm in itertools.product(
                      spec.topologies, spec.plans, spec.sizes_bytes, spec.configs, spec.nar_granularities,
                      spec.packet_bytes, spec.gemm_bytes))
    else:
        combos = ((*values, None) for values in itertools.product(
            spec.topologies, spec.collectives, spec.gpus, spec.sizes_bytes, spec.configs,
            spec.nar_granularities, spec.tbs_per_peer, spec.packet_bytes, spec.gemm_bytes))
    points: list[Point] = []
    for topology, collective, gpus, size, config, nar, tbs, packet, gemm, plan in combos:
        inputs: dict[str, Any] = {
            "collective": collective,
            "gpus": gpus,
            "size_bytes": size,
            "config": config,
            "nar_granularity": nar if config_uses_nar(config) else None,
            "tbs_per_peer": tbs,
            "topology": topology,
            "gemm_bytes": gemm,
            "algo": spec.algo if plan is None else PLAN_ALGO,
            "packet_bytes": packet,
            "seed": spec.seed,
            "windowed": spec.windowed,
            # a cap on what "auto" picks: no part of a point of a set packet size
            "max_packet_bytes": spec.max_packet_bytes if packet == AUTO else None,
            "fast_forward": spec.fast_forward,
            "line_setups": spec.line_setups,
            "reduce_fusion": spec.reduce_fusion,
            "executor_slices": spec.executor_slices,
            "protocol_model": spec.protocol_model,
            "flow_control": spec.flow_control,
            "packet_credit_lines": spec.packet_credit_lines,
        }
        point = Point(**inputs) if plan is None else PlanPoint(**inputs, plan=plan)
        points.append(point)
    return points


# ---------------------------------------------------------------------------------------------
# Loading and validation


def load_sweep_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec TOML file; raise ``InputError`` naming the file and key.

    Topology values that look like paths (ending in ``.toml`` or containing a ``/``) are taken
    relative to the spec file's folder and stored as absolute paths, so the spec runs from any
    working directory. Beyond :func:`parse_sweep_spec`'s checks, the values are checked against
    the topologies and the plan generator (:func:`check_spec_inputs`).
    """
    source = Path(path)
    raw = read_input(source, "sweep spec file")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{source}: not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{source}: invalid TOML: {err}") from None
    spec = parse_sweep_spec(data, source=str(source), base_dir=source.resolve().parent,
                            default_name=source.stem)
    check_spec_inputs(spec)
    return spec


def parse_sweep_spec(
    data: Mapping[str, Any],
    *,
    source: str = "<spec>",
    base_dir: Path | None = None,
    default_name: str = "sweep",
) -> SweepSpec:
    """Validate a spec already parsed from TOML (the dict form of the file)."""
    _check_keys(data, source)
    sweep = data.get("sweep", {})
    grid = data["grid"]
    fixed = data.get("fixed", {})

    name = _name(sweep.get("name", default_name), source, default="name" not in sweep)
    point_function = _point_function(sweep.get("point_function", DEFAULT_POINT_FUNCTION), source)

    has_plans = "plans" in grid
    if has_plans:
        _check_plan_grid(grid, fixed, point_function, source)
    convert = _axis_converters(base_dir)
    defaults: dict[str, list[Any] | None] = {
        "collectives": None, "gpus": None, "sizes": None, "configs": None,
        "nar_granularities": [HEURISTIC], "tbs_per_peer": [1], "topologies": ["nuna-4die"], "gemm_sizes": [0],
    }
    if has_plans:  # the plan files give what the generator's keys would
        defaults = {key: value for key, value in defaults.items() if key not in _GENERATOR_KEYS}
        defaults["plans"] = None
    axes: dict[str, Any] = {GRID_AXES[key]: _value_list(grid, key, default, convert[key], source, "[grid]")
                            for key, default in defaults.items()}
    if has_plans:
        axes |= {GRID_AXES[key]: () for key in _GENERATOR_KEYS}
        _check_no_gemm(axes["gemm_bytes"], source, "[grid]")
    packet_bytes = _packet_axis(grid, fixed, convert, source)
    spec = SweepSpec(
        name=name,
        point_function=point_function,
        **axes,
        algo=_choice(fixed.get("algo", "direct"), ALGOS, source, "[fixed] algo"),
        packet_bytes=packet_bytes,
        seed=_seed(fixed.get("seed", 0), source),
        windowed=None if "windowed" not in fixed else _flag(fixed["windowed"], source, "[fixed] windowed"),
        fast_forward=_flag(fixed.get("fast_forward", False), source, "[fixed] fast_forward"),
        line_setups=None if "line_setups" not in fixed else _choice(fixed["line_setups"], LINE_SETUPS, source,
                                                                  "[fixed] line_setups"),
        reduce_fusion=_flag(fixed.get("reduce_fusion", True), source, "[fixed] reduce_fusion"),
        executor_slices=_flag(fixed.get("executor_slices", False), source, "[fixed] executor_slices"),
        protocol_model=_choice(fixed.get("protocol_model", "plan"), PROTOCOL_MODELS, source,
                               "[fixed] protocol_model"),
        flow_control=_flag(fixed.get("flow_control", True), source, "[fixed] flow_control"),
        packet_credit_lines=None if "packet_credit_lines" not in fixed else _credit_lines(
            fixed["packet_credit_lines"], source),
        also=_grid_patches(grid.get("also", []), convert, source, has_plans),
        source=source,
        packet_table="[grid]" if "packet_bytes" in grid else "[fixed]",
    )
    # a cap on "auto" packets needs some, in any of the grids
    spec = dataclasses.replace(spec, max_packet_bytes=_max_packet_bytes(fixed, spec.packet_sizes(), source))
    # checked before expand() lists them: 135 M points of an 18 kB spec took 94 s to fail on memory
    bound = sum(math.prod(len(getattr(g, GRID_AXES[key])) for key in _grid_axes(g)) for g in spec.grids())
    if bound > MAX_POINTS:
        raise _fail(source, "[grid]", f"up to {bound:,} points, more than the {MAX_POINTS:,} a sweep "
                    "may have (split it into several specs)")
    # results name a topology file by its file name (portable_topology): two files must not share one
    files: dict[str, str] = {}
    for topology in (t for g in spec.grids() for t in g.topologies):
        other = files.setdefault(portable_topology(topology), topology)
        if other != topology:
            raise _fail(source, "[grid] topologies", f"{other} and {topology} have the same file name; "
                        "results name a topology file by its file name, so rename one")
    # and a plan file by its file name (portable_plan)
    plan_axes = [("[grid]", spec.plans)] + [(f"[[grid.also]] #{i + 1}", values)
                                           for i, patch in enumerate(spec.also)
                                           for key, values in patch.axes if key == "plans"]
    plan_files: dict[str, str] = {}
    for table, plans in plan_axes:
        for plan in plans:
            other = plan_files.setdefault(portable_plan(plan.path), plan.path)
            if other != plan.path:
                raise _fail(source, f"{table} plans", f"{other} and {plan.path} have the same file name; "
                            "results name a plan file by its file name, so rename one")
    return spec


def _check_plan_grid(grid: Mapping[str, Any], fixed: Mapping[str, Any], point_function: str,
                     source: str) -> None:
    """What a spec with ``[grid] plans`` may not say: the generator's keys (each plan file
    gives its points their collective, pod and threadblocks) and the GEMM point function (it
    builds on a generated plan)."""
    for key in _GENERATOR_KEYS:
        if key in grid:
            raise _fail(source, f"[grid] {key}", _NOT_WITH_PLANS)
    if "algo" in fixed:
        raise _fail(source, "[fixed] algo", "not with [grid] plans: no generator makes a plan file's plan")
    if point_function == GEMM_POINT_FUNCTION:
        raise _fail(source, "[sweep] point_function", f"{GEMM_POINT_FUNCTION} generates the collective's "
                    "plan; not with [grid] plans")


#: why a spec with ``[grid] plans`` refuses the generator's keys
_NOT_WITH_PLANS = ("not with [grid] plans: each plan file gives its points their collective (coll), "
                   "pod (ngpus) and threadblocks")


def _check_no_gemm(gemm_bytes: Sequence[int], source: str, table: str) -> None:
    """A grid of plan files replays the collective alone (a GEMM builds on a generated plan)."""
    index = next((i for i, size in enumerate(gemm_bytes) if size), None)
    if index is not None:
        raise _fail(source, f"{table} gemm_sizes[{index}]", "a concurrent GEMM is added to a generated plan "
                    f"({GEMM_POINT_FUNCTION}); not with [grid] plans (use 0)")


def _axis_converters(base_dir: Path | None) -> dict[str, Callable[[Any, str], Any]]:
    return {
        "collectives": _collective, "gpus": _gpus, "sizes": _size, "configs": _config,
        "nar_granularities": _nar_granularity, "tbs_per_peer": _tbs_per_peer,
        "topologies": _topology_resolver(base_dir), "gemm_sizes": _gemm_size,
        "plans": _plan_resolver(base_dir), "packet_bytes": _packet_size,
    }


def _grid_patches(
    raw: Any, convert: Mapping[str, Callable[[Any, str], Any]], source: str, has_plans: bool = False
) -> tuple[GridPatch, ...]:
    """The ``[[grid.also]]`` tables. With ``[grid] plans`` (``has_plans``) a table may replace
    the plan files but not the generator's axes; without, it may not give plan files (a spec
    either generates its plans or sweeps plan files)."""
    tables = raw if isinstance(raw, list) else [raw]
    patches: list[GridPatch] = []
    for i, table in enumerate(tables):
        where = f"[[grid.also]] #{i + 1}"
        if not isinstance(table, Mapping):
            raise _fail(source, where, f"must be a table of grid axes, got {_kind(table)}")
        if not table:
            raise _fail(source, where, "replaces no axis (list at least one, e.g. tbs_per_peer = [4, 16])")
        for key in table:
            if key not in GRID_AXES:
                raise _fail(source, where, f"unknown grid axis {key!r}{_did_you_mean(key, list(GRID_AXES))}")
            if has_plans and key in _GENERATOR_KEYS:
                raise _fail(source, f"{where} {key}", _NOT_WITH_PLANS)
            if not has_plans and key == "plans":
                raise _fail(source, f"{where} plans", "only with [grid] plans (a spec either generates its "
                            "plans or sweeps plan files: sweep them with a spec of their own)")
        # in the main grid's axis order, so that the same table written in another order is equal
        axes = [(key, _value_list(table, key, None, convert[key], source, where))
                for key in GRID_AXES if key in table]
        if has_plans:
            _check_no_gemm(dict(axes).get("gemm_sizes", ()), source, where)
        patches.append(GridPatch(tuple(axes)))
    return tuple(patches)


def check_spec_inputs(spec: SweepSpec) -> None:
    """Check what only the layers below can judge, so that a spec whose points would all fail
    is one error before the run rather than a failure per point: every topology loads (a
    shipped name, or a regular file that parses as one); ``packet_bytes`` and
    ``max_packet_bytes`` are what the simulator takes on each topology; every number of NAR
    domains is valid on each topology (in grids with a ``+NAR`` configuration); every plan is
    within the generator's limits, with ``tbs_per_peer`` above 1 only for ``algo = "direct"``;
    every plan file (``[grid] plans``) reads and verifies without errors (``nuna.plan.verify``:
    the passes refuse a plan with errors, a wrong result included, so its every point would
    fail; warnings pass) and its buffers fit a GPU of every topology at the grid's largest
    size (the passes' own check, ``nuna.sim.layout.memory_fit_problem``).
    Raises ``InputError`` naming ``spec.source`` and the key (in ``[[grid.also]]`` grids, the
    table that gave the value).

    Loads the topology layer and the plan generator (and, for plan files, the plan reader and
    verifier and the simulator's memory layout), not the replay or the passes (numba): the
    driver stays light.
    """
    # the generator's own estimate, so that the spec refuses exactly the plans generate() would
    from nuna.plan.generate import check_plan_size
    from nuna.plan.ir import Collective
    from nuna.topology.address import nar_granularities
    from nuna.topology.spec import TopologySpec, load_topology

    source = spec.source
    loaded: dict[str, TopologySpec] = {}
    verified: dict[str, Plan] = {}
    fits: set[tuple[str, str, int]] = set()

    def plan_of(plan_file: PlanFile, where: str) -> Plan:
        if plan_file.path not in verified:
            verified[plan_file.path] = _verified_plan(plan_file, source, where)
        return verified[plan_file.path]

    def topology(name: str, where: str) -> TopologySpec:
        if name not in loaded:
            try:  # the loader refuses folders and named pipes itself
                loaded[name] = load_topology(name)
            except NunaError as err:
                raise _fail(source, where, str(err)) from None
        return loaded[name]

    for number, grid in enumerate(spec.grids()):
        replaced = {key for key, _ in spec.also[number - 1].axes} if number else set()

        def at(key: str, index: int, replaced: set[str] = replaced, number: int = number) -> str:
            table = f"[[grid.also]] #{number}" if key in replaced else "[grid]"
            return f"{table} {key}[{index}]"

        if spec.point_function == DEFAULT_POINT_FUNCTION:
            gemm = next((i for i, size in enumerate(grid.gemm_bytes) if size), None)
            if gemm is not None:
                raise _fail(source, at("gemm_sizes", gemm), "the default point function replays the "
                            "collective alone; a concurrent GEMM needs [sweep] point_function = "
                            f"{GEMM_POINT_FUNCTION!r} (as scripts/sweeps/fig14.toml)")
        topologies = [topology(name, at("topologies", i)) for i, name in enumerate(grid.topologies)]
        for topo in topologies:
            _check_packets(spec, grid, at, topo.chip.flit_bytes, topo.name)
            # every collective's buffer on a GPU holds at least the nccl-tests size, so a larger
            # size certainly fails; the replay's layout checks the exact page count per point
            memory_bytes = topo.chip.memory_pages * topo.chip.page_bytes
            for i, size in enumerate(grid.sizes_bytes):
                if size > memory_bytes:
                    raise _fail(source, at("sizes", i), f"{format_size(size)} is more than a GPU of "
                                f"{topo.name} holds ({format_size(memory_bytes)} in {topo.chip.hbm_stacks} "
                                "HBM stacks)")
        if any(config_uses_nar(config) for config in grid.configs):
            for i, granularity in enumerate(grid.nar_granularities):
                for topo in topologies:
                    valid = nar_granularities(topo)
                    if isinstance(granularity, int) and granularity not in valid:
                        raise _fail(source, at("nar_granularities", i),
                                    f"NAR granularity {granularity} is not valid for {topo.name} "
                                    f"(valid: {', '.join(map(str, valid))}, {HEURISTIC!r} or {AUTO!r})")
        if grid.plans:
            from nuna.sim.layout import memory_fit_problem  # no numba: the pages a plan's buffers take

            # a plan's pages grow with the size: the largest size fits, or the passes refuse it
            largest = max(range(len(grid.sizes_bytes)), key=grid.sizes_bytes.__getitem__)
            size = grid.sizes_bytes[largest]
            for i, plan_file in enumerate(grid.plans):
                plan = plan_of(plan_file, at("plans", i))
                for topo in topologies:
                    if (plan_file.path, topo.name, size) in fits:
                        continue
                    problem = memory_fit_problem(plan, topo, size)
                    if problem is not None:
                        raise _fail(source, at("sizes", largest), f"{format_size(size)} of plan "
                                    f"{portable_plan(plan_file.path)} does not fit {topo.name}: {problem}")
                    fits.add((plan_file.path, topo.name, size))
            continue  # the generator's checks below do not apply
        for collective, (g, gpus), (k, tbs) in itertools.product(
                grid.collectives, enumerate(grid.gpus), enumerate(grid.tbs_per_peer)):
            if spec.algo != "direct" and tbs != 1:
                raise _fail(source, at("tbs_per_peer", k), f"threadblocks per peer apply to the direct "
                            f"algorithm; {spec.algo} uses one threadblock per ring (use 1)")
            try:
                check_plan_size(Collective(collective), spec.algo, gpus, tbs, tbs)
            except UsageError as err:
                # the threadblock count is to blame if the pod alone fits
                try:
                    check_plan_size(Collective(collective), spec.algo, gpus, 1, 1)
                    key, index = "tbs_per_peer", k
                except UsageError:
                    key, index = "gpus", g
                raise _fail(source, at(key, index),
                            f"{err} ({gpus} GPUs, {tbs} threadblocks per peer)") from None


def _verified_plan(plan_file: PlanFile, source: str, where: str) -> Plan:
    """``plan_file``'s plan, read and verified: ``InputError`` naming ``where`` when it does not
    read, no longer declares what the spec read of it, or has errors."""
    from nuna.plan.verify import verify
    from nuna.plan.xml import load_with_source

    try:
        plan, source_map = load_with_source(plan_file.path)
    except NunaError as err:
        raise _fail(source, where, one_line(str(err))) from None
    if (plan.collective.value, plan.ngpus) != (plan_file.collective, plan_file.gpus):
        raise _fail(source, where, f"{plan_file.path}: changed while the spec was read (now "
                    f"{plan.collective.value} on {plan.ngpus} GPUs, read as {plan_file.collective} on "
                    f"{plan_file.gpus}): load the spec again")
    errors = verify(plan, source=source_map).errors
    if errors:
        more = len(errors) - 1
        raise _fail(source, where, one_line(errors[0]) + (f" (and {more} more error{'s' * (more > 1)})"
                                                          if more else "")
                    + "; the passes refuse a plan with errors (`nuna validate` lists them)")
    return plan


def _check_packets(spec: SweepSpec, grid: SweepSpec, at: Callable[[str, int], str], flit_bytes: int,
                   topology: str) -> None:
    """The simulator's packet rules (``nuna.topology.fit``) for ``grid`` (one of ``spec``'s
    grids), each value named by ``at`` where it is a grid axis's."""
    from nuna.topology.fit import packet_cap_problem, packet_problem

    for i, size in enumerate(grid.packet_bytes):
        problem = packet_problem(size, flit_bytes, topology)
        if problem is None:
            continue
        where = at("packet_bytes", i)
        if where.startswith("[grid]") and spec.packet_table == "[fixed]":
            where = "[fixed] packet_bytes"
            if size == 256:  # perhaps not given: say where the 256 comes from
                problem += (" (256 is the default: set [fixed] packet_bytes to a multiple of the flit or "
                            "\"auto\")")
        raise _fail(spec.source, where, problem)
    cap = spec.max_packet_bytes
    problem = None if cap is None else packet_cap_problem(cap, flit_bytes, topology)
    if problem is not None:
        raise _fail(spec.source, "[fixed] max_packet_bytes", problem)


#: grid axes a command line may restrict (or, for ``topologies``, replace), by their spec-file key
GRID_OVERRIDES = ("topologies", "collectives", "gpus", "sizes", "configs", "tbs_per_peer")


def restrict_grid(spec: SweepSpec, overrides: Mapping[str, Sequence[str]]) -> SweepSpec:
    """``spec`` with some grid axes replaced by values as a command line gives them (``"8"``,
    ``"10MB"``, ``"NAP+NAR"``), validated as a spec file's values are. The result is named after
    the change (``fig9-gpus2_4_8-sizes10MB``), so its sweep folder and outputs stay apart from
    the full grid's; the points, and so their result files, are the same as the full grid's,
    except where ``topologies`` names other machines (the same grid on another topology: new
    points).

    ``[[grid.also]]`` grids keep what the command line allows of the axes they replace (a table
    left with no value on an axis is dropped): ``--sizes 100kB`` on a spec that searches more
    threadblock counts at 100 kB and 1 MB keeps that search at 100 kB.

    A spec of plan files (``[grid] plans``) takes no ``collectives``, ``gpus`` or
    ``tbs_per_peer`` (``UsageError``): its files give them."""
    unknown = sorted(set(overrides) - set(GRID_OVERRIDES))
    if unknown:
        raise UsageError(f"cannot override grid axis {unknown[0]!r} (can: {', '.join(GRID_OVERRIDES)})")
    given = [axis for axis in _GENERATOR_KEYS if axis in overrides] if spec.plans else []
    if given:
        raise UsageError(f"cannot override grid axis {given[0]!r}: {spec.name} sweeps plan files, which give "
                         "each point its collective, pod and threadblocks")
    grid: dict[str, Any] = {key: [v.path for v in spec.plans] if key == "plans"
                            else list(getattr(spec, GRID_AXES[key])) for key in _grid_axes(spec)}
    tags = []
    for axis in GRID_OVERRIDES:
        if axis not in overrides:
            continue
        raw = [v.strip() for v in overrides[axis]]
        # counts arrive as text; a value that is not a whole number is left for the check to name
        grid[axis] = [int(v) if axis in ("gpus", "tbs_per_peer") and v.isdigit() else v for v in raw]
        # a topology file is named by its stem (the folder it lives in does not name the machine)
        names = [Path(v).stem if axis == "topologies" and _is_topology_path(v) else v for v in raw]
        tags.append(axis.replace("_", "") + "_".join(names))
    name = "-".join([spec.name, *tags])
    # one path component, without dots (output files are named ``<name>.png``, ``<name>.json``)
    safe = _respell(name, "+-_")
    if len(safe) > MAX_NAME_CHARS:
        safe = f"{safe[:_KEEP_CHARS]}-{hashlib.sha256(safe.encode()).hexdigest()[:12]}"
    # the cap was checked against every grid's packet sizes, an [[grid.also]] table's "auto" too,
    # which the main grid alone parsed here may lack
    fixed = {key: value for key, value in _fixed(spec).items() if key != "max_packet_bytes"}
    doc = {"sweep": {"name": safe, "point_function": spec.point_function}, "grid": grid, "fixed": fixed}
    restricted = parse_sweep_spec(doc, source="command line")
    patches = []
    for patch in spec.also:
        axes = []
        for key, values in patch.axes:
            if key in overrides:
                allowed = getattr(restricted, GRID_AXES[key])
                values = tuple(v for v in values if v in allowed)
            axes.append((key, values))
        if all(values for _, values in axes):
            patches.append(GridPatch(tuple(axes)))
    return dataclasses.replace(restricted, also=tuple(patches), max_packet_bytes=spec.max_packet_bytes)


def windowed_spec(spec: SweepSpec, windowed: bool = True) -> SweepSpec:
    """``spec`` replayed with windowed scheduling (or with one queue), named apart
    (``fig9-windowed``, ``fig9-one-queue``): its points are points of their own, since
    equal-time events may run in another order."""
    return dataclasses.replace(spec, windowed=windowed,
                               name=f"{spec.name}-{'windowed' if windowed else 'one-queue'}")


def fast_forward_spec(spec: SweepSpec) -> SweepSpec:
    """``spec`` replayed with fast-forward of steady states (``nuna.sim.fastforward``), named
    apart (``fig9-ff``): its results differ from the full replay's within its error, so its
    points are points of their own."""
    return dataclasses.replace(spec, fast_forward=True, name=f"{spec.name}-ff")


def line_setups_spec(spec: SweepSpec, rule: str) -> SweepSpec:
    """``spec`` replayed with the head set-up rule ``rule`` for packets (``nuna.sim.SimOptions.
    line_setups``), named apart (``fig9-setups-series``): its packet points differ from the
    default model's, so its points are points of their own. Raises ``UsageError`` for an
    unknown rule."""
    if rule not in LINE_SETUPS:
        raise UsageError(f"head set-ups per packet must be one of {', '.join(LINE_SETUPS)}, got {rule!r}")
    return dataclasses.replace(spec, line_setups=rule, name=f"{spec.name}-setups-{rule}")


def packet_credit_spec(spec: SweepSpec, lines: int) -> SweepSpec:
    """``spec`` replayed with packets of several flits taking ``lines`` flits of credit on
    entering a buffer (``nuna.sim.SimOptions.packet_credit_lines``), named apart
    (``fig9-credit1``): its packet points differ from the default model's, so its points are
    points of their own. Raises ``UsageError`` for a count out of range."""
    lines = _int(lines, "flits of credit per packet", minimum=1, maximum=MAX_CREDIT_LINES)
    return dataclasses.replace(spec, packet_credit_lines=lines, name=f"{spec.name}-credit{lines}")


def no_fusion_spec(spec: SweepSpec) -> SweepSpec:
    """``spec`` replayed with each ``re`` step on its own rather than chains of them as the
    executors' fused passes (``nuna.sim.SimOptions.reduce_fusion = False``, as nuna <= 0.9.0
    did), named apart (``fig9-nofusion``): its reductions take longer, so its points are points
    of their own."""
    return dataclasses.replace(spec, reduce_fusion=False, name=f"{spec.name}-nofusion")


def slices_spec(spec: SweepSpec) -> SweepSpec:
    """``spec`` replayed slice by slice as the MSCCL executors run their steps
    (``nuna.sim.SimOptions.executor_slices``), named apart (``fig9-slices``): at sizes whose
    chunks exceed a slice its points take longer, so they are points of their own."""
    return dataclasses.replace(spec, executor_slices=True, name=f"{spec.name}-slices")


def packet_cap_spec(spec: SweepSpec, max_packet_bytes: int) -> SweepSpec:
    """``spec`` with ``"auto"`` packets capped at ``max_packet_bytes``, named apart
    (``fig9-packets1KiB``): a cap that binds changes results, so its points are points of their
    own (points of a set packet size take no cap). Raises ``UsageError`` unless some of the
    spec's packets are ``"auto"``."""
    sizes = spec.packet_sizes()
    if AUTO not in sizes:
        raise UsageError(f"a packet cap applies to packet_bytes = 'auto'; {spec.name} uses "
                         f"{', '.join(f'{size} B' for size in sizes)}")
    return dataclasses.replace(spec, max_packet_bytes=_check_cap(max_packet_bytes),
                               name=f"{spec.name}-packets{format_size(max_packet_bytes)}")


def _fixed(spec: SweepSpec) -> dict[str, Any]:
    """The ``[fixed]`` table of ``spec`` (``windowed``, ``max_packet_bytes``, ``fast_forward``,
    ``line_setups``, ``packet_credit_lines``, ``reduce_fusion``, ``executor_slices``,
    ``protocol_model`` and ``flow_control`` only when set (``reduce_fusion`` and
    ``flow_control`` when ``False``, ``executor_slices`` when ``True``, ``protocol_model`` when
    not ``"plan"``): older indexes stay equal; no ``algo`` with plan files, which no generator made)."""
    fixed: dict[str, Any] = {}
    if len(spec.packet_bytes) == 1:  # several: a [grid] axis (_grid_axes)
        fixed["packet_bytes"] = spec.packet_bytes[0]
    fixed["seed"] = spec.seed
    if not spec.plans:
        fixed["algo"] = spec.algo
    if spec.windowed is not None:
        fixed["windowed"] = spec.windowed
    if spec.max_packet_bytes is not None:
        fixed["max_packet_bytes"] = spec.max_packet_bytes
    if spec.fast_forward:
        fixed["fast_forward"] = True
    if spec.line_setups is not None:
        fixed["line_setups"] = spec.line_setups
    if spec.packet_credit_lines is not None:
        fixed["packet_credit_lines"] = spec.packet_credit_lines
    if not spec.reduce_fusion:
        fixed["reduce_fusion"] = False
    if spec.executor_slices:
        fixed["executor_slices"] = True
    if spec.protocol_model != "plan":
        fixed["protocol_model"] = spec.protocol_model
    if not spec.flow_control:
        fixed["flow_control"] = False
    return fixed


def _flag(value: Any, source: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(source, where, f"must be true or false, got {_kind(value)}")
    return value


def _fail(source: str, where: str, message: str) -> InputError:
    return InputError(f"{source}: {where}: {message}")


def _did_you_mean(key: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_keys(data: Mapping[str, Any], source: str) -> None:
    for section in data:
        if section not in _SECTIONS:
            raise InputError(f"{source}: unknown section or top-level key {section!r}"
                             f"{_did_you_mean(section, list(_SECTIONS))}; expected [sweep], [grid], [fixed]")
        if not isinstance(data[section], Mapping):
            raise InputError(f"{source}: [{section}] must be a table, got {_kind(data[section])}")
    if "grid" not in data:
        raise InputError(f"{source}: missing section [grid]")
    for section, (required, optional) in _SECTIONS.items():
        table = data.get(section, {})
        for key in table:
            if key not in required | optional:
                raise _fail(source, f"[{section}]",
                            f"unknown key {key!r}{_did_you_mean(key, list(required | optional))}")
        if section == "grid" and "plans" not in table:  # plan files give these
            required = required | {"collectives", "gpus"}
        for key in sorted(required):
            if key not in table:
                raise _fail(source, f"[{section}]", f"missing required key {key!r}")


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


def _value_list(
    table: Mapping[str, Any],
    key: str,
    default: Sequence[Any] | None,
    convert: Callable[[Any, str], T],
    source: str,
    section: str = "[grid]",
) -> tuple[T, ...]:
    where = f"{section} {key}"
    raw = table.get(key, default)
    if raw is None:  # required keys are checked earlier; kept for type narrowing
        raise _fail(source, where, "missing")
    # A bare value is accepted as a one-element list: `gpus = 8` reads naturally.
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise _fail(source, where, "must list at least one value")
    out: list[T] = []
    for i, item in enumerate(items):
        try:
            value = convert(item, f"{where}[{i}]")
        except UsageError as err:
            raise _fail(source, f"{where}[{i}]", str(err)) from None
        if value in out:
            raise _fail(source, f"{where}[{i}]", f"duplicate value {item!r}")
        out.append(value)
    return tuple(out)


def _int(value: Any, what: str, *, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"expected an integer, got {_kind(value)} {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise UsageError(f"{what} must be {bound}, got {value}")
    return value


#: What a sweep's name may be: it names files and folders (``nuna figure`` writes
#: ``OUT/NAME.png`` and ``OUT/sweeps/NAME``), so one plain path component, never ``..``, a
#: separator or a hidden file. ``+`` is in: :func:`restrict_grid` names grids ``configsUA_NAP+NAR``.
_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
#: longest sweep name: it names a folder and files such as ``<name>.json``, well within the
#: 255 bytes a file name may have on common file systems
#: The most points a spec's grids may hold (before duplicates are dropped): Fig 9's full grid has
#: 648; a million points is weeks of replays, and the list alone takes gigabytes beyond that.
MAX_POINTS = 1_000_000

MAX_NAME_CHARS = 100
#: a name that command-line restrictions made longer keeps this many characters of itself
#: and a hash of the whole (``-`` and 12 hex digits), so that it stays distinct
_KEEP_CHARS = MAX_NAME_CHARS - 13


def _respell(text: str, keep: str) -> str:
    """``text`` with every character but ASCII letters, digits and those in ``keep`` spelt ``_``."""
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch in keep) else "_" for ch in text)


def _name(value: Any, source: str, *, default: bool) -> str:
    text = _string(value, source, "[sweep] name")
    if default:
        # the spec file's name: one path component already, so only its spelling is changed
        # ("my spec.toml" -> "my_spec"), as restrict_grid spells its names
        text = _respell(text, "._+-")
    if not _NAME_PATTERN.fullmatch(text):
        given = f"the default, the file name {value!r}," if default else repr(text)
        raise _fail(source, "[sweep] name", f"{given} is not a plain file name: letters, digits and "
                    "'.', '_', '+', '-', starting with a letter or digit (it names output files)"
                    + ("; set [sweep] name" if default else ""))
    if len(text) > MAX_NAME_CHARS:
        raise _fail(source, "[sweep] name", f"{'the default, the file name,' if default else 'the name'} "
                    f"has {len(text)} characters, more than the {MAX_NAME_CHARS} a sweep name may have "
                    "(it names output files)"
                    + ("; set [sweep] name" if default else ""))
    return text


def _string(value: Any, source: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(source, where, f"expected a non-empty string, got {_kind(value)} {value!r}")
    return value


def _choice(value: Any, choices: Sequence[str], source: str, where: str) -> str:
    if not isinstance(value, str) or value not in choices:
        raise _fail(source, where, f"expected one of {', '.join(choices)}; got {value!r}")
    return value


def _point_function(value: Any, source: str) -> str:
    text = _string(value, source, "[sweep] point_function")
    module, sep, func = text.partition(":")
    valid_module = bool(module) and all(part.isidentifier() for part in module.split("."))
    if not sep or not valid_module or not func.isidentifier():
        raise _fail(source, "[sweep] point_function",
                    f"expected 'package.module:function', got {text!r}")
    return text


def _collective(value: Any, where: str) -> str:
    if isinstance(value, str):
        name = value.lower().replace("_", "")
        if name in COLLECTIVES:
            return name
    raise UsageError(f"unknown collective {value!r}; expected one of {', '.join(COLLECTIVES)}")


def _gpus(value: Any, where: str) -> int:
    return _int(value, "GPU count", minimum=2, maximum=_MAX_GPUS)


def _whole(value: Any) -> Any:
    """A whole float as an int (TOML writes 1e6 as a float: a whole number of bytes all the
    same); anything else as it is, for the caller's own check."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _size(value: Any, where: str) -> int:
    if isinstance(value, str):
        return parse_size(value)
    return check_size_bytes(_int(_whole(value), "size", minimum=1))  # at most 2**60, as a string's


def _config(value: Any, where: str) -> str:
    if isinstance(value, str):
        for name in CONFIGS:
            if name.lower() == value.strip().lower():
                return name
    raise UsageError(f"unknown configuration {value!r}; expected one of {', '.join(CONFIGS)}")


def _nar_granularity(value: Any, where: str) -> int | str:
    if value in (HEURISTIC, AUTO):
        return str(value)
    if isinstance(value, str):
        raise UsageError(f"expected a number of NAR domains, {HEURISTIC!r} or {AUTO!r}; got {value!r}")
    return _int(value, "NAR granularity", minimum=1)


def _tbs_per_peer(value: Any, where: str) -> int:
    return _int(value, "threadblocks per peer", minimum=1)


def _gemm_size(value: Any, where: str) -> int:
    if isinstance(value, str):
        return 0 if value.strip().lower() in ("0", "none") else parse_size(value)
    return 0 if value == 0 else _size(value, where)  # 1e6 and 0.0 as the sizes take them


def _topology_resolver(base_dir: Path | None) -> Callable[[Any, str], str]:
    def resolve(value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"expected a topology name or file path, got {_kind(value)} {value!r}")
        if base_dir is not None and _is_topology_path(value):
            return str((base_dir / value).resolve())
        return value

    return resolve


def _plan_resolver(base_dir: Path | None) -> Callable[[Any, str], PlanFile]:
    """``[grid] plans`` values: a path relative to the spec file's folder (as a topology file's),
    read for the collective and pod its header declares (:func:`check_spec_inputs` verifies it)."""
    def resolve(value: Any, where: str) -> PlanFile:
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"expected a plan file path, got {_kind(value)} {value!r}")
        path = str((base_dir / value).resolve()) if base_dir is not None else value
        from nuna.plan.xml import load  # lxml: only for specs that name plan files

        try:
            plan = load(path)
        except NunaError as err:
            raise UsageError(one_line(str(err))) from None
        return PlanFile(path, plan.collective.value, plan.ngpus)

    return resolve


def _packet_size(value: Any, where: str) -> int | str:
    """A packet size: ``"auto"``, or bytes as 1024 or ``"1KiB"`` (as ``max_packet_bytes``; a
    number is left to the simulator's own bound)."""
    if value == AUTO:
        return AUTO
    try:
        return parse_size(value) if isinstance(value, str) else _int(_whole(value), "packet size", minimum=1)
    except UsageError as err:
        raise UsageError(f"{err} (or 'auto')") from None


def _packet_axis(grid: Mapping[str, Any], fixed: Mapping[str, Any],
                 convert: Mapping[str, Callable[[Any, str], Any]], source: str) -> tuple[int | str, ...]:
    """The main grid's packet sizes: ``[fixed] packet_bytes`` (one value, 256 by default) or
    the ``[grid] packet_bytes`` axis (several), not both."""
    if "packet_bytes" in grid:
        if "packet_bytes" in fixed:
            raise _fail(source, "[fixed] packet_bytes", "also given in [grid] (one packet size is a [fixed] "
                        "setting, several a [grid] axis: give it in one of them)")
        return _value_list(grid, "packet_bytes", None, convert["packet_bytes"], source, "[grid]")
    value = fixed.get("packet_bytes", 256)
    if isinstance(value, list):
        raise _fail(source, "[fixed] packet_bytes", "one packet size (to sweep several, give the list "
                    "in [grid] packet_bytes)")
    try:
        return (_packet_size(value, "[fixed] packet_bytes"),)
    except UsageError as err:
        raise _fail(source, "[fixed] packet_bytes", str(err)) from None


def _check_cap(value: int) -> int:
    """A packet cap: a power-of-two number of bytes (the simulator checks it against the flit)."""
    if value < 1 or value & (value - 1):
        raise UsageError(f"the packet cap must be a power of two bytes (4KiB, 16KiB, ...), got {value} B")
    return value


def _max_packet_bytes(fixed: Mapping[str, Any], packet_bytes: Sequence[int | str], source: str) -> int | None:
    """``[fixed] max_packet_bytes``, given only where one of the grids' packet sizes
    (``packet_bytes``: all of them) is ``"auto"``, the points it applies to."""
    if "max_packet_bytes" not in fixed:
        return None
    where = "[fixed] max_packet_bytes"
    if AUTO not in packet_bytes:
        raise _fail(source, where, "caps what packet_bytes = 'auto' picks; no packet_bytes is 'auto'")
    try:
        return _check_cap(_size(fixed["max_packet_bytes"], where))
    except UsageError as err:
        raise _fail(source, where, str(err)) from None


def _credit_lines(value: Any, source: str) -> int:
    try:
        return _int(value, "flits of credit per packet", minimum=1, maximum=MAX_CREDIT_LINES)
    except UsageError as err:
        raise _fail(source, "[fixed] packet_credit_lines", str(err)) from None


def _seed(value: Any, source: str) -> int:
    try:
        return _int(value, "seed", minimum=0)
    except UsageError as err:
        raise _fail(source, "[fixed] seed", str(err)) from None
