#!/usr/bin/env python3
"""Load test of the logdx REST API against a real uvicorn subprocess.

Measures
- small logs: diagnoses/s at a bounded concurrency (default 16), p50/p99 latency, for the
  one-shot endpoint (POST /v1/diagnose) and for the scheduler flow (POST /v1/jobs, PUT log,
  POST diagnoses: 3 requests per diagnosis);
- one large upload: ingest MB/s of PUT /v1/jobs/{id}/log streamed from disk, and the peak RSS of
  the server process tree (psutil) while it streams; then the time to diagnose it (202 + poll).

    python bench/load_api.py [--small 400] [--concurrency 16] [--large-mb 512] [--executor process]

Writes a JSON summary to stdout and bench/out/load_api.json. Needs psutil.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "LOGDX_DATA_DIR": str(data_dir), **env}
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.service_cli", "serve", "--port", str(self.port), "--log-level", "warning"],
            cwd=REPO, env=self.env, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise SystemExit("server did not start")

    def tree_rss(self) -> int:
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


class RssSampler(threading.Thread):
    def __init__(self, server: Server, every: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.server, self.every, self.peak, self._halt = server, every, 0, threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak = max(self.peak, self.server.tree_rss())
            time.sleep(self.every)

    def stop(self) -> int:
        self._halt.set()
        self.join()
        return self.peak


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


def _summary(latencies: list[float], wall: float, errors: int) -> dict:
    return {"diagnoses": len(latencies), "errors": errors, "wall_s": round(wall, 2),
            "diagnoses_per_s": round(len(latencies) / wall, 1) if wall else 0.0,
            "p50_ms": round(_pct(latencies, 0.50) * 1000, 1), "p99_ms": round(_pct(latencies, 0.99) * 1000, 1)}


async def _bounded(n: int, concurrency: int, one) -> dict:  # noqa: ANN001
    sem = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    errors = 0

    async def run(i: int) -> None:
        nonlocal errors
        async with sem:
            t0 = time.perf_counter()
            try:
                await one(i)
                latencies.append(time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001
                errors += 1
                if errors <= 3:
                    print(f"request failed: {exc!r}", file=sys.stderr)

    started = time.perf_counter()
    await asyncio.gather(*(run(i) for i in range(n)))
    return _summary(latencies, time.perf_counter() - started, errors)


async def small_logs(url: str, headers: dict, logs: list[bytes], n: int, concurrency: int) -> dict:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120, limits=limits) as client:
        async def one_shot(i: int) -> None:
            r = await client.post("/v1/diagnose", content=logs[i % len(logs)])
            r.raise_for_status()

        async def flow(i: int) -> None:
            job = await client.post("/v1/jobs", json={"cluster": "bench", "external_id": f"job-{i}",
                                                      "gpu_count": 8, "hosts": [f"node-{i % 32}"]})
            job.raise_for_status()
            job_id = job.json()["id"]
            (await client.put(f"/v1/jobs/{job_id}/log", content=logs[i % len(logs)])).raise_for_status()
            d = await client.post(f"/v1/jobs/{job_id}/diagnoses")
            d.raise_for_status()
            assert d.status_code == 200 and d.json()["status"] == "done", d.text

        await _bounded(min(n, 2 * concurrency), concurrency, one_shot)  # warm-up (worker start)
        return {"one_shot": await _bounded(n, concurrency, one_shot),
                "scheduler_flow": await _bounded(n, concurrency, flow)}


def large_upload(server: Server, headers: dict, path: Path) -> dict:
    size = path.stat().st_size
    with httpx.Client(base_url=server.url, headers=headers, timeout=600) as client:
        job = client.post("/v1/jobs", json={"cluster": "bench", "external_id": "large"}).json()["id"]

        def body():
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    yield chunk

        sampler = RssSampler(server)
        rss_before = server.tree_rss()
        sampler.start()
        t0 = time.perf_counter()
        resp = client.put(f"/v1/jobs/{job}/log", content=body(), headers={"Content-Length": str(size)})
        upload_s = time.perf_counter() - t0
        upload_peak = sampler.stop()
        resp.raise_for_status()
        sampler = RssSampler(server)
        sampler.start()
        t0 = time.perf_counter()
        accepted = client.post(f"/v1/jobs/{job}/diagnoses")
        href = accepted.json().get("href") or f"/v1/diagnoses/{accepted.json()['id']}"
        while (state := client.get(href).json())["status"] not in ("done", "failed"):
            time.sleep(0.2)
        diagnose_s = time.perf_counter() - t0
        diagnose_peak = sampler.stop()
    mb = size / (1 << 20)
    return {"bytes": size, "upload_s": round(upload_s, 2), "ingest_mb_per_s": round(mb / upload_s, 1),
            "server_rss_before_mb": round(rss_before / (1 << 20), 1),
            "server_rss_peak_upload_mb": round(upload_peak / (1 << 20), 1),
            "diagnose_status": state["status"], "diagnose_s": round(diagnose_s, 2),
            "diagnose_mb_per_s": round(mb / diagnose_s, 1),
            "server_rss_peak_diagnose_mb": round(diagnose_peak / (1 << 20), 1),
            "root_cause": (state.get("diagnosis") or {}).get("root_cause", {}).get("error_type")}


def _make_logs(work: Path, large_mb: float, large: Path | None, small_kb: int) -> tuple[list[bytes], Path]:
    from bench.gen_log import generate

    small = []
    for seed in range(4):
        out = work / f"small-{seed}.log"
        generate(out, 0.3, seed=seed, ranks=8, gpus=8)
        # the tail of a failed job's log (training lines, then the failure burst), from a line start
        data = out.read_bytes()
        tail = data[-small_kb * 1024:]
        small.append(tail[tail.find(b"\n") + 1:])
    if large is None:
        large = work / f"large-{int(large_mb)}mb.log"
        generate(large, large_mb, seed=1)
    return small, large


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=400, help="small-log diagnoses per phase")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--small-kb", type=int, default=128, help="size of each small log")
    ap.add_argument("--large-mb", type=float, default=512.0)
    ap.add_argument("--large-file", type=Path, default=None, help="use this log instead of generating one")
    ap.add_argument("--executor", choices=["process", "thread"], default="process")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--database-url", default=None, help="LOGDX_DATABASE_URL (default: SQLite in a temp dir)")
    args = ap.parse_args()

    from app.auth.models import TokenRole
    from app.auth.service import create_token
    from app.db.engine import Database

    with tempfile.TemporaryDirectory(prefix="logdx-load-") as tmp:
        work = Path(tmp)
        small, large = _make_logs(work, args.large_mb, args.large_file, args.small_kb)
        env = {"LOGDX_DIAGNOSIS_EXECUTOR": args.executor, "LOGDX_DIAGNOSIS_WORKERS": str(args.workers),
               "LOGDX_MAX_UPLOAD_BYTES": str(max(large.stat().st_size + 1, 2 << 30))}
        if args.database_url:
            env["LOGDX_DATABASE_URL"] = args.database_url
        server = Server(work / "data", env)
        server.start()
        try:
            db = Database(args.database_url or f"sqlite:///{work / 'data' / 'logdx.db'}")
            headers = {"Authorization": f"Bearer {db.run(create_token, role=TokenRole.ADMIN, name='bench')[1]}"}
            db.dispose()
            result = {
                "host": {"cpus": os.cpu_count(), "executor": args.executor, "workers": args.workers,
                         "database": "postgresql" if args.database_url else "sqlite"},
                "small_log_bytes": [len(s) for s in small], "concurrency": args.concurrency,
                "small": asyncio.run(small_logs(server.url, headers, small, args.small, args.concurrency)),
                "large": large_upload(server, headers, large),
            }
        finally:
            server.stop()
    text = json.dumps(result, indent=2)
    print(text)
    out = REPO / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "load_api.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
