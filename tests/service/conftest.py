"""Service test fixtures. The app is built explicitly (`create_app(settings)`) per test on a
fresh data dir and database; DB-backed tests run on SQLite and, when LOGDX_TEST_POSTGRES_URL is
set, on PostgreSQL too (marked `postgres`)."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.auth.models import TokenRole
from app.auth.service import create_token
from app.core.pipeline import Pipeline
from app.settings import Settings

REPO = Path(__file__).resolve().parents[2]
# A small, stable rule library: these tests are about the service, not the shipped rules.
RULES_DIR = Path(os.environ.get("LOGDX_TEST_RULES_DIR") or REPO / "tests" / "data" / "rules_min")
PG_URL = os.environ.get("LOGDX_TEST_POSTGRES_URL")

DB_PARAMS = [pytest.param("sqlite", id="sqlite")]
if PG_URL:
    DB_PARAMS.append(pytest.param("postgres", id="postgres", marks=pytest.mark.postgres))


def sample_log(progress_lines: int = 40, *, host: str = "node-12") -> bytes:
    lines = [f"{host}: iteration {i}/ 1000 | lm loss: 2.{i % 10}E+00 |" for i in range(progress_lines)]
    lines += [
        f"{host}: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ]
    return ("\n".join(lines) + "\n").encode()


def reset_postgres(url: str) -> None:
    import psycopg

    conninfo = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")


@pytest.fixture(scope="session")
def service_pipeline() -> Pipeline:
    return Pipeline(rules_dir=RULES_DIR)


@pytest.fixture(params=DB_PARAMS)
def database_url(request) -> str | None:
    if request.param == "postgres":
        reset_postgres(PG_URL)
        return PG_URL
    return None  # default: SQLite under the data dir


def rules_copy(dest: Path) -> Path:
    """A private copy of the test rule library: approving a proposed rule writes into it."""
    if not dest.exists():
        shutil.copytree(RULES_DIR, dest)
    return dest


def make_settings(data_dir: Path, database_url: str | None = None, **overrides) -> Settings:
    if "rules_dir" not in overrides:
        overrides["rules_dir"] = rules_copy(Path(data_dir) / "rules")
    values = dict(data_dir=data_dir, database_url=database_url,
                  diagnosis_executor="thread", diagnosis_workers=2,
                  sync_diagnose_max_bytes=64 * 1024, max_upload_bytes=4 * 1024 * 1024,
                  upload_chunk_bytes=64 * 1024)
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(tmp_path, database_url) -> Settings:
    return make_settings(tmp_path / "data", database_url)


class HashEmbedder:
    """Bag-of-words hashing into 64 dims: stands in for MiniLM (seconds to load) in service tests."""

    name = "test-hash-64"

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts):
        import numpy as np
        import regex

        self.calls += 1
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in regex.findall(r"\w+", text.lower()):
                out[i, int(hashlib.sha256(word.encode()).hexdigest(), 16) % 64] += 1.0
            norm = float(np.linalg.norm(out[i]))
            out[i] /= norm or 1.0
        return out


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def app(settings, service_pipeline, embedder):
    return create_app(settings, pipeline=service_pipeline, embedder=embedder)


@pytest.fixture
def client(app) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def tokens(app, client) -> dict[str, str]:
    db = app.state.services.db
    return {role.value: db.run(create_token, role=role, name=f"test-{role.value}")[1] for role in TokenRole}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def sched(tokens) -> dict[str, str]:
    return bearer(tokens["scheduler"])


@pytest.fixture
def eng(tokens) -> dict[str, str]:
    return bearer(tokens["engineer"])


@pytest.fixture
def admin(tokens) -> dict[str, str]:
    return bearer(tokens["admin"])


def new_job(client: TestClient, headers: dict, external_id: str = "123", **fields) -> dict:
    body = {"cluster": "c1", "external_id": external_id, "hosts": ["node-12", "node-13"], "gpu_count": 16,
            "started_at": "2024-05-01T00:00:00Z", "ended_at": "2024-05-01T10:00:00Z", "state": "failed"}
    body.update(fields)
    resp = client.post("/v1/jobs", json=body, headers=headers)
    assert resp.status_code in (200, 201), resp.text
    return resp.json()


def gz(data: bytes) -> bytes:
    return gzip.compress(data)
