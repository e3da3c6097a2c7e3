"""Golden: the paper's Fig 7 example placed as its caption describes (tests/golden/nap_fig7.json).

The golden holds the caption's logical structure; the physical expectations (which CU, which
stack) are derived here from the topology layer's distance orders, not from NAP's own code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nuna.passes import PassContext, apply_config
from nuna.passes.nap import nap_placement
from nuna.plan.ir import Buffer
from nuna.plan.xml import dump, load, loads
from nuna.topology.address import (
    nar_domain_ports,
    nar_domain_stacks,
    nearest_cus,
    nearest_stacks,
    stacks_by_distance,
)
from nuna.topology.spec import load_topology
from tests.conftest import PLANS_MSCCL

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "nap_fig7.json").read_text())
PLAN = PLANS_MSCCL / GOLDEN["plan"]

pytestmark = pytest.mark.skipif(not PLAN.is_file(), reason="shared plan corpus not available")


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    spec = load_topology(GOLDEN["topology"])
    plan = load(PLAN)
    ctx = PassContext(spec, GOLDEN["size_bytes"])
    out = apply_config(plan, GOLDEN["config"], ctx, GOLDEN["nar_granularity"])
    return spec, plan, ctx, out


def _chunk_key(label: str) -> tuple[int, Buffer, int]:
    name, gpu = label.split("@")
    c = next(c for c in GOLDEN["chunks"] if c["name"] == name)
    return (c["chunk"], Buffer(c["buffer"]), int(gpu))


def test_logical_groups_match_caption(setup) -> None:  # type: ignore[no-untyped-def]
    spec, plan, ctx, _ = setup
    result = nap_placement(plan, spec, ctx.size_bytes, GOLDEN["nar_granularity"])
    tb_names = {(t["gpu"], t["tb"]): t["name"] for t in GOLDEN["threadblocks"]}
    assert len(result.groups) == len(GOLDEN["groups"])
    for group, domain, want in zip(result.groups, result.group_domain, GOLDEN["groups"], strict=True):
        assert domain == want["domain"]
        assert [tb_names[t] for t in group.threadblocks] == want["threadblocks"]
        assert [(c.chunk, c.buffer, c.gpu) for c in group.chunks] == [_chunk_key(x) for x in want["chunks"]]


def test_annotations(setup) -> None:  # type: ignore[no-untyped-def]
    spec, _, _, out = setup
    g = GOLDEN["nar_granularity"]
    pl = out.placement
    assert pl.nar_granularity == g
    assert pl.config == GOLDEN["config"]
    assert pl.size_bytes == GOLDEN["size_bytes"]
    ports = nar_domain_ports(spec, g)
    stacks = nar_domain_stacks(spec, g)
    cu_of = {(t.gpu, t.tb): t.cu for t in pl.threadblocks}
    stack_of = {(c.chunk, c.buffer, c.gpu): c.stack for c in pl.chunks}
    assert len(cu_of) == len(GOLDEN["threadblocks"])
    assert len(stack_of) == 2 * len(GOLDEN["chunks"])
    for t in GOLDEN["threadblocks"]:
        d = t["domain"]
        cu = cu_of[(t["gpu"], t["tb"])]
        # alone on its GPU's domain, so the very nearest CU to the domain's ports
        assert cu == nearest_cus(spec, ports[d])[0], t["name"]
        chunk = next(c for c in GOLDEN["chunks"] if c["name"] == t["loads"])
        local = stack_of[(chunk["chunk"], Buffer(chunk["buffer"]), t["gpu"])]
        assert local == next(s for s in stacks_by_distance(spec, cu) if s in stacks[d]), t["name"]
        peer = 1 - t["gpu"]
        remote = stack_of[(chunk["chunk"], Buffer(chunk["buffer"]), peer)]
        assert remote == next(s for s in nearest_stacks(spec, ports[d]) if s in stacks[d]), t["name"]
    for c in GOLDEN["chunks"]:
        for gpu in (0, 1):
            assert stack_of[(c["chunk"], Buffer(c["buffer"]), gpu)] in stacks[c["domain"]]


def test_rewritten_plan_round_trips(setup) -> None:  # type: ignore[no-untyped-def]
    _, plan, _, out = setup
    text = dump(out)
    back = loads(text, "fig7")
    assert back == out
    assert back.gpus == plan.gpus
