"""NAP's first phase, ``logical_allocation`` (paper §4.2.1, Algorithm 1 line 10).

Threadblocks are processed in workload order. A threadblock whose chunks are all unassigned
forms a new logical group; otherwise it joins the group with which it shares the most chunks
(ties: the group formed first), and its unassigned chunks join that group too. The groups are
returned sorted by decreasing size, stably (equal sizes keep their formation order). A group's
size is its number of members, threadblocks plus chunks: both consume the budgets that
``physical_placement`` balances across NAR domains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nuna.passes.access import ChunkKey, TbAccess


@dataclass(frozen=True, slots=True)
class GroupMember:
    """A threadblock of a group and the chunks that joined the group with it (the chunks it
    touched first; ``physical_placement`` places exactly these, in this order)."""

    access: TbAccess
    new_chunks: tuple[ChunkKey, ...]


@dataclass(frozen=True, slots=True)
class LogicalGroup:
    """Threadblocks and chunks to be co-located in one NAR domain. ``formed`` is the group's
    index in formation order (the sort key that breaks size ties)."""

    formed: int
    members: tuple[GroupMember, ...]

    @property
    def chunks(self) -> tuple[ChunkKey, ...]:
        return tuple(c for m in self.members for c in m.new_chunks)

    @property
    def threadblocks(self) -> tuple[tuple[int, int], ...]:
        """``(gpu, tb)`` of the members, in processing order."""
        return tuple((m.access.gpu, m.access.tb) for m in self.members)

    @property
    def size(self) -> int:
        return len(self.members) + sum(len(m.new_chunks) for m in self.members)


def logical_allocation(workload: Sequence[TbAccess]) -> tuple[LogicalGroup, ...]:
    """Group ``workload`` (Algorithm 1's ``W``) into logical groups, largest first."""
    owner: dict[ChunkKey, int] = {}
    members: list[list[GroupMember]] = []
    for acc in workload:
        shared: dict[int, int] = {}
        for c in acc.chunks:
            gid = owner.get(c)
            if gid is not None:
                shared[gid] = shared.get(gid, 0) + 1
        if shared:
            # most shared chunks wins; among equals the earliest-formed group
            target = min(shared, key=lambda gid: (-shared[gid], gid))
        else:
            target = len(members)
            members.append([])
        new = tuple(c for c in acc.chunks if c not in owner)
        for c in new:
            owner[c] = target
        members[target].append(GroupMember(acc, new))
    groups = [LogicalGroup(i, tuple(ms)) for i, ms in enumerate(members)]
    groups.sort(key=lambda g: -g.size)  # list.sort is stable: formation order breaks ties
    return tuple(groups)
