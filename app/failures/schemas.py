from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.failures.models import GroupState
from app.schemas_common import Note

Fingerprint = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]


class GroupStateUpdate(BaseModel):
    """What engineers decided about a failure group."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"state": "fixing", "note": "NVLink on node-05 replaced on Friday", "assignee": "alice",
         "ticket": "https://tickets.example/INFRA-231"}]})
    state: GroupState
    note: Note | None = None
    assignee: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)] | None = None
    ticket: Annotated[str, StringConstraints(pattern=r"^https?://[^\s<>\"]{1,1990}$")] | None = Field(
        default=None, description="A link to the tracker's ticket (http or https)")


class GroupMerge(BaseModel):
    """Show this group's jobs inside another group from now on."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"into": "3f9a0c1d2e4b5a69"}]})
    into: Fingerprint


class FailureGroupOut(BaseModel):
    fingerprint: str = Field(description="app.core.fingerprint: type + rule + masked first evidence line")
    error_type: str
    category: str | None
    rule_id: str | None
    sample: str = Field(description="The masked first evidence line the jobs share")
    first_seen: datetime
    last_seen: datetime
    jobs: int
    gpu_hours: float
    hosts: list[str]
    clusters: list[str]
    labels: dict[str, int] = Field(description="Labelled error type -> jobs with that label")
    daily: list[int] = Field(description="Jobs per day over the last 14 days, oldest first")
    state: GroupState
    note: str | None
    updated_by: str | None
    is_new: bool = Field(description="Nobody has decided about it and its first job ended in the last 24 h")
    assignee: str | None = None
    ticket: str | None = None
    resolved_at: datetime | None = None
    regressed: bool = Field(default=False, description="Resolved, and a job failed this way after that")
    merged: list[str] = Field(default_factory=list, description="Fingerprints merged into this group")


class FailureGroupList(BaseModel):
    items: list[FailureGroupOut]
