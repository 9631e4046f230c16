"""Overload and poison pills: the inline/queued choice on the uncompressed size, a cap on runs,
fair admission to the worker pool, rows `pending` until a worker takes them."""

from __future__ import annotations

import asyncio
import gzip
import time

from fastapi.testclient import TestClient

from app.api.app import build_services, create_app
from app.diagnoses.models import DiagnosisRow
from app.diagnoses.scheduler import SlotScheduler
from tests.service.conftest import make_settings, new_job, sample_log


def _uploaded(client, headers, log: bytes) -> int:
    job_id = new_job(client, headers)["id"]
    assert client.put(f"/v1/jobs/{job_id}/log", content=log, headers=headers).status_code == 201
    return job_id


def _wait(client, href, headers, timeout=20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(href, headers=headers).json()
        if body["status"] in ("done", "failed") or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def test_a_small_gzip_of_a_large_log_is_queued(client, sched, settings):
    log = sample_log(3000)
    packed = gzip.compress(log)
    assert len(packed) <= settings.sync_diagnose_max_bytes < len(log)
    job = _uploaded(client, sched, packed)
    resp = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched)
    assert resp.status_code == 202, resp.text  # decided on the uncompressed size
    assert _wait(client, resp.json()["href"], sched)["status"] == "done"


def test_a_diagnosis_interrupted_too_often_fails_with_the_reason(tmp_path, service_pipeline, tokens_factory=None):
    settings = make_settings(tmp_path / "data", diagnosis_max_attempts=2)
    app = create_app(settings, pipeline=service_pipeline)
    with TestClient(app) as client:
        from app.auth.models import TokenRole
        from app.auth.service import create_token

        token = app.state.services.db.run(create_token, role=TokenRole.SCHEDULER, name="t")[1]
        headers = {"Authorization": f"Bearer {token}"}
        job = _uploaded(client, headers, sample_log(3000))
        diagnosis_id = client.post(f"/v1/jobs/{job}/diagnoses", headers=headers).json()["id"]
        _wait(client, f"/v1/diagnoses/{diagnosis_id}", headers)

    def interrupted(session):  # as a kill -9 in the middle of each run leaves it
        row = session.get(DiagnosisRow, diagnosis_id)
        row.status, row.runs, row.result, row.error_type = "running", 2, None, None

    app.state.services.db.run(lambda session: interrupted(session))
    app = create_app(settings, pipeline=service_pipeline)
    with TestClient(app) as client:  # start-up re-queues unfinished rows
        body = _wait(client, f"/v1/diagnoses/{diagnosis_id}", headers)
    assert body["status"] == "failed"
    assert "gave up after 2 attempts" in body["error"]


def test_big_logs_leave_a_slot_for_small_ones_and_tenants_take_turns():
    async def scenario():
        sched = SlotScheduler(2)
        order: list[str] = []
        release = asyncio.Event()

        async def run(name, tenant, big):
            async with sched.slot(tenant=tenant, big=big):
                order.append(name)
                await release.wait()

        tasks = [asyncio.create_task(run("A-big-1", "a", True))]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(run("A-big-2", "a", True)))
        tasks.append(asyncio.create_task(run("B-big-1", "b", True)))
        await asyncio.sleep(0.01)
        assert order == ["A-big-1"]  # the second slot is kept for small work
        tasks.append(asyncio.create_task(run("C-small", "c", False)))
        await asyncio.sleep(0.01)
        assert order == ["A-big-1", "C-small"]
        release.set()
        await asyncio.gather(*tasks)
        # tenant b (nothing running) goes before tenant a's second big log
        assert order.index("B-big-1") < order.index("A-big-2")
        assert sched.running == 0 and sched.waiting == 0

    asyncio.run(scenario())


def test_queued_diagnosis_stays_pending_until_a_worker_takes_it(tmp_path, service_pipeline):
    settings = make_settings(tmp_path / "data", diagnosis_workers=1, run_worker=False)
    app = create_app(settings, pipeline=service_pipeline)
    with TestClient(app) as client:
        from app.auth.models import TokenRole
        from app.auth.service import create_token

        token = app.state.services.db.run(create_token, role=TokenRole.SCHEDULER, name="t")[1]
        headers = {"Authorization": f"Bearer {token}"}
        job = _uploaded(client, headers, sample_log(3000))
        diagnosis_id = client.post(f"/v1/jobs/{job}/diagnoses", headers=headers).json()["id"]

    services = build_services(settings, pipeline=service_pipeline)

    def status():
        return services.db.run(lambda session: session.get(DiagnosisRow, diagnosis_id).status)

    async def scenario():
        scheduler = services.executor.scheduler
        async with scheduler.slot(tenant="other", big=False):  # the only worker is busy
            task = asyncio.create_task(services.worker.execute(diagnosis_id))
            await asyncio.sleep(0.3)
            assert status() == "pending"
        await task
        assert status() == "done"

    try:
        asyncio.run(scenario())
    finally:
        services.executor.shutdown()
        services.db.dispose()


def test_upload_check_stops_decoding_a_bomb(monkeypatch):
    import zlib

    import zstandard

    from app.logs import codec

    monkeypatch.setattr(codec, "RATIO_FLOOR", 1 << 20)
    zeros = bytes(1 << 20)
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)
    gz_bomb = b"".join(gz.compress(zeros) for _ in range(256)) + gz.flush()
    zst_bomb = zstandard.ZstdCompressor().compress(zeros * 256)
    for bomb, decoded in ((gz_bomb, lambda c: c._gz.out), (zst_bomb, lambda c: c._zst_sink.written)):
        check = codec.StreamCheck(max_ratio=10)
        for i in range(0, len(bomb), 1 << 20):
            check.feed(bomb[i:i + (1 << 20)])
        check.finish()
        assert check.error is None
        assert any("expands more than 10x" in w for w in check.warnings)
        assert decoded(check) < 8 << 20  # not the 256 MiB it expands to
