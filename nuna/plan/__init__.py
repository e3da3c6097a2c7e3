"""Collective plans: the MSCCL XML IR, reader/writer, verification, replay DAG and generators.

Re-exports the public API of the reader/writer (:mod:`nuna.plan.xml`), the verifier
(:mod:`nuna.plan.verify`) and the replay DAG (:mod:`nuna.plan.dag`) next to the IR records.
"""

from nuna.plan.dag import ReplayDag, build_dag, find_cycle, to_networkx, topological_levels
from nuna.plan.ir import (
    Buffer,
    ChunkPlacement,
    Collective,
    Gpu,
    Placement,
    Plan,
    Protocol,
    Step,
    StepType,
    TbPlacement,
    Threadblock,
)
from nuna.plan.verify import PlanSummary, Report, summarize, verify
from nuna.plan.xml import (
    MAX_PLAN_BYTES,
    NUNA_NS,
    SourceMap,
    canonical_placement,
    dump,
    load,
    load_with_source,
    loads,
    loads_with_source,
    save,
)

__all__ = [
    "MAX_PLAN_BYTES",
    "NUNA_NS",
    "Buffer",
    "ChunkPlacement",
    "Collective",
    "Gpu",
    "Placement",
    "Plan",
    "PlanSummary",
    "Protocol",
    "ReplayDag",
    "Report",
    "SourceMap",
    "Step",
    "StepType",
    "TbPlacement",
    "Threadblock",
    "build_dag",
    "canonical_placement",
    "dump",
    "find_cycle",
    "load",
    "load_with_source",
    "loads",
    "loads_with_source",
    "save",
    "summarize",
    "to_networkx",
    "topological_levels",
    "verify",
]
