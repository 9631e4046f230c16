"""The Slurm epilog example with LOGDX_RECOVER=1 against a real server (local scheduler): the
recovery is a dry run until the cluster is enabled, and a retried epilog gets the same run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from app.auth.models import TokenRole
from app.controller.schedulers.local import LocalScheduler
from tests.controller.logs import progress, text, xid_fault
from tests.service.conftest import REPO
from tests.service.live import LiveServer, issue_token


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_epilog_asks_for_recovery_once_per_attempt(tmp_path):
    data = tmp_path / "data"
    local = LocalScheduler(data / "local-scheduler", ["n1", "n2"])
    (tmp_path / "w").mkdir()
    ext = local.submit([sys.executable, "-c", "raise SystemExit(1)"], workdir=tmp_path / "w", nodes=2)
    server = LiveServer({"LOGDX_DATA_DIR": str(data),
                         "LOGDX_DIAGNOSIS_EXECUTOR": "thread", "LOGDX_CONTROLLER_LOCAL_NODES": '["n1","n2"]'}).start()
    try:
        token = issue_token(f"sqlite:///{data / 'logdx.db'}", TokenRole.SCHEDULER, "slurm")
        log = tmp_path / "slurm.out"
        log.write_text(text(progress(1, 30, host="n2"), xid_fault("n2")))
        env = {**os.environ, "LOGDX_URL": server.url, "LOGDX_TOKEN": token, "SLURM_JOB_ID": ext,
               "SLURM_CLUSTER_NAME": "alpha", "LOGDX_LOG_FILE": str(log), "LOGDX_JOB_STATE": "FAILED",
               "LOGDX_RECOVER": "1", "PATH": "/usr/bin:/bin"}
        runs = []
        for _ in range(2):
            out = subprocess.run(["bash", str(REPO / "examples" / "slurm_epilog.sh")], env=env,
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            m = re.search(r"logdx: recovery (\d+): (\w+) \((dry-run|acted), (\w+)\)", out.stdout)
            assert m, (out.stdout, out.stderr)
            runs.append(m.groups())
        assert runs[0] == runs[1] and runs[0][1:3] == ("isolate_and_restart", "dry-run")
        assert local.job(ext).restarts == 0
    finally:
        server.kill()
