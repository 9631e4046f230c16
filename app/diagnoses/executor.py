"""Runs the pure pipeline on a stored log, in a spawned process pool (CPU parallelism, a crash
in one diagnosis cannot take the server down) or in threads (fast start-up; tests)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from app.core.ingest import InputError, Limits
from app.core.pipeline import Pipeline
from app.core.placement import JobPlacement
from app.core.secrets import redact
from app.diagnoses.refine import LLMRefiner
from app.diagnoses.scheduler import SlotScheduler
from app.core.compressed import mostly_unfiltered, series_points
from app.llm.retrieval import failure_signature
from app.logs.storage import BoundedReader
from app.settings import DiagnosisExecutor, Settings


def build_pipeline(settings: Settings) -> Pipeline:
    """The one place the service constructs a Pipeline (rules are compiled here: fail fast)."""
    return Pipeline(rules_dir=settings.rules_dir, overlay=settings.rules_overlay)


def build_refiner(settings: Settings, **kwargs: Any) -> LLMRefiner | None:
    """The LLM step that follows the pipeline (None for the `none` backend). One per worker
    process; its backend and agent are built lazily, on the first unsure diagnosis."""
    return LLMRefiner.for_settings(settings, **kwargs)


def run_pipeline(pipeline: Pipeline, path: str, limit: int | None, refiner: LLMRefiner | None = None, *,
                 diagnosis_id: int | None = None, propose_rules: bool = True,
                 job: JobPlacement | None = None, deadline_s: float | None = None,
                 max_ratio: float | None = None, workers: int | None = None) -> dict[str, Any]:
    """Diagnose the first `limit` bytes of `path`, then let the LLM review it when the rules are
    unsure. Reading stops at `deadline_s` or past `max_ratio` (a partial diagnosis with a note).
    Returns plain data (it crosses processes). `workers`: processes for one big plain log
    (default: one per core in a pool process, 1 in a thread; batch jobs that already run one log
    per core pass 1)."""
    limits = Limits.within(deadline_s, max_ratio=max_ratio)
    try:
        raw = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return {"input_error": "the stored log file is missing"}
    with raw:
        whole = limit is None or limit >= os.fstat(raw.fileno()).st_size
        # a whole file goes by path (buffered reads); one process per diagnosis: the scheduler
        # admits one diagnosis per pool worker, and byte-range forks inside a worker would
        # multiply its CPU and memory behind the scheduler's back (the CLI still uses them)
        source = path if whole else BoundedReader(raw, limit)
        if workers is None:  # one process per admitted diagnosis: the slot scheduler sees all the work
            workers = 1
        try:
            result = pipeline.diagnose(source, workers=workers, job=job, limits=limits)
        except InputError as exc:
            return {"input_error": str(exc)}
    output: dict[str, Any] = {"diagnosis": result.diagnosis.to_json_dict(),
                              "compressed_text": redact(result.compressed.text),
                              "signature": failure_signature(result),
                              "metrics": series_points(result.compressed)}
    if refiner is not None:
        diagnosis, llm = refiner.review(result, pipeline=pipeline, diagnosis_id=diagnosis_id,
                                        propose_rules=propose_rules)
        output["diagnosis"] = diagnosis.to_json_dict()
        if llm is not None:
            output["llm"] = llm
    if propose_rules:
        output["filter_proposals"] = filter_proposals(pipeline, result)
    return output


def filter_proposals(pipeline: Pipeline, result: Any) -> list[dict[str, Any]]:
    """The log agent: when many lines survived the filters (a metric format no filter rule
    knows), propose validated filter rules for review. Plain data; the service stores them."""
    if not mostly_unfiltered(result.compressed):
        return []  # the usual case: nothing of the LLM layer is imported
    from app.llm.rulewriter import propose_filter_rules

    out = []
    for p in propose_filter_rules(result.compressed, ruleset=pipeline.ruleset):
        if p.rule is not None:
            r = p.rule
            out.append({"kind": r.kind, "family": r.family, "rule": r.rule, "evidence": [redact(e) for e in r.evidence],
                        "validation": r.validation, "proposed_by": "log-agent"})
    return out


@dataclass
class _WorkerState:
    """What one spawned pool process holds: its pipeline and its (lazy) LLM step."""

    pipeline: Pipeline
    refiner: LLMRefiner | None


_WORKER: _WorkerState | None = None


def _init_worker(settings: Settings) -> None:
    global _WORKER
    _WORKER = _WorkerState(build_pipeline(settings), build_refiner(settings))


def _ready() -> bool:
    return _WORKER is not None


def _run_in_worker(path: str, limit: int | None, diagnosis_id: int | None, propose_rules: bool,
                   job: JobPlacement | None = None, deadline_s: float | None = None,
                   max_ratio: float | None = None, workers: int | None = None) -> dict[str, Any]:
    assert _WORKER is not None, "worker initializer did not run"
    return run_pipeline(_WORKER.pipeline, path, limit, _WORKER.refiner, diagnosis_id=diagnosis_id,
                        propose_rules=propose_rules, job=job, deadline_s=deadline_s, max_ratio=max_ratio,
                        workers=workers)


class PipelineExecutor:
    def __init__(self, settings: Settings, pipeline: Pipeline, *, refiner: LLMRefiner | None = None) -> None:
        self.settings = settings
        self.pipeline = pipeline
        # thread mode: the one LLM step of this process; process mode: each worker builds its own
        self.refiner = refiner
        self._pool: Executor | None = None
        # callers take a slot (`async with executor.scheduler.slot(...)`) before `run`: one per
        # pool worker, so an admitted diagnosis never waits inside the pool
        self.scheduler = SlotScheduler(settings.diagnosis_workers)

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

    def warm_up(self) -> None:
        """Start every pool process now (spawning one costs seconds), so the first diagnoses
        after start-up, and a small one arriving while a big one runs, do not wait for it."""
        pool = self._get_pool()
        if isinstance(pool, ProcessPoolExecutor):
            for _ in range(self.settings.diagnosis_workers):
                pool.submit(_ready)

    def replace_pipeline(self, pipeline: Pipeline) -> None:
        """Diagnose with `pipeline` from now on (new rules). Process pools are replaced: their
        workers load the rules at start; running diagnoses finish on the old ones."""
        self.pipeline = pipeline
        pool = self._pool
        if isinstance(pool, ProcessPoolExecutor):
            self._pool = None
            pool.shutdown(wait=False, cancel_futures=False)

    async def run(self, path: Path, limit: int | None, *, diagnosis_id: int | None = None,
                  propose_rules: bool = True, retries: int = 1, job: JobPlacement | None = None,
                  workers: int | None = None) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        pool = self._get_pool()
        deadline_s, ratio = self.settings.diagnosis_deadline_s, self.settings.max_decompression_ratio
        if isinstance(pool, ProcessPoolExecutor):
            call = partial(_run_in_worker, str(path), limit, diagnosis_id, propose_rules, job, deadline_s, ratio,
                           workers)
        else:
            call = partial(run_pipeline, self.pipeline, str(path), limit, self.refiner,
                           diagnosis_id=diagnosis_id, propose_rules=propose_rules, job=job,
                           deadline_s=deadline_s, max_ratio=ratio, workers=workers)
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
        except RuntimeError:
            if self._pool is pool or retries <= 0:
                raise
            # the pool was replaced (new rules) between picking it and submitting: use the new one
        return await self.run(path, limit, diagnosis_id=diagnosis_id, propose_rules=propose_rules,
                              retries=retries - 1, job=job, workers=workers)

    def shutdown(self) -> None:
        """Stop the pool now. Worker processes are terminated, not waited for (an unfinished
        diagnosis stays `running` and is re-queued at the next start), then joined, so that the
        pool's queues and locks are released before the server exits: a server stopped by a
        signal exits without running finalizers, and multiprocessing would report the pool's
        semaphores as leaked."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if isinstance(pool, ProcessPoolExecutor):
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
        else:
            pool.shutdown(wait=False, cancel_futures=True)
