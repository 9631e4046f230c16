from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.jobs.models import JobState
from app.schemas_common import Count, ExternalId, LongName, Name, Timestamp


class JobCreate(BaseModel):
    """What a scheduler knows about a job. Re-posting the same cluster + external_id returns the
    existing job, updated with the fields given (e.g. state and ended_at from an epilog)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "cluster": "seren", "external_id": "4242", "scheduler": "slurm", "user": "alice",
        "hosts": ["node-04", "node-05"], "gpu_count": 16, "started_at": "2024-03-01T08:00:00Z",
        "ended_at": "2024-03-01T14:13:00Z", "state": "failed"}]})

    cluster: Name
    external_id: ExternalId
    scheduler: Name | None = None
    user: Name | None = None
    hosts: list[LongName] = Field(default_factory=list, max_length=4096)
    gpu_count: Count | None = None
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    state: JobState | None = None
    attempt: int | None = Field(default=None, ge=1, le=10_000,
                                description="Attempt number; a new number records a requeue.")
    exit_code: str | None = Field(default=None, pattern=r"^\d{1,3}:\d{1,3}$",
                                  description="How the attempt ended, as Slurm's ExitCode `exit:signal` "
                                  "(`0:0` ended cleanly). The controller never restarts an attempt that "
                                  "ended with 0:0 unless its state is a failure (timeout, node_fail).")

    @model_validator(mode="after")
    def _ordered_times(self) -> "JobCreate":
        if self.started_at and self.ended_at and self.ended_at < self.started_at:
            raise ValueError("ended_at is before started_at")
        return self


class JobOut(BaseModel):
    id: int
    cluster: str
    external_id: str
    scheduler: str | None
    user: str | None
    hosts: list[str]
    gpu_count: int
    started_at: datetime | None
    ended_at: datetime | None
    state: str
    attempts: list[int]
    error_type: str | None = Field(description="Effective root cause: newest diagnosis, or a correcting label")
    category: str | None
    diagnosis_id: int | None
    created_at: datetime
    updated_at: datetime


class JobPage(BaseModel):
    items: list[JobOut]
    total: int
    limit: int
    offset: int
