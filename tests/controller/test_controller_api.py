"""The controller's REST surface on the local scheduler (real app, real DB, real processes)."""

import sys

import pytest

from app.controller.schedulers.local import LocalScheduler
from tests.controller.logs import progress, text, xid_fault
from tests.controller.ports import free_port
from tests.service.conftest import make_settings, new_job

# fails on its first run (the failure being recovered), then trains for a while
FAIL_THEN_RUN = "import os, sys, time; sys.exit(1) if os.environ['LOGDX_RESTART_COUNT'] == '0' else time.sleep(30)"
NODES = ["n1", "n2", "n3", "n4"]


@pytest.fixture
def settings(tmp_path, database_url):
    return make_settings(tmp_path / "data", database_url, controller_local_nodes=NODES,
                         controller_probe_timeout_s=5, controller_probe_port=free_port())


def test_recover_dry_run_then_enabled_idempotent(client, settings, sched, eng, admin, tmp_path):
    local = LocalScheduler(settings.data_dir / "local-scheduler", NODES)
    (tmp_path / "w").mkdir()
    ext = local.submit([sys.executable, "-c", FAIL_THEN_RUN], workdir=tmp_path / "w", nodes=2)
    assert local.wait(ext, timeout_s=30).state == "FAILED"
    job = new_job(client, sched, external_id=ext, hosts=["n1", "n2"], cluster="lab")["id"]
    client.put(f"/v1/jobs/{job}/log", content=text(progress(1, 30, host="n2"), xid_fault("n2")).encode(), headers=sched)
    assert client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).status_code == 200

    dry = client.post(f"/v1/jobs/{job}/recover", json={"idempotency_key": "k1"}, headers=sched)
    assert dry.status_code == 200, dry.text
    assert dry.json()["dry_run"] and dry.json()["action"] == "isolate_and_restart"
    refused = client.post(f"/v1/jobs/{job}/recover", json={"dry_run": False, "idempotency_key": "k2"}, headers=sched)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "conflict"

    assert client.put("/v1/clusters/lab/controller", json={"actions_enabled": True}, headers=sched).status_code == 403
    assert client.put("/v1/clusters/lab/controller", json={"actions_enabled": True}, headers=admin).json()["actions_enabled"]
    env = {"Idempotency-Key": "epilog-1", **sched}
    real = client.post(f"/v1/jobs/{job}/recover", headers=env)
    assert real.status_code == 200 and not real.json()["dry_run"], real.text
    body = real.json()
    # no fault injected: the probe passes and nobody is drained; the job restarts
    assert body["outcome"]["probe"]["verdict"] == "ok" and "drained" not in body["outcome"]
    assert local.job(ext).restarts == 1
    assert client.post(f"/v1/jobs/{job}/recover", headers=env).json()["id"] == body["id"]
    assert local.job(ext).restarts == 1

    runs = client.get(f"/v1/jobs/{job}/recoveries", headers=eng).json()["items"]
    assert [r["idempotency_key"] for r in runs] == ["dry-run:k1", "epilog-1"]
    probes = client.get(f"/v1/jobs/{job}/probes", headers=eng).json()["items"]
    assert probes and probes[0]["verdict"] == "ok" and probes[0]["hosts"] == ["n1", "n2"]
    kinds = [a["kind"] for a in client.get(f"/v1/jobs/{job}/actions", headers=eng).json()["items"]]
    assert kinds.count("requeue") == 2  # one dry-run, one real


def test_a_dry_run_never_answers_a_real_request(client, settings, sched, eng, admin, tmp_path):
    """Dry run first (default key, then an explicit one), enable the cluster, ask again with the
    same keys: the real request acts; its repeat and a later dry run with its key get it back."""
    local = LocalScheduler(settings.data_dir / "local-scheduler", NODES)
    (tmp_path / "w").mkdir()
    ext = local.submit([sys.executable, "-c", FAIL_THEN_RUN], workdir=tmp_path / "w", nodes=2)
    assert local.wait(ext, timeout_s=30).state == "FAILED"
    job = new_job(client, sched, external_id=ext, hosts=["n1", "n2"], cluster="lab")["id"]
    client.put(f"/v1/jobs/{job}/log", content=text(progress(1, 30, host="n2"), xid_fault("n2")).encode(), headers=sched)
    assert client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).status_code == 200
    dry_default = client.post(f"/v1/jobs/{job}/recover", headers=sched).json()
    dry_keyed = client.post(f"/v1/jobs/{job}/recover", headers={"Idempotency-Key": "epilog-7", **sched}).json()
    assert dry_default["dry_run"] and dry_keyed["dry_run"] and dry_default["id"] != dry_keyed["id"]
    assert client.put("/v1/clusters/lab/controller", json={"actions_enabled": True}, headers=admin).status_code == 200

    real = client.post(f"/v1/jobs/{job}/recover", json={"dry_run": False}, headers=sched)
    assert real.status_code == 200, real.text
    assert not real.json()["dry_run"] and real.json()["id"] not in (dry_default["id"], dry_keyed["id"])
    assert local.job(ext).restarts == 1
    keyed = client.post(f"/v1/jobs/{job}/recover", headers={"Idempotency-Key": "epilog-7", **sched}).json()
    assert not keyed["dry_run"] and keyed["idempotency_key"] == "epilog-7"
    again = client.post(f"/v1/jobs/{job}/recover", json={"dry_run": False}, headers=sched).json()
    rehearse = client.post(f"/v1/jobs/{job}/recover", json={"dry_run": True}, headers=sched).json()
    assert again["id"] == rehearse["id"] == real.json()["id"]
    assert local.job(ext).restarts == 1  # the restarted job runs: the second real key did not requeue it
    runs = client.get(f"/v1/jobs/{job}/recoveries", headers=eng).json()["items"]
    assert [(r["dry_run"], r["idempotency_key"]) for r in runs] == [
        (True, f"dry-run:job:{job}:diagnosis:{dry_default['diagnosis_id']}"), (True, "dry-run:epilog-7"),
        (False, f"job:{job}:diagnosis:{dry_default['diagnosis_id']}"), (False, "epilog-7")]


def test_probe_endpoint_refuses_unknown_hosts_and_runs_a_real_probe(client, admin, eng):
    bad = client.post("/v1/probes", json={"cluster": "lab", "hosts": ["n1", "nope"]}, headers=admin)
    assert bad.status_code == 422 and "nope" in bad.json()["error"]["message"]
    ok = client.post("/v1/probes", json={"cluster": "lab", "hosts": ["n1", "n2", "n3"]}, headers=admin)
    assert ok.status_code == 201, ok.text
    assert ok.json()["verdict"] == "ok" and ok.json()["faulty"] == []
    assert client.get("/v1/probes", headers=eng).json()["items"][0]["id"] == ok.json()["id"]


def test_recover_without_a_diagnosis_is_a_clear_400(client, sched):
    job = new_job(client, sched, external_id="nodiag")["id"]
    resp = client.post(f"/v1/jobs/{job}/recover", headers=sched)
    assert resp.status_code == 400 and "no finished diagnosis" in resp.json()["error"]["message"]
    assert client.post("/v1/jobs/999999/recover", headers=sched).status_code == 404


def test_cluster_switch_validates_and_updates(client, admin, eng):
    assert client.put("/v1/clusters/lab/controller", json={"actions_enabled": True, "node_count": 2**40},
                      headers=admin).status_code == 422
    assert client.get("/v1/clusters/lab/controller", headers=eng).status_code == 404
    first = client.put("/v1/clusters/lab/controller", json={"actions_enabled": True, "node_count": 64}, headers=admin)
    assert first.status_code == 200 and first.json()["node_count"] == 64
    again = client.put("/v1/clusters/lab/controller", json={"actions_enabled": False}, headers=admin).json()
    assert (again["actions_enabled"], again["node_count"]) == (False, 64)
    assert client.get("/v1/clusters/lab/controller", headers=eng).json()["actions_enabled"] is False
