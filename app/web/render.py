"""Template environment and form/query helpers shared by the page modules."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import HTMLResponse

from app import __version__, resources
from app.core.types import ActionKind, Category, ErrorType
from app.web import charts

HERE = resources.package_dir("web")  # templates/ and static/ ship in the package
templates = Jinja2Templates(directory=HERE / "templates")

RANGES = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30),
          "90d": timedelta(days=90), "all": None}


def _dt(value: datetime | None) -> str:
    """Times on the pages are UTC, and say so (the cluster spans zones; logs are in UTC)."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if value else "–"


def _ago(value: datetime | None) -> str:
    if value is None:
        return "–"
    secs = (datetime.now(UTC) - value).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(secs) >= size:
            return f"{int(secs // size)} {unit} ago"
    return "just now"


def _hours(value: float | None) -> str:
    if not value:
        return "0"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def _pretty_json(value: Any) -> str:
    """JSON for a person to read inside <pre>: autoescaping makes it safe for HTML, so quotes stay
    quotes (the `tojson` filter writes \\u0027, which is for <script>, and the pages have none)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


templates.env.filters.update(dt=_dt, ago=_ago, hours=_hours, pretty_json=_pretty_json)
templates.env.globals.update(
    charts=charts, package_version=__version__, error_types=[e.value for e in ErrorType],
    categories=[c.value for c in Category], action_kinds=[a.value for a in ActionKind], ranges=list(RANGES))


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    user = getattr(request.state, "web_user", None)
    services = getattr(request.app.state, "services", None)
    # the footer's rules hash: pages pass their own `version`s, so it has its own name
    rules_version = services.pipeline.ruleset.version if services is not None and services.pipeline else None
    context.update(request=request, user=user, csrf=user.csrf_token if user else None,
                   footer_rules_version=rules_version)
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def opt(value: str | None) -> str | None:
    """HTML forms send empty strings for unset fields."""
    value = (value or "").strip()
    return value or None


def since_of(range_key: str | None, default: str) -> tuple[str, datetime | None]:
    key = range_key if range_key in RANGES else default
    delta = RANGES[key]
    return key, (datetime.now(UTC) - delta) if delta else None


def parse_date(value: str | None, *, end: bool = False) -> datetime | None:
    """A `YYYY-MM-DD` from a date input (None if empty or malformed; the page says which)."""
    value = opt(value)
    if value is None:
        return None
    try:
        day = datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        return None
    return day + timedelta(days=1) if end else day
