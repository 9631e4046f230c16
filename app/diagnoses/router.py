from __future__ import annotations

import asyncio
import time

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from app.api.deps import Engineer, Scheduler, ServicesDep
from app.api.openapi import ERRORS, RAW_LOG_BODY
from app.core.secrets import redact_obj
from app.core.types import Diagnosis
from app.diagnoses import service
from app.diagnoses.schemas import DiagnoseRequest, DiagnosisAccepted, DiagnosisList, DiagnosisOut
from app.errors import InvalidInput
from app.logs.ingest import check_content_type, spool_body
from app.schemas_common import ObjectId

router = APIRouter(tags=["diagnoses"], responses=ERRORS)


def _request(*, session, job_id: int, attempt: int | None) -> tuple[int, service.Plan]:  # noqa: ANN001
    row = service.request_diagnosis(session=session, job_id=job_id, attempt=attempt)
    return row.id, service.plan_diagnosis(session=session, diagnosis_id=row.id)


def _read(*, session, diagnosis_id: int) -> DiagnosisOut:  # noqa: ANN001
    return service.to_out(session=session, row=service.get_diagnosis(session=session, diagnosis_id=diagnosis_id))


@router.post("/v1/jobs/{job_id}/diagnoses", response_model=DiagnosisOut,
             responses={202: {"model": DiagnosisAccepted, "description": "Queued (large log); poll href"}})
async def create_diagnosis(job_id: ObjectId, services: ServicesDep, _: Scheduler,
                           body: DiagnoseRequest | None = None) -> DiagnosisOut | JSONResponse:
    """Diagnose the job's current log: 200 with the result when the log is small once
    decompressed (LOGDX_SYNC_DIAGNOSE_MAX_BYTES), else 202 `{id, status, href}`. Every call makes
    a new diagnosis; earlier ones are kept."""
    attempt = body.attempt if body else None
    diagnosis_id, plan = await services.run_db(_request, job_id=job_id, attempt=attempt)
    worker = services.worker
    big = await anyio.to_thread.run_sync(
        worker.is_big, worker.log_path(plan.blob_sha256, plan.job_log_id), plan.log_bytes)
    if not big:
        # shielded: a client that hangs up does not leave the row half-run
        task = asyncio.ensure_future(services.worker.execute(diagnosis_id, mode="sync"))
        await asyncio.shield(task)
        return await services.run_db(_read, diagnosis_id=diagnosis_id)
    await services.queue.submit(diagnosis_id)
    href = f"/v1/diagnoses/{diagnosis_id}"
    accepted = DiagnosisAccepted(id=diagnosis_id, status="pending", href=href)
    return JSONResponse(accepted.model_dump(), status_code=202, headers={"Location": href})


@router.get("/v1/jobs/{job_id}/diagnoses", response_model=DiagnosisList)
def list_job_diagnoses(job_id: ObjectId, services: ServicesDep, _: Scheduler) -> DiagnosisList:
    with services.db.transaction() as session:
        rows = service.list_for_job(session=session, job_id=job_id)
        return DiagnosisList(items=[service.to_out(session=session, row=r) for r in rows])


@router.get("/v1/diagnoses/{diagnosis_id}", response_model=DiagnosisOut)
def get_diagnosis(diagnosis_id: ObjectId, services: ServicesDep, _: Scheduler) -> DiagnosisOut:
    return services.db.run(_read, diagnosis_id=diagnosis_id)


@router.get("/v1/diagnoses/{diagnosis_id}/compressed", response_class=PlainTextResponse,
            responses={200: {"content": {"text/plain": {}}, "description": "Compressed log"}})
def get_compressed(diagnosis_id: ObjectId, services: ServicesDep, _: Engineer) -> PlainTextResponse:
    """The compact text the diagnosis was made from (templates, kept lines, context windows)."""
    return PlainTextResponse(services.db.run(service.compressed_text, diagnosis_id=diagnosis_id))


@router.post("/v1/diagnose", response_model=Diagnosis, response_model_by_alias=True,
             openapi_extra=RAW_LOG_BODY, tags=["one-shot"])
async def diagnose_once(request: Request, services: ServicesDep, principal: Scheduler) -> dict:
    """One-shot: the log as the body in, the diagnosis contract out. Nothing is stored. A corrupt
    archive is diagnosed on what decodes, with a warning in `compression.warnings`."""
    check_content_type(request)
    settings = services.settings
    spooled = await spool_body(request, spool=services.store.new_spool(), limit=settings.max_upload_bytes,
                               buffer_bytes=settings.upload_chunk_bytes, durable=False,
                               max_ratio=settings.max_decompression_ratio)
    try:
        services.metrics.ingested_bytes.labels(kind="one_shot").inc(spooled.check.size)
        big = await anyio.to_thread.run_sync(services.worker.is_big, spooled.path, spooled.check.size)
        async with services.executor.scheduler.slot(tenant=f"token:{principal.token_id}", big=big):
            started = time.perf_counter()
            output = await services.executor.run(spooled.path, None, propose_rules=False)  # nothing stored
            services.metrics.diagnosis_seconds.labels(mode="one_shot").observe(time.perf_counter() - started)
    finally:
        await anyio.to_thread.run_sync(lambda: spooled.path.unlink(missing_ok=True))
    if "input_error" in output:
        raise InvalidInput(output["input_error"], code="unreadable_log")
    services.metrics.observe_diagnosis(output["diagnosis"], mode="one_shot")
    services.metrics.observe_llm(output.get("llm"))
    return redact_obj(output["diagnosis"])
