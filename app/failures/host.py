"""One host as the node view (`/ui/hosts/{host}`) tells it: the failed infrastructure jobs whose
diagnosis names it as a suspect (the jobs the statistics page's repeat-offender table counts), what
the restart controller did to it (drains, exclusions from a requeue, incidents and their repair) and
the node probes that tested it. Reads only; a handful of queries, filtered in SQL on the host name
as text and checked exactly in Python."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import String, cast, select
from sqlalchemy.orm import Session

from app.actions.models import ControllerAction
from app.controller.models import HostIncident, ProbeRun
from app.jobs.models import Job
from app.jobs.service import JobFilter
from app.stats.service import _suspect_hosts

FAILURE_CAP = 50
HISTORY_CAP = 100


@dataclass
class HostEvent:
    when: datetime
    kind: str  # drain | exclude | incident | repaired
    text: str
    job_id: int | None = None
    dry_run: bool = False
    status: str = "done"


@dataclass
class HostView:
    host: str
    failures: list[Any]  # Job rows, newest failure first, at most FAILURE_CAP
    failure_total: int
    by_type: list[tuple[str, str, int]]  # (category, error type, jobs), most first
    state: str  # drained | excluded | in service | unknown
    state_reason: str
    state_since: datetime | None
    history: list[HostEvent] = field(default_factory=list)
    probes: list[Any] = field(default_factory=list)  # ProbeRun rows naming the host, newest first


def _names(host: str, column) -> Any:  # noqa: ANN001
    """A cheap SQL pre-filter: the JSON text of `column` contains the quoted host name."""
    return cast(column, String).like(f'%"{host}"%')


def _state(events: list[HostEvent]) -> tuple[str, str, datetime | None]:
    real = [e for e in events if not e.dry_run and e.status == "done"]
    if not real:
        return "unknown", "The restart controller has not drained, excluded or repaired this host.", None
    last = max(real, key=lambda e: e.when)
    if last.kind == "drain":
        return "drained", last.text, last.when
    if last.kind == "exclude":
        return "excluded", last.text, last.when
    return "in service", last.text, last.when


def host_view(*, session: Session, host: str) -> HostView:
    suspects = _suspect_hosts(session, JobFilter())
    ids = [job_id for job_id, hosts in suspects.items() if host in hosts]
    jobs: list[Job] = []
    for start in range(0, len(ids), 500):
        jobs += session.scalars(select(Job).where(Job.id.in_(ids[start:start + 500])))
    jobs.sort(key=lambda j: (j.ended_at or j.created_at, j.id), reverse=True)
    counts = Counter((j.category or "?", j.error_type or "?") for j in jobs)
    by_type = sorted(((c, t, n) for (c, t), n in counts.items()), key=lambda r: (-r[2], r[0], r[1]))

    events: list[HostEvent] = []
    actions = session.scalars(select(ControllerAction).where(
        ControllerAction.kind.in_(("drain", "requeue")),
        _names(host, ControllerAction.params) | _names(host, ControllerAction.result))
        .order_by(ControllerAction.id.desc()).limit(HISTORY_CAP))
    for a in actions:
        params, result = a.params or {}, a.result or {}
        why = result.get("why") or result.get("error") or result.get("reason") or ""
        if a.kind == "drain" and params.get("host") == host:
            text = {"done": f"Drained: {params.get('reason') or 'no reason recorded'}",
                    "refused": f"Refused to drain: {why}", "skipped": f"Did not drain: {why}",
                    "failed": f"Draining failed: {why}"}.get(a.status, f"Drain {a.status}")
            events.append(HostEvent(a.created_at, "drain", text, a.job_id, bool(a.dry_run), a.status))
        elif a.kind == "requeue" and host in (result.get("exclude") or []):
            events.append(HostEvent(a.created_at, "exclude", f"Excluded from the requeue of job {a.job_id}",
                                    a.job_id, bool(a.dry_run), a.status))
    for inc in session.scalars(select(HostIncident).where(HostIncident.host == host)
                               .order_by(HostIncident.id.desc()).limit(HISTORY_CAP)):
        events.append(HostEvent(inc.created_at, "incident",
                                f"Incident: {inc.error_type} in job {inc.job_id} on {inc.cluster}", inc.job_id,
                                status="open" if inc.resolved_at is None else "resolved"))
        if inc.resolved_at is not None:
            events.append(HostEvent(inc.resolved_at, "repaired",
                                    f"Repaired: marked back in service by {inc.resolved_by or 'an admin'}",
                                    inc.job_id))
    events.sort(key=lambda e: e.when, reverse=True)
    state, reason, since = _state(events)

    probes = [p for p in session.scalars(select(ProbeRun).where(_names(host, ProbeRun.hosts))
                                         .order_by(ProbeRun.id.desc()).limit(HISTORY_CAP))
              if host in (p.hosts or [])]
    return HostView(host=host, failures=jobs[:FAILURE_CAP], failure_total=len(jobs), by_type=by_type,
                    state=state, state_reason=reason, state_since=since, history=events, probes=probes)
