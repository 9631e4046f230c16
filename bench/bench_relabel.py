#!/usr/bin/env python3
"""Throughput of batch re-labeling: `logdx relabel` importing an archive and re-labeling the
stored jobs, with 1 and 2 worker processes, on a fresh SQLite store (or PostgreSQL with --postgres:
the procrastinate worker inside the command).

The archive is generated (bench/gen_log.py: multi-rank pretraining logs that end in a failure),
a third each plain, gzip and zstd. Figures: logs/s, MB/s of stored (on-disk) bytes and of
uncompressed log text, and a worked estimate for re-labeling 100,000 jobs on N workers from the
measured per-log cost.

    python bench/bench_relabel.py [--logs 48] [--size-mb 4] [--workers 1 2] [--postgres URL] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_log import generate  # noqa: E402

ESTIMATE_JOBS = 100_000
ESTIMATE_WORKERS = (1, 2, 16, 64, 256)


def make_archive(root: Path, logs: int, size_mb: float) -> tuple[int, int]:
    """(bytes on disk, uncompressed bytes)."""
    disk = text = 0
    for i in range(logs):
        compression = (None, "gz", "zst")[i % 3]
        suffix = {None: ".log", "gz": ".log.gz", "zst": ".log.zst"}[compression]
        path = root / f"job-{i:04d}{suffix}"
        truth = generate(path, size_mb, seed=i, compression=compression)
        disk += path.stat().st_size
        text += truth["bytes_uncompressed"]
    return disk, text


def run_cli(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its pool processes)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"logdx {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def reset_postgres(url: str) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")


def startup_seconds(env: dict[str, str]) -> tuple[float, float]:
    """What the command costs with nothing to do (imports, migration check, rules)."""
    return run_cli(["relabel", "--cluster", "nothing-here", "--workers", "1", "--quiet"], env)


def measure(workers: int, archive: Path, work: Path, postgres: str | None) -> dict:
    data = work / f"data-{workers}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOGDX_DATA_DIR": str(data)}
    env.pop("LOGDX_DATABASE_URL", None)
    if postgres:
        reset_postgres(postgres)
        env["LOGDX_DATABASE_URL"] = postgres
    startup, startup_cpu = startup_seconds(env)
    imported, imported_cpu = run_cli(["relabel", "--archive", str(archive), "--workers", str(workers), "--quiet"], env)
    relabeled, relabeled_cpu = run_cli(["relabel", "--workers", str(workers), "--quiet"], env)
    return {"workers": workers, "startup_s": round(startup, 2), "startup_cpu_s": round(startup_cpu, 2),
            "import_s": round(imported, 2), "import_cpu_s": round(imported_cpu, 2),
            "relabel_s": round(relabeled, 2), "relabel_cpu_s": round(relabeled_cpu, 2)}


def pipeline_cpu_per_log(archive: Path) -> float:
    """CPU seconds per log of the bare pipeline in this process (no database, no copy, no pool):
    the floor under the command's own per-log cost."""
    from app.core.pipeline import Pipeline

    pipeline = Pipeline()
    paths = sorted(archive.iterdir())
    started = time.process_time()
    for path in paths:
        pipeline.diagnose(path, workers=1)
    return (time.process_time() - started) / len(paths)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", type=int, default=48)
    ap.add_argument("--size-mb", type=float, default=4.0, help="uncompressed size of each generated log")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--postgres", default=None, help="PostgreSQL URL (its public schema is dropped!)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="logdx-bench-relabel-") as tmp:
        work = Path(tmp)
        archive = work / "archive"
        disk, text = make_archive(archive, args.logs, args.size_mb)
        pipeline_cpu = pipeline_cpu_per_log(archive)
        rows = [measure(w, archive, work, args.postgres) for w in args.workers]
    n = args.logs
    print(f"archive: {n} logs, {disk / 1e6:.1f} MB on disk, {text / 1e6:.1f} MB uncompressed "
          f"(1/3 each plain, gz, zst); backend {'PostgreSQL' if args.postgres else 'SQLite'}; "
          f"{os.cpu_count()} CPUs")
    load = os.getloadavg()[0]
    print(f"{'workers':>7} {'phase':>8} {'wall s':>7} {'net s':>7} {'logs/s':>7} {'MB/s disk':>9} {'MB/s text':>9}"
          f" {'CPU s':>6} {'CPU ms/log':>10}")
    for row in rows:
        for phase in ("import", "relabel"):
            wall = row[f"{phase}_s"]
            net = max(wall - row["startup_s"], 1e-3)
            cpu = max(row[f"{phase}_cpu_s"] - row["startup_cpu_s"], 0.0)
            row[f"{phase}_logs_per_s"] = round(n / net, 2)
            row[f"{phase}_mb_per_s_disk"] = round(disk / 1e6 / net, 1)
            row[f"{phase}_mb_per_s_text"] = round(text / 1e6 / net, 1)
            row[f"{phase}_cpu_ms_per_log"] = round(cpu / n * 1000, 1)
            print(f"{row['workers']:>7} {phase:>8} {wall:>7.2f} {net:>7.2f} {n / net:>7.2f} "
                  f"{disk / 1e6 / net:>9.1f} {text / 1e6 / net:>9.1f} {cpu:>6.1f} {cpu / n * 1000:>10.0f}")
    one = next((r for r in rows if r["workers"] == 1), rows[0])
    two = next((r for r in rows if r["workers"] == 2), None)
    efficiency = two["relabel_logs_per_s"] / (2 * one["relabel_logs_per_s"]) if two else 1.0
    # the estimate uses CPU time per log: wall time on a shared machine says more about the
    # neighbours than about logdx
    per_log = min(r["relabel_cpu_ms_per_log"] for r in rows) / 1000
    print(f"\nload average during the run {load:.1f} on {os.cpu_count()} CPUs; 2-worker speed-up "
          f"{2 * efficiency:.2f}x")
    print(f"measured per-log cost: {per_log * 1000:.0f} ms CPU per {text / n / 1e6:.1f} MB log "
          f"({text / n / 1e6 / per_log:.1f} MB/s of log text per core), of which the bare pipeline "
          f"{pipeline_cpu * 1000:.0f} ms (the rest: pool start-up, copy into the store, database)")
    print(f"estimate for re-labeling {ESTIMATE_JOBS:,} such jobs ({ESTIMATE_JOBS * text / n / 1e12:.2f} TB of text), "
          "one worker process per free core, scaling linearly:")
    estimates = {}
    for w in ESTIMATE_WORKERS:
        seconds = ESTIMATE_JOBS * per_log / w
        estimates[w] = round(seconds)
        print(f"  {w:>4} workers: {seconds / 3600:8.2f} h")
    result = {"logs": n, "size_mb": args.size_mb, "disk_bytes": disk, "text_bytes": text, "cpus": os.cpu_count(),
              "load_average": round(load, 1),
              "backend": "postgres" if args.postgres else "sqlite", "runs": rows,
              "per_log_cpu_s": round(per_log, 4), "pipeline_cpu_s_per_log": round(pipeline_cpu, 4), "two_worker_efficiency": round(efficiency, 2),
              "estimate_100k_jobs_s": estimates}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
