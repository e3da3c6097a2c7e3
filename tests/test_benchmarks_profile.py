"""The replay profiler's own logic (``benchmarks/profile_replay.py``): reading ``nm``, naming
numba's symbols and placing them in memory. Sampling needs ``perf``, left to its users."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import benchmark_module


def _prof() -> ModuleType:
    return benchmark_module("profile_replay")


NM = """\
0000000000000d20 000000000000001c r .const.<numba.core.cpu.CPUContext>
0000000000000008 0000000000000008 C _ZN08NumbaEnv4nuna3sim6engine10_job_startB4v312E
0000000000000000 00000000000118c5 T _ZN4nuna3sim6engine11replay_loopB3v89B40c8tJTIeE192Net
00000000000118d0 000000000000614c T _ZN7cpython4nuna3sim6engine11replay_loopB3v89E
0000000000017a20 0000000000000a42 T cfunc._ZN4nuna3sim6engine11replay_loopB3v89E
000000000001e5d0 0000000000000410 W _ZN4nuna3sim6engine13_merge_creditB4v290E5ArrayIdLi2E1C
0000000000020000 0000000000000010 t helper
"""


def test_reads_code_symbols_only() -> None:
    syms = _prof().parse_nm(NM)
    assert [(s.offset, s.size) for s in syms] == [(0, 0x118C5), (0x118D0, 0x614C), (0x17A20, 0xA42),
                                                 (0x1E5D0, 0x410), (0x20000, 0x10)]


def test_names_numba_symbols() -> None:
    prof = _prof()
    names = [prof.readable(s.name) for s in prof.parse_nm(NM)]
    assert names == ["nuna.sim.engine.replay_loop", "nuna.sim.engine.replay_loop [wrapper]",
                     "nuna.sim.engine.replay_loop [wrapper]", "nuna.sim.engine._merge_credit", "helper"]


def test_callees_sit_at_the_entry_base_plus_their_offset() -> None:
    prof = _prof()
    syms = prof.parse_nm(NM)
    exported = {syms[0].name: 0x7F0000001000, syms[1].name: 0x7F0000001000 + 0x118D0}

    def lookup(name: str) -> int:
        if name not in exported:
            raise KeyError(name)
        return exported[name]

    addrs = prof.object_addresses(syms, lookup)
    assert {s.name: a - 0x7F0000001000 for s, a in addrs.items()} == {s.name: s.offset for s in syms}


def test_disagreeing_bases_name_only_the_exported() -> None:
    prof = _prof()
    syms = prof.parse_nm(NM)
    exported = {syms[0].name: 0x1000, syms[1].name: 0x900000}  # not one block: no base to trust
    addrs = prof.object_addresses(syms, lambda name: exported.get(name, 0))
    assert {s.name: a for s, a in addrs.items()} == exported


_NAMES = st.text(alphabet="abz_.[] 019", min_size=1, max_size=20)


@given(st.dictionaries(st.integers(1, 1 << 47), st.tuples(st.integers(0, 1 << 20), _NAMES), max_size=20))
def test_perf_map_lines_are_sorted_hex_and_skip_empty(entries: dict[int, tuple[int, str]]) -> None:
    lines = _prof().perf_map_lines(entries)
    parsed = [(int(a, 16), int(s, 16), n) for a, s, n in (line.split(" ", 2) for line in lines)]
    assert parsed == sorted((a, s, n) for a, (s, n) in entries.items() if s > 0)


def test_main_without_perf_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    prof = _prof()
    monkeypatch.setattr(prof.shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "argv", ["profile_replay.py"])
    with pytest.raises(SystemExit, match="needs perf"):
        prof.main()
