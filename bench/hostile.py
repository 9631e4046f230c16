"""Hostile inputs against a real server: memory, time and fairness under decompression bombs,
work bombs and junk.

Starts `logdx serve` (127.0.0.1, SQLite, two process workers) in its own data dir, then sends
one input at a time and records bytes sent, wall time until the answer (polling queued
diagnoses), the peak memory of the server and all its child processes (sum of RSS and of PSS,
sampled every 0.2 s) and the answer. Then it runs two bombs at once and sends a normal small
one-shot every second meanwhile: its latency is the fairness figure.

    .venv/bin/python bench/hostile.py [--port 18220] [--deadline 30] [--out bench/out/hostile]

Inputs (built in --out, reused when present): gzip and zstd bombs of 8 GiB of zeros, gzip and
zstd of 2 GiB of one line that no filter drops, 1 GiB of random bytes, a 64 MiB log where no
line is filtered. Bombs are made of repeated members/frames (valid multi-member archives), so
building them takes seconds.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import zstandard

REPO = Path(__file__).resolve().parents[1]
GiB, MiB = 1 << 30, 1 << 20
LINE = b"INFO dataloader worker reported shard ready for consumption\n"
SMALL_LOG = b"".join(b"[node-3] iteration %d/ 1000 | lm loss: 2.%dE+00 | grad norm: 1.%d |\n" % (i, i % 10, i % 7)
                     for i in range(600)) + b"[node-3] RuntimeError: CUDA error: out of memory\n"


def _repeat_archive(path: Path, unit: bytes, total: int, kind: str) -> None:
    member_plain = 64 * MiB
    block = (unit * (member_plain // len(unit) + 1))[:member_plain]
    member = gzip.compress(block, 6) if kind == "gz" else zstandard.ZstdCompressor(level=3).compress(block)
    with open(path, "wb") as fh:
        for _ in range(total // member_plain):
            fh.write(member)


def build_inputs(out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    specs = {
        "gzip bomb: 8 GiB of zeros": ("zeros-8g.gz", lambda p: _repeat_archive(p, b"\0", 8 * GiB, "gz")),
        "zstd bomb: 8 GiB of zeros": ("zeros-8g.zst", lambda p: _repeat_archive(p, b"\0", 8 * GiB, "zst")),
        "gzip: 2 GiB of one unfiltered line": ("line-2g.gz", lambda p: _repeat_archive(p, LINE, 2 * GiB, "gz")),
        "zstd: 2 GiB of one unfiltered line": ("line-2g.zst", lambda p: _repeat_archive(p, LINE, 2 * GiB, "zst")),
        "1 GiB of random bytes": ("random-1g.bin", _random),
        "64 MiB log, no line filtered": ("unfiltered-64m.log", _unfiltered),
    }
    paths = {}
    for name, (fname, make) in specs.items():
        path = out / fname
        if not path.exists():
            make(path)
        paths[name] = path
    (out / "small.log").write_bytes(SMALL_LOG)
    return paths


def _random(path: Path) -> None:
    with open(path, "wb") as fh:
        for _ in range(GiB // (16 * MiB)):
            fh.write(os.urandom(16 * MiB))


def _unfiltered(path: Path) -> None:
    with open(path, "wb") as fh:
        i, size = 0, 0
        while size < 64 * MiB:
            line = b"INFO shard %d of dataset part-%05x opened by loader %d\n" % (i, i * 2654435761 % 2**20, i % 61)
            fh.write(line)
            size += len(line)
            i += 1


class Sampler(threading.Thread):
    """Peak memory of a process and all its descendants."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.peak_rss = self.peak_pss = 0
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.is_set():
            rss = pss = 0
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for p in procs:
                try:
                    info = p.memory_full_info()
                    rss += info.rss
                    pss += getattr(info, "pss", info.rss)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            time.sleep(0.2)

    def reset(self) -> None:
        self.peak_rss = self.peak_pss = 0

    def stop(self) -> None:
        self._stop.set()


def start_server(port: int, data: Path, deadline: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOGDX_DATA_DIR": str(data),
           "LOGDX_DIAGNOSIS_WORKERS": "2", "LOGDX_DIAGNOSIS_EXECUTOR": "process",
           "LOGDX_DIAGNOSIS_DEADLINE_S": str(deadline)}
    proc = subprocess.Popen([sys.executable, "-m", "app.service_cli", "serve", "--port", str(port),
                             "--log-level", "warning"], cwd=REPO, env=env, start_new_session=True,
                            stdout=open(data / "server.log", "wb"), stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"server did not start: {(data / 'server.log').read_text()[-2000:]}")


def token(data: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOGDX_DATA_DIR": str(data)}
    return subprocess.run([sys.executable, "-m", "app.service_cli", "token", "create", "--role", "scheduler",
                           "--name", "bench"], cwd=REPO, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def _summary(diagnosis: dict) -> str:
    root = diagnosis.get("root_cause") or {}
    notes = " ".join(diagnosis.get("notes") or [])
    partial = ("partial: deadline" if "deadline" in notes else
               "partial: ratio limit" if "expands more than" in notes else "whole log")
    return f"{root.get('error_type')} ({partial})"


def one_shot(client: httpx.Client, path: Path) -> tuple[int, str]:
    with open(path, "rb") as fh:
        r = client.post("/v1/diagnose", content=fh, headers={"Content-Type": "application/octet-stream"})
    if r.status_code != 200:
        return r.status_code, f"{r.status_code} {r.json().get('error', {}).get('code')}"
    return 200, "200 " + _summary(r.json())


def via_job(client: httpx.Client, path: Path, n: int) -> tuple[int, str]:
    job = client.post("/v1/jobs", json={"cluster": f"bench-{n % 2}", "external_id": f"hostile-{n}-{int(time.time() * 1000)}"}).json()
    with open(path, "rb") as fh:
        put = client.put(f"/v1/jobs/{job['id']}/log", content=fh)
    if put.status_code != 201:
        return put.status_code, f"PUT {put.status_code} {put.text[:80]}"
    r = client.post(f"/v1/jobs/{job['id']}/diagnoses")
    body = r.json()
    code = r.status_code
    while body.get("status") not in ("done", "failed"):
        time.sleep(0.5)
        body = client.get(body["href"] if "href" in body else f"/v1/diagnoses/{body['id']}").json()
    if body["status"] == "failed":
        return code, f"{code} → failed: {body['error'][:80]}"
    return code, f"{code} → " + _summary(body["diagnosis"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=18220)
    ap.add_argument("--deadline", type=float, default=30.0, help="LOGDX_DIAGNOSIS_DEADLINE_S for the server")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "hostile")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    inputs = build_inputs(args.out)
    data = Path(tempfile.mkdtemp(prefix="logdx-hostile-"))
    proc = start_server(args.port, data, args.deadline)
    sampler = Sampler(proc.pid)
    sampler.start()
    rows, results = [], {"load_average": os.getloadavg(), "deadline_s": args.deadline}
    try:
        headers = {"Authorization": f"Bearer {token(data)}"}
        client = httpx.Client(base_url=f"http://127.0.0.1:{args.port}", headers=headers, timeout=900)
        time.sleep(1)
        for n, (name, path) in enumerate(inputs.items()):
            sampler.reset()
            started = time.monotonic()
            how = via_job if "line" in name or "64 MiB" in name else one_shot
            _, answer = how(client, path, n) if how is via_job else how(client, path)
            wall = time.monotonic() - started
            time.sleep(0.5)
            rows.append((name, "job PUT + diagnose" if how is via_job else "POST /v1/diagnose",
                         path.stat().st_size, wall, sampler.peak_rss, sampler.peak_pss, answer))
            print(f"{name}: {wall:.1f} s, peak RSS {sampler.peak_rss / MiB:.0f} MiB, {answer}", flush=True)
        # fairness: two bombs at once, a small one-shot every second meanwhile
        sampler.reset()
        bombs = [threading.Thread(target=via_job, args=(client, inputs["gzip: 2 GiB of one unfiltered line"], 100 + i))
                 for i in range(2)]
        for t in bombs:
            t.start()
        time.sleep(2)
        latencies = []
        while any(t.is_alive() for t in bombs):
            t0 = time.monotonic()
            code, _ = one_shot(client, args.out / "small.log")
            latencies.append((time.monotonic() - t0, code))
            time.sleep(1)
        for t in bombs:
            t.join()
        results["fairness"] = {"small_one_shots": len(latencies),
                               "max_latency_s": max(l for l, _ in latencies) if latencies else None,
                               "all_200": all(c == 200 for _, c in latencies),
                               "peak_rss_mib": sampler.peak_rss / MiB, "peak_pss_mib": sampler.peak_pss / MiB}
        print(f"fairness: {results['fairness']}", flush=True)
    finally:
        sampler.stop()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    results["load_average_after"] = os.getloadavg()
    print(f"\nserver: SQLite, 2 process workers, LOGDX_DIAGNOSIS_DEADLINE_S={args.deadline:g}; "
          f"load average before {results['load_average'][0]:.1f}, after {results['load_average_after'][0]:.1f}\n")
    print("| input | sent as | bytes in | wall s | peak RSS MiB (server+workers) | peak PSS MiB | answer |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name, how, size, wall, rss, pss, answer in rows:
        print(f"| {name} | {how} | {size:,} | {wall:.1f} | {rss / MiB:.0f} | {pss / MiB:.0f} | {answer} |")
    f = results.get("fairness", {})
    if f:
        print(f"\nTwo 2 GiB-line gzip logs diagnosed at once: {f['small_one_shots']} small one-shots sent "
              f"meanwhile, slowest {f['max_latency_s']:.2f} s, all 200: {f['all_200']}; "
              f"peak RSS {f['peak_rss_mib']:.0f} MiB, PSS {f['peak_pss_mib']:.0f} MiB.")
    results["rows"] = [dict(zip(("input", "sent_as", "bytes", "wall_s", "peak_rss", "peak_pss", "answer"), r))
                       for r in rows]
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
