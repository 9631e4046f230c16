import json
import sys
import time
from pathlib import Path

import pytest

from app.controller import store
from app.controller.probe_plan import ProbeReport, Verdict
from app.controller.recovery import load_recovery_rules
from app.controller.schedulers.local import LocalScheduler
from app.controller.service import Controller
from app.errors import Conflict
from tests.controller.health_file import health_probes
from tests.controller.logs import progress, script_error, text, xid_fault
from tests.service.conftest import new_job

# fails on its first run (the failure being recovered), then trains for a while
FAIL_THEN_RUN = "import os, sys, time; sys.exit(1) if os.environ['LOGDX_RESTART_COUNT'] == '0' else time.sleep(30)"
NODES = [f"n{i}" for i in range(1, 9)]


class FixedProber:
    """Stands in for the probe runner (tested on real process groups in test_probe_*.py)."""

    def __init__(self, faulty):
        self.faulty = faulty
        self.calls = 0

    def __call__(self, scheduler, hosts, *, suspects):
        self.calls += 1
        return ProbeReport(Verdict.FAULTY if self.faulty else Verdict.OK, list(self.faulty), [],
                           [h for h in hosts if h not in self.faulty], "test")


@pytest.fixture
def local(tmp_path):
    return LocalScheduler(tmp_path / "sched", NODES)


def failed_job(client, sched, local, tmp_path, log: str, ext_hosts=("n1", "n2")):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    ckpt = tmp_path / "ckpt"
    for it in (10, 20):
        d = ckpt / f"iter_{it:07d}" / "mp_rank_00"
        d.mkdir(parents=True, exist_ok=True)
        (d / "model_optim_rng.pt").write_bytes(b"w")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("20")
    ext = local.submit([sys.executable, "-c", FAIL_THEN_RUN], workdir=work, nodes=2,
                       checkpoint_dir=str(ckpt))
    assert local.wait(ext, timeout_s=30).state == "FAILED"
    job = new_job(client, sched, external_id=ext, hosts=list(ext_hosts), cluster="c1")
    assert client.put(f"/v1/jobs/{job['id']}/log", content=log.encode(), headers=sched).status_code == 201
    resp = client.post(f"/v1/jobs/{job['id']}/diagnoses", headers=sched)
    assert resp.status_code in (200, 202), resp.text
    deadline = time.monotonic() + 60  # a large log is diagnosed in the background (202)
    href = resp.json().get("href")
    while resp.json()["status"] not in ("done", "failed") and time.monotonic() < deadline:
        time.sleep(0.1)
        resp = client.get(href, headers=sched)
    assert resp.json()["status"] == "done", resp.text
    return job["id"], ext, work


def controller(app, local, prober=None):
    return Controller(db=app.state.services.db, rules=load_recovery_rules(),
                      scheduler_for=lambda job: local, prober=prober)


def audit(app, job_id):
    from app.actions.service import list_actions, to_out
    return [to_out(r).model_dump() for r in app.state.services.db.run(list_actions, job_id=job_id)]


XID = text(progress(1, 30, host="n2"), xid_fault("n2"))


def test_dry_run_is_the_default_and_records_without_acting(app, client, sched, local, tmp_path):
    job_id, ext, work = failed_job(client, sched, local, tmp_path, XID)
    run = controller(app, local, FixedProber(["n2"])).recover(job_id=job_id, actor="test")
    assert run.dry_run and run.status == "done"
    assert [c["op"] for c in run.outcome["commands"]] == ["drain", "requeue"]
    assert not local.nodes()["n2"].drained and local.job(ext).restarts == 0
    assert not (work / "logdx-restart.json").exists()
    actions = audit(app, job_id)
    assert [a["kind"] for a in actions] == ["decide", "probe", "health", "drain", "requeue"]
    assert all(a["dry_run"] for a in actions)


def test_enabled_cluster_drains_the_probed_node_and_restarts_from_the_checkpoint(app, client, sched, local, tmp_path):
    job_id, ext, work = failed_job(client, sched, local, tmp_path, XID)
    db = app.state.services.db
    db.run(store.set_cluster_control, cluster="c1", actions_enabled=True, actor="admin")
    ctl = controller(app, local, FixedProber(["n2"]))
    run = ctl.recover(job_id=job_id, actor="test")
    assert (run.dry_run, run.status) == (False, "done"), run.outcome
    assert local.nodes()["n2"].drained and "logdx" in local.nodes()["n2"].reason
    info = local.job(ext)
    assert info.restarts == 1 and "n2" not in info.nodes
    restart = json.loads((work / "logdx-restart.json").read_text())
    assert restart["checkpoint_step"] == 20 and restart["exclude"] == ["n2"]
    # a retried webhook (same diagnosis, same key) gets the first run back and acts no more
    again = ctl.recover(job_id=job_id, actor="test")
    assert again.id == run.id and local.job(ext).restarts == 1
    kinds = [a["kind"] for a in audit(app, job_id)]
    assert kinds.count("drain") == 1 and kinds.count("requeue") == 1
    probes = db.run(store.list_probes, job_id=job_id)
    assert probes[0].faulty == ["n2"]
    # the job runs again: a retried webhook with another key must not requeue it a second time
    assert local.job(ext).state == "RUNNING"
    other = ctl.recover(job_id=job_id, actor="test", idempotency_key="another")
    requeue = [a for a in audit(app, job_id) if a["kind"] == "requeue"][-1]
    assert requeue["status"] == "skipped" and "RUNNING" in requeue["result"]["why"]
    assert local.job(ext).restarts == 1 and other.id != run.id


def test_actions_refused_when_the_cluster_is_not_enabled(app, client, sched, local, tmp_path):
    job_id, _, _ = failed_job(client, sched, local, tmp_path, XID)
    with pytest.raises(Conflict, match="not enabled"):
        controller(app, local).recover(job_id=job_id, actor="test", dry_run=False)


def test_one_controller_action_per_job_at_a_time(app, client, sched, local, tmp_path):
    job_id, _, _ = failed_job(client, sched, local, tmp_path, XID)
    db = app.state.services.db
    from app.db.base import utcnow
    assert db.run(store.take_lock, job_id=job_id, holder="other", now=utcnow(), ttl_s=600)
    assert not db.run(store.take_lock, job_id=job_id, holder="third", now=utcnow(), ttl_s=600)
    with pytest.raises(Conflict, match="in progress"):
        controller(app, local).recover(job_id=job_id, actor="test")
    # an expired lock (a crashed controller) is taken over
    from datetime import timedelta
    assert db.run(store.take_lock, job_id=job_id, holder="late", now=utcnow() + timedelta(hours=1), ttl_s=600)


def test_breaker_refuses_a_mass_drain(app, client, sched, local, tmp_path):
    job_id, ext, _ = failed_job(client, sched, local, tmp_path, XID)
    db = app.state.services.db
    db.run(store.set_cluster_control, cluster="c1", actions_enabled=True, actor="admin")
    run = controller(app, local, FixedProber(["n1", "n2", "n3"])).recover(job_id=job_id, actor="test")
    # 8 nodes, 25 %: two drains allowed, the third refused
    assert sorted(run.outcome["drained"]) == ["n1", "n2"] and run.outcome["breaker"] == ["n3"]
    assert not local.nodes()["n3"].drained
    refused = [a for a in audit(app, job_id)
               if a["status"] == "refused"]
    assert "circuit breaker" in refused[0]["result"]["why"]


def test_script_error_is_not_restarted(app, client, sched, local, tmp_path):
    job_id, ext, _ = failed_job(client, sched, local, tmp_path, text(progress(1, 30), script_error()))
    app.state.services.db.run(store.set_cluster_control, cluster="c1", actions_enabled=True, actor="admin")
    prober = FixedProber([])
    run = controller(app, local, prober).recover(job_id=job_id, actor="test")
    assert run.action == "notify_owner" and local.job(ext).restarts == 0 and prober.calls == 0
    notify = [a for a in audit(app, job_id) if a["kind"] == "notify"]
    assert notify[0]["params"]["to"] == "owner" and "KeyError" in notify[0]["params"]["evidence"][0]


HUNG = """
import time
def wait_for_the_allreduce_that_never_comes():
    time.sleep(120)
wait_for_the_allreduce_that_never_comes()
"""


def test_hang_captures_a_stack_dump_of_the_running_job_then_restarts(app, client, sched, local, tmp_path):
    work = tmp_path / "hung"
    work.mkdir()
    ext = local.submit([sys.executable, "-c", HUNG], workdir=work, nodes=2)
    job = new_job(client, sched, external_id=ext, hosts=["n1", "n2"], cluster="c1")["id"]
    client.put(f"/v1/jobs/{job}/log", content=text(progress(1, 30)).encode(), headers=sched)
    assert client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).status_code == 200
    app.state.services.db.run(store.set_cluster_control, cluster="c1", actions_enabled=True, actor="admin")
    import time
    time.sleep(1.0)  # let the job reach its sleep
    run = controller(app, local).recover(job_id=job, actor="watch")
    assert run.action == "capture_and_restart" and run.status == "done", run.outcome
    capture = next(a for a in audit(app, job) if a["kind"] == "capture")
    assert capture["result"]["last_step"] == 30
    dumps = "".join(capture["result"]["stack_dumps"].values())
    assert "wait_for_the_allreduce_that_never_comes" in dumps, capture["result"]
    assert local.job(ext).restarts == 1


class RecordingProber(FixedProber):
    """FixedProber that keeps the hosts it was asked to test."""

    def __init__(self, faulty):
        super().__init__(faulty)
        self.asked = []

    def __call__(self, scheduler, hosts, *, suspects):
        self.asked.append((list(hosts), list(suspects)))
        return super().__call__(scheduler, hosts, suspects=suspects)


def incidents(app, hosts):
    from datetime import datetime, timezone
    return app.state.services.db.run(store.host_failures, cluster="c1", hosts=hosts,
                                     since=datetime(2000, 1, 1, tzinfo=timezone.utc))


def test_dry_runs_are_not_host_incidents(app, client, sched, local, tmp_path):
    job_id, _, _ = failed_job(client, sched, local, tmp_path, XID)
    ctl = controller(app, local, FixedProber(["n2"]))
    for key in ("a", "b", "c"):
        assert ctl.recover(job_id=job_id, actor="test", idempotency_key=key).dry_run
    assert incidents(app, ["n2"]) == {}  # three rehearsals, no repeat offender
    db = app.state.services.db
    db.run(store.set_cluster_control, cluster="c1", actions_enabled=True, actor="admin")
    assert not ctl.recover(job_id=job_id, actor="test").dry_run
    assert incidents(app, ["n2"]) == {"n2": 1}


def test_hostlist_and_fqdn_hosts_are_the_scheduler_nodes(app, client, sched, local, tmp_path):
    log = text(progress(1, 30, host="n2.cluster.example"), xid_fault("n2.cluster.example"))
    job_id, _, _ = failed_job(client, sched, local, tmp_path, log, ext_hosts=("n[1-2]",))
    app.state.services.db.run(store.set_cluster_control, cluster="c1", actions_enabled=True, actor="admin")
    prober = RecordingProber(["n2"])
    run = controller(app, local, prober).recover(job_id=job_id, actor="test")
    assert prober.asked == [(["n1", "n2"], ["n2"])], run.outcome
    assert run.outcome["drained"] == ["n2"] and local.nodes()["n2"].drained
    assert incidents(app, ["n2"]) == {"n2": 1}


def test_a_probe_of_hosts_the_scheduler_does_not_know_is_unknown_never_ok(app, client, sched, local, tmp_path):
    log = text(progress(1, 30, host="gpu-b.example"), xid_fault("gpu-b.example"))
    job_id, ext, _ = failed_job(client, sched, local, tmp_path, log, ext_hosts=("gpu-a.example", "gpu-b.example"))
    prober = RecordingProber([])
    run = controller(app, local, prober).recover(job_id=job_id, actor="test")
    assert prober.asked == [] and run.outcome["probe"]["verdict"] == "unknown", run.outcome
    probe = [a for a in audit(app, job_id) if a["kind"] == "probe"][0]
    assert probe["status"] == "skipped" and probe["result"]["verdict"] == "unknown"


def test_a_host_failing_a_health_probe_is_drained_though_the_allgather_passed(app, client, sched, local, tmp_path):
    job_id, ext, work = failed_job(client, sched, local, tmp_path, XID)
    app.state.services.db.run(store.set_cluster_control, cluster="c1", actions_enabled=True, actor="admin")
    ctl = Controller(db=app.state.services.db, rules=load_recovery_rules(), scheduler_for=lambda job: local,
                     prober=FixedProber([]), health_probes=health_probes(tmp_path, bad="n2"))
    run = ctl.recover(job_id=job_id, actor="test")
    assert run.outcome["probe"]["verdict"] == "ok" and run.outcome["health"]["failed"] == ["n2"], run.outcome
    assert run.outcome["drained"] == ["n2"] and local.nodes()["n2"].drained
    assert run.outcome["restart"]["exclude"] == ("n2",) and "n2" not in local.job(ext).nodes
    health = next(a for a in audit(app, job_id) if a["kind"] == "health")
    checks = {c["probe"]: c["status"] for c in health["result"]["checks"]["n2"]}
    assert checks == {"ecc": "fail", "gpu-health": "unavailable"}  # a missing tool is unknown, not failed


def test_the_host_the_log_names_for_a_hardware_fault_is_excluded_when_every_probe_passes(app, client, sched, local,
                                                                                         tmp_path):
    job_id, ext, work = failed_job(client, sched, local, tmp_path, XID)
    app.state.services.db.run(store.set_cluster_control, cluster="c1", actions_enabled=True, actor="admin")
    ctl = Controller(db=app.state.services.db, rules=load_recovery_rules(), scheduler_for=lambda job: local,
                     prober=FixedProber([]), health_probes=health_probes(tmp_path))
    run = ctl.recover(job_id=job_id, actor="test")
    assert run.status == "done" and run.outcome["health"]["passed"] == ["n2"], run.outcome
    assert "drained" not in run.outcome and not local.nodes()["n2"].drained
    assert run.outcome["excluded_unproven"] == ["n2"] and run.outcome["restart"]["exclude"] == ("n2",)
    info = local.job(ext)
    assert info.restarts == 1 and "n2" not in info.nodes, info
    assert json.loads((work / "logdx-restart.json").read_text())["exclude"] == ["n2"]


def test_a_loss_spike_rolls_back_before_its_exact_onset_not_the_sampled_one(app, client, sched, local, tmp_path):
    # 12,000 iterations, the loss jumps at 9,137; the compressor samples the metric lines, so
    # it first sees the spike many iterations late. A checkpoint saved at 9,150 already holds
    # the bad update: the rollback must go to 9,136, the last healthy iteration.
    log = text(progress(1, 9_136, host="n1"), progress(9_137, 12_000, host="n1", loss=9.5))
    job_id, ext, work = failed_job(client, sched, local, tmp_path, log)
    ckpt = tmp_path / "ckpt"
    for it in (8_000, 9_136, 9_150):
        d = ckpt / f"iter_{it:07d}" / "mp_rank_00"
        d.mkdir(parents=True)
        (d / "model_optim_rng.pt").write_bytes(b"w")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("9150")
    diagnosis = client.get(f"/v1/jobs/{job_id}/diagnoses", headers=sched).json()["items"][0]["diagnosis"]
    rc = diagnosis["root_cause"]
    assert (rc["error_type"], rc["last_good_step"], rc["onset_step"]) == ("LossSpike", 9_136, 9_137), rc
    app.state.services.db.run(store.set_cluster_control, cluster="c1", actions_enabled=True, actor="admin")
    run = controller(app, local).recover(job_id=job_id, actor="test", checkpoint_dir=str(ckpt))
    assert run.status == "done", run.outcome
    restart = json.loads((work / "logdx-restart.json").read_text())
    assert restart["checkpoint_step"] == 9_136 and restart["skip_batches"] == [9_137, 9_337], restart
