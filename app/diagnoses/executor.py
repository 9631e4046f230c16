"""Runs the pure pipeline on a stored log, in a spawned process pool (CPU parallelism, a crash
in one diagnosis cannot take the server down) or in threads (fast start-up; tests)."""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from pathlib import Path
from typing import Any

from app.core.ingest import InputError
from app.core.pipeline import Pipeline
from app.logs.storage import BoundedReader
from app.settings import DiagnosisExecutor, Settings


def build_pipeline(settings: Settings) -> Pipeline:
    """The one place the service constructs a Pipeline (rules are compiled here: fail fast)."""
    return Pipeline(rules_dir=settings.rules_dir)


def run_pipeline(pipeline: Pipeline, path: str, limit: int | None) -> dict[str, Any]:
    """Diagnose the first `limit` bytes of `path`. Returns plain data (it crosses processes)."""
    try:
        raw = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return {"input_error": "the stored log file is missing"}
    with raw:
        source = BoundedReader(raw, limit) if limit is not None else raw
        try:
            result = pipeline.diagnose(source)
        except InputError as exc:
            return {"input_error": str(exc)}
    return {"diagnosis": result.diagnosis.to_json_dict(), "compressed_text": result.compressed.text}


_WORKER_PIPELINE: Pipeline | None = None


def _init_worker(settings: Settings) -> None:
    global _WORKER_PIPELINE
    _WORKER_PIPELINE = build_pipeline(settings)


def _run_in_worker(path: str, limit: int | None) -> dict[str, Any]:
    assert _WORKER_PIPELINE is not None, "worker initializer did not run"
    return run_pipeline(_WORKER_PIPELINE, path, limit)


class PipelineExecutor:
    def __init__(self, settings: Settings, pipeline: Pipeline) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self._pool: Executor | None = None

    def _get_pool(self) -> Executor:
        if self._pool is None:
            workers = self.settings.diagnosis_workers
            if self.settings.diagnosis_executor is DiagnosisExecutor.PROCESS:
                self._pool = ProcessPoolExecutor(
                    max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init_worker, initargs=(self.settings,))
            else:
                self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="logdx-diagnose")
        return self._pool

    async def run(self, path: Path, limit: int | None, *, retries: int = 1) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        pool = self._get_pool()
        if isinstance(pool, ProcessPoolExecutor):
            call = partial(_run_in_worker, str(path), limit)
        else:
            call = partial(run_pipeline, self.pipeline, str(path), limit)
        try:
            return await loop.run_in_executor(pool, call)
        except BrokenProcessPool:
            # A worker died (OOM killer, segfault) and took every diagnosis in the pool with it:
            # start a fresh pool and retry once, so only a log that kills workers twice fails.
            if self._pool is pool:
                self._pool = None
                pool.shutdown(wait=False, cancel_futures=True)
            if retries <= 0:
                raise
            return await self.run(path, limit, retries=retries - 1)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
