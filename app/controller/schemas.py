from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.schemas_common import _NO_CONTROL, MAX_ID, LongName, Name

# 192: the stored key is at most 200 with the "dry-run:" prefix of a dry run
Key = Annotated[str, StringConstraints(min_length=1, max_length=192, pattern=_NO_CONTROL)]
PathText = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=_NO_CONTROL)]


class RecoverRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"dry_run": True}]})

    diagnosis_id: int | None = Field(default=None, ge=1, le=MAX_ID, description="Default: the job's newest finished diagnosis.")
    dry_run: bool | None = Field(default=None, description="Default: dry-run unless the cluster is enabled; "
                                 "false is refused (409) on a cluster that is not enabled.")
    checkpoint_dir: PathText | None = Field(default=None,
                                       description="Where the job saves checkpoints (default: what the scheduler knows).")
    idempotency_key: Key | None = Field(default=None,
                                        description="Same key, same run (also the Idempotency-Key header); "
                                        "default: job + diagnosis.")


class RecoveryOut(BaseModel):
    id: int
    job_id: int
    diagnosis_id: int | None
    idempotency_key: str
    fingerprint: str
    error_type: str
    action: str
    policy_id: str
    last_step: int | None
    retry_number: int
    dry_run: bool
    status: str
    reason: str
    plan: dict[str, Any]
    outcome: dict[str, Any]
    created_at: datetime


class RecoveryList(BaseModel):
    items: list[RecoveryOut]


class ProbeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"cluster": "seren", "hosts": ["node-04", "node-05", "node-06", "node-07"], "suspects": ["node-05"]}]})

    cluster: Name
    hosts: list[LongName] = Field(min_length=2, max_length=1024)
    suspects: list[LongName] = Field(default_factory=list, max_length=1024)
    job_id: int | None = Field(default=None, ge=1, le=MAX_ID)


class ProbeOut(BaseModel):
    id: int
    cluster: str
    job_id: int | None
    hosts: list[str]
    verdict: str
    faulty: list[str]
    slow: list[str]
    duration_s: float
    result: dict[str, Any]
    created_at: datetime


class ProbeList(BaseModel):
    items: list[ProbeOut]


class ClusterControlIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    actions_enabled: bool
    node_count: int | None = Field(default=None, ge=1, le=1_000_000, description="Nodes in the cluster (the drain breaker's base); "
                                   "default: what the scheduler lists.")


class ClusterControlOut(BaseModel):
    cluster: str
    actions_enabled: bool
    node_count: int | None
    updated_by: str
    updated_at: datetime


class NodeResumeIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"cluster": "seren", "reason": "GPU 3 replaced (ticket 4711)"}]})

    cluster: Name = Field(description="Whose host incidents the repair resolves.")
    reason: Annotated[str, StringConstraints(max_length=200, pattern=_NO_CONTROL)] = ""


class NodeResumeOut(BaseModel):
    cluster: str
    host: str
    state_before: str
    state: str
    incidents_resolved: int
    resolved_by: str
