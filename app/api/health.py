from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy import text

from app.api.deps import ServicesDep
from app.db.migrate import current_revision, head_revision
from app.errors import ServiceUnavailable, storage_error

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: the process answers. Public."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(services: ServicesDep) -> dict[str, str]:
    """Readiness: database reachable and migrated to head, rules loaded. Public."""
    try:
        with services.db.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        revision = current_revision(services.db.engine)
    except Exception as exc:  # noqa: BLE001
        known = storage_error(exc)
        if isinstance(known, ServiceUnavailable):  # corrupt pages: not a connection problem
            raise known from None
        raise ServiceUnavailable("database unreachable", detail=type(exc).__name__) from None
    try:
        services.store.check_writable()
    except OSError as exc:
        raise ServiceUnavailable(f"the data dir cannot be written: {exc.strerror or exc}",
                                 detail={"data_dir": str(services.settings.data_dir), "errno": exc.errno}) from None
    head = head_revision()
    if revision != head:
        raise ServiceUnavailable("database is not migrated to head",
                                 detail={"current": revision, "head": head})
    return {"status": "ready", "revision": revision or "", "rules": services.pipeline.ruleset.version}


@router.get("/metrics", response_class=Response)
def metrics(services: ServicesDep) -> Response:
    """Prometheus exposition. Public (scrapers usually do not carry tokens); holds no job data."""
    return Response(services.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
