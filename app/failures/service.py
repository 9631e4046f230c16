"""Failures and failure groups. A failure is a job with a finished diagnosis (its current one);
a group is every current diagnosis with the same fingerprint (`app.core.fingerprint`), across
jobs, hosts and clusters. Aggregation runs in Python over one filtered query, as the statistics
do: portable across SQLite and PostgreSQL at one cluster-year of jobs."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app.core.fingerprint import mask_text
from app.db.base import UTCDateTime, utcnow
from app.errors import InvalidInput, NotFound
from app.diagnoses.models import DiagnosisRow
from app.failures.models import FailureGroupState, GroupState
from app.failures.schemas import FailureGroupOut
from app.jobs.models import Job, JobHost
from app.jobs.service import JobFilter, filter_jobs
from app.labels.models import Label

FINGERPRINT = re.compile(r"[0-9a-f]{16}")
SPARK_DAYS = 14
NEW_GROUP_HOURS = 24


@dataclass(frozen=True)
class FailureFilter:
    cluster: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    error_type: str | None = None
    category: str | None = None
    host: str | None = None
    fingerprint: str | None = None
    unlabelled: bool = False
    search: str | None = None


@dataclass(frozen=True)
class GroupBadge:
    """A failure group's decision as shown beside one of its jobs."""

    state: str  # known | fixing | resolved | regressed
    text: str
    title: str


@dataclass
class Failure:
    """A job in the failures list. `diagnosis` is its current (finished) diagnosis; None while
    the first one is still pending or running (or failed): `pending` is then that newest row."""

    job: Job
    diagnosis: DiagnosisRow | None
    label: Label | None  # the newest label of the current diagnosis
    failed_at: datetime | None = None  # the list's sort key (see failed_at_expr)
    pending: DiagnosisRow | None = None
    group_state: GroupBadge | None = None  # the decision about its failure group, when one was made

    @property
    def when(self) -> datetime:
        return self.failed_at or self.job.ended_at or self.job.created_at

    @property
    def when_source(self) -> str:
        """What `when` is: the scheduler's end time, else the first diagnosis' time."""
        return "job end" if self.job.ended_at is not None else "first diagnosis"

    @property
    def action(self) -> str | None:
        return (((self.diagnosis.result if self.diagnosis else None) or {}).get("action") or {}).get("kind")

    @property
    def first_evidence(self) -> str | None:
        result = (self.diagnosis.result if self.diagnosis else None) or {}
        evidence = (result.get("root_cause") or {}).get("evidence") or []
        return evidence[0]["text"] if evidence else None


def failed_at_expr():  # noqa: ANN201
    """When the job failed: the scheduler's end time, else when it was first diagnosed (a
    re-diagnosis does not move it), else when it was registered."""
    first = (select(func.min(DiagnosisRow.created_at)).where(DiagnosisRow.job_id == Job.id)
             .correlate(Job).scalar_subquery())
    return func.coalesce(Job.ended_at, first, Job.created_at, type_=UTCDateTime())


def _failures_query(flt: FailureFilter, *, with_pending: bool = False):  # noqa: ANN202
    """Jobs with a current diagnosis (and, `with_pending`, jobs whose first diagnosis has not
    finished: outer-joined, their DiagnosisRow is None)."""
    if with_pending:
        base = (select(Job, DiagnosisRow, failed_at_expr().label("failed_at"))
                .outerjoin(DiagnosisRow, DiagnosisRow.id == Job.diagnosis_id)
                .where(Job.id.in_(select(DiagnosisRow.job_id))))
    else:
        base = select(Job, DiagnosisRow).join(DiagnosisRow, DiagnosisRow.id == Job.diagnosis_id)
    query = filter_jobs(
        base,
        JobFilter(cluster=flt.cluster, error_type=flt.error_type, category=flt.category, host=flt.host,
                  since=flt.since, until=flt.until))
    if flt.fingerprint:
        query = query.where(DiagnosisRow.fingerprint == flt.fingerprint)
    if flt.unlabelled:
        query = query.where(~select(Label.id).where(Label.diagnosis_id == DiagnosisRow.id).exists())
    if flt.search:
        # the box's text matches literally: `%` and `_` are LIKE's wildcards, `\` its escape
        literal = flt.search.strip().lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        like = f"%{literal}%"

        def has(column):  # noqa: ANN001, ANN202
            return func.lower(column).like(like, escape="\\")

        query = query.where(or_(
            has(Job.external_id), has(Job.user), has(Job.cluster), has(Job.error_type), has(DiagnosisRow.rule_id),
            Job.id.in_(select(JobHost.job_id).where(has(JobHost.host)))))
    return query


def _newest_labels(session: Session, diagnosis_ids: list[int]) -> dict[int, Label]:
    if not diagnosis_ids:
        return {}
    newest = (select(func.max(Label.id)).where(Label.diagnosis_id.in_(diagnosis_ids))
              .group_by(Label.diagnosis_id))
    return {lb.diagnosis_id: lb for lb in session.scalars(select(Label).where(Label.id.in_(newest)))}


def list_failures(*, session: Session, flt: FailureFilter, limit: int, offset: int,
                  after_id: int | None = None) -> tuple[list[Failure], int]:
    """Jobs by when they failed, newest first (`failed_at_expr`), those whose diagnosis is still
    pending included. `after_id` keeps only jobs diagnosed after that diagnosis (live updates)."""
    query = _failures_query(flt, with_pending=True)
    if after_id is not None:
        query = query.where(DiagnosisRow.id > after_id)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.execute(query.order_by(failed_at_expr().desc(), Job.id.desc()).limit(limit).offset(offset)).all()
    labels = _newest_labels(session, [d.id for _, d, _ in rows if d is not None])
    waiting = [job.id for job, d, _ in rows if d is None]
    pending: dict[int, DiagnosisRow] = {}
    if waiting:
        for row in session.scalars(select(DiagnosisRow).where(DiagnosisRow.job_id.in_(waiting))
                                   .order_by(DiagnosisRow.id)):
            pending[row.job_id] = row  # the newest one wins
    return [Failure(job, diag, labels.get(diag.id) if diag else None, failed_at=when, pending=pending.get(job.id))
            for job, diag, when in rows], total


def latest_diagnosis_id(*, session: Session) -> int:
    return session.scalar(select(func.max(Job.diagnosis_id))) or 0


def filter_choices(*, session: Session) -> dict[str, list[str]]:
    """Values present in the store, for the filter drop-downs."""
    def distinct(col) -> list[str]:  # noqa: ANN001
        return sorted(v for v in session.scalars(select(col).distinct()) if v)
    return {"cluster": distinct(Job.cluster), "error_type": distinct(Job.error_type),
            "category": distinct(Job.category)}


@dataclass
class FailureGroup:
    fingerprint: str
    error_type: str
    category: str | None
    rule_id: str | None
    sample: str  # the masked first evidence line: what the group has in common
    first_seen: datetime
    last_seen: datetime
    jobs: int = 0
    gpu_hours: float = 0.0
    hosts: set[str] = field(default_factory=set)
    clusters: set[str] = field(default_factory=set)
    labels: dict[str, int] = field(default_factory=dict)  # labelled error type -> diagnoses
    daily: list[int] = field(default_factory=list)  # jobs per day, oldest first (sparkline)
    state: str = GroupState.NEW.value
    note: str | None = None
    updated_by: str | None = None

    @property
    def is_new(self) -> bool:
        """Nobody has looked at it and it first appeared recently."""
        return (self.state == GroupState.NEW.value
                and utcnow() - self.first_seen <= timedelta(hours=NEW_GROUP_HOURS))

    @property
    def explained_by(self) -> str:
        """The rule that found it, and what humans labelled its jobs (they may disagree)."""
        parts = [f"rule {self.rule_id}" if self.rule_id else "no rule (heuristics or LLM)"]
        for error_type, n in sorted(self.labels.items(), key=lambda kv: (-kv[1], kv[0])):
            parts.append(f"labelled {error_type} ({n} of {self.jobs})")
        return " · ".join(parts)


def gpu_hours(job: Job) -> float:
    if job.started_at is None or job.ended_at is None:
        return 0.0
    return max(0.0, (job.ended_at - job.started_at).total_seconds()) / 3600.0 * (job.gpu_count or 0)


def list_groups(*, session: Session, cluster: str | None = None, since: datetime | None = None,
                state: str | None = None, fingerprint: str | None = None) -> list[FailureGroup]:
    """Groups of current diagnoses by fingerprint, most GPU-hours lost first."""
    flt = FailureFilter(cluster=cluster, since=since, fingerprint=fingerprint)
    query = _failures_query(flt).where(DiagnosisRow.fingerprint.is_not(None))
    rows = session.execute(query).all()
    labels = _newest_labels(session, [d.id for _, d in rows])
    hosts_of: dict[int, list[str]] = defaultdict(list)
    ids = [job.id for job, _ in rows]
    for start in range(0, len(ids), 500):
        for job_id, host in session.execute(select(JobHost.job_id, JobHost.host)
                                            .where(JobHost.job_id.in_(ids[start:start + 500]))):
            hosts_of[job_id].append(host)
    today = utcnow().date()
    groups: dict[str, FailureGroup] = {}
    for job, diag in rows:
        when = job.ended_at or job.created_at
        group = groups.get(diag.fingerprint)
        if group is None:
            failure = Failure(job, diag, None)
            group = groups[diag.fingerprint] = FailureGroup(
                fingerprint=diag.fingerprint, error_type=diag.error_type, category=diag.category,
                rule_id=diag.rule_id, sample=mask_text(failure.first_evidence or "") or "(no evidence line)",
                first_seen=when, last_seen=when, daily=[0] * SPARK_DAYS)
        group.first_seen = min(group.first_seen, when)
        group.last_seen = max(group.last_seen, when)
        group.jobs += 1
        group.gpu_hours += gpu_hours(job)
        group.hosts.update(hosts_of.get(job.id, []))
        group.clusters.add(job.cluster)
        label = labels.get(diag.id)
        if label is not None:
            group.labels[label.error_type] = group.labels.get(label.error_type, 0) + 1
        age = (today - when.date()).days
        if 0 <= age < SPARK_DAYS:
            group.daily[SPARK_DAYS - 1 - age] += 1
    states = {s.fingerprint: s for s in session.scalars(
        select(FailureGroupState).where(FailureGroupState.fingerprint.in_(list(groups))))} if groups else {}
    for fp, group in groups.items():
        if fp in states:
            group.state, group.note, group.updated_by = states[fp].state, states[fp].note, states[fp].updated_by
    out = [g for g in groups.values() if state is None or g.state == state]
    return sorted(out, key=lambda g: (-g.gpu_hours, -g.jobs, g.fingerprint))


def set_group_state(*, session: Session, fingerprint: str, state: GroupState, note: str | None,
                    updated_by: str) -> FailureGroupState:
    if not FINGERPRINT.fullmatch(fingerprint):
        raise InvalidInput(f"{fingerprint!r} is not a failure fingerprint (16 hex digits)")
    # a group is made of current diagnoses: one a newer diagnosis superseded names no group
    current = select(DiagnosisRow.id).join(Job, Job.diagnosis_id == DiagnosisRow.id)
    if session.scalar(current.where(DiagnosisRow.fingerprint == fingerprint).limit(1)) is None:
        raise NotFound(f"no job's current diagnosis has the failure fingerprint {fingerprint}",
                       detail={"fingerprint": fingerprint})
    row = session.get(FailureGroupState, fingerprint, with_for_update=True)
    if row is None:
        row = FailureGroupState(fingerprint=fingerprint, state=state.value, note=note, updated_by=updated_by)
        session.add(row)
    else:
        row.state, row.note, row.updated_by = state.value, note, updated_by
    session.flush()
    return row



def group_out(group: FailureGroup) -> FailureGroupOut:
    return FailureGroupOut(
        fingerprint=group.fingerprint, error_type=group.error_type, category=group.category, rule_id=group.rule_id,
        sample=group.sample, first_seen=group.first_seen, last_seen=group.last_seen, jobs=group.jobs,
        gpu_hours=round(group.gpu_hours, 3), hosts=sorted(group.hosts), clusters=sorted(group.clusters),
        labels=dict(group.labels), daily=list(group.daily), state=GroupState(group.state), note=group.note,
        updated_by=group.updated_by, is_new=group.is_new)
