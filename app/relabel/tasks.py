"""Runs re-labeling work on the service's task engine.

A run's items are cut into id ranges of `batch_size`; each range is one task:
`RelabelWorker.run_range(run_id, first, last)` claims each unfinished item, runs the pipeline in
the diagnosis executor (spawned process pool: one log per core, rules compiled once per process)
and stores the result with the item's checkpoint in one transaction.

- PostgreSQL: `ProcrastinateRelabelQueue` defers the ranges to procrastinate (queue `relabel`),
  so `logdx worker` processes on any machine share them. A worker killed mid-task leaves its job
  `doing`; every relabel worker retries jobs of workers whose heartbeat stopped.
- SQLite: `LocalRelabelQueue` runs the same ranges as asyncio tasks of this process feeding its
  process pool (no broker; the item rows are the durable queue, so a restart resumes).

Exactly once: an item is finished only while still unfinished, under a row lock, so a range run
twice (a retried stalled job, a resumed run) never stores a second result.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import anyio

from app.core.pipeline import Pipeline
from app.core.placement import JobPlacement
from app.db.engine import Database
from app.db.queue_schema import ensure_procrastinate_schema
from app.diagnoses.executor import PipelineExecutor, build_pipeline, build_refiner
from app.logs.storage import BlobStore
from app.relabel import service
from app.relabel.archive import import_file
from app.relabel.models import RunSource
from app.settings import DiagnosisExecutor, Settings

log = logging.getLogger("logdx.relabel")

CORRUPT_MARK = "stream is corrupt"  # what app.core.ingest warns when an archive stops decoding


class RelabelWorker:
    def __init__(self, *, db: Database, store: BlobStore, settings: Settings, processes: int | None = None,
                 current_pipeline: Callable[[], Pipeline] | None = None) -> None:
        """`current_pipeline`: the server's live pipeline (it changes when a rule is approved);
        runs without their own rules directory diagnose with it."""
        self.db, self.store, self.settings = db, store, settings
        self.processes = processes or settings.diagnosis_workers
        self.current_pipeline = current_pipeline
        self.name = service.worker_name()
        self._executors: dict[str | None, PipelineExecutor] = {}

    def executor_for(self, rules_dir: str | None) -> PipelineExecutor:
        """One executor (one pool) per rules directory: a run may diagnose with other rules than
        the service (`logdx relabel --rules`)."""
        live = self.current_pipeline() if self.current_pipeline is not None and rules_dir is None else None
        executor = self._executors.get(rules_dir)
        if executor is None:
            settings = self.settings.model_copy(update={
                "rules_dir": Path(rules_dir) if rules_dir else self.settings.rules_dir,
                "diagnosis_workers": self.processes})
            refiner = (build_refiner(settings, db=self.db)
                       if settings.diagnosis_executor is DiagnosisExecutor.THREAD else None)
            executor = PipelineExecutor(settings, live or build_pipeline(settings), refiner=refiner)
            self._executors[rules_dir] = executor
        elif live is not None and executor.pipeline.ruleset.version != live.ruleset.version:
            executor.replace_pipeline(live)
        return executor

    async def _db(self, fn, /, **kwargs: Any):  # noqa: ANN001, ANN202
        return await anyio.to_thread.run_sync(lambda: self.db.run(fn, **kwargs))

    async def run_range(self, run_id: int, first: int, last: int) -> None:
        ids = await self._db(service.open_items, run_id=run_id, first=first, last=last)
        if ids:
            run = await self._db(service.get_run, run_id=run_id)
            executor = self.executor_for(run.rules_dir)
            for item_id in ids:
                await self.run_item(item_id, executor)
        await self._db(service.finish_run_if_complete, run_id=run_id)

    async def run_item(self, item_id: int, executor: PipelineExecutor) -> None:
        claim = await self._db(service.claim_item, item_id=item_id, worker=self.name)
        if claim is None:
            return
        try:
            blob, path, limit = None, None, None
            if claim.source is RunSource.ARCHIVE:
                path = claim.path
                if not claim.dry_run:
                    blob = await anyio.to_thread.run_sync(import_file, claim.path, self.store)
                    if blob.error:
                        await self._fail(item_id, f"corrupt archive: {blob.error}")
                        return
                    path = str(blob.path)
            else:
                path = str(self.store.blob_path(claim.blob_sha256) if claim.blob_sha256
                           else self.store.part_path(claim.job_log_id))
                limit = claim.log_bytes
            # a stored job is diagnosed with what its live diagnosis knew: its hosts and GPU count
            # (to name a rank's host) and how it ended (a log ending on a step of a job that
            # stopped unfinished is a Hang)
            job = JobPlacement(claim.hosts, claim.gpu_count, stopped=claim.stopped) \
                if claim.hosts or claim.stopped else None
            output = await executor.run(Path(path), limit, propose_rules=False, workers=1, job=job)
        except OSError as exc:
            await self._fail(item_id, f"unreadable: {exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}")
            return
        except Exception as exc:  # noqa: BLE001 - one bad log never stops a run
            log.exception("re-labeling item %s crashed", item_id)
            await self._fail(item_id, f"internal error: {exc!r}")
            return
        if "input_error" in output:
            await self._fail(item_id, f"unreadable: {output['input_error']}")
            return
        corrupt = [w for w in output["diagnosis"].get("compression", {}).get("warnings", []) if CORRUPT_MARK in w]
        if corrupt:
            await self._fail(item_id, f"corrupt archive: {corrupt[0]}")
            return
        await self._db(service.finish_item, item_id=item_id, output=output, blob=blob)

    async def _fail(self, item_id: int, error: str) -> None:
        log.warning("re-labeling item %s skipped: %s", item_id, error)
        await self._db(service.fail_item, item_id=item_id, error=error)

    def shutdown(self) -> None:
        for executor in self._executors.values():
            executor.shutdown()
        self._executors.clear()


class RelabelQueue(Protocol):
    async def start(self) -> None: ...
    async def submit(self, run_id: int, ranges: Iterable[tuple[int, int]]) -> None: ...
    async def stop(self) -> None: ...


class LocalRelabelQueue:
    """SQLite (and `logdx relabel --local`): ranges run as asyncio tasks of this process, at most
    `concurrency` at a time, each feeding the worker's process pool."""

    def __init__(self, *, worker: RelabelWorker, db: Database, concurrency: int, resume_on_start: bool = True) -> None:
        self.worker, self.db = worker, db
        self.resume_on_start = resume_on_start
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        if not self.resume_on_start:
            return
        for run_id in await anyio.to_thread.run_sync(lambda: self.db.run(service.unfinished_runs)):
            ranges = await anyio.to_thread.run_sync(lambda r=run_id: self.db.run(service.open_ranges, run_id=r))
            log.info("resuming re-labeling run %s (%d tasks)", run_id, len(ranges))
            await self.submit(run_id, ranges)

    async def _bounded(self, run_id: int, first: int, last: int) -> None:
        async with self._slots:
            await self.worker.run_range(run_id, first, last)

    async def submit(self, run_id: int, ranges: Iterable[tuple[int, int]]) -> None:
        for first, last in ranges:
            task = asyncio.create_task(self._bounded(run_id, first, last))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def join(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.worker.shutdown()


class ProcrastinateRelabelQueue:
    """PostgreSQL: ranges are procrastinate jobs on queue `relabel`."""

    QUEUE = "relabel"
    TASK = "logdx.relabel_range"
    DEFER_BATCH = 500

    def __init__(self, *, worker: RelabelWorker, db: Database, enabled: bool, concurrency: int,
                 heartbeat_s: float = 10.0, stalled_after_s: float = 60.0) -> None:
        import procrastinate

        self.worker, self.db, self.enabled, self.concurrency = worker, db, enabled, concurrency
        self.heartbeat_s, self.stalled_after_s = heartbeat_s, stalled_after_s
        conninfo = db.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

        @self.app.task(name=self.TASK, queue=self.QUEUE,
                       retry=procrastinate.RetryStrategy(max_attempts=3, wait=5))
        async def relabel_range(run_id: int, first: int, last: int) -> None:
            await worker.run_range(run_id, first, last)

        self._task = relabel_range
        self._worker_task: asyncio.Task | None = None
        self._reaper_task: asyncio.Task | None = None

    def _ensure_schema(self) -> None:
        ensure_procrastinate_schema(self.db)

    async def start(self) -> None:
        await anyio.to_thread.run_sync(self._ensure_schema)
        await self.app.open_async()
        if self.enabled:
            self._worker_task = asyncio.create_task(self.app.run_worker_async(
                queues=[self.QUEUE], concurrency=self.concurrency, install_signal_handlers=False, wait=True,
                fetch_job_polling_interval=1.0, update_heartbeat_interval=self.heartbeat_s,
                stalled_worker_timeout=self.stalled_after_s, name=f"relabel-{self.worker.name}"))
            self._reaper_task = asyncio.create_task(self._retry_stalled_forever())

    async def retry_stalled(self) -> int:
        """Put back the jobs of workers that stopped sending heartbeats (killed mid-task)."""
        manager = self.app.job_manager
        stalled = list(await manager.get_stalled_jobs(queue=self.QUEUE, task_name=self.TASK,
                                                      seconds_since_heartbeat=self.stalled_after_s))
        for job in stalled:
            log.warning("retrying re-labeling job %s of a worker that stopped (%s)", job.id, job.task_kwargs)
            await manager.retry_job(job)
        return len(stalled)

    async def _retry_stalled_forever(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self.retry_stalled()
            except Exception as exc:  # noqa: BLE001 - try again next beat
                log.warning("cannot check for stalled re-labeling jobs: %r", exc)

    async def submit(self, run_id: int, ranges: Iterable[tuple[int, int]]) -> None:
        kwargs = [{"run_id": run_id, "first": first, "last": last} for first, last in ranges]
        for start in range(0, len(kwargs), self.DEFER_BATCH):
            await self._task.batch_defer_async(*kwargs[start:start + self.DEFER_BATCH])

    async def stop(self) -> None:
        for task in (self._reaper_task, self._worker_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._reaper_task = self._worker_task = None
        await self.app.close_async()
        self.worker.shutdown()


def build_queue(*, settings: Settings, db: Database, store: BlobStore, run_worker: bool,
                processes: int | None = None, resume_on_start: bool = True,
                current_pipeline: Callable[[], Pipeline] | None = None) -> RelabelQueue:
    worker = RelabelWorker(db=db, store=store, settings=settings, processes=processes,
                           current_pipeline=current_pipeline)
    concurrency = processes or settings.diagnosis_workers
    if settings.is_postgres:
        return ProcrastinateRelabelQueue(worker=worker, db=db, enabled=run_worker, concurrency=concurrency,
                                         heartbeat_s=settings.relabel_heartbeat_s,
                                         stalled_after_s=settings.relabel_stalled_after_s)
    # two ranges per process: one runs while the other waits on the database
    return LocalRelabelQueue(worker=worker, db=db, concurrency=2 * concurrency, resume_on_start=resume_on_start)
