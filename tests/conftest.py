"""Shared fixtures: paths to the shared reference corpus, an in-process CLI runner and the
benchmark scripts as modules."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nuna.process import tune_gc

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    # this process compiles numba's kernels, as the nuna command does, and the compile takes up
    # to twice as long under Python's default collector thresholds (docs/simulator.md §6)
    tune_gc()


def _shared_dir() -> Path:
    env = os.environ.get("NUNA_SHARED")
    if env:
        return Path(env)
    return REPO.parent / "shared"


SHARED = _shared_dir()
PLANS_MSCCL = SHARED / "plans-msccl"
BOOKSIM_CSV = SHARED / "reference" / "noc-reference-8x8.csv"

#: set to 1 (as .ci/run does where the corpus is beside the checkout): a missing corpus is an error,
#: not a few hundred quiet skips (the MSCCL corpus tests, the Fig 7 golden, the BookSim check)
REQUIRE_SHARED = "NUNA_REQUIRE_SHARED"


def _missing_shared() -> list[Path]:
    return [p for p in (PLANS_MSCCL, BOOKSIM_CSV) if not p.exists()]


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = _missing_shared()
    if missing and os.environ.get(REQUIRE_SHARED) == "1":
        raise pytest.UsageError(f"{REQUIRE_SHARED} is set but the shared reference corpus is missing: "
                                f"{', '.join(map(str, missing))} (set NUNA_SHARED to its folder)")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    missing = _missing_shared()
    if missing:
        terminalreporter.write_line(
            f"WARNING: shared reference corpus missing ({', '.join(map(str, missing))}): the MSCCL corpus "
            "tests, the Fig 7 golden and the BookSim check did not run; set NUNA_SHARED to its folder",
            yellow=True)


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


def assert_clean_exit(res: CliResult) -> None:
    """Exit 0, or 1 with a clean error (``nuna validate`` gives each of a plan's errors a
    ``nuna: error:`` line of its own): never a traceback or an internal error."""
    assert res.code in (0, 1)
    assert "Traceback" not in res.err
    assert "internal error" not in res.err
    if res.code == 1:
        assert res.err.startswith("nuna: error: ")


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run ``nuna ARGS...`` in-process; returns exit code, stdout and stderr."""
    from nuna.cli import run

    def _run(*args: str) -> CliResult:
        code = run([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return _run


def msccl_plans() -> list[Path]:
    """Every real plan in the shared corpus (top level and from-repos/)."""
    if not PLANS_MSCCL.is_dir():
        return []
    return sorted(PLANS_MSCCL.glob("*.xml")) + sorted((PLANS_MSCCL / "from-repos").glob("*.xml"))


def pingpong(sends: int, proto: str = "Simple", cnt: int = 1) -> str:
    """Plan XML of two GPUs whose one threadblock each sends ``sends`` steps of ``cnt`` chunks to
    the other, then receives the other's as many: acyclic, but each receive comes after all of
    its threadblock's sends (a flow-control deadlock past the depth, or at the sizes that split
    a step into more calls than a connection's ring holds)."""
    gpus = []
    for g in range(2):
        p = 1 - g
        kinds = ["s"] * sends + ["r"] * sends
        offs = [(g * sends + k) * cnt for k in range(sends)] + [(p * sends + k) * cnt for k in range(sends)]
        steps = "".join(f'<step s="{i}" type="{kind}" srcbuf="o" srcoff="{o}" dstbuf="o" dstoff="{o}" '
                        f'cnt="{cnt}" depid="-1" deps="-1" hasdep="0"/>'
                        for i, (kind, o) in enumerate(zip(kinds, offs, strict=True)))
        gpus.append(f'<gpu id="{g}" i_chunks="{sends * cnt}" o_chunks="{2 * sends * cnt}" s_chunks="0">'
                    f'<tb id="0" send="{p}" recv="{p}" chan="0">{steps}</tb></gpu>')
    name = f"pp{sends}" if cnt == 1 else f"pp{sends}x{cnt}"
    return (f'<algo name="{name}" proto="{proto}" nchannels="1" nchunksperloop="{2 * sends * cnt}" ngpus="2" '
            f'coll="allgather" inplace="1" outofplace="0" minBytes="0" maxBytes="0">' + "".join(gpus)
            + "</algo>")


def _file_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def benchmark_module(name: str) -> ModuleType:
    """``benchmarks/NAME.py`` (a script, not a package) imported as a module, for tests of its logic."""
    return _file_module(REPO / "benchmarks" / f"{name}.py", f"nuna_bench_{name}")


def script_module(name: str) -> ModuleType:
    """``scripts/NAME.py`` imported as a module, as :func:`benchmark_module` does."""
    return _file_module(REPO / "scripts" / f"{name}.py", f"nuna_script_{name}")


def force_engine_state(monkeypatch: pytest.MonkeyPatch, module: ModuleType, **overrides: Any) -> None:
    """Make ``module``'s engine states (``module.eng.make_state``, as ``nuna.sim.replay`` and
    ``nuna.sim.noc`` call it) with ``overrides`` in place of what the caller asked: a model rule
    forced on or off under a replay that would choose otherwise. It wraps whatever
    ``make_state`` is in place, so it composes with a spy patched in before."""
    make_state = module.eng.make_state
    monkeypatch.setattr(module.eng, "make_state", lambda *a, **k: make_state(*a, **{**k, **overrides}))
