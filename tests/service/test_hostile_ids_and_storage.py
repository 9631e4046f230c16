"""Ids past the database's integer range, a group known only from a superseded diagnosis, a
full disk and a corrupt database: each a clear 4xx/5xx with a reason, never a bare 500."""

from __future__ import annotations

import http.client
import json
import subprocess

import pytest

from app.api.app import create_app
from app.auth.models import TokenRole
from app.auth.service import create_token
from tests.service.conftest import bearer, make_settings, new_job, rules_copy, sample_log
from tests.service.live import LiveServer, issue_token
from tests.service.test_errors import assert_error
from tests.web.conftest import sign_in

HUGE = 2**63


def test_a_recover_with_an_id_past_the_integer_range_is_422_and_the_connection_lives_on(tmp_path):
    settings = make_settings(tmp_path / "data")
    server = LiveServer({"LOGDX_DATA_DIR": str(settings.data_dir), "LOGDX_RULES_DIR": str(settings.rules_dir),
                         "LOGDX_DIAGNOSIS_EXECUTOR": "thread"})
    server.start()
    try:
        token = issue_token(settings.effective_database_url, TokenRole.SCHEDULER, "sched")
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        job = {"cluster": "c1", "external_id": "1", "hosts": ["node-1"], "gpu_count": 8, "state": "failed"}
        conn.request("POST", "/v1/jobs", json.dumps(job), headers)
        resp = conn.getresponse()
        job_id = json.loads(resp.read())["id"]
        for value in (HUGE, 2**64, -1):
            conn.request("POST", f"/v1/jobs/{job_id}/recover", json.dumps({"diagnosis_id": value}), headers)
            resp = conn.getresponse()
            body = json.loads(resp.read())
            assert resp.status == 422, body
            assert body["error"]["code"] == "invalid_input"
        conn.request("GET", f"/v1/jobs/{job_id}", headers=headers)  # same connection
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        resp.read()
        conn.close()
    finally:
        server.stop()


@pytest.mark.parametrize("url", ["/v1/jobs/{huge}", "/v1/jobs/{huge}/log", "/v1/diagnoses/{huge}",
                                 "/v1/jobs/{huge}/recoveries", "/v1/jobs?offset={huge}", "/v1/jobs?limit={huge}"])
def test_every_id_past_the_integer_range_is_422(client, admin, url):
    assert_error(client.get(url.format(huge=HUGE), headers=admin), 422)


def test_the_job_page_of_an_id_past_the_integer_range_is_a_404_page(client, tokens):
    sign_in(client, tokens["engineer"])
    resp = client.get("/ui/jobs/99999999999999999999")
    assert resp.status_code == 404
    assert resp.headers["content-type"].startswith("text/html")
    assert client.get("/ui/jobs/1?diagnosis=99999999999999999999").status_code in (404, 422)


def test_every_integer_input_is_bounded(app):
    """Walks every route (pages too): an integer parameter or body field without an upper bound
    would reach the database and overflow there."""
    from fastapi.routing import APIRoute
    from pydantic import BaseModel

    def unbounded(field_info) -> bool:
        return not any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None
                       for m in field_info.metadata)

    def parts(annotation) -> tuple:
        return getattr(annotation, "__args__", None) or (annotation,)

    def is_int(annotation) -> bool:
        return int in parts(annotation)

    def routes(items):
        for route in items:
            if isinstance(route, APIRoute):
                yield route
            elif hasattr(route, "original_router"):  # an included router, resolved lazily
                yield from routes(route.original_router.routes)

    missing = []
    for route in routes(app.routes):
        for param in route.dependant.path_params + route.dependant.query_params + route.dependant.body_params:
            info = param.field_info
            if is_int(info.annotation) and unbounded(info):
                missing.append(f"{route.path} {param.name}")
            for model in parts(info.annotation):
                if isinstance(model, type) and issubclass(model, BaseModel):
                    for name, f in model.model_fields.items():
                        if is_int(f.annotation) and unbounded(f):
                            missing.append(f"{route.path} body.{name}")
    assert not missing, "\n".join(missing)


def test_a_group_known_only_from_a_superseded_diagnosis_is_404(client, sched, eng, app):
    from sqlalchemy import update

    from app.diagnoses.models import DiagnosisRow

    job = new_job(client, sched)["id"]
    assert client.put(f"/v1/jobs/{job}/log", content=sample_log(), headers=sched).status_code == 201
    first = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    second = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    with app.state.services.db.transaction() as session:  # the newer diagnosis has another fingerprint
        session.execute(update(DiagnosisRow).where(DiagnosisRow.id == second["id"])
                        .values(fingerprint="0123456789abcdef"))
    fingerprint = app.state.services.db.run(lambda session: session.get(DiagnosisRow, first["id"]).fingerprint)
    resp = client.put(f"/v1/failure-groups/{fingerprint}", json={"state": "known"}, headers=eng)
    assert_error(resp, 404, "not_found")
    assert client.put("/v1/failure-groups/0123456789abcdef", json={"state": "known"}, headers=eng).status_code == 200


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs: a disk that really fills (root only; skipped where mounting is not allowed)."""
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mountpoint)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield mountpoint
    subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def test_a_full_disk_is_507_with_the_reason_and_not_ready(small_disk, tmp_path, service_pipeline):
    from fastapi.testclient import TestClient

    settings = make_settings(small_disk / "data", f"sqlite:///{tmp_path / 'logdx.db'}",
                             rules_dir=rules_copy(tmp_path / "rules"))
    with TestClient(create_app(settings, pipeline=service_pipeline), raise_server_exceptions=False) as client:
        sched = bearer(app_token(client, TokenRole.SCHEDULER))
        job = new_job(client, sched)["id"]
        assert client.get("/readyz").status_code == 200
        big = sample_log(60_000)  # about 3 MiB: more than the disk holds
        assert len(big) > 2 * 1024 * 1024
        error = assert_error(client.put(f"/v1/jobs/{job}/log", content=big, headers=sched), 507,
                             "insufficient_storage")
        assert "storage is full" in error["message"] and "No space left" in error["message"]
        assert not list(settings.spool_dir.iterdir())  # the partial spool file is gone
        assert client.get("/readyz").status_code == 200  # the refused upload took no space
        filler = small_disk / "filler"
        with open(filler, "wb") as fh:
            with pytest.raises(OSError):
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
        ready = client.get("/readyz")
        assert_error(ready, 503)
        assert "the data dir cannot be written" in ready.json()["error"]["message"]
        filler.unlink()
        assert client.get("/readyz").status_code == 200
        assert client.put(f"/v1/jobs/{job}/log", content=sample_log(), headers=sched).status_code == 201


def app_token(client, role) -> str:
    return client.app.state.services.db.run(create_token, role=role, name=f"t-{role.value}")[1]


def test_a_database_with_corrupt_pages_is_refused_at_start(tmp_path, service_pipeline):
    from fastapi.testclient import TestClient

    settings = make_settings(tmp_path / "data")
    with TestClient(create_app(settings, pipeline=service_pipeline)) as c:
        assert c.get("/readyz").status_code == 200
    db_file = settings.data_dir / "logdx.db"
    size = db_file.stat().st_size
    with open(db_file, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(b"\xde\xad\xbe\xef" * 2048)
    with pytest.raises(RuntimeError, match="corrupt"):
        with TestClient(create_app(settings, pipeline=service_pipeline)):
            pass
