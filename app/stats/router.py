from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from app.api.deps import DbDep, Engineer
from app.api.openapi import ERRORS
from app.schemas_common import Name, Timestamp
from app.stats import service
from app.stats.schemas import StatsOut

router = APIRouter(tags=["stats"], responses=ERRORS)


@router.get("/v1/stats", response_model=StatsOut)
def stats(db: DbDep, _: Engineer,
          since: Annotated[Timestamp | None, Query(description="Jobs that ended at or after")] = None,
          until: Annotated[Timestamp | None, Query(description="Jobs that ended before")] = None,
          cluster: Annotated[Name | None, Query()] = None,
          hosts: Annotated[int, Query(ge=1, le=10_000, description="Most hosts listed")] = 100,
          interval: Annotated[Literal["day", "week", "month"] | None,
                              Query(description="Also break down by period of the end time")] = None) -> StatsOut:
    """Failed jobs and failed GPU-hours (gpu_count x (ended - started)) per error type, category,
    cluster and host, over the effective root cause of each job."""
    with db.transaction() as session:
        return service.failure_stats(session=session, since=since, until=until, cluster=cluster,
                                     host_limit=hosts, interval=interval)
