"""examples/slurm_epilog.sh as the local Slurm cluster's EpilogSlurmctld (.ci/slurm.sh runs every
hook in its epilog.d), against a live server whose controller acts on that cluster. Accounting is
off there, as on many small clusters: no sacct state, only what scontrol and the epilog's own
environment say."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from app.auth.models import TokenRole
from app.controller.recovery import RULES_FILE
from app.controller.schedulers.slurm import SlurmScheduler
from tests.controller.slurm_job import write_job
from tests.service.live import REPO, LiveServer, issue_token

CONF = os.environ.get("LOGDX_TEST_SLURM_CONF")
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(
    not CONF, reason='no local Slurm cluster: run eval "$(.ci/slurm.sh)" first (.ci/run does)'),
    pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")]
NODES = ["node1", "node2", "node3", "node4"]
HOOKS = Path(CONF).parents[1] / "epilog.d" if CONF else None
EPILOG_LOG = Path(CONF).parents[1] / "log" / "epilog.log" if CONF else None


def _resume_all(slurm: SlurmScheduler) -> None:
    for n in NODES:
        subprocess.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], env=slurm.env, capture_output=True)


class EpilogCluster:
    """A live server acting on the local cluster, and an epilog hook that reports this test's jobs."""

    def __init__(self, tmp_path: Path, slurm: SlurmScheduler) -> None:
        self.tmp, self.slurm, self.name = tmp_path, slurm, f"logdx-{uuid.uuid4().hex[:8]}"
        rules = yaml.safe_load(RULES_FILE.read_text())
        for p in rules["policies"]:  # short backoffs: the test waits for real requeues
            if p.get("backoff"):
                p["backoff"] = {"initial_s": 0, "factor": 1.0, "max_s": 0}
        (tmp_path / "recovery.yaml").write_text(yaml.safe_dump(rules))
        data = tmp_path / "data"
        self.server = LiveServer({"LOGDX_DATA_DIR": str(data), "LOGDX_DIAGNOSIS_EXECUTOR": "thread",
                                  "LOGDX_CONTROLLER_SCHEDULER": "slurm", "LOGDX_SLURM_CONF": CONF,
                                  "LOGDX_RECOVERY_RULES": str(tmp_path / "recovery.yaml")}).start()
        url = f"sqlite:///{data / 'logdx.db'}"
        self.token = issue_token(url, TokenRole.SCHEDULER, "slurm")
        self.admin = {"Authorization": f"Bearer {issue_token(url, TokenRole.ADMIN, 'admin')}"}
        self.hook = HOOKS / self.name
        self.hook.write_text(
            "#!/bin/bash\n"
            f'[[ "$SLURM_JOB_NAME" == "{self.name}" ]] || exit 0\n'
            f"export PATH={Path(sys.executable).parent}:$PATH LOGDX_URL={self.server.url} "
            f"LOGDX_TOKEN={self.token} LOGDX_RECOVER=1 LOGDX_WAIT_S=60\n"
            f'bash {REPO / "examples" / "slurm_epilog.sh"} 2>&1 | sed "s/^/[job $SLURM_JOB_ID] /"\n')
        self.hook.chmod(0o755)
        self.submitted: list[str] = []

    def enable(self, cluster: str = "logdx") -> None:
        resp = httpx.put(f"{self.server.url}/v1/clusters/{cluster}/controller", headers=self.admin,
                         json={"actions_enabled": True, "node_count": len(NODES)})
        assert resp.status_code == 200, resp.text

    def submit(self, mode: str, fail_runs: int, nodes: int = 2) -> str:
        script = write_job(self.tmp)
        out = subprocess.run(["sbatch", "--parsable", "-N", str(nodes), "--requeue", "-J", self.name,
                              "-D", str(self.tmp), "-o", str(self.tmp / "job-%j.log"),
                              "--comment", f"logdx_ckpt={self.tmp / 'ckpt'}", str(script), mode, str(fail_runs)],
                             env=self.slurm.env, capture_output=True, text=True, check=True)
        ext = out.stdout.strip().split(";")[0]
        self.submitted.append(ext)
        return ext

    def epilog_lines(self, ext: str) -> list[str]:
        text = EPILOG_LOG.read_text() if EPILOG_LOG.exists() else ""
        return [ln for ln in text.splitlines() if ln.startswith(f"[job {ext}] ")]

    def wait_reports(self, ext: str, count: int, timeout_s: float = 120) -> list[str]:
        """Until the epilog has ended `count` times for the job (each run prints a `logdx:` summary
        line last: a recovery, or why there is none)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            done = [ln for ln in self.epilog_lines(ext) if "logdx: recovery" in ln or "not recovered" in ln]
            if len(done) >= count:
                return done
            time.sleep(0.5)
        raise AssertionError(f"{count} epilog reports for job {ext} not seen: {self.epilog_lines(ext)}")

    def job(self, ext: str) -> dict:
        token = {"Authorization": f"Bearer {self.token}"}
        return httpx.post(f"{self.server.url}/v1/jobs", headers=token,
                          json={"cluster": "logdx", "external_id": ext}).json()

    def close(self) -> None:
        self.hook.unlink(missing_ok=True)
        if self.submitted:  # a job still cycling through requeues (a failed test) must not outlive it
            subprocess.run(["scancel", *self.submitted], env=self.slurm.env, capture_output=True)
        self.server.kill()


@pytest.fixture
def cluster(tmp_path):
    slurm = SlurmScheduler(conf=CONF)
    _resume_all(slurm)
    c = EpilogCluster(tmp_path, slurm)
    yield c
    c.close()
    _resume_all(slurm)


def test_a_job_that_completed_is_never_requeued_through_the_epilog(cluster):
    cluster.enable()
    ext = cluster.submit("s3", fail_runs=0)  # trains 30 steps and exits 0: the log just stops
    lines = cluster.wait_reports(ext, 1)
    time.sleep(3)  # a requeue would show by now
    info = cluster.slurm.job(ext)
    assert (info.state, info.restarts) == ("COMPLETED", 0), (info, cluster.epilog_lines(ext))
    assert "not recovered: it ended with exit code 0:0" in lines[0], cluster.epilog_lines(ext)
    # the controller refuses on its own too: the scheduler says the job ended with 0:0
    job = cluster.job(ext)
    resp = httpx.post(f"{cluster.server.url}/v1/jobs/{job['id']}/recover",
                      headers={"Authorization": f"Bearer {cluster.token}"}, timeout=60)
    assert resp.status_code == 200, resp.text
    run = resp.json()
    assert (run["action"], run["status"]) == ("none", "done"), run
    assert run["reason"].startswith("completed, nothing to do") and "restart" not in run["outcome"]
    time.sleep(3)
    assert cluster.slurm.job(ext).restarts == 0


def test_an_epilog_driven_job_reaches_its_fingerprint_stop_on_the_third_failure(cluster):
    cluster.enable()
    ext = cluster.submit("s3", fail_runs=99)  # the same storage error every run, no progress past step 30
    lines = cluster.wait_reports(ext, 3, timeout_s=180)
    runs = [re.search(r"logdx: recovery \d+: (\w+) \((dry-run|acted), (\w+)\): (.*)", ln).groups() for ln in lines]
    assert [r[:3] for r in runs] == [("retry", "acted", "done")] * 2 + [("notify_owner", "acted", "stopped")], runs
    assert "the same failure" in runs[2][3] and "3 times in a row" in runs[2][3]
    assert cluster.job(ext)["attempts"] == [1, 2, 3]
    time.sleep(3)  # no fourth run: the stop held
    info = cluster.slurm.job(ext)
    assert (info.state, info.restarts) == ("FAILED", 2), info
    assert not [ln for ln in cluster.epilog_lines(ext) if "log_shrinks" in ln or "upload failed" in ln]
