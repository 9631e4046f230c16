from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from app.api.deps import DbDep, Engineer
from app.api.openapi import ERRORS
from app.failures import service
from app.failures.schemas import FailureGroupList, FailureGroupOut, GroupMerge, GroupStateUpdate
from app.schemas_common import Name, Timestamp

router = APIRouter(prefix="/v1/failure-groups", tags=["failures"], responses=ERRORS)
FingerprintPath = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$", description="Failure fingerprint (16 hex digits)")]


@router.get("", response_model=FailureGroupList)
def list_groups(db: DbDep, _: Engineer, cluster: Annotated[Name | None, Query()] = None,
                since: Annotated[Timestamp | None, Query(description="Jobs that ended at or after")] = None,
                state: Annotated[str | None, Query(pattern="^(new|known|fixing|resolved|regressed)$")] = None
                ) -> FailureGroupList:
    """Current diagnoses grouped by failure fingerprint across jobs, most GPU-hours lost first."""
    with db.transaction() as session:
        groups = service.list_groups(session=session, cluster=cluster, since=since,
                                     state=state)
        return FailureGroupList(items=[service.group_out(g) for g in groups])


@router.put("/{fingerprint}", response_model=FailureGroupOut)
def set_state(fingerprint: FingerprintPath, body: GroupStateUpdate, db: DbDep, who: Engineer) -> FailureGroupOut:
    """Mark a group known, being fixed or resolved (the web page's group form does the same)."""
    with db.transaction() as session:
        service.set_group_state(session=session, fingerprint=fingerprint, state=body.state, note=body.note,
                                updated_by=who.name, assignee=body.assignee, ticket=body.ticket)
        return service.group_out(service.list_groups(session=session, fingerprint=fingerprint)[0])


@router.post("/{fingerprint}/merge", response_model=FailureGroupOut)
def merge(fingerprint: FingerprintPath, body: GroupMerge, db: DbDep, who: Engineer) -> FailureGroupOut:
    """Merge this group into another: its jobs are counted and listed there from now on, and the
    target's state, note, ticket and assignee apply to them. Returns the group merged into."""
    with db.transaction() as session:
        home = service.merge_group(session=session, fingerprint=fingerprint, into=body.into, updated_by=who.name)
        return service.group_out(service.list_groups(session=session, fingerprint=home)[0])


@router.delete("/{fingerprint}/merge", status_code=204)
def unmerge(fingerprint: FingerprintPath, db: DbDep, who: Engineer) -> None:
    """Undo a merge: the group is its own again."""
    with db.transaction() as session:
        service.unmerge_group(session=session, fingerprint=fingerprint, updated_by=who.name)
