"""Controller tests reuse the service fixtures (real app, real DB: SQLite and, when configured,
PostgreSQL) with the shipped rule library, since recovery depends on real diagnoses."""

from __future__ import annotations

import pytest

from app.core.pipeline import Pipeline
from tests.service.conftest import (  # noqa: F401 - fixtures
    admin, app, client, database_url, embedder, eng, sched, settings, tokens,
)


@pytest.fixture(scope="session")
def service_pipeline() -> Pipeline:
    return Pipeline()
