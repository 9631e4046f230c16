"""Uploads stream to disk: a 96 MiB body does not grow the server's memory."""

from __future__ import annotations

import hashlib
import threading
import time

import httpx
import psutil

from app.auth.models import TokenRole
from tests.service.conftest import rules_copy
from tests.service.live import LiveServer, issue_token

MIB = 1 << 20


def test_large_upload_keeps_server_memory_flat(tmp_path):
    data = tmp_path / "data"
    server = LiveServer({"LOGDX_DATA_DIR": str(data), "LOGDX_RULES_DIR": str(rules_copy(tmp_path / "rules")),
                         "LOGDX_DIAGNOSIS_EXECUTOR": "thread"}).start()
    try:
        token = issue_token(f"sqlite:///{data / 'logdx.db'}", TokenRole.SCHEDULER, "m")
        headers = {"Authorization": f"Bearer {token}"}
        proc = psutil.Process(server.proc.pid)
        api = httpx.Client(base_url=server.url, headers=headers, timeout=120)
        job = api.post("/v1/jobs", json={"cluster": "c", "external_id": "big"}).json()["id"]
        block = b"".join(b"[node-1] step %06d loss 2.345 lr 1e-4 tokens/s 12345\n" % i for i in range(20_000))
        total = 96 * MIB
        digest = hashlib.sha256()

        def body():
            sent = 0
            while sent < total:
                piece = block[: min(len(block), total - sent)]
                digest.update(piece)
                sent += len(piece)
                yield piece

        baseline = proc.memory_info().rss
        peak, done = baseline, threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, proc.memory_info().rss)
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            resp = api.put(f"/v1/jobs/{job}/log", content=body())
        finally:
            done.set()
            sampler.join()
        assert resp.status_code == 201, resp.text
        assert resp.json()["size"] == total and resp.json()["sha256"] == digest.hexdigest()
        assert peak - baseline < 32 * MIB, f"server RSS grew by {(peak - baseline) / MIB:.1f} MiB"
    finally:
        server.kill()
