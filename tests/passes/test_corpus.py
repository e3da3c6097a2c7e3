"""Every pass on every plan of the shared corpus that verifies: only the placement changes,
the result verifies (the symbolic data-flow check once per plan), reads back from XML
identically, is deterministic, and places every threadblock on a real CU and every chunk on a
real stack."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nuna.passes import PASSES, NapPass, NarPass, PassContext
from nuna.plan.ir import Plan
from nuna.plan.verify import verify
from nuna.plan.xml import dump, load, loads
from nuna.topology.address import nar_granularities
from nuna.topology.spec import TopologySpec
from tests.conftest import msccl_plans


def _size(plan: Plan, target: int = 1_000_000) -> int:
    n = plan.nchunksperloop
    return max(n, target - target % n)


# The corpus: every plan that loads and verifies (the others are not runnable inputs). Large
# plans are checked without the symbolic data-flow check after rewriting: the program-equality
# assertion below already proves the computation is unchanged.
CORPUS = msccl_plans()
_SEMANTICS_LIMIT_TBS = 300


@pytest.mark.skipif(not CORPUS, reason="shared plan corpus not available")
@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_every_pass_on_the_corpus(path: Path, spec: TopologySpec) -> None:
    plan = load(path)
    ntbs = sum(len(g.threadblocks) for g in plan.gpus)
    small = ntbs <= _SEMANTICS_LIMIT_TBS
    if not verify(plan, semantics=small).ok:
        pytest.skip("input plan does not verify")
    ctx = PassContext(spec, _size(plan))
    g = nar_granularities(spec)[-1]
    # NAP runs after a NAR pass, as in NAP+NAR: its output carries every kind of annotation
    # (granularity, threadblock CUs, chunk stacks), the other passes write subsets of these
    routed = NarPass(g).run(plan, ctx)
    outputs = [(cls.name, cls().run(plan, ctx)) for name, cls in PASSES.items()  # type: ignore[call-arg]
               if name not in ("nar", "nap")]
    outputs += [("nar", routed), ("nap", NapPass().run(routed, ctx))]
    for name, out in outputs:
        # only the placement changed, so what the plan computes is unchanged
        assert dataclasses.replace(out, placement=plan.placement) == plan, name
        # the symbolic data-flow check once per plan (it cannot see placement), structure always
        report = verify(out, semantics=small and name == "nap")
        assert report.ok, (name, report.errors[:3])
        # the placement is well formed; one thing it cannot help is the executors' limit of
        # 1,024 children per element, which a GPU with that many placed chunks exceeds
        assert not [w for w in report.warnings if "placement" in w and "1024 children" not in w], name
        pl = out.placement
        assert pl.size_bytes == ctx.size_bytes
        if name != "nar":
            assert {(t.gpu, t.tb) for t in pl.threadblocks} == {(gp.id, t.id) for gp in plan.gpus
                                                                  for t in gp.threadblocks}
            assert all(0 <= t.cu < spec.chip.cus for t in pl.threadblocks)
        assert all(0 <= c.stack < spec.chip.hbm_stacks for c in pl.chunks)
    full = outputs[-1][1]
    assert full.placement.nar_granularity == g
    assert NapPass().run(routed, ctx) == full, "nap is not deterministic"
    assert loads(dump(full), path.name) == full
