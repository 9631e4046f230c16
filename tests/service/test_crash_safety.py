"""SIGKILL the real server during an upload and during a diagnosis, restart it on the same data
dir and show that nothing acknowledged was lost and nothing unfinished was forgotten."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.auth.models import TokenRole
from app.db.engine import Database
from app.diagnoses.models import DiagnosisRow
from tests.service.conftest import rules_copy, sample_log
from tests.service.live import LiveServer, issue_token


@pytest.fixture
def server_env(tmp_path, database_url) -> dict[str, str]:
    env = {"LOGDX_DATA_DIR": str(tmp_path / "data"), "LOGDX_RULES_DIR": str(rules_copy(tmp_path / "rules")),
           "LOGDX_DIAGNOSIS_EXECUTOR": "thread", "LOGDX_UPLOAD_CHUNK_BYTES": "4096",
           "LOGDX_SYNC_DIAGNOSE_MAX_BYTES": "65536"}
    if database_url:
        env["LOGDX_DATABASE_URL"] = database_url
    return env


@pytest.fixture
def server(server_env):
    srv = LiveServer(server_env).start()
    yield srv
    srv.kill()


def _db_url(env: dict[str, str]) -> str:
    return env.get("LOGDX_DATABASE_URL") or f"sqlite:///{env['LOGDX_DATA_DIR']}/logdx.db"


def _db(env: dict[str, str]) -> Database:
    return Database(_db_url(env))


def _token(env) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(_db_url(env), TokenRole.ADMIN, 'crash-test')}"}


def _slow_body(data: bytes, piece: int, sent: threading.Event, after: int):
    for i in range(0, len(data), piece):
        if i >= after:
            sent.set()
            time.sleep(0.05)
        yield data[i:i + piece]


def _send_and_die(url: str, data: bytes, headers: dict, kill, **params) -> None:
    """Stream `data` slowly; kill the server once `len(data)//2` bytes are on their way."""
    sent = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            httpx.request("PUT" if url.endswith("/log") else "POST", url, params=params, headers=headers,
                          content=_slow_body(data, 8192, sent, len(data) // 2), timeout=30)
        except BaseException as exc:  # noqa: BLE001 - the server dies under us on purpose
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert sent.wait(20)
    time.sleep(0.3)
    kill()
    thread.join(30)
    assert errors, "the request should have failed when the server died"


def test_sigkill_during_uploads_loses_nothing_acknowledged(server, server_env):
    h = _token(server_env)
    api = httpx.Client(base_url=server.url, headers=h, timeout=30)
    # acknowledged before the crash: a whole upload, its diagnosis and a label
    a = api.post("/v1/jobs", json={"cluster": "c", "external_id": "a"}).json()["id"]
    log_a = sample_log(100)
    put = api.put(f"/v1/jobs/{a}/log", content=log_a).json()
    diag = api.post(f"/v1/jobs/{a}/diagnoses").json()
    label = api.post(f"/v1/diagnoses/{diag['id']}/labels", json={"verdict": "confirm"}).json()
    # a chunked log with one acknowledged chunk
    b = api.post("/v1/jobs", json={"cluster": "c", "external_id": "b"}).json()["id"]
    log_b = sample_log(8000)
    assert api.post(f"/v1/jobs/{b}/log/chunks", params={"offset": 0}, content=log_b[:10_000]).status_code == 200
    # crash 1: in the middle of a second chunk
    _send_and_die(f"{server.url}/v1/jobs/{b}/log/chunks", log_b[10_000:], h, server.kill, offset=10_000)
    server.start()
    # crash 2: in the middle of a whole-log upload
    c = api.post("/v1/jobs", json={"cluster": "c", "external_id": "c"}).json()["id"]
    _send_and_die(f"{server.url}/v1/jobs/{c}/log", sample_log(8000), h, server.kill)
    server.start()

    assert api.get(f"/v1/jobs/{a}/log").json()["sha256"] == hashlib.sha256(log_a).hexdigest() == put["sha256"]
    after = api.get(f"/v1/diagnoses/{diag['id']}").json()
    assert after["diagnosis"] == diag["diagnosis"] and after["labels"][0]["id"] == label["id"]
    # the interrupted whole upload left no log and no spool file behind
    assert api.get(f"/v1/jobs/{c}/log").status_code == 404
    assert list((Path(server_env["LOGDX_DATA_DIR"]) / "spool").iterdir()) == []
    # the chunked upload resumes from the offset the server reports
    offset = api.get(f"/v1/jobs/{b}/log").json()["size"]
    assert 10_000 <= offset < len(log_b)
    done = api.post(f"/v1/jobs/{b}/log/chunks", params={"offset": offset, "final": True},
                    content=log_b[offset:]).json()
    assert done["status"] == "complete"
    assert done["sha256"] == hashlib.sha256(log_b).hexdigest()
    assert api.post(f"/v1/jobs/{b}/diagnoses").json()["status"] in ("pending", "done")


def test_sigkill_with_pending_and_running_diagnoses_requeues_them(server_env):
    server = LiveServer(server_env).start(LOGDX_RUN_WORKER="false", LOGDX_SYNC_DIAGNOSE_MAX_BYTES="0")
    try:
        h = _token(server_env)
        api = httpx.Client(base_url=server.url, headers=h, timeout=30)
        ids = []
        for ext in ("p", "r"):
            job = api.post("/v1/jobs", json={"cluster": "c", "external_id": ext}).json()["id"]
            api.put(f"/v1/jobs/{job}/log", content=sample_log())
            resp = api.post(f"/v1/jobs/{job}/diagnoses")
            assert resp.status_code == 202
            ids.append(resp.json()["id"])
        server.kill()
        # the second one had been claimed by a worker that died with the server
        db = _db(server_env)
        with db.transaction() as session:
            session.get(DiagnosisRow, ids[1]).status = "running"
        db.dispose()
        server.start()  # worker enabled: picks both up again
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [api.get(f"/v1/diagnoses/{i}").json() for i in ids]
            if all(s["status"] == "done" for s in states):
                break
            time.sleep(0.1)
        assert [s["status"] for s in states] == ["done", "done"], states
        assert all(s["diagnosis"]["root_cause"]["error_type"] == "ECCError" for s in states)
    finally:
        server.kill()


def test_separate_worker_process_runs_queued_diagnoses_on_postgres(server_env, database_url):
    if not database_url:
        pytest.skip("procrastinate workers need PostgreSQL")
    import os
    import subprocess
    import sys

    from tests.service.live import REPO

    server = LiveServer(server_env).start(LOGDX_RUN_WORKER="false", LOGDX_SYNC_DIAGNOSE_MAX_BYTES="0")
    worker = None
    try:
        api = httpx.Client(base_url=server.url, headers=_token(server_env), timeout=30)
        job = api.post("/v1/jobs", json={"cluster": "c", "external_id": "w"}).json()["id"]
        api.put(f"/v1/jobs/{job}/log", content=sample_log())
        accepted = api.post(f"/v1/jobs/{job}/diagnoses").json()
        time.sleep(0.5)
        assert api.get(accepted["href"]).json()["status"] == "pending"
        worker = subprocess.Popen([sys.executable, "-m", "app.service_cli", "worker"], cwd=REPO,
                                  env={**os.environ, **server_env, "PYTHONPATH": str(REPO)},
                                  start_new_session=True)
        deadline = time.monotonic() + 30
        while (state := api.get(accepted["href"]).json())["status"] != "done" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert state["status"] == "done", state
    finally:
        server.kill()
        if worker is not None:
            os.killpg(worker.pid, 9)
            worker.wait(10)
