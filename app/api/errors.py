"""Exception handlers: one JSON error shape for every 4xx/5xx the service can produce."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.errors import AppError, storage_error

log = logging.getLogger("logdx.api")

_HTTP_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 408: "request_timeout", 409: "conflict", 413: "payload_too_large",
    415: "unsupported_media_type", 422: "invalid_input", 429: "too_many_requests",
    503: "unavailable", 507: "insufficient_storage",
}


def error_body(code: str, message: str, detail: Any = None) -> dict:
    return {"error": {"code": code, "message": message, "detail": detail}}


def error_response(status: int, code: str, message: str, detail: Any = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message, detail), status_code=status, headers=headers)


def _jsonable_errors(exc: RequestValidationError) -> list[dict]:
    out = []
    for err in exc.errors():
        item = {"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")}
        out.append(item)
    return out


async def _app_error(_: Request, exc: AppError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
    return error_response(exc.status_code, exc.code, exc.message, exc.detail, headers)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = _jsonable_errors(exc)
    body_problem = any(e["type"] == "json_invalid" for e in errors)
    message = "request body is not valid JSON" if body_problem else "request does not match the schema"
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type and content_type != "application/json" and any(e["loc"][:1] == ["body"] for e in errors):
        # FastAPI does not parse a JSON body sent as form data (`curl -d` without -H)
        message = (f"the body must be JSON sent with Content-Type: application/json, not {content_type} "
                   "(curl -d needs -H 'Content-Type: application/json')")
    return error_response(422, "invalid_input", message, errors)


# FastAPI answers a body it cannot decode (invalid UTF-8 in a JSON body) with this 400
_BODY_PARSE_ERROR = "There was an error parsing the body"


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> set[str]:
    """Every method some route serves at this path (Starlette names only the first route's)."""
    allowed = set()
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        for route in request.app.router.routes:
            try:
                match, _ = route.matches(scope)
            except Exception:  # noqa: BLE001 - a route that cannot judge this scope does not match
                continue
            if match is Match.FULL:
                allowed.add(method)
                break
    return allowed


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    status = exc.status_code
    code = _HTTP_CODES.get(status, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(status).phrase
    headers = getattr(exc, "headers", None)
    if status == 400 and message == _BODY_PARSE_ERROR:
        return error_response(422, "invalid_input", "request body is not valid JSON (it must be UTF-8)",
                              [{"loc": ["body"], "msg": "invalid UTF-8 or JSON", "type": "json_invalid"}])
    if status == 404 and message == "Not Found":
        message = "no such route"
    if status == 405:
        methods = _allowed_methods(request)
        if methods:
            headers = {**(headers or {}), "Allow": ", ".join(sorted(methods))}
    return error_response(status, code, message, None, headers)


async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
    known = storage_error(exc)
    if known is not None:
        log.error("%s on %s %s: %s", known.code, request.method, request.url.path, exc)
        return await _app_error(request, known)
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal_error", "internal server error", None)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unhandled)
