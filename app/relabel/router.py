from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import anyio
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse

from app.api.deps import Admin, Engineer, ServicesDep
from app.api.openapi import ERRORS
from app.core.pipeline import Pipeline
from app.core.rules import RuleError
from app.core.untrusted import PatternRefused, compile_untrusted
from app.errors import InvalidInput, ServiceUnavailable
from app.relabel import service
from app.relabel.archive import discover_under
from app.relabel.report import DiffReport, build_report, outcomes_csv
from app.relabel.whatif import diff_stored, library_with_rule
from app.rules_review import service as rules_review
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
    a directory or glob under LOGDX_RELABEL_ARCHIVE_ROOT) with the service's current rules, prompt and model. Runs as tasks of the
    background worker(s); poll the returned run, then read its `report`. New diagnoses never
    replace old ones; human labels are never changed."""
    queue = _queue(services)
    files = (await anyio.to_thread.run_sync(discover_under, body.archive, services.settings.relabel_archive_root)
             if body.archive else None)
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


rules_router = APIRouter(prefix="/v1/rules", tags=["rules"], responses=ERRORS)


def impact_report(services, rule_id: int, limit: int = 200) -> DiffReport:  # noqa: ANN001
    """The stored diagnoses a proposed rule would change (the review page shows the same report)."""
    with services.db.transaction() as session:
        row = rules_review.get_proposed(session=session, rule_id=rule_id)
        rule, kind, family = rules_review.rule_for(row), row.kind, row.family
        refs = service.sample_stored_logs(session=session, limit=limit, blob_path=services.store.blob_path)
    current = services.pipeline
    if kind != "diagnosis":
        raise InvalidInput("only diagnosis rules change what a log is diagnosed as", code="invalid_rule",
                           detail={"kind": kind})
    try:  # the trial library matches it in RE2 like the rest; one RE2 cannot run is not tried on stored logs
        compile_untrusted(rule.get("pattern", ""), ignore_case=bool(rule.get("ignore_case")))
    except PatternRefused as exc:
        raise rules_review.refused(exc, rule.get("pattern", "")) from None
    with library_with_rule(services.settings.effective_rules_dir, kind=kind, family=family, rule=rule) as trial:
        try:
            proposed = Pipeline(rules_dir=trial, overlay=services.settings.rules_overlay)
        except RuleError as exc:
            raise InvalidInput(f"the rule library would not load with this rule: {exc}", code="invalid_rule",
                               detail={"rule_id": rule.get("id")}) from None
    outcomes = diff_stored(refs, old=current, new=proposed)
    return build_report(outcomes, rules_version=proposed.ruleset.version)


@rules_router.get("/proposed/{rule_id}/impact", response_model=DiffReport, response_model_by_alias=True)
async def rule_impact(rule_id: ObjectId, services: ServicesDep, _: Engineer,
                      limit: Annotated[int, Query(ge=1, le=2000, description="newest jobs to try it on")] = 200,
                      ) -> DiffReport:
    """What approving this proposed rule would change: the newest `limit` stored logs diagnosed
    with the active rules and with the rule added (nothing is written), as a diff report."""
    return await anyio.to_thread.run_sync(impact_report, services, rule_id, limit)
