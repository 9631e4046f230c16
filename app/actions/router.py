from __future__ import annotations

from fastapi import APIRouter

from app.actions import service
from app.actions.schemas import ActionList
from app.api.deps import DbDep, Engineer
from app.api.openapi import ERRORS
from app.schemas_common import ObjectId

router = APIRouter(tags=["actions"], responses=ERRORS)


@router.get("/v1/jobs/{job_id}/actions", response_model=ActionList)
def list_actions(job_id: ObjectId, db: DbDep, _: Engineer) -> ActionList:
    """Controller actions taken (or planned, in dry-run) for the job: the audit log."""
    with db.transaction() as session:
        return ActionList(items=[service.to_out(r) for r in service.list_actions(session=session, job_id=job_id)])
