"""Topologies: chip and pod specs from TOML files, networkx builders, routing and address maps.

``spec`` reads and validates topology files; ``geometry`` is the array form of a chip (the
single source of truth for nodes, edges and precomputed paths); ``build`` makes networkx graphs
from it; ``routing`` holds X-then-Y and endpoint routes; ``address`` the page, port-hash and
NAR domain maps; ``latency`` the uncontended characterization and calibration figures;
``render`` the pictures; ``fit`` whether a plan's placement annotations fit a chip.
"""

from nuna.topology.address import (
    baseline_physical_address,
    baseline_stack,
    cu_nar_domains,
    io_port,
    io_ports_array,
    nar_domain_cus,
    nar_domain_ports,
    nar_domain_stacks,
    nar_granularities,
    nar_port_table,
    nar_segment_cycle,
    nar_segment_stack,
    nearest_cus,
    nearest_stack,
    nearest_stacks,
    physical_address,
    stack_domain,
    stack_domains,
    stack_of_address,
    stacks_by_distance,
)
from nuna.topology.build import build_gpu, build_pod, to_graphml
from nuna.topology.fit import placement_problems
from nuna.topology.geometry import ChipGeometry, PathTable, PodLayout, chip_geometry, pod_layout
from nuna.topology.latency import (
    AtomicCharacterization,
    LatencySummary,
    Spread,
    atomic_round_trips,
    calibration_report,
    latency_summary,
)
from nuna.topology.nodes import EDGE_KINDS, Cu, Hbm, IoPort, Node, Router, Switch
from nuna.topology.routing import path_latency_ns, route, xy_route
from nuna.topology.spec import (
    DEFAULT_TOPOLOGY,
    ChipSpec,
    ScaleUpSpec,
    TopologySpec,
    available_topologies,
    default_topology,
    load_topology,
    parse_topology,
)

__all__ = [
    "DEFAULT_TOPOLOGY",
    "EDGE_KINDS",
    "AtomicCharacterization",
    "ChipGeometry",
    "ChipSpec",
    "Cu",
    "Hbm",
    "IoPort",
    "LatencySummary",
    "Node",
    "PathTable",
    "PodLayout",
    "Router",
    "ScaleUpSpec",
    "Spread",
    "Switch",
    "TopologySpec",
    "atomic_round_trips",
    "available_topologies",
    "baseline_physical_address",
    "baseline_stack",
    "build_gpu",
    "build_pod",
    "calibration_report",
    "chip_geometry",
    "cu_nar_domains",
    "default_topology",
    "io_port",
    "io_ports_array",
    "latency_summary",
    "load_topology",
    "nar_domain_cus",
    "nar_domain_ports",
    "nar_domain_stacks",
    "nar_granularities",
    "nar_port_table",
    "nar_segment_cycle",
    "nar_segment_stack",
    "nearest_cus",
    "nearest_stack",
    "nearest_stacks",
    "parse_topology",
    "path_latency_ns",
    "physical_address",
    "placement_problems",
    "pod_layout",
    "route",
    "stack_domain",
    "stack_domains",
    "stack_of_address",
    "stacks_by_distance",
    "to_graphml",
    "xy_route",
]
