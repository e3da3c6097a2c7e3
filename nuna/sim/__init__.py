"""Simulation: the flit-level replay of a plan's DAG on a topology, and the synthetic NoC mode.

Units: time in ns (float64), sizes in bytes (int64), bandwidth in bytes/ns (= GB/s) internally;
inputs named ``*_gbps`` are gigabytes per second and converted once where specs are read.

The names below are loaded on first use: the engine imports numba (about a second), which
commands that only read placement helpers (``nuna.sim.layout``) or results should not pay.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nuna.sim.flowcheck import flow_deadlock
    from nuna.sim.noc import NocResult, run_noc
    from nuna.sim.replay import SimOptions, load_kernels, placement_bounds, simulate
    from nuna.sim.result import SimResult

_HOME = {"NocResult": "nuna.sim.noc", "run_noc": "nuna.sim.noc", "SimOptions": "nuna.sim.replay",
         "simulate": "nuna.sim.replay", "load_kernels": "nuna.sim.replay",
         "placement_bounds": "nuna.sim.replay", "SimResult": "nuna.sim.result",
         "flow_deadlock": "nuna.sim.flowcheck"}

__all__ = ["NocResult", "SimOptions", "SimResult", "flow_deadlock", "load_kernels", "placement_bounds",
           "run_noc", "simulate"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'nuna.sim' has no attribute {name!r}")
