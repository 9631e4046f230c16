"""Request examples in the OpenAPI document are valid requests (they are what users copy)."""

from __future__ import annotations

import pytest

from app.diagnoses.schemas import DiagnoseRequest
from app.failures.schemas import GroupStateUpdate
from app.jobs.schemas import JobCreate
from app.labels.schemas import LabelCreate


@pytest.mark.parametrize("model", [JobCreate, LabelCreate, DiagnoseRequest, GroupStateUpdate])
def test_schema_examples_validate(model):
    examples = model.model_json_schema()["examples"]
    assert examples
    for example in examples:
        model.model_validate(example)
