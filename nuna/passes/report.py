"""Side-by-side comparison of configurations on one plan (``nuna diff``) and the demo job
(``nuna demo``): simulate each configuration, collect the figures the paper reports, and say
what the rewrite changed.

Library code: it returns records, text and figure bytes; the CLI prints and writes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from nuna.errors import UsageError
from nuna.passes.base import PassContext
from nuna.passes.configs import Granularity, apply_choice, choose_granularity, get_config
from nuna.passes.nap import finest_granularity
from nuna.passes.nar import check_granularity
from nuna.plan.dag import build_dag, flatten
from nuna.plan.generate import generate
from nuna.plan.ir import Plan
from nuna.plan.verify import size_fit
from nuna.sim.layout import memory_layout, threadblock_cus
from nuna.sim.replay import PacketBytes, SimOptions, simulate
from nuna.sim.result import PortWait, SimResult
from nuna.text import one_line
from nuna.topology.address import nar_domain_cus
from nuna.topology.render import figure_bytes, topology_figure
from nuna.topology.spec import TopologySpec
from nuna.units import format_size


@dataclass(frozen=True, slots=True)
class ConfigRow:
    """One configuration's measurements (times in ns) and what its rewrite changed relative to
    the first configuration of the comparison."""

    config: str
    nar_granularity: int | None
    granularity_method: str
    time_ns: float
    speedup: float
    latency_mean_ns: float
    latency_p99_ns: float
    latency_max_ns: float
    # the mean remote store without waiting (SimResult.remote_store_zero_load_ns; 0: none)
    latency_zero_load_ns: float
    load_hops: float  # each line's first load (a step's first operand)
    load_all_hops: float  # every load of a line: a reduction's second operand, a fused pass's sources
    remote_store_hops: float
    remote_store_sender_hops: float
    remote_store_receiver_hops: float
    wait_cu_ns: float  # mean wait per grant, by where (nuna.sim.network.WAIT_CLASSES)
    wait_mesh_ns: float
    wait_port_ns: float
    wait_switch_ns: float
    wait_port_out_ns: float  # from a receiving I/O port into its mesh
    # the port link whose heads waited longest, SimResult.longest_port_wait (None: no wait)
    longest_port_wait: PortWait | None
    die_crossing_bytes: int
    port_balance: float
    ports_used: int
    tbs_per_domain: tuple[int, ...]
    domains_counted: int
    threadblocks_moved: int
    pages_moved: int
    result: SimResult = dataclasses.field(repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "result"}
        out["tbs_per_domain"] = list(self.tbs_per_domain)
        hot = self.longest_port_wait
        out["longest_port_wait"] = None if hot is None else hot._asdict()
        out["remote_store_latency_ns"] = self.result.to_json()["remote_store_latency_ns"]
        return out


@dataclass(frozen=True, slots=True)
class Comparison:
    """``nuna diff``'s result: the plan, the size and one row per configuration (the first is
    the reference for speedups and changes)."""

    plan: str
    topology: str
    size_bytes: int
    rows: tuple[ConfigRow, ...]
    size_note: str | None = None  # when an executor would not select the plan at this size
    # the replays' packet size and the models they ran with (SimOptions), as nuna diff took them
    packet_bytes: int = 0
    replay: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def placement_floor_ns(self) -> float:
        """What no configuration can beat (``SimResult.placement_floor_ns``; the same for
        every configuration unless one stores without loading first)."""
        return min((r.result.placement_floor_ns for r in self.rows), default=0.0)

    def headroom_taken(self, row: ConfigRow) -> float | None:
        """The share of the first configuration's distance to the placement floor that ``row``
        closes (negative when it is slower); ``None`` when the first is at the floor."""
        floor, first = self.placement_floor_ns, self.rows[0].time_ns
        return (first - row.time_ns) / (first - floor) if first > floor else None

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan, "topology": self.topology, "size_bytes": self.size_bytes,
                "size_note": self.size_note, "packet_bytes": self.packet_bytes, "replay": dict(self.replay),
                "placement_floor_ns": self.placement_floor_ns,
                "reference": self.rows[0].config if self.rows else None,
                "configs": [{**r.to_json(), "headroom_taken": self.headroom_taken(r)} for r in self.rows]}


def _port_balance(result: SimResult) -> tuple[float, int]:
    """max/mean of the egress bytes over all I/O ports of the pod, and how many carried any."""
    eg = result.port_egress_bytes.astype(np.float64)
    mean = float(eg.mean()) if eg.size else 0.0
    return (float(eg.max()) / mean if mean > 0 else 0.0), int((eg > 0).sum())


def _tbs_per_domain(plan: Plan, spec: TopologySpec, cus: np.ndarray, g: int) -> tuple[int, ...]:
    """Threadblocks whose CU is nearest each domain's ports at granularity ``g``."""
    owner = np.zeros(spec.chip.cus, dtype=np.int64)
    for d, members in enumerate(nar_domain_cus(spec, g)):
        owner[list(members)] = d
    return tuple(np.bincount(owner[cus], minlength=g).tolist())


def compare(plan: Plan, spec: TopologySpec, size_bytes: int, configs: Sequence[str],
            nar_granularity: Granularity = None, *, seed: int = 0, packet_bytes: PacketBytes | None = None,
            options: SimOptions | None = None) -> Comparison:
    """Place ``plan`` with each configuration, simulate it and compare (see :class:`ConfigRow`).

    ``nar_granularity`` applies to the ``+NAR`` configurations (``None``: each one's heuristic).
    Threadblocks per NAR domain are counted at the configuration's granularity, or at the
    topology's finest for configurations without NAR. ``packet_bytes`` ``None``: one flit of the
    topology, as :func:`nuna.sim.simulate` takes it; ``options`` as there. Both also go to the
    replays ``nar_granularity="auto"`` picks a granularity with.
    """
    cfgs = [get_config(name) for name in configs]
    if nar_granularity is not None and not any(cfg.nar for cfg in cfgs):
        # it would be ignored: say so rather than run a comparison the user did not ask for
        raise UsageError(f"a NAR granularity ({nar_granularity}) applies to +NAR configurations, "
                         f"and none of {', '.join(cfg.name for cfg in cfgs)} routes with NAR")
    if nar_granularity is not None and nar_granularity != "auto":
        check_granularity(spec, nar_granularity)  # invalid even where no +NAR config is compared first
    ctx = PassContext(spec, size_bytes)
    dag = build_dag(plan)
    flat = flatten(plan)
    rows: list[ConfigRow] = []
    ref_cus: np.ndarray | None = None
    ref_pages: np.ndarray | None = None
    ref_time = 0.0
    for cfg in cfgs:
        choice = choose_granularity(plan, cfg.name, ctx, nar_granularity if cfg.nar else None, seed=seed,
                                    packet_bytes=packet_bytes, options=options)
        placed = apply_choice(plan, cfg.name, ctx, choice)
        result = simulate(placed, spec, size_bytes, seed=seed, packet_bytes=packet_bytes, options=options)
        cus = threadblock_cus(placed, spec, flat)
        pages = memory_layout(placed, spec, size_bytes, flat, dag.match_send).page_stack
        if ref_cus is None or ref_pages is None:
            ref_cus, ref_pages, ref_time = cus, pages, result.time_ns
        balance, used = _port_balance(result)
        g_count = choice.granularity if choice.granularity is not None and choice.granularity > 1 \
            else finest_granularity(spec)
        lat = result.remote_store_latency
        rows.append(ConfigRow(
            config=cfg.name, nar_granularity=choice.granularity, granularity_method=choice.method,
            time_ns=result.time_ns, speedup=ref_time / result.time_ns if result.time_ns > 0 else 0.0,
            latency_mean_ns=lat.mean_ns, latency_p99_ns=lat.p99_ns, latency_max_ns=lat.max_ns,
            latency_zero_load_ns=result.remote_store_zero_load_ns.get("total", 0.0),
            load_hops=result.noc_hops.get("load_mean", 0.0),
            load_all_hops=result.noc_hops.get("load_all_mean", 0.0),
            remote_store_hops=result.noc_hops.get("remote_store_mean", 0.0),
            remote_store_sender_hops=result.noc_hops.get("remote_store_sender_mean", 0.0),
            remote_store_receiver_hops=result.noc_hops.get("remote_store_receiver_mean", 0.0),
            wait_cu_ns=_mean_wait(result, ("cu_to_mesh",)),
            wait_mesh_ns=_mean_wait(result, ("mesh", "die_crossing")),
            wait_port_ns=_mean_wait(result, ("mesh_to_port",)),
            wait_switch_ns=_mean_wait(result, ("switch_to_port",)),
            wait_port_out_ns=_mean_wait(result, ("port_to_mesh",)),
            longest_port_wait=result.longest_port_wait(),
            die_crossing_bytes=result.die_crossing_bytes, port_balance=balance, ports_used=used,
            tbs_per_domain=_tbs_per_domain(plan, spec, cus, g_count), domains_counted=g_count,
            threadblocks_moved=int((cus != ref_cus).sum()), pages_moved=int((pages != ref_pages).sum()),
            result=result,
        ))
    opts = options or SimOptions()
    replay = {name: getattr(opts, name) for name in _REPLAY_MODELS}
    return Comparison(plan.name, spec.name, size_bytes, tuple(rows), size_fit(plan, size_bytes).note(),
                      rows[0].result.packet_bytes if rows else 0, replay)


#: the SimOptions fields a comparison records: which model of the plan its replays ran
_REPLAY_MODELS = ("reduce_fusion", "executor_slices", "protocol_model", "flow_control")


def _mean_wait(result: SimResult, classes: tuple[str, ...]) -> float:
    """Mean time a packet's head waited for an edge of ``classes`` (ns per grant)."""
    q = [result.queueing[c] for c in classes if c in result.queueing]
    grants = sum(v["grants"] for v in q)
    return sum(v["total"] for v in q) / grants if grants else 0.0


_ROWS: tuple[tuple[str, str], ...] = (
    ("NAR granularity", "g"),
    ("time (us)", "time"),
    ("speedup", "speedup"),
    ("remote store mean (ns)", "mean"),
    ("remote store p99 (ns)", "p99"),
    ("remote store max (ns)", "max"),
    ("  mean without waiting", "zero_load"),
    ("NoC hops/flit, load", "load_hops"),
    ("  every load of a line", "load_all_hops"),
    ("NoC hops/flit, remote store", "remote_store_hops"),
    ("  sender: CU -> I/O port", "remote_store_sender_hops"),
    ("  receiver: I/O port -> HBM", "remote_store_receiver_hops"),
    ("queueing per hop (ns): CU issue", "wait_cu"),
    ("  mesh link", "wait_mesh"),
    ("  into I/O port", "wait_port"),
    ("  switch output", "wait_switch"),
    ("  out of I/O port", "wait_port_out"),
    ("longest port wait (ns)", "hot_port"),
    ("die-crossing bytes", "die"),
    ("I/O port max/mean", "balance"),
    ("I/O ports used", "ports"),
    ("threadblocks per domain", "tbs"),
    ("threadblocks moved", "moved"),
    ("pages moved", "pages"),
)


def _cell(row: ConfigRow, key: str) -> str:
    if key == "g":
        return "-" if row.nar_granularity is None else f"{row.nar_granularity} ({row.granularity_method})"
    values: dict[str, str] = {
        "time": f"{row.time_ns / 1000:.3f}", "speedup": f"{row.speedup:.2f}x",
        "mean": f"{row.latency_mean_ns:.0f}", "p99": f"{row.latency_p99_ns:.0f}",
        "max": f"{row.latency_max_ns:.0f}", "zero_load": f"{row.latency_zero_load_ns:.0f}",
        "load_hops": f"{row.load_hops:.1f}", "load_all_hops": f"{row.load_all_hops:.1f}",
        "remote_store_hops": f"{row.remote_store_hops:.1f}", "die": f"{row.die_crossing_bytes:,}",
        "remote_store_sender_hops": f"{row.remote_store_sender_hops:.1f}",
        "remote_store_receiver_hops": f"{row.remote_store_receiver_hops:.1f}",
        "wait_cu": f"{row.wait_cu_ns:.1f}", "wait_mesh": f"{row.wait_mesh_ns:.1f}",
        "wait_port": f"{row.wait_port_ns:.1f}", "wait_switch": f"{row.wait_switch_ns:.1f}",
        "wait_port_out": f"{row.wait_port_out_ns:.1f}", "hot_port": _hot_port(row.longest_port_wait),
        "balance": f"{row.port_balance:.2f}", "ports": str(row.ports_used),
        "tbs": f"{'/'.join(str(n) for n in row.tbs_per_domain)} (G={row.domains_counted})",
        "moved": str(row.threadblocks_moved), "pages": f"{row.pages_moved:,}",
    }
    return values[key]


def _hot_port(hot: PortWait | None) -> str:
    if hot is None:
        return "-"
    return f"{hot.queueing_ns_mean:.1f} (GPU {hot.gpu} port {hot.port}, {hot.link})"


def format_comparison(c: Comparison) -> str:
    """The comparison as an aligned text table, configurations as columns."""
    models = [text for on, text in ((c.replay.get("reduce_fusion") is False, "each re alone"),
                                    (c.replay.get("executor_slices") is True, "executor slices"),
                                    (c.replay.get("protocol_model", "plan") != "plan",
                                     f"protocol model {c.replay.get('protocol_model')}"),
                                    (c.replay.get("flow_control") is False, "no flow control")) if on]
    packets = f", packets of {c.packet_bytes} B" if c.packet_bytes else ""
    head = [f"{one_line(c.plan)} on {one_line(c.topology)}, {format_size(c.size_bytes)}{packets}"
            + "".join(f", {m}" for m in models) + f"; changes relative to {c.rows[0].config}"]
    table = [["", *[r.config for r in c.rows]]] + [[label, *[_cell(r, key) for r in c.rows]]
                                                  for label, key in _ROWS]
    floor = c.placement_floor_ns
    bound = []
    if floor > 0 and c.rows:
        taken = [f"{r.config} {share * 100:.0f}%" for r in c.rows[1:]
                 if (share := c.headroom_taken(r)) is not None]
        bound = [f"placement floor {floor / 1000:.3f} us (best load and store paths, port bandwidth, "
                 f"the plan's steps in order): "
                 f"no configuration can be more than {c.rows[0].time_ns / floor:.2f}x faster than "
                 f"{c.rows[0].config}" + (f"; of that headroom: {', '.join(taken)}" if taken else "")]
    note = [f"note: {c.size_note}"] if c.size_note else []
    if any(r.granularity_method == "heuristic" for r in c.rows):
        # the estimate ignores queueing in the NoC: it can pick a G far from the fastest
        note.append("note: NAR granularities marked (heuristic) are the size-threshold estimate's "
                    "choice (docs/passes.md); -g auto simulates every G and keeps the fastest")
    return "\n".join(head + _aligned(table) + bound + note)


def _aligned(table: list[list[str]]) -> list[str]:
    """Rows of cells as text lines: the first column left-aligned, the others right-aligned."""
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(
        zip(line, widths, strict=True))) for line in table]


# --- the demo -------------------------------------------------------------------------------

DEMO_GPUS = 8
# binary sizes, as the figures use (docs/results.md, Sizes): at every count searched the
# executors would select the plan, and 1 MiB's chunks are whole pages
DEMO_SIZES_BYTES = (100 * 1024, 1024 * 1024)
DEMO_CONFIGS = ("UA", "NAP+NAR")
# the paper compares each configuration at its best threadblock count (paper §5.1), as the
# figures do (scripts/sweeps/fig9.toml): one count would compare a configuration where it loses
DEMO_TBS_PER_PEER = (1, 4, 16)


@dataclass(frozen=True, slots=True)
class CountSearch:
    """Every configuration at every threadblock count of one size, and the full comparison at
    the count where the last configuration (the rewrite being shown) is fastest."""

    label: str  # the collective and pod, e.g. "8-GPU direct allgather"
    size_bytes: int
    counts: tuple[int, ...]
    time_ns: tuple[tuple[float, ...], ...]  # [configuration][count]
    shown_count: int
    detail: Comparison

    @property
    def configs(self) -> tuple[str, ...]:
        """The configurations compared, in the order of ``time_ns`` (the detail's rows)."""
        return tuple(r.config for r in self.detail.rows)

    def best(self, config: int) -> tuple[int, float]:
        """The fastest count of configuration ``config`` (the smallest on a tie) and its time."""
        times = self.time_ns[config]
        i = min(range(len(times)), key=lambda k: (times[k], k))
        return self.counts[i], times[i]

    def speedup(self, config: int) -> float:
        """Best time of the first configuration over the best time of ``config``."""
        return self.best(0)[1] / self.best(config)[1]


def search_counts(collective: str, gpus: int, spec: TopologySpec, size_bytes: int,
                  configs: Sequence[str], counts: Sequence[int], *, seed: int = 0) -> CountSearch:
    """Compare ``configs`` on the direct plan at each threadblock count per peer."""
    if not counts or not configs:
        raise UsageError("a threadblock-count search needs at least one count and one configuration")
    comparisons = [compare(generate(collective, gpus, tbs_per_peer=k), spec, size_bytes, configs,
                           seed=seed) for k in counts]
    times = tuple(tuple(c.rows[i].time_ns for c in comparisons) for i in range(len(configs)))
    last = times[-1]
    shown = min(range(len(counts)), key=lambda k: (last[k], k))
    return CountSearch(f"{gpus}-GPU direct {collective}", size_bytes, tuple(counts), times, counts[shown],
                       comparisons[shown])


def format_search(s: CountSearch) -> str:
    """The search as a table (time per count, each configuration's best and its speedup over
    the first's best), then the full comparison at the count shown."""
    d = s.detail
    table = [["time (us) by threadblocks per peer", *[str(k) for k in s.counts], "best", "speedup"]]
    for i, name in enumerate(s.configs):
        k, t = s.best(i)
        table.append([name, *[f"{x / 1000:.3f}" for x in s.time_ns[i]], f"{t / 1000:.3f} ({k})",
                      f"{s.speedup(i):.2f}x"])
    lines = _aligned(table)
    how = (f"{s.counts[0]} threadblocks per peer" if len(s.counts) == 1 else
           "each configuration at its best threadblock count (paper §5.1)")
    head = [f"{s.label} on {one_line(d.topology)}, {format_size(s.size_bytes)}: {how}"]
    return "\n".join(head + lines + ["", f"in detail at {s.shown_count} per peer, where "
                                         f"{s.configs[-1]} is fastest:", format_comparison(d)])


def latency_figure(c: Comparison) -> Figure:
    """Remote-store latency histograms of each configuration, one panel each (the paper's
    Fig 10), with the mean and maximum marked."""
    fig = Figure(figsize=(4.2 * len(c.rows), 3.2))
    axes = fig.subplots(1, len(c.rows), sharex=True, squeeze=False)[0]
    hi = max(r.latency_max_ns for r in c.rows)
    for ax, row in zip(axes, c.rows, strict=True):
        lat = row.result.remote_store_latency
        counts = np.asarray(lat.histogram, dtype=np.float64)
        width = max(1, round(10.0 / lat.bin_ns))  # 10 ns bars
        n = -(-counts.size // width) * width
        bars = np.pad(counts, (0, n - counts.size)).reshape(-1, width).sum(axis=1)
        edges = np.arange(bars.size) * lat.bin_ns * width
        total = bars.sum()
        ax.bar(edges, bars / total if total else bars, width=lat.bin_ns * width, align="edge",
               color="#1f5fa8")
        ax.axvline(lat.mean_ns, color="#d0542c", linestyle="--", linewidth=1)
        ax.axvline(lat.max_ns, color="#404a5a", linestyle=":", linewidth=1)
        ax.set_title(f"{row.config}: mean {lat.mean_ns:.0f} ns, max {lat.max_ns:.0f} ns", fontsize=9)
        ax.set_xlabel("remote store latency (ns)")
        ax.set_xlim(0, hi * 1.05)
    axes[0].set_ylabel("fraction of 256 B stores")
    fig.suptitle(f"{one_line(c.plan)}, {format_size(c.size_bytes)} ({one_line(c.topology)})", fontsize=10)
    fig.tight_layout()
    return fig


@dataclass(frozen=True, slots=True)
class DemoOutput:
    """What ``nuna demo`` prints and writes: one count search per size, and the files' bytes."""

    searches: tuple[CountSearch, ...]
    files: tuple[tuple[str, bytes], ...]


def run_demo(spec: TopologySpec, *, tbs_per_peer: int | None = None, seed: int = 0) -> DemoOutput:
    """The main job on defaults: an 8-GPU direct allgather at 100 KiB and 1 MiB, UA vs NAP+NAR,
    each at its best threadblock count per peer (or at ``tbs_per_peer``), the latency
    histograms at the count shown in detail and the chip with the NAR domains NAP+NAR used."""
    counts = DEMO_TBS_PER_PEER if tbs_per_peer is None else (tbs_per_peer,)
    searches: list[CountSearch] = []
    files: list[tuple[str, bytes]] = []
    for size in DEMO_SIZES_BYTES:
        s = search_counts("allgather", DEMO_GPUS, spec, size, DEMO_CONFIGS, counts, seed=seed)
        searches.append(s)
        files.append((f"latency-{format_size(size)}.png", figure_bytes(latency_figure(s.detail), "png")))
    granularities = sorted({r.nar_granularity for s in searches for r in s.detail.rows
                            if r.nar_granularity is not None and r.nar_granularity > 1})
    for g in granularities or [finest_granularity(spec)]:
        files.append((f"chip-nar{g}.png", figure_bytes(topology_figure(spec, nar=g), "png")))
    return DemoOutput(tuple(searches), tuple(files))
