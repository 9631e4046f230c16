"""End to end on a real local Slurm cluster (.ci/slurm.sh: 4 node names on this host): a job
fails, logdx diagnoses its log, the controller probes through srun, drains, requeues, and the job
restarts from the right checkpoint. Probe faults are injected into the probe workers of a named
node (LOGDX_PROBE_FAULTS): there is no broken hardware here."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from app.controller import store
from app.controller.probe_runner import CommandProbeRunner, SchedulerProber
from app.controller.recovery import RULES_FILE, load_recovery_rules
from app.controller.schedulers.slurm import SlurmScheduler
from app.controller.service import Controller
from tests.controller.ports import free_port
from tests.controller.slurm_job import write_job
from tests.controller.health_file import health_probes

CONF = os.environ.get("LOGDX_TEST_SLURM_CONF")
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(
    not CONF, reason='no local Slurm cluster: run eval "$(.ci/slurm.sh)" first (.ci/run does)')]
NODES = ["node1", "node2", "node3", "node4"]


@pytest.fixture
def database_url():
    """SQLite only: each case takes a minute of real Slurm; the store's behaviour on PostgreSQL is
    covered by test_controller_service.py."""
    return None


@pytest.fixture
def slurm():
    sched = SlurmScheduler(conf=CONF)
    for n in NODES:
        subprocess.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], env=sched.env, capture_output=True)
    yield sched
    for n in NODES:
        subprocess.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], env=sched.env, capture_output=True)


def submit(slurm, work: Path, mode: str, fail_runs: int, nodes: int = 2) -> str:
    script = write_job(work)
    out = subprocess.run(["sbatch", "--parsable", "-N", str(nodes), "--requeue", "-D", str(work),
                          "-o", str(work / "job-%j.log"), "--comment", f"logdx_ckpt={work / 'ckpt'}",
                          str(script), mode, str(fail_runs)],
                         env=slurm.env, capture_output=True, text=True, check=True)
    return out.stdout.strip().split(";")[0]


def wait(slurm, ext: str, *, restarts: int, timeout_s: float = 90) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = slurm.job(ext)
        if info.restarts >= restarts and info.state in ("FAILED", "COMPLETED", "CANCELLED", "NODE_FAIL"):
            return info.state
        time.sleep(0.3)
    raise AssertionError(f"job {ext} still {slurm.job(ext).state} after {timeout_s} s")


def report_failure(client, sched, cluster: str, slurm, ext: str, work: Path) -> int:
    """What a Slurm epilog does: register the attempt, upload its log, diagnose it."""
    info = slurm.job(ext)
    attempt = info.restarts + 1
    job = client.post("/v1/jobs", json={"cluster": cluster, "external_id": ext, "scheduler": "slurm",
                                        "hosts": list(info.nodes), "state": "failed", "attempt": attempt},
                      headers=sched).json()
    log = (work / f"job-{ext}.log").read_bytes()
    assert client.put(f"/v1/jobs/{job['id']}/log", params={"attempt": attempt}, content=log,
                      headers=sched).status_code == 201
    resp = client.post(f"/v1/jobs/{job['id']}/diagnoses", json={"attempt": attempt}, headers=sched)
    assert resp.status_code == 200, resp.text
    return job["id"]


def controller(app, slurm, faults: str = "", rules=None, health=()) -> Controller:
    prober = SchedulerProber(timeout_s=5, nbytes=1 << 20, port=free_port(),
                             env={"LOGDX_PROBE_FAULTS": faults, "PYTHONPATH": str(Path.cwd())})
    return Controller(db=app.state.services.db, rules=rules or load_recovery_rules(),
                      scheduler_for=lambda job: slurm, prober=prober, health_probes=health)


def enable(app, cluster: str) -> None:
    app.state.services.db.run(store.set_cluster_control, cluster=cluster, actions_enabled=True,
                              actor="admin", node_count=len(NODES))


def quick_rules(tmp_path, **defaults):
    data = yaml.safe_load(RULES_FILE.read_text())
    for p in data["policies"]:
        if p["id"] == "transient":
            p["backoff"] = {"initial_s": 1, "factor": 2.0, "max_s": 10}
            p["budget"] = {"attempts": defaults.pop("attempts", 3), "window_s": 3600}
    data["defaults"].update(defaults)
    path = tmp_path / "recovery.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_recovery_rules(path)


def test_hardware_fault_probe_drain_requeue_and_resume_from_checkpoint(app, client, sched, slurm, tmp_path):
    cluster = f"slurm-{uuid.uuid4().hex[:6]}"
    ext = submit(slurm, tmp_path, "xid", fail_runs=1)
    assert wait(slurm, ext, restarts=0) == "FAILED"
    nodes = slurm.job(ext).nodes
    bad = nodes[-1]
    job_id = report_failure(client, sched, cluster, slurm, ext, tmp_path)
    enable(app, cluster)
    t0 = time.monotonic()
    run = controller(app, slurm, faults=f"{bad}=exit_before").recover(job_id=job_id, actor="epilog")
    assert run.status == "done", run.outcome
    assert run.outcome["probe"]["faulty"] == [bad] and run.outcome["drained"] == [bad]
    node = slurm.nodes()[bad]
    assert "DRAIN" in node.state and "logdx" in (node.reason or "")
    while slurm.job(ext).state not in ("RUNNING", "COMPLETED") and time.monotonic() - t0 < 60:
        time.sleep(0.2)
    assert wait(slurm, ext, restarts=1) == "COMPLETED"
    info = slurm.job(ext)
    assert bad not in info.nodes
    log = (tmp_path / f"job-{ext}.log").read_text()
    assert "resuming from checkpoint" in log and "iter_0000020 step 20" in log, log[-500:]


def test_script_error_is_not_restarted(app, client, sched, slurm, tmp_path):
    cluster = f"slurm-{uuid.uuid4().hex[:6]}"
    ext = submit(slurm, tmp_path, "script", fail_runs=9)
    wait(slurm, ext, restarts=0)
    job_id = report_failure(client, sched, cluster, slurm, ext, tmp_path)
    enable(app, cluster)
    run = controller(app, slurm).recover(job_id=job_id, actor="epilog")
    assert run.action == "notify_owner" and run.outcome.get("restart") is None
    time.sleep(2)
    assert (slurm.job(ext).state, slurm.job(ext).restarts) == ("FAILED", 0)


def test_transient_error_retried_with_backoff_until_its_budget(app, client, sched, slurm, tmp_path):
    cluster = f"slurm-{uuid.uuid4().hex[:6]}"
    rules = quick_rules(tmp_path, same_failure_limit=10, attempts=3)
    ext = submit(slurm, tmp_path, "s3", fail_runs=99)
    ctl = controller(app, slurm, rules=rules)
    enable(app, cluster)
    delays = []
    for attempt in range(4):
        wait(slurm, ext, restarts=attempt)
        job_id = report_failure(client, sched, cluster, slurm, ext, tmp_path)
        run = ctl.recover(job_id=job_id, actor="epilog")
        if run.outcome.get("restart") is None:
            break
        delays.append(run.outcome["restart"]["delay_s"])
    assert delays == [1, 2, 4]
    assert run.status == "stopped" and "budget" in run.reason


def test_same_fingerprint_three_times_without_progress_stops(app, client, sched, slurm, tmp_path):
    cluster = f"slurm-{uuid.uuid4().hex[:6]}"
    ctl = controller(app, slurm, rules=quick_rules(tmp_path, attempts=10))
    ext = submit(slurm, tmp_path, "s3", fail_runs=99)
    enable(app, cluster)
    runs = []
    for attempt in range(3):
        wait(slurm, ext, restarts=attempt)
        runs.append(ctl.recover(job_id=report_failure(client, sched, cluster, slurm, ext, tmp_path), actor="epilog"))
    assert [r.status for r in runs] == ["done", "done", "stopped"]
    assert "same failure" in runs[-1].reason and len({r.fingerprint for r in runs}) == 1


def test_breaker_stops_a_mass_drain(app, client, sched, slurm, tmp_path):
    cluster = f"slurm-{uuid.uuid4().hex[:6]}"
    ext = submit(slurm, tmp_path, "xid", fail_runs=1, nodes=4)
    wait(slurm, ext, restarts=0)
    job_id = report_failure(client, sched, cluster, slurm, ext, tmp_path)
    enable(app, cluster)
    run = controller(app, slurm, faults="node1=exit_before,node3=exit_before").recover(job_id=job_id, actor="epilog")
    subprocess.run(["scancel", ext], env=slurm.env)
    assert run.outcome["probe"]["faulty"] == ["node1", "node3"]
    assert len(run.outcome["drained"]) == 1 and len(run.outcome["breaker"]) == 1
    drained = [n for n, i in slurm.nodes().items() if "DRAIN" in i.state]
    assert drained == run.outcome["drained"]


def test_no_requeue_when_too_few_usable_nodes_are_left(app, client, sched, eng, slurm, tmp_path):
    cluster = f"slurm-{uuid.uuid4().hex[:6]}"
    ext = submit(slurm, tmp_path, "xid", fail_runs=1, nodes=3)
    assert wait(slurm, ext, restarts=0) == "FAILED"
    nodes = slurm.job(ext).nodes
    bad, spare = nodes[-1], next(n for n in NODES if n not in nodes)
    slurm.drain(spare, reason="maintenance (test)")
    job_id = report_failure(client, sched, cluster, slurm, ext, tmp_path)
    enable(app, cluster)
    run = controller(app, slurm, faults=f"{bad}=exit_before").recover(job_id=job_id, actor="epilog")
    assert run.outcome["drained"] == [bad] and "restart" not in run.outcome, run.outcome
    assert run.status == "stopped" and "needs 3 nodes and only 2" in run.reason, run.reason
    time.sleep(3)
    assert (slurm.job(ext).state, slurm.job(ext).restarts) == ("FAILED", 0)
    kinds = [a["kind"] for a in client.get(f"/v1/jobs/{job_id}/actions", headers=eng).json()["items"]]
    assert kinds[-1] == "notify", kinds


def test_the_breaker_lets_the_drain_of_the_host_the_log_names_through(app, client, sched, slurm, tmp_path):
    cluster = f"slurm-{uuid.uuid4().hex[:6]}"
    ext = submit(slurm, tmp_path, "xid", fail_runs=1, nodes=4)
    wait(slurm, ext, restarts=0)
    named = slurm.job(ext).nodes[-1]  # the host the Xid line names
    other = next(n for n in NODES if n != named)
    job_id = report_failure(client, sched, cluster, slurm, ext, tmp_path)
    enable(app, cluster)
    faults = ",".join(f"{h}=exit_before" for h in sorted([named, other]))
    run = controller(app, slurm, faults=faults).recover(job_id=job_id, actor="epilog")
    subprocess.run(["scancel", ext], env=slurm.env)
    assert sorted(run.outcome["probe"]["faulty"]) == sorted([named, other])
    assert run.outcome["drained"] == [named] and run.outcome["breaker"] == [other], run.outcome
    assert [n for n, i in slurm.nodes().items() if "DRAIN" in i.state] == [named]


def test_resume_api_resumes_the_slurm_node_and_clears_its_incidents(app, client, sched, admin, slurm):
    from datetime import datetime, timezone

    cluster = f"slurm-{uuid.uuid4().hex[:6]}"
    db = app.state.services.db
    app.state.services.controller = controller(app, slurm)
    job = client.post("/v1/jobs", json={"cluster": cluster, "external_id": "1", "hosts": ["node3"]}, headers=sched)
    for fp in ("a", "b"):  # two real infrastructure failures named node3
        db.run(store.add_incidents, cluster=cluster, hosts=["node3"], job_id=job.json()["id"],
               fingerprint=fp, error_type="GPUFailure")
    since = datetime(2000, 1, 1, tzinfo=timezone.utc)
    assert db.run(store.host_failures, cluster=cluster, hosts=["node3"], since=since) == {"node3": 2}
    slurm.drain("node3", reason="logdx: test")
    assert slurm.nodes()["node3"].drained

    body = {"cluster": cluster, "reason": "GPU replaced"}
    assert client.post("/v1/controller/nodes/node3/resume", json=body, headers=sched).status_code == 403
    unknown = client.post("/v1/controller/nodes/node9/resume", json=body, headers=admin)
    assert unknown.status_code == 422 and "node9" in unknown.json()["error"]["message"]
    resp = client.post("/v1/controller/nodes/node3.cluster.example/resume", json=body, headers=admin)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert (out["host"], out["incidents_resolved"]) == ("node3", 2) and "DRAIN" in out["state_before"]
    assert not slurm.nodes()["node3"].drained, slurm.nodes()["node3"]
    assert db.run(store.host_failures, cluster=cluster, hosts=["node3"], since=since) == {}


@pytest.fixture
def busy(slurm):
    """Holds nodes with jobs of an exclusive partition: srun cannot get them while those run."""
    part = f"excl{uuid.uuid4().hex[:4]}"
    subprocess.run(["scontrol", "create", f"PartitionName={part}", f"Nodes=node[1-{len(NODES)}]",
                    "OverSubscribe=EXCLUSIVE", "State=UP"], env=slurm.env, check=True, capture_output=True)
    held = []

    def hold(node: str) -> str:
        out = subprocess.run(["sbatch", "--parsable", "-p", part, "--exclusive", "-w", node, "-J", "busy",
                              "-o", "/dev/null", "--wrap", "sleep 300"],
                             env=slurm.env, capture_output=True, text=True, check=True)
        held.append(out.stdout.strip().split(";")[0])
        deadline = time.monotonic() + 30
        while slurm.job(held[-1]).state != "RUNNING":
            assert time.monotonic() < deadline, f"the job holding {node} does not run"
            time.sleep(0.2)
        return held[-1]

    yield hold
    for job in held:
        subprocess.run(["scancel", job], env=slurm.env, capture_output=True)
    time.sleep(1)
    subprocess.run(["scontrol", "delete", f"PartitionName={part}"], env=slurm.env, capture_output=True)


def test_a_busy_node_is_not_probed_and_never_drained(app, client, sched, slurm, busy, tmp_path):
    cluster = f"slurm-{uuid.uuid4().hex[:6]}"
    ext = submit(slurm, tmp_path, "xid", fail_runs=1)
    assert wait(slurm, ext, restarts=0) == "FAILED"
    named = slurm.job(ext).nodes[-1]  # the host the Xid line names, healthy
    busy(named)  # another job got it as soon as the failed job let it go
    job_id = report_failure(client, sched, cluster, slurm, ext, tmp_path)
    enable(app, cluster)
    t0 = time.monotonic()
    run = controller(app, slurm, health=health_probes(tmp_path)).recover(job_id=job_id, actor="epilog")
    took = time.monotonic() - t0
    probe = run.outcome["probe"]
    assert probe["verdict"] == "unknown" and probe["faulty"] == [] and named in probe["untested"], run.outcome
    # its health checks could not run either (srun got no allocation): unknown, not failed
    assert run.outcome["health"]["unknown"] == [named] and run.outcome["health"]["failed"] == [], run.outcome
    assert "drained" not in run.outcome and not slurm.nodes()[named].drained, run.outcome
    # the log still names it for an Xid: the restart goes elsewhere
    assert run.status == "done" and run.outcome["restart"]["exclude"] == (named,), run.outcome
    assert took < 60, took  # the busy node's allocation waits are bounded, not the probe's timeouts
    assert wait(slurm, ext, restarts=1) == "COMPLETED"
    assert named not in slurm.job(ext).nodes


def test_the_probe_runs_one_rank_per_gpu_through_srun(slurm):
    # a fault on each node's second device (local rank 1): invisible with one rank per node
    env = {"LOGDX_PROBE_FAULTS": "node3:1=corrupt", "PYTHONPATH": str(Path.cwd())}
    one = CommandProbeRunner(slurm.probe_command, timeout_s=5, nbytes=1 << 16, port=free_port(), env=env)
    assert one.probe(NODES).verdict.value == "ok"
    two = CommandProbeRunner(slurm.probe_command, timeout_s=5, nbytes=1 << 16, port=free_port(), env=env,
                             per_node=2)
    report = two.probe(NODES)
    assert report.faulty == ["node3"], report.rounds
    assert "--ntasks-per-node=2" in slurm.probe_command(["node1", "node2"], ["true"], tasks_per_node=2)


def test_a_host_failing_a_health_probe_through_srun_is_drained_though_the_allgather_passed(app, client, sched, slurm,
                                                                                           tmp_path):
    cluster = f"slurm-{uuid.uuid4().hex[:6]}"
    ext = submit(slurm, tmp_path, "xid", fail_runs=1)
    assert wait(slurm, ext, restarts=0) == "FAILED"
    named = slurm.job(ext).nodes[-1]
    job_id = report_failure(client, sched, cluster, slurm, ext, tmp_path)
    enable(app, cluster)
    run = controller(app, slurm, health=health_probes(tmp_path, bad=named)).recover(job_id=job_id, actor="epilog")
    assert run.outcome["probe"]["verdict"] == "ok", run.outcome  # no fault the allgather can see
    assert run.outcome["health"]["failed"] == [named] and run.outcome["drained"] == [named], run.outcome
    assert slurm.nodes()[named].drained
    assert wait(slurm, ext, restarts=1) == "COMPLETED" and named not in slurm.job(ext).nodes


def test_a_node_the_controller_excluded_is_released_once_back_in_service(slurm):
    """Each requeue adds the nodes of its failure to the job's ExcNodeList; a node excluded for an
    earlier failure and since repaired (not drained) must not stay excluded for ever (after a few
    node faults a small cluster has too few nodes left for the job). The job's own exclusions
    stay."""
    from app.controller.schedulers.base import RestartSpec
    from app.controller.service import _exc_nodes

    out = subprocess.run(["sbatch", "--parsable", "--hold", "-N1", "--requeue", "-J", "excl", "-o", "/dev/null",
                          "--exclude=node4", "--comment", "logdx_ckpt=/ckpt/x", "--wrap", "sleep 300"],
                         env=slurm.env, capture_output=True, text=True, check=True)
    ext = out.stdout.strip().split(";")[0]
    try:
        slurm.requeue(ext, restart=RestartSpec(exclude=("node1",)))
        info = slurm.job(ext)
        assert slurm.hostnames(info.raw["ExcNodeList"]) == ["node1", "node4"]
        assert "logdx_exc=node1" in info.raw["Comment"] and info.checkpoint_dir == "/ckpt/x"
        assert _exc_nodes(slurm, info) == ["node4"]  # node1 is in service: the next requeue releases it
        slurm.drain("node2", reason="logdx: test")
        slurm.requeue(ext, restart=RestartSpec(exclude=("node2",)))
        info = slurm.job(ext)
        # node1 is in service again: released; node2 (drained) and the job's own node4 stay
        assert slurm.hostnames(info.raw["ExcNodeList"]) == ["node2", "node4"], info.raw["ExcNodeList"]
        assert "logdx_exc=node2" in info.raw["Comment"] and info.checkpoint_dir == "/ckpt/x"
        slurm.resume("node2", reason="repaired")
        assert _exc_nodes(slurm, slurm.job(ext)) == ["node4"]
    finally:
        subprocess.run(["scancel", ext], env=slurm.env, capture_output=True)
