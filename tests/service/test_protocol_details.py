"""Protocol details: stalled bodies, offset gaps, undecodable JSON, Allow, documented statuses,
protocol-level errors; all in the one JSON error shape."""

from __future__ import annotations

import json
import socket
import time

import pytest

from app.auth.models import TokenRole
from tests.service.conftest import make_settings, new_job
from tests.service.live import LiveServer, issue_token
from tests.service.test_errors import assert_error


@pytest.fixture
def live(tmp_path):
    settings = make_settings(tmp_path / "data")
    server = LiveServer({"LOGDX_DATA_DIR": str(settings.data_dir), "LOGDX_RULES_DIR": str(settings.rules_dir),
                         "LOGDX_DIAGNOSIS_EXECUTOR": "thread", "LOGDX_REQUEST_BODY_TIMEOUT_S": "1"})
    server.start()
    yield server, settings
    server.stop()


def _raw(port: int, request: bytes, timeout: float = 10.0) -> tuple[bytes, float]:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks), time.monotonic() - started


def _json_body(response: bytes) -> dict:
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"application/json" in head.lower(), head
    return json.loads(body)


def test_stalled_body_gets_408_and_oversized_headers_get_json_400(live):
    server, settings = live
    token = issue_token(settings.effective_database_url, TokenRole.SCHEDULER, "t")
    stalled = (f"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
               "Content-Type: text/plain\r\nContent-Length: 1000\r\n\r\n").encode() + b"step 1\n"
    response, took = _raw(server.port, stalled)
    assert response.startswith(b"HTTP/1.1 408"), response[:200]
    assert _json_body(response)["error"]["code"] == "request_timeout"
    assert took < 8
    huge = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40_000  # over h11's 16 KiB, unfinished
    response, _ = _raw(server.port, huge)
    assert response.startswith(b"HTTP/1.1 400"), response[:200]
    assert _json_body(response)["error"]["code"] == "bad_request"


def test_far_offset_is_an_offset_gap_not_too_large(client, sched):
    job = new_job(client, sched)["id"]
    resp = client.post(f"/v1/jobs/{job}/log/chunks?offset={10**9}", content=b"x\n", headers=sched)
    err = assert_error(resp, 409, "offset_gap")
    assert err["detail"]["offset"] == 0


def test_invalid_utf8_json_body_is_422(client, sched):
    resp = client.post("/v1/jobs", content=b'{"cluster": "\xff\xfe"}',
                       headers={**sched, "Content-Type": "application/json"})
    assert_error(resp, 422, "invalid_input")


def test_405_allow_lists_every_method_of_the_path(client, sched):
    resp = client.delete("/v1/jobs/1/log", headers=sched)
    assert resp.status_code == 405
    assert {m.strip() for m in resp.headers["allow"].split(",")} >= {"GET", "PUT"}
    resp = client.delete("/v1/jobs", headers=sched)
    assert {m.strip() for m in resp.headers["allow"].split(",")} >= {"GET", "POST"}


def test_openapi_documents_409_on_review_and_400(client):
    paths = client.get("/openapi.json").json()["paths"]
    for action in ("approve", "reject"):
        assert "409" in paths[f"/v1/rules/proposed/{{rule_id}}/{action}"]["post"]["responses"]
    assert "400" in paths["/v1/jobs/{job_id}/log"]["put"]["responses"]
