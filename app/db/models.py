"""Imports every domain model so that `Base.metadata` is complete (Alembic, drift test)."""

from app.actions.models import ControllerAction
from app.auth.models import ApiToken
from app.db.base import Base
from app.diagnoses.models import DiagnosisRow
from app.jobs.models import Attempt, Job, JobHost
from app.labels.models import Label, LabelledCaseRow
from app.logs.models import CompressedLog, JobLog, LogBlob
from app.relabel.models import RelabelItem, RelabelRun
from app.rules_review.models import ProposedRule

__all__ = ["ApiToken", "Attempt", "Base", "CompressedLog", "ControllerAction", "DiagnosisRow",
           "Job", "JobHost", "JobLog", "Label", "LabelledCaseRow", "LogBlob", "ProposedRule",
           "RelabelItem", "RelabelRun"]
