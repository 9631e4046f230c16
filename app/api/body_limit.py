"""Caps request bodies of the JSON endpoints (FastAPI buffers those in memory); raw log
endpoints stream to disk and enforce LOGDX_MAX_UPLOAD_BYTES themselves. Answers in the one
error shape (Starlette's own limit answers in plain text)."""

from __future__ import annotations

import re

import anyio
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response
from app.errors import PayloadTooLarge

JSON_BODY_LIMIT = 1 << 20
STREAMED_PATHS = re.compile(r"^/v1/(jobs/[^/]+/log(/chunks)?|diagnose)/?$")


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body exceeds {limit} bytes", detail={"limit": limit})


class JsonBodyLimitMiddleware:
    def __init__(self, app: ASGIApp, limit: int = JSON_BODY_LIMIT) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or STREAMED_PATHS.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                err = _too_large(self.limit)
                await error_response(413, err.code, err.message, err.detail)(scope, receive, send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # raised inside FastAPI's body parsing, which re-raises only HTTPException;
                    # the error handler turns it into the one error shape
                    raise HTTPException(413, _too_large(self.limit).message)
            return message

        await self.app(scope, limited, send)


class BodyTimeoutMiddleware:
    """A request body that stalls (no bytes for `timeout` seconds) is answered 408 in the one
    error shape instead of holding a connection, a spool file and a worker thread forever."""

    def __init__(self, app: ASGIApp, timeout: float) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done = False

        async def timed() -> Message:
            nonlocal body_done
            if body_done:  # later receives wait for a disconnect: no limit
                return await receive()
            try:
                with anyio.fail_after(self.timeout):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(408, f"the request body stalled: no bytes for {self.timeout:g} s "
                                         "(LOGDX_REQUEST_BODY_TIMEOUT_S)") from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        await self.app(scope, timed, send)
