"""The replay's routers come from the topology's ``[router]`` table; ``SimOptions.router`` overrides it."""

from __future__ import annotations

import dataclasses

from nuna.plan.generate import generate
from nuna.sim import SimOptions, simulate
from nuna.sim.network import RouterParams
from nuna.topology import load_topology


def test_replay_takes_router_parameters_from_the_topology() -> None:
    base = load_topology("nuna-4die")
    small = dataclasses.replace(base, router=dataclasses.replace(base.router, vcs=1, vc_buffer_flits=1))
    plan = generate("allgather", 2, algo="direct", tbs_per_peer=16)
    size = 1_000_000
    ref = simulate(plan, base, size)
    from_spec = simulate(plan, small, size)
    options = SimOptions(router=RouterParams(vcs=1, vc_buffer_flits=1))
    from_options = simulate(plan, base, size, options=options)
    # one virtual channel with the smallest buffer per input: head-of-line blocking and credits
    # throttle every hop, so the same traffic takes longer
    assert from_spec.time_ns > ref.time_ns
    assert from_options.time_ns == from_spec.time_ns
    assert from_spec.landed_bytes.tolist() == ref.landed_bytes.tolist()
