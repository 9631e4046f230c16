from __future__ import annotations

from enum import StrEnum

import anyio
from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from app.api.deps import Admin, Engineer, ServicesDep
from app.api.openapi import ERRORS
from app.errors import ServiceUnavailable
from app.relabel import service
from app.relabel.archive import discover
from app.relabel.report import DiffReport, outcomes_csv
from app.relabel.schemas import RelabelCreate, RunList, RunOut, StoredSelection
from app.schemas_common import ObjectId

router = APIRouter(prefix="/v1/relabel", tags=["relabel"], responses=ERRORS)


class ReportFormat(StrEnum):
    JSON = "json"
    CSV = "csv"


def _queue(services):  # noqa: ANN001, ANN202
    if services.relabel is None:
        raise ServiceUnavailable("batch re-labeling is not set up in this server", code="relabel_unavailable")
    return services.relabel


def _create(*, session, body: RelabelCreate, files, rules_version: str, who: str):  # noqa: ANN001, ANN202
    common = dict(dry_run=body.dry_run, rules_dir=None, rules_version=rules_version, batch_size=body.batch_size,
                  created_by=who)
    if files is not None:
        run = service.create_archive_run(session=session, files=files, archive=body.archive, cluster=body.cluster,
                                         **common)
    else:
        run = service.create_stored_run(session=session, selection=body.stored or StoredSelection(), **common)
    return run.id, service.run_out(session=session, run=run), service.open_ranges(session=session, run_id=run.id)


@router.post("", status_code=202, response_model=RunOut)
async def create_run(body: RelabelCreate, services: ServicesDep, who: Admin) -> JSONResponse:
    """Re-diagnose stored jobs (filters in `stored`) or import an archive on the server (`archive`:
    a directory or glob) with the service's current rules, prompt and model. Runs as tasks of the
    background worker(s); poll the returned run, then read its `report`. New diagnoses never
    replace old ones; human labels are never changed."""
    queue = _queue(services)
    files = await anyio.to_thread.run_sync(discover, body.archive) if body.archive else None
    run_id, out, ranges = await services.run_db(_create, body=body, files=files,
                                                rules_version=services.pipeline.ruleset.version, who=who.name)
    await queue.submit(run_id, ranges)
    return JSONResponse(out.model_dump(mode="json"), status_code=202, headers={"Location": f"/v1/relabel/{run_id}"})


@router.get("", response_model=RunList)
def list_runs(services: ServicesDep, _: Engineer) -> RunList:
    with services.db.transaction() as session:
        return RunList(items=[service.run_out(session=session, run=r) for r in service.list_runs(session=session)])


@router.get("/{run_id}", response_model=RunOut)
def get_run(run_id: ObjectId, services: ServicesDep, _: Engineer) -> RunOut:
    """The run and its progress (items done, failed, still open; bytes)."""
    with services.db.transaction() as session:
        return service.run_out(session=session, run=service.get_run(session=session, run_id=run_id))


@router.get("/{run_id}/report", response_model=DiffReport, response_model_by_alias=True,
            responses={200: {"content": {"text/csv": {}}, "description": "JSON report, or CSV with ?format=csv"}})
def get_report(run_id: ObjectId, services: ServicesDep, _: Engineer,
               format: ReportFormat = ReportFormat.JSON) -> DiffReport | PlainTextResponse:  # noqa: A002
    """The diff report so far (complete once the run is `done`): old → new error-type matrix,
    counts per rules version and rule, changed jobs with links, agreement with human labels
    before and after (regressions), failed logs. `?format=csv`: one row per log."""
    with services.db.transaction() as session:
        if format is ReportFormat.CSV:
            text = outcomes_csv(service.outcomes(session=session, run_id=run_id))
            return PlainTextResponse(text, media_type="text/csv")
        return service.report(session=session, run_id=run_id)


@router.post("/{run_id}/resume", response_model=RunOut)
async def resume_run(run_id: ObjectId, services: ServicesDep, _: Admin) -> RunOut:
    """Queue the run's unfinished items again (after every worker was stopped, say). Items
    already finished are never redone."""
    queue = _queue(services)
    ranges = await services.run_db(service.open_ranges, run_id=run_id)
    await queue.submit(run_id, ranges)
    return await services.run_db(lambda *, session: service.run_out(
        session=session, run=service.get_run(session=session, run_id=run_id)))
