"""A sweep's results as one table: a row per finished point, its inputs and chosen metrics of its
result, with its speedup over a baseline twin: the point of a baseline configuration, or of
another value of any one input field (``nuna table``).

For custom sweeps what ``nuna figure`` is for the paper's: the numbers in a form that a
spreadsheet, pandas or a note reads. Pure functions of the records ``load_results`` returns;
the CLI writes the text. CSV holds every input field of the points (a field a point leaves
out, such as ``windowed``, is given its default), so tables of two sweeps line up; Markdown,
for reading, shows the fields the rows differ in and names the others above the table.
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nuna.errors import UsageError
from nuna.experiments.figures import TbsChoice, best_tbs_per_peer, twin_key
from nuna.experiments.spec import Point
from nuna.units import format_size

#: metrics shown when none are asked for: paths into a result (``a.b`` reads ``result[a][b]``)
DEFAULT_METRICS = ("time_us", "busbw_gbps", "remote_store_latency_ns.mean", "remote_store_latency_ns.p99",
                   "nar_granularity_used")
#: the point fields shown first, in this order (the rest follow in :class:`Point`'s order, then
#: fields of other point functions by name)
_LEADING = ("plan", "collective", "gpus", "size_bytes", "config", "nar_granularity", "tbs_per_peer",
            "gemm_bytes", "topology")
#: what a point that leaves a field out means by it (``Point.as_dict`` omits unset options)
_DEFAULTS: dict[str, Any] = {"plan": None, **{f.name: f.default for f in dataclasses.fields(Point)
                                               if f.default is not dataclasses.MISSING}}


@dataclass(frozen=True, slots=True)
class Table:
    """``columns`` and ``rows`` (one value per column: ``None`` where a point has none);
    ``fixed``: the point fields every row has the same value in, and that value (they are
    columns too)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    fixed: tuple[tuple[str, Any], ...]


def metric_value(result: Mapping[str, Any], path: str) -> Any:
    """The value at ``path`` (keys joined by dots) in ``result``; ``KeyError`` if absent."""
    value: Any = result
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            raise KeyError(path)
        value = value[key]
    return value


def _has(result: Mapping[str, Any], path: str) -> bool:
    try:
        metric_value(result, path)
    except KeyError:
        return False
    return True


def _scalar_paths(value: Any, prefix: str = "") -> list[str]:
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _scalar_paths(v, f"{prefix}{k}.")]
    return [] if isinstance(value, list) else [prefix[:-1]]


def _check_metric(path: str, records: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a metric that no record has, or that is not one number or word in a record."""
    found = False
    for record in records:
        try:
            value = metric_value(record["result"], path)
        except KeyError:
            continue
        if isinstance(value, Mapping):
            keys = ", ".join(sorted(value)[:8])
            raise UsageError(f"metric {path!r} is a table: pick one of its entries ({path}.KEY; KEY one of "
                             f"{keys}{', ...' if len(value) > 8 else ''})")
        if isinstance(value, list):
            raise UsageError(f"metric {path!r} is a list, not one value")
        found = True
    if not found:
        known = sorted({p for r in records for p in _scalar_paths(r["result"])})
        close = difflib.get_close_matches(path, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"metric {path!r} is in no result of the sweep{hint}")


def _field_order(fields: set[str]) -> list[str]:
    known = [f for f in (*_LEADING, *(f.name for f in dataclasses.fields(Point))) if f in fields]
    ordered = list(dict.fromkeys(known))
    return ordered + sorted(fields - set(ordered))


def _time_ns(choice: TbsChoice) -> float | None:
    """The time a speedup compares, ``None`` for a result without one (another point function)."""
    try:
        return choice.time_ns
    except (KeyError, TypeError, ValueError):
        return None


def sweep_table(records: Sequence[Mapping[str, Any]], metrics: Sequence[str] | None = None, *,
                baseline: str | None = "UA", best_tbs: bool = False) -> Table:
    """The table of ``records`` (``load_results`` of a sweep folder), in their order.

    Columns: the points' input fields, then each of ``metrics`` (``None``: those of
    :data:`DEFAULT_METRICS` that some result has; a path into the result; the
    column is named by the path, with ``result.`` before it where an input field has that
    name), then, unless ``baseline`` is ``None``, the speedup of each row over its baseline
    twin: the twin's time over the row's (the collective's own time beside a GEMM, as the
    figures compare; empty where the sweep has no twin). ``baseline`` is a configuration
    (``"UA"``: column ``speedup_over_UA``; the twin differs only in the configuration and its
    NAR granularity) or ``FIELD=VALUE`` of any input field (``"topology=nuna-4die"``,
    ``"tbs_per_peer=1"``, ``"packet_bytes=256"``: column ``speedup_over_FIELD=VALUE``; the twin
    differs only in that field, whose value is written as in the CSV, and, for ``packet_bytes``,
    in the cap on ``"auto"`` packets).

    ``best_tbs``: one row per configuration at its fastest threadblock count, as the paper
    compares them (:func:`nuna.experiments.figures.best_tbs_per_peer`); the row's
    ``tbs_per_peer`` is that count, and its speedup compares the baseline at the baseline's own
    fastest count.

    ``UsageError`` for a metric in no result, or one that is not a single value, and for a
    baseline no record has.
    """
    if not records:
        raise UsageError("the sweep has no finished points to tabulate")
    if metrics is None:  # another point function's results may hold none of them
        metrics = [m for m in DEFAULT_METRICS if any(_has(r["result"], m) for r in records)]
    for path in metrics:
        _check_metric(path, records)
    if best_tbs:
        if not all("tbs_per_peer" in r["point"] and "time_ns" in r["result"] for r in records):
            raise UsageError("a row per fastest threadblock count needs points with a threadblock count "
                             "and results with a time_ns")
        choices = best_tbs_per_peer(records)
    else:
        choices = [TbsChoice(r, ()) for r in records]
    points = [{**_DEFAULTS, **c.record["point"]} for c in choices]
    fields = _field_order({k for p in points for k in p})
    names = [f"result.{m}" if m in fields else m for m in metrics]
    columns = [*fields, *names]
    twins: list[TbsChoice | None] = []
    if baseline is not None:
        field, value, column = _baseline(baseline, points)
        # a configuration's NAR granularity and "auto" packets' cap go with the field they qualify
        ignore = (field, *(("nar_granularity",) if field == "config" else ()),
                  *(("max_packet_bytes",) if field == "packet_bytes" else ()),
                  *(("tbs_per_peer",) if best_tbs else ()))
        base = {twin_key(p, ignore): c for p, c in zip(points, choices, strict=True)
                if _csv_cell(p.get(field)) == value}
        twins = [base.get(twin_key(p, ignore)) for p in points]
        columns.append(column)
    rows = []
    for i, (point, choice) in enumerate(zip(points, choices, strict=True)):
        row: list[Any] = [point.get(f) for f in fields]
        for path in metrics:
            try:
                row.append(metric_value(choice.record["result"], path))
            except KeyError:
                row.append(None)
        if baseline is not None:
            ref = twins[i]
            t, t_ref = _time_ns(choice), _time_ns(ref) if ref is not None else None
            row.append(t_ref / t if t and t_ref is not None else None)
        rows.append(tuple(row))
    fixed = tuple((f, points[0][f]) for i, f in enumerate(fields)
                  if all(r[i] == rows[0][i] for r in rows))
    return Table(tuple(columns), tuple(rows), fixed)


def _baseline(baseline: str, points: Sequence[Mapping[str, Any]]) -> tuple[str, str, str]:
    """``(field, value as in the CSV, column name)`` of a baseline (a configuration, or
    ``FIELD=VALUE``), checked against the points."""
    field, sep, value = (part.strip() for part in baseline.partition("="))
    if not sep:
        field, value = "config", baseline.strip()
    known = sorted({k for p in points for k in p})
    if field not in known:
        close = difflib.get_close_matches(field, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"baseline {baseline!r}: the points have no field {field!r}{hint}")
    values = sorted({_csv_cell(p.get(field)) for p in points})
    if value not in values:
        what = "configuration" if not sep else f"{field}"
        raise UsageError(f"no point of the sweep has the baseline {what} {value!r} "
                         f"({field} values: {', '.join(repr(v) for v in values)})")
    return field, value, f"speedup_over_{value}" if not sep else f"speedup_over_{field}={value}"


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


def to_csv(table: Table) -> str:
    """``table`` as CSV with a header line: empty cells for no value, ``true``/``false``, floats
    in full (the shortest form that reads back to the same number)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.rows:
        writer.writerow([_csv_cell(v) for v in row])
    return out.getvalue()


def _md_cell(column: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and column.endswith("_bytes") and value > 0:
        return format_size(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        # four significant digits, but whole numbers from 10,000 on (10730, not 1.073e+04)
        return f"{value:.0f}" if 1e4 <= abs(value) < 1e15 else f"{value:.4g}"
    return str(value).replace("|", "\\|")


def to_markdown(table: Table) -> str:
    """``table`` for reading: the fields every row shares on a line above a Markdown table of
    the rest (those at the value a point has without them, such as ``windowed`` unset, left
    out); sizes in their units, other numbers to four significant digits (whole from 10,000)."""
    fixed = {name for name, _ in table.fixed}
    keep = [i for i, c in enumerate(table.columns) if c not in fixed]
    # a field left at what a point means without it (no option set) goes unsaid
    said = [(name, v) for name, v in table.fixed if name not in _DEFAULTS or _DEFAULTS[name] != v]
    lines = []
    if said:
        lines.append("fixed: " + ", ".join(f"{name} = {_md_cell(name, v)}" for name, v in said))
        lines.append("")
    lines.append("| " + " | ".join(table.columns[i] for i in keep) + " |")
    lines.append("|" + "---|" * len(keep))
    for row in table.rows:
        lines.append("| " + " | ".join(_md_cell(table.columns[i], row[i]) for i in keep) + " |")
    return "\n".join(lines) + "\n"
