"""`create_app(settings)`: builds every service explicitly (no import-time configuration).
Start-up compiles the rules (bad rules: refuse to start), migrates the database to head, clears
spool files of interrupted uploads and re-queues unfinished diagnoses."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI

from app import __version__
from app.actions.router import router as actions_router
from app.api.body_limit import BodyTimeoutMiddleware, JsonBodyLimitMiddleware
from app.api.deps import Services
from app.api.docs import ASSETS_PATH, install_docs
from app.api.errors import install_error_handlers
from app.api.front import router as front_router
from app.api.health import router as health_router
from app.api.metrics import Metrics, MetricsMiddleware
from app.api.security_headers import SecurityHeadersMiddleware
from app.controller.router import router as controller_router
from app.controller.router import start_live_watch
from app.core.pipeline import Pipeline
from app.db.engine import Database
from app.db.migrate import check_database, upgrade_to_head
from app.diagnoses.executor import PipelineExecutor, build_pipeline, build_refiner
from app.diagnoses.router import router as diagnoses_router
from app.diagnoses.worker import DiagnosisWorker, LocalQueue, ProcrastinateQueue
from app.failures.router import router as failures_router
from app.jobs.router import router as jobs_router
from app.labels.case_store import LabelCaseRecorder
from app.labels.router import router as labels_router
from app.llm.retrieval import Embedder, LazyEmbedder
from app.logs.router import router as logs_router
from app.logs.storage import BlobStore
from app.relabel.router import router as relabel_router
from app.relabel.router import rules_router as rule_impact_router
from app.relabel.tasks import build_queue as build_relabel_queue
from app.rules_review.router import router as rules_router
from app.settings import DiagnosisExecutor, Settings
from app.stats.router import router as stats_router
from app.web import install_web
from app.web.auth import PREFIX as WEB_PREFIX

log = logging.getLogger("logdx.api")

PUBLIC_PATHS = frozenset({"/", "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs",
                          "/docs/oauth2-redirect", "/redoc", ASSETS_PATH})


def build_services(settings: Settings, *, pipeline: Pipeline | None = None,
                   embedder: Embedder | None = None) -> Services:
    """`embedder` replaces the lazily loaded MiniLM (tests); it serves labels and, in thread
    mode, the LLM agent's retrieval (process workers load their own)."""
    settings.ensure_dirs()
    pipeline = pipeline or build_pipeline(settings)
    db = Database(settings.effective_database_url)
    store = BlobStore(settings)
    metrics = Metrics()
    embedder = embedder or LazyEmbedder()
    refiner = (build_refiner(settings, db=db, embedder=embedder)
               if settings.diagnosis_executor is DiagnosisExecutor.THREAD else None)
    executor = PipelineExecutor(settings, pipeline, refiner=refiner)
    worker = DiagnosisWorker(db=db, store=store, executor=executor, metrics=metrics)
    if settings.is_postgres:
        queue = ProcrastinateQueue(worker=worker, db=db, enabled=settings.run_worker,
                                   concurrency=settings.diagnosis_workers)
    else:
        queue = LocalQueue(worker=worker, db=db, enabled=settings.run_worker)
    services = Services(settings=settings, db=db, store=store, pipeline=pipeline, executor=executor,
                        worker=worker, queue=queue, metrics=metrics)
    services.cases = LabelCaseRecorder(db, embedder, lambda: services.pipeline.ruleset.policies)
    # runs interrupted by a restart continue on request (`POST /v1/relabel/{id}/resume`), not by surprise
    services.relabel = build_relabel_queue(settings=settings, db=db, store=store, run_worker=settings.run_worker,
                                           resume_on_start=False, current_pipeline=lambda: services.pipeline)
    return services


def prepare_database(services: Services) -> None:
    check_database(services.db.engine)
    if services.settings.migrate_on_startup:
        upgrade_to_head(services.db.engine)
    removed = services.store.clean_spool()
    if removed:
        log.info("removed %d spool files of interrupted uploads", removed)


def create_app(settings: Settings | None = None, *, pipeline: Pipeline | None = None,
               embedder: Embedder | None = None) -> FastAPI:
    settings = settings or Settings()
    services = build_services(settings, pipeline=pipeline, embedder=embedder)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(prepare_database, services)
        await services.queue.start()
        services.executor.warm_up()
        await services.relabel.start()
        live_watch = start_live_watch(services)
        try:
            yield
        finally:
            if live_watch is not None:
                live_watch.cancel()
            await services.relabel.stop()
            await services.queue.stop()
            services.executor.shutdown()
            services.db.dispose()

    app = FastAPI(title="logdx", version=__version__, lifespan=lifespan,
                  description="Diagnoses why LLM training jobs failed, from their logs.",
                  docs_url=None, redoc_url=None)  # served without a CDN: install_docs below
    install_docs(app)
    app.state.services = services
    install_error_handlers(app)
    for router in (front_router, health_router, jobs_router, logs_router, diagnoses_router, labels_router,
                   rules_router, stats_router, actions_router, relabel_router, rule_impact_router,
                   failures_router, controller_router):
        app.include_router(router)
    install_web(app)  # engineers' pages under /ui (after the handlers: it wraps them)
    app.add_middleware(JsonBodyLimitMiddleware)
    app.add_middleware(BodyTimeoutMiddleware, timeout=settings.request_body_timeout_s)
    app.add_middleware(MetricsMiddleware, metrics=services.metrics)
    app.add_middleware(SecurityHeadersMiddleware, page_prefix=WEB_PREFIX)  # outermost: errors get them too
    return app
