"""Random mutations of shipped topology files through the commands that read them: each ends in
exit 0 or one clean error line, never a traceback or an internal error.

The hand-picked bad files of ``test_spec.py`` name what each check says; this covers what nobody
picked: values swapped for zero, negatives, huge, tiny, non-finite or mistyped ones, lines
deleted, duplicated or swapped, in any of the kinds of chip the shipped files describe.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, CliResult, assert_clean_exit

#: a mesh chip, a smaller mesh one and an alpha-beta pod without a mesh
FILES = {name: (REPO / "topologies" / f"{name}.toml").read_text()
         for name in ("nuna-4die", "mi210-like", "flat-switch")}
PLAN = REPO / "plans" / "fig7_allgather_n2_c2.xml"
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?")
VALUES = st.sampled_from(["0", "-1", "1", "2", "3", "7", "0.5", "-0.0", "1e-9", "1e9", "1e300", "nan", "inf",
                          "-inf", "1000000", '"x"', "[]", "[1, 2]", "{}", "true"])

# the commands that read a chip whole (a replay, a diff of placements, the NoC mode, the picture);
# the replays are small (a 2-GPU plan at 64 KiB) so that a mutation making the chip slow still
# ends quickly
COMMANDS = [("topology", "show", "TOPO"),
            ("simulate", str(PLAN), "--size", "64KiB", "--topology", "TOPO"),
            ("diff", str(PLAN), "--size", "64KiB", "--topology", "TOPO", "--configs", "UA,NAP+NAR"),
            ("noc", "--topology", "TOPO", "--traffic", "edges", "--rate", "0.02", "--cycles", "500"),
            ("topology", "render", "TOPO", "-o", "OUT.svg")]


def _value_numbers(lines: list[str]) -> list[tuple[int, re.Match[str]]]:
    """The numbers a chip reads: not those of comments or of a value's ``source`` note."""
    return [(row, m) for row, line in enumerate(lines) if not line.lstrip().startswith("#")
            for m in NUMBER.finditer(line.split("source =", 1)[0])]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(sorted(FILES.values())))
    for _ in range(draw(st.integers(1, 3))):
        lines = text.split("\n")
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["number", "number", "value", "delete", "duplicate", "swap"]))
        spots = _value_numbers(lines) if kind == "number" else []
        if spots:
            row, m = spots[draw(st.integers(0, len(spots) - 1))]
            lines[row] = lines[row][:m.start()] + draw(VALUES) + lines[row][m.end():]
        elif kind == "value" and "=" in lines[i]:
            lines[i] = lines[i].split("=", 1)[0] + "= " + draw(VALUES)
        elif kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        text = "\n".join(lines)
    return text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(mutated(), st.sampled_from(COMMANDS))
def test_mutated_topologies_load_or_give_one_clean_error(run_cli: Callable[..., CliResult], tmp_path: Path,
                                                         text: str, command: tuple[str, ...]) -> None:
    topo = tmp_path / "chip.toml"
    topo.write_text(text)
    out = tmp_path / "out.svg"
    out.unlink(missing_ok=True)
    res = run_cli(*(str(topo) if a == "TOPO" else str(out) if a == "OUT.svg" else a for a in command))
    assert_clean_exit(res)
    if res.code == 1:
        assert res.err.count("\n") == 1  # a chip's first error stops every command
    if command[1] == "render":  # a picture, or nothing
        assert out.exists() == (res.code == 0)
