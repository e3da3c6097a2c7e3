"""Plan-rewriting passes (UA, NUMA, NAP, NAP*, NAR) and the paper's named configurations.

A pass takes a verified plan and returns a new one that differs only in its placement
annotations (:class:`nuna.plan.ir.Placement`); :func:`run_pipeline` chains passes and verifies
between them; :func:`apply_config` applies a named configuration (``UA``, ``NAP+NAR``, ...).
See ``docs/passes.md``.
"""

from __future__ import annotations

from nuna.passes.base import Observer, PassContext, PlanPass, run_pipeline
from nuna.passes.configs import CONFIGS, Config, apply_config, choose_granularity, get_config
from nuna.passes.nap import NapPass, NapStarPass
from nuna.passes.nar import NarPass
from nuna.passes.numa import NumaPass
from nuna.passes.ua import UaPass

#: Every pass by its name (one registry; a test checks each key equals its pass's ``name``).
PASSES: dict[str, type[PlanPass]] = {p.name: p for p in (UaPass, NumaPass, NapPass, NapStarPass, NarPass)}

__all__ = [
    "CONFIGS",
    "PASSES",
    "Config",
    "NapPass",
    "NapStarPass",
    "NarPass",
    "NumaPass",
    "Observer",
    "PassContext",
    "PlanPass",
    "UaPass",
    "apply_config",
    "choose_granularity",
    "get_config",
    "run_pipeline",
]
