"""Everything the job page shows, read in one transaction from the services that own it."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.actions import service as actions
from app.actions.models import ControllerAction
from app.controller import store as controller_store
from app.controller.models import ProbeRun, RecoveryRun
from app.diagnoses import service as diagnoses
from app.diagnoses.models import DiagnosisRow, DiagnosisStatus
from app.diagnoses.schemas import DiagnosisOut
from app.jobs import service as jobs
from app.jobs.models import Job
from app.logs import service as logs
from app.logs.models import CompressedLog, JobLog


@dataclass
class JobPage:
    job: Job
    diagnoses: list[DiagnosisRow]  # newest first, every attempt
    current: DiagnosisOut | None  # the shown diagnosis (the job's current one unless asked)
    compressed: CompressedLog | None
    actions: list[ControllerAction]
    log: JobLog | None
    attempt_of: dict[int, int]  # attempt id -> attempt number
    probes: list[ProbeRun]  # newest first
    recoveries: list[RecoveryRun]


def job_page(*, session: Session, job_id: int, diagnosis_id: int | None = None) -> JobPage:
    job = jobs.get_job(session=session, job_id=job_id)
    rows = diagnoses.list_for_job(session=session, job_id=job_id)
    wanted = diagnosis_id or job.diagnosis_id
    shown = next((r for r in rows if r.id == wanted), None)
    if shown is None:
        shown = next((r for r in rows if r.status == DiagnosisStatus.DONE.value), rows[0] if rows else None)
    compressed = session.get(CompressedLog, shown.compressed_log_id) if shown and shown.compressed_log_id else None
    return JobPage(
        job=job, diagnoses=rows, current=diagnoses.to_out(session=session, row=shown) if shown else None,
        compressed=compressed, actions=actions.list_actions(session=session, job_id=job_id),
        log=logs.current_log(session=session, job_id=job_id),
        attempt_of={a.id: a.number for a in job.attempts},
        probes=controller_store.list_probes(session=session, job_id=job_id),
        recoveries=controller_store.list_runs(session=session, job_id=job_id))
