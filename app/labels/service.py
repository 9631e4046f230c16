"""Labels: a human confirms or corrects a finished diagnosis. A correction on a job's current
diagnosis becomes the job's effective root cause (filters and statistics follow it)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.secrets import redact
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
    return [LabelledCase(label.diagnosis_id, job_id, label.error_type, label.category, label.verdict, redact(text))
            for label, job_id, text in session.execute(query)]


@dataclass(frozen=True)
class Agreement:
    labelled: int  # diagnoses with a human label in the window
    agreed: int  # ... whose newest label names the diagnosed error type
    by_decider: dict[str, tuple[int, int]]  # decided_by -> (labelled, agreed)

    @property
    def rate(self) -> float | None:
        return self.agreed / self.labelled if self.labelled else None


def label_agreement(*, session: Session, since=None, until=None, cluster: str | None = None) -> Agreement:  # noqa: ANN001
    """How often the diagnoses engineers checked were right (newest label per diagnosis)."""
    newest = select(func.max(Label.id)).group_by(Label.diagnosis_id).scalar_subquery()
    query = (select(Label.error_type, DiagnosisRow.error_type, DiagnosisRow.decided_by)
             .join(DiagnosisRow, DiagnosisRow.id == Label.diagnosis_id)
             .join(Job, Job.id == DiagnosisRow.job_id).where(Label.id.in_(newest)))
    when = func.coalesce(Job.ended_at, Job.created_at)
    if since:
        query = query.where(when >= since)
    if until:
        query = query.where(when < until)
    if cluster:
        query = query.where(Job.cluster == cluster)
    labelled = agreed = 0
    by: dict[str, list[int]] = {}
    for label_type, diag_type, decided_by in session.execute(query):
        ok = int(label_type == diag_type)
        labelled += 1
        agreed += ok
        slot = by.setdefault(decided_by or "rules", [0, 0])
        slot[0] += 1
        slot[1] += ok
    return Agreement(labelled, agreed, {k: (v[0], v[1]) for k, v in sorted(by.items())})
