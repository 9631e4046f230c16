"""Pages for engineers: failures, failure groups, a job, statistics. Thin: each route reads its
query, calls services (`app.failures`, `app.stats`, `app.labels`, ...) and renders a template."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, BackgroundTasks, Form, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from app.api.deps import ServicesDep
from app.core.secrets import redact
from app.core.types import Category, ErrorType
from app.diagnoses import service as diagnoses
from app.diagnoses.service import label_out
from app.errors import InvalidInput, NotFound
from app.failures import service as failures
from app.failures.host import host_view
from app.failures.job import job_page
from app.failures.models import GroupState
from app.labels import service as labels
from app.labels.models import Verdict
from app.labels.schemas import LabelCreate
from app.logs import reader
from app.logs import service as logs
from app.logs.models import JobLog
from app.schemas_common import ObjectId
from app.stats import service as stats
from app.web import logview
from app.web.recovery import probe_view, run_view
from app.web.auth import PREFIX, WebEngineer
from app.web.charts import metric_charts
from app.web.render import opt, page, parse_date, since_of

router = APIRouter(prefix=PREFIX, include_in_schema=False)
PAGE_SIZE = 50
Q = Annotated[str | None, Query()]


def _failure_filter(cluster: str | None, range_: str | None, error_type: str | None, category: str | None,
                    host: str | None, unlabelled: str | None, q: str | None, group: str | None,
                    since: str | None = None, until: str | None = None):  # noqa: ANN202
    range_key, start = since_of(range_, "all")
    start = parse_date(since) or start
    end = parse_date(until, end=True)
    flt = failures.FailureFilter(cluster=opt(cluster), since=start, until=end, error_type=opt(error_type),
                                 category=opt(category), host=opt(host), fingerprint=opt(group),
                                 unlabelled=bool(opt(unlabelled)), search=opt(q))
    params = {k: v for k, v in {"cluster": flt.cluster, "range": range_key if range_key != "all" else None,
                                "since": opt(since) if parse_date(since) else None,
                                "until": opt(until) if end else None,
                                "error_type": flt.error_type, "category": flt.category, "host": flt.host,
                                "group": flt.fingerprint, "unlabelled": "1" if flt.unlabelled else None,
                                "q": flt.search}.items() if v}
    return flt, params


@router.get("/", response_class=HTMLResponse)
def failures_page(request: Request, services: ServicesDep, _: WebEngineer, cluster: Q = None,
                  range: Q = None, error_type: Q = None, category: Q = None, host: Q = None,  # noqa: A002
                  unlabelled: Q = None, q: Q = None, group: Q = None, since: Q = None, until: Q = None,
                  offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0) -> HTMLResponse:
    flt, params = _failure_filter(cluster, range, error_type, category, host, unlabelled, q, group, since, until)
    with services.db.transaction() as session:
        items, total = failures.list_failures(session=session, flt=flt, limit=PAGE_SIZE, offset=offset)
        choices = failures.filter_choices(session=session)
        latest = failures.latest_diagnosis_id(session=session)
    return page(request, "failures.html", items=items, total=total, offset=offset, page_size=PAGE_SIZE,
                params=params, query=urlencode(params), choices=choices, latest=latest,
                range_key=params.get("range", "all"))


CSV_MAX_ROWS = 100_000


def _csv(name: str, header: list[str], rows) -> Response:  # noqa: ANN001
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


def _iso(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value else ""


@router.get("/failures.csv")
def failures_csv(services: ServicesDep, _: WebEngineer, cluster: Q = None, range: Q = None,  # noqa: A002
                 error_type: Q = None, category: Q = None, host: Q = None, unlabelled: Q = None, q: Q = None,
                 group: Q = None, since: Q = None, until: Q = None) -> Response:
    """The failures list with the page's filters, every row (up to CSV_MAX_ROWS), newest first."""
    flt, _params = _failure_filter(cluster, range, error_type, category, host, unlabelled, q, group, since, until)
    with services.db.transaction() as session:
        items, _total = failures.list_failures(session=session, flt=flt, limit=CSV_MAX_ROWS, offset=0)
    header = ["job", "job_id", "cluster", "user", "hosts", "gpus", "failed_at_utc", "failed_at_source", "status",
              "error_type", "diagnosed_error_type", "category", "action", "confidence", "decided_by", "label",
              "group", "group_state", "first_evidence"]
    rows = [[f"{f.job.cluster}/{f.job.external_id}", f.job.id, f.job.cluster, f.job.user or "",
             " ".join(f.job.host_names), f.job.gpu_count or 0, _iso(f.when), f.when_source,
             f.diagnosis.status if f.diagnosis else (f.pending.status if f.pending else "pending"),
             f.job.error_type or "", f.diagnosis.error_type if f.diagnosis else "", f.job.category or "",
             f.action or "", f"{f.diagnosis.confidence:.2f}" if f.diagnosis and f.diagnosis.confidence is not None else "",
             f.diagnosis.decided_by or "" if f.diagnosis else "", f.label.verdict if f.label else "",
             f.diagnosis.fingerprint or "" if f.diagnosis else "", f.group_state.state if f.group_state else "",
             redact(f.first_evidence or "")] for f in items]
    return _csv("failures.csv", header, rows)


@router.get("/groups.csv")
def groups_csv(services: ServicesDep, _: WebEngineer, cluster: Q = None, range: Q = None,  # noqa: A002
               state: Q = None) -> Response:
    _key, since = since_of(range, "all")
    state = opt(state) if opt(state) in GROUP_STATES else None
    with services.db.transaction() as session:
        groups = failures.list_groups(session=session, cluster=opt(cluster), since=since, state=state)
    header = ["fingerprint", "error_type", "category", "rule_id", "state", "jobs", "gpu_hours", "first_seen_utc",
              "last_seen_utc", "hosts", "clusters", "note", "ticket", "assignee", "merged", "sample"]
    rows = [[g.fingerprint, g.error_type, g.category or "", g.rule_id or "", g.shown_state, g.jobs,
             f"{g.gpu_hours:.3f}", _iso(g.first_seen), _iso(g.last_seen), " ".join(sorted(g.hosts)),
             " ".join(sorted(g.clusters)), g.note or "", g.ticket or "", g.assignee or "", " ".join(sorted(g.merged)),
             g.sample] for g in groups]
    return _csv("failure-groups.csv", header, rows)


@router.get("/failures/rows", response_class=HTMLResponse)
def failure_rows(request: Request, services: ServicesDep, _: WebEngineer,
                 after: Annotated[int, Query(ge=0, le=2_147_483_647)], cluster: Q = None, range: Q = None,  # noqa: A002
                 error_type: Q = None, category: Q = None, host: Q = None, unlabelled: Q = None,
                 q: Q = None, group: Q = None) -> HTMLResponse:
    """Rows diagnosed after `after` (the page polls this to show new failures without a reload)."""
    flt, _params = _failure_filter(cluster, range, error_type, category, host, unlabelled, q, group)
    with services.db.transaction() as session:
        items, _total = failures.list_failures(session=session, flt=flt, limit=PAGE_SIZE, offset=0, after_id=after)
        latest = failures.latest_diagnosis_id(session=session)
    response = page(request, "_failure_rows.html", items=items, fresh=True)
    response.headers["X-Latest-Diagnosis"] = str(latest)
    return response


GROUP_STATES = [*(s.value for s in GroupState), "regressed"]


@router.get("/groups", response_class=HTMLResponse)
def groups_page(request: Request, services: ServicesDep, _: WebEngineer, cluster: Q = None,
                range: Q = None, state: Q = None,  # noqa: A002
                offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0) -> HTMLResponse:
    range_key, since = since_of(range, "all")
    state = opt(state) if opt(state) in GROUP_STATES else None
    with services.db.transaction() as session:
        groups = failures.list_groups(session=session, cluster=opt(cluster), since=since, state=state,
                                      with_hosts=False)
        failures.add_hosts(session=session, groups=groups[offset:offset + PAGE_SIZE], cluster=opt(cluster),
                           since=since)
        choices = failures.filter_choices(session=session)
    params = {k: v for k, v in {"cluster": opt(cluster), "range": range_key if range_key != "all" else None,
                                "state": state}.items() if v}
    return page(request, "groups.html", groups=groups[offset:offset + PAGE_SIZE], total=len(groups), offset=offset,
                page_size=PAGE_SIZE, query=urlencode(params), choices=choices, cluster=opt(cluster),
                range_key=range_key, state=state, states=[s.value for s in GroupState], filter_states=GROUP_STATES,
                merged=request.query_params.get("merged"))


def _back(query: str | None, **extra: str) -> str:
    """The groups page's filters the form came from (only its own keys), plus `extra`."""
    keep = {k: v for k, v in parse_qsl(query or "") if k in ("cluster", "range", "state", "offset")}
    return urlencode({**keep, **extra})


@router.post("/groups/{fingerprint}/state")
def set_group_state(fingerprint: str, services: ServicesDep, user: WebEngineer,
                    state: Annotated[GroupState, Form()],
                    note: Annotated[str | None, Form(max_length=2000)] = None,
                    assignee: Annotated[str | None, Form(max_length=128)] = None,
                    ticket: Annotated[str | None, Form(max_length=2000)] = None,
                    back: Annotated[str | None, Form(max_length=1000)] = None) -> RedirectResponse:
    with services.db.transaction() as session:
        failures.set_group_state(session=session, fingerprint=fingerprint, state=state, note=opt(note),
                                 updated_by=user.principal.name, assignee=opt(assignee), ticket=opt(ticket))
    return RedirectResponse(f"{PREFIX}/groups?{_back(back)}#g-{fingerprint}", status_code=303)


@router.post("/groups/{fingerprint}/merge")
def merge_group(fingerprint: str, services: ServicesDep, user: WebEngineer,
                into: Annotated[str, Form(max_length=64)],
                back: Annotated[str | None, Form(max_length=1000)] = None) -> RedirectResponse:
    with services.db.transaction() as session:
        home = failures.merge_group(session=session, fingerprint=fingerprint, into=into.strip().lower(),
                                    updated_by=user.principal.name)
    return RedirectResponse(f"{PREFIX}/groups?{_back(back, merged=fingerprint)}#g-{home}", status_code=303)


@router.post("/groups/{fingerprint}/unmerge")
def unmerge_group(fingerprint: str, services: ServicesDep, user: WebEngineer,
                  back: Annotated[str | None, Form(max_length=1000)] = None) -> RedirectResponse:
    with services.db.transaction() as session:
        failures.unmerge_group(session=session, fingerprint=fingerprint, updated_by=user.principal.name)
    return RedirectResponse(f"{PREFIX}/groups?{_back(back)}#g-{fingerprint}", status_code=303)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_detail(request: Request, job_id: ObjectId, services: ServicesDep, _: WebEngineer,
               diagnosis: Annotated[int | None, Query(ge=1, le=2_147_483_647)] = None,
               zoom: Q = None) -> HTMLResponse:
    with services.db.transaction() as session:
        data = job_page(session=session, job_id=job_id, diagnosis_id=diagnosis)
        shown = next((r for r in data.diagnoses if data.current and r.id == data.current.id), None)
        fp = shown.fingerprint if shown is not None and shown.status == "done" else None
        group = similar = None
        group_jobs = 0
        if fp:
            found = failures.list_groups(session=session, fingerprint=fp)
            group = found[0] if found else None
            similar, group_jobs = failures.similar_failures(session=session, fingerprint=fp, job_id=job_id)
    result = (data.current.diagnosis if data.current else None) or {}
    view = logview.build(redact(data.compressed.text), result) if data.compressed else None
    evidence = (result.get("root_cause") or {}).get("evidence") or []
    progress = result.get("last_progress") or {}
    window = _zoom(zoom)
    charts = metric_charts(data.compressed.metrics if data.compressed else None,
                           last_progress_line=progress.get("line"),
                           failure_line=evidence[0]["line"] if evidence else None,
                           evidence_lines={e["line"] for e in evidence},
                           root_cause=result.get("root_cause") or {}, zoom=window)
    incident = incident_summary(data.job, result, group, str(request.base_url).rstrip("/"))
    return page(request, "job.html", data=data, job=data.job, current=data.current, result=result, view=view,
                incident=incident,
                charts=charts, zoom=window, saved=request.query_params.get("saved"),
                probes=[probe_view(p) for p in data.probes],
                recoveries=[run_view(r, data.actions) for r in reversed(data.recoveries)],
                group=group, similar=similar or [], group_jobs=group_jobs)


def _zoom(value: str | None) -> tuple[float, float] | None:
    """`a:b` (an x window of the charts, in steps or lines) or None (a malformed one is ignored)."""
    try:
        a, b = (float(v) for v in (value or "").split(":"))
    except ValueError:
        return None
    return (min(a, b), max(a, b)) if a != b else None


def incident_summary(job, result: dict, group, base_url: str) -> str:  # noqa: ANN001
    """A few lines to paste into the incident channel: what failed, when, why, what to do, where."""
    rc = result.get("root_cause") or {}
    action = result.get("action") or {}
    when = job.ended_at or job.created_at
    head = f"{job.cluster}/{job.external_id} failed {when.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    lines = [head + (f": {rc['error_type']} ({rc.get('category')}), confidence {rc.get('confidence', 0):.2f}"
                     if rc.get("error_type") else ": not diagnosed yet")]
    if action.get("kind"):
        suspects = ", ".join(action.get("suspect_hosts") or [])
        lines.append(f"Action: {action['kind'].replace('_', ' ')}" + (f"; suspect hosts {suspects}" if suspects else "")
                     + (f". {action['reason']}" if action.get("reason") else ""))
    evidence = rc.get("evidence") or []
    if evidence:
        lines.append(f"Evidence, line {evidence[0]['line']}: {evidence[0]['text'][:300]}")
    if group is not None:
        lines.append(f"Failure group {group.fingerprint}: {group.shown_state}, {group.jobs} jobs"
                     + (f", {group.note}" if group.note else "") + (f", {group.ticket}" if group.ticket else "")
                     + (f", assigned to {group.assignee}" if group.assignee else ""))
    lines.append(f"Job: {base_url}/ui/jobs/{job.id}")
    return redact("\n".join(lines))


@router.post("/jobs/{job_id}/label")
def label_job(job_id: ObjectId, services: ServicesDep, user: WebEngineer, background: BackgroundTasks,
              diagnosis_id: Annotated[int, Form(ge=1, le=2_147_483_647)],
              verdict: Annotated[Verdict, Form()],
              error_type: Annotated[str | None, Form()] = None,
              category: Annotated[str | None, Form()] = None,
              note: Annotated[str | None, Form(max_length=10_000)] = None) -> RedirectResponse:
    """Writes a label through the same service as `POST /v1/diagnoses/{id}/labels`."""
    try:
        data = LabelCreate(verdict=verdict, error_type=ErrorType(opt(error_type)) if opt(error_type) else None,
                           category=Category(opt(category)) if opt(category) else None, note=opt(note))
    except ValidationError as exc:
        reasons = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise InvalidInput(f"the label is not valid: {reasons}") from exc
    except ValueError as exc:  # an error type or category that is not in the canonical list
        raise InvalidInput(f"the label is not valid: {exc}") from exc
    with services.db.transaction() as session:
        if diagnoses.get_diagnosis(session=session, diagnosis_id=diagnosis_id).job_id != job_id:
            raise InvalidInput(f"diagnosis {diagnosis_id} is not a diagnosis of job {job_id}")
        label = labels.create_label(session=session, diagnosis_id=diagnosis_id, data=data,
                                    created_by=user.principal.name)
        out = label_out(label)
    if services.cases is not None:
        background.add_task(services.cases.record, out.diagnosis_id)
    return RedirectResponse(f"{PREFIX}/jobs/{job_id}?diagnosis={diagnosis_id}&saved=1#label", status_code=303)


_EXTENSION = {"gzip": ".log.gz", "zstd": ".log.zst"}


def _raw_log(services, job_id: int) -> tuple[Path, int, str | None]:  # noqa: ANN001
    """The stored bytes of the job's current log: path, log id, encoding."""
    sha, log_id, _status = services.db.run(logs.raw_location, job_id=job_id, attempt=None)
    path = services.store.blob_path(sha) if sha else services.store.part_path(log_id)
    if not path.exists():
        raise NotFound(f"the bytes of log {log_id} are not on disk", detail={"log_id": log_id})
    encoding = services.db.run(lambda session: session.get(JobLog, log_id).encoding)
    return path, log_id, encoding


@router.get("/jobs/{job_id}/log/raw")
def download_raw(job_id: ObjectId, services: ServicesDep, _: WebEngineer) -> FileResponse:
    path, log_id, encoding = _raw_log(services, job_id)
    return FileResponse(path, media_type="application/octet-stream",
                        filename=f"job-{job_id}-log-{log_id}{_EXTENSION.get(encoding or '', '.log')}")


@router.get("/jobs/{job_id}/log", response_class=HTMLResponse)
def raw_log_page(request: Request, job_id: ObjectId, services: ServicesDep, _: WebEngineer, q: Q = None,
                 rank: Q = None, host: Q = None,
                 around: Annotated[int | None, Query(ge=1, le=2_147_483_647)] = None,
                 context: Annotated[int, Query(ge=1, le=1000)] = 40) -> HTMLResponse:
    """The stored raw log: a search (literal, with a rank/host filter) and the lines around one
    line, both streamed from the blob (`app.logs.reader`)."""
    job = services.db.run(lambda session: failures.job_title(session=session, job_id=job_id))
    path, log_id, encoding = _raw_log(services, job_id)
    q, host = opt(q), opt(host)
    if opt(rank) is not None and not (opt(rank).isdigit() and len(opt(rank)) <= 8):
        raise InvalidInput(f"rank must be a whole number (0 or more), not {opt(rank)[:20]!r}")
    rank = int(opt(rank)) if opt(rank) is not None else None
    found = reader.search(path, q, rank=rank, host=host) if (q or rank is not None or host) else None
    params = {k: v for k, v in {"q": q, "rank": rank, "host": host}.items() if v is not None}
    shown = more = None
    previous = following = None
    if around is not None:
        shown, more = reader.lines(path, around - context, around + context)
        if found is not None:
            numbers = [m.number for m in found.matches]
            previous = max((n for n in numbers if n < around), default=None)
            following = min((n for n in numbers if n > around), default=None)
    return page(request, "log.html", job=job, job_id=job_id, log_id=log_id, encoding=encoding, q=q, rank=rank,
                host=host, found=found, matched={m.number for m in found.matches} if found else set(),
                shown=shown, more=more, around=around, context=context, previous=previous, following=following,
                query=urlencode(params), needle=(q or "").lower())


@router.get("/hosts/{host}", response_class=HTMLResponse)
def host_page(request: Request, host: str, services: ServicesDep, _: WebEngineer) -> HTMLResponse:
    """The node view: one host's infrastructure failures, drain state and history, and probes."""
    if not host.strip() or len(host) > 255:
        raise InvalidInput("a host name is 1 to 255 characters")
    with services.db.transaction() as session:
        view = host_view(session=session, host=host)
        probes = [(probe_view(p), p) for p in view.probes]
    verdicts = [(v, next((h for h in v.hosts if h.host == host), None)) for v, _row in probes]
    return page(request, "host.html", view=view, host=host, probes=verdicts, host_query=urlencode({"host": host}))


def _stats_window(range_: str | None, since: str | None, until: str | None, interval: str | None):
    """The statistics page's and its CSV's window: (range key, start, end, interval); an explicit
    `since` overrides the range (30 days by default), an unknown interval is a day."""
    range_key, start = since_of(range_, "30d")
    return (range_key, parse_date(since) or start, parse_date(until, end=True),
            interval if interval in ("day", "week", "month") else "day")


@router.get("/stats", response_class=HTMLResponse)
def stats_page(request: Request, services: ServicesDep, _: WebEngineer, cluster: Q = None, range: Q = None,  # noqa: A002
               since: Q = None, until: Q = None, interval: Q = None) -> HTMLResponse:
    range_key, start, end, interval = _stats_window(range, since, until, interval)
    with services.db.transaction() as session:
        data = stats.failure_stats(session=session, since=start, until=end, cluster=opt(cluster),
                                   host_limit=20, interval=interval, per_host=False)
        agreement = labels.label_agreement(session=session, since=start, until=end, cluster=opt(cluster))
        choices = failures.filter_choices(session=session)
    window = {k: v for k, v in {"cluster": opt(cluster), "range": range_key if range_key != "all" else None,
                                "since": opt(since) if parse_date(since) else None,
                                "until": opt(until) if end else None}.items() if v}
    return page(request, "stats.html", stats=data, agreement=agreement, choices=choices, cluster=opt(cluster),
                list_query=urlencode(window), csv_query=urlencode({**window, "interval": interval}),
                range_key=range_key, since=opt(since), until=opt(until), interval=interval,
                repeat_hosts=[b for b in data.by_suspect_host if b.failed_jobs >= 2],
                trend=_with_empty_days([(b.key, b.gpu_hours) for b in data.by_period], interval),
                trend_jobs=[(b.key, b.gpu_hours, b.failed_jobs) for b in data.by_period])


@router.get("/stats.csv")
def stats_csv(services: ServicesDep, _: WebEngineer, cluster: Q = None, range: Q = None,  # noqa: A002
              since: Q = None, until: Q = None, interval: Q = None) -> Response:
    """Every table of the statistics page, one CSV: a `table` column names the table."""
    _key, start, end, interval = _stats_window(range, since, until, interval)
    with services.db.transaction() as session:
        data = stats.failure_stats(session=session, since=start, until=end, cluster=opt(cluster),
                                   host_limit=1000, interval=interval, per_host=False)
    header = ["table", "key", "category", "failed_jobs", "gpu_hours", "job_share", "gpu_hours_share", "error_types"]
    rows = [["total", "all", "", data.failed_jobs, f"{data.gpu_hours:.3f}", "1", "1", ""]]
    for table, buckets in [("error_type", data.by_error_type), ("category", data.by_category),
                           ("cluster", data.by_cluster), ("repeat_offender_host", data.by_suspect_host),
                           (f"per_{interval}", data.by_period)]:
        rows += [[table, b.key, b.category or "", b.failed_jobs, f"{b.gpu_hours:.3f}", b.job_share, b.gpu_hours_share,
                  " ".join(f"{t}={n}" for t, n in sorted(b.error_types.items()))] for b in buckets]
    return _csv("statistics.csv", header, rows)


def _with_empty_days(points: list[tuple[str, float]], interval: str) -> list[tuple[str, float]]:
    """Days without failures drawn as empty columns (a gap is information too)."""
    if interval != "day" or len(points) < 2:
        return points
    have = dict(points)
    day, last = (datetime.strptime(points[0][0], "%Y-%m-%d"), datetime.strptime(points[-1][0], "%Y-%m-%d"))
    out = []
    while day <= last and len(out) < 1000:
        key = day.strftime("%Y-%m-%d")
        out.append((key, have.get(key, 0.0)))
        day += timedelta(days=1)
    return out
