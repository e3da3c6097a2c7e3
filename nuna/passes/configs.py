"""The paper's named configurations (§5.3) as pass pipelines, and how NAR's granularity is chosen.

=========== ===================== ==================== =================
config      threadblocks          memory pages         routing
=========== ===================== ==================== =================
UA          round-robin (baseline) round-robin         hashed, all ports
UA+NAR      round-robin           round-robin          NAR
NUMA        near their memory     round-robin          hashed
NUMA+NAR    near their memory     round-robin          NAR
NAP         NAP (Algorithm 1)     NAP                  hashed
NAP+NAR     NAP                   NAP                  NAR
NAP*        NAP                   round-robin          hashed
NAP*+NAR    NAP                   round-robin          NAR
=========== ===================== ==================== =================

In a ``+NAR`` configuration the NAR pass runs first, so NAP deals its groups over the same
domains the stores are routed through (Algorithm 1's ``nar_max`` is the NAR granularity).
:func:`apply_config` is what ``--config NAME`` resolves through.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from nuna.errors import UsageError
from nuna.passes.base import Observer, PassContext, PlanPass, check_input, check_placed, run_pipeline
from nuna.passes.nap import NapPass, NapStarPass, annotate, nap_groups, physical_placement
from nuna.passes.nar import GranularityEstimate, NarPass, check_granularity, estimate_granularity
from nuna.passes.numa import NumaPass
from nuna.passes.ua import UaPass
from nuna.plan.ir import Placement, Plan
from nuna.plan.verify import chunk_bytes_for
from nuna.topology.address import nar_granularities

if TYPE_CHECKING:  # the simulator is only needed for 'auto' (imported there)
    from nuna.sim.replay import PacketBytes, SimOptions

Granularity = int | Literal["auto"] | None


@dataclass(frozen=True, slots=True)
class Config:
    """A named configuration: a placement policy and whether NAR routes the stores."""

    name: str
    placement: Literal["ua", "numa", "nap", "nap*"]
    nar: bool
    description: str

    def placement_pass(self) -> PlanPass:
        """The pass that places threadblocks and memory for this configuration."""
        if self.placement == "ua":
            return UaPass()
        if self.placement == "numa":
            return NumaPass()
        if self.placement == "nap":
            return NapPass()
        return NapStarPass()

    def passes(self, granularity: int | None = None) -> tuple[PlanPass, ...]:
        """The pipeline; ``granularity`` is required exactly when the configuration uses NAR."""
        if self.nar and granularity is None:
            raise UsageError(f"config {self.name} routes with NAR: a granularity is needed")
        if not self.nar and granularity is not None:
            raise UsageError(f"config {self.name} does not route with NAR (granularity {granularity} given); "
                             f"use {self.name}+NAR")
        place = self.placement_pass()
        return (NarPass(granularity), place) if granularity is not None else (place,)


CONFIGS: dict[str, Config] = {c.name: c for c in (
    Config("UA", "ua", False, "NUNA-unaware baseline: round-robin threadblocks and pages, hashed ports"),
    Config("UA+NAR", "ua", True, "baseline placement, NAR routing"),
    Config("NUMA", "numa", False, "threadblocks near the (round-robin) memory they access, hashed ports"),
    Config("NUMA+NAR", "numa", True, "NUMA placement, NAR routing"),
    Config("NAP", "nap", False, "NUNA-aware threadblock and memory placement, hashed ports"),
    Config("NAP+NAR", "nap", True, "NUNA-aware placement and routing"),
    Config("NAP*", "nap*", False, "NAP threadblock placement, round-robin pages, hashed ports"),
    Config("NAP*+NAR", "nap*", True, "NAP threadblock placement, round-robin pages, NAR routing"),
)}


def get_config(name: str) -> Config:
    """The configuration called ``name`` (case-insensitive), else ``UsageError``."""
    for key, cfg in CONFIGS.items():
        if key.lower() == name.strip().lower():
            return cfg
    raise UsageError(f"unknown config {name!r} (choose from {', '.join(CONFIGS)})")


def parse_granularity(text: str | None) -> Granularity:
    """CLI form of a granularity: ``None``/``''`` (the heuristic), ``auto`` or an integer."""
    if text is None or not text.strip():
        return None
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"invalid NAR granularity {text!r}: expected an integer or 'auto'") from None


@dataclass(frozen=True, slots=True)
class GranularityChoice:
    """How a configuration's granularity was chosen: ``method`` is ``given``, ``heuristic`` or
    ``auto``; ``estimates`` (heuristic) or ``simulated_ns`` (auto, ``(G, time_ns)``) per
    candidate; ``placed`` (heuristic) the plan as the configuration placed it at the chosen
    ``G`` to estimate it, not yet checked (:func:`apply_choice` checks and returns it)."""

    granularity: int | None
    method: str
    estimates: tuple[GranularityEstimate, ...] = ()
    simulated_ns: tuple[tuple[int, float], ...] = ()
    placed: Plan | None = field(default=None, compare=False, repr=False)


def unplaced(plan: Plan) -> Plan:
    """``plan`` without the placement it carries. A configuration places and routes a plan from
    scratch: kept, a NAR granularity left by an earlier ``+NAR`` rewrite would route a UA, NUMA,
    NAP or NAP* placement through NAR domains (the passes without NAR leave the routing alone),
    and a placement made for another chip would fail the input's check."""
    return plan if plan.placement == Placement() else plan.with_placement(Placement())


def _place(plan: Plan, cfg: Config, ctx: PassContext, g: int | None, observe: Observer | None,
           check: bool) -> Plan:
    out = run_pipeline(plan, cfg.passes(g), ctx, observe=observe, check=check)
    return out.with_placement(dataclasses.replace(out.placement, config=cfg.name))


def _placer(plan: Plan, cfg: Config, ctx: PassContext) -> Callable[[int], Plan]:
    """``G -> plan placed by cfg at G``, computing what does not depend on ``G`` once: the
    logical groups for NAP/NAP* and NUMA (:func:`nuna.passes.nap.nap_groups`, once per
    program), the whole placement for UA (it ignores domains; NUMA does not: its pages are in
    the NAR segment of ``G``). Gives the same plans as the configuration's pipeline (tested)."""
    if cfg.placement in ("nap", "nap*"):
        groups, work = nap_groups(plan)
        chunk_bytes = chunk_bytes_for(plan, ctx.size_bytes)

        def place_nap(g: int) -> Plan:
            routed = NarPass(g).run(plan, ctx)
            result = physical_placement(groups, g, ctx.topology, chunk_bytes,
                                        place_memory=cfg.placement == "nap", workload=work)
            return annotate(routed, ctx, result)

        return place_nap
    if cfg.placement == "numa":
        def place_numa(g: int) -> Plan:
            return NumaPass().run(NarPass(g).run(plan, ctx), ctx)

        return place_numa
    placed = cfg.placement_pass().run(plan, ctx)
    return lambda g: NarPass(g).run(placed, ctx)


def choose_granularity(plan: Plan, name: str, ctx: PassContext, requested: Granularity = None, *,
                       seed: int = 0, packet_bytes: PacketBytes | None = None,
                       options: SimOptions | None = None) -> GranularityChoice:
    """Resolve ``requested`` for configuration ``name``: ``None`` for configurations without NAR;
    an integer is checked; ``None`` runs the size-threshold heuristic
    (:func:`nuna.passes.nar.estimate_granularity`); ``"auto"`` simulates every valid granularity
    with :func:`nuna.sim.simulate` (with ``seed``, ``packet_bytes`` and ``options``: the replay
    the plan is chosen for) and keeps the fastest (ties: the coarser). A placement ``plan``
    already carries is ignored (:func:`unplaced`)."""
    cfg = get_config(name)
    plan = unplaced(plan)
    spec = ctx.topology
    if not cfg.nar:
        if requested is not None:
            raise UsageError(f"config {cfg.name} does not route with NAR: --nar-granularity applies to "
                             f"{cfg.name}+NAR")
        return GranularityChoice(None, "none")
    if isinstance(requested, int) and not isinstance(requested, bool):
        return GranularityChoice(check_granularity(spec, requested), "given")
    if requested is None:
        # before the heuristic walks it, as run_pipeline does before the passes (an ngpus below
        # the <gpu> elements' count indexed past its arrays); apply_choice does not verify again
        check_input(plan, ctx)
        placer = _placer(plan, cfg, ctx)
        placed: dict[int, Plan] = {}

        def place(g: int) -> Plan:
            placed[g] = placer(g)
            return placed[g]

        g, est = estimate_granularity(plan, spec, ctx.size_bytes, place)
        return GranularityChoice(g, "heuristic", estimates=est, placed=placed.get(g))
    if requested != "auto":
        raise UsageError(f"invalid NAR granularity {requested!r}: expected an integer or 'auto'")
    from nuna.sim.replay import simulate  # the simulator is only needed for 'auto'

    times: list[tuple[int, float]] = []
    for g in nar_granularities(spec):
        candidate = _place(plan, cfg, ctx, g, None, False)
        result = simulate(candidate, spec, ctx.size_bytes, seed=seed, packet_bytes=packet_bytes,
                          options=options)
        times.append((g, float(result.time_ns)))
    best = min(times, key=lambda t: (t[1], t[0]))[0]
    return GranularityChoice(best, "auto", simulated_ns=tuple(times))


def apply_config(plan: Plan, name: str, ctx: PassContext, nar_granularity: Granularity = None, *,
                 observe: Observer | None = None, seed: int = 0, packet_bytes: PacketBytes | None = None,
                 options: SimOptions | None = None) -> Plan:
    """``plan`` placed and routed as configuration ``name`` for the collective size in ``ctx``.

    ``nar_granularity``: ``None`` (the heuristic for ``+NAR`` configurations, nothing otherwise),
    an integer ``G``, or ``"auto"`` (simulate every candidate; ``seed``, ``packet_bytes`` and
    ``options`` go to the simulator, which should be given the same for the placed plan).
    The result records ``config`` and ``size_bytes`` in its placement and verifies. The
    placement ``plan`` carries, if any, is replaced, not built upon (:func:`unplaced`).
    """
    choice = choose_granularity(plan, name, ctx, nar_granularity, seed=seed, packet_bytes=packet_bytes,
                                options=options)
    return apply_choice(plan, name, ctx, choice, observe=observe)


def apply_choice(plan: Plan, name: str, ctx: PassContext, choice: GranularityChoice, *,
                 observe: Observer | None = None) -> Plan:
    """:func:`apply_config` with the granularity ``choice`` already made by
    :func:`choose_granularity` for the same plan, configuration and context (for callers that
    report the choice: the heuristic's placed plan is then not placed again)."""
    cfg = get_config(name)
    plan = unplaced(plan)
    if observe is None and choice.placed is not None:
        # the heuristic has placed the plan at G already, as the pipeline would (tested): check
        # that plan as the pipeline checks its own instead of placing it again (NUMA+NAR and
        # NAP+NAR at 64 GPUs: seconds per point)
        out = check_placed(plan, choice.placed, ctx, cfg.name, input_verified=True)
        return out.with_placement(dataclasses.replace(out.placement, config=cfg.name))
    return _place(plan, cfg, ctx, choice.granularity, observe, True)


def config_names(text: str | Sequence[str]) -> tuple[str, ...]:
    """Canonical names from ``'UA,NAP+NAR'`` or a list; ``UsageError`` on an unknown one or one
    given twice (``UA,ua`` too)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    if not any(item.strip() for item in items):
        raise UsageError("no configuration given")
    if not all(item.strip() for item in items):  # 'UA,,NAP': a name left out, not nothing
        raise UsageError(f"an empty configuration name in {','.join(items)!r}")
    names = tuple(get_config(item).name for item in items)
    twice = sorted({n for n in names if names.count(n) > 1}, key=names.index)
    if twice:  # the same replay twice, and two identical rows
        raise UsageError(f"configuration {', '.join(twice)} given twice in {','.join(items)!r}")
    return names
