"""Failures and failure groups. A failure is a job with a finished diagnosis (its current one);
a group is every current diagnosis with the same fingerprint (`app.core.fingerprint`), across
jobs, hosts and clusters. Aggregation runs in Python over one filtered query, as the statistics
do: portable across SQLite and PostgreSQL at one cluster-year of jobs."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
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
TICKET = re.compile(r"https?://[^\s<>\"]{1,1990}")
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
    members: tuple[str, ...] = ()  # the fingerprints merged into `fingerprint` (set by with_members)
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
        query = query.where(DiagnosisRow.fingerprint.in_(flt.members or (flt.fingerprint,)))
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
    query = _failures_query(with_members(flt, session=session), with_pending=True)
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
    items = [Failure(job, diag, labels.get(diag.id) if diag else None, failed_at=when, pending=pending.get(job.id))
             for job, diag, when in rows]
    add_badges(session=session, items=items)
    return items, total


def job_title(*, session: Session, job_id: int) -> str:
    """`cluster/external id` of a job (404 for an unknown one)."""
    from app.jobs.service import get_job

    job = get_job(session=session, job_id=job_id)
    return f"{job.cluster}/{job.external_id}"


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
    evidence: str  # the first evidence line of one of its jobs (`sample` masks it)
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
    assignee: str | None = None
    ticket: str | None = None
    resolved_at: datetime | None = None
    merged: set[str] = field(default_factory=set)  # fingerprints merged into this group
    sample_from: str = ""  # the fingerprint whose job gave type, rule and sample

    @property
    def sample(self) -> str:
        """The masked first evidence line: what the group's jobs have in common (masked when
        shown: a page shows 50 groups of thousands)."""
        return mask_text(self.evidence) or "(no evidence line)"

    @property
    def is_new(self) -> bool:
        """Nobody has looked at it and it first appeared recently."""
        return (self.state == GroupState.NEW.value
                and utcnow() - self.first_seen <= timedelta(hours=NEW_GROUP_HOURS))

    @property
    def regressed(self) -> bool:
        """Resolved, and a job failed this way after it was resolved."""
        return (self.state == GroupState.RESOLVED.value and self.resolved_at is not None
                and self.last_seen > self.resolved_at)

    @property
    def shown_state(self) -> str:
        return "regressed" if self.regressed else self.state

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


def decisions(*, session: Session) -> dict[str, FailureGroupState]:
    """Every group decision (a row per group an engineer touched: few, read whole)."""
    return {row.fingerprint: row for row in session.scalars(select(FailureGroupState))}


def merge_targets(known: dict[str, FailureGroupState]) -> dict[str, str]:
    """fingerprint -> the group it is shown in, merges followed to their end."""
    out = {}
    for fp, row in known.items():
        target, seen = row.merged_into, {fp}
        while target and target not in seen and target in known and known[target].merged_into:
            seen.add(target)
            target = known[target].merged_into
        if target and target != fp:
            out[fp] = target
    return out


def with_members(flt: FailureFilter, *, session: Session) -> FailureFilter:
    """`flt` with the fingerprints merged into its group, so the group's list shows them all."""
    if not flt.fingerprint:
        return flt
    targets = merge_targets(decisions(session=session))
    home = targets.get(flt.fingerprint, flt.fingerprint)
    members = (home, *sorted(fp for fp, to in targets.items() if to == home))
    return replace(flt, fingerprint=home, members=members)


def badge_of(row: FailureGroupState | None, when: datetime) -> GroupBadge | None:
    """A group decision as shown beside one failure of the group (failed at `when`)."""
    if row is None or row.state == GroupState.NEW.value:
        return None
    state = row.state
    if state == GroupState.RESOLVED.value and row.resolved_at is not None and when > row.resolved_at:
        state = "regressed"
    text = {"fixing": "being fixed"}.get(state, state)
    title = " · ".join(x for x in (f"group {text}", row.note, row.ticket,
                                    f"assigned to {row.assignee}" if row.assignee else None) if x)
    return GroupBadge(state=state, text=text, title=title)


def add_badges(*, session: Session, items: list[Failure]) -> None:
    known = decisions(session=session)
    if not known:
        return
    targets = merge_targets(known)
    for f in items:
        if f.diagnosis is not None and f.diagnosis.fingerprint:
            home = targets.get(f.diagnosis.fingerprint, f.diagnosis.fingerprint)
            f.group_state = badge_of(known.get(home), f.when)


def list_groups(*, session: Session, cluster: str | None = None, since: datetime | None = None,
                state: str | None = None, fingerprint: str | None = None,
                with_hosts: bool = True) -> list[FailureGroup]:
    """Groups of current diagnoses by fingerprint (merged groups counted in the group they were
    merged into), most GPU-hours lost first. `state` may be `regressed`."""
    known = decisions(session=session)
    targets = merge_targets(known)
    flt = FailureFilter(cluster=cluster, since=since, fingerprint=fingerprint)
    if fingerprint:
        flt = with_members(flt, session=session)
    # plain columns, not ORM rows: at 10,000 jobs loading Job/DiagnosisRow objects (hosts,
    # attempts, result JSON) cost seconds; the sample evidence is read for one job per group
    query = (_failures_query(flt).where(DiagnosisRow.fingerprint.is_not(None))
             .with_only_columns(Job.id, Job.cluster, Job.ended_at, Job.created_at, Job.started_at, Job.gpu_count,
                                DiagnosisRow.id, DiagnosisRow.fingerprint, DiagnosisRow.error_type,
                                DiagnosisRow.category, DiagnosisRow.rule_id, maintain_column_froms=True))
    rows = session.connection().execute(query).all()  # Core rows: the ORM's row machinery doubles the time
    labels = _newest_labels(session, [r[6] for r in rows])
    today = utcnow().date()
    groups: dict[str, FailureGroup] = {}
    sample_of: dict[str, int] = {}  # group -> the diagnosis whose first evidence line describes it
    for _job_id, job_cluster, ended_at, created_at, started_at, gpus, diag_id, fp, error_type, category, rule_id in rows:
        when = ended_at or created_at
        home = targets.get(fp, fp)
        group = groups.get(home)
        if group is None or (fp == home and group.sample_from != home):
            if group is None:
                group = groups[home] = FailureGroup(
                    fingerprint=home, error_type=error_type, category=category, rule_id=rule_id, evidence="",
                    first_seen=when, last_seen=when, daily=[0] * SPARK_DAYS)
            else:  # the group's own failure describes it, not a merged one's
                group.error_type, group.category, group.rule_id = error_type, category, rule_id
            group.sample_from = fp
            sample_of[home] = diag_id
        if fp != home:
            group.merged.add(fp)
        group.first_seen = min(group.first_seen, when)
        group.last_seen = max(group.last_seen, when)
        group.jobs += 1
        if started_at is not None and ended_at is not None:
            group.gpu_hours += max(0.0, (ended_at - started_at).total_seconds()) / 3600.0 * (gpus or 0)
        group.clusters.add(job_cluster)
        label = labels.get(diag_id)
        if label is not None:
            group.labels[label.error_type] = group.labels.get(label.error_type, 0) + 1
        age = (today - when.date()).days
        if 0 <= age < SPARK_DAYS:
            group.daily[SPARK_DAYS - 1 - age] += 1
    if with_hosts:
        add_hosts(session=session, groups=list(groups.values()), cluster=cluster, since=since)
    evidence = _first_evidence(session, list(sample_of.values()))
    for fp, group in groups.items():
        group.evidence = evidence.get(sample_of[fp]) or ""
        row = known.get(fp)
        if row is not None:
            group.state, group.note, group.updated_by = row.state, row.note, row.updated_by
            group.assignee, group.ticket, group.resolved_at = row.assignee, row.ticket, row.resolved_at
    out = [g for g in groups.values() if state is None or g.state == state or g.shown_state == state]
    return sorted(out, key=lambda g: (-g.gpu_hours, -g.jobs, g.fingerprint))


def add_hosts(*, session: Session, groups: list[FailureGroup], cluster: str | None = None,
              since: datetime | None = None) -> None:
    """Fill in the hosts of `groups` (those of their jobs within the same filters): one query of
    distinct (fingerprint, host) pairs. The groups page does it for the 50 groups it shows."""
    if not groups:
        return
    home_of = {g.fingerprint: g.fingerprint for g in groups}
    home_of.update({m: g.fingerprint for g in groups for m in g.merged})
    by_fp = {g.fingerprint: g for g in groups}
    fps = list(home_of)
    for start in range(0, len(fps), 500):
        pairs = filter_jobs(select(DiagnosisRow.fingerprint, JobHost.host).select_from(Job)
                            .join(DiagnosisRow, DiagnosisRow.id == Job.diagnosis_id)
                            .join(JobHost, JobHost.job_id == Job.id)
                            .where(DiagnosisRow.fingerprint.in_(fps[start:start + 500])),
                            JobFilter(cluster=cluster, since=since)).distinct()
        for fp, host in session.execute(pairs):
            by_fp[home_of[fp]].hosts.add(host)


def _first_evidence(session: Session, diagnosis_ids: list[int]) -> dict[int, str]:
    """diagnosis id -> the text of its first evidence line (read in SQL from the result JSON)."""
    text = DiagnosisRow.result["root_cause"]["evidence"][0]["text"].as_string()
    out: dict[int, str] = {}
    for start in range(0, len(diagnosis_ids), 500):
        out.update(session.execute(select(DiagnosisRow.id, text)
                                   .where(DiagnosisRow.id.in_(diagnosis_ids[start:start + 500]))).all())
    return out


def _require_group(session: Session, fingerprint: str) -> None:
    if not FINGERPRINT.fullmatch(fingerprint or ""):
        raise InvalidInput(f"{fingerprint!r} is not a failure fingerprint (16 hex digits)")
    # a group is made of current diagnoses: one a newer diagnosis superseded names no group
    current = select(DiagnosisRow.id).join(Job, Job.diagnosis_id == DiagnosisRow.id)
    if session.scalar(current.where(DiagnosisRow.fingerprint == fingerprint).limit(1)) is None:
        raise NotFound(f"no job's current diagnosis has the failure fingerprint {fingerprint}",
                       detail={"fingerprint": fingerprint})


def set_group_state(*, session: Session, fingerprint: str, state: GroupState, note: str | None,
                    updated_by: str, assignee: str | None = None, ticket: str | None = None) -> FailureGroupState:
    """The decision about a group (about the group it was merged into, for a merged one). Saving
    `resolved` starts the regression watch: a job failing this way later shows `regressed`."""
    _require_group(session, fingerprint)
    if ticket is not None and not TICKET.fullmatch(ticket):
        raise InvalidInput(f"the ticket must be an http(s) link, not {ticket[:80]!r}")
    fingerprint = merge_targets(decisions(session=session)).get(fingerprint, fingerprint)
    row = session.get(FailureGroupState, fingerprint, with_for_update=True)
    if row is None:
        row = FailureGroupState(fingerprint=fingerprint, state=state.value, updated_by=updated_by)
        session.add(row)
    row.state, row.note, row.updated_by, row.assignee, row.ticket = state.value, note, updated_by, assignee, ticket
    row.resolved_at = utcnow() if state == GroupState.RESOLVED else None
    session.flush()
    return row


def merge_group(*, session: Session, fingerprint: str, into: str, updated_by: str) -> str:
    """Show the group `fingerprint` inside `into` from now on (its jobs counted there, its
    decision replaced by the target's). Returns the fingerprint the jobs are now shown under."""
    _require_group(session, fingerprint)
    _require_group(session, into)
    targets = merge_targets(decisions(session=session))
    home = targets.get(into, into)
    if home == fingerprint or targets.get(fingerprint, fingerprint) == home:
        raise InvalidInput(f"group {fingerprint} is {'already part of' if home != fingerprint else ''} "
                           f"group {into}".replace("  ", " ") + ": nothing to merge")
    row = session.get(FailureGroupState, fingerprint, with_for_update=True)
    if row is None:
        row = FailureGroupState(fingerprint=fingerprint, state=GroupState.NEW.value, updated_by=updated_by)
        session.add(row)
    row.merged_into, row.updated_by = home, updated_by
    # groups merged into this one move with it (no chains to follow later)
    for other in session.scalars(select(FailureGroupState).where(FailureGroupState.merged_into == fingerprint)):
        other.merged_into = home
    session.flush()
    return home


def unmerge_group(*, session: Session, fingerprint: str, updated_by: str) -> None:
    row = session.get(FailureGroupState, fingerprint, with_for_update=True)
    if row is None or not row.merged_into:
        raise NotFound(f"group {fingerprint} is not merged into another", detail={"fingerprint": fingerprint})
    row.merged_into, row.updated_by = None, updated_by
    session.flush()


def similar_failures(*, session: Session, fingerprint: str, job_id: int, limit: int = 5) -> tuple[list[Failure], int]:
    """Other jobs of the group (merged ones included), newest failure first, and the group's size."""
    flt = with_members(FailureFilter(fingerprint=fingerprint), session=session)
    items, total = list_failures(session=session, flt=flt, limit=limit + 1, offset=0)
    return [f for f in items if f.job.id != job_id][:limit], total


def group_out(group: FailureGroup) -> FailureGroupOut:
    return FailureGroupOut(
        fingerprint=group.fingerprint, error_type=group.error_type, category=group.category, rule_id=group.rule_id,
        sample=group.sample, first_seen=group.first_seen, last_seen=group.last_seen, jobs=group.jobs,
        gpu_hours=round(group.gpu_hours, 3), hosts=sorted(group.hosts), clusters=sorted(group.clusters),
        labels=dict(group.labels), daily=list(group.daily), state=GroupState(group.state), note=group.note,
        updated_by=group.updated_by, is_new=group.is_new, assignee=group.assignee, ticket=group.ticket,
        resolved_at=group.resolved_at, regressed=group.regressed, merged=sorted(group.merged))
