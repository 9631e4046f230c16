"""A real uvicorn server in a subprocess (its own process group, so SIGKILL takes the whole
server down like a node failure would)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def issue_token(database_url: str, role, name: str) -> str:
    """A new API token written straight into a live server's database (as `logdx token create`)."""
    from app.auth.service import create_token
    from app.db.engine import Database

    db = Database(database_url)
    try:
        return db.run(create_token, role=role, name=name)[1]
    finally:
        db.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, env: dict[str, str], port: int | None = None) -> None:
        self.env = env
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(env["LOGDX_DATA_DIR"]) / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0, log_level: str = "warning", **extra_env: str) -> LiveServer:
        env = {**os.environ, **self.env, **extra_env, "PYTHONPATH": str(REPO)}
        Path(env["LOGDX_DATA_DIR"]).mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.service_cli", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", log_level],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server did not become ready: {self.log_path.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None
