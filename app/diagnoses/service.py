"""Diagnosis rows: request, claim, complete, fail, read. Keyword-only; caller owns the
transaction. Execution (pipeline, pools, queues) lives in `app.diagnoses.worker`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.secrets import redact, redact_obj
from app.core.fingerprint import fingerprint
from app.controller.recovery import JobEnd
from app.core.types import Diagnosis
from app.db.base import utcnow
from app.db.lookup import get_or_404
from app.diagnoses.models import DiagnosisRow, DiagnosisStatus
from app.diagnoses.schemas import DiagnosisOut, LLMReview
from app.errors import NotFound
from app.jobs import service as jobs
from app.jobs.models import Attempt, Job
from app.labels.models import Label
from app.labels.schemas import LabelOut
from app.logs import service as logs
from app.logs.models import CompressedLog, JobLog

UNFINISHED = (DiagnosisStatus.PENDING.value, DiagnosisStatus.RUNNING.value)


@dataclass(frozen=True)
class Claim:
    diagnosis_id: int
    job_log_id: int
    blob_sha256: str | None  # None: chunked log still open, read the part file
    log_bytes: int
    hosts: tuple[str, ...] = ()  # the job's registered hosts and GPU count: rank -> host
    gpu_count: int | None = None
    stopped: str | None = None  # how the attempt stopped unfinished (JobPlacement.stopped)


def request_diagnosis(*, session: Session, job_id: int, attempt: int | None = None) -> DiagnosisRow:
    job = jobs.get_job(session=session, job_id=job_id)
    attempt_id = jobs.get_attempt(session=session, job=job, number=attempt).id if attempt else None
    log = logs.require_current_log(session=session, job_id=job.id, attempt_id=attempt_id)
    row = DiagnosisRow(job_id=job.id, attempt_id=log.attempt_id, job_log_id=log.id,
                       log_bytes=log.size, status=DiagnosisStatus.PENDING.value, runs=0)
    session.add(row)
    session.flush()
    return row


def get_diagnosis(*, session: Session, diagnosis_id: int) -> DiagnosisRow:
    return get_or_404(session, DiagnosisRow, diagnosis_id, what="diagnosis", detail_key="diagnosis_id")


def list_for_job(*, session: Session, job_id: int) -> list[DiagnosisRow]:
    jobs.get_job(session=session, job_id=job_id)
    query = select(DiagnosisRow).where(DiagnosisRow.job_id == job_id).order_by(DiagnosisRow.id.desc())
    return list(session.scalars(query))


def unfinished_ids(*, session: Session) -> list[int]:
    query = select(DiagnosisRow.id).where(DiagnosisRow.status.in_(UNFINISHED)).order_by(DiagnosisRow.id)
    return list(session.scalars(query))


@dataclass(frozen=True)
class Plan:
    """What admission needs before a diagnosis runs: whose it is and what it will read."""

    tenant: str
    job_log_id: int
    blob_sha256: str | None
    log_bytes: int


def plan_diagnosis(*, session: Session, diagnosis_id: int) -> Plan | None:
    """None when the row is gone or finished."""
    row = session.get(DiagnosisRow, diagnosis_id)
    if row is None or row.status not in UNFINISHED:
        return None
    log = session.get(JobLog, row.job_log_id)
    job = session.get(Job, row.job_id)
    return Plan(f"cluster:{job.cluster}", log.id, log.blob_sha256, row.log_bytes)


def claim_diagnosis(*, session: Session, diagnosis_id: int, max_attempts: int | None = None) -> Claim | None:
    """Mark the row running; None when it is already finished (a duplicate delivery) or has used
    up `max_attempts` runs (then it is failed with the reason: a log that kills or outlives every
    run must not be re-queued forever)."""
    row = session.get(DiagnosisRow, diagnosis_id, with_for_update=True)
    if row is None or row.status not in UNFINISHED:
        return None
    if max_attempts is not None and (row.runs or 0) >= max_attempts:
        row.status = DiagnosisStatus.FAILED.value
        row.error = (f"gave up after {row.runs} attempts (LOGDX_DIAGNOSIS_MAX_ATTEMPTS): every run was "
                     "interrupted by a server restart or a crashed worker before it finished")
        row.finished_at = utcnow()
        return None
    row.status = DiagnosisStatus.RUNNING.value
    row.runs = (row.runs or 0) + 1
    row.started_at = utcnow()
    log = session.get(JobLog, row.job_log_id)
    job = session.get(Job, row.job_id)
    attempt = session.get(Attempt, row.attempt_id) if row.attempt_id else None
    return Claim(row.id, log.id, log.blob_sha256, row.log_bytes, tuple(job.host_names), job.gpu_count or None,
                 stopped=stopped_unfinished(attempt))


def stopped_unfinished(attempt: Attempt | None) -> str | None:
    """How the attempt ended when the scheduler reported a failure (a failed state or a non-zero
    exit), said as the diagnosis's Hang explains it; None while it runs or when it finished."""
    if attempt is None:
        return None
    end = JobEnd(state=(attempt.state or "").lower() or None, exit_code=attempt.exit_code)
    return None if end.running else end.stopped_unfinished


def _set_effective_cause(session: Session, row: DiagnosisRow) -> None:
    job = session.get(Job, row.job_id)
    if job.diagnosis_id is None or row.id >= job.diagnosis_id:
        job.diagnosis_id = row.id
        job.error_type = row.error_type
        job.category = row.category


def complete_diagnosis(*, session: Session, diagnosis_id: int, output: dict[str, Any]) -> DiagnosisRow | None:
    row = session.get(DiagnosisRow, diagnosis_id, with_for_update=True)
    if row is None or row.status not in UNFINISHED:
        return None  # written once, never overwritten
    result = output["diagnosis"]
    versions = result.get("versions") or {}
    compressed = CompressedLog(job_log_id=row.job_log_id, log_bytes=row.log_bytes,
                               rules_version=versions.get("rules") or "", text=output["compressed_text"],
                               stats=result.get("compression") or {}, metrics=output.get("metrics"))
    session.add(compressed)
    session.flush()
    root = result["root_cause"]
    row.result = result
    row.error_type = root["error_type"]
    row.category = root["category"]
    row.confidence = root["confidence"]
    row.decided_by = result.get("decided_by")
    row.rules_version = versions.get("rules")
    row.prompt_version = versions.get("prompt")
    row.model_version = versions.get("model")
    row.compressed_log_id = compressed.id
    row.failure_signature = output.get("signature")
    row.fingerprint = fingerprint(Diagnosis.from_json_dict(result))
    row.rule_id = root.get("rule_id")
    llm = output.get("llm")
    if llm:
        row.llm_verdict = llm.get("verdict") or ({"error": llm["error"]} if llm.get("error") else None)
        row.llm_calls = int(llm.get("calls") or 0)
        row.tokens_in = int(llm.get("tokens_in") or 0)
        row.tokens_out = int(llm.get("tokens_out") or 0)
        row.llm_latency_s = float(llm.get("latency_s") or 0.0)
    row.status = DiagnosisStatus.DONE.value
    row.finished_at = utcnow()
    _set_effective_cause(session, row)
    if output.get("filter_proposals"):
        from app.llm.ports import ProposedRule
        from app.rules_review.sink import store_proposal

        for p in output["filter_proposals"]:
            store_proposal(session=session, rule=ProposedRule(**p, source_diagnosis_id=str(row.id)))
    return row


def fail_diagnosis(*, session: Session, diagnosis_id: int, error: str) -> DiagnosisRow | None:
    row = session.get(DiagnosisRow, diagnosis_id, with_for_update=True)
    if row is None or row.status not in UNFINISHED:
        return None
    row.status = DiagnosisStatus.FAILED.value
    row.error = error
    row.finished_at = utcnow()
    return row


def label_out(label: Label) -> LabelOut:
    return LabelOut(id=label.id, diagnosis_id=label.diagnosis_id, verdict=label.verdict,
                    error_type=label.error_type, category=label.category, note=label.note,
                    created_by=label.created_by, created_at=label.created_at)


def _llm_out(row: DiagnosisRow) -> LLMReview | None:
    if row.llm_verdict is None and not row.llm_calls:
        return None
    verdict = row.llm_verdict if row.llm_verdict and "choice" in row.llm_verdict else None
    error = (row.llm_verdict or {}).get("error") if verdict is None else None
    return LLMReview(verdict=redact_obj(verdict), error=error, calls=row.llm_calls or 0, tokens_in=row.tokens_in or 0,
                     tokens_out=row.tokens_out or 0, latency_s=row.llm_latency_s or 0.0)


def to_out(*, session: Session, row: DiagnosisRow) -> DiagnosisOut:
    labels = session.scalars(select(Label).where(Label.diagnosis_id == row.id).order_by(Label.id))
    attempt = session.get(Attempt, row.attempt_id)
    return DiagnosisOut(
        id=row.id, job_id=row.job_id, attempt=attempt.number, log_id=row.job_log_id,
        log_bytes=row.log_bytes, status=row.status, error=redact(row.error) if row.error else row.error,
        diagnosis=redact_obj(row.result),
        versions={"rules": row.rules_version, "prompt": row.prompt_version, "model": row.model_version},
        decided_by=row.decided_by, llm=_llm_out(row), labels=[label_out(lb) for lb in labels], created_at=row.created_at,
        started_at=row.started_at, finished_at=row.finished_at)


def compressed_text(*, session: Session, diagnosis_id: int) -> str:
    row = get_diagnosis(session=session, diagnosis_id=diagnosis_id)
    compressed = session.get(CompressedLog, row.compressed_log_id) if row.compressed_log_id else None
    if compressed is None:
        raise NotFound(f"diagnosis {diagnosis_id} is {row.status}; it has no compressed log",
                       detail={"status": row.status}, code="no_compressed_log")
    return redact(compressed.text)  # rows stored before the text was redacted at write
