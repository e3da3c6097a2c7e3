"""The replay's routers come from the topology's ``[router]`` table; ``SimOptions.router`` overrides it."""

from __future__ import annotations

import dataclasses

import pytest

from nuna.errors import UsageError
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


@pytest.mark.parametrize(("key", "value"), [
    ("vcs", 0), ("vcs", 65), ("vc_buffer_flits", 0), ("vc_buffer_flits", 1.5),
    ("credit_delay_cycles", -1.0), ("credit_delay_cycles", float("nan")), ("head_setup_cycles", 2e6),
    ("vcs", 10**400), ("credit_delay_cycles", 10**400),  # no float holds it: range, not OverflowError
])
def test_router_parameters_given_in_code_are_held_to_the_topology_files_rule(key: str, value: object) -> None:
    # before, each of these replayed without a word (vcs=0 a 2-GPU 4 KiB allgather in 1,967.6 ns,
    # a nan head set-up in 1,955.0); a topology file with the same value is refused at load
    options = SimOptions(router=dataclasses.replace(RouterParams(), **{key: value}))
    with pytest.raises(UsageError, match=rf"SimOptions\.router\.{key}: "):
        simulate(generate("allgather", 2), load_topology("nuna-4die"), 4096, options=options)


def test_a_router_that_is_not_router_params_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"SimOptions\.router must be a RouterParams"):
        simulate(generate("allgather", 2), load_topology("nuna-4die"), 4096,
                 options=SimOptions(router="iq"))  # type: ignore[arg-type]


def test_every_router_key_of_a_topology_file_is_a_router_params_field() -> None:
    # router_params_problem checks RouterParams by the [router] table's keys
    from nuna.topology.spec import ROUTER_KEYS

    assert set(ROUTER_KEYS) == {f.name for f in dataclasses.fields(RouterParams)} - {"input_queued"}
