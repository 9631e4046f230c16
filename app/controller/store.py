"""Controller state in the store: the job lock, recovery history, host incidents, probe runs and
the per-cluster switch. Keyword-only functions; the caller owns the transaction."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from app.actions.models import ControllerAction
from app.controller.models import ClusterControl, HostIncident, JobLock, ProbeRun, RecoveryRun
from app.controller.probe_plan import ProbeReport
from app.controller.recovery import PriorAttempt, RecoveryAction
from app.db.base import utcnow
from app.db.engine import insert_returning_ignore
from app.jobs.models import Job


def take_lock(*, session: Session, job_id: int, holder: str, now: datetime, ttl_s: float) -> bool:
    """True if this holder now has the job's lock. A crashed holder's lock expires after ttl_s."""
    expires = now + timedelta(seconds=ttl_s)
    if session.execute(insert_returning_ignore(session, JobLock, job_id=job_id, holder=holder,
                                               expires_at=expires)).first():
        return True
    stolen = session.execute(update(JobLock).where(JobLock.job_id == job_id, JobLock.expires_at < now)
                             .values(holder=holder, expires_at=expires))
    return stolen.rowcount == 1


def release_lock(*, session: Session, job_id: int, holder: str) -> None:
    session.execute(delete(JobLock).where(JobLock.job_id == job_id, JobLock.holder == holder))


def run_by_key(*, session: Session, key: str) -> RecoveryRun | None:
    return session.scalars(select(RecoveryRun).where(RecoveryRun.idempotency_key == key)).first()


def history(*, session: Session, job_id: int, dry_run: bool) -> list[PriorAttempt]:
    """Earlier runs of the same mode: dry runs rehearse the budget without spending the real one."""
    rows = session.scalars(select(RecoveryRun).where(RecoveryRun.job_id == job_id, RecoveryRun.dry_run.is_(dry_run),
                                                     RecoveryRun.status != "failed"))
    return [PriorAttempt(fingerprint=r.fingerprint, action=RecoveryAction(r.action),
                         last_step=r.last_step, at=r.created_at) for r in rows]


def list_runs(*, session: Session, job_id: int) -> list[RecoveryRun]:
    return list(session.scalars(select(RecoveryRun).where(RecoveryRun.job_id == job_id)
                                .order_by(RecoveryRun.id)))


def host_failures(*, session: Session, cluster: str, hosts: list[str], since: datetime) -> dict[str, int]:
    if not hosts:
        return {}
    rows = session.execute(select(HostIncident.host, func.count()).where(
        HostIncident.cluster == cluster, HostIncident.host.in_(hosts), HostIncident.created_at >= since,
        HostIncident.resolved_at.is_(None))
        .group_by(HostIncident.host))
    return {host: n for host, n in rows}


def add_incidents(*, session: Session, cluster: str, hosts: list[str], job_id: int,
                  fingerprint: str, error_type: str) -> None:
    for host in hosts:
        session.add(HostIncident(cluster=cluster, host=host, job_id=job_id,
                                 fingerprint=fingerprint, error_type=error_type))


def resolve_incidents(*, session: Session, cluster: str, host: str, actor: str, now: datetime) -> int:
    """The host was repaired: its open incidents stop counting (the rows stay as history)."""
    done = session.execute(update(HostIncident).where(HostIncident.cluster == cluster, HostIncident.host == host,
                                                      HostIncident.resolved_at.is_(None))
                           .values(resolved_at=now, resolved_by=actor))
    return done.rowcount


def drained_hosts(*, session: Session, cluster: str, since: datetime) -> set[str]:
    """Hosts the controller really drained in this cluster since `since` (the breaker's count)."""
    rows = session.scalars(select(ControllerAction.params).join(Job, Job.id == ControllerAction.job_id)
                           .where(Job.cluster == cluster, ControllerAction.kind == "drain",
                                  ControllerAction.dry_run.is_(False), ControllerAction.status == "done",
                                  ControllerAction.created_at >= since))
    return {p.get("host") for p in rows if p.get("host")}


def cluster_control(*, session: Session, cluster: str) -> ClusterControl | None:
    return session.get(ClusterControl, cluster)


def set_cluster_control(*, session: Session, cluster: str, actions_enabled: bool, actor: str,
                        node_count: int | None = None) -> ClusterControl:
    # insert-or-ignore first: two admins enabling a new cluster at once both succeed
    session.execute(insert_returning_ignore(session, ClusterControl, cluster=cluster, actions_enabled=actions_enabled,
                                            updated_by=actor, node_count=node_count, updated_at=utcnow()))
    row = session.get(ClusterControl, cluster, populate_existing=True)
    row.actions_enabled = actions_enabled
    row.updated_by = actor
    if node_count is not None:
        row.node_count = node_count
    session.flush()
    return row


def save_probe(*, session: Session, cluster: str, job_id: int | None, hosts: list[str],
               report: ProbeReport) -> ProbeRun:
    row = ProbeRun(cluster=cluster, job_id=job_id, hosts=list(hosts), verdict=report.verdict.value,
                   faulty=report.faulty, slow=report.slow, duration_s=report.duration_s,
                   result=report.to_dict())
    session.add(row)
    session.flush()
    return row


def list_probes(*, session: Session, job_id: int | None = None, limit: int = 50) -> list[ProbeRun]:
    query = select(ProbeRun).order_by(ProbeRun.id.desc()).limit(limit)
    if job_id is not None:
        query = query.where(ProbeRun.job_id == job_id)
    return list(session.scalars(query))
