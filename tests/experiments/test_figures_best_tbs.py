"""The figures' "best-performing number of threadblocks" reduction (paper §5.1): per
configuration the fastest ``tbs_per_peer`` wins, UA included, groups never mix, the choice does
not depend on the records' order, and Fig 13 (whose threadblock counts are its series) is left
alone."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nuna.errors import InputError
from nuna.experiments.figures import best_tbs_per_peer, figure_data, figure_spec_path, quick_spec, render
from nuna.experiments.spec import expand
from nuna.experiments.sweep import load_sweep_spec

REPO = Path(__file__).resolve().parents[2]
NEW_KEYS = ("tbs_per_peer_best", "tbs_per_peer_times_ns", "baseline_tbs_per_peer")
CONFIGS = ("UA", "NUMA+NAR", "NAP+NAR")


def record(config: str, time_ns: float, *, tbs: int = 1, collective: str = "allgather", gpus: int = 8,
           size: int = 1_000_000, gemm: int = 0, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    gran = "heuristic" if config.endswith("+NAR") else None
    point = {"algo": "direct", "collective": collective, "config": config, "gemm_bytes": gemm, "gpus": gpus,
             "nar_granularity": gran, "packet_bytes": "auto", "seed": 0, "size_bytes": size,
             "tbs_per_peer": tbs, "topology": "nuna-4die"}
    return {"point": point, "result": {"time_ns": time_ns, "nar_granularity_used": 2, **(extra or {})}}


# A grid of records: 2 collectives x 2 sizes x 3 configs x some tbs values, times drawn small so
# that ties (and the tie rule) are exercised.
COLLS = ("allgather", "alltoall")
SIZES = (100_000, 10**7)


@st.composite
def grids(draw: st.DrawFn, tbs_values: st.SearchStrategy[list[int]] | None = None) -> list[dict[str, Any]]:
    if tbs_values is None:
        tbs_values = st.lists(st.sampled_from([1, 2, 4, 16, 144]), min_size=1, max_size=4, unique=True)
    tbs = draw(tbs_values)
    out = []
    for coll in COLLS:
        for size in SIZES:
            for config in CONFIGS:
                for k in tbs:
                    time_ns = float(draw(st.integers(1, 6)))
                    out.append(record(config, time_ns, tbs=k, collective=coll, size=size))
    return out


def canonical(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True)


def group_of(row_or_point: dict[str, Any]) -> tuple[Any, ...]:
    return (row_or_point["collective"], row_or_point["size_bytes"], row_or_point["config"])


@settings(max_examples=60, deadline=None)
@given(records=grids())
def test_each_row_is_its_own_groups_fastest_count_and_keeps_every_time(records: list[dict[str, Any]]) -> None:
    rows = figure_data("fig9", records)["rows"]
    assert len(rows) == len(COLLS) * len(SIZES) * len(CONFIGS)
    assert len({group_of(r) for r in rows}) == len(rows)  # one row per group, none merged
    for row in rows:
        mine = [(r["point"]["tbs_per_peer"], r["result"]["time_ns"]) for r in records
                if group_of(r["point"]) == group_of(row)]
        # times recorded are exactly this group's (no other collective, size or config mixed in)
        assert [(m["tbs_per_peer"], m["time_ns"]) for m in row["tbs_per_peer_times_ns"]] == sorted(mine)
        fastest = min(t for _, t in mine)
        assert row["time_ns"] == fastest
        assert row["tbs_per_peer_best"] == min(k for k, t in mine if t == fastest)  # ties: fewer threadblocks
        assert row["tbs_per_peer"] == row["tbs_per_peer_best"]


@settings(max_examples=60, deadline=None)
@given(records=grids(), seed=st.integers(0, 2**32 - 1))
def test_the_choice_does_not_depend_on_the_records_order(records: list[dict[str, Any]], seed: int) -> None:
    shuffled = list(records)
    random.Random(seed).shuffle(shuffled)
    a = figure_data("fig9", records)["rows"]
    b = figure_data("fig9", shuffled)["rows"]
    assert sorted(map(canonical, a)) == sorted(map(canonical, b))


def test_rows_follow_the_first_record_of_each_group() -> None:
    records = [record("UA", 5.0, tbs=1, size=10**7), record("UA", 9.0, tbs=1), record("UA", 4.0, tbs=4),
               record("UA", 1.0, tbs=4, size=10**7)]
    rows = figure_data("fig9", records)["rows"]
    assert [(r["size_bytes"], r["tbs_per_peer_best"]) for r in rows] == [(10**7, 4), (1_000_000, 4)]


def test_the_speedup_is_best_ua_over_best_configuration() -> None:
    # at the same count (16) the speedup would be 80/40 = 2.0 and at 1 it would be 100/90;
    # the paper compares tuned implementations: best UA (50 at 4) over best NAP+NAR (40 at 16)
    records = [record("UA", t, tbs=k) for k, t in ((1, 100.0), (4, 50.0), (16, 80.0))]
    records += [record("NAP+NAR", t, tbs=k) for k, t in ((1, 90.0), (4, 70.0), (16, 40.0))]
    ua, nap = figure_data("fig11", records)["rows"]
    assert (ua["tbs_per_peer_best"], ua["speedup"]) == (4, pytest.approx(1.0))
    assert (nap["tbs_per_peer_best"], nap["baseline_tbs_per_peer"]) == (16, 4)
    assert nap["speedup"] == pytest.approx(50.0 / 40.0)


def test_a_missing_baseline_is_not_invented() -> None:
    rows = figure_data("fig9", [record("NAP+NAR", 10.0, tbs=1), record("NAP+NAR", 8.0, tbs=4)])["rows"]
    assert [(r["speedup"], r["baseline_tbs_per_peer"]) for r in rows] == [(None, None)]


@settings(max_examples=40, deadline=None)
@given(records=grids(tbs_values=st.sampled_from([[1], [144]]).map(list)))
def test_one_count_per_point_gives_the_unreduced_rows(records: list[dict[str, Any]]) -> None:
    # fig13 keeps the unreduced rows (its counts are its series): with one count per point the
    # reduced rows are those, in the same order, plus the new keys
    reduced = figure_data("fig9", records)["rows"]
    plain = figure_data("fig13", records)["rows"]
    assert [{k: v for k, v in r.items() if k not in NEW_KEYS} for r in reduced] == plain
    for row in reduced:
        only = {"tbs_per_peer": row["tbs_per_peer"], "time_ns": row["time_ns"]}
        assert row["tbs_per_peer_times_ns"] == [only]


def test_fig13_keeps_both_counts_as_its_series() -> None:
    records = [record("UA", 10.0, tbs=144), record("UA", 20.0, tbs=1),
               record("UA+NAR", 5.0, tbs=144), record("UA+NAR", 40.0, tbs=1)]
    rows = figure_data("fig13", records)["rows"]
    assert [(r["config"], r["tbs_per_peer"]) for r in rows] == [("UA", 144), ("UA", 1), ("UA+NAR", 144),
                                                                ("UA+NAR", 1)]
    assert [r["speedup"] for r in rows] == pytest.approx([1.0, 1.0, 2.0, 0.5])  # each against its own count
    assert not any(k in r for r in rows for k in NEW_KEYS)


def test_two_results_for_one_point_are_an_input_error() -> None:
    with pytest.raises(InputError, match="same point"):
        best_tbs_per_peer([record("UA", 1.0, tbs=4), record("UA", 2.0, tbs=4)])


def test_fig12_utilisation_and_fig14_relative_time_come_from_the_winner() -> None:
    def ports(u: float) -> dict[str, Any]:
        return {"io_ports": [{"egress_utilization": u}]}

    fig12 = [record("UA", 100.0, tbs=1, gpus=2), record("UA", 60.0, tbs=4, gpus=2),
             record("NAP+NAR", 50.0, tbs=1, gpus=2, extra=ports(0.1)),
             record("NAP+NAR", 30.0, tbs=4, gpus=2, extra=ports(0.7))]
    rows = figure_data("fig12", fig12)["rows"]
    assert rows[1]["utilisation"] == pytest.approx(0.7)
    assert rows[1]["speedup"] == pytest.approx(2.0)

    # beside a GEMM the collective's own time decides, and "UA alone" is UA's best alone
    fig14 = [record("UA", 1000.0, tbs=1), record("UA", 800.0, tbs=4),
             record("NAP+NAR", 9e9, tbs=1, gemm=10**6, extra={"collective_time_ns": 1200.0}),
             record("NAP+NAR", 1.0, tbs=4, gemm=10**6, extra={"collective_time_ns": 1600.0})]
    rows = figure_data("fig14", fig14)["rows"]
    assert [(r["tbs_per_peer_best"], r["relative_time"]) for r in rows] == [(4, pytest.approx(1.0)),
                                                                             (1, pytest.approx(1.5))]


def latency_record(config: str, time_ns: float, tbs: int, mean: float) -> dict[str, Any]:
    lat = {"mean": mean, "max": mean + 100.0, "p50": mean, "p99": mean + 50.0, "count": 3,
           "histogram": {"bin_ns": 10.0, "counts": [0, 1, 2]}}
    return record(config, time_ns, tbs=tbs, extra={"remote_store_latency_ns": lat})


def test_fig10_shows_each_configurations_fastest_count_and_names_it() -> None:
    records = [latency_record("UA", 300.0, 1, 900.0), latency_record("UA", 200.0, 12, 1100.0),
               latency_record("NAP+NAR", 250.0, 1, 700.0), latency_record("NAP+NAR", 260.0, 12, 800.0)]
    data = figure_data("fig10", records)
    assert [(p["config"], p["tbs_per_peer_best"], p["mean_ns"]) for p in data["panels"]] == [
        ("UA", 12, 1100.0), ("NAP+NAR", 1, 700.0)]
    titles = [ax.get_title() for ax in render("fig10", data).axes]
    assert titles == ["(a) UA, 12 threadblocks per peer (fastest of 1, 12)",
                      "(b) NAP+NAR, 1 threadblocks per peer (fastest of 1, 12)"]


def test_fig10_with_one_count_keeps_the_plain_title() -> None:
    data = figure_data("fig10", [latency_record("UA", 300.0, 1, 900.0)])
    assert [ax.get_title() for ax in render("fig10", data).axes] == ["(a) UA"]


# ---------------------------------------------------------------------------------------------
# the specs

def spec(name: str) -> Any:
    return load_sweep_spec(figure_spec_path(name, REPO / "scripts" / "sweeps"))


@pytest.mark.parametrize(("name", "tbs"), [("fig9", (1,)), ("fig11", (1, 4, 16)), ("fig12", (1, 4, 16)),
                                           ("fig14", (1, 4, 16)), ("fig13", (144, 1))])
def test_figure_specs_search_the_threadblock_counts_they_can_afford(name: str, tbs: tuple[int, ...]) -> None:
    assert spec(name).tbs_per_peer == tbs


@pytest.mark.parametrize("name", ["fig9", "fig11", "fig12", "fig13", "fig14"])
def test_quick_grids_keep_one_count_except_fig13(name: str) -> None:
    full = spec(name)
    counts = {p.tbs_per_peer for p in expand(quick_spec(name, full))}
    assert counts == (set(full.tbs_per_peer) if name == "fig13" else {full.tbs_per_peer[0]})


def test_speedup_figures_name_the_counts_searched_only_when_there_were_several() -> None:
    several = [record(c, 10.0 + k, tbs=k) for c in ("UA", "NAP+NAR") for k in (16, 1, 4)]
    one = [record(c, 10.0) for c in ("UA", "NAP+NAR")]
    title = render("fig11", figure_data("fig11", several)).get_suptitle()
    assert title.splitlines()[1] == "each configuration at its fastest of 1, 4, 16 threadblocks per peer"
    assert "\n" not in render("fig11", figure_data("fig11", one)).get_suptitle()
