from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.core.types import Category, ErrorType
from app.schemas_common import Note

Pattern = Annotated[str, StringConstraints(min_length=1, max_length=2000, pattern=r"^[^\x00]*$")]
EvidenceLine = Annotated[str, StringConstraints(min_length=1, max_length=4000, pattern=r"^[^\x00]*$")]


class ProposedRuleCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pattern: Pattern
    error_type: ErrorType
    category: Category | None = None
    evidence: list[EvidenceLine] = Field(min_length=1, max_length=50,
                                         description="Log lines the rule must match")
    hint: Note | None = None
    source_diagnosis_id: int | None = Field(default=None, ge=1, le=2_147_483_647)
    family: str = Field(default="proposed", pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$",
                        description="Approval appends the rule to rules/<family>.yaml")


class Review(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: Note | None = None


class ProposedRuleOut(BaseModel):
    id: int
    kind: str = Field(description="diagnosis | filter")
    family: str = Field(description="Approval appends the rule to rules/<family>.yaml")
    pattern: str
    error_type: str | None = Field(description="null for filter rules")
    category: str | None
    evidence: list[str]
    hint: str | None
    source_diagnosis_id: int | None
    status: str
    validation: dict[str, Any]
    proposed_by: str
    reviewed_by: str | None
    reviewed_at: datetime | None
    review_note: str | None
    created_at: datetime
    rule: dict[str, Any] = Field(description="The full rule, valid under the rules/ schema")
    yaml: str = Field(description="The rule as it would be written to rules/<family>.yaml")


class ProposedRuleList(BaseModel):
    items: list[ProposedRuleOut]


class RuleOut(BaseModel):
    id: str
    kind: str
    source: str
    pattern: str
    error_type: str | None = None
    category: str | None = None
    role: str | None = None
    filter: str | None = None
    hint: str | None = None


class RuleSetOut(BaseModel):
    version: str
    files: list[str]
    rules: list[RuleOut]
