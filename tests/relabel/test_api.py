"""`/v1/relabel` through the app: an approved rule changes what some stored logs mean; an admin
re-labels the stored jobs, polls the run, reads the report (JSON and CSV); labels stay."""

from __future__ import annotations

import csv
import gzip
import io
import time

import pytest

from tests.service.conftest import (  # noqa: F401 - fixtures
    admin,
    app,
    client,
    database_url,
    embedder,
    eng,
    make_settings,
    new_job,
    sample_log,
    sched,
    service_pipeline,
    tokens,
)
from tests.service.test_errors import assert_error

@pytest.fixture
def settings(tmp_path, database_url):
    return make_settings(tmp_path / "data", database_url, relabel_archive_root=tmp_path / "archives")


BUS = "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."


def _bus_log(host: str) -> bytes:
    lines = [f"[{host}] iteration {i}/ 1000 | lm loss: 2.{i % 10}E+00 |" for i in range(30)]
    return ("\n".join([*lines, f"[{host}] {BUS}", "RuntimeError: NCCL communicator was aborted"]) + "\n").encode()


def _job_with_diagnosis(client, sched, external_id: str, log: bytes) -> tuple[int, dict]:  # noqa: ANN001
    job = new_job(client, sched, external_id)
    assert client.put(f"/v1/jobs/{job['id']}/log", content=gzip.compress(log), headers=sched).status_code == 201
    diag = client.post(f"/v1/jobs/{job['id']}/diagnoses", headers=sched)
    assert diag.status_code == 200, diag.text
    return job["id"], diag.json()


def _wait_done(client, eng, run_id: int, timeout: float = 60) -> dict:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/v1/relabel/{run_id}", headers=eng).json()
        if run["status"] == "done":
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish: {run}")


def test_relabel_stored_jobs_after_an_approved_rule(client, sched, eng, admin):
    ecc_job, ecc = _job_with_diagnosis(client, sched, "ecc", sample_log())
    bus_job, bus = _job_with_diagnosis(client, sched, "bus", _bus_log("node-3"))
    labelled_job, labelled = _job_with_diagnosis(client, sched, "bus-labelled", _bus_log("node-4"))
    assert ecc["diagnosis"]["root_cause"]["error_type"] == "ECCError"
    before = bus["diagnosis"]["root_cause"]["error_type"]
    assert before != "NodeFailure"
    label = client.post(f"/v1/diagnoses/{labelled['id']}/labels", headers=eng,
                        json={"verdict": "correct", "error_type": "NVLinkError", "note": "checked by hand"})
    assert label.status_code == 201

    rule = client.post("/v1/rules/proposed", headers=eng,
                       json={"pattern": "GPU has fallen off the bus", "error_type": "NodeFailure", "evidence": [BUS]})
    impact = client.get(f"/v1/rules/proposed/{rule.json()['id']}/impact", headers=eng)
    assert impact.status_code == 200, impact.text
    what_if = impact.json()
    assert what_if["logs"] == 3 and what_if["changed"] == 2
    assert what_if["transitions"][before] == {"NodeFailure": 2}
    assert client.post(f"/v1/rules/proposed/{rule.json()['id']}/approve", headers=admin).status_code == 200

    assert client.post("/v1/relabel", json={}, headers=eng).status_code == 403
    created = client.post("/v1/relabel", json={"stored": {"only_stale": True}, "batch_size": 2}, headers=admin)
    assert created.status_code == 202, created.text
    run = _wait_done(client, eng, created.json()["id"])
    assert run["progress"] == {"total": 3, "done": 3, "failed": 0, "open": 0, "bytes_total": run["progress"]["bytes_total"],
                               "bytes_done": run["progress"]["bytes_total"]}
    report = client.get(run["report"], headers=eng).json()
    assert report["schema"] == "logdx.relabel-report/v1"
    assert report["transitions"] == {"ECCError": {"ECCError": 1}, before: {"NodeFailure": 2}}
    assert {c["job_id"] for c in report["changed_logs"]} == {bus_job, labelled_job}
    assert {r["rule_id"]: r["gained"] for r in report["by_rule"]}.get(rule.json()["rule"]["id"]) == 2
    human = report["human"]
    assert human["labelled"] == 1 and [c["job_id"] for c in human["disagree_after"]] == [labelled_job]
    assert human["regressions"] == []

    # new rows, old ones kept; the label is untouched and still the job's effective cause
    for job_id, old in ((bus_job, bus), (labelled_job, labelled)):
        rows = client.get(f"/v1/jobs/{job_id}/diagnoses", headers=sched).json()["items"]
        assert [r["id"] for r in rows][1:] == [old["id"]] and rows[0]["diagnosis"]["root_cause"]["error_type"] == "NodeFailure"
    assert client.get(f"/v1/jobs/{bus_job}", headers=sched).json()["error_type"] == "NodeFailure"
    assert client.get(f"/v1/jobs/{labelled_job}", headers=sched).json()["error_type"] == "NVLinkError"
    labels = client.get(f"/v1/diagnoses/{labelled['id']}", headers=sched).json()["labels"]
    assert [(lb["verdict"], lb["error_type"], lb["note"]) for lb in labels] == [("correct", "NVLinkError", "checked by hand")]

    table = list(csv.DictReader(io.StringIO(client.get(run["report"], params={"format": "csv"}, headers=eng).text)))
    assert sorted(int(r["job_id"]) for r in table) == [ecc_job, bus_job, labelled_job]
    assert {r["job_id"]: r["changed"] for r in table} == {str(ecc_job): "0", str(bus_job): "1", str(labelled_job): "1"}

    # nothing stale any more: an empty run is done at once
    again = client.post("/v1/relabel", json={"stored": {"only_stale": True}}, headers=admin).json()
    assert again["status"] == "done" and again["progress"]["total"] == 0
    assert [r["id"] for r in client.get("/v1/relabel", headers=eng).json()["items"]] == [again["id"], run["id"]]


def test_relabel_archive_dry_run_and_bad_requests(client, eng, admin, tmp_path):
    archive = tmp_path / "archives" / "old"
    archive.mkdir(parents=True)
    (archive / "a.log.gz").write_bytes(gzip.compress(sample_log()))
    (archive / "b.log.gz").write_bytes(gzip.compress(sample_log())[:30] + b"\x00garbage" * 100)
    created = client.post("/v1/relabel", json={"archive": str(archive), "dry_run": True}, headers=admin)
    assert created.status_code == 202, created.text
    run = _wait_done(client, eng, created.json()["id"])
    report = client.get(run["report"], headers=eng).json()
    assert (report["logs"], report["done"], report["failed"], report["new"]) == (2, 1, 1, 1)
    assert report["failed_logs"][0]["key"] == "b.log.gz" and "corrupt" in report["failed_logs"][0]["error"]
    assert report["transitions"] == {"(new)": {"ECCError": 1}}
    assert client.get("/v1/jobs", headers=eng).json()["total"] == 0  # a dry run imports nothing

    assert_error(client.post("/v1/relabel", json={"archive": "nope"}, headers=admin), 422, "archive_not_found")
    (tmp_path / "secret.log").write_text("not yours\n")
    for outside in (str(tmp_path / "secret.log"), "../secret.log", "/", str(tmp_path / "*.log")):
        assert_error(client.post("/v1/relabel", json={"archive": outside}, headers=admin), 422, "archive_outside_root")
    (archive / "link.log").symlink_to(tmp_path / "secret.log")
    assert_error(client.post("/v1/relabel", json={"archive": "old"}, headers=admin), 422, "archive_outside_root")
    (archive / "link.log").unlink()
    assert_error(client.post("/v1/relabel", json={"archive": "x", "stored": {}}, headers=admin), 422)
    assert_error(client.post("/v1/relabel", json={"stored": {"colour": "red"}}, headers=admin), 422)
    assert_error(client.get("/v1/relabel/999", headers=eng), 404)


def test_archive_import_through_the_api_is_off_without_a_root(tmp_path, database_url, service_pipeline, embedder):
    from fastapi.testclient import TestClient

    from app.api.app import create_app
    from app.auth.models import TokenRole
    from app.auth.service import create_token

    app = create_app(make_settings(tmp_path / "data", database_url), pipeline=service_pipeline, embedder=embedder)
    with TestClient(app) as c:
        token = app.state.services.db.run(create_token, role=TokenRole.ADMIN, name="a")[1]
        resp = c.post("/v1/relabel", json={"archive": str(tmp_path)}, headers={"Authorization": f"Bearer {token}"})
    assert_error(resp, 422, "archive_import_disabled")


def test_relabel_diagnoses_a_stored_job_as_its_live_diagnosis_did(client, sched, eng, admin):
    """A re-labeling run reads a stored job with what the live diagnosis knew: how the job ended
    (a log that ends on a step of a job the scheduler timed out is a Hang) and its hosts."""
    steps = "".join(f" iteration {i:8d}/  500000 | consumed samples: {512 * i:12d} | elapsed time per iteration "
                    f"(ms): 1234.5 | learning rate: 1.500E-04 | lm loss: 2.345678E+00 |\n" for i in range(1, 200))
    job = new_job(client, sched, external_id="to-relabel", state="timeout")["id"]
    assert client.put(f"/v1/jobs/{job}/log", content=steps.encode(), headers=sched).status_code == 201
    live = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()["diagnosis"]["root_cause"]
    assert live["error_type"] == "Hang"
    created = client.post("/v1/relabel", json={"stored": {}}, headers=admin)
    assert created.status_code == 202, created.text
    run = _wait_done(client, eng, created.json()["id"])
    assert run["progress"]["failed"] == 0
    rows = client.get(f"/v1/jobs/{job}/diagnoses", headers=sched).json()["items"]
    assert len(rows) == 2
    again = rows[0]["diagnosis"]["root_cause"]
    assert again["error_type"] == "Hang" and "ended timeout" in again["explanation"]
