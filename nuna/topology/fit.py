"""Whether what a run names fits a chip: a plan's placement annotations, packet sizes.

The plan layer checks annotations on their own (``nuna.plan.verify``: a CU is not negative, a
chunk lies in its buffer); only a topology says how many CUs and HBM stacks a chip has and which
numbers of NAR domains its ports allow. ``nuna validate --topology`` reports these here, so that
a hand-written or foreign placement is found wrong before a replay refuses it. Packet sizes are
whole flits of the chip: the replay refuses other sizes, and a sweep spec checks its values at
load with the same functions (without loading the simulator) and the same words.
"""

from __future__ import annotations

from nuna.plan.ir import Plan
from nuna.topology.address import nar_granularities
from nuna.topology.spec import TopologySpec


def placement_problems(plan: Plan, spec: TopologySpec) -> tuple[str, ...]:
    """One line per kind of annotation that names what ``spec``'s chip does not have: a CU or
    HBM stack beyond its count (the first offender named, the others counted), a NAR
    granularity its ports do not allow. Negative numbers are left to ``nuna.plan.verify``."""
    chip = spec.chip
    pl = plan.placement
    problems: list[str] = []
    g = pl.nar_granularity
    valid = nar_granularities(spec)
    if g is not None and g >= 1 and g not in valid:
        problems.append(f"placement: NAR granularity {g} is not valid for {spec.name} "
                        f"(valid: {', '.join(map(str, valid))})")
    bad_tbs = [tp for tp in pl.threadblocks if tp.cu >= chip.cus]
    if bad_tbs:
        tp = bad_tbs[0]
        problems.append(_beyond(_count(len(bad_tbs), "threadblock"), "a CU", spec.name, chip.cus,
                                f"gpu {tp.gpu} tb {tp.tb} on CU {tp.cu}"))
    bad_chunks = [cp for cp in pl.chunks if cp.stack >= chip.hbm_stacks]
    if bad_chunks:
        cp = bad_chunks[0]
        problems.append(_beyond(_count(len(bad_chunks), "chunk placement"), "an HBM stack", spec.name,
                                chip.hbm_stacks, f"gpu {cp.gpu} {cp.buffer.name.lower()} chunk {cp.chunk} "
                                f"on stack {cp.stack}"))
    return tuple(problems)


def _beyond(items: str, resource: str, chip_name: str, count: int, first: str) -> str:
    return (f"placement: {items} on {resource} that {chip_name} does not have (it has {count}: "
            f"0..{count - 1}), first {first}")


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'s' * (n != 1)}"


#: the largest packet a replay takes, 1 TiB: more than any step moves (a packet never holds more
#: than one step's bytes), and small enough that the replay's int64 byte sums cannot overflow
MAX_PACKET_BYTES = 1 << 40


def packet_problem(packet_bytes: object, flit_bytes: int, chip: str | None = None) -> str | None:
    """Why ``packet_bytes`` is not a packet size (``"auto"`` or a whole number of flits, at most
    :data:`MAX_PACKET_BYTES`), or None; ``chip`` names the topology in the message."""
    if packet_bytes == "auto" or (isinstance(packet_bytes, int) and not isinstance(packet_bytes, bool)
                                  and flit_bytes <= packet_bytes <= MAX_PACKET_BYTES
                                  and packet_bytes % flit_bytes == 0):
        return None
    if isinstance(packet_bytes, int) and packet_bytes > MAX_PACKET_BYTES:
        return f"packet size must be at most {MAX_PACKET_BYTES} B (1 TiB), got {packet_bytes}"
    return f"packet size must be 'auto' or a multiple of the {_flit(flit_bytes, chip)}, got {packet_bytes!r}"


def packet_cap_problem(max_packet_bytes: int, flit_bytes: int, chip: str | None = None) -> str | None:
    """Why ``max_packet_bytes`` cannot cap what ``"auto"`` picks (a power-of-two number of
    flits: ``auto`` doubles its packet from one flit; at most :data:`MAX_PACKET_BYTES`), or None."""
    if max_packet_bytes > MAX_PACKET_BYTES:
        return (f"the largest packet 'auto' may pick must be at most {MAX_PACKET_BYTES} B (1 TiB), "
                f"got {max_packet_bytes} B")
    lines = max_packet_bytes // flit_bytes
    if max_packet_bytes % flit_bytes == 0 and lines >= 1 and lines & (lines - 1) == 0:
        return None
    return (f"the largest packet 'auto' may pick must be a power-of-two multiple of the "
            f"{_flit(flit_bytes, chip)}, got {max_packet_bytes} B")


def _flit(flit_bytes: int, chip: str | None) -> str:
    return f"{flit_bytes}-byte flit" + (f" of {chip}" if chip else "")
