"""`/docs` (Swagger UI) and `/redoc` with their JavaScript and CSS served by the service itself:
on a closed cluster network a CDN is unreachable and the pages would stay blank. The assets
come from the `fastapi-offline` package (Swagger UI 5 and ReDoc 2 bundles)."""

from __future__ import annotations

from importlib.resources import files
from typing import Literal

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse

ASSETS_PATH = "/docs/assets/{name}"
_MEDIA = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
          "redoc.standalone.js": "text/javascript", "favicon.png": "image/png"}
Asset = Literal["swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png"]


def _asset_url(name: str) -> str:
    return ASSETS_PATH.format(name=name)


def install_docs(app: FastAPI) -> None:
    """Add /docs, /docs/oauth2-redirect, /redoc and the asset route (create the app with
    docs_url=None, redoc_url=None)."""
    static = files("fastapi_offline") / "static"
    title = f"{app.title} API"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url, title=title, oauth2_redirect_url="/docs/oauth2-redirect",
            swagger_js_url=_asset_url("swagger-ui-bundle.js"), swagger_css_url=_asset_url("swagger-ui.css"),
            swagger_favicon_url=_asset_url("favicon.png"))

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=app.openapi_url, title=title, redoc_js_url=_asset_url("redoc.standalone.js"),
                              redoc_favicon_url=_asset_url("favicon.png"), with_google_fonts=False)

    @app.get(ASSETS_PATH, include_in_schema=False)
    def docs_asset(name: Asset) -> FileResponse:
        return FileResponse(str(static / name), media_type=_MEDIA[name],
                            headers={"Cache-Control": "public, max-age=86400"})
