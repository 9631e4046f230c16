"""Property-based API fuzzing from the app's own OpenAPI: no input produces a 5xx, and every
error response has the one error shape."""

from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from app.api.app import create_app
from app.auth.models import TokenRole
from app.auth.service import create_token
from tests.service.conftest import make_settings, sample_log

@pytest.fixture(scope="module")
def seeded(tmp_path_factory, service_pipeline):
    app = create_app(make_settings(tmp_path_factory.mktemp("fuzz")), pipeline=service_pipeline)
    with TestClient(app) as client:
        token = app.state.services.db.run(create_token, role=TokenRole.ADMIN, name="fuzz")[1]
        h = {"Authorization": f"Bearer {token}"}
        job = client.post("/v1/jobs", json={"cluster": "c", "external_id": "1"}, headers=h).json()["id"]
        client.put(f"/v1/jobs/{job}/log", content=sample_log(), headers=h)
        diag = client.post(f"/v1/jobs/{job}/diagnoses", headers=h).json()["id"]
        client.post("/v1/rules/proposed", json={"pattern": "x", "error_type": "KeyError", "evidence": ["x"]},
                    headers=h)
        assert (job, diag) == (1, 1)
        yield app, h


def test_api_never_answers_5xx(seeded):
    app, headers = seeded
    api = schemathesis.openapi.from_asgi("/openapi.json", app)
    checked = []
    for result in api.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck),
                  derandomize=True, database=None)
        def fuzz(case):
            response = case.call(headers=headers)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}")
            if response.status_code >= 400:
                body = response.json()
                assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "detail"}, body

        fuzz()
        checked.append(f"{operation.method.upper()} {operation.path}")
    assert len(checked) >= 20, checked
