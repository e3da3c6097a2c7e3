"""Every command that writes a file checks it can before its work: an unwritable output is a
one-line error (exit 1) with nothing computed or printed, not a lost result after a long run.
And a result is written before its summary is printed, so a pipe closed early (``| head``)
does not lose it either."""

from __future__ import annotations

import errno
import io
import json
import sys
from pathlib import Path

import pytest

from nuna.plan.generate import generate
from nuna.plan.xml import save


def _commands(plan: Path, bad: Path) -> list[tuple[str, ...]]:
    return [
        ("simulate", str(plan), "--size", "1MiB", "--json", str(bad)),
        ("simulate", str(plan), "--size", "1MiB", "--trace", str(bad)),
        ("simulate", str(plan), "--size", "1MiB", "--bounds-only", "--json", str(bad)),
        ("noc", "--rate", "0.1", "--cycles", "200", "--json", str(bad)),
        ("rewrite", str(plan), "--config", "NAP+NAR", "-o", str(bad)),
        ("diff", str(plan), "--size", "1MiB", "--json", str(bad)),
        ("generate", "allgather", "--gpus", "4", "-o", str(bad)),
        ("dag", str(plan), "-o", str(bad)),
        ("topology", "render", "-o", str(bad) + ".svg"),
        ("topology", "export", "-o", str(bad)),
        ("topology", "characterize", "--targets", "4", "-o", str(bad) + ".svg"),
    ]


@pytest.mark.parametrize("case", range(len(_commands(Path("p"), Path("o")))))
@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_unwritable_output_fails_before_the_work(run_cli, tmp_path: Path, case: int, where: str) -> None:
    plan = tmp_path / "ag4.xml"
    save(generate("allgather", 4), plan)
    if where == "a folder":
        bad = tmp_path / "out"
        cmd = _commands(plan, bad)[case]
        # the output argument itself names the folder (render's gets a suffix: make that one)
        Path(cmd[-1]).mkdir()
    else:
        cmd = _commands(plan, tmp_path / "no" / "such" / "out")[case]
    res = run_cli(*cmd)
    assert res.code == 1, (cmd, res.out, res.err)
    assert res.out == ""
    assert res.err.count("\n") == 1
    expected = "does not exist" if where == "missing folder" else "it is a folder"
    assert expected in res.err
    assert cmd[-1] in res.err


def test_demo_into_a_file_fails_before_the_work(run_cli, tmp_path: Path) -> None:
    target = tmp_path / "demo"
    target.write_text("keep")
    res = run_cli("demo", "-o", target)
    assert res.code == 1
    assert res.out == ""
    assert res.err == f"nuna: error: {target}: not a folder\n"
    assert target.read_text() == "keep"


class _ClosedPipe(io.TextIOBase):
    """Standard output after the reader of a pipe has gone (``nuna ... | head -1`` once head
    has its line): every write fails with EPIPE."""

    def write(self, s: str) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


@pytest.mark.parametrize("cmd", [
    ("simulate", "{plan}", "--size", "64KiB", "--json", "{out}"),
    ("simulate", "{plan}", "--size", "64KiB", "--bounds-only", "--json", "{out}"),
    ("noc", "--rate", "0.1", "--cycles", "200", "--json", "{out}"),
    ("diff", "{plan}", "--size", "64KiB", "--configs", "UA,NAP+NAR", "--json", "{out}"),
])
def test_a_closed_pipe_does_not_lose_the_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              cmd: tuple[str, ...]) -> None:
    from nuna.cli import run

    plan = tmp_path / "ag2.xml"
    save(generate("allgather", 2), plan)
    out = tmp_path / "result.json"
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    with pytest.raises(SystemExit) as exit_info:  # click's quiet exit on EPIPE
        run([a.format(plan=plan, out=out) for a in cmd])
    assert exit_info.value.code == 1
    assert isinstance(json.loads(out.read_text()), dict)


def test_a_closed_pipe_does_not_lose_the_demo(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from nuna.cli import run

    assert run_cli("demo", "-o", tmp_path / "open", "--tbs-per-peer", "1").code == 0
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    with pytest.raises(SystemExit):
        run(["demo", "-o", str(tmp_path / "closed"), "--tbs-per-peer", "1"])
    written = {p.name: p.read_bytes() for p in (tmp_path / "open").iterdir()}
    assert written
    assert {p.name: p.read_bytes() for p in (tmp_path / "closed").iterdir()} == written


@pytest.mark.parametrize(("cmd", "message"), [
    # an option that would be ignored, or an output that would overwrite another, is an error
    (("simulate", "{plan}", "--size", "64KiB", "--nar-granularity", "2"),
     "--nar-granularity applies to a --config that routes with NAR"),
    (("simulate", "{plan}", "--size", "64KiB", "--json", "{out}", "--trace", "{out}"),
     "given for two outputs"),
    (("diff", "{plan}", "--size", "4KiB", "--configs", "UA,NAP", "-g", "2"),
     "none of UA, NAP routes with NAR"),
    (("diff", "{plan}", "--size", "4KiB", "--configs", "UA,,NAP"), "an empty configuration name"),
    (("diff", "{plan}", "--size", "4KiB", "--configs", "UA,NAP,ua"),
     "configuration UA given twice in 'UA,NAP,ua'"),
    (("diff", "{plan}", "--size", "4KiB", "--configs", "UA,NAP+NAR", "-g", "5"),
     "NAR granularity 5 is not valid"),
])
def test_options_that_would_be_ignored_or_collide_are_refused(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                              cmd: tuple[str, ...], message: str) -> None:
    plan = tmp_path / "ag4.xml"
    save(generate("allgather", 4), plan)
    out = tmp_path / "result.json"
    res = run_cli(*(a.format(plan=plan, out=out) for a in cmd))
    assert res.code == 1, (res.out, res.err)
    assert res.out == ""
    assert res.err.count("\n") == 1
    assert message in res.err
    assert not out.exists()



#: (command, the input its output names); {out} is that input or a hard link to it
REPLACING_AN_INPUT = [
    (("simulate", "{plan}", "--size", "64KiB", "--json", "{out}"), "plan"),
    (("simulate", "{plan}", "--size", "64KiB", "--topology", "{topo}", "--trace", "{out}"), "topo"),
    (("rewrite", "{plan}", "--config", "NAP", "-o", "{out}"), "plan"),
    (("diff", "{plan}", "--size", "64KiB", "--json", "{out}"), "plan"),
    (("dag", "{plan}", "-o", "{out}"), "plan"),
    (("topology", "export", "{topo}", "-o", "{out}"), "topo"),
    (("topology", "render", "{topo}", "-o", "{out}", "--overlay", "{result}"), "result"),
    (("topology", "characterize", "{result}", "--targets", "4", "-o", "{out}"), "result"),  # a picture
]


@pytest.mark.parametrize(("cmd", "replaced"), REPLACING_AN_INPUT)
@pytest.mark.parametrize("link", [False, True])
def test_an_output_naming_an_input_is_refused_and_the_input_kept(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                 cmd: tuple[str, ...], replaced: str,
                                                                 link: bool) -> None:
    # nuna dag in.xml -o in.xml wrote GraphML over the plan; a hard link names the same file too
    inputs = {"plan": tmp_path / "ag2.xml", "topo": tmp_path / "chip.toml", "result": tmp_path / "r.svg"}
    save(generate("allgather", 2), inputs["plan"])
    shipped = Path(__file__).resolve().parents[1] / "topologies" / "nuna-4die.toml"
    inputs["topo"].write_bytes(shipped.read_bytes())
    inputs["result"].write_text("{}")
    before = {name: path.read_bytes() for name, path in inputs.items()}
    out = inputs[replaced]
    if link:
        out = out.with_name("alias" + out.suffix)
        out.hardlink_to(inputs[replaced])
    res = run_cli(*(a.format(out=out, **inputs) for a in cmd))
    assert res.code == 1, (res.out, res.err)
    assert res.err.count("\n") == 1
    assert f"{out}: is also an input ({inputs[replaced]})" in res.err
    assert {name: path.read_bytes() for name, path in inputs.items()} == before
