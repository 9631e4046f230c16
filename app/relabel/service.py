"""Re-labeling runs: create (select the logs, one item each), claim and finish items, progress and
the diff report. Keyword-only; the caller owns the transaction. Execution (pipeline, pools, the
task engine) lives in `app.relabel.tasks`.

Writing rules: a new diagnosis is a new row (the old one stays); a human label is never changed,
and a job whose newest label disagrees with the new diagnosis keeps the label as its effective
root cause (the disagreement shows in the report as a regression of the rules).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.types import Category, ErrorType, default_category
from app.db.base import utcnow
from app.db.lookup import get_or_404
from app.diagnoses import service as diagnoses
from app.diagnoses.models import DiagnosisRow, DiagnosisStatus
from app.jobs import service as jobs
from app.jobs.models import Attempt, Job
from app.jobs.schemas import JobCreate
from app.labels.models import Label, Verdict
from app.logs import service as logs
from app.logs.models import JobLog, LogStatus
from app.relabel.archive import ArchiveFile, ImportedBlob
from app.relabel.models import ITEM_OPEN, ItemStatus, RelabelItem, RelabelRun, RunSource, RunStatus
from app.relabel.report import DiffReport, Outcome, build_report
from app.relabel.schemas import RunOut, RunProgress, StoredSelection
from app.relabel.whatif import StoredLog

IMPORT_LABEL_AUTHOR = "archive:label.json"
_INSERT_BATCH = 2000


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:128]


def _new_run(session: Session, *, source: RunSource, selection: dict[str, Any], dry_run: bool,
             rules_dir: str | None, rules_version: str | None, batch_size: int, created_by: str) -> RelabelRun:
    run = RelabelRun(source=source.value, status=RunStatus.RUNNING.value, dry_run=dry_run, selection=selection,
                     rules_dir=rules_dir, rules_version=rules_version, batch_size=batch_size,
                     total_items=0, total_bytes=0, created_by=created_by)
    session.add(run)
    session.flush()
    return run


def _add_items(session: Session, run: RelabelRun, rows: list[dict[str, Any]]) -> None:
    for start in range(0, len(rows), _INSERT_BATCH):
        session.execute(RelabelItem.__table__.insert(), [
            {"run_id": run.id, "status": ItemStatus.PENDING.value, "runs": 0, **row}
            for row in rows[start:start + _INSERT_BATCH]])
    run.total_items = len(rows)
    run.total_bytes = sum(r["size"] for r in rows)
    if not rows:
        run.status = RunStatus.DONE.value
        run.finished_at = utcnow()


def create_stored_run(*, session: Session, selection: StoredSelection, dry_run: bool, rules_dir: str | None,
                      rules_version: str | None, batch_size: int, created_by: str) -> RelabelRun:
    """One item per selected job that has a log: its newest log, what its current diagnosis said
    and its newest human label, read in a few set queries (no per-job round trips)."""
    flt = jobs.JobFilter(cluster=selection.cluster, since=selection.since, until=selection.until,
                         error_type=selection.error_type.value if selection.error_type else None)
    job_ids = jobs.filtered_jobs_query(flt).with_only_columns(Job.id)
    newest_log = (select(JobLog.job_id, func.max(JobLog.id).label("log_id"))
                  .where(JobLog.job_id.in_(job_ids), JobLog.status != LogStatus.RECEIVING.value)
                  .group_by(JobLog.job_id).subquery())
    # only the rule id of the old result: loading whole results would cost ~KBs per job
    rule_id = DiagnosisRow.result["root_cause"]["rule_id"].as_string()
    query = (select(Job.id, Job.diagnosis_id, JobLog.id, JobLog.size, DiagnosisRow.error_type,
                    DiagnosisRow.rules_version, rule_id)
             .join(newest_log, newest_log.c.job_id == Job.id)
             .join(JobLog, JobLog.id == newest_log.c.log_id)
             .outerjoin(DiagnosisRow, DiagnosisRow.id == Job.diagnosis_id)
             .order_by(Job.id))
    if selection.diagnosed_by:
        query = query.where(DiagnosisRow.rules_version == selection.diagnosed_by)
    if selection.only_stale and rules_version:
        query = query.where((DiagnosisRow.rules_version.is_(None)) | (DiagnosisRow.rules_version != rules_version))
    humans = _newest_human_labels(session, job_ids)
    rows = []
    for job_id, diagnosis_id, log_id, size, error_type, version, old_rule in session.execute(query):
        rows.append({"job_id": job_id, "job_log_id": log_id, "size": size or 0, "old_diagnosis_id": diagnosis_id,
                     "old_error_type": error_type, "old_rule_id": old_rule, "old_rules_version": version,
                     "human_error_type": humans.get(job_id)})
    run = _new_run(session, source=RunSource.STORED, selection=selection.model_dump(mode="json", exclude_none=True),
                   dry_run=dry_run, rules_dir=rules_dir, rules_version=rules_version, batch_size=batch_size,
                   created_by=created_by)
    _add_items(session, run, rows)
    return run


def _newest_human_labels(session: Session, job_ids) -> dict[int, str]:  # noqa: ANN001
    newest = (select(func.max(Label.id)).join(DiagnosisRow, DiagnosisRow.id == Label.diagnosis_id)
              .where(DiagnosisRow.job_id.in_(job_ids)).group_by(DiagnosisRow.job_id))
    query = (select(DiagnosisRow.job_id, Label.error_type).join(Label, Label.diagnosis_id == DiagnosisRow.id)
             .where(Label.id.in_(newest)))
    return {job_id: error_type for job_id, error_type in session.execute(query)}


def create_archive_run(*, session: Session, files: list[ArchiveFile], archive: str, cluster: str, dry_run: bool,
                       rules_dir: str | None, rules_version: str | None, batch_size: int,
                       created_by: str) -> RelabelRun:
    rows = [{"path": f.path, "external_id": f.external_id, "size": f.size, "human_error_type": f.human_error_type}
            for f in files]
    run = _new_run(session, source=RunSource.ARCHIVE, selection={"archive": archive, "cluster": cluster},
                   dry_run=dry_run, rules_dir=rules_dir, rules_version=rules_version, batch_size=batch_size,
                   created_by=created_by)
    _add_items(session, run, rows)
    return run


def get_run(*, session: Session, run_id: int) -> RelabelRun:
    return get_or_404(session, RelabelRun, run_id, what="re-labeling run", detail_key="run_id")


def list_runs(*, session: Session, limit: int = 50) -> list[RelabelRun]:
    return list(session.scalars(select(RelabelRun).order_by(RelabelRun.id.desc()).limit(limit)))


def unfinished_runs(*, session: Session) -> list[int]:
    return list(session.scalars(select(RelabelRun.id).where(RelabelRun.status == RunStatus.RUNNING.value)
                                .order_by(RelabelRun.id)))


def open_ranges(*, session: Session, run_id: int) -> list[tuple[int, int]]:
    """The run's unfinished items as id ranges of at most `batch_size` items: one task each."""
    run = get_run(session=session, run_id=run_id)
    ids = list(session.scalars(select(RelabelItem.id).where(RelabelItem.run_id == run_id,
                                                            RelabelItem.status.in_(ITEM_OPEN))
                               .order_by(RelabelItem.id)))
    size = max(1, run.batch_size)
    return [(chunk[0], chunk[-1]) for chunk in (ids[i:i + size] for i in range(0, len(ids), size))]


def open_items(*, session: Session, run_id: int, first: int, last: int) -> list[int]:
    return list(session.scalars(select(RelabelItem.id).where(
        RelabelItem.run_id == run_id, RelabelItem.id >= first, RelabelItem.id <= last,
        RelabelItem.status.in_(ITEM_OPEN)).order_by(RelabelItem.id)))


@dataclass(frozen=True)
class ItemClaim:
    item_id: int
    run_id: int
    source: RunSource
    dry_run: bool
    path: str | None            # archive file
    blob_sha256: str | None     # stored log: its blob, or None for an open chunked log
    job_log_id: int | None
    log_bytes: int | None       # stored log: the prefix to diagnose
    # a stored job's placement and how it ended, as its live diagnosis had them (an archive has none)
    hosts: tuple[str, ...] = ()
    gpu_count: int | None = None
    stopped: str | None = None


def claim_item(*, session: Session, item_id: int, worker: str) -> ItemClaim | None:
    """Mark the item running; None when it is already finished (another worker, or a duplicate
    delivery, did it)."""
    item = session.get(RelabelItem, item_id, with_for_update=True)
    if item is None or item.status not in ITEM_OPEN:
        return None
    run = session.get(RelabelRun, item.run_id)
    item.status = ItemStatus.RUNNING.value
    item.runs = (item.runs or 0) + 1
    item.worker = worker[:128]
    log = session.get(JobLog, item.job_log_id) if item.job_log_id else None
    if log is None:
        return ItemClaim(item.id, run.id, RunSource(run.source), run.dry_run, item.path, None, None, None)
    job = session.get(Job, log.job_id)
    attempt = session.get(Attempt, log.attempt_id) if log.attempt_id else None
    return ItemClaim(item.id, run.id, RunSource(run.source), run.dry_run, item.path, log.blob_sha256, log.id,
                     log.size, tuple(job.host_names) if job else (), (job.gpu_count or None) if job else None,
                     diagnoses.stopped_unfinished(attempt))


def _import_job(session: Session, *, item: RelabelItem, run: RelabelRun, blob: ImportedBlob) -> JobLog:
    mtime = None
    try:
        mtime = datetime.fromtimestamp(os.stat(item.path).st_mtime, tz=UTC)
    except (OSError, TypeError):
        pass
    job, _ = jobs.upsert_job(session=session, data=JobCreate(
        cluster=run.selection.get("cluster") or "archive", external_id=item.external_id or item.path[-256:],
        ended_at=mtime))
    attempt = jobs.get_attempt(session=session, job=job)
    log = logs.record_upload(session=session, job=job, attempt=attempt, sha256=blob.sha256, size=blob.size,
                             encoding=blob.encoding, error=blob.error, warnings=blob.warnings)
    item.job_id, item.job_log_id = job.id, log.id
    return log


def _store_diagnosis(session: Session, *, item: RelabelItem, log: JobLog, output: dict[str, Any]) -> DiagnosisRow:
    row = DiagnosisRow(job_id=log.job_id, attempt_id=log.attempt_id, job_log_id=log.id, log_bytes=log.size,
                       status=DiagnosisStatus.RUNNING.value, runs=1, started_at=utcnow())
    session.add(row)
    session.flush()
    diagnoses.complete_diagnosis(session=session, diagnosis_id=row.id, output=output)
    return row


def _keep_human_label(session: Session, *, job_id: int, row: DiagnosisRow, imported_label: str | None) -> None:
    """A new diagnosis becomes the job's current one, but a human label stays its effective root
    cause. An archive's label sidecar becomes a label on the imported diagnosis."""
    job = session.get(Job, job_id)
    if imported_label:
        try:
            error_type = ErrorType(imported_label)
        except ValueError:
            error_type = None
        if error_type is not None:
            verdict = Verdict.CONFIRM if error_type.value == row.error_type else Verdict.CORRECT
            session.add(Label(diagnosis_id=row.id, verdict=verdict.value, error_type=error_type.value,
                              category=default_category(error_type).value, note="imported with the archive",
                              created_by=IMPORT_LABEL_AUTHOR))
            session.flush()
    newest = session.execute(
        select(Label.error_type, Label.category).join(DiagnosisRow, DiagnosisRow.id == Label.diagnosis_id)
        .where(DiagnosisRow.job_id == job_id).order_by(Label.id.desc()).limit(1)).first()
    if newest is not None and job.diagnosis_id == row.id:
        job.error_type, job.category = newest.error_type, Category(newest.category).value


def finish_item(*, session: Session, item_id: int, output: dict[str, Any],
                blob: ImportedBlob | None = None) -> RelabelItem | None:
    """Store the item's result once: a new diagnosis row (and, for an archive, the imported job
    and log) in the same transaction as the checkpoint. None when the item was already finished."""
    item = session.get(RelabelItem, item_id, with_for_update=True)
    if item is None or item.status not in ITEM_OPEN:
        return None
    run = session.get(RelabelRun, item.run_id)
    result = output["diagnosis"]
    root = result["root_cause"]
    if not run.dry_run:
        if run.source == RunSource.ARCHIVE.value:
            assert blob is not None, "an archive item is imported before it is finished"
            log = _import_job(session, item=item, run=run, blob=blob)
        else:
            log = session.get(JobLog, item.job_log_id)
        row = _store_diagnosis(session, item=item, log=log, output=output)
        item.new_diagnosis_id = row.id
        _keep_human_label(session, job_id=log.job_id, row=row,
                          imported_label=item.human_error_type if run.source == RunSource.ARCHIVE.value else None)
    item.new_error_type = root["error_type"]
    item.new_category = root["category"]
    item.new_rule_id = root.get("rule_id")
    item.new_confidence = root.get("confidence")
    item.new_versions = result.get("versions")
    item.status = ItemStatus.DONE.value
    item.finished_at = utcnow()
    return item


def fail_item(*, session: Session, item_id: int, error: str) -> RelabelItem | None:
    item = session.get(RelabelItem, item_id, with_for_update=True)
    if item is None or item.status not in ITEM_OPEN:
        return None
    item.status = ItemStatus.FAILED.value
    item.error = error[:2000]
    item.finished_at = utcnow()
    return item


def finish_run_if_complete(*, session: Session, run_id: int) -> bool:
    run = session.get(RelabelRun, run_id, with_for_update=True)
    if run is None or run.status == RunStatus.DONE.value:
        return run is not None
    left = session.scalar(select(func.count(RelabelItem.id)).where(RelabelItem.run_id == run_id,
                                                                  RelabelItem.status.in_(ITEM_OPEN)))
    if left:
        return False
    run.status = RunStatus.DONE.value
    run.finished_at = utcnow()
    return True


def progress(*, session: Session, run_id: int) -> RunProgress:
    run = get_run(session=session, run_id=run_id)
    counts = {status: (n, b or 0) for status, n, b in session.execute(
        select(RelabelItem.status, func.count(RelabelItem.id), func.sum(RelabelItem.size))
        .where(RelabelItem.run_id == run_id).group_by(RelabelItem.status))}
    done, failed = counts.get(ItemStatus.DONE.value, (0, 0)), counts.get(ItemStatus.FAILED.value, (0, 0))
    return RunProgress(total=run.total_items, done=done[0], failed=failed[0],
                       open=run.total_items - done[0] - failed[0], bytes_total=run.total_bytes,
                       bytes_done=done[1] + failed[1])


def run_out(*, session: Session, run: RelabelRun) -> RunOut:
    return RunOut(id=run.id, source=run.source, status=run.status, dry_run=run.dry_run, selection=run.selection,
                  rules_version=run.rules_version, batch_size=run.batch_size, created_by=run.created_by,
                  created_at=run.created_at, finished_at=run.finished_at,
                  progress=progress(session=session, run_id=run.id), report=f"/v1/relabel/{run.id}/report")


def outcomes(*, session: Session, run_id: int) -> Iterator[Outcome]:
    get_run(session=session, run_id=run_id)
    query = (select(RelabelItem, Job.cluster, Job.external_id).outerjoin(Job, Job.id == RelabelItem.job_id)
             .where(RelabelItem.run_id == run_id,
                    RelabelItem.status.in_((ItemStatus.DONE.value, ItemStatus.FAILED.value)))
             .order_by(RelabelItem.id).execution_options(yield_per=1000))
    for item, cluster, external_id in session.execute(query):
        key = f"{cluster}/{external_id}" if external_id else (item.external_id or item.path or f"item {item.id}")
        yield Outcome(
            key=key, ok=item.status == ItemStatus.DONE.value,
            job_id=item.job_id, path=item.path, old_diagnosis_id=item.old_diagnosis_id,
            old_error_type=item.old_error_type, old_rule_id=item.old_rule_id,
            old_rules_version=item.old_rules_version, new_diagnosis_id=item.new_diagnosis_id,
            new_error_type=item.new_error_type, new_rule_id=item.new_rule_id, new_confidence=item.new_confidence,
            human_error_type=item.human_error_type, error=item.error)


def report(*, session: Session, run_id: int) -> DiffReport:
    run = get_run(session=session, run_id=run_id)
    return build_report(outcomes(session=session, run_id=run_id), rules_version=run.rules_version)


def sample_stored_logs(*, session: Session, limit: int, blob_path) -> list[StoredLog]:  # noqa: ANN001
    """The newest `limit` jobs with a finished log, for a what-if diff on the review page."""
    newest_log = (select(JobLog.job_id, func.max(JobLog.id).label("log_id"))
                  .where(JobLog.blob_sha256.is_not(None)).group_by(JobLog.job_id).subquery())
    query = (select(Job.id, Job.cluster, Job.external_id, JobLog.blob_sha256)
             .join(newest_log, newest_log.c.job_id == Job.id).join(JobLog, JobLog.id == newest_log.c.log_id)
             .order_by(Job.id.desc()).limit(limit))
    rows = session.execute(query).all()
    humans = _newest_human_labels(session, [r[0] for r in rows])
    return [StoredLog(f"{cluster}/{external_id}", job_id, str(blob_path(sha)), humans.get(job_id))
            for job_id, cluster, external_id, sha in rows]
