"""Pictures of a topology (matplotlib, no pyplot global state): the chip floorplan with dies,
mesh, CUs, I/O ports and HBM stacks; optionally the Clos pod, NAR domain colours and a
per-link value overlay; and the Fig 4 characterization violins.

Figures are built on ``matplotlib.figure.Figure`` directly and saved with fixed metadata and
SVG hash salt, so the same inputs give the same bytes. Every element carries an SVG ``id``
(``die-G-D``, ``ioport-G-K``, ``hbm-G-S``, ``switch-K``, ``cus-G``, ``mesh-G``, ``legend``;
under an overlay also ``cu-links-G`` and ``overlay-colorbar``) so that tools and tests can find
them.

``edge_values`` (a mapping from ``(u, v)`` node pairs to numbers, e.g. link utilisation from a
simulation result) shades mesh links, die crossings and the CU, I/O-port and HBM attachments
with a colour scale from 0 to the largest value drawn; a link drawn once takes the larger value
of its two directions. :func:`link_overlay` turns the ``chip_links`` table of a
``nuna simulate --json`` result (an already parsed dict: this layer does not import the
simulator) into such a mapping.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from nuna.errors import InputError, TopologyError, UsageError
from nuna.topology.address import nar_domain_cus, nar_domain_ports, nar_domain_stacks
from nuna.topology.build import local_node
from nuna.topology.geometry import MAX_GPUS, chip_geometry, port_positions, stack_positions
from nuna.topology.latency import AtomicCharacterization
from nuna.topology.nodes import Cu, Hbm, IoPort, Node, Router, Switch
from nuna.topology.spec import TopologySpec
from nuna.units import format_size

if TYPE_CHECKING:  # matplotlib costs ~1 s to import: the drawing functions load it on first use
    import matplotlib as mpl
    from matplotlib.axes import Axes
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure

FORMATS = ("svg", "png", "pdf")
MAX_RENDER_GPUS = 16
#: What an overlay shades, each a column of a ``chip_links`` row: the link's utilisation as mean or
#: max over the GPUs, or its heads' mean wait per packet (ns, over the GPUs): a hot spot.
_OVERLAY_COLUMNS = {"mean": "utilization_mean", "max": "utilization_max", "queueing": "queueing_ns_mean"}
OVERLAY_STATS = tuple(_OVERLAY_COLUMNS)

_DIE = "#f6e7a8"  # compute dies: yellow, as the paper's Figs 3 and 8
_DIE_EDGE = "#b59a2c"
_DIE_UNDER_OVERLAY = "#ececec"  # neutral, so that the colour map's pale end stays visible
_PORT = "#3a9d4a"  # I/O ports: green
_HBM = "#8e5fb5"  # HBM stacks: purple
_ROUTER = "#555555"
_CU = "#1f5fa8"
_LINK = "#9a9a9a"
_CROSS = "#d0542c"
_SWITCH = "#404a5a"
_CMAP = "inferno_r"
_UNIT_IN = 0.42  # inches per router pitch


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _domain_colours(count: int) -> list[tuple[float, float, float, float]]:
    import matplotlib as mpl

    cmap = mpl.colormaps["tab20" if count > 10 else "tab10"]
    return [cmap(i % cmap.N) for i in range(count)]


def _cus_drawn(cus_per_router: int) -> bool:
    """CUs are drawn one by one (else one marker per router stands for them)."""
    return cus_per_router <= 64


def _overlay_norm(
    spec: TopologySpec, edge_values: Mapping[tuple[Node, Node], float] | None
) -> mpl.colors.Normalize | None:
    """Colour scale of an overlay, from 0 to the largest value drawn: switch cables never are,
    CU links only when CUs are; ``None`` without anything to shade."""
    import matplotlib as mpl

    cus = _cus_drawn(spec.chip.cus_per_router)
    shown = [v for (a, b), v in (edge_values or {}).items()
             if not isinstance(a, Switch) and not isinstance(b, Switch)
             and (cus or not (isinstance(a, Cu) or isinstance(b, Cu)))]
    if not shown:
        return None
    values = np.array(shown, dtype=float)
    return mpl.colors.Normalize(vmin=float(min(0.0, values.min())), vmax=float(values.max()) or 1.0)


class _ChipPainter:
    """Draws GPU copies of one chip on an axes; router (x, y) of GPU at offset (ox, oy) sits at
    (ox + x, oy + y)."""

    def __init__(
        self,
        ax: Axes,
        spec: TopologySpec,
        nar: int | None,
        edge_values: Mapping[tuple[Node, Node], float] | None,
    ) -> None:
        self.ax = ax
        self.spec = spec
        self.chip = spec.chip
        self.geo = chip_geometry(spec.chip)
        self.nar = nar
        self.edge_values = edge_values
        self.port_colour: list[object] = [_PORT] * self.chip.io_ports
        self.stack_colour: list[object] = [_HBM] * self.chip.hbm_stacks
        self.cu_colour: list[object] = [_CU] * self.chip.cus
        if nar is not None:
            colours = _domain_colours(nar)
            for d, ports in enumerate(nar_domain_ports(spec, nar)):
                for k in ports:
                    self.port_colour[k] = colours[d]
            for d, stacks in enumerate(nar_domain_stacks(spec, nar)):
                for s in stacks:
                    self.stack_colour[s] = colours[d]
            for d, cus in enumerate(nar_domain_cus(spec, nar)):
                for c in cus:
                    self.cu_colour[c] = colours[d]
        self.norm = _overlay_norm(spec, edge_values)

    @property
    def cus_drawn(self) -> bool:
        return _cus_drawn(self.chip.cus_per_router)

    def link_value(self, a: Node, b: Node) -> float:
        values = self.edge_values or {}
        return max(values.get((a, b), 0.0), values.get((b, a), 0.0))

    def attach_style(self, a: Node, b: Node, colour: str) -> tuple[str | tuple[float, ...], float]:
        """Colour and width of an attachment (router to port or stack): shaded under an overlay."""
        import matplotlib as mpl

        if self.norm is None:
            return colour, 1.0
        return tuple(mpl.colormaps[_CMAP](self.norm(self.link_value(a, b)))), 2.0

    def port_xy(self, gpu_origin: tuple[float, float], port: int) -> tuple[float, float]:
        x, y = port_positions(self.chip)[port]
        ox, oy = gpu_origin
        return (ox - 1.75 if x == 0 else ox + self.chip.cols - 0.25, oy + y - 0.4)

    def draw(self, gpu: int, origin: tuple[float, float]) -> None:
        from matplotlib.patches import Rectangle

        ax, chip, geo = self.ax, self.chip, self.geo
        ox, oy = origin
        for dy in range(chip.dies_y):
            for dx in range(chip.dies_x):
                die = Rectangle(
                    (ox + dx * chip.die_cols - 0.45, oy + dy * chip.die_rows - 0.45),
                    chip.die_cols - 0.1,
                    chip.die_rows - 0.1,
                    facecolor=_DIE if self.norm is None else _DIE_UNDER_OVERLAY,
                    edgecolor=_DIE_EDGE,
                    linewidth=1.2,
                    zorder=1,
                )
                die.set_gid(f"die-{gpu}-{dy * chip.dies_x + dx}")
                ax.add_patch(die)
        self.draw_links(gpu, origin)
        xy = geo.router_xy.astype(float) + np.array([ox, oy])
        routers = ax.scatter(xy[:, 0], xy[:, 1], s=28, marker="s", color=_ROUTER, zorder=3)
        routers.set_gid(f"routers-{gpu}")
        self.draw_cus(gpu, xy)
        for k, (x, y) in enumerate(port_positions(chip)):
            px, py = self.port_xy(origin, k)
            colour, width = self.attach_style(Router(gpu, x, y), IoPort(gpu, k), _PORT)
            ax.plot([ox + x, px + 0.5], [oy + y, py + 0.4], color=colour, linewidth=width, zorder=2)
            port = Rectangle(
                (px, py), 1.0, 0.8, facecolor=self.port_colour[k], edgecolor="black", linewidth=0.6, zorder=4
            )
            port.set_gid(f"ioport-{gpu}-{k}")
            ax.add_patch(port)
            ax.text(
                px + 0.5, py + 0.4, f"P{k}", ha="center", va="center", fontsize=5.5, color="white", zorder=5
            )
        for s, (x, y) in enumerate(stack_positions(chip)):
            top = s < chip.stacks_top
            sy = oy + (chip.rows - 0.35 if top else -1.25)
            colour, width = self.attach_style(Router(gpu, x, y), Hbm(gpu, s), _HBM)
            ax.plot([ox + x, ox + x], [oy + y, sy + (0 if top else 0.6)], color=colour, linewidth=width,
                    zorder=2)
            stack = Rectangle(
                (ox + x - 0.8, sy),
                1.6,
                0.6,
                facecolor=self.stack_colour[s],
                edgecolor="black",
                linewidth=0.6,
                zorder=4,
            )
            stack.set_gid(f"hbm-{gpu}-{s}")
            ax.add_patch(stack)
            ax.text(
                ox + x, sy + 0.3, f"H{s}", ha="center", va="center", fontsize=5.5, color="white", zorder=5
            )
        ax.text(
            ox - 2.0,
            oy + chip.rows / 2 - 0.5,
            f"GPU {gpu}",
            rotation=90,
            ha="right",
            va="center",
            fontsize=8,
            fontweight="bold",
        )

    def draw_links(self, gpu: int, origin: tuple[float, float]) -> None:
        from matplotlib.collections import LineCollection

        geo = self.geo
        ox, oy = origin
        segments: dict[bool, list[list[tuple[float, float]]]] = {False: [], True: []}
        shades: dict[bool, list[float]] = {False: [], True: []}
        for r in range(geo.router_xy.shape[0]):
            for d in (0, 2):  # each undirected link once, from its lower end
                e = int(geo.router_out_edge[r, d])
                if e < 0:
                    continue
                q = int(geo.edge_dst[e])
                crossing = bool(geo.router_die[r] != geo.router_die[q])
                (x0, y0), (x1, y1) = geo.router_xy[r], geo.router_xy[q]
                segments[crossing].append([(ox + x0, oy + y0), (ox + x1, oy + y1)])
                if self.edge_values is not None:
                    a, b = Router(gpu, int(x0), int(y0)), Router(gpu, int(x1), int(y1))
                    shades[crossing].append(
                        max(self.edge_values.get((a, b), 0.0), self.edge_values.get((b, a), 0.0))
                    )
        for crossing, segs in segments.items():
            if not segs:
                continue
            lines = LineCollection(segs, linewidths=2.2 if crossing else 1.2, zorder=2)
            if self.norm is None:
                lines.set_color(_CROSS if crossing else _LINK)
            else:  # a fixed colour would win over the colour map
                lines.set_array(np.array(shades[crossing]))
                lines.set_cmap(_CMAP)
                lines.set_norm(self.norm)
            lines.set_gid(f"{'die-crossings' if crossing else 'mesh'}-{gpu}")
            self.ax.add_collection(lines)

    def draw_cus(self, gpu: int, router_xy: np.ndarray) -> None:
        from matplotlib.collections import LineCollection

        chip, geo = self.chip, self.geo
        per = chip.cus_per_router
        if not self.cus_drawn:  # too many to draw one by one: one marker per router stands for its CUs
            offsets = np.zeros((1, 2))
        else:
            angle = 2 * np.pi * np.arange(per) / per + np.pi / 2
            offsets = 0.3 * np.stack([np.cos(angle), np.sin(angle)], axis=1)
        local = np.arange(chip.cus) % per
        shown = local < offsets.shape[0]
        pts = router_xy[geo.cu_router[shown]] + offsets[local[shown]]
        if self.norm is not None and self.cus_drawn:
            base = router_xy[geo.cu_router]
            xy = geo.router_xy[geo.cu_router]
            links = LineCollection(list(np.stack([base, pts], axis=1)), linewidths=1.4, zorder=2.5)
            links.set_array(np.array([self.link_value(Cu(gpu, c), Router(gpu, int(x), int(y)))
                                      for c, (x, y) in enumerate(xy.tolist())]))
            links.set_cmap(_CMAP)
            links.set_norm(self.norm)
            links.set_gid(f"cu-links-{gpu}")
            self.ax.add_collection(links)
        colours = [c for c, keep in zip(self.cu_colour, shown, strict=True) if keep]
        cus = self.ax.scatter(pts[:, 0], pts[:, 1], s=5, color=colours, zorder=3, linewidths=0)
        cus.set_gid(f"cus-{gpu}")


def topology_figure(
    spec: TopologySpec,
    *,
    ngpus: int = 1,
    nar: int | None = None,
    edge_values: Mapping[tuple[Node, Node], float] | None = None,
    value_label: str = "link value",
    note: str | None = None,
) -> Figure:
    """The floorplan of ``spec`` (``ngpus`` > 1 adds the pod: GPUs stacked, switch planes of
    left-edge ports on the left and of right-edge ports on the right). ``value_label`` names
    the colour bar of ``edge_values``; ``note`` is appended to the title (e.g. what the overlay
    comes from)."""
    import matplotlib as mpl
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if not 1 <= ngpus <= min(MAX_RENDER_GPUS, MAX_GPUS):
        raise TopologyError(f"can render 1 to {MAX_RENDER_GPUS} GPUs, got {ngpus}")
    chip = spec.chip
    if nar is not None:
        nar_domain_ports(spec, nar)  # validates the granularity
    pitch_y = chip.rows + 3.2
    switch_gap = 3.0 if ngpus > 1 else 0.0
    xlim = (-2.9 - switch_gap, chip.cols + 1.0 + switch_gap)
    ylim = (-1.6, (ngpus - 1) * pitch_y + chip.rows + 0.6)
    # Size the figure to the drawing (equal aspect) plus fixed bands for the title and legend,
    # so that no blank letterbox appears around the chip.
    axes_w_in = (xlim[1] - xlim[0]) * _UNIT_IN
    axes_h_in = (ylim[1] - ylim[0]) * _UNIT_IN
    top_in, bottom_in = (0.6 if note else 0.45), 0.55
    bar_in = 0.0 if _overlay_norm(spec, edge_values) is None else 0.9  # a band for the colour bar
    fig_w_in = axes_w_in + 0.2 + bar_in
    fig_h_in = axes_h_in + top_in + bottom_in
    fig = Figure(figsize=(fig_w_in, fig_h_in))
    ax = fig.add_axes((0.1 / fig_w_in, bottom_in / fig_h_in, axes_w_in / fig_w_in, axes_h_in / fig_h_in))
    painter = _ChipPainter(ax, spec, nar, edge_values)
    origins = [(0.0, (ngpus - 1 - g) * pitch_y) for g in range(ngpus)]
    for g, origin in enumerate(origins):
        painter.draw(g, origin)
    if ngpus > 1:
        _draw_switches(ax, painter, origins, switch_gap)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    title = (
        f"{spec.name}: {_count(chip.dies, 'die')}, {chip.cols}x{chip.rows} mesh, {_count(chip.cus, 'CU')}, "
        f"{_count(chip.io_ports, 'I/O port')}, {_count(chip.hbm_stacks, 'HBM stack')}"
    )
    if ngpus > 1:
        title += f"; {ngpus} GPUs on {_count(chip.io_ports, 'switch plane')}"
    if nar is not None:
        title += f"; NAR granularity {nar}"
    if note:
        title += f"\n{note}"
    fig.suptitle(title, fontsize=9, y=1.0 - 0.08 / fig_h_in, va="top")
    shaded = mpl.colormaps[_CMAP](0.6)  # links take the colour bar's colours under an overlay
    handles: list[object] = [
        Patch(facecolor=_DIE if painter.norm is None else _DIE_UNDER_OVERLAY, edgecolor=_DIE_EDGE,
              label="compute die"),
        Line2D([], [], marker="s", color=_ROUTER, linestyle="none", markersize=5, label="mesh router"),
        Line2D([], [], color=_LINK if painter.norm is None else shaded, label="mesh link"),
        Line2D([], [], color=_CROSS if painter.norm is None else shaded, linewidth=2.2, label="die crossing"),
        Line2D(
            [],
            [],
            marker="o",
            color=_CU,
            linestyle="none",
            markersize=3,
            label=f"CU ({chip.cus_per_router} per router)",
        ),
        Patch(facecolor=_PORT, edgecolor="black", label="I/O port"),
        Patch(facecolor=_HBM, edgecolor="black", label="HBM stack"),
    ]
    if ngpus > 1:
        handles.append(Patch(facecolor=_SWITCH, edgecolor="black", label="switch plane"))
    if nar is not None:
        for d, colour in enumerate(_domain_colours(nar)):
            handles.append(Patch(facecolor=colour, label=f"NAR domain {d}"))
    legend = fig.legend(
        handles=handles,
        loc="lower center",
        fontsize=6.5,
        frameon=False,
        ncol=min(len(handles), 6),
        bbox_to_anchor=(0.5, 0.0),
    )
    legend.set_gid("legend")
    if painter.norm is not None:
        mappable = mpl.cm.ScalarMappable(norm=painter.norm, cmap=_CMAP)
        bar_h_in = min(axes_h_in, 3.0)
        bar_y_in = bottom_in + (axes_h_in - bar_h_in) / 2
        cax = fig.add_axes(
            ((axes_w_in + 0.25) / fig_w_in, bar_y_in / fig_h_in, 0.12 / fig_w_in, bar_h_in / fig_h_in)
        )
        bar = fig.colorbar(mappable, cax=cax)
        bar.set_label(value_label, fontsize=7)
        cax.set_gid("overlay-colorbar")
    return fig


_NODE_TYPES: dict[str, type] = {t.__name__: t for t in (Router, Cu, IoPort, Hbm, Switch)}
_NODE_RE = re.compile(r"^(\w+)\((.*)\)$")
_FIELD_RE = re.compile(r"^(\w+)=(-?\d+)$")


def parse_node(text: str) -> Node:
    """The node key named ``text``, the ``repr`` of a key (``"Router(gpu=0, x=3, y=1)"``):
    exactly the key's fields, in order. Raises ``InputError`` for anything else."""
    m = _NODE_RE.match(text.strip())
    cls = _NODE_TYPES.get(m.group(1)) if m else None
    if m is None or cls is None:
        raise InputError(f"{text!r} is not a node name (e.g. 'Router(gpu=0, x=3, y=1)')")
    fields = [_FIELD_RE.match(part.strip()) for part in m.group(2).split(",")]
    names = tuple(f.group(1) if f else "" for f in fields)
    if names != cls._fields:  # type: ignore[attr-defined]
        raise InputError(f"{text!r} is not a node name: {cls.__name__} takes "
                         f"{', '.join(cls._fields)}")  # type: ignore[attr-defined]
    node: Node = cls(*(int(f.group(2)) for f in fields if f))
    return node


@dataclass(frozen=True, slots=True)
class LinkOverlay:
    """Per-link values to shade, what they are (``label``, for the colour bar) and where they
    come from (``note``, for the title)."""

    values: Mapping[tuple[Node, Node], float]
    label: str
    note: str


def _real(value: object) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


#: the longest mean wait an overlay shows: 1e18 ns is 31 years of simulated time, beyond any
#: replay; near 1e308 matplotlib's colour bar overflowed (warnings on stderr, a broken scale)
MAX_OVERLAY_WAIT_NS = 1e18


def link_overlay(spec: TopologySpec, result: object, *, stat: str = "mean",
                 source: str = "result") -> LinkOverlay:
    """Link utilisation or queueing of an already parsed ``nuna simulate --json`` result, for
    rendering on ``spec``'s chip: the ``stat`` column (``OVERLAY_STATS``: ``utilization_mean``,
    ``utilization_max`` or ``queueing_ns_mean``) of every row of its ``chip_links`` table, keyed
    by the nodes of GPU 0. ``source`` prefixes error messages.

    Raises ``InputError`` for something that is not such a result (or is malformed),
    ``TopologyError`` for a result of another topology or naming a link ``spec`` lacks."""
    if stat not in OVERLAY_STATS:
        raise UsageError(f"unknown overlay statistic {stat!r} (use {', '.join(OVERLAY_STATS)})")
    if not isinstance(result, dict) or not {"plan", "topology", "ngpus", "time_ns", "links"} <= result.keys():
        raise InputError(f"{source}: not a result of 'nuna simulate --json'")
    if result["topology"] != spec.name:
        raise TopologyError(f"{source}: a result on topology {result['topology']!r}, not {spec.name!r} "
                            "(render that topology; a name 'NAME with KEY=VALUE, ...' is NAME with "
                            "those --set options)")
    rows = result.get("chip_links")
    if rows is None:
        raise InputError(f"{source}: no per-link table ('chip_links'); write the result again with "
                         "this version's 'nuna simulate --json'")
    if not isinstance(rows, list):
        raise InputError(f"{source}: 'chip_links' is not a list")
    geo = chip_geometry(spec.chip)
    edges = {(local_node(geo, 0, int(a)), local_node(geo, 0, int(b)))
             for a, b in zip(geo.edge_src.tolist(), geo.edge_dst.tolist(), strict=True)}
    key = _OVERLAY_COLUMNS[stat]
    if stat == "queueing" and rows and isinstance(rows[0], dict) and key not in rows[0]:
        raise InputError(f"{source}: no per-link waits ('{key}'); write the result again with this "
                         "version's 'nuna simulate --json'")
    values: dict[tuple[Node, Node], float] = {}
    for i, row in enumerate(rows):
        if not (isinstance(row, dict) and isinstance(row.get("src"), str) and isinstance(row.get("dst"), str)
                and _real(row.get(key))):
            raise InputError(f"{source}: chip_links[{i}] is not a link row (src, dst, {key})")
        try:
            link = (parse_node(row["src"]), parse_node(row["dst"]))
        except InputError as err:
            raise InputError(f"{source}: chip_links[{i}]: {err}") from None
        name = f"{link[0]!r} -> {link[1]!r}"
        if link not in edges:
            raise TopologyError(f"{source}: link {name} does not exist on {spec.name} (GPU 0's chip)")
        if link in values:
            raise InputError(f"{source}: link {name} is listed twice")
        value = float(row[key])
        if stat == "queueing":
            if value < 0.0:
                raise InputError(f"{source}: link {name} has a negative wait {value}")
            if value > MAX_OVERLAY_WAIT_NS:
                raise InputError(f"{source}: link {name} has a wait of {value:g} ns, more than any replay "
                                 f"gives (at most {MAX_OVERLAY_WAIT_NS:g} ns)")
            values[link] = value
            continue
        if not 0.0 <= value <= 1.0 + 1e-9:
            raise InputError(f"{source}: link {name} has utilisation {value}, outside [0, 1]")
        values[link] = min(value, 1.0)
    ngpus = result["ngpus"]
    gpus = _count(ngpus, "GPU") if isinstance(ngpus, int) else "GPUs"
    size = result.get("size_bytes")
    note = f"overlay: {result['plan']}"
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        note += f", {format_size(size)}"
    if result.get("config"):
        note += f", {result['config']}"
    label = f"mean wait per packet (ns), over {gpus}" if stat == "queueing" else \
        f"link utilisation, {stat} over {gpus}"
    return LinkOverlay(values, label, note)


def _draw_switches(
    ax: Axes, painter: _ChipPainter, origins: Sequence[tuple[float, float]], gap: float
) -> None:
    from matplotlib.patches import Rectangle

    chip = painter.chip
    left = chip.ports_left
    top = origins[0][1] + chip.rows
    bottom = origins[-1][1] - 1.0
    for k in range(chip.io_ports):
        on_left = k < left
        rank = k if on_left else k - left
        count = left if on_left else chip.io_ports - left
        sy = bottom + (top - bottom) * (rank + 0.5) / count - 0.4
        sx = -2.2 - gap if on_left else chip.cols + 0.2 + gap - 1.0
        for origin in origins:
            px, py = painter.port_xy(origin, k)
            ax.plot(
                [px + (0.0 if on_left else 1.0), sx + (1.0 if on_left else 0.0)],
                [py + 0.4, sy + 0.4],
                color=_SWITCH,
                linewidth=0.4,
                alpha=0.5,
                zorder=0,
            )
        box = Rectangle((sx, sy), 1.0, 0.8, facecolor=_SWITCH, edgecolor="black", linewidth=0.6, zorder=4)
        box.set_gid(f"switch-{k}")
        ax.add_patch(box)
        ax.text(sx + 0.5, sy + 0.4, f"S{k}", ha="center", va="center", fontsize=5.5, color="white", zorder=5)


def characterization_figure(results: Sequence[AtomicCharacterization]) -> Figure:
    """Violins per chip (the paper's Fig 4): all (CU, address) round trips; the CU effect (each
    latency minus its address's mean over CUs, plus the overall mean: the spread across CUs for
    a fixed address); and the address effect (minus its CU's mean over addresses: the spread
    across addresses for a fixed CU). Dashed lines mark the quartiles."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    if not results:
        raise TopologyError("nothing to characterize")
    fig = Figure(figsize=(2.4 + 2.2 * len(results), 3.8))
    ax = fig.add_axes((0.09, 0.2, 0.88, 0.66))
    data: list[np.ndarray] = []
    positions: list[float] = []
    colours = ["#7f7f7f", "#1f5fa8", "#8e5fb5"]
    for i, res in enumerate(results):
        lat = res.latency_ns
        mean = lat.mean()
        cu_effect = lat - lat.mean(axis=0, keepdims=True) + mean
        address_effect = lat - lat.mean(axis=1, keepdims=True) + mean
        for j, series in enumerate((lat.ravel(), cu_effect.ravel(), address_effect.ravel())):
            data.append(series)
            positions.append(i * 4.0 + j)
    parts = ax.violinplot(data, positions=positions, widths=0.9, showextrema=False)
    bodies = cast("list[PolyCollection]", parts["bodies"])
    for n, body in enumerate(bodies):
        body.set_facecolor(colours[n % 3])
        body.set_alpha(0.75)
    for series, x in zip(data, positions, strict=True):
        q = np.percentile(series, [25, 50, 75])
        ax.hlines(q, x - 0.3, x + 0.3, colors="black", linestyles="dashed", linewidth=0.7)
    ax.set_xticks([i * 4.0 + 1 for i in range(len(results))])
    ax.set_xticklabels(
        [
            f"{r.topology}\n({_count(r.dies, 'die')}; std: CUs {r.across_cus_ns:.0f} ns, "
            f"addresses {r.across_addresses_ns:.0f} ns)"
            for r in results
        ],
        fontsize=7,
    )
    ax.set_ylabel("remote atomic round trip (ns)", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    labels = ("all CU x address pairs", "across CUs (address fixed)", "across addresses (CU fixed)")
    ax.legend(
        handles=[Patch(facecolor=c, alpha=0.75, label=lbl) for c, lbl in zip(colours, labels, strict=True)],
        fontsize=7,
        loc="upper left",
        frameon=False,
    )
    fig.suptitle(
        "Uncontended remote atomics from every CU to addresses of a remote GPU (paper Fig 4 on the models)",
        fontsize=9,
    )
    return fig


def figure_bytes(fig: Figure, fmt: str) -> bytes:
    """Encode ``fig`` as ``svg``, ``png`` or ``pdf`` bytes, deterministically: no date and no
    version string (matplotlib's would change the bytes with its version)."""
    import matplotlib as mpl

    if fmt not in FORMATS:
        raise TopologyError(f"unknown picture format {fmt!r} (use {', '.join(FORMATS)})")
    metadata: dict[str, str | None] = {
        "svg": {"Date": None, "Creator": None},
        "png": {"Software": None},
        "pdf": {"CreationDate": None, "Producer": None, "Creator": None},
    }[fmt]  # type: ignore[assignment]
    buffer = io.BytesIO()
    with mpl.rc_context({"svg.hashsalt": "nuna", "svg.fonttype": "none"}):
        fig.savefig(buffer, format=fmt, dpi=160, metadata=metadata, bbox_inches="tight")
    return buffer.getvalue()
