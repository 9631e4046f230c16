"""Imports every domain model so that `Base.metadata` is complete (Alembic, drift test)."""

from app.actions.models import ControllerAction
from app.auth.models import ApiToken, WebSession
from app.controller.models import ClusterControl, HostIncident, JobLock, ProbeRun, RecoveryRun
from app.db.base import Base
from app.diagnoses.models import DiagnosisRow
from app.failures.models import FailureGroupState
from app.jobs.models import Attempt, Job, JobHost
from app.labels.models import Label, LabelledCaseRow
from app.logs.models import CompressedLog, JobLog, LogBlob
from app.relabel.models import RelabelItem, RelabelRun
from app.rules_review.models import ProposedRule

__all__ = ["ApiToken", "Attempt", "Base", "ClusterControl", "CompressedLog", "ControllerAction",
           "DiagnosisRow", "FailureGroupState", "HostIncident", "Job", "JobHost", "JobLock", "JobLog", "Label",
           "LabelledCaseRow", "LogBlob", "ProbeRun", "ProposedRule", "RecoveryRun", "RelabelItem", "RelabelRun",
           "WebSession"]
