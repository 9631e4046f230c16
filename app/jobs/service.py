"""Job service: keyword-only functions, the caller owns the transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.engine import insert_returning_ignore
from app.db.lookup import get_or_404
from app.errors import NotFound
from app.jobs.models import Attempt, Job, JobHost, JobState
from app.jobs.schemas import JobCreate, JobOut


def to_out(job: Job) -> JobOut:
    return JobOut(
        id=job.id, cluster=job.cluster, external_id=job.external_id, scheduler=job.scheduler,
        user=job.user, hosts=job.host_names, gpu_count=job.gpu_count, started_at=job.started_at,
        ended_at=job.ended_at, state=job.state, attempts=[a.number for a in job.attempts],
        error_type=job.error_type, category=job.category, diagnosis_id=job.diagnosis_id,
        created_at=job.created_at, updated_at=job.updated_at)


def get_job(*, session: Session, job_id: int) -> Job:
    return get_or_404(session, Job, job_id, what="job", detail_key="job_id")


def get_attempt(*, session: Session, job: Job, number: int | None = None) -> Attempt:
    """The given attempt, or the newest one."""
    if number is None:
        return job.attempts[-1]
    for attempt in job.attempts:
        if attempt.number == number:
            return attempt
    raise NotFound(f"job {job.id} has no attempt {number}", detail={"job_id": job.id, "attempt": number})


def _apply(job: Job, data: JobCreate) -> None:
    for field in ("scheduler", "user", "gpu_count", "started_at", "ended_at", "state"):
        value = getattr(data, field)
        if value is not None:
            setattr(job, field, value)
    if data.hosts:
        known = set(job.host_names)
        for host in dict.fromkeys(data.hosts):
            if host not in known:
                job.hosts.append(JobHost(host=host))
    number = data.attempt or 1
    attempt = next((a for a in job.attempts if a.number == number), None)
    if attempt is None:
        attempt = Attempt(number=number)
        job.attempts.append(attempt)
    if data.attempt is not None or len(job.attempts) == 1:
        attempt.started_at = data.started_at or attempt.started_at
        attempt.ended_at = data.ended_at or attempt.ended_at
        attempt.state = data.state or attempt.state
        attempt.exit_code = data.exit_code or attempt.exit_code


def upsert_job(*, session: Session, data: JobCreate) -> tuple[Job, bool]:
    """Create the job, or update the existing one with the same cluster + external_id.
    Returns (job, created)."""
    query = select(Job).where(Job.cluster == data.cluster, Job.external_id == data.external_id)
    job = session.scalars(query).one_or_none()
    created = False
    if job is None:
        now = utcnow()
        # a concurrent request with the same key may insert first: then this one just reads it
        result = session.execute(
            insert_returning_ignore(session, Job, cluster=data.cluster, external_id=data.external_id,
                                    gpu_count=0, state=JobState.UNKNOWN.value, created_at=now,
                                    updated_at=now))
        created = result.first() is not None
        job = session.scalars(query.execution_options(populate_existing=True)).one()
    _apply(job, data)
    session.flush()
    return job, created


@dataclass(frozen=True)
class JobFilter:
    cluster: str | None = None
    state: str | None = None
    error_type: str | None = None
    category: str | None = None
    host: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def filter_jobs(query, flt: JobFilter):  # noqa: ANN001, ANN202
    """`query` (over Job, possibly joined) narrowed by `flt`; time is when the job ended, else created."""
    if flt.cluster:
        query = query.where(Job.cluster == flt.cluster)
    if flt.state:
        query = query.where(Job.state == flt.state)
    if flt.error_type:
        query = query.where(Job.error_type == flt.error_type)
    if flt.category:
        query = query.where(Job.category == flt.category)
    if flt.host:
        query = query.where(Job.id.in_(select(JobHost.job_id).where(JobHost.host == flt.host)))
    when = func.coalesce(Job.ended_at, Job.created_at)
    if flt.since:
        query = query.where(when >= flt.since)
    if flt.until:
        query = query.where(when < flt.until)
    return query


def list_jobs(*, session: Session, flt: JobFilter, limit: int, offset: int) -> tuple[list[Job], int]:
    total = session.scalar(filter_jobs(select(func.count(Job.id)), flt)) or 0
    rows = session.scalars(filter_jobs(select(Job), flt).order_by(Job.id.desc()).limit(limit).offset(offset))
    return list(rows), total


def filtered_jobs_query(flt: JobFilter):  # noqa: ANN201
    return filter_jobs(select(Job), flt)
