"""The Slurm epilog example against a real server."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from app.auth.models import TokenRole
from tests.service.conftest import REPO, rules_copy, sample_log
from tests.service.live import LiveServer, issue_token


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_slurm_epilog_registers_uploads_and_prints_the_diagnosis(tmp_path):
    data = tmp_path / "data"
    server = LiveServer({"LOGDX_DATA_DIR": str(data), "LOGDX_RULES_DIR": str(rules_copy(tmp_path / "rules")),
                         "LOGDX_DIAGNOSIS_EXECUTOR": "thread"}).start()
    try:
        token = issue_token(f"sqlite:///{data / 'logdx.db'}", TokenRole.SCHEDULER, "slurm")
        log = tmp_path / "slurm-77.out"
        log.write_bytes(sample_log())
        env = {**os.environ, "LOGDX_URL": server.url, "LOGDX_TOKEN": token, "SLURM_JOB_ID": "77",
               "SLURM_CLUSTER_NAME": "alpha", "LOGDX_LOG_FILE": str(log), "LOGDX_JOB_STATE": "FAILED",
               "LOGDX_GPU_COUNT": "8", "PATH": "/usr/bin:/bin"}
        out = subprocess.run(["bash", str(REPO / "examples" / "slurm_epilog.sh")], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "ECCError (infrastructure" in out.stdout, (out.stdout, out.stderr)
        assert "isolate_and_restart" in out.stdout
        # a broken server URL still exits 0 (a failing epilog would drain the node)
        bad = subprocess.run(["bash", str(REPO / "examples" / "slurm_epilog.sh")],
                             env={**env, "LOGDX_URL": "http://127.0.0.1:9", "LOGDX_RETRIES": "0"}, capture_output=True,
                             text=True, timeout=120)
        assert bad.returncode == 0 and "cannot register job" in bad.stderr
    finally:
        server.kill()


EPILOG = REPO / "examples" / "slurm_epilog.sh"


def _epilog(env: dict[str, str], *unset: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in env.items() if k not in unset}
    return subprocess.run(["bash", str(EPILOG)], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("missing", ["LOGDX_URL", "LOGDX_TOKEN", "SLURM_JOB_ID"])
def test_slurm_epilog_exits_0_and_says_which_setting_is_missing(tmp_path, missing):
    log = tmp_path / "job.out"
    log.write_bytes(sample_log())
    env = {"PATH": "/usr/bin:/bin", "LOGDX_URL": "http://127.0.0.1:9", "LOGDX_TOKEN": "ldx_x",
           "SLURM_JOB_ID": "5", "LOGDX_LOG_FILE": str(log), "LOGDX_RETRIES": "0"}
    out = _epilog(env, missing)
    assert out.returncode == 0, out.stderr
    assert f"{missing} is not set" in out.stderr


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_slurm_epilog_names_the_reason_when_the_server_is_down(tmp_path):
    from tests.service.live import free_port

    log = tmp_path / "job.out"
    log.write_bytes(sample_log())
    env = {"PATH": "/usr/bin:/bin", "LOGDX_URL": f"http://127.0.0.1:{free_port()}", "LOGDX_TOKEN": "ldx_x",
           "SLURM_JOB_ID": "5", "LOGDX_LOG_FILE": str(log), "LOGDX_RETRIES": "0", "TMPDIR": str(tmp_path)}
    out = _epilog(env)
    assert out.returncode == 0, out.stderr
    reason = out.stderr.split("cannot register job:", 1)[1].strip()
    assert reason and "connect" in reason.lower(), out.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["job.out"]  # its temporary file is removed


def _recording_server():
    """A stand-in for the logdx server that records the job registrations it is sent (the test is
    about what the epilog sends, not about the service): POST /v1/jobs answers an id, the rest 200."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/v1/jobs":
                bodies.append(json.loads(body))
                self._answer({"id": 1})
            else:
                self._answer({"id": 1, "status": "failed", "error": "stand-in"})

        def do_PUT(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer({"ok": True})

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, bodies


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
@pytest.mark.parametrize("end_time, attempt", [
    ("Unknown", 1),  # the run was requeued while running: its restart is counted already
    ("2026-12-07T10:42:30", 2),  # the second run ended: its own attempt
])
def test_slurm_epilog_numbers_a_requeued_run_as_the_attempt_it_was(tmp_path, end_time, attempt):
    """Slurm counts a requeue of the running job (`scontrol requeue`, the controller restarting a
    hung one) before EpilogSlurmctld runs and clears the run's EndTime: that run is attempt
    `Restarts`, not `Restarts + 1`, whose own epilog comes after the next run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text("#!/bin/sh\n"
                        f"echo 'JobId=42 JobName=train JobState=COMPLETING Reason=None Restarts=1 "
                        f"ExitCode=0:15 RunTime=00:00:00 EndTime={end_time} StdOut={tmp_path}/job.out'\n")
    scontrol.chmod(0o755)
    (tmp_path / "job.out").write_bytes(sample_log())
    httpd, bodies = _recording_server()
    try:
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOGDX_URL": f"http://127.0.0.1:{httpd.server_address[1]}",
               "LOGDX_TOKEN": "ldx_x", "SLURM_JOB_ID": "42", "LOGDX_JOB_STATE": "FAILED", "LOGDX_RETRIES": "0",
               "LOGDX_WAIT_S": "0", "TMPDIR": str(tmp_path)}
        out = _epilog(env)
    finally:
        httpd.shutdown()
    assert out.returncode == 0, out.stderr
    assert [b["attempt"] for b in bodies] == [attempt], (bodies, out.stderr)
