"""Labels: a human confirms or corrects a finished diagnosis. A correction on a job's current
diagnosis becomes the job's effective root cause (filters and statistics follow it)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.types import Category, ErrorType, default_category
from app.diagnoses import service as diagnoses
from app.diagnoses.models import DiagnosisRow, DiagnosisStatus
from app.errors import Conflict
from app.jobs.models import Job
from app.labels.models import Label, Verdict
from app.labels.schemas import LabelCreate
from app.logs.models import CompressedLog


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


@dataclass(frozen=True)
class LabelledCase:
    """A human-checked diagnosis: what retrieval of similar past cases compares against."""

    diagnosis_id: int
    job_id: int
    error_type: str
    category: str
    verdict: str
    compressed_text: str


def list_labelled_cases(*, session: Session, limit: int = 1000) -> list[LabelledCase]:
    """The newest label of each labelled diagnosis, with the compressed log it was made from."""
    newest = (select(func.max(Label.id)).group_by(Label.diagnosis_id)).scalar_subquery()
    query = (select(Label, DiagnosisRow.job_id, CompressedLog.text)
             .join(DiagnosisRow, DiagnosisRow.id == Label.diagnosis_id)
             .join(CompressedLog, CompressedLog.id == DiagnosisRow.compressed_log_id)
             .where(Label.id.in_(newest)).order_by(Label.id.desc()).limit(limit))
    return [LabelledCase(label.diagnosis_id, job_id, label.error_type, label.category, label.verdict, text)
            for label, job_id, text in session.execute(query)]
