"""Interpreter settings for the processes nuna owns: the ``nuna`` command and sweep workers.

Library code never calls this (it changes the whole process); the entry points do, as they
own the process's signals.

Python's cyclic garbage collector runs a full collection every time the objects that
survived earlier ones have grown by a quarter, and each full collection visits every object
alive. The passes and the simulator's set-up build millions of small acyclic objects (the plan
IR, placements, accesses), so at 64 GPUs with 16 threadblocks per peer the collector took a
third of a placement's time (`apply_config`, NAP+NAR, 1 MiB allreduce: 30-35 s with the
default thresholds, 22-26 s with these, 23-27 s with the collector off; docs/passes.md). A
larger first threshold makes collections rare without turning them off, so a long-running
sweep driver still frees cyclic garbage. mypy sets the same values before a build
(``mypy/build.py``), for the same reason.
"""

from __future__ import annotations

import gc

#: (generation 0 allocations, generation 1 and generation 2 collection counts)
GC_THRESHOLDS = (200_000, 30, 30)


def tune_gc() -> None:
    """Make cyclic garbage collections rare in this process (see the module doc)."""
    gc.set_threshold(*GC_THRESHOLDS)
