"""Where one replay's CPU time goes, by compiled function: ``perf`` sampling with numba's
kernels named.

``python benchmarks/profile_replay.py [--case C] [--hz N] [--top N] [--hot N] [--line-setups RULE]``

A case is ``benchmarks/ab.py``'s (``collective:gpus:size:tbs:packet[:windowed|:one-queue][@CONFIG]``,
direct plan, nuna-4die; default ``allgather:64:1MiB:1:256``). numba's machine code is anonymous
memory to ``perf``, so its samples show up as bare addresses. This script names them: it reads
the object code of every compiled engine function (from numba's cache, where an entry point such
as ``_loop_one_queue`` keeps the functions it calls; or from the library when compiled in this
process), takes each symbol's size from ``nm`` and its address from the loaded code, and writes
the map that ``perf`` reads for the process (``/tmp/perf-PID.map``). After a warm-up replay it
samples its own process (``perf record -e cpu-clock``, so it works where the machine has no
hardware counters) during one ``simulate`` and prints the share of samples per function: the
engine's kernels by name (most of the engine is inlined into ``_run_domain``, the event
handling both loops call), the interpreter,
the kernel's page clearing. ``--hot N`` adds the top kernel's N hottest instructions (offsets
into ``objdump -d`` of its object) and how many cache lines of code hold 90 % of its samples.

Needs ``perf`` (Debian's linux-perf) allowed to sample its own process; exits with a one-line
message otherwise. Not a ``bench_*`` file: ``benchmarks/run.py`` does not run it.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

HERE = Path(__file__).resolve().parent
_ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class Symbol:
    """A function of an object file: its name, offset in the object's ``.text`` and size."""

    name: str
    offset: int
    size: int


def parse_nm(text: str) -> list[Symbol]:
    """The code symbols (local, global, weak) of ``nm -S --defined-only`` output, in file order."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in ("t", "T", "W"):  # numba links callees in as weak
            out.append(Symbol(parts[3], int(parts[0], 16), int(parts[1], 16)))
    return out


def readable(symbol: str) -> str:
    """A numba symbol's dotted Python name (``_ZN4nuna3sim6engine11replay_loopB...`` ->
    ``nuna.sim.engine.replay_loop``), marked ``[wrapper]`` for the Python and C entry stubs;
    other names are returned as they are."""
    wrapper = symbol.startswith("cfunc.")
    name = symbol.removeprefix("cfunc.")
    if not name.startswith("_ZN"):
        return symbol
    parts = []
    i = 3
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        parts.append(name[j:j + n])
        i = j + n
    if parts and parts[0] == "cpython":
        parts, wrapper = parts[1:], True
    dotted = ".".join(parts) or symbol
    return dotted + " [wrapper]" if wrapper else dotted


def perf_map_lines(entries: dict[int, tuple[int, str]]) -> list[str]:
    """``perf``'s map lines (``START SIZE NAME``, hexadecimal) for ``{address: (size, name)}``."""
    return [f"{addr:x} {size:x} {name}" for addr, (size, name) in sorted(entries.items()) if size > 0]


def _object_codes(dispatcher: Any) -> list[tuple[Any, bytes]]:
    """``(library, ELF object)`` of every compiled signature of ``dispatcher``."""
    out = []
    for sig, cres in dispatcher.overloads.items():
        try:
            out.append((cres.library, bytes(cres.library._get_compiled_object())))
            continue
        except RuntimeError:  # loaded from numba's cache: the object code is in the cache file
            pass
        cache = getattr(dispatcher, "_cache", None)
        cache_file = getattr(cache, "_cache_file", None)
        if cache_file is None:
            continue
        for key, fname in cache_file._load_index().items():  # numba's private cache layout
            if key[0] != sig:
                continue
            for blob in _bytes_in(cache_file._load_data(fname)):
                if blob.startswith(_ELF_MAGIC):
                    out.append((cres.library, blob))
                    break
    return out


def _bytes_in(obj: Any, depth: int = 0) -> list[bytes]:
    if depth > 6:
        return []
    if isinstance(obj, (bytes, bytearray)):
        return [bytes(obj)]
    if isinstance(obj, (tuple, list)):
        return [b for x in obj for b in _bytes_in(x, depth + 1)]
    if isinstance(obj, dict):
        return [b for x in obj.values() for b in _bytes_in(x, depth + 1)]
    return []


@dataclass(frozen=True)
class Kernel:
    """A compiled function as loaded: its address, readable name, object file and symbol."""

    address: int
    name: str
    path: Path
    symbol: Symbol


def kernel_symbols(tmp: Path) -> list[Kernel]:
    """The engine's compiled functions, by address (their object files written into ``tmp``)."""
    import numba

    from nuna.sim import engine

    kernels: dict[int, Kernel] = {}
    for attr in sorted(dir(engine)):
        dispatcher = getattr(engine, attr)
        if not isinstance(dispatcher, numba.core.registry.CPUDispatcher):
            continue
        for k, (library, blob) in enumerate(_object_codes(dispatcher)):
            path = tmp / f"{attr}-{k}.o"
            path.write_bytes(blob)
            nm = subprocess.run(["nm", "-S", "--defined-only", str(path)], capture_output=True, text=True,
                                check=False)
            symbols = parse_nm(nm.stdout)
            for sym, addr in object_addresses(symbols, library.get_pointer_to_function).items():
                if sym.size > 0 and addr not in kernels:
                    kernels[addr] = Kernel(addr, readable(sym.name), path, sym)
    return [kernels[a] for a in sorted(kernels)]


def object_addresses(symbols: list[Symbol], lookup: Any) -> dict[Symbol, int]:
    """Load address of every symbol of one object. The JIT exports only the entry points
    (``lookup`` finds them, 0 or an error for the rest), but it loads the object's code section
    as one block, so every function sits at the entry's address plus its offset difference; if
    the exported symbols disagree on that base (code in several sections), only they are named."""
    found: dict[Symbol, int] = {}
    for sym in symbols:
        try:
            addr = int(lookup(sym.name))
        except Exception:  # a symbol of the object that the JIT did not export
            continue
        if addr:
            found[sym] = addr
    bases = {addr - sym.offset for sym, addr in found.items()}
    if len(bases) != 1:
        return found
    base = bases.pop()
    return {sym: base + sym.offset for sym in symbols}


def _disassembly(path: Path, sym: Symbol) -> dict[int, str]:
    """Instruction text by offset from the start of ``sym``."""
    proc = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--disassemble={sym.name}", str(path)],
                          capture_output=True, text=True, check=False)
    out: dict[int, str] = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\s+([0-9a-f]+):\s+(.*)", line)
        if m:
            text = re.sub(r"<[^>]{40,}>", "<...>", m.group(2))
            out[int(m.group(1), 16) - sym.offset] = text
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="allgather:64:1MiB:1:256",
                    help="collective:gpus:size:tbs:packet[:windowed|:one-queue][@CONFIG] (as ab.py)")
    ap.add_argument("--hz", type=int, default=2000, help="samples per second (default 2000)")
    ap.add_argument("--top", type=int, default=25, help="functions to list (default 25)")
    ap.add_argument("--hot", type=int, default=0, help="hottest instructions of the top kernel to list")
    ap.add_argument("--line-setups", default=None,
                    help="the packets' head set-up rule (SimOptions.line_setups; default: the simulator's)")
    args = ap.parse_args()
    if shutil.which("perf") is None or shutil.which("nm") is None or shutil.which("objdump") is None:
        raise SystemExit("profile_replay.py: needs perf (Debian: linux-perf), nm and objdump on PATH")
    sys.path.insert(0, str(HERE))
    from ab import parse_case  # the same case format as the A/B tool

    try:
        case = parse_case(args.case)
    except ValueError as exc:
        raise SystemExit(f"profile_replay.py: {exc}") from None

    from nuna.plan.generate import generate
    from nuna.sim import load_kernels, simulate
    from nuna.sim.replay import DEFAULT_LINE_SETUPS, LINE_SETUP_RULES, SimOptions
    from nuna.topology.spec import load_topology

    spec = load_topology("nuna-4die")
    load_kernels(spec)  # loads (or compiles) both replay loops, so the profile is the replay's
    plan = generate(case.collective, case.gpus, tbs_per_peer=case.tbs_per_peer)
    if case.config is not None:
        from nuna.passes import PassContext, apply_config
        plan = apply_config(plan, case.config, PassContext(spec, case.size_bytes))
    rule = args.line_setups or DEFAULT_LINE_SETUPS
    if rule not in LINE_SETUP_RULES:
        raise SystemExit(f"profile_replay.py: unknown --line-setups {rule!r} "
                         f"(one of {', '.join(LINE_SETUP_RULES)})")
    options = SimOptions(windowed=case.windowed, line_setups=rule)
    packet: int | Literal["auto"] = case.packet_bytes if isinstance(case.packet_bytes, int) else "auto"

    with tempfile.TemporaryDirectory(prefix="nuna-prof-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            kernels = kernel_symbols(tmp)
        except (AttributeError, KeyError, OSError) as exc:  # numba's private cache layout moved
            raise SystemExit(f"profile_replay.py: cannot read numba's compiled code: {exc}") from None
        map_path = Path(f"/tmp/perf-{os.getpid()}.map")
        map_path.write_text("\n".join(perf_map_lines({k.address: (k.symbol.size, k.name) for k in kernels}))
                            + "\n")
        data = tmp / "perf.data"
        try:
            rec = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(args.hz), "-p",
                                    str(os.getpid()), "-o", str(data)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1.0)  # perf attaches asynchronously
            if rec.poll() is not None:
                err = (rec.stderr.read().decode(errors="replace").strip().splitlines() if rec.stderr else [])
                raise SystemExit(f"profile_replay.py: perf record failed: {(err or ['no output'])[-1]}")
            t0 = time.process_time()
            res = simulate(plan, spec, case.size_bytes, packet_bytes=packet, options=options)
            cpu = time.process_time() - t0
            rec.send_signal(signal.SIGINT)
            rec.wait()
            script = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,sym"], capture_output=True,
                                    text=True, check=False)
        finally:
            map_path.unlink(missing_ok=True)
        samples: collections.Counter[str] = collections.Counter()
        starts = [k.address for k in kernels]
        offsets: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
        for line in script.stdout.splitlines():
            parts = line.split(None, 1)
            if not parts:
                continue
            samples[parts[1].strip() if len(parts) > 1 else "[unknown]"] += 1
            ip = int(parts[0], 16)
            i = bisect.bisect_right(starts, ip) - 1
            if i >= 0 and ip < starts[i] + kernels[i].symbol.size:
                offsets[i][ip - starts[i]] += 1
        total = sum(samples.values())
        print(f"{args.case}: simulate {cpu:.2f} CPU s, {res.events:,} flit-hop events "
              f"({res.events / max(cpu, 1e-9) / 1e6:.2f} M/s), {total:,} samples at {args.hz} Hz")
        print(f"{'share':>7} {'samples':>8}  function")
        for name, n in samples.most_common(args.top):
            print(f"{100 * n / max(total, 1):6.2f}% {n:8d}  {name}")
        if args.hot and offsets:
            i = max(offsets, key=lambda k: (offsets[k].total(), -k))
            top, hits = kernels[i], offsets[i]
            lines: collections.Counter[int] = collections.Counter()
            for off, n in hits.items():
                lines[off // 64] += n
            acc = need = 0
            for n in sorted(lines.values(), reverse=True):
                acc += n
                need += 1
                if acc >= 0.9 * hits.total():
                    break
            print(f"\n{top.name}: {hits.total():,} samples over {len(lines)} cache lines of code; "
                  f"90 % in {need} lines ({need * 64:,} bytes)")
            asm = _disassembly(top.path, top.symbol)
            for off, n in hits.most_common(args.hot):
                print(f"{100 * n / hits.total():6.2f}%  +0x{off:05x}  {asm.get(off, '?')}")


if __name__ == "__main__":
    main()
