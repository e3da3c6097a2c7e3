"""The UA pass: the NUNA-unaware baseline (paper §5.3) written out as explicit annotations.

Threadblocks go round-robin across dies, to the least-loaded CU of the die (a free one while
any is free); pages stay round-robin across HBM stacks (no chunk placement); the routing is left
as it is (hashed over all ports unless a NAR pass set a granularity). The CU choices come from
the same function the simulator applies to an unannotated plan, so a UA-annotated plan and the
unannotated plan simulate identically.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nuna.passes.base import PassContext, replace_placement
from nuna.plan.ir import Plan, TbPlacement
from nuna.plan.xml import canonical_placement
from nuna.sim.layout import baseline_cus


@dataclass(frozen=True, slots=True)
class UaPass:
    """UA: baseline threadblock placement, baseline (round-robin) pages."""

    name: ClassVar[str] = "ua"

    def run(self, plan: Plan, ctx: PassContext) -> Plan:
        cus = baseline_cus(plan, ctx.topology)
        tbs = tuple(TbPlacement(g, t, cu) for (g, t), cu in cus.items())
        out = replace_placement(plan, ctx, threadblocks=tbs, chunks=())
        return out.with_placement(canonical_placement(out))
