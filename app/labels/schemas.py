from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, model_validator

from app.core.types import Category, ErrorType
from app.labels.models import Verdict
from app.schemas_common import Note


class LabelCreate(BaseModel):
    """`confirm` the diagnosed root cause, or `correct` it (error_type required)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"verdict": "confirm"},
        {"verdict": "correct", "error_type": "NVLinkError", "category": "infrastructure",
         "note": "nvidia-smi nvlink -s showed links down on node-05"}]})
    verdict: Verdict
    error_type: ErrorType | None = None
    category: Category | None = None
    note: Note | None = None

    @model_validator(mode="after")
    def _correction_names_type(self) -> "LabelCreate":
        if self.verdict is Verdict.CORRECT and self.error_type is None:
            raise ValueError("a correction must give error_type")
        return self


class LabelOut(BaseModel):
    id: int
    diagnosis_id: int
    verdict: str
    error_type: str
    category: str
    note: str | None
    created_by: str
    created_at: datetime
