from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class LogOut(BaseModel):
    id: int
    job_id: int
    attempt: int
    kind: str = Field(description="upload (one PUT) or chunked (appended while the job runs)")
    status: str = Field(description="receiving | complete | corrupt (kept as received, does not decode)")
    size: int = Field(description="Raw bytes stored; for a chunked log, the offset of the next chunk")
    encoding: str | None
    sha256: str | None
    error: str | None
    warnings: list[str]
    created_at: datetime
    updated_at: datetime
