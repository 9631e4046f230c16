"""Aggregates in Python over one filtered query: portable across SQLite and PostgreSQL and
fast enough for the job counts of one cluster-year (1e5 rows); push down to SQL when it is not."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.types import Category
from app.diagnoses.models import DiagnosisRow
from app.jobs.models import Job, JobHost, JobState
from app.jobs.service import JobFilter, filter_jobs, filtered_jobs_query
from app.stats.schemas import Bucket, StatsOut


# A job counts as failed only when the scheduler said so. A diagnosis alone does not make a
# failure: `unknown` (never reported), `running`, `completed` and user `cancelled` jobs are left
# out and counted in `diagnosed_not_failed`.
FAILED_STATES = (JobState.FAILED.value, JobState.NODE_FAIL.value, JobState.TIMEOUT.value,
                 JobState.OUT_OF_MEMORY.value)


def _gpu_hours(job) -> float | None:  # noqa: ANN001 - a Job or a row of its columns
    if job.started_at is None or job.ended_at is None:
        return None
    return max(0.0, (job.ended_at - job.started_at).total_seconds()) / 3600.0 * (job.gpu_count or 0)


class _Acc:
    def __init__(self) -> None:
        self.jobs = 0
        self.hours = 0.0
        self.category: str | None = None
        self.types: Counter = Counter()

    def add(self, hours: float, error_type: str, category: str | None, share: float = 1.0) -> None:
        self.jobs += 1
        self.hours += hours * share
        self.types[error_type] += 1
        self.category = category


def _buckets(acc: dict[str, _Acc], total_jobs: int, total_hours: float, *, with_types: bool,
             limit: int | None = None) -> list[Bucket]:
    items = sorted(acc.items(), key=lambda kv: (-kv[1].hours, -kv[1].jobs, kv[0]))[:limit]
    return [Bucket(key=key, category=a.category if not with_types else None, failed_jobs=a.jobs,
                   gpu_hours=round(a.hours, 3),
                   job_share=round(a.jobs / total_jobs, 4) if total_jobs else 0.0,
                   gpu_hours_share=round(a.hours / total_hours, 4) if total_hours else 0.0,
                   error_types=dict(a.types) if with_types else {})
            for key, a in items]


def period_key(when: datetime, interval: str) -> str:
    if interval == "day":
        return when.strftime("%Y-%m-%d")
    if interval == "week":
        year, week, _ = when.isocalendar()
        return f"{year}-W{week:02d}"
    return when.strftime("%Y-%m")


def _suspect_hosts(session: Session, flt: JobFilter) -> dict[int, list[str]]:
    """job id -> the hosts its current diagnosis names as suspects, for the failed infrastructure
    jobs of `flt` (one query; the names read in SQL from the result JSON)."""
    out: dict[int, list[str]] = {}
    query = filter_jobs(select(Job.id, DiagnosisRow.result["action"]["suspect_hosts"])
                        .join(DiagnosisRow, DiagnosisRow.id == Job.diagnosis_id)
                        .where(Job.category == Category.INFRASTRUCTURE.value, Job.state.in_(FAILED_STATES)), flt)
    for job_id, named in session.execute(query):
        hosts = [h for h in dict.fromkeys(named or []) if isinstance(h, str) and h]
        if hosts:
            out[job_id] = hosts
    return out


def failure_stats(*, session: Session, since: datetime | None, until: datetime | None,
                  cluster: str | None, host_limit: int = 100, interval: str | None = None,
                  per_host: bool = True) -> StatsOut:
    """`per_host=False` leaves `by_host` (every host of every failed job) empty: the page shows the
    repeat offenders (`by_suspect_host`) only, and at 10,000 jobs the host rows are most of the work."""
    flt = JobFilter(cluster=cluster, since=since, until=until)
    diagnosed = filtered_jobs_query(flt).where(Job.error_type.is_not(None))
    # plain columns (no ORM rows with their hosts and attempts): 10,000 jobs in tens of ms
    jobs = session.connection().execute(diagnosed.where(Job.state.in_(FAILED_STATES)).with_only_columns(
        Job.id, Job.error_type, Job.category, Job.cluster, Job.started_at, Job.ended_at, Job.created_at,
        Job.gpu_count, Job.diagnosis_id, maintain_column_froms=True)).all()
    not_failed = session.scalar(select(func.count()).select_from(
        diagnosed.where(Job.state.not_in(FAILED_STATES)).subquery()))
    hosts_of: dict[int, list[str]] = defaultdict(list)
    ids = [j.id for j in jobs] if per_host else []
    for start in range(0, len(ids), 500):
        for job_id, host in session.execute(select(JobHost.job_id, JobHost.host)
                                            .where(JobHost.job_id.in_(ids[start:start + 500]))):
            hosts_of[job_id].append(host)
    by_type: dict[str, _Acc] = defaultdict(_Acc)
    by_cat: dict[str, _Acc] = defaultdict(_Acc)
    by_cluster: dict[str, _Acc] = defaultdict(_Acc)
    by_host: dict[str, _Acc] = defaultdict(_Acc)
    by_period: dict[str, _Acc] = defaultdict(_Acc)
    by_suspect: dict[str, _Acc] = defaultdict(_Acc)
    suspects_of = _suspect_hosts(session, flt)
    total_hours, no_duration = 0.0, 0
    for job in jobs:
        hours = _gpu_hours(job)
        if hours is None:
            no_duration += 1
            hours = 0.0
        total_hours += hours
        by_type[job.error_type].add(hours, job.error_type, job.category)
        by_cat[job.category or "unknown"].add(hours, job.error_type, job.category)
        by_cluster[job.cluster].add(hours, job.error_type, None)
        if interval:
            by_period[period_key(job.ended_at or job.created_at, interval)].add(hours, job.error_type, None)
        hosts = hosts_of.get(job.id, [])
        for host in hosts:
            by_host[host].add(hours, job.error_type, None, share=1.0 / len(hosts))
        suspects = suspects_of.get(job.id, [])
        for host in suspects:
            by_suspect[host].add(hours, job.error_type, None, share=1.0 / len(suspects))
    n = len(jobs)
    return StatsOut(
        since=since, until=until, cluster=cluster, failed_jobs=n, gpu_hours=round(total_hours, 3),
        jobs_without_duration=no_duration, diagnosed_not_failed=not_failed or 0,
        by_error_type=_buckets(by_type, n, total_hours, with_types=False),
        by_category=[b.model_copy(update={"category": b.key}) for b in
                     _buckets(by_cat, n, total_hours, with_types=True)],
        by_cluster=_buckets(by_cluster, n, total_hours, with_types=True),
        by_host=_buckets(by_host, n, total_hours, with_types=True, limit=host_limit),
        by_suspect_host=sorted(_buckets(by_suspect, n, total_hours, with_types=True),
                               key=lambda b: (-b.failed_jobs, -b.gpu_hours, b.key))[:host_limit],
        by_period=sorted(_buckets(by_period, n, total_hours, with_types=True), key=lambda b: b.key))
