"""The diagnosis contract: plain dataclasses in code, strictly checked when the data comes from
outside (stored rows, uploads, LLM answers), with the same JSON form and OpenAPI description."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.pipeline import Pipeline
from app.core.types import SCHEMA_ID, Action, ActionKind, Category, Diagnosis, ErrorType, RootCause

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / "tests" / "golden" / "realworld" / "010-oom-one-rank-then-nccl-watchdog-timeouts" / "log.txt"


@pytest.fixture(scope="module")
def diagnosis_json() -> dict:
    return Pipeline().diagnose(LOG).diagnosis.to_json_dict()


def test_the_json_form_round_trips_through_validation(diagnosis_json):
    d = diagnosis_json
    assert list(d)[:2] == ["schema", "root_cause"] and d["schema"] == SCHEMA_ID
    assert d["root_cause"]["error_type"] == "OutOfMemoryError" and type(d["root_cause"]["error_type"]) is str
    assert type(d["action"]["kind"]) is str and type(d["decided_by"]) is str
    back = Diagnosis.from_json_dict(d)
    assert back.root_cause.error_type is ErrorType.OutOfMemoryError
    assert back.co_occurring and back.co_occurring[0].error_type in ErrorType
    assert json.dumps(back.to_json_dict()) == json.dumps(d)  # same keys, same order, same values


def _without(d: dict, path: tuple) -> dict:
    out = copy.deepcopy(d)
    target = out
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return out


def _with(d: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(d)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


@pytest.mark.parametrize("change, loc", [
    (lambda d: _with(d, ("surprise",), 1), ("surprise",)),
    (lambda d: _with(d, ("root_cause", "surprise"), 1), ("root_cause", "surprise")),
    (lambda d: _with(d, ("root_cause", "evidence", 0, "surprise"), 1), ("root_cause", "evidence", 0, "surprise")),
    (lambda d: _with(d, ("compression", "surprise"), 1), ("compression", "surprise")),
    (lambda d: _with(d, ("root_cause", "confidence"), 1.5), ("root_cause", "confidence")),
    (lambda d: _with(d, ("root_cause", "confidence"), -0.1), ("root_cause", "confidence")),
    (lambda d: _with(d, ("root_cause", "error_type"), "GremlinError"), ("root_cause", "error_type")),
    (lambda d: _with(d, ("root_cause", "category"), "cosmic"), ("root_cause", "category")),
    (lambda d: _with(d, ("co_occurring", 0, "error_type"), "GremlinError"), ("co_occurring", 0, "error_type")),
    (lambda d: _with(d, ("action", "kind"), "reboot_the_world"), ("action", "kind")),
    (lambda d: _with(d, ("decided_by", ), "oracle"), ("decided_by",)),
    (lambda d: _with(d, ("root_cause", "evidence", 0, "line"), "forty"), ("root_cause", "evidence", 0, "line")),
    (lambda d: _with(d, ("notes",), "not a list"), ("notes",)),
    (lambda d: _with(d, ("action", "suspect_ranks"), ["x"]), ("action", "suspect_ranks", 0)),
    (lambda d: _without(d, ("versions",)), ("versions",)),
    (lambda d: _without(d, ("root_cause", "explanation")), ("root_cause", "explanation")),
], ids=["extra-key", "extra-key-nested", "extra-key-evidence", "extra-key-stats", "confidence-1.5",
        "confidence-negative", "unknown-error-type", "unknown-category", "unknown-co-occurring-type",
        "unknown-action", "unknown-decided-by", "line-not-int", "notes-not-list", "rank-not-int",
        "missing-versions", "missing-explanation"])
def test_untrusted_input_is_checked_strictly(diagnosis_json, change, loc):
    with pytest.raises(ValidationError) as info:
        Diagnosis.from_json_dict(change(diagnosis_json))
    assert loc in [tuple(e["loc"]) for e in info.value.errors()]


def test_code_gets_enums_and_a_checked_confidence():
    rc = RootCause(error_type="CUDAError", category="infrastructure", confidence=1, evidence=[], explanation="x")
    assert rc.error_type is ErrorType.CUDAError and rc.category is Category.INFRASTRUCTURE
    assert rc.to_json_dict()["confidence"] == 1.0 and type(rc.confidence) is float
    with pytest.raises(ValueError, match="confidence"):
        RootCause(error_type=ErrorType.Hang, category=Category.FRAMEWORK, confidence=1.5, evidence=[],
                  explanation="x")
    with pytest.raises(ValueError):
        Action(kind="reboot_the_world", reason="x")
    with pytest.raises(TypeError):  # keyword construction only, unknown fields refused
        Action(kind=ActionKind.RETRY, reason="x", surprise=1)


def test_the_contract_module_does_not_import_pydantic():
    code = "import sys, app.core.types, app.core.rules; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_openapi_schema_describes_the_contract():
    from app.api.app import create_app

    spec = create_app().openapi()
    ref = spec["paths"]["/v1/diagnose"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    schemas = spec["components"]["schemas"]
    diagnosis = schemas[ref["$ref"].rsplit("/", 1)[-1]]
    assert list(diagnosis["properties"]) == ["schema", "root_cause", "co_occurring", "action", "decided_by",
                                             "compression", "last_progress", "versions", "notes"]
    assert diagnosis["additionalProperties"] is False
    root = schemas["RootCause"]
    assert root["additionalProperties"] is False
    assert (root["properties"]["confidence"]["minimum"], root["properties"]["confidence"]["maximum"]) == (0.0, 1.0)
    assert "GremlinError" not in schemas["ErrorType"]["enum"] and "CUDAError" in schemas["ErrorType"]["enum"]
