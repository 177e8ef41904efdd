"""The evaluator's fast StageResult constructor makes what the class's own would."""

from __future__ import annotations

import dataclasses

import pytest
from spanbudget.collector.judging.verdict import StageResult, Status, new_stage_result


def test_the_fast_constructor_fills_every_field_as_the_class_does() -> None:
    names = [f.name for f in dataclasses.fields(StageResult)]
    values = ("retrieval", 41.5, 20.0, 40.0, Status.OVERRUN, {"embedding": 12.25})
    assert len(names) == len(values), "a field was added: new_stage_result must set it too"
    made = new_stage_result(*values)
    assert type(made) is StageResult
    assert made == StageResult(*values)
    assert [getattr(made, name) for name in names] == list(values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.ms = 1.0  # type: ignore[misc]
