"""Request dependencies. `Annotated` aliases make route signatures read as sentences:
`def list_jobs(db: DbDep, _: Engineer)`."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated, TypeVar

import anyio
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select

from app.api.metrics import Metrics
from app.auth.models import TokenRole
from app.auth.service import Principal, authenticate
from app.core.pipeline import Pipeline
from app.core.rules import RuleSet
from app.db.engine import Database
from app.diagnoses.executor import PipelineExecutor
from app.diagnoses.worker import DiagnosisQueue, DiagnosisWorker
from app.errors import Forbidden, NotFound, Unauthorized
from app.labels.case_store import LabelCaseRecorder
from app.logs.storage import BlobStore
from app.relabel.tasks import RelabelQueue
from app.schemas_common import MAX_ID
from app.settings import Settings

T = TypeVar("T")


@dataclass
class Services:
    settings: Settings
    db: Database
    store: BlobStore
    pipeline: Pipeline
    executor: PipelineExecutor
    worker: DiagnosisWorker
    queue: DiagnosisQueue
    metrics: Metrics
    cases: LabelCaseRecorder | None = None
    relabel: RelabelQueue | None = None  # batch re-labeling tasks (app.relabel.tasks)
    _job_locks: weakref.WeakValueDictionary = field(default_factory=weakref.WeakValueDictionary)

    @property
    def rules_lock_path(self) -> Path:
        return self.settings.data_dir / "rules.lock"

    def activate_rules(self, ruleset: RuleSet | None) -> None:
        """Diagnose with `ruleset` from now on (after an approved rule was written)."""
        if ruleset is None or ruleset.version == self.pipeline.ruleset.version:
            return
        self.pipeline = Pipeline(ruleset=ruleset)
        self.executor.replace_pipeline(self.pipeline)

    def job_lock(self, job_id: int) -> asyncio.Lock:
        """Serialises chunk appends per job within this process."""
        lock = self._job_locks.get(job_id)
        if lock is None:
            lock = asyncio.Lock()
            self._job_locks[job_id] = lock
        return lock

    async def run_db(self, fn: Callable[..., T], /, **kwargs) -> T:
        """Run a service function in its own transaction, off the event loop."""
        return await anyio.to_thread.run_sync(partial(self.db.run, fn, **kwargs))


def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]


def get_db(services: ServicesDep) -> Database:
    return services.db


DbDep = Annotated[Database, Depends(get_db)]

_bearer = HTTPBearer(auto_error=False, description="API token from `logdx token create`")


# path parameters that name a job, or a row of one: a scoped token reaches only its clusters'
_SCOPED_PARAMS = (("job_id", "job"), ("diagnosis_id", "diagnosis"))


def _check_scope(*, session, principal: Principal, path_params: dict) -> None:  # noqa: ANN001
    """404, the same answer as for an id that does not exist, when the route's job lies outside
    the token's clusters: a scoped token learns nothing of other clusters' jobs."""
    from app.diagnoses.models import DiagnosisRow
    from app.jobs.models import Job

    for name, what in _SCOPED_PARAMS:
        raw = path_params.get(name)
        if raw is None:
            continue
        try:
            ident = int(raw)
        except ValueError:
            return  # not an id: the route's validation answers 422
        if not 1 <= ident <= MAX_ID:
            return
        if what == "job":
            cluster = session.scalar(select(Job.cluster).where(Job.id == ident))
        else:
            cluster = session.scalar(select(Job.cluster).join(DiagnosisRow, DiagnosisRow.job_id == Job.id)
                                     .where(DiagnosisRow.id == ident))
        if cluster is not None and not principal.reaches(cluster):
            raise NotFound(f"{what} {ident} does not exist", detail={name: ident})


def require(role: TokenRole) -> Callable[..., Principal]:
    def dependency(request: Request, services: ServicesDep,
                   credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
        if credentials is None or not credentials.credentials:
            raise Unauthorized("this endpoint needs `Authorization: Bearer <token>`")
        principal = services.db.run(authenticate, token=credentials.credentials)
        if principal is None:
            raise Unauthorized("unknown or revoked token")
        if not principal.allows(role):
            raise Forbidden(f"needs role {role.value} or higher; this token is {principal.role.value}",
                            detail={"needed": role.value, "role": principal.role.value})
        if principal.clusters is not None:
            services.db.run(_check_scope, principal=principal, path_params=request.path_params)
        request.state.principal = principal
        return principal

    dependency.required_role = role  # read by the route-walking auth test
    dependency.__name__ = f"require_{role.value}"
    return dependency


Scheduler = Annotated[Principal, Depends(require(TokenRole.SCHEDULER))]
Engineer = Annotated[Principal, Depends(require(TokenRole.ENGINEER))]
Admin = Annotated[Principal, Depends(require(TokenRole.ADMIN))]
