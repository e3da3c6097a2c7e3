"""The CLI's option enums (typer needs an ``Enum`` to list choices) name exactly what the
library accepts, so a rule or executor added to one side cannot go missing from the other."""

from __future__ import annotations

from nuna.cli.common import ExecutorName, LineSetups, ProtocolModel
from nuna.experiments.executors import EXECUTORS
from nuna.sim.replay import LINE_SETUP_RULES, PROTOCOL_MODELS


def test_line_setups_are_the_simulators_rules() -> None:
    assert sorted(m.value for m in LineSetups) == sorted(LINE_SETUP_RULES)


def test_executor_names_are_the_sweeps_executors() -> None:
    assert sorted(m.value for m in ExecutorName) == sorted(EXECUTORS)


def test_protocol_models_are_the_simulators() -> None:
    assert tuple(m.value for m in ProtocolModel) == PROTOCOL_MODELS  # the default first in both
