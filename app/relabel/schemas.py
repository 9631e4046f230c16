from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from app.core.types import ErrorType
from app.schemas_common import Name, Timestamp

Version = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]*$")]
ArchiveSpec = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f\x7f]*$")]


class StoredSelection(BaseModel):
    """Which stored jobs to re-diagnose (all filters optional; none = every job with a log)."""

    model_config = ConfigDict(extra="forbid")
    since: Timestamp | None = Field(default=None, description="jobs that ended (else: were registered) at or after")
    until: Timestamp | None = Field(default=None, description="... and before")
    cluster: Name | None = None
    error_type: ErrorType | None = Field(default=None, description="the job's current effective error type")
    diagnosed_by: Version | None = Field(default=None, description="rules version of the job's current diagnosis")
    only_stale: bool = Field(default=False, description="skip jobs already diagnosed by the current rules version")


class RelabelCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"stored": {"cluster": "alpha", "since": "2026-01-01T00:00:00Z", "only_stale": True}},
        {"archive": "/data/old-logs/**/*.log.gz", "cluster": "alpha-2024", "dry_run": True}]})
    stored: StoredSelection | None = Field(default=None, description="re-diagnose stored jobs")
    archive: ArchiveSpec | None = Field(
        default=None, description="or import a directory or glob of log files (plain, gz, zst) on the server")
    cluster: Name = Field(default="archive", description="cluster name given to imported jobs")
    dry_run: bool = Field(default=False, description="compute the diff report only; write no diagnosis or job")
    batch_size: int = Field(default=16, ge=1, le=1000, description="logs per task")

    @model_validator(mode="after")
    def _one_source(self) -> RelabelCreate:
        if self.stored is not None and self.archive is not None:
            raise ValueError("give either `stored` or `archive`, not both")
        return self


class RunProgress(BaseModel):
    total: int
    done: int
    failed: int
    open: int = Field(description="not finished yet (pending or claimed)")
    bytes_total: int
    bytes_done: int


class RunOut(BaseModel):
    id: int
    source: str = Field(description="stored | archive")
    status: str = Field(description="running | done")
    dry_run: bool
    selection: dict[str, Any]
    rules_version: str | None
    batch_size: int
    created_by: str
    created_at: datetime
    finished_at: datetime | None
    progress: RunProgress
    report: str = Field(description="path of the diff report (JSON; ?format=csv for one row per log)")


class RunList(BaseModel):
    items: list[RunOut]
