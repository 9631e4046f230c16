"""Server-rendered pages for engineers under /ui (Jinja2 templates, a little vanilla JS and CSS
shipped in this package: the cluster network is closed, so nothing comes from a CDN). The pages
call the same services as the API; errors on /ui paths are HTML pages, elsewhere the API's JSON."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import AppError, storage_error
from app.web.auth import PREFIX, LoginRequired
from app.web.render import HERE, page


def _is_page(request: Request) -> bool:
    path = request.url.path
    return path == PREFIX or path.startswith(PREFIX + "/")


def _html_error(request: Request, exc: Exception):  # noqa: ANN202
    if isinstance(exc, LoginRequired):
        return RedirectResponse(exc.location, status_code=303)
    exc = storage_error(exc) or exc if not isinstance(exc, AppError) else exc
    if isinstance(exc, AppError):
        status, message = exc.status_code, exc.message
    elif isinstance(exc, StarletteHTTPException):
        status = exc.status_code
        message = exc.detail if isinstance(exc.detail, str) and exc.detail != HTTPStatus(status).phrase else (
            "There is no such page." if status == 404 else HTTPStatus(status).phrase)
    elif hasattr(exc, "errors") and all(e.get("loc", ())[:1] == ("path",) for e in exc.errors()):
        # an id past the range of ids is a page that does not exist, like an unknown one
        status, message = 404, "There is no such page."
    elif hasattr(exc, "errors"):  # RequestValidationError
        status = 422
        message = "; ".join(f"{'.'.join(map(str, e.get('loc', ())[1:]))}: {e.get('msg')}" for e in exc.errors())
    else:
        status, message = 500, "Something went wrong on the server; it is logged. Try again, or tell the operators."
    return page(request, "error.html", status_code=status, status=status, phrase=HTTPStatus(status).phrase,
                message=message)


def install_web(app: FastAPI) -> None:
    from app.web.pages import router as pages_router
    from app.web.review import router as review_router

    app.include_router(review_router)
    app.include_router(pages_router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    # wrap the API's handlers: the same exceptions, HTML for pages
    for exc_class, handler in list(app.exception_handlers.items()):
        async def wrapped(request: Request, exc: Exception, _api=handler):  # noqa: ANN202
            if _is_page(request) and not request.url.path.startswith(f"{PREFIX}/static/"):
                if request.url.path == f"{PREFIX}/failures/rows" and isinstance(exc, LoginRequired):
                    return await _api(request, exc)  # the poller gets a 401, not a login page
                return _html_error(request, exc)
            return await _api(request, exc)

        app.exception_handlers[exc_class] = wrapped
