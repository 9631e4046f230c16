"""Executes diagnosis rows and queues them.

- `DiagnosisWorker.execute(id)`: claim the row, run the pipeline, write the result once.
- `LocalQueue` (SQLite): asyncio tasks in the server process; rows still pending or running at
  start-up (a crash or restart interrupted them) are re-queued.
- `ProcrastinateQueue` (PostgreSQL): durable jobs in procrastinate's tables, worked by a worker
  inside the server (`LOGDX_RUN_WORKER`) and/or separate processes; same re-queue at start-up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Protocol

import anyio

from app.api.metrics import Metrics
from app.core.placement import JobPlacement
from app.db.engine import Database
from app.db.queue_schema import ensure_procrastinate_schema
from app.diagnoses import service
from app.diagnoses.executor import PipelineExecutor
from app.logs.sizing import decoded_size_over
from app.logs.storage import BlobStore

log = logging.getLogger("logdx.worker")


class DiagnosisWorker:
    def __init__(self, *, db: Database, store: BlobStore, executor: PipelineExecutor,
                 metrics: Metrics) -> None:
        self.db, self.store, self.executor, self.metrics = db, store, executor, metrics

    def is_big(self, path: Path, log_bytes: int) -> bool:
        """More than the inline limit once decompressed."""
        return decoded_size_over(path, log_bytes, self.executor.settings.sync_diagnose_max_bytes)

    def log_path(self, blob_sha256: str | None, job_log_id: int) -> Path:
        return self.store.blob_path(blob_sha256) if blob_sha256 else self.store.part_path(job_log_id)

    async def execute(self, diagnosis_id: int, *, mode: str = "async") -> None:
        plan = await anyio.to_thread.run_sync(
            lambda: self.db.run(service.plan_diagnosis, diagnosis_id=diagnosis_id))
        if plan is None:
            return
        big = await anyio.to_thread.run_sync(
            self.is_big, self.log_path(plan.blob_sha256, plan.job_log_id), plan.log_bytes)
        # the row stays `pending` until a worker is free for it
        async with self.executor.scheduler.slot(tenant=plan.tenant, big=big):
            await self._execute(diagnosis_id, mode=mode)

    async def _execute(self, diagnosis_id: int, *, mode: str) -> None:
        max_attempts = self.executor.settings.diagnosis_max_attempts
        claim = await anyio.to_thread.run_sync(lambda: self.db.run(
            service.claim_diagnosis, diagnosis_id=diagnosis_id, max_attempts=max_attempts))
        if claim is None:
            return
        path = self.log_path(claim.blob_sha256, claim.job_log_id)
        started = time.perf_counter()
        try:
            job = JobPlacement(claim.hosts, claim.gpu_count, stopped=claim.stopped)
            output = await self.executor.run(path, claim.log_bytes, diagnosis_id=diagnosis_id, job=job)
        except Exception as exc:  # noqa: BLE001 - recorded on the row, never lost
            log.exception("diagnosis %s crashed", diagnosis_id)
            error = f"internal error: {exc!r}"
            await anyio.to_thread.run_sync(lambda: self.db.run(
                service.fail_diagnosis, diagnosis_id=diagnosis_id, error=error))
            self.metrics.diagnoses.labels(mode=mode, outcome="error").inc()
            return
        self.metrics.diagnosis_seconds.labels(mode=mode).observe(time.perf_counter() - started)
        if "input_error" in output:
            await anyio.to_thread.run_sync(lambda: self.db.run(
                service.fail_diagnosis, diagnosis_id=diagnosis_id, error=output["input_error"]))
            self.metrics.diagnoses.labels(mode=mode, outcome="input_error").inc()
            return
        await anyio.to_thread.run_sync(lambda: self.db.run(
            service.complete_diagnosis, diagnosis_id=diagnosis_id, output=output))
        self.metrics.observe_diagnosis(output["diagnosis"], mode=mode)
        self.metrics.observe_llm(output.get("llm"))


class DiagnosisQueue(Protocol):
    async def start(self) -> None: ...
    async def submit(self, diagnosis_id: int) -> None: ...
    async def stop(self) -> None: ...


class LocalQueue:
    def __init__(self, *, worker: DiagnosisWorker, db: Database, enabled: bool) -> None:
        self.worker, self.db, self.enabled = worker, db, enabled
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        if not self.enabled:
            return
        ids = await anyio.to_thread.run_sync(lambda: self.db.run(service.unfinished_ids))
        if ids:
            log.info("re-queueing %d unfinished diagnoses", len(ids))
        for diagnosis_id in ids:
            await self.submit(diagnosis_id)

    async def submit(self, diagnosis_id: int) -> None:
        if not self.enabled:
            return  # stays pending in the database; a server with a worker picks it up
        task = asyncio.create_task(self.worker.execute(diagnosis_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class ProcrastinateQueue:
    QUEUE = "diagnoses"
    TASK = "logdx.diagnose"

    def __init__(self, *, worker: DiagnosisWorker, db: Database, enabled: bool, concurrency: int) -> None:
        import procrastinate

        self.worker, self.db, self.enabled, self.concurrency = worker, db, enabled, concurrency
        conninfo = db.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

        @self.app.task(name=self.TASK, queue=self.QUEUE)
        async def diagnose(diagnosis_id: int) -> None:
            await worker.execute(diagnosis_id)

        self._task = diagnose
        self._worker_task: asyncio.Task | None = None

    def _ensure_schema(self) -> None:
        ensure_procrastinate_schema(self.db)

    async def start(self) -> None:
        await anyio.to_thread.run_sync(self._ensure_schema)
        await self.app.open_async()
        ids = await anyio.to_thread.run_sync(lambda: self.db.run(service.unfinished_ids))
        for diagnosis_id in ids:
            await self.submit(diagnosis_id)
        if self.enabled:
            self._worker_task = asyncio.create_task(self.app.run_worker_async(
                queues=[self.QUEUE], concurrency=self.concurrency, install_signal_handlers=False,
                wait=True, fetch_job_polling_interval=1.0))

    async def submit(self, diagnosis_id: int) -> None:
        from procrastinate.exceptions import AlreadyEnqueued

        try:
            await self._task.configure(queueing_lock=f"diagnosis-{diagnosis_id}").defer_async(
                diagnosis_id=diagnosis_id)
        except AlreadyEnqueued:
            pass

    async def stop(self) -> None:
        if self._worker_task is not None:
            self._worker_task.cancel()
            await asyncio.gather(self._worker_task, return_exceptions=True)
        await self.app.close_async()
