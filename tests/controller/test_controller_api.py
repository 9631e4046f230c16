"""The controller's REST surface on the local scheduler (real app, real DB, real processes)."""

import sys

import pytest

from app.controller.schedulers.local import LocalScheduler
from tests.controller.logs import progress, text, xid_fault
from tests.controller.ports import free_port
from tests.service.conftest import make_settings, new_job

NODES = ["n1", "n2", "n3", "n4"]


@pytest.fixture
def settings(tmp_path, database_url):
    return make_settings(tmp_path / "data", database_url, controller_local_nodes=NODES,
                         controller_probe_timeout_s=5, controller_probe_port=free_port())


def test_recover_dry_run_then_enabled_idempotent(client, settings, sched, eng, admin, tmp_path):
    local = LocalScheduler(settings.data_dir / "local-scheduler", NODES)
    (tmp_path / "w").mkdir()
    ext = local.submit([sys.executable, "-c", "import time; time.sleep(30)"], workdir=tmp_path / "w", nodes=2)
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
    assert [r["idempotency_key"] for r in runs] == ["k1", "epilog-1"]
    probes = client.get(f"/v1/jobs/{job}/probes", headers=eng).json()["items"]
    assert probes and probes[0]["verdict"] == "ok" and probes[0]["hosts"] == ["n1", "n2"]
    kinds = [a["kind"] for a in client.get(f"/v1/jobs/{job}/actions", headers=eng).json()["items"]]
    assert kinds.count("requeue") == 2  # one dry-run, one real


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
