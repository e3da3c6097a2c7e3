"""The NAR heuristic's size thresholds (``nuna.passes.nar.granularity_thresholds``): against a
brute-force minimum of the model's lines ``T(G) = L + B·x`` on random estimates, and against the
thresholds docs/passes.md quotes for the 8-GPU direct allgather, read from the page itself so
that the page cannot drift from the code unnoticed."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nuna.passes import PassContext
from nuna.passes.configs import choose_granularity
from nuna.passes.nar import GranularityEstimate, granularity_thresholds
from nuna.plan.generate import generate
from nuna.topology.spec import load_topology
from nuna.units import parse_size
from tests.conftest import REPO

PASSES_MD = REPO / "docs" / "passes.md"


def _lines(estimates: list[GranularityEstimate], size_bytes: int) -> dict[int, tuple[Fraction, Fraction]]:
    """G -> (intercept, slope) of ``T(G)`` over the size, exactly as the function reads them
    (``L`` fixed, ``B`` proportional to the size measured at ``size_bytes``)."""
    return {e.granularity: (Fraction(e.latency_ns), Fraction(e.serial_ns / size_bytes)) for e in estimates}


def _argmin(lines: dict[int, tuple[Fraction, Fraction]], x: Fraction) -> int:
    """The brute-force winner at size ``x``: least ``L + B·x``, ties to the coarser (smaller) G."""
    return min(lines, key=lambda g: (lines[g][0] + lines[g][1] * x, g))


@st.composite
def _estimates(draw: st.DrawFn) -> tuple[list[GranularityEstimate], int]:
    gs = draw(st.lists(st.integers(1, 64), min_size=1, max_size=7, unique=True))
    # distinct latencies: two lines level at size 0 are the case test_a_tie_at_size_zero_... covers
    lat = draw(st.lists(st.integers(0, 2000), min_size=len(gs), max_size=len(gs), unique=True))
    serial = draw(st.lists(st.integers(0, 5000), min_size=len(gs), max_size=len(gs)))
    size = draw(st.sampled_from([1, 7, 256, 1000, 4096, 1 << 20]))
    estimates = [GranularityEstimate(g, float(a), float(b), 0.0)
                 for g, a, b in zip(gs, lat, serial, strict=True)]
    return estimates, size


#: G=4 is fastest at small sizes, G=2 from 10/(3-1) = 5 bytes, G=1 from 20/(1-0) = 20 (G=4 and G=1
#: cross at 30/3 = 10, under G=2); G=12 (L=100, B=0.5) is never the least. At size_bytes 1, B is
#: the slope.
HAND_WORKED = [GranularityEstimate(4, 0.0, 3.0, 0.0), GranularityEstimate(2, 10.0, 1.0, 0.0),
               GranularityEstimate(1, 30.0, 0.0, 0.0), GranularityEstimate(12, 100.0, 0.5, 0.0)]


def test_hand_worked_thresholds() -> None:
    assert granularity_thresholds(HAND_WORKED, 1) == ((0.0, 4), (5.0, 2), (20.0, 1))
    # B is measured at size_bytes: the same times measured at 1 KiB put the cuts 1024 times further
    assert granularity_thresholds(HAND_WORKED, 1024) == ((0.0, 4), (5120.0, 2), (20480.0, 1))


@settings(max_examples=300, deadline=None)
@given(case=_estimates())
@example(case=(HAND_WORKED, 1))
def test_thresholds_are_where_the_least_line_changes(case: tuple[list[GranularityEstimate], int]) -> None:
    estimates, size = case
    out = granularity_thresholds(estimates, size)
    lines = _lines(estimates, size)
    cuts = [x for x, _ in out]
    gs = [g for _, g in out]
    assert cuts[0] == 0.0
    assert all(a < b for a, b in itertools.pairwise(cuts))
    assert all(a != b for a, b in itertools.pairwise(gs))
    # between two cuts (and past the last) one G wins throughout: the brute-force minimum's
    ends = [*cuts[1:], 2 * cuts[-1] + 1.0]
    for (start, g), end in zip(out, ends, strict=True):
        assert _argmin(lines, (Fraction(start) + Fraction(end)) / 2) == g
    # at a cut the outgoing and incoming winners are level (the cut is where they cross)
    for (_, before), (x, after) in itertools.pairwise(out):
        (a0, a1), (b0, b1) = lines[before], lines[after]
        ta, tb = a0 + a1 * Fraction(x), b0 + b1 * Fraction(x)
        assert abs(float(ta - tb)) <= 1e-9 * max(1.0, float(ta))


def test_a_tie_at_size_zero_goes_to_the_line_that_wins_above_it() -> None:
    # equal latency, G=1 twice the bytes per port: at every size above 0 G=2 is faster, and
    # estimate_granularity picks it, but the thresholds say G=1 from 0 on (their only crossing
    # is at 0, which the cuts leave out)
    estimates = [GranularityEstimate(1, 100.0, 2.0, 0.0), GranularityEstimate(2, 100.0, 1.0, 0.0)]
    assert granularity_thresholds(estimates, 1) == ((0.0, 2),)


# ---------------------------------------------------------------------------------------------
# docs/passes.md's example, read from the page


@dataclass(frozen=True)
class Claim:
    """One configuration's thresholds as the page states them: the granularities in size order,
    and the sizes (as written, in kB) where each after the first takes over."""

    config: str
    tbs_per_peer: int
    granularities: tuple[int, ...]
    cuts_kb: tuple[str, ...]


@dataclass(frozen=True)
class DocExample:
    topology: str
    ngpus: int
    sizes: tuple[int, ...]  # the sizes the page says the command was run at
    claims: tuple[Claim, ...]


def _find(pattern: str, text: str) -> re.Match[str]:
    m = re.search(pattern, text)
    assert m is not None, f"docs/passes.md no longer says {pattern!r}: update this test with the page"
    return m


@cache
def _doc_example() -> DocExample:
    text = " ".join(PASSES_MD.read_text().split())  # the claims wrap over lines
    head = _find(r"For the (\d+)-GPU direct allgather with one threadblock per peer on ([\w-]+): ", text)
    rest = text[head.end():]
    nap = _find(r"^NAP\+NAR uses G = (\d+) below ([\d.]+) kB, G = (\d+) up to ([\d.]+) kB, G = (\d+) "
                r"\(no NAR\) above", rest)
    ua = _find(r"UA\+NAR uses G = (\d+) below ([\d.]+) kB, G = (\d+) above;", rest)
    size = r"(\d+ ?[kMG]?i?B)"
    four = _find(r"with four threadblocks per peer NAP\+NAR uses G = (\d+) at every size "
                 rf"\(`nuna rewrite \S+ --config NAP\+NAR --size S` at {size}-{size},", rest)
    lo, hi = (parse_size(four.group(i).replace(" ", "")) for i in (2, 3))
    sizes = sorted({*(s for s in (lo << k for k in range(32)) if s <= hi), hi})
    claims = (Claim("NAP+NAR", 1, (int(nap[1]), int(nap[3]), int(nap[5])), (nap[2], nap[4])),
              Claim("UA+NAR", 1, (int(ua[1]), int(ua[3])), (ua[2],)),
              Claim("NAP+NAR", 4, (int(four[1]),), ()))
    return DocExample(head[2], int(head[1]), tuple(sizes), claims)


@cache
def _thresholds(claim: Claim, size: int) -> tuple[int, tuple[tuple[float, int], ...]]:
    """The heuristic's choice and thresholds for ``claim``'s plan at ``size``."""
    doc = _doc_example()
    plan = generate("allgather", doc.ngpus, tbs_per_peer=claim.tbs_per_peer)
    choice = choose_granularity(plan, claim.config, PassContext(load_topology(doc.topology), size))
    assert choice.granularity is not None
    return choice.granularity, granularity_thresholds(choice.estimates, size)


def _claim_id(claim: Claim) -> str:
    return f"{claim.config}-{claim.tbs_per_peer}tb"


@pytest.mark.parametrize("claim", _doc_example().claims, ids=_claim_id)
def test_documented_granularities_are_the_heuristics(claim: Claim) -> None:
    """At every size the page's command ran at, the thresholds name the page's granularities
    in its order, and the heuristic picks the one the page gives for that size."""
    for size in _doc_example().sizes:
        chosen, out = _thresholds(claim, size)
        assert tuple(g for _, g in out) == claim.granularities, size
        # the page's own cuts (each within its rounding, as the next test checks) place the size
        segment = sum(size >= float(kb) * 1000 for kb in claim.cuts_kb)
        assert chosen == claim.granularities[segment], size


def _cut_cases() -> list[object]:
    cases: list[object] = []
    for claim in _doc_example().claims:
        for i in range(len(claim.cuts_kb)):
            case_id = f"{_claim_id(claim)}-cut{i + 1}"
            cases.append(pytest.param(claim, i, id=case_id))
    return cases


@pytest.mark.parametrize(("claim", "index"), _cut_cases())
def test_documented_threshold_matches_to_its_rounding(claim: Claim, index: int) -> None:
    written = claim.cuts_kb[index]
    decimals = len(written.partition(".")[2])
    for size in _doc_example().sizes:
        _, out = _thresholds(claim, size)
        assert len(out) == len(claim.cuts_kb) + 1, size
        kb = out[index + 1][0] / 1000
        assert abs(kb - float(written)) <= 0.5 * 10.0 ** -decimals, (size, kb)


def test_rounding_noise_between_equal_slopes_is_no_threshold() -> None:
    # measured: a 4-GPU direct alltoall under NUMA+NAR at 4 KiB gave G = 1's B as
    # 2.5599999999999996 against G = 4's 2.56, and a third "threshold" at 7.26e20 bytes
    size = 4096
    estimates = [GranularityEstimate(1, 2000.0, 2.5599999999999996 * size, 0.0),
                 GranularityEstimate(4, 1800.0, 2.56 * size, 0.0)]
    assert granularity_thresholds(estimates, size) == ((0.0, 4),)


def test_equal_latencies_and_slopes_equal_but_for_rounding_go_to_the_smaller_granularity() -> None:
    # as estimate_granularity ties them (its times agree to 6 digits); before, the first entry
    # took G = 4 by a slope 4e-16 smaller
    size = 4096
    estimates = [GranularityEstimate(2, 10.0, 2.56 * size, 0.0),
                 GranularityEstimate(4, 10.0, 2.5599999999999996 * size, 0.0)]
    assert granularity_thresholds(estimates, size) == ((0.0, 2),)
