"""The one error hierarchy of the service. Services raise these; the API turns every one of
them (and every framework error) into `{"error": {"code", "message", "detail"}}`."""

from __future__ import annotations

from typing import Any


class AppError(Exception):
    status_code = 500
    code = "internal_error"

    def __init__(self, message: str, *, detail: Any = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        if code:
            self.code = code


class BadRequest(AppError):
    status_code = 400
    code = "bad_request"


class Unauthorized(AppError):
    status_code = 401
    code = "unauthorized"


class Forbidden(AppError):
    status_code = 403
    code = "forbidden"


class NotFound(AppError):
    status_code = 404
    code = "not_found"


class Conflict(AppError):
    status_code = 409
    code = "conflict"


class PayloadTooLarge(AppError):
    status_code = 413
    code = "payload_too_large"


class UnsupportedMediaType(AppError):
    status_code = 415
    code = "unsupported_media_type"


class InvalidInput(AppError):
    status_code = 422
    code = "invalid_input"


class InsufficientStorage(AppError):
    status_code = 507
    code = "insufficient_storage"


def storage_error(exc: BaseException) -> AppError | None:
    """A full disk (ENOSPC, EDQUOT, SQLite's "database or disk is full") or a corrupt database
    anywhere in `exc`'s chain, as the error a client can act on; None for anything else."""
    import errno

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in (errno.ENOSPC, errno.EDQUOT):
            return InsufficientStorage(
                f"the server's storage is full ({cur.strerror}): nothing was stored; retry once "
                "an operator has freed space on the data dir", detail={"errno": "ENOSPC"})
        text = str(cur).lower()
        if "database or disk is full" in text:
            return InsufficientStorage("the server's database disk is full: nothing was stored; retry "
                                       "once an operator has freed space", detail={"errno": "SQLITE_FULL"})
        if "database disk image is malformed" in text or "file is not a database" in text:
            return ServiceUnavailable("the server's database is corrupt; an operator must restore it "
                                      "(`PRAGMA integrity_check` names the damage)", code="database_corrupt")
        cur = cur.__cause__ or cur.__context__
    return None


class ServiceUnavailable(AppError):
    status_code = 503
    code = "unavailable"
