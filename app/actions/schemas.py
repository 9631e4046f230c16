from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class ActionOut(BaseModel):
    id: int
    job_id: int
    diagnosis_id: int | None
    kind: str
    params: dict[str, Any]
    dry_run: bool
    status: str
    actor: str
    result: dict[str, Any]
    created_at: datetime


class ActionList(BaseModel):
    items: list[ActionOut]
