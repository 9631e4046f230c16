"""Fetch a row by primary key or raise the API's 404."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy.orm import Session

from app.errors import NotFound

T = TypeVar("T")


def get_or_404(session: Session, model: type[T], key: Any, *, what: str, detail_key: str | None = None) -> T:
    """`session.get(model, key)`, or NotFound("<what> <key> does not exist")."""
    row = session.get(model, key)
    if row is None:
        raise NotFound(f"{what} {key} does not exist", detail={detail_key: key} if detail_key else None)
    return row
