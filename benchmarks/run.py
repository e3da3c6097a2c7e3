"""Run every benchmark in this folder and print their figures: ``python benchmarks/run.py [NAME ...]``.

A benchmark is a ``bench_*.py`` file with a ``main()`` that prints its figures. Each runs in its
own Python process (so its peak memory and numba compile state are its own), in name order;
NAMEs (``sim``, ``bench_noc``) select some. The exit status is 1 if any benchmark failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_RUNNER = "import runpy, sys; sys.argv = [sys.argv[1]]; runpy.run_path(sys.argv[0])['main']()"


def _selected(names: list[str]) -> list[Path]:
    found = sorted(HERE.glob("bench_*.py"))
    if not names:
        return found
    wanted = {n.removeprefix("bench_").removesuffix(".py") for n in names}
    chosen = [p for p in found if p.stem.removeprefix("bench_") in wanted]
    missing = wanted - {p.stem.removeprefix("bench_") for p in chosen}
    if missing:
        raise SystemExit(f"run.py: no benchmark named {', '.join(sorted(missing))} "
                         f"(have: {', '.join(p.stem for p in found)})")
    return chosen


def main() -> None:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__.strip())
        print(f"\nbenchmarks: {', '.join(p.stem for p in sorted(HERE.glob('bench_*.py')))}")
        return
    failed: list[str] = []
    for path in _selected(sys.argv[1:]):
        print(f"===== {path.stem} =====", flush=True)
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _RUNNER, str(path)], cwd=HERE.parent, check=False)
        elapsed = time.perf_counter() - started
        status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
        print(f"----- {path.stem}: {status}, {elapsed:.1f} s wall -----\n", flush=True)
        if proc.returncode != 0:
            failed.append(path.stem)
    if failed:
        print(f"failed: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
