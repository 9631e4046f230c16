"""The front door: `/` leads a browser to the UI and tells an API client where things are."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from app import __version__

router = APIRouter()


def _wants_html(accept: str) -> bool:
    """A browser asks for text/html first; curl sends */*, API clients application/json."""
    for part in accept.split(","):
        media, _, params = part.strip().partition(";")
        if media.strip().lower() not in ("text/html", "application/xhtml+xml"):
            continue
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > 0:
            return True
    return False


@router.get("/", include_in_schema=False)
def front_door(request: Request) -> Response:
    """A browser (Accept: text/html) is sent to the UI's sign-in; anything else gets the index."""
    if _wants_html(request.headers.get("accept", "")):
        return RedirectResponse("/ui/", status_code=303)
    return JSONResponse({
        "name": "logdx",
        "version": __version__,
        "links": {"docs": "/docs", "openapi": "/openapi.json", "ui": "/ui/",
                  "healthz": "/healthz", "readyz": "/readyz"},
    })
