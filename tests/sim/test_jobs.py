"""The replay's jobs (``nuna.sim.engine.build_jobs``) against their definition written out.

A job is one packet's worth of a step's lines that share a route class (the stacks of load 1,
the local store and the remote store, and the remote store's I/O port; load 0 and any further
loads take the stacks of the line that opens the job); a line joins the last
job of its class while that has room, and a node's jobs are issued in the order of their mean
line index. The compiled version walks the pages run by run and keeps its classes in a small
table; the reference below goes line by line with a dict, dividing as the definition says.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.sim import engine as eng
from nuna.topology.address import io_port, mix64, nar_domain_ports, nar_port_table, stack_domains
from nuna.topology.spec import load_topology

SPEC = load_topology("nuna-4die")
PAGE = SPEC.chip.page_bytes
NO_ADDRESS = -1


def _reference(sizes, gpus, peers, addrs, page_base, page_stack, page_phys, nar, domains, line, packet,
               max_open):  # type: ignore[no-untyped-def]
    """``(offsets, bytes, classes)`` of every node's jobs, line by line."""
    ptr, out_bytes, out_cls = [0], [], []
    for n, nbytes in enumerate(sizes):
        jobs: list[list] = []  # [bytes, sum of line indices, class]
        if nbytes > 0 and any(a >= 0 for a in addrs[n]):
            open_: dict[tuple[int, ...], int] = {}
            for li in range(-(-nbytes // line)):
                b = min(line, nbytes - li * line)
                stacks, page3, within3 = [], -1, 0
                for k, addr in enumerate(addrs[n]):
                    if addr < 0:
                        stacks.append(-1)
                        continue
                    owner_gpu = peers[n] if k == 3 else gpus[n]
                    page = page_base[owner_gpu] + (addr + li * line) // PAGE
                    stacks.append(int(page_stack[page]))
                    if k == 3:
                        page3, within3 = page, (addr + li * line) % PAGE
                port = -1
                if page3 >= 0:
                    phys = int(page_phys[page3]) + within3
                    if domains[n] < 0:  # the domain owning the destination stack
                        port = io_port(SPEC, phys, nar)
                    else:  # the step's own domain (a topology choosing ports by CU)
                        row = nar_domain_ports(SPEC, nar)[domains[n]]
                        port = row[mix64(phys // SPEC.chip.address_hash_granularity_bytes) % len(row)]
                cls = (stacks[0], stacks[1], stacks[2], port, stacks[3], *stacks[4:])
                if packet > line:
                    key = (stacks[1], stacks[2], port, stacks[3])
                    if key not in open_:
                        if len(open_) >= max_open:
                            open_.clear()
                        open_[key] = -1
                    j = open_[key]
                    if j >= 0 and jobs[j][0] + b <= packet:
                        jobs[j][0] += b
                        jobs[j][1] += li
                        continue
                    open_[key] = len(jobs)
                jobs.append([b, li, cls])
            if packet > line:
                jobs.sort(key=lambda job: job[1] / -(-job[0] // line))  # stable, as mergesort
        out_bytes += [job[0] for job in jobs]
        out_cls += [job[2] for job in jobs]
        ptr.append(ptr[-1] + len(jobs))
    return ptr, out_bytes, out_cls


@settings(max_examples=60, deadline=None)
@given(data=st.data(), line=st.sampled_from([256, 200, 512, 5000]), packets=st.integers(1, 40),
       nar=st.sampled_from([1, 2, 3, 4]), max_open=st.sampled_from([1, 2, 3, 1 << 17]),
       further=st.sampled_from([0, 0, 1, 3]))
def test_build_jobs_follows_its_definition(data, line: int, packets: int, nar: int,  # type: ignore[no-untyped-def]
                                           max_open: int, further: int) -> None:
    """(``further``: loads beyond the first two, as a fused re's other sources)"""
    packet = line * packets
    npages = 24  # per GPU, two GPUs
    page_stack = np.array(data.draw(st.lists(st.integers(0, 15), min_size=2 * npages, max_size=2 * npages)),
                          dtype=np.int64)
    slots = data.draw(st.lists(st.integers(0, 4000), min_size=2 * npages, max_size=2 * npages, unique=True))
    page_phys = (np.array(slots, dtype=np.int64) * 16 + page_stack) * PAGE  # as physical_address
    page_base = np.array([0, npages], dtype=np.int64)
    nodes = data.draw(st.integers(1, 5))
    sizes, gpus, peers, addrs, domains = [], [], [], [], []
    for _ in range(nodes):
        size = data.draw(st.integers(0, 6 * PAGE))
        room = npages * PAGE - size  # every address keeps the node's bytes on its GPU's pages
        addrs.append([data.draw(st.one_of(st.just(NO_ADDRESS), st.integers(0, room))) for _ in range(4)]
                     + [data.draw(st.integers(0, room)) for _ in range(further)])
        sizes.append(size)
        gpus.append(data.draw(st.integers(0, 1)))
        peers.append(data.draw(st.integers(0, 1)))
        domains.append(data.draw(st.integers(-1, nar - 1)))
    args = (np.array(sizes, np.int64), np.array(gpus, np.int32), np.array(peers, np.int32),
            np.array(addrs, np.int64), page_base, page_stack, page_phys, PAGE,
            SPEC.chip.address_hash_granularity_bytes, stack_domains(SPEC, nar), nar_port_table(SPEC, nar),
            np.array(domains, np.int64), line, packet)
    ptr = np.zeros(nodes + 1, np.int64)
    total, j_bytes, j_cls = eng.build_jobs(*args, ptr, 1, max_open)
    want_ptr, want_bytes, want_cls = _reference(sizes, gpus, peers, addrs, page_base, page_stack, page_phys,
                                                nar, domains, line, packet, max_open)
    assert ptr.tolist() == want_ptr
    assert total == want_ptr[-1]
    assert j_bytes[:total].tolist() == want_bytes
    assert [tuple(row) for row in j_cls[:total].tolist()] == want_cls


def test_many_classes_grow_the_class_table() -> None:
    # one node storing to pages on all 16 stacks over every port, with loads and local stores
    # on other stacks: hundreds of classes, past the table's first 512 rows only with many
    # (s1, s2, s3) combinations, so it is built here to need them and checked against the reference
    npages = 2048
    rng = np.random.default_rng(7)
    page_stack = rng.integers(0, 16, 2 * npages).astype(np.int64)
    page_phys = (np.arange(2 * npages, dtype=np.int64) * 16 + page_stack) * PAGE
    size = 600 * PAGE
    addrs = [[0, 700 * PAGE, 1400 * PAGE, 100 * PAGE]]
    args = (np.array([size], np.int64), np.zeros(1, np.int32), np.ones(1, np.int32),
            np.array(addrs, np.int64), np.array([0, npages], np.int64), page_stack, page_phys, PAGE, 256,
            stack_domains(SPEC, 1), nar_port_table(SPEC, 1), np.array([-1], np.int64), 256, 1 << 20)
    ptr = np.zeros(2, np.int64)
    total, j_bytes, j_cls = eng.build_jobs(*args, ptr, 1)
    want_ptr, want_bytes, want_cls = _reference([size], [0], [1], addrs, np.array([0, npages]), page_stack,
                                                page_phys, 1, [-1], 256, 1 << 20, 1 << 17)
    assert len({(s1, s2, s3) for _, s1, s2, _, s3 in want_cls}) > 512  # the table had to grow
    assert ptr.tolist() == want_ptr
    assert j_bytes[:total].tolist() == want_bytes
    assert [tuple(row) for row in j_cls[:total].tolist()] == want_cls


_BOUNDS_SCRIPT = """
import numpy as np
from nuna.sim import engine as eng
from nuna.topology.address import nar_port_table, stack_domains
from nuna.topology.spec import load_topology
spec = load_topology("nuna-4die")
page = spec.chip.page_bytes
npages = 24  # per GPU, two GPUs: GPU 1's last page is the last of page_stack
page_stack = np.arange(2 * npages, dtype=np.int64) % 16
page_phys = (np.arange(2 * npages, dtype=np.int64) * 16 + page_stack) * page
for line, packets in ((256, 1), (256, 4), (200, 3), (5000, 2)):
    for size in (1, 257, 3 * page, 3 * page + 1):
        end = npages * page - size  # every address's last byte on the last page of its GPU
        args = (np.array([size], np.int64), np.array([1], np.int32), np.array([1], np.int32),
                np.array([[end, end, end, end]], np.int64), np.array([0, npages], np.int64), page_stack,
                page_phys, page, spec.chip.address_hash_granularity_bytes, stack_domains(spec, 2),
                nar_port_table(spec, 2), np.array([-1], np.int64), line, line * packets)
        eng.build_jobs(*args, np.zeros(2, np.int64), 1)
print("ok")
"""


def test_build_jobs_stays_within_its_arrays(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Compiled with numba's bounds checks (in a cache of its own): buffers that end on the last
    page of the last GPU. The page walk used to look up the stack of the page after a step's
    last line, one past the end of ``page_stack`` there: a read the unchecked build never noticed."""
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", _BOUNDS_SCRIPT], env=env, capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
