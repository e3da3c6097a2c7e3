"""Typed errors of the nuna library.

Every error a user can cause (bad file, bad option, impossible request) is a ``NunaError``;
the CLI turns it into one line on stderr and exit status 1. Anything else is a bug.
"""

from __future__ import annotations


class NunaError(Exception):
    """Base class of every error caused by user input. ``str(err)`` is one line, for the CLI."""


class InputError(NunaError):
    """A file could not be read or is not in the expected format (size, syntax, encoding)."""


class PlanError(NunaError):
    """A collective plan is malformed, inconsistent, deadlocks or computes the wrong result."""


class TopologyError(NunaError):
    """A topology file or topology request is invalid."""


class SimulationError(NunaError):
    """A replay cannot run or cannot finish (e.g. the plan deadlocks at run time)."""


class PassError(NunaError):
    """A plan-rewriting pass cannot be applied with the given options."""


class UsageError(NunaError):
    """An option value is invalid (bad size string, unknown config name, ...)."""
