"""The package's architecture, read from its source: layers depend one way
(``plan -> topology -> sim -> passes -> experiments -> cli``), the shared modules beside them
(``errors``, ``units``, ``fsutil``, ...) depend on no layer, and library code (everything but
the CLI) neither prints, exits nor reaches for the CLI's toolkit, nor rebinds module state."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nuna

LAYERS = ("plan", "topology", "sim", "passes", "experiments", "cli")
PACKAGE = Path(nuna.__file__).parent
SOURCES = sorted(PACKAGE.rglob("*.py"))


def _layer(path: Path) -> str | None:
    """The layer a module belongs to, or None for a shared module at the package's top."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else None


def _imported(path: Path, tree: ast.Module) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``tree``, relative ones resolved."""
    package = ["nuna", *path.relative_to(PACKAGE).parent.parts]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            # ``from nuna import sim`` names a layer in its alias, not its module
            if module == "nuna":
                found += [(node.lineno, f"nuna.{alias.name}") for alias in node.names]
    return found


def layer_violations(path: Path, tree: ast.Module) -> list[str]:
    """Imports of a layer above (or beside, for a shared module) the one ``path`` is in."""
    own = _layer(path)
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = []
    for line, module in _imported(path, tree):
        parts = module.split(".")
        if parts[0] != "nuna" or len(parts) < 2 or parts[1] not in rank:
            continue
        target = parts[1]
        if own is None or own not in rank or rank[target] > rank[own]:
            bad.append(f"{path.relative_to(PACKAGE.parent).as_posix()}:{line} imports {module}")
    return bad


FORBIDDEN_CALLS = {"print", "exit", "quit", "input", "breakpoint"}
FORBIDDEN_ATTRS = {("sys", "exit"), ("sys", "stdout"), ("sys", "stderr"), ("os", "_exit")}
FORBIDDEN_MODULES = {"typer", "click", "rich"}
#: (module, what it does) allowed, and why
ALLOWED = {
    ("nuna/experiments/executors.py", "uses os._exit"):
        "a sweep worker process whose driver died before it started ends itself; no caller's code runs there",
}


def library_violations(path: Path, tree: ast.Module) -> list[str]:
    """What library code must not do: print or exit, use the CLI toolkit, rebind globals."""
    where = path.relative_to(PACKAGE.parent).as_posix()
    bad: list[str] = []
    for line, module in _imported(path, tree):
        if module.split(".")[0] in FORBIDDEN_MODULES:
            bad.append(f"{where}:{line} imports {module}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            bad.append(f"{where}:{node.lineno} calls {node.func.id}()")
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and (node.value.id, node.attr) in FORBIDDEN_ATTRS):
            bad.append(f"{where}:{node.lineno} uses {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Global):
            bad.append(f"{where}:{node.lineno} rebinds module state (global {', '.join(node.names)})")
    return [b for b in bad if (where, b.split(" ", 1)[1]) not in ALLOWED]


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_the_package_has_every_layer() -> None:
    # guards the walk below against finding nothing (a moved package, a renamed layer)
    assert {_layer(p) for p in SOURCES} >= set(LAYERS)
    assert len(SOURCES) > 30


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_layers_depend_one_way(path: Path) -> None:
    assert layer_violations(path, _parse(path)) == []


@pytest.mark.parametrize("path", [p for p in SOURCES if _layer(p) != "cli"],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_library_code_neither_prints_nor_exits(path: Path) -> None:
    assert library_violations(path, _parse(path)) == []


# The checkers themselves, on made-up modules: each rule must be able to fail.
@pytest.mark.parametrize(("where", "source", "expected"), [
    ("plan/x.py", "from nuna.sim import replay", ["nuna/plan/x.py:1 imports nuna.sim"]),
    ("plan/x.py", "from ..topology import spec", ["nuna/plan/x.py:1 imports nuna.topology"]),
    ("plan/x.py", "from nuna import passes", ["nuna/plan/x.py:1 imports nuna.passes"]),
    ("sim/x.py", "import nuna.cli.common", ["nuna/sim/x.py:1 imports nuna.cli.common"]),
    ("units.py", "from .plan import ir", ["nuna/units.py:1 imports nuna.plan"]),
    ("passes/x.py", "from ..sim import replay\nfrom .base import X\nfrom nuna.errors import E", []),
    ("cli/x.py", "from nuna.experiments import sweep", []),
])
def test_layer_checker(where: str, source: str, expected: list[str]) -> None:
    assert layer_violations(PACKAGE / where, ast.parse(source)) == expected


@pytest.mark.parametrize(("source", "expected"), [
    ("print('x')", ["nuna/sim/x.py:1 calls print()"]),
    ("import sys\nsys.exit(1)", ["nuna/sim/x.py:2 uses sys.exit"]),
    ("import sys\nsys.stderr.write('x')", ["nuna/sim/x.py:2 uses sys.stderr"]),
    ("import typer", ["nuna/sim/x.py:1 imports typer"]),
    ("N = 0\ndef f():\n    global N\n    N += 1", ["nuna/sim/x.py:3 rebinds module state (global N)"]),
    ("def f(out):\n    out.print('x')\n    return sys_exit", []),
])
def test_library_checker(source: str, expected: list[str]) -> None:
    assert library_violations(PACKAGE / "sim/x.py", ast.parse(source)) == expected


def test_an_allowance_covers_its_own_module_only() -> None:
    exiting = ast.parse("import os\nos._exit(1)")
    assert library_violations(PACKAGE / "experiments/executors.py", exiting) == []
    assert library_violations(PACKAGE / "experiments/sweep.py", exiting) == [
        "nuna/experiments/sweep.py:2 uses os._exit"]
