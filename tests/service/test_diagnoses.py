from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from tests.service.conftest import make_settings, new_job, sample_log
from tests.service.test_errors import assert_error


def _uploaded(client, headers, log: bytes | None = None, **job) -> int:
    job_id = new_job(client, headers, **job)["id"]
    assert client.put(f"/v1/jobs/{job_id}/log", content=log or sample_log(), headers=headers).status_code == 201
    return job_id


def test_small_log_answers_200_with_the_contract(client, sched):
    job = _uploaded(client, sched)
    resp = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "done"
    d = body["diagnosis"]
    assert d["schema"] == "logdx.diagnosis/v1"
    assert d["root_cause"]["category"] == "infrastructure"
    assert d["action"]["kind"] == "isolate_and_restart"
    assert d["action"]["suspect_hosts"] == ["node-12"]  # from the log's own `node-12: ` prefix
    assert d["decided_by"] == "rules"
    assert body["versions"]["rules"] == d["versions"]["rules"]
    assert client.get(f"/v1/diagnoses/{body['id']}", headers=sched).json() == body
    job_out = client.get(f"/v1/jobs/{job}", headers=sched).json()
    assert (job_out["error_type"], job_out["diagnosis_id"]) == ("ECCError", body["id"])


def test_large_log_answers_202_and_can_be_polled(client, sched, settings):
    job = _uploaded(client, sched, sample_log(3000))
    assert len(sample_log(3000)) > settings.sync_diagnose_max_bytes
    resp = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched)
    assert resp.status_code == 202, resp.text
    accepted = resp.json()
    assert accepted["status"] == "pending" and resp.headers["location"] == accepted["href"]
    deadline = time.monotonic() + 20
    while True:
        body = client.get(accepted["href"], headers=sched).json()
        if body["status"] in ("done", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert body["status"] == "done", body
    assert body["diagnosis"]["root_cause"]["error_type"] == "ECCError"


def test_diagnoses_are_never_overwritten(client, sched):
    job = _uploaded(client, sched)
    first = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    assert client.put(f"/v1/jobs/{job}/log", content=b"all good\n", headers=sched,
                      params={"replace": "true"}).status_code == 201
    second = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    assert second["id"] != first["id"]
    listed = client.get(f"/v1/jobs/{job}/diagnoses", headers=sched).json()["items"]
    assert [d["id"] for d in listed] == [second["id"], first["id"]]
    assert client.get(f"/v1/diagnoses/{first['id']}", headers=sched).json()["diagnosis"] == first["diagnosis"]
    # a log with output but no error and no training progress shows no failure (not a stall)
    assert second["diagnosis"]["root_cause"]["error_type"] == "Unknown"
    assert second["diagnosis"]["root_cause"]["explanation"].startswith("no failure found")


def test_labels_confirm_and_correct(client, sched, eng):
    job = _uploaded(client, sched)
    diag = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    url = f"/v1/diagnoses/{diag['id']}/labels"
    assert client.post(url, json={"verdict": "confirm"}, headers=sched).status_code == 403
    ok = client.post(url, json={"verdict": "confirm", "note": "seen it"}, headers=eng)
    assert ok.status_code == 201
    assert ok.json()["error_type"] == "ECCError" and ok.json()["created_by"] == "test-engineer"
    assert_error(client.post(url, json={"verdict": "correct"}, headers=eng), 422)
    fix = client.post(url, json={"verdict": "correct", "error_type": "NVLinkError"}, headers=eng).json()
    assert fix["category"] == "infrastructure"
    body = client.get(f"/v1/diagnoses/{diag['id']}", headers=sched).json()
    assert [lb["verdict"] for lb in body["labels"]] == ["confirm", "correct"]
    assert body["diagnosis"]["root_cause"]["error_type"] == "ECCError"  # the result itself is kept
    assert client.get(f"/v1/jobs/{job}", headers=sched).json()["error_type"] == "NVLinkError"
    assert_error(client.post(url, json={"verdict": "correct", "error_type": "Nope"}, headers=eng), 422)
    assert_error(client.post("/v1/diagnoses/999/labels", json={"verdict": "confirm"}, headers=eng), 404)


def test_one_shot_diagnose(app, client, sched):
    resp = client.post("/v1/diagnose", content=sample_log(), headers=sched)
    assert resp.status_code == 200, resp.text
    assert resp.json()["root_cause"]["error_type"] == "ECCError"
    assert resp.json()["schema"] == "logdx.diagnosis/v1"
    assert list(app.state.services.store.spool_dir.iterdir()) == []
    assert client.post("/v1/diagnose", content=b"", headers=sched).json()["root_cause"]["error_type"] == "Unknown"


def test_diagnosis_of_a_corrupt_log_fails_with_a_reason(client, sched):
    job = new_job(client, sched)["id"]
    import gzip

    body = bytearray(gzip.compress(sample_log(400)))
    body[40:60] = b"\xff" * 20
    client.put(f"/v1/jobs/{job}/log", content=bytes(body), headers=sched)
    resp = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    assert resp["status"] in ("done", "failed")
    if resp["status"] == "failed":
        assert resp["error"]


@pytest.mark.parametrize("executor", ["process"])
def test_process_pool_executor(tmp_path, service_pipeline, executor):
    settings = make_settings(tmp_path, diagnosis_executor=executor, diagnosis_workers=1)
    app = create_app(settings, pipeline=service_pipeline)
    from app.auth.models import TokenRole
    from app.auth.service import create_token

    with TestClient(app) as client:
        token = app.state.services.db.run(create_token, role=TokenRole.SCHEDULER, name="t")[1]
        headers = {"Authorization": f"Bearer {token}"}
        job = _uploaded(client, headers)
        body = client.post(f"/v1/jobs/{job}/diagnoses", headers=headers).json()
        assert body["diagnosis"]["root_cause"]["error_type"] == "ECCError"


def test_compressed_text_and_raw_download(client, sched, eng):
    import gzip

    job = new_job(client, sched)["id"]
    body = gzip.compress(sample_log())
    client.put(f"/v1/jobs/{job}/log", content=body, headers=sched)
    diag = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    text = client.get(f"/v1/diagnoses/{diag['id']}/compressed", headers=eng)
    assert text.status_code == 200 and "uncorrectable ECC error" in text.text
    raw = client.get(f"/v1/jobs/{job}/log/raw", headers=eng)
    assert raw.status_code == 200 and raw.content == body
    assert client.get(f"/v1/jobs/{job}/log/raw", headers=sched).status_code == 403
    assert_error(client.get("/v1/diagnoses/999/compressed", headers=eng), 404)


def test_labelled_cases_for_retrieval(app, client, sched, eng):
    from app.labels.service import list_labelled_cases

    job = _uploaded(client, sched)
    diag = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    client.post(f"/v1/jobs/{job}/diagnoses", headers=sched)  # unlabelled: not a case
    url = f"/v1/diagnoses/{diag['id']}/labels"
    client.post(url, json={"verdict": "confirm"}, headers=eng)
    client.post(url, json={"verdict": "correct", "error_type": "NVLinkError"}, headers=eng)
    cases = app.state.services.db.run(list_labelled_cases)
    assert [(c.diagnosis_id, c.error_type, c.verdict) for c in cases] == [(diag["id"], "NVLinkError", "correct")]
    assert "ECC" in cases[0].compressed_text


def test_isolate_names_the_host_from_the_registered_job(client, sched):
    log = b"".join(f"iteration {i}/ 100 | lm loss: 2.0E+00 |\n".encode() for i in range(5))
    log += b"[rank9]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    job = new_job(client, sched, external_id="placed", hosts=["gpu-b", "gpu-a"], gpu_count=16)["id"]
    assert client.put(f"/v1/jobs/{job}/log", content=log, headers=sched).status_code == 201
    action = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()["diagnosis"]["action"]
    # hosts in the job's list order (sorted, as Slurm expands a node list), 8 ranks each
    assert (action["kind"], action["suspect_ranks"], action["suspect_hosts"]) == ("isolate_and_restart", [9], ["gpu-b"])
    # the same bytes without a job to map ranks: no host named, and the reason sends the
    # controller to probe the job's nodes (nothing is drained on a guess)
    one_shot = client.post("/v1/diagnose", content=log, headers=sched).json()["action"]
    assert (one_shot["kind"], one_shot["suspect_hosts"]) == ("isolate_and_restart", [])
    assert "No host can be named" in one_shot["reason"] and "probe the job's nodes" in one_shot["reason"]


def test_a_log_that_ends_on_a_step_is_a_hang_only_for_a_job_that_stopped_unfinished(client, sched):
    """The log alone shows training going on to its last line; the scheduler's end state says
    whether the job then stopped (a time limit, a failure) or is still running / finished."""
    steps = "".join(f" iteration {i:8d}/  500000 | consumed samples: {512 * i:12d} | elapsed time per iteration "
                    f"(ms): 1234.5 | learning rate: 1.500E-04 | lm loss: 2.345678E+00 |\n" for i in range(1, 200))
    got = {}
    for ext, state in (("to-1", "timeout"), ("run-1", "running"), ("done-1", "completed")):
        job = new_job(client, sched, external_id=ext, state=state)["id"]
        assert client.put(f"/v1/jobs/{job}/log", content=steps.encode(), headers=sched).status_code == 201
        got[state] = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()["diagnosis"]["root_cause"]
    assert got["timeout"]["error_type"] == "Hang" and "ended timeout" in got["timeout"]["explanation"]
    assert got["timeout"]["evidence"][0]["line"] == 199
    assert got["running"]["error_type"] == got["completed"]["error_type"] == "Unknown"
