"""Experiments: sweeps and the paper's figures, built on the simulator and passes."""
