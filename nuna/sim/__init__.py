"""Simulation: the flit-level replay of a plan's DAG on a topology, and the synthetic NoC mode.

Units: time in ns (float64), sizes in bytes (int64), bandwidth in bytes/ns (= GB/s) internally;
inputs named ``*_gbps`` are gigabytes per second and converted once where specs are read.
"""

from nuna.sim.noc import NocResult, run_noc
from nuna.sim.replay import SimOptions, simulate
from nuna.sim.result import SimResult

__all__ = ["NocResult", "SimOptions", "SimResult", "run_noc", "simulate"]
