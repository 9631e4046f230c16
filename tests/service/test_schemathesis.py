"""Property-based API fuzzing from the app's own OpenAPI against a real server: no input
produces a 5xx, and every error response has the one error shape."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from app.auth.models import TokenRole
from tests.service.conftest import (
    DB_PARAMS,
    PG_URL,
    reset_postgres,
    rules_copy,
    sample_log,
)
from tests.service.live import LiveServer, issue_token


@pytest.fixture(scope="module", params=DB_PARAMS)
def seeded(request, tmp_path_factory):
    data = tmp_path_factory.mktemp("fuzz")
    env = {"LOGDX_DATA_DIR": str(data), "LOGDX_RULES_DIR": str(rules_copy(data / "rules")), "LOGDX_DIAGNOSIS_EXECUTOR": "thread",
           "LOGDX_MAX_UPLOAD_BYTES": str(4 << 20)}
    url = f"sqlite:///{data / 'logdx.db'}"
    if request.param == "postgres":
        reset_postgres(PG_URL)
        env["LOGDX_DATABASE_URL"] = url = PG_URL
    server = LiveServer(env).start()
    try:
        headers = {"Authorization": f"Bearer {issue_token(url, TokenRole.ADMIN, 'fuzz')}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as api:
            job = api.post("/v1/jobs", json={"cluster": "c", "external_id": "1"}).json()["id"]
            api.put(f"/v1/jobs/{job}/log", content=sample_log())
            diag = api.post(f"/v1/jobs/{job}/diagnoses").json()["id"]
            api.post("/v1/rules/proposed", json={"pattern": "x", "error_type": "KeyError", "evidence": ["x"]})
        assert (job, diag) == (1, 1)
        yield server.url, headers
    finally:
        server.kill()


def test_api_never_answers_5xx(seeded):
    url, headers = seeded
    api = schemathesis.openapi.from_url(f"{url}/openapi.json")
    checked = []
    for result in api.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck),
                  derandomize=True, database=None)
        def fuzz(case):
            response = case.call(headers=headers, timeout=30)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}")
            if response.status_code >= 400:
                body = response.json()
                assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "detail"}, body

        fuzz()
        checked.append(f"{operation.method.upper()} {operation.path}")
    assert len(checked) >= 20, checked
