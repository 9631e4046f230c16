"""Browser defences on every response: `nosniff` everywhere (a log served as text is never run
as a script), and for the pages under /ui a strict CSP (the pages ship their own script and
stylesheet and use no inline code), no framing and no referrer (a job URL names a job)."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
PAGE_HEADERS = {"Content-Security-Policy": PAGE_CSP, "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp, page_prefix: str) -> None:
        self.app = app
        self.page_prefix = page_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        page = path == self.page_prefix or path.startswith(self.page_prefix + "/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                if page:
                    for name, value in PAGE_HEADERS.items():
                        headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)
