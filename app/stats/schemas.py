from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class Bucket(BaseModel):
    key: str
    category: str | None = None
    failed_jobs: int
    gpu_hours: float
    job_share: float = Field(description="Share of failed jobs in the window (0..1)")
    gpu_hours_share: float = Field(description="Share of failed GPU-hours in the window (0..1)")
    error_types: dict[str, int] = Field(default_factory=dict, description="Failed jobs per type")


class StatsOut(BaseModel):
    since: datetime | None
    until: datetime | None
    cluster: str | None
    failed_jobs: int
    gpu_hours: float
    jobs_without_duration: int = Field(description="Failed jobs lacking start/end (0 GPU-hours counted)")
    diagnosed_not_failed: int = Field(
        default=0, description="Diagnosed jobs left out because their state is not a failure "
                               "(unknown, pending, running, completed, cancelled)")
    by_error_type: list[Bucket]
    by_category: list[Bucket]
    by_cluster: list[Bucket]
    by_host: list[Bucket] = Field(description="Per host the job ran on; GPU-hours split evenly over hosts")
    by_suspect_host: list[Bucket] = Field(
        default_factory=list, description="Repeat offenders: per host named as a suspect (action.suspect_hosts) by "
        "an infrastructure failure; GPU-hours split evenly over the suspects. User-code and framework failures, "
        "and hosts a job merely ran on, are not counted")
    by_period: list[Bucket] = Field(default_factory=list,
                                    description="Per day/week/month of the end time (when `interval` is given)")
