"""Chrome / Perfetto trace-event JSON of a replay: a process per GPU, a track per threadblock
with a slice per step (one per executor slice of it in a replay with ``executor_slices``), and
counter tracks for the I/O ports' bandwidth over time. Given the topology, a threadblock's
track also names where it ran (CU, die, mesh router).

Open the file in https://ui.perfetto.dev or chrome://tracing. Timestamps are microseconds (the
format's unit) with nanosecond precision.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nuna.plan.dag import STEP_TYPES, flatten
from nuna.plan.ir import Plan, StepType
from nuna.sim.layout import threadblock_cus
from nuna.sim.result import SimResult
from nuna.topology.geometry import chip_geometry
from nuna.topology.spec import TopologySpec


def chrome_trace(plan: Plan, result: SimResult, spec: TopologySpec | None = None) -> dict[str, Any]:
    """Trace events for ``result`` (which must come from replaying ``plan``, on ``spec`` when
    given: the tracks then name each threadblock's CU, die and router)."""
    flat = flatten(plan)
    if flat.num_nodes != result.node_t_end.shape[0]:
        raise ValueError("result does not belong to this plan")
    where: list[str] = []
    if spec is not None:
        geo = chip_geometry(spec.chip)
        mesh = spec.chip.kind == "mesh"  # a flat chip's CUs hang off one node: no router to name
        for cu in threadblock_cus(plan, spec, flat).tolist():
            x, y = (int(v) for v in geo.router_xy[geo.cu_router[cu]])
            where.append(f" CU {cu}, die {int(geo.cu_die[cu])}" + (f", router ({x}, {y})" if mesh else ""))
    events: list[dict[str, Any]] = []
    for g in sorted({int(x) for x in flat.tb_gpu.tolist()}):
        events.append({"ph": "M", "name": "process_name", "pid": g, "tid": 0, "args": {"name": f"GPU {g}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": g, "tid": 0,
                       "args": {"sort_index": g}})
    for t in range(flat.tb_gpu.shape[0]):
        g, tb = int(flat.tb_gpu[t]), int(flat.tb_id[t])
        peers = []
        if flat.tb_send[t] >= 0:
            peers.append(f"send {int(flat.tb_send[t])}")
        if flat.tb_recv[t] >= 0:
            peers.append(f"recv {int(flat.tb_recv[t])}")
        label = f"tb {tb}" + (f" ({', '.join(peers)})" if peers else "") + (where[t] if where else "")
        events.append({"ph": "M", "name": "thread_name", "pid": g, "tid": tb, "args": {"name": label}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": g, "tid": tb,
                       "args": {"sort_index": tb}})
    chunk = result.chunk_bytes
    slice_start, slice_end = result.slice_t_start, result.slice_t_end
    slices = 1 if slice_start is None or slice_end is None else int(slice_start.shape[1])
    sliced = slices > 1
    for n in range(flat.num_nodes):
        kind = STEP_TYPES[int(flat.code[n])]
        if kind is StepType.NOP:
            continue
        t = int(flat.node_tb[n])
        start, end, ready = (float(result.node_t_start[n]), float(result.node_t_end[n]),
                             float(result.node_t_ready[n]))
        if np.isnan(end):
            continue
        if np.isnan(start):
            start = ready
        name = f"{kind.value} s{int(flat.index[n])}"
        track = {"pid": int(flat.tb_gpu[t]), "tid": int(flat.tb_id[t])}
        if sliced and slice_start is not None and slice_end is not None:
            # a step's slices interleave with its threadblock's other steps: a slice each
            for i in range(slices):
                s0, s1 = float(slice_start[n, i]), float(slice_end[n, i])
                events.append({"ph": "X", "name": f"{name} [{i + 1}/{slices}]", "cat": "step", **track,
                               "ts": s0 / 1000.0, "dur": max(0.0, s1 - s0) / 1000.0,
                               "args": {"slice": i, "step_ready_us": ready / 1000.0}})
            continue
        events.append({
            "ph": "X", "name": name, "cat": "step", **track,
            "ts": start / 1000.0, "dur": max(0.0, end - start) / 1000.0,
            "args": {"bytes": int(flat.count[n]) * chunk, "ready_us": ready / 1000.0},
        })
    times = result.trace_time_ns
    data = result.trace_port_bytes  # [sample, gpu * ports + port, direction]
    if times.shape[0] >= 2:
        ports = result.port_egress_bytes.shape[1]
        dt = np.diff(times)
        rate = np.diff(data, axis=0) / dt[:, None, None]  # bytes per ns = GB/s
        for i in range(rate.shape[0]):
            for gp in range(rate.shape[1]):
                g, k = divmod(gp, ports)
                events.append({"ph": "C", "name": f"io port {k} (GB/s)", "pid": g, "ts": times[i] / 1000.0,
                               "args": {"egress": float(rate[i, gp, 0]), "ingress": float(rate[i, gp, 1])}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"plan": result.plan_name, "topology": result.topology,
                          "size_bytes": result.size_bytes, "time_ns": result.time_ns}}
