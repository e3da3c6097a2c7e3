"""The paper's Figures 9-14: run (or reuse) each figure's sweep, reduce the results to the
figure's numbers, and render them as PNG and SVG in the paper's style.

Three pure stages, so each can be tested on its own:

1. :func:`run_figure` runs the figure's sweep spec (``scripts/sweeps/figN.toml`` or its installed copy,
   :func:`default_spec_dir`; or a reduced
   ``--quick`` grid derived from it by :func:`quick_spec`) through the resumable sweep runner
   into ``DIR/sweeps/NAME`` (``NAME-quick`` for the reduced grid, so the two never mix);
2. :func:`figure_data` turns the sweep's result records into the figure's numbers (plain JSON:
   speedups, histograms, utilisations), written beside the pictures as ``NAME.json``;
3. :func:`render` draws those numbers on a matplotlib :class:`~matplotlib.figure.Figure` and
   :func:`save_figure` writes PNG and SVG with fixed metadata and hash salt, so the same numbers
   give the same bytes.

The paper evaluates every point "with the best-performing number of threadblocks" (§5.1), so
when a figure's records hold several ``tbs_per_peer`` values for one configuration,
:func:`best_tbs_per_peer` keeps the fastest (UA's too) and the rows record the winner and every
measured time; Fig 13 is the exception, its threadblock counts are its series. Speedups are
``time(UA) / time(config)`` for the point that differs from the configuration's only in its
configuration, NAR granularity and (where reduced) threadblock count; a figure whose UA point is
missing leaves that bar out rather than inventing a baseline.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nuna.errors import InputError, UsageError
from nuna.experiments.spec import (
    PLAN_TBS_PER_PEER,
    SweepSpec,
    canonical_json,
    check_spec_inputs,
    fast_forward_spec,
    line_setups_spec,
    no_fusion_spec,
    packet_cap_spec,
    packet_credit_spec,
    restrict_grid,
    slices_spec,
    windowed_spec,
)
from nuna.experiments.store import is_sweep_folder
from nuna.experiments.sweep import ProgressCallback, SweepSummary, load_results, load_sweep_spec, run_sweep
from nuna.fsutil import checkout_folder, make_folder, write_atomic
from nuna.sim.replay import DEFAULT_LINE_SETUPS, DEFAULT_PACKET_CREDIT_LINES
from nuna.sim.result import COARSE_PACKET_BYTES
from nuna.topology.spec import DEFAULT_TOPOLOGY, is_topology_path
from nuna.units import format_size

if TYPE_CHECKING:  # matplotlib costs ~1 s to import: only the rendering functions load it
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FIGURES: tuple[str, ...] = ("fig9", "fig10", "fig11", "fig12", "fig13", "fig14")

#: The sweep specs installed with the package: copies of ``scripts/sweeps`` (a test checks them
#: byte for byte), so that ``nuna figure`` runs from a wheel or a non-editable install too.
PACKAGED_SPEC_DIR = Path(__file__).resolve().parent / "sweeps"


def _checkout_spec_dir() -> Path | None:
    return checkout_folder("scripts/sweeps")


def default_spec_dir() -> Path:
    """The figures' sweep specs: ``scripts/sweeps`` of a source checkout (where they are edited),
    else :data:`PACKAGED_SPEC_DIR`, as topologies resolve (``nuna.topology.spec``)."""
    return _checkout_spec_dir() or PACKAGED_SPEC_DIR

_BASELINE = "UA"
#: The figure whose ``tbs_per_peer`` values are its series ("many" vs "few"), never reduced.
_TBS_SERIES_FIGURE = "fig13"
#: speedup figures that mark the most any configuration can gain (``_ceilings``)
_CEILING_FIGURES = ("fig9", "fig11")
#: Figures that draw one panel per topology; the others draw one topology.
_PER_TOPOLOGY_FIGURES = ("fig13",)
QUICK_GPUS = 2
QUICK_SIZE_BYTES = 100_000
# one colour per configuration, the same in every figure
_COLOURS: dict[str, str] = {
    "UA": "#4d4d4d", "UA+NAR": "#9ecae1", "NUMA": "#fdd0a2", "NUMA+NAR": "#fd8d3c",
    "NAP*": "#c7e9c0", "NAP*+NAR": "#74c476", "NAP": "#bcbddc", "NAP+NAR": "#3182bd",
}
_SAVE_RC: dict[Any, Any] = {"svg.hashsalt": "nuna", "svg.fonttype": "none", "path.simplify": True}


@dataclass(frozen=True, slots=True)
class FigureOutput:
    """What :func:`run_figure` produced: the sweep's state and the files written."""

    name: str
    sweep_dir: Path
    summary: SweepSummary
    png: Path
    svg: Path
    data_json: Path
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FigureOptions:
    """How a figure's sweep differs from its spec file: ``spec_dir`` (the folder of
    ``figN.toml``; default :func:`default_spec_dir`); ``quick``, a reduced grid
    (:func:`quick_spec`); ``only``, grid axes replaced (:func:`nuna.experiments.spec.
    restrict_grid`: a partial grid, named after the change, before ``quick`` reduces it
    further); ``windowed``, every point replayed windowed or with one queue
    (:func:`nuna.experiments.spec.windowed_spec`; ``None`` leaves it to the simulator);
    ``max_packet_bytes``, a cap on ``"auto"``'s packets (:func:`nuna.experiments.spec.
    packet_cap_spec`); ``fast_forward`` (:func:`nuna.experiments.spec.fast_forward_spec`);
    ``line_setups`` other than the simulator's default (:func:`nuna.experiments.spec.
    line_setups_spec`); ``packet_credit_lines`` other than the simulator's default
    (:func:`nuna.experiments.spec.packet_credit_spec`); ``reduce_fusion`` ``False``, each
    ``re`` step on its own (:func:`nuna.experiments.spec.no_fusion_spec`); ``executor_slices``,
    steps slice by slice (:func:`nuna.experiments.spec.slices_spec`)."""

    spec_dir: str | Path | None = None
    quick: bool = False
    only: Mapping[str, Sequence[str]] | None = None
    windowed: bool | None = None
    max_packet_bytes: int | None = None
    fast_forward: bool = False
    line_setups: str | None = None
    reduce_fusion: bool = True
    executor_slices: bool = False
    packet_credit_lines: int | None = None


def _check_name(name: str) -> str:
    if name not in FIGURES:
        raise UsageError(f"unknown figure {name!r} (choose from {', '.join(FIGURES)})")
    return name


def figure_spec_path(name: str, spec_dir: str | Path | None = None) -> Path:
    """The sweep spec of figure ``name`` (``<spec_dir>/<name>.toml``)."""
    folder = Path(spec_dir) if spec_dir is not None else default_spec_dir()
    path = folder / f"{_check_name(name)}.toml"
    if not path.is_file():
        raise InputError(f"{path}: sweep spec of {name} not found (pass the folder holding figN.toml)")
    return path


def quick_spec(name: str, spec: SweepSpec, keep: Collection[str] = ()) -> SweepSpec:
    """A reduced grid of ``spec`` for tests and CI (seconds): a 2-GPU pod and the 100 kB size
    (100 kB and 1 MB for fig12, whose subject is size; the two smallest GEMMs for fig14);
    only the first ``tbs_per_peer`` value (all of them for fig13, where they are the series,
    with its coarsest and finest NAR granularity); every other dimension is kept, so the figure
    keeps all its series and panels; ``[[grid.also]]`` grids are left out. Its numbers are a
    smoke test, not the figure's. The grid axes named in ``keep`` (``gpus``, ``sizes``,
    ``tbs_per_peer``: those the user gave, :func:`run_figure`'s ``only``) are not reduced, so
    ``--quick --gpus 4`` runs a 4-GPU pod, as its output's name says."""
    _check_name(name)
    sizes = (QUICK_SIZE_BYTES, 10 * QUICK_SIZE_BYTES) if name == "fig12" else (QUICK_SIZE_BYTES,)
    tbs = spec.tbs_per_peer if name == _TBS_SERIES_FIGURE else spec.tbs_per_peer[:1]
    grans = spec.nar_granularities
    if name == _TBS_SERIES_FIGURE and len(grans) > 2:
        grans = (grans[0], grans[-1])
    return dataclasses.replace(spec, name=f"{spec.name}-quick",
                               gpus=spec.gpus if "gpus" in keep else (QUICK_GPUS,),
                               sizes_bytes=spec.sizes_bytes if "sizes" in keep else sizes,
                               tbs_per_peer=spec.tbs_per_peer if "tbs_per_peer" in keep else tbs,
                               nar_granularities=grans,
                               gemm_bytes=tuple(sorted(spec.gemm_bytes)[:2]), also=())


def figure_spec(name: str, options: FigureOptions = FigureOptions()) -> SweepSpec:
    """The sweep spec :func:`run_figure` runs for figure ``name`` with ``options``, checked as
    it checks it: every point can run, and the figure draws one topology (or one plan per
    collective and pod)."""
    o = options
    spec = load_sweep_spec(figure_spec_path(name, o.spec_dir))
    if o.only:
        spec = restrict_grid(spec, o.only)
    if o.quick:
        spec = quick_spec(name, spec, keep=tuple(o.only or ()))
    if o.windowed is not None:
        spec = windowed_spec(spec, o.windowed)
    if o.max_packet_bytes is not None:
        spec = packet_cap_spec(spec, o.max_packet_bytes)
    if o.fast_forward:
        spec = fast_forward_spec(spec)
    if o.line_setups is not None and o.line_setups != DEFAULT_LINE_SETUPS:
        spec = line_setups_spec(spec, o.line_setups)
    if o.packet_credit_lines is not None and o.packet_credit_lines != DEFAULT_PACKET_CREDIT_LINES:
        spec = packet_credit_spec(spec, o.packet_credit_lines)
    if not o.reduce_fusion:
        spec = no_fusion_spec(spec)
    if o.executor_slices:
        spec = slices_spec(spec)
    # the command line's values (a pod size, a threadblock count, a packet cap) meet the
    # spec's topologies only here: a combination no point could run is an error now
    check_spec_inputs(spec)
    topologies = sorted({topology for grid in spec.grids() for topology in grid.topologies})
    if len(topologies) > 1 and name not in _PER_TOPOLOGY_FIGURES:
        # checked before anything runs: the bars of two machines would be drawn on top of each other
        raise InputError(f"{spec.source}: {name} draws one topology, but its spec lists {len(topologies)} "
                         f"({', '.join(topologies)}); give each its own spec (--spec-dir), or sweep "
                         "them with `nuna sweep` and compare the results")
    # the same for two plan files of one collective and pod: a figure places a bar by those
    seen: dict[tuple[str, int], str] = {}
    for plan in (p for grid in spec.grids() for p in grid.plans):
        other = seen.setdefault((plan.collective, plan.gpus), plan.path)
        if other != plan.path:
            raise InputError(f"{spec.source}: {name} draws one bar per collective and pod, but plan files "
                             f"{Path(other).name} and {Path(plan.path).name} are both {plan.collective} on "
                             f"{plan.gpus} GPUs; give each its own spec (--spec-dir), or sweep them with "
                             "`nuna sweep` and compare the results")
    return spec


def figure_sweep_folders(name: str, spec: SweepSpec, out_dir: str | Path) -> tuple[Path, list[Path]]:
    """Where :func:`run_figure` runs ``spec`` (figure ``name``'s, from :func:`figure_spec`) under
    ``out_dir``, and the figure's other sweep folders there whose points it reuses (the full
    grid, other partial grids). Reads only: nothing is created."""
    sweeps = Path(out_dir) / "sweeps"
    # run_sweep skips the folder itself among these; a folder that holds no sweep (made by
    # hand, say) has nothing to reuse and is no reason to refuse the run
    siblings = [d for d in sorted(sweeps.iterdir())
                if d.is_dir() and (d.name == name or d.name.startswith(f"{name}-")) and is_sweep_folder(d)] \
        if sweeps.is_dir() else []
    return sweeps / spec.name, siblings


def run_figure(name: str, out_dir: str | Path, options: FigureOptions = FigureOptions(), *,
               executor: str = "local", jobs: int | None = None, progress: ProgressCallback | None = None,
               retry_failed: bool = False) -> FigureOutput:
    """Run (or resume) figure ``name``'s sweep (its spec as ``options`` change it:
    :func:`figure_spec`) under ``out_dir/sweeps`` and write ``out_dir/NAME.{png,svg,json}``
    (``NAME-quick.*`` with ``options.quick``). Points that the figure's other sweep folders
    under ``out_dir/sweeps`` already hold (the full grid, other partial grids) are reused, not
    rerun. Points that failed are left out of the picture; the summary says which, and a rerun
    with ``retry_failed`` runs them again (as :func:`nuna.experiments.sweep.run_sweep`)."""
    spec = figure_spec(name, options)
    out = Path(out_dir)
    make_folder(out, "figure folder")  # one line naming it when a file is in the way
    make_folder(out / "sweeps", "sweeps folder")
    sweep_dir, siblings = figure_sweep_folders(name, spec, out)
    summary = run_sweep(spec, sweep_dir, executor=executor, jobs=jobs, retry_failed=retry_failed,
                        progress=progress, reuse=siblings)
    data = figure_data(name, load_results(sweep_dir))
    stem = out / spec.name
    png, svg = save_figure(render(name, data), stem)
    data_json = stem.with_suffix(".json")
    write_atomic(data_json, json.dumps(data, sort_keys=True, indent=1) + "\n")
    return FigureOutput(name, sweep_dir, summary, png, svg, data_json, data)


# --------------------------------------------------------------------------------------------
# results -> numbers


def twin_key(point: Mapping[str, Any], ignore: Sequence[str]) -> str:
    """The point without the fields in ``ignore``, in canonical form: points that differ only
    in those fields get the same key, any other difference (even in a field added later) keeps
    them apart."""
    return canonical_json({k: v for k, v in point.items() if k not in ignore})


def _time_ns(record: Mapping[str, Any]) -> float:
    result = record["result"]
    return float(result.get("collective_time_ns", result["time_ns"]))


@dataclass(frozen=True, slots=True)
class TbsChoice:
    """One configuration's best threadblock count: the fastest of the records that differ only
    in ``tbs_per_peer`` and the time each measured count gave, by ascending count."""

    record: Mapping[str, Any]
    times_ns: tuple[tuple[int, float], ...]

    @property
    def tbs_per_peer(self) -> int:
        return int(self.record["point"]["tbs_per_peer"])

    @property
    def time_ns(self) -> float:
        return _time_ns(self.record)

    def times_json(self) -> list[dict[str, Any]]:
        return [{"tbs_per_peer": k, "time_ns": t} for k, t in self.times_ns]


def best_tbs_per_peer(records: Sequence[Mapping[str, Any]]) -> list[TbsChoice]:
    """Reduce records that differ only in ``tbs_per_peer`` to the best-performing one.

    The paper evaluates each collective "with the best-performing number of threadblocks"
    (nuna-paper.md §5.1), so a configuration is represented by its lowest time over the
    threadblock counts measured; this applies to every configuration, UA included, so that a
    speedup compares tuned implementations. Records are grouped by every point field but
    ``tbs_per_peer`` (collective, pod, size, configuration, NAR granularity, GEMM, topology,
    ...); in a group the lowest time wins (the collective's own time beside a GEMM), a tie
    goes to the fewer threadblocks. The winner does not depend on the records' order; groups
    keep the order of their first record (``load_results`` gives expansion order). A group
    with one record is that record.

    Raises ``InputError`` when two records are the same point (their order would decide).
    """
    groups: dict[str, dict[int, Mapping[str, Any]]] = {}
    for record in records:
        point = record["point"]
        tbs = int(point["tbs_per_peer"])
        group = groups.setdefault(twin_key(point, ("tbs_per_peer",)), {})
        if tbs in group:
            raise InputError(f"figure data: two results for the same point {canonical_json(dict(point))}")
        group[tbs] = record
    choices = []
    for group in groups.values():
        times = tuple(sorted((tbs, _time_ns(r)) for tbs, r in group.items()))
        best = min(times, key=lambda kt: (kt[1], kt[0]))[0]
        choices.append(TbsChoice(group[best], times))
    return choices


def _rows(records: Sequence[Mapping[str, Any]], *, best_tbs: bool) -> list[tuple[dict[str, Any], TbsChoice]]:
    """One row per configuration (per point without ``best_tbs``): inputs, time, and speedup
    over its UA twin (``None`` without one), each with the record it was computed from."""
    if best_tbs:
        choices = best_tbs_per_peer(records)
        ignore: tuple[str, ...] = ("config", "nar_granularity", "tbs_per_peer")
    else:
        choices = [TbsChoice(r, ((int(r["point"]["tbs_per_peer"]), _time_ns(r)),)) for r in records]
        ignore = ("config", "nar_granularity")
    base = {twin_key(c.record["point"], ignore): c for c in choices
            if c.record["point"]["config"] == _BASELINE}
    rows = []
    for c in choices:
        p = c.record["point"]
        t = c.time_ns
        ua = base.get(twin_key(p, ignore))
        row: dict[str, Any] = {
            "collective": p["collective"], "gpus": p["gpus"], "size_bytes": p["size_bytes"],
            "config": p["config"], "nar_granularity": p["nar_granularity"],
            "nar_granularity_used": c.record["result"].get("nar_granularity_used"),
            "tbs_per_peer": p["tbs_per_peer"], "gemm_bytes": p.get("gemm_bytes", 0),
            "topology": p.get("topology"),
            "time_ns": t, "speedup": (ua.time_ns / t) if ua is not None and t > 0 else None,
            "packet_bytes": c.record["result"].get("packet_bytes"),
            "baseline_packet_bytes": ua.record["result"].get("packet_bytes") if ua is not None else None,
        }
        if p.get("plan") is not None:  # a plan file's point (absent otherwise: rows keep their form)
            row["plan"] = p["plan"]
        if best_tbs:
            row["tbs_per_peer_best"] = c.tbs_per_peer
            row["tbs_per_peer_times_ns"] = c.times_json()
            row["baseline_tbs_per_peer"] = ua.tbs_per_peer if ua is not None else None
        rows.append((row, c))
    return rows


#: fields in which the records of one point of a speedup figure differ
_POINT_VARIANTS = ("config", "nar_granularity", "tbs_per_peer")


def point_key(point: Mapping[str, Any]) -> str:
    """The point a record belongs to in a speedup figure: every field but the configuration,
    the NAR granularity and the threadblock count."""
    return twin_key(point, _POINT_VARIANTS)


def lowest_floors(records: Sequence[Mapping[str, Any]],
                  floor_of: Callable[[Mapping[str, Any]], float] | None = None) -> dict[str, float]:
    """Per point (:func:`point_key`), the lowest placement floor of its records: what no
    configuration at any threadblock count beats (a floor counts the plan's step sizes, not its
    placement). ``floor_of(record)`` gives a record's floor (default: its result's
    ``placement_floor_ns``; records without one are skipped)."""
    floors: dict[str, float] = {}
    for r in records:
        floor = floor_of(r) if floor_of is not None else r["result"].get("placement_floor_ns")
        if floor:
            key = point_key(r["point"])
            floors[key] = min(floors.get(key, math.inf), float(floor))
    return floors


def _ceilings(records: Sequence[Mapping[str, Any]],
              pairs: Sequence[tuple[dict[str, Any], TbsChoice]]) -> list[dict[str, Any]]:
    """Per point of a speedup figure, the most any configuration can gain over UA: UA's time at
    its fastest count over the point's lowest floor (:func:`lowest_floors`). Points whose
    results carry no floor (from a nuna before the floor existed) have none."""
    floors = lowest_floors(records)
    out = []
    for row, choice in pairs:
        key = point_key(choice.record["point"])
        if row["config"] == _BASELINE and key in floors:
            out.append({"collective": row["collective"], "gpus": row["gpus"], "size_bytes": row["size_bytes"],
                        "gemm_bytes": row["gemm_bytes"], "topology": row["topology"], "floor_ns": floors[key],
                        "max_speedup": row["time_ns"] / floors[key]})
    return out


def _fig10(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    panels = []
    for c in best_tbs_per_peer(records):
        r = c.record
        lat = r["result"]["remote_store_latency_ns"]
        panels.append({"config": r["point"]["config"], "gpus": r["point"]["gpus"],
                       "size_bytes": r["point"]["size_bytes"], "mean_ns": lat["mean"], "max_ns": lat["max"],
                       "p50_ns": lat["p50"], "p99_ns": lat["p99"], "count": lat["count"],
                       "bin_ns": lat["histogram"]["bin_ns"], "counts": list(lat["histogram"]["counts"]),
                       "time_ns": c.time_ns, "tbs_per_peer_best": c.tbs_per_peer,
                       "tbs_per_peer_times_ns": c.times_json()})
    return {"panels": panels}


def _utilisation(result: Mapping[str, Any]) -> float:
    """Scale-up bandwidth utilisation: the mean over every GPU's I/O ports of the fraction of
    the run their egress link was busy."""
    ports = result.get("io_ports") or []
    return sum(float(p["egress_utilization"]) for p in ports) / len(ports) if ports else 0.0


def figure_data(name: str, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The numbers figure ``name`` shows, from sweep result records (``load_results``)."""
    _check_name(name)
    data: dict[str, Any] = {"figure": name, "points": len(records),
                            "topologies": sorted({r["point"].get("topology") or DEFAULT_TOPOLOGY
                                                  for r in records})}
    # what each topology calls itself (its file's name = ...), which titles show: a file is
    # recorded by its file name, which need not be the chip's name
    data["topology_names"] = {t: _topology_name(t, records) for t in data["topologies"]}
    # points whose plan an executor would not run at their size (results before nuna recorded
    # it have no flag and are not counted); the key appears only when there are any
    unselectable = sum(1 for r in records if r["result"].get("msccl_selectable") is False)
    if unselectable:
        data["msccl_unselectable_points"] = unselectable
    if name == "fig10":
        data.update(_fig10(records))
        return data
    pairs = _rows(records, best_tbs=name != _TBS_SERIES_FIGURE)
    rows = [row for row, _ in pairs]
    if name == "fig12":
        for row, choice in pairs:
            row["utilisation"] = _utilisation(choice.record["result"])
    if name == "fig14":
        alone = {row["config"]: row["time_ns"] for row in rows if not row["gemm_bytes"]}
        ua_alone = alone.get(_BASELINE)
        for row in rows:
            row["relative_time"] = row["time_ns"] / ua_alone if ua_alone else None
    data["rows"] = rows
    data["coarse_packet_bytes"] = COARSE_PACKET_BYTES
    data["coarse_rows"] = sum(1 for row in rows if _coarse(row))
    if name in _CEILING_FIGURES:
        data["ceilings"] = _ceilings(records, pairs)
    return data


def _topology_name(recorded: str, records: Sequence[Mapping[str, Any]]) -> str:
    """The name the results of topology ``recorded`` (as points record it) give their chip,
    else the file's stem (results of a nuna that did not record it)."""
    for r in records:
        if (r["point"].get("topology") or DEFAULT_TOPOLOGY) == recorded and r["result"].get("topology"):
            return str(r["result"]["topology"])
    return Path(recorded).stem if is_topology_path(recorded) else recorded


def _coarse(row: Mapping[str, Any]) -> bool:
    """Whether a row's time or speedup comes from a replay with coarse packets
    (:data:`nuna.sim.result.COARSE_PACKET_BYTES`): their error differs by configuration, so a
    speedup inherits it from either side."""
    sizes = (row.get("packet_bytes"), row.get("baseline_packet_bytes"))
    return any(b is not None and b > COARSE_PACKET_BYTES for b in sizes)


# --------------------------------------------------------------------------------------------
# numbers -> pictures

_COARSE_HATCH = "////"


def _coarse_handles(rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    """A legend entry for the hatched bars, when any of ``rows`` (the figure's) has one."""
    from matplotlib.patches import Patch

    if not any(_coarse(r) for r in rows):
        return []
    return [Patch(facecolor="white", edgecolor="black", linewidth=0.3, hatch=_COARSE_HATCH,
                  label=f"packets > {format_size(COARSE_PACKET_BYTES)} (approximate)")]


def _speedup_bars(ax: Axes, rows: Sequence[Mapping[str, Any]], groups: Sequence[Any], group_of: Callable[
        [Mapping[str, Any]], Any], configs: Sequence[str], labels: Sequence[str],
                  top: float | None = None) -> None:
    """Grouped bars: one group per entry of ``groups``, one bar per configuration. The y axis
    fits ``top`` (default: the tallest bar of ``rows``): axes that share their y axis must all
    pass the highest bar or mark of every panel, or the last one drawn would clip the others."""
    width = 0.8 / max(1, len(configs))
    for c, config in enumerate(configs):
        xs, ys, hatches = [], [], []
        for g, group in enumerate(groups):
            for row in rows:
                if row["config"] == config and group_of(row) == group and row["speedup"] is not None:
                    xs.append(g - 0.4 + width * (c + 0.5))
                    ys.append(row["speedup"])
                    hatches.append(_COARSE_HATCH if _coarse(row) else None)
        ax.bar(xs, ys, width=width, label=config, color=_COLOURS.get(config, "#999999"), edgecolor="black",
               linewidth=0.3, hatch=hatches)
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle="--")
    ax.set_xticks(range(len(groups)), list(labels))
    if top is None:
        top = max((r["speedup"] for r in rows if r["speedup"] is not None), default=1.0)
    ax.set_ylim(0.0, 1.35 * max(1.0, top))  # room above the highest for the legend


def _draw_ceilings(ax: Axes, ceilings: Sequence[Mapping[str, Any]], groups: Sequence[Any],
                   group_of: Callable[[Mapping[str, Any]], Any]) -> None:
    """A dotted line over each group at the most any configuration can gain there."""
    labelled = False
    for g, group in enumerate(groups):
        for c in ceilings:
            if group_of(c) == group:
                # matplotlib leaves labels that start with "_" out of the legend
                ax.hlines(c["max_speedup"], g - 0.45, g + 0.45, colors="black", linestyles=":", linewidth=1.0,
                          label="_ceiling" if labelled else "no placement beats (floor)")
                labelled = True


def _top(data: Mapping[str, Any]) -> float:
    """The highest bar or ceiling of a speedup figure: what its shared y axis must fit."""
    return max([r["speedup"] for r in data["rows"] if r["speedup"] is not None]
               + [c["max_speedup"] for c in data.get("ceilings", ())], default=1.0)


def _ordered(values: Any) -> list[Any]:
    return sorted(set(values), key=lambda v: (v is None, v))


def _configs(rows: Sequence[Mapping[str, Any]], exclude_baseline: bool = True) -> list[str]:
    order = list(_COLOURS)
    found = {r["config"] for r in rows if not (exclude_baseline and r["config"] == _BASELINE)}
    return sorted(found, key=lambda c: order.index(c) if c in order else len(order))


def _best_of_note(rows: Sequence[Mapping[str, Any]]) -> str:
    """A second title line naming the threadblock counts searched, when there was more than one;
    per range of sizes when the sizes had different searches (``[[grid.also]]``)."""
    searched: dict[int, set[int]] = {}
    for r in rows:
        searched.setdefault(r["size_bytes"], set()).update(
            m["tbs_per_peer"] for m in r.get("tbs_per_peer_times_ns", ()))
    if len(set().union(*searched.values())) < 2:
        return ""
    # consecutive sizes with the same counts form one range
    spans: list[tuple[list[int], tuple[int, ...]]] = []
    for size in sorted(searched):
        counts = tuple(sorted(searched[size]))
        if spans and spans[-1][1] == counts:
            spans[-1][0].append(size)
        else:
            spans.append(([size], counts))
    if len(spans) == 1:
        listed = ", ".join(map(str, spans[0][1]))
        return f"\neach configuration at its fastest of {listed} threadblocks per peer"
    parts = []
    for sizes, counts in spans:
        where = format_size(sizes[0])
        if len(sizes) > 1:
            where += f"-{format_size(sizes[-1])}"
        parts.append(f"{', '.join(map(str, counts))} at {where}")
    return "\neach configuration at its fastest number of threadblocks per peer: " + "; ".join(parts)


def _legend(ax: Any, extra: Sequence[Any] = (), **options: Any) -> None:
    """A legend, if anything drawn has a label (a partial grid may leave nothing but the
    baseline, which speedup panels do not draw), followed by the ``extra`` handles. Bars are
    keyed by their colour alone: a hatch on the first bar of a series is the coarse-packet mark,
    which has its own entry."""
    from matplotlib.container import BarContainer
    from matplotlib.patches import Patch

    handles, labels = ax.get_legend_handles_labels()
    if labels:
        keys = [Patch(facecolor=h.patches[0].get_facecolor(), edgecolor="black", linewidth=0.3)
                if isinstance(h, BarContainer) and h.patches else h for h in handles]
        ax.legend(keys + list(extra), labels + [h.get_label() for h in extra], **options)


def _render_fig9(fig: Figure, data: Mapping[str, Any]) -> None:
    rows = data["rows"]
    colls = _ordered(r["collective"] for r in rows)
    gpus = _ordered(r["gpus"] for r in rows)
    sizes = _ordered(r["size_bytes"] for r in rows)
    configs = _configs(rows)
    axes = fig.subplots(max(1, len(colls)), max(1, len(gpus)), squeeze=False, sharey=True)
    for i, coll in enumerate(colls):
        for j, n in enumerate(gpus):
            ax = axes[i][j]
            sub = [r for r in rows if r["collective"] == coll and r["gpus"] == n]
            _speedup_bars(ax, sub, sizes, lambda r: r["size_bytes"], configs, [format_size(s) for s in sizes],
                          top=_top(data))
            here = [c for c in data.get("ceilings", ()) if c["collective"] == coll and c["gpus"] == n]
            _draw_ceilings(ax, here, sizes, lambda r: r["size_bytes"])
            ax.set_title(f"{coll}, {n} GPUs", fontsize=8)
            ax.tick_params(labelsize=6)
            if j == 0:
                ax.set_ylabel("speedup over UA")
    _legend(axes[0][0], _coarse_handles(rows), fontsize=6, loc="upper right")
    fig.suptitle("Fig 9: speedup over UA across pod and collective sizes" + _best_of_note(rows))


def _render_fig10(fig: Figure, data: Mapping[str, Any]) -> None:
    panels = data["panels"]
    axes = fig.subplots(1, max(1, len(panels)), squeeze=False, sharex=True)[0]
    for ax, panel, letter in zip(axes, panels, "abcdefgh", strict=False):
        counts = panel["counts"]
        # trim trailing empty bins and merge into about 60 visible bars
        last = max((k for k, v in enumerate(counts) if v), default=0) + 1
        merge = max(1, math.ceil(last / 60))
        bins = [sum(counts[k:k + merge]) for k in range(0, last, merge)]
        total = sum(bins) or 1
        width = panel["bin_ns"] * merge
        ax.bar([k * width for k in range(len(bins))], [b / total for b in bins], width=width, align="edge",
               color=_COLOURS.get(panel["config"], "#999999"), edgecolor="black", linewidth=0.2)
        ax.axvline(panel["mean_ns"], color="red", linestyle="--", linewidth=1,
                   label=f"mean {panel['mean_ns']:.0f} ns")
        ax.axvline(panel["max_ns"], color="black", linestyle=":", linewidth=1,
                   label=f"max {panel['max_ns']:.0f} ns")
        title = f"({letter}) {panel['config']}"
        measured = [m["tbs_per_peer"] for m in panel.get("tbs_per_peer_times_ns", ())]
        if len(measured) > 1:
            title += (f", {panel['tbs_per_peer_best']} threadblocks per peer"
                      f" (fastest of {', '.join(map(str, measured))})")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("remote store latency (ns)")
        ax.set_ylabel("fraction of stores")
        _legend(ax, fontsize=7)
    if panels:
        fig.suptitle(f"Fig 10: remote-store latency, {panels[0]['gpus']} GPUs, "
                     f"{format_size(panels[0]['size_bytes'])} allgather")


def _render_fig11(fig: Figure, data: Mapping[str, Any]) -> None:
    rows = data["rows"]
    sizes = _ordered(r["size_bytes"] for r in rows)
    configs = _configs(rows, exclude_baseline=False)
    ax = fig.subplots()
    _speedup_bars(ax, rows, sizes, lambda r: r["size_bytes"], configs, [format_size(s) for s in sizes],
                  top=_top(data))
    _draw_ceilings(ax, data.get("ceilings", ()), sizes, lambda r: r["size_bytes"])
    ax.set_ylabel("speedup over UA")
    ax.set_xlabel("allgather size")
    _legend(ax, _coarse_handles(rows), fontsize=7, ncol=4)
    fig.suptitle("Fig 11: isolation of techniques" + _best_of_note(rows))


def _render_fig12(fig: Figure, data: Mapping[str, Any]) -> None:
    rows = [r for r in data["rows"] if r["config"] != _BASELINE]
    sizes = _ordered(r["size_bytes"] for r in rows)
    ax = fig.subplots()
    speed = [next((r["speedup"] for r in rows if r["size_bytes"] == s), None) for s in sizes]
    util = [next((r["utilisation"] for r in rows if r["size_bytes"] == s), None) for s in sizes]
    xs = list(range(len(sizes)))
    ax.bar(xs, [v if v is not None else 0.0 for v in speed], color=_COLOURS["NAP+NAR"],
           label="NAP+NAR speedup", edgecolor="black", linewidth=0.3)
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle="--")
    ax.set_xticks(xs, [format_size(s) for s in sizes])
    ax.set_ylabel("speedup over UA")
    ax.set_xlabel("allgather size")
    twin = ax.twinx()
    twin.plot(xs, [100.0 * (u or 0.0) for u in util], color="red", marker="o", label="scale-up utilisation")
    twin.set_ylabel("scale-up bandwidth utilisation (%)")
    twin.set_ylim(0, 100)
    handles = ax.get_legend_handles_labels()
    thandles = twin.get_legend_handles_labels()
    ax.legend(handles[0] + thandles[0], handles[1] + thandles[1], fontsize=7, loc="upper center")
    fig.suptitle("Fig 12: NAP+NAR vs size, 2-GPU allgather" + _best_of_note(data["rows"]))


def _render_fig13(fig: Figure, data: Mapping[str, Any]) -> None:
    """One panel per topology (how the hardware picks a NAR domain is a topology setting)."""
    rows = [r for r in data["rows"] if r["config"] != _BASELINE]
    grans = _ordered(r["nar_granularity"] for r in rows)
    tbs = sorted({r["tbs_per_peer"] for r in rows}, reverse=True)
    topologies = _ordered(r["topology"] for r in rows) or [None]
    axes = fig.subplots(1, len(topologies), squeeze=False, sharey=True)[0]
    width = 0.8 / max(1, len(tbs))
    palette = ("#3182bd", "#fd8d3c", "#74c476", "#9e9ac8")
    for ax, topology in zip(axes, topologies, strict=True):
        for t, k in enumerate(tbs):
            xs, ys = [], []
            for g, gran in enumerate(grans):
                for r in rows:
                    if (r["topology"] == topology and r["tbs_per_peer"] == k and r["nar_granularity"] == gran
                            and r["speedup"] is not None):
                        xs.append(g - 0.4 + width * (t + 0.5))
                        ys.append(r["speedup"])
            per_gpu = k * (max((r["gpus"] for r in rows), default=2) - 1)
            # points of plan files ([grid] plans) have their plans' own threadblocks, no count per peer
            label = (f"{per_gpu} threadblocks per GPU ({k} per peer)" if k != PLAN_TBS_PER_PEER
                     else "the plan files' threadblocks")
            ax.bar(xs, ys, width=width, color=palette[t % len(palette)], edgecolor="black", linewidth=0.3,
                   label=label)
        ax.axhline(1.0, color="black", linewidth=0.6, linestyle="--")
        ax.set_xticks(range(len(grans)), [str(g) for g in grans])
        ax.set_xlabel("NAR granularity (number of NAR domains)")
        if topology is not None and len(topologies) > 1:
            ax.set_title(_shown_topology(data, str(topology)), fontsize=8)
        _legend(ax, fontsize=7)
    axes[0].set_ylabel("UA+NAR speedup over UA")
    # headroom above the tallest bar for the legends (the panels share the axis)
    tallest = max((r["speedup"] for r in rows if r["speedup"] is not None), default=1.0)
    axes[0].set_ylim(0.0, 1.35 * max(1.0, tallest))
    fig.suptitle("Fig 13: sensitivity to NAR granularity")


def _render_fig14(fig: Figure, data: Mapping[str, Any]) -> None:
    rows = data["rows"]
    gemms = _ordered(r["gemm_bytes"] for r in rows)
    ax = fig.subplots()
    for config in _configs(rows, exclude_baseline=False):
        pts = sorted((r["gemm_bytes"], r["relative_time"]) for r in rows
                     if r["config"] == config and r["relative_time"] is not None)
        ax.plot([gemms.index(g) for g, _ in pts], [v for _, v in pts], marker="o", label=config,
                color=_COLOURS.get(config, "#999999"))
    ax.set_xticks(range(len(gemms)), ["none" if g == 0 else format_size(g) for g in gemms])
    ax.set_xlabel("GEMM matrix size (100 tiles per GPU)")
    ax.set_ylabel("allgather time relative to UA alone")
    _legend(ax, fontsize=7)
    fig.suptitle("Fig 14: allgather beside a concurrent GEMM" + _best_of_note(rows))


_RENDERERS: dict[str, tuple[Callable[[Figure, Mapping[str, Any]], None], tuple[float, float]]] = {
    "fig9": (_render_fig9, (16.0, 8.0)),
    "fig10": (_render_fig10, (9.0, 3.5)),
    "fig11": (_render_fig11, (7.0, 3.5)),
    "fig12": (_render_fig12, (6.0, 3.5)),
    "fig13": (_render_fig13, (10.0, 3.5)),
    "fig14": (_render_fig14, (6.0, 3.5)),
}


def _shown_topology(data: Mapping[str, Any], recorded: str) -> str:
    """How a figure names topology ``recorded``: by the chip's own name (figure data written
    before ``topology_names`` existed have none: the file's stem)."""
    name = data.get("topology_names", {}).get(recorded)
    return str(name) if name else (Path(recorded).stem if is_topology_path(recorded) else recorded)


def render(name: str, data: Mapping[str, Any]) -> Figure:
    """Figure ``name`` drawn from :func:`figure_data`'s numbers (no pyplot: no global figure)."""
    from matplotlib.figure import Figure

    draw, size = _RENDERERS[_check_name(name)]
    fig = Figure(figsize=size, layout="constrained")
    draw(fig, data)
    machines = data.get("topologies", [])
    if len(machines) == 1 and machines[0] != DEFAULT_TOPOLOGY and fig.get_suptitle():
        # a figure of another machine says so (figures with a panel per topology title them)
        fig.suptitle(f"{fig.get_suptitle()}\non {_shown_topology(data, machines[0])}")
    return fig


def save_figure(fig: Figure, stem: str | Path) -> tuple[Path, Path]:
    """Write ``stem.png`` and ``stem.svg`` atomically, with fixed metadata (no dates, no
    version strings, a fixed SVG hash salt) so that the same figure gives the same bytes."""
    import matplotlib

    stem = Path(stem)
    paths = (stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".svg"))
    metadata: dict[str, dict[str, Any]] = {"png": {"Software": None},
                                           "svg": {"Date": None, "Creator": None}}
    with matplotlib.rc_context(_SAVE_RC):
        for path, fmt in zip(paths, ("png", "svg"), strict=True):
            buffer = io.BytesIO()
            fig.savefig(buffer, format=fmt, dpi=150, metadata=metadata[fmt])
            write_atomic(path, buffer.getvalue())
    return paths
