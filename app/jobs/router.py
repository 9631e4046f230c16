from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from app.api.deps import DbDep, Engineer, Scheduler
from app.api.openapi import ERRORS
from app.core.types import Category
from app.errors import Forbidden
from app.jobs import service
from app.jobs.models import JobState
from app.jobs.schemas import JobCreate, JobOut, JobPage
from app.schemas_common import Limit, LongName, Name, ObjectId, Offset, Timestamp

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERRORS)


@router.post("", status_code=201, response_model=JobOut,
             responses={200: {"model": JobOut, "description": "Existing job (updated)"}})
def create_job(body: JobCreate, db: DbDep, response: Response, principal: Scheduler) -> JobOut:
    """Register a job; idempotent on cluster + external_id (201 created, 200 existing). A token
    scoped to clusters registers jobs of those clusters only (403)."""
    if not principal.reaches(body.cluster):
        raise Forbidden(f"this token is scoped to clusters {', '.join(sorted(principal.clusters or ()))}; "
                        f"it cannot register a job of cluster {body.cluster}",
                        detail={"cluster": body.cluster, "clusters": sorted(principal.clusters or ())},
                        code="cluster_out_of_scope")
    with db.transaction() as session:
        job, created = service.upsert_job(session=session, data=body)
        out = service.to_out(job)
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"/v1/jobs/{out.id}"
    return out


@router.get("", response_model=JobPage)
def list_jobs(
    db: DbDep, _: Engineer,
    cluster: Annotated[Name | None, Query()] = None,
    state: JobState | None = None,
    error_type: Annotated[Name | None, Query()] = None,
    category: Category | None = None,
    host: Annotated[LongName | None, Query()] = None,
    since: Annotated[Timestamp | None, Query(description="Ended (or registered) at or after")] = None,
    until: Annotated[Timestamp | None, Query(description="Ended (or registered) before")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> JobPage:
    flt = service.JobFilter(cluster=cluster, state=state, error_type=error_type, category=category,
                            host=host, since=since, until=until)
    with db.transaction() as session:
        rows, total = service.list_jobs(session=session, flt=flt, limit=limit, offset=offset)
        items = [service.to_out(j) for j in rows]
    return JobPage(items=items, total=total, limit=limit, offset=offset)


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: ObjectId, db: DbDep, _: Scheduler) -> JobOut:
    with db.transaction() as session:
        return service.to_out(service.get_job(session=session, job_id=job_id))
