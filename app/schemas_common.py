"""Constrained field types shared by the request schemas. Strings refuse control characters
(PostgreSQL cannot store NUL; they are never meaningful in names), numbers and dates are bounded
so that bad input is a 422, not a database overflow."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator, Field, StringConstraints

_NO_CONTROL = r"^[^\x00-\x1f\x7f]*$"

Name = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=_NO_CONTROL)]
LongName = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=_NO_CONTROL)]
ExternalId = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=_NO_CONTROL)]
Note = Annotated[str, StringConstraints(max_length=10_000, pattern=r"^[^\x00]*$")]

MIN_TIME = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(9000, 1, 1, tzinfo=UTC)


def _bounded_time(value: datetime) -> datetime:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    if not (MIN_TIME <= value <= MAX_TIME):
        raise ValueError("time must lie between 1970 and 9000")
    return value.astimezone(UTC)


Timestamp = Annotated[datetime, AfterValidator(_bounded_time)]

MAX_ID = 2_147_483_647
ObjectId = Annotated[int, Path(ge=1, le=MAX_ID, description="Numeric id")]
Limit = Annotated[int, Query(ge=1, le=500, description="Page size")]
Offset = Annotated[int, Query(ge=0, le=10_000_000, description="Items to skip")]
Count = Annotated[int, Field(ge=0, le=1_000_000)]
