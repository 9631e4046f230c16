"""Labels: a human confirms or corrects a finished diagnosis. A correction on a job's current
diagnosis becomes the job's effective root cause (filters and statistics follow it)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.core.types import Category, ErrorType, default_category
from app.diagnoses import service as diagnoses
from app.diagnoses.models import DiagnosisStatus
from app.errors import Conflict
from app.jobs.models import Job
from app.labels.models import Label, Verdict
from app.labels.schemas import LabelCreate


def create_label(*, session: Session, diagnosis_id: int, data: LabelCreate, created_by: str) -> Label:
    row = diagnoses.get_diagnosis(session=session, diagnosis_id=diagnosis_id)
    if row.status != DiagnosisStatus.DONE.value:
        raise Conflict(f"diagnosis {diagnosis_id} is {row.status}; only finished diagnoses can be labelled",
                       detail={"status": row.status})
    if data.verdict is Verdict.CONFIRM:
        error_type = data.error_type.value if data.error_type else row.error_type
        category = data.category.value if data.category else row.category
    else:
        error_type = data.error_type.value
        category = (data.category or default_category(ErrorType(error_type))).value
    label = Label(diagnosis_id=row.id, verdict=data.verdict.value, error_type=error_type,
                  category=Category(category).value, note=data.note, created_by=created_by)
    session.add(label)
    job = session.get(Job, row.job_id)
    if job.diagnosis_id == row.id:
        job.error_type, job.category = error_type, category
    session.flush()
    return label
