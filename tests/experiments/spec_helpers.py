"""Helpers shared by the tests of ``[fixed]`` settings: a spec with one setting, its point ids."""

from __future__ import annotations

from typing import Any

from nuna.experiments.spec import expand, parse_sweep_spec, point_id


def with_fixed(base: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of spec data ``base`` with ``[fixed] key = value``."""
    data = {name: dict(table) for name, table in base.items()}
    data.setdefault("fixed", {})[key] = value
    return data


def spec_ids(data: dict[str, Any]) -> list[str]:
    """The point ids of the spec ``data`` describes, in expansion order."""
    spec = parse_sweep_spec(data)
    return [point_id(p.as_dict(), spec.point_function) for p in expand(spec)]
