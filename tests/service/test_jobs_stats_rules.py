from __future__ import annotations

from tests.service.conftest import new_job, sample_log
from tests.service.test_errors import assert_error


def test_create_job_is_idempotent_on_cluster_and_external_id(client, sched):
    body = {"cluster": "c1", "external_id": "42", "hosts": ["n1"], "gpu_count": 8, "state": "running"}
    first = client.post("/v1/jobs", json=body, headers=sched)
    assert first.status_code == 201 and first.headers["location"] == f"/v1/jobs/{first.json()['id']}"
    again = client.post("/v1/jobs", json=body, headers=sched)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    # the epilog reports the end: same job, updated
    end = client.post("/v1/jobs", json={**body, "state": "failed", "ended_at": "2024-01-01T00:00:00Z",
                                        "hosts": ["n2"], "attempt": 2}, headers=sched).json()
    assert end["id"] == first.json()["id"]
    assert (end["state"], end["hosts"], end["attempts"]) == ("failed", ["n1", "n2"], [1, 2])
    other = client.post("/v1/jobs", json={**body, "cluster": "c2"}, headers=sched)
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]


def test_job_validation(client, sched):
    bad = {"cluster": "c", "external_id": "1", "started_at": "2024-01-02T00:00:00Z",
           "ended_at": "2024-01-01T00:00:00Z"}
    assert_error(client.post("/v1/jobs", json=bad, headers=sched), 422)
    assert_error(client.post("/v1/jobs", json={"cluster": "c", "external_id": "1", "gpu_count": -1},
                             headers=sched), 422)
    assert_error(client.post("/v1/jobs", json={"cluster": "c", "external_id": "1", "bogus": 1},
                             headers=sched), 422)


def _diagnosed(client, sched, ext: str, log: bytes, **fields) -> int:
    job = new_job(client, sched, external_id=ext, **fields)["id"]
    client.put(f"/v1/jobs/{job}/log", content=log, headers=sched)
    assert client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()["status"] == "done"
    return job


def test_list_jobs_filters_and_pagination(client, sched, eng):
    ecc = _diagnosed(client, sched, "e1", sample_log(), hosts=["node-1"])
    _diagnosed(client, sched, "e2", sample_log(), cluster="c2", hosts=["node-2"])
    ok = _diagnosed(client, sched, "ok", b"fine\n", state="completed", hosts=["node-1"],
                    ended_at="2024-06-01T00:00:00Z")

    def ids(**params):
        resp = client.get("/v1/jobs", params=params, headers=eng)
        assert resp.status_code == 200, resp.text
        return [j["id"] for j in resp.json()["items"]]

    assert ids(error_type="ECCError", cluster="c1") == [ecc]
    assert ids(category="infrastructure") == [ecc + 1, ecc]
    assert ids(host="node-1") == [ok, ecc]
    assert ids(state="completed") == [ok]
    assert ids(since="2024-05-15T00:00:00Z") == [ok]
    assert ids(until="2024-05-15T00:00:00Z") == [ecc + 1, ecc]
    page = client.get("/v1/jobs", params={"limit": 2, "offset": 2}, headers=eng).json()
    assert (page["total"], [j["id"] for j in page["items"]]) == (3, [ecc])
    assert_error(client.get("/v1/jobs", params={"limit": 0}, headers=eng), 422)
    assert_error(client.get("/v1/jobs", params={"category": "bogus"}, headers=eng), 422)


def test_stats_count_failed_jobs_and_gpu_hours(client, sched, eng):
    # 16 GPUs x 10 h each (see new_job)
    _diagnosed(client, sched, "a", sample_log(), hosts=["node-1", "node-2"])
    _diagnosed(client, sched, "b", sample_log(), hosts=["node-1"], gpu_count=8)
    _diagnosed(client, sched, "c", b"Traceback (most recent call last):\nKeyError: 'lr'\n", hosts=["node-3"],
               cluster="c2", gpu_count=1)
    stats = client.get("/v1/stats", headers=eng).json()
    assert stats["failed_jobs"] == 3
    by_type = {b["key"]: b for b in stats["by_error_type"]}
    assert by_type["ECCError"]["failed_jobs"] == 2
    assert by_type["ECCError"]["gpu_hours"] == 240.0
    assert by_type["KeyError"]["gpu_hours"] == 10.0
    assert round(by_type["ECCError"]["gpu_hours_share"], 3) == round(240 / 250, 3)
    by_cat = {b["key"]: b for b in stats["by_category"]}
    assert by_cat["infrastructure"]["error_types"] == {"ECCError": 2}
    by_host = {b["key"]: b for b in stats["by_host"]}
    assert by_host["node-1"]["failed_jobs"] == 2 and by_host["node-1"]["gpu_hours"] == 160.0
    assert {b["key"] for b in stats["by_cluster"]} == {"c1", "c2"}
    only_c2 = client.get("/v1/stats", params={"cluster": "c2"}, headers=eng).json()
    assert only_c2["failed_jobs"] == 1
    none = client.get("/v1/stats", params={"since": "2030-01-01T00:00:00Z"}, headers=eng).json()
    assert none["failed_jobs"] == 0 and none["by_error_type"] == []


def test_active_rules_are_listed(app, client, eng):
    body = client.get("/v1/rules", headers=eng).json()
    assert body["version"] == app.state.services.pipeline.ruleset.version
    assert {"t-ecc", "t-iter"} <= {r["id"] for r in body["rules"]}


def test_proposed_rules_review(client, eng, admin):
    good = {"pattern": r"GPU has fallen off the bus", "error_type": "NodeFailure",
            "evidence": ["NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."]}
    created = client.post("/v1/rules/proposed", json=good, headers=eng)
    assert created.status_code == 201, created.text
    rule = created.json()
    assert rule["status"] == "proposed" and rule["validation"]["valid"] and rule["category"] == "infrastructure"
    assert "fallen off the bus" in rule["yaml"]
    assert_error(client.post("/v1/rules/proposed", json={**good, "pattern": "(unclosed"}, headers=eng), 422,
                 "invalid_pattern")
    bad = client.post("/v1/rules/proposed", json={**good, "pattern": "nothing like it"}, headers=eng).json()
    assert bad["validation"]["unmatched"] == good["evidence"] and not bad["validation"]["valid"]
    assert [r["id"] for r in client.get("/v1/rules/proposed", params={"status": "proposed"},
                                         headers=eng).json()["items"]] == [bad["id"], rule["id"]]
    assert client.post(f"/v1/rules/proposed/{rule['id']}/approve", headers=eng).status_code == 403
    approved = client.post(f"/v1/rules/proposed/{rule['id']}/approve", json={"note": "ok"}, headers=admin).json()
    assert (approved["status"], approved["reviewed_by"], approved["review_note"]) == ("approved", "test-admin", "ok")
    assert_error(client.post(f"/v1/rules/proposed/{rule['id']}/reject", headers=admin), 409)
    assert_error(client.post(f"/v1/rules/proposed/{bad['id']}/approve", headers=admin), 409, "invalid_rule")
    assert client.post(f"/v1/rules/proposed/{bad['id']}/reject", headers=admin).json()["status"] == "rejected"
    assert_error(client.post("/v1/rules/proposed/999/approve", headers=admin), 404)


def test_actions_audit_log(app, client, sched, eng):
    from app.actions.service import record_action

    job = new_job(client, sched)["id"]
    app.state.services.db.run(record_action, job_id=job, kind="drain", actor="controller", dry_run=True,
                              params={"hosts": ["node-12"]})
    items = client.get(f"/v1/jobs/{job}/actions", headers=eng).json()["items"]
    assert [(a["kind"], a["status"], a["params"]) for a in items] == [("drain", "dry_run", {"hosts": ["node-12"]})]


def test_metrics_count_requests_bytes_and_rule_hits(client, sched):
    job = new_job(client, sched)["id"]
    client.put(f"/v1/jobs/{job}/log", content=sample_log(), headers=sched)
    client.post(f"/v1/jobs/{job}/diagnoses", headers=sched)
    text = client.get("/metrics").text
    assert 'logdx_http_requests_total{method="PUT",route="/v1/jobs/{job_id}/log",status="201"} 1.0' in text
    assert f'logdx_ingested_bytes_total{{kind="upload"}} {float(len(sample_log()))}' in text
    assert 'logdx_rule_hits_total{error_type="ECCError",rule_id="t-ecc"} 1.0' in text
    assert 'logdx_diagnosis_duration_seconds_count{mode="sync"} 1.0' in text
    assert "logdx_llm_calls_total" in text


def test_concurrent_creates_and_identical_uploads(client, sched):
    from concurrent.futures import ThreadPoolExecutor

    body = {"cluster": "race", "external_id": "1"}
    with ThreadPoolExecutor(8) as pool:
        created = list(pool.map(lambda _: client.post("/v1/jobs", json=body, headers=sched), range(8)))
    assert sorted(r.status_code for r in created) == [200] * 7 + [201]
    assert len({r.json()["id"] for r in created}) == 1
    jobs = [new_job(client, sched, external_id=f"u{i}")["id"] for i in range(6)]
    with ThreadPoolExecutor(6) as pool:
        puts = list(pool.map(lambda j: client.put(f"/v1/jobs/{j}/log", content=sample_log(), headers=sched), jobs))
    assert [r.status_code for r in puts] == [201] * 6
    assert len({r.json()["sha256"] for r in puts}) == 1


def test_stats_over_time(client, sched, eng):
    _diagnosed(client, sched, "m1", sample_log(), ended_at="2024-05-01T10:00:00Z")
    _diagnosed(client, sched, "m2", sample_log(), started_at="2024-06-01T00:00:00Z",
               ended_at="2024-06-02T00:00:00Z", gpu_count=1)
    stats = client.get("/v1/stats", params={"interval": "month"}, headers=eng).json()
    assert [(b["key"], b["failed_jobs"], b["gpu_hours"]) for b in stats["by_period"]] == [
        ("2024-05", 1, 160.0), ("2024-06", 1, 24.0)]
    assert client.get("/v1/stats", headers=eng).json()["by_period"] == []
    assert_error(client.get("/v1/stats", params={"interval": "year"}, headers=eng), 422)


def test_stats_count_only_jobs_the_scheduler_reported_as_failed(client, sched, eng):
    _diagnosed(client, sched, "failed", sample_log())
    _diagnosed(client, sched, "never-reported", sample_log(), state=None)  # registered without a state
    _diagnosed(client, sched, "done", sample_log(), state="completed")
    _diagnosed(client, sched, "oom", sample_log(), state="out_of_memory")
    jobs = client.get("/v1/jobs", headers=eng).json()["items"]
    assert sorted(j["state"] for j in jobs) == ["completed", "failed", "out_of_memory", "unknown"]
    stats = client.get("/v1/stats", headers=eng).json()
    assert stats["failed_jobs"] == 2
    assert stats["diagnosed_not_failed"] == 2
    assert {b["key"]: b["failed_jobs"] for b in stats["by_error_type"]} == {"ECCError": 2}
    assert stats["gpu_hours"] == 320.0
