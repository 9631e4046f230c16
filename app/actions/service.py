"""Audit log of controller actions. The restart controller calls `record_action` before acting
(status `planned`/`dry_run`) and `finish_action` after; rows are never deleted."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.actions.models import ControllerAction
from app.actions.schemas import ActionOut
from app.db.lookup import get_or_404
from app.jobs.service import get_job


def record_action(*, session: Session, job_id: int, kind: str, actor: str, dry_run: bool,
                  diagnosis_id: int | None = None, params: dict[str, Any] | None = None) -> ControllerAction:
    get_job(session=session, job_id=job_id)
    row = ControllerAction(job_id=job_id, diagnosis_id=diagnosis_id, kind=kind, params=params or {},
                           dry_run=dry_run, status="dry_run" if dry_run else "planned", actor=actor, result={})
    session.add(row)
    session.flush()
    return row


def finish_action(*, session: Session, action_id: int, status: str, result: dict[str, Any]) -> ControllerAction:
    row = get_or_404(session, ControllerAction, action_id, what="action")
    row.status = status
    row.result = result
    return row


def list_actions(*, session: Session, job_id: int) -> list[ControllerAction]:
    get_job(session=session, job_id=job_id)
    query = select(ControllerAction).where(ControllerAction.job_id == job_id).order_by(ControllerAction.id)
    return list(session.scalars(query))


def to_out(row: ControllerAction) -> ActionOut:
    return ActionOut(id=row.id, job_id=row.job_id, diagnosis_id=row.diagnosis_id, kind=row.kind,
                     params=row.params, dry_run=row.dry_run, status=row.status, actor=row.actor,
                     result=row.result, created_at=row.created_at)
