from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse

from app.api.deps import Engineer, Scheduler, ServicesDep
from app.api.openapi import ERRORS, RAW_LOG_BODY
from app.errors import NotFound
from app.logs import service
from app.logs.ingest import append_body, check_content_type, hash_file, spool_body
from app.logs.models import LogStatus
from app.logs.schemas import LogOut
from app.schemas_common import ObjectId

router = APIRouter(prefix="/v1/jobs/{job_id}/log", tags=["logs"], responses=ERRORS)

AttemptQuery = Annotated[int | None, Query(ge=1, le=10_000, description="Attempt (default: newest)")]
ReplaceQuery = Annotated[bool, Query(description="Accept a body shorter than the attempt's current log "
                                                 "(it becomes the current log; the earlier one is kept)")]


@router.put("", status_code=201, response_model=LogOut, openapi_extra=RAW_LOG_BODY,
            responses={413: ERRORS[422] | {"description": "Log too large"},
                       409: ERRORS[422] | {"description": "Shorter than the current log (see `replace`)"},
                       415: ERRORS[422] | {"description": "Not a log body"}})
async def put_log(job_id: ObjectId, request: Request, services: ServicesDep, _: Scheduler,
                  attempt: AttemptQuery = None, replace: ReplaceQuery = False) -> LogOut:
    """Upload the whole log as the request body, streamed to disk. A corrupt archive is stored
    as given (status `corrupt`, `error` says why) and diagnosed on what decodes. An empty body is refused (422
    `empty_log`); a body shorter than the attempt's current log is refused (409 `log_shrinks`)
    unless `replace=true`. Earlier uploads are never deleted."""
    check_content_type(request)
    await services.run_db(service.check_attempt, job_id=job_id, attempt=attempt)
    settings = services.settings
    spooled = await spool_body(request, spool=services.store.new_spool(), limit=settings.max_upload_bytes,
                               buffer_bytes=settings.upload_chunk_bytes,
                               max_ratio=settings.max_decompression_ratio)
    check = spooled.check
    services.metrics.ingested_bytes.labels(kind="upload").inc(check.size)
    try:
        await services.run_db(service.check_replacement, job_id=job_id, attempt=attempt, size=check.size,
                              replace=replace)
    except Exception:
        await anyio.to_thread.run_sync(lambda: spooled.path.unlink(missing_ok=True))
        raise
    await anyio.to_thread.run_sync(services.store.commit_spool, spooled.path, check.sha256)
    out = await services.run_db(
        service.record_upload_for, job_id=job_id, attempt=attempt, sha256=check.sha256,
        size=check.size, encoding=check.encoding.value, error=check.error, warnings=check.warnings)
    return out


@router.get("", response_model=LogOut)
def get_log(job_id: ObjectId, services: ServicesDep, _: Scheduler, attempt: AttemptQuery = None) -> LogOut:
    """The job's current log; for a chunked log `size` is the offset to resume from."""
    return services.db.run(service.get_log_out, job_id=job_id, attempt=attempt)


@router.get("/raw", response_class=FileResponse,
            responses={200: {"content": {"application/octet-stream": {}}, "description": "Raw bytes"}})
def download_log(job_id: ObjectId, services: ServicesDep, _: Engineer, attempt: AttemptQuery = None) -> FileResponse:
    """The current log exactly as received (still compressed if it was uploaded compressed)."""
    sha, log_id, _status = services.db.run(service.raw_location, job_id=job_id, attempt=attempt)
    path = services.store.blob_path(sha) if sha else services.store.part_path(log_id)
    if not path.exists():
        raise NotFound(f"the bytes of log {log_id} are not on disk", detail={"log_id": log_id})
    return FileResponse(path, media_type="application/octet-stream", filename=f"job-{job_id}-log-{log_id}")


@router.post("/chunks", response_model=LogOut, openapi_extra=RAW_LOG_BODY,
             responses={409: ERRORS[422] | {"description": "Offset gap or different bytes; "
                                                           "detail.offset is where to resume"}})
async def append_chunk(
    job_id: ObjectId, request: Request, services: ServicesDep, _: Scheduler,
    offset: Annotated[int, Query(ge=0, le=2**62, description="Byte offset of this chunk in the log")],
    final: Annotated[bool, Query(description="This is the last chunk: seal the log")] = False,
    attempt: AttemptQuery = None,
) -> LogOut:
    """Append bytes while the job runs. Idempotent by offset: re-sending bytes already stored is
    a no-op; a gap or different bytes at a stored offset is 409 with the offset to resume from."""
    check_content_type(request)
    settings, store = services.settings, services.store
    async with services.job_lock(job_id):
        log = await services.run_db(service.open_chunked, job_id=job_id, attempt=attempt, offset=offset)
        frozen = log.status != LogStatus.RECEIVING.value
        path = store.blob_path(log.sha256) if frozen and log.sha256 else store.part_path(log.id)
        result = await append_body(request, path=path, offset=offset, frozen=frozen,
                                   limit=settings.max_upload_bytes, buffer_bytes=settings.upload_chunk_bytes)
        services.metrics.ingested_bytes.labels(kind="chunk").inc(result.appended)
        if frozen:
            return log
        if not final:
            return await services.run_db(service.update_size_out, log_id=log.id, size=result.size)
        check = await anyio.to_thread.run_sync(hash_file, path)
        await anyio.to_thread.run_sync(store.seal_part, log.id, check.sha256)
        out = await services.run_db(service.seal_out, log_id=log.id, sha256=check.sha256,
                                    size=check.size, encoding=check.encoding.value, error=check.error,
                                    warnings=check.warnings)
        path.unlink(missing_ok=True)
        return out
