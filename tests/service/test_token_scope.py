"""A scheduler token scoped to clusters reaches only their jobs: every route that names a job
or a diagnosis answers 404 for another cluster's (as for one that does not exist), and it
registers jobs of its clusters only. Its `checkpoint_dir` must lie under a configured root."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.auth.models import TokenRole
from app.auth.service import create_token
from tests.service.conftest import bearer, make_settings, new_job, sample_log
from tests.service.test_auth import _required_role, _routes


@pytest.fixture
def scoped(app, client):
    return bearer(app.state.services.db.run(create_token, role=TokenRole.SCHEDULER, name="c1-epilog",
                                            clusters=["c1"])[1])


def _foreign_job(client, sched) -> tuple[int, int]:
    job = new_job(client, sched, external_id="other", cluster="c2")["id"]
    assert client.put(f"/v1/jobs/{job}/log", content=sample_log(), headers=sched).status_code == 201
    diagnosis = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched)
    assert diagnosis.status_code == 200
    return job, diagnosis.json()["id"]


def test_a_scoped_token_reaches_its_cluster_only(client, sched, scoped):
    job, diagnosis = _foreign_job(client, sched)
    missing = client.get("/v1/jobs/999999", headers=scoped).json()["error"]
    hidden = client.get(f"/v1/jobs/{job}", headers=scoped)
    assert hidden.status_code == 404
    assert hidden.json()["error"]["message"] == missing["message"].replace("999999", str(job))
    assert client.put(f"/v1/jobs/{job}/log?replace=true", content=b"x\n", headers=scoped).status_code == 404
    assert client.post(f"/v1/jobs/{job}/log/chunks?offset=0", content=b"x\n", headers=scoped).status_code == 404
    assert client.get(f"/v1/jobs/{job}/log", headers=scoped).status_code == 404
    assert client.get(f"/v1/diagnoses/{diagnosis}", headers=scoped).status_code == 404
    assert client.post(f"/v1/jobs/{job}/recover", json={"checkpoint_dir": "/tmp"}, headers=scoped).status_code == 404
    assert client.get(f"/v1/jobs/{job}/log", headers=sched).json()["size"] > 2  # nothing was replaced
    refused = client.post("/v1/jobs", json={"cluster": "c2", "external_id": "x", "hosts": ["n1"], "gpu_count": 8},
                          headers=scoped)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "cluster_out_of_scope"
    own = new_job(client, scoped, external_id="mine", cluster="c1")["id"]
    assert client.put(f"/v1/jobs/{own}/log", content=sample_log(), headers=scoped).status_code == 201
    mine = client.post(f"/v1/jobs/{own}/diagnoses", headers=scoped)
    assert mine.status_code == 200
    assert client.get(f"/v1/diagnoses/{mine.json()['id']}", headers=scoped).status_code == 200
    assert client.post("/v1/diagnose", content=sample_log(), headers=scoped).status_code == 200


def test_every_route_naming_a_job_hides_other_clusters(app, client, sched, scoped):
    job, diagnosis = _foreign_job(client, sched)
    checked = 0
    for method, path, route in _routes(app):
        if not re.search(r"\{(job_id|diagnosis_id)\}", path) or _required_role(route) is not TokenRole.SCHEDULER:
            continue
        url = path.replace("{job_id}", str(job)).replace("{diagnosis_id}", str(diagnosis))
        params = {"offset": 0} if path.endswith("/chunks") else None
        json_body = {} if method in ("POST", "PUT") and not path.endswith(("/log", "/chunks")) else None
        content = b"x\n" if path.endswith(("/log", "/chunks")) and method in ("POST", "PUT") else None
        resp = client.request(method, url, headers=scoped, params=params, json=json_body, content=content)
        assert resp.status_code == 404, f"{method} {url}: {resp.status_code} {resp.text}"
        checked += 1
    assert checked >= 8


def test_only_scheduler_tokens_take_a_scope(app, client):
    with pytest.raises(ValueError, match="only scheduler"):
        app.state.services.db.run(create_token, role=TokenRole.ENGINEER, name="e", clusters=["c1"])


def test_a_scheduler_tokens_checkpoint_dir_must_lie_under_a_root(tmp_path, service_pipeline):
    settings = make_settings(tmp_path / "data", controller_checkpoint_roots=["/lustre/ckpt"])
    with TestClient(create_app(settings, pipeline=service_pipeline), raise_server_exceptions=False) as client:
        db = client.app.state.services.db
        sched = bearer(db.run(create_token, role=TokenRole.SCHEDULER, name="s")[1])
        eng = bearer(db.run(create_token, role=TokenRole.ENGINEER, name="e")[1])
        job = new_job(client, sched)["id"]
        for path in ("/etc", "/lustre/ckpt/../../etc", "/lustre/ckptX/job", "lustre/ckpt/job"):
            resp = client.post(f"/v1/jobs/{job}/recover", json={"checkpoint_dir": path}, headers=sched)
            assert resp.status_code == 403, (path, resp.text)
            assert resp.json()["error"]["code"] == "checkpoint_dir_refused"
        for headers, path in ((sched, "/lustre/ckpt/job-1"), (eng, "/etc")):  # past the check: no diagnosis yet
            resp = client.post(f"/v1/jobs/{job}/recover", json={"checkpoint_dir": path}, headers=headers)
            assert resp.json()["error"]["code"] != "checkpoint_dir_refused", resp.text
    settings = make_settings(tmp_path / "data2")  # no roots: a scheduler token names none
    with TestClient(create_app(settings, pipeline=service_pipeline), raise_server_exceptions=False) as client:
        sched = bearer(client.app.state.services.db.run(create_token, role=TokenRole.SCHEDULER, name="s")[1])
        job = new_job(client, sched)["id"]
        resp = client.post(f"/v1/jobs/{job}/recover", json={"checkpoint_dir": "/lustre/ckpt"}, headers=sched)
        assert resp.status_code == 403 and "LOGDX_CONTROLLER_CHECKPOINT_ROOTS" in resp.json()["error"]["message"]
