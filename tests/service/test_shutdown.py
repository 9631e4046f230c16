"""A clean start and stop of a real server leaves a clean log: no leaked-semaphore warning from
the process pool, no model-loading progress bars."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from app.auth.models import TokenRole
from tests.service.conftest import rules_copy, sample_log
from tests.service.live import LiveServer, issue_token


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_server_stops_without_leaked_semaphore_warnings(tmp_path, sig):
    data = tmp_path / "data"
    server = LiveServer({"LOGDX_DATA_DIR": str(data), "LOGDX_RULES_DIR": str(rules_copy(tmp_path / "rules")),
                         "LOGDX_DIAGNOSIS_EXECUTOR": "process", "LOGDX_DIAGNOSIS_WORKERS": "1"}).start(timeout=60)
    try:
        token = issue_token(f"sqlite:///{data / 'logdx.db'}", TokenRole.SCHEDULER, "t")
        resp = httpx.post(server.url + "/v1/diagnose", content=sample_log(),
                          headers={"Authorization": f"Bearer {token}"}, timeout=120)
        assert resp.status_code == 200, resp.text
        os.kill(server.proc.pid, sig)  # `kill PID`, systemd stop, Ctrl-C
        assert server.proc.wait(timeout=30) in (0, -sig)  # uvicorn re-raises the signal
        time.sleep(3)  # multiprocessing's resource tracker reports leaks after the server exits
    finally:
        server.kill()
    log = server.log_path.read_text()
    assert "leaked semaphore" not in log, log[-3000:]
    assert "resource_tracker" not in log, log[-3000:]
