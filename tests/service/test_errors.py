"""One JSON error shape for every 4xx/5xx, pinned."""

from __future__ import annotations

from app.errors import AppError
from tests.service.conftest import new_job

SHAPE_KEYS = {"code", "message", "detail"}


def assert_error(resp, status: int, code: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == SHAPE_KEYS, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code:
        assert body["error"]["code"] == code, body
    return body["error"]


def test_unknown_route_is_404_in_the_error_shape(client):
    assert_error(client.get("/v1/nope"), 404, "not_found")


def test_wrong_method_is_405(client, sched):
    assert_error(client.delete("/v1/jobs", headers=sched), 405, "method_not_allowed")


def test_missing_token_is_401(client):
    err = assert_error(client.get("/v1/jobs"), 401, "unauthorized")
    assert "Bearer" in err["message"]


def test_garbage_token_is_401(client):
    assert_error(client.get("/v1/jobs", headers={"Authorization": "Bearer nope"}), 401)


def test_low_role_is_403(client, sched):
    err = assert_error(client.get("/v1/stats", headers=sched), 403, "forbidden")
    assert err["detail"] == {"needed": "engineer", "role": "scheduler"}


def test_malformed_json_is_422(client, sched):
    resp = client.post("/v1/jobs", content=b"{not json", headers={**sched, "Content-Type": "application/json"})
    err = assert_error(resp, 422, "invalid_input")
    assert "JSON" in err["message"]


def test_schema_violation_is_422_with_locations(client, sched):
    err = assert_error(client.post("/v1/jobs", json={"cluster": ""}, headers=sched), 422, "invalid_input")
    locs = [tuple(e["loc"]) for e in err["detail"]]
    assert ("body", "external_id") in locs


def test_unknown_job_is_404(client, sched):
    err = assert_error(client.get("/v1/jobs/999", headers=sched), 404, "not_found")
    assert err["detail"] == {"job_id": 999}


def test_huge_ids_are_422_not_500(client, sched):
    assert_error(client.get(f"/v1/jobs/{2**70}", headers=sched), 422)


def test_control_characters_are_422(client, sched):
    assert_error(client.post("/v1/jobs", json={"cluster": "a\x00b", "external_id": "1"}, headers=sched), 422)


def test_unhandled_exception_is_500_in_the_shape(app, client, sched):
    @app.get("/boom")
    def boom():
        raise RuntimeError("kaput")

    err = assert_error(client.get("/boom"), 500, "internal_error")
    assert "kaput" not in err["message"]


def test_app_error_subclasses_map_to_status(app, client):
    class Teapot(AppError):
        status_code = 418
        code = "teapot"

    @app.get("/teapot")
    def teapot():
        raise Teapot("short and stout", detail={"x": 1})

    err = assert_error(client.get("/teapot"), 418, "teapot")
    assert err["detail"] == {"x": 1}


def test_no_log_yet_is_404(client, sched):
    job = new_job(client, sched)
    assert_error(client.post(f"/v1/jobs/{job['id']}/diagnoses", headers=sched), 404, "no_log")


def test_oversized_json_body_is_413(client, sched):
    body = b'{"cluster": "' + b"a" * (2 << 20) + b'", "external_id": "1"}'
    assert_error(client.post("/v1/jobs", content=body, headers={**sched, "Content-Type": "application/json"}), 413)


def test_oversized_streamed_json_body_is_413(client, sched):
    def chunks():
        yield b'{"cluster": "'
        for _ in range(40):
            yield b"a" * 65536
        yield b'", "external_id": "1"}'

    assert_error(client.post("/v1/jobs", content=chunks(), headers={**sched, "Content-Type": "application/json"}), 413)


def test_a_form_encoded_body_is_told_to_send_json(client, sched):
    # what `curl -d 'cluster=a&external_id=1'` (or -d with JSON but no Content-Type) sends
    for body in ("cluster=a&external_id=1", '{"cluster": "a", "external_id": "1"}'):
        resp = client.post("/v1/jobs", content=body, headers={**sched, "Content-Type": "application/x-www-form-urlencoded"})
        err = assert_error(resp, 422, "invalid_input")
        assert "Content-Type: application/json" in err["message"], err
    ok = client.post("/v1/jobs", content='{"cluster": "a", "external_id": "1"}',
                     headers={**sched, "Content-Type": "application/json"})
    assert ok.status_code == 201
