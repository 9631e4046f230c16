"""Log bookkeeping. Streaming and file I/O live in `app.logs.ingest`; these functions only touch
the database (keyword-only, the caller owns the transaction)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.engine import insert_ignore
from app.errors import Conflict, InvalidInput, NotFound
from app.jobs import service as jobs
from app.jobs.models import Attempt, Job
from app.logs.models import JobLog, LogBlob, LogKind, LogStatus
from app.logs.schemas import LogOut


def to_out(log: JobLog, attempt_number: int) -> LogOut:
    return LogOut(id=log.id, job_id=log.job_id, attempt=attempt_number, kind=log.kind,
                  status=log.status, size=log.size, encoding=log.encoding, sha256=log.blob_sha256,
                  error=log.error, warnings=list(log.warnings or []), created_at=log.created_at,
                  updated_at=log.updated_at)


def attempt_number(*, session: Session, log: JobLog) -> int:
    return session.get(Attempt, log.attempt_id).number


def ensure_blob(*, session: Session, sha256: str, size: int, encoding: str) -> LogBlob:
    blob = session.get(LogBlob, sha256)
    if blob is None:
        insert_ignore(session, LogBlob, sha256=sha256, size=size, encoding=encoding, created_at=utcnow())
        blob = session.get(LogBlob, sha256)
    return blob


def record_upload(*, session: Session, job: Job, attempt: Attempt, sha256: str, size: int,
                  encoding: str, error: str | None, warnings: list[str]) -> JobLog:
    ensure_blob(session=session, sha256=sha256, size=size, encoding=encoding)
    log = JobLog(job_id=job.id, attempt_id=attempt.id, kind=LogKind.UPLOAD.value,
                 status=(LogStatus.CORRUPT if error else LogStatus.COMPLETE).value, size=size,
                 encoding=encoding, blob_sha256=sha256, error=error, warnings=warnings)
    session.add(log)
    session.flush()
    return log


def current_log(*, session: Session, job_id: int, attempt_id: int | None = None) -> JobLog | None:
    query = select(JobLog).where(JobLog.job_id == job_id)
    if attempt_id is not None:
        query = query.where(JobLog.attempt_id == attempt_id)
    return session.scalars(query.order_by(JobLog.id.desc()).limit(1)).one_or_none()


def require_current_log(*, session: Session, job_id: int, attempt_id: int | None = None) -> JobLog:
    log = current_log(session=session, job_id=job_id, attempt_id=attempt_id)
    if log is None:
        raise NotFound(f"job {job_id} has no log yet; PUT /v1/jobs/{job_id}/log or append chunks first",
                       detail={"job_id": job_id}, code="no_log")
    return log


def chunked_log(*, session: Session, job: Job, attempt: Attempt, create: bool) -> JobLog | None:
    query = (select(JobLog).where(JobLog.attempt_id == attempt.id, JobLog.kind == LogKind.CHUNKED.value)
             .order_by(JobLog.id.desc()).limit(1))
    log = session.scalars(query).one_or_none()
    if log is None and create:
        log = JobLog(job_id=job.id, attempt_id=attempt.id, kind=LogKind.CHUNKED.value,
                     status=LogStatus.RECEIVING.value, size=0, warnings=[])
        session.add(log)
        session.flush()
    return log


def update_chunked_size(*, session: Session, log_id: int, size: int) -> JobLog:
    log = session.get(JobLog, log_id)
    if log.status == LogStatus.RECEIVING.value and size > log.size:
        log.size = size
    return log


def seal_chunked(*, session: Session, log_id: int, sha256: str, size: int, encoding: str,
                 error: str | None = None, warnings: list[str] | None = None) -> JobLog:
    """Seal a chunked log; a corrupt archive is sealed as `corrupt`, like a PUT of the same bytes."""
    log = session.get(JobLog, log_id)
    if log.status != LogStatus.RECEIVING.value:
        raise Conflict(f"log {log_id} is already complete", detail={"offset": log.size})
    ensure_blob(session=session, sha256=sha256, size=size, encoding=encoding)
    log.status = (LogStatus.CORRUPT if error else LogStatus.COMPLETE).value
    log.error = error
    log.warnings = list(warnings or [])
    log.size = size
    log.blob_sha256 = sha256
    log.encoding = encoding
    return log


def record_upload_for(*, session: Session, job_id: int, attempt: int | None, sha256: str, size: int,
                      encoding: str, error: str | None, warnings: list[str]) -> LogOut:
    job = jobs.get_job(session=session, job_id=job_id)
    att = jobs.get_attempt(session=session, job=job, number=attempt)
    log = record_upload(session=session, job=job, attempt=att, sha256=sha256, size=size,
                        encoding=encoding, error=error, warnings=warnings)
    return to_out(log, att.number)


def check_attempt(*, session: Session, job_id: int, attempt: int | None) -> int:
    job = jobs.get_job(session=session, job_id=job_id)
    return jobs.get_attempt(session=session, job=job, number=attempt).number


def check_replacement(*, session: Session, job_id: int, attempt: int | None, size: int, replace: bool) -> None:
    """Refuse an upload that would silently make the attempt's current log empty or shorter.
    Earlier logs are never deleted (every upload is its own row and blob), but the newest one is
    what diagnoses read, so a truncated re-upload must be asked for explicitly (`replace`)."""
    if size == 0:
        raise InvalidInput("the request body is empty; nothing was stored (send the log as the raw body, "
                           "e.g. curl --data-binary @job.log)", code="empty_log")
    job = jobs.get_job(session=session, job_id=job_id)
    att = jobs.get_attempt(session=session, job=job, number=attempt)
    current = current_log(session=session, job_id=job.id, attempt_id=att.id)
    if replace or current is None or size >= current.size:
        return
    raise Conflict(f"attempt {att.number} already has a {current.size}-byte log (log {current.id}); this "
                   f"{size}-byte body is shorter and was not stored. Add ?replace=true to make it the "
                   "current log anyway (the earlier one is kept)",
                   detail={"log_id": current.id, "size": current.size, "new_size": size},
                   code="log_shrinks")


def open_chunked(*, session: Session, job_id: int, attempt: int | None, offset: int) -> LogOut:
    """The attempt's chunked log; created by the first chunk (offset 0)."""
    job = jobs.get_job(session=session, job_id=job_id)
    att = jobs.get_attempt(session=session, job=job, number=attempt)
    log = chunked_log(session=session, job=job, attempt=att, create=offset == 0)
    if log is None:
        raise Conflict(f"no chunked log yet; the first chunk must have offset 0, not {offset}",
                       detail={"offset": 0, "requested_offset": offset}, code="offset_gap")
    return to_out(log, att.number)


def get_log_out(*, session: Session, job_id: int, attempt: int | None) -> LogOut:
    job = jobs.get_job(session=session, job_id=job_id)
    att_id = jobs.get_attempt(session=session, job=job, number=attempt).id if attempt else None
    log = require_current_log(session=session, job_id=job_id, attempt_id=att_id)
    return to_out(log, attempt_number(session=session, log=log))


def update_size_out(*, session: Session, log_id: int, size: int) -> LogOut:
    log = update_chunked_size(session=session, log_id=log_id, size=size)
    return to_out(log, attempt_number(session=session, log=log))


def seal_out(*, session: Session, log_id: int, sha256: str, size: int, encoding: str,
             error: str | None = None, warnings: list[str] | None = None) -> LogOut:
    log = seal_chunked(session=session, log_id=log_id, sha256=sha256, size=size, encoding=encoding,
                       error=error, warnings=warnings)
    return to_out(log, attempt_number(session=session, log=log))


def raw_location(*, session: Session, job_id: int, attempt: int | None) -> tuple[str | None, int, str]:
    """(blob sha256 or None for an open chunked log, log id, status) of the current log."""
    att_id = None
    if attempt:
        att_id = jobs.get_attempt(session=session, job=jobs.get_job(session=session, job_id=job_id),
                                  number=attempt).id
    else:
        jobs.get_job(session=session, job_id=job_id)
    log = require_current_log(session=session, job_id=job_id, attempt_id=att_id)
    return log.blob_sha256, log.id, log.status
