from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.labels.schemas import LabelOut


class DiagnoseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"attempt": 2}]})
    attempt: int | None = Field(default=None, ge=1, le=10_000,
                                description="Attempt whose log to diagnose (default: newest log).")


class DiagnosisAccepted(BaseModel):
    id: int
    status: str
    href: str = Field(description="Poll this URL until status is done or failed")


class LLMReview(BaseModel):
    """What the LLM agent did for this diagnosis (only when the rules were unsure)."""

    verdict: dict[str, Any] | None = Field(
        description="The agent's answer (choice, error_type, confidence, explanation, accepted, reason, "
        "prompt, model); null when the LLM could not answer")
    error: str | None = Field(default=None, description="Why the LLM gave no answer (the rules' result was kept)")
    calls: int
    tokens_in: int
    tokens_out: int
    latency_s: float


class DiagnosisOut(BaseModel):
    id: int
    job_id: int
    attempt: int
    log_id: int
    log_bytes: int = Field(description="Raw bytes of the log that were diagnosed")
    status: str = Field(description="pending | running | done | failed")
    error: str | None = Field(description="Why the diagnosis failed (unreadable input...)")
    diagnosis: dict[str, Any] | None = Field(
        description="The diagnosis contract (schema logdx.diagnosis/v1) once status is done")
    versions: dict[str, str | None]
    decided_by: str | None = Field(default=None, description="rules | retrieval | llm")
    llm: LLMReview | None = Field(default=None, description="Set when the LLM agent was consulted")
    labels: list[LabelOut]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class DiagnosisList(BaseModel):
    items: list[DiagnosisOut]
