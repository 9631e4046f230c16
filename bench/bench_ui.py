#!/usr/bin/env python3
"""Server time of every web page at 10,000 jobs (SQLite).

Builds a data dir with N failed jobs (default 10,000) over 90 days, 3 clusters and 400 hosts:
the bundled real-world logs (examples/realworld + the sample job) are diagnosed once each by the
real pipeline, and every job gets one of those diagnoses through the same service calls the API
uses (`complete_diagnosis`: result, compressed log, metric series, fingerprint), with the first
evidence line varied so that there are ~1,500 failure groups; one job in 10 is labelled, 40 groups
have a decision, 3% of the jobs are still pending. Then every page is requested in-process
(FastAPI TestClient, signed in as an engineer) `--repeat` times after one warm-up; the figure is
the median wall time of the request, i.e. the server's time without the network.

    python bench/bench_ui.py [--jobs 10000] [--repeat 5] [--limit-ms 300]

Prints a table and writes bench/out/bench_ui.json; exits 1 when a page's median is over the limit.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from app.api.app import create_app  # noqa: E402
from app.auth.models import TokenRole  # noqa: E402
from app.auth.service import create_token  # noqa: E402
from app.demo import _store, bundled_logs  # noqa: E402
from app.diagnoses import service as diagnoses  # noqa: E402
from app.diagnoses.executor import run_pipeline  # noqa: E402
from app.failures import service as failures  # noqa: E402
from app.failures.models import GroupState  # noqa: E402
from app.jobs import service as jobs  # noqa: E402
from app.jobs.schemas import JobCreate  # noqa: E402
from app.labels import service as labels  # noqa: E402
from app.labels.models import Verdict  # noqa: E402
from app.labels.schemas import LabelCreate  # noqa: E402
from app.logs import service as logs  # noqa: E402
from app.settings import Settings  # noqa: E402

WORDS = [f"{a}{b}{c}" for a in "bcdfghklmnprst" for b in "aeiou" for c in "xyz"]  # 210 letter-only variants


def seed(client: TestClient, n_jobs: int, rng: random.Random) -> dict:
    services = client.app.state.services
    templates = []
    for demo in bundled_logs():
        sha, size, encoding = _store(services.store, demo.path)
        output = run_pipeline(services.pipeline, str(services.store.blob_path(sha)), None, propose_rules=False)
        if "input_error" not in output:
            templates.append((sha, size, encoding, output))
    now = datetime.now(UTC)
    hosts = [f"gpu-{c}-{i:03d}" for c in "abc" for i in range(134)]
    t0 = time.perf_counter()
    batch = 500
    for start in range(0, n_jobs, batch):
        with services.db.transaction() as session:
            for i in range(start, min(n_jobs, start + batch)):
                sha, size, encoding, output = templates[i % len(templates)]
                cluster = "abc"[i % 3]
                ended = now - timedelta(days=rng.uniform(0, 90))
                placed = rng.sample([h for h in hosts if h[4] == cluster], rng.choice([1, 2, 4, 8]))
                job, _ = jobs.upsert_job(session=session, data=JobCreate(
                    cluster=f"cluster-{cluster}", external_id=f"{1_000_000 + i}", scheduler="slurm",
                    user=f"user{i % 40}", hosts=placed, gpu_count=8 * len(placed),
                    started_at=ended - timedelta(hours=rng.uniform(0.5, 48)), ended_at=ended, state="failed"))
                logs.record_upload(session=session, job=job, attempt=jobs.get_attempt(session=session, job=job),
                                   sha256=sha, size=size, encoding=encoding, error=None, warnings=[])
                diag = diagnoses.request_diagnosis(session=session, job_id=job.id)
                if i % 33 == 5:
                    continue  # still pending
                out = copy.deepcopy(output)
                evidence = out["diagnosis"]["root_cause"].get("evidence") or []
                if evidence:  # a family of failures per template: ~1,500 groups in all
                    evidence[0]["text"] += f" [{WORDS[rng.randrange(len(WORDS)) % 60]}]"
                row = diagnoses.complete_diagnosis(session=session, diagnosis_id=diag.id, output=out)
                if i % 10 == 0:
                    labels.create_label(session=session, diagnosis_id=row.id, data=LabelCreate(verdict=Verdict.CONFIRM),
                                        created_by="bench")
        print(f"  {min(n_jobs, start + batch)} jobs ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    with services.db.transaction() as session:
        groups = failures.list_groups(session=session)
        for g in groups[:40]:
            failures.set_group_state(session=session, fingerprint=g.fingerprint, state=GroupState.KNOWN,
                                     note="bench", updated_by="bench")
    return {"templates": len(templates), "groups": len(groups)}


class _Keep:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> str:
        return str(self.path)

    def __exit__(self, *exc: object) -> None:
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--limit-ms", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", type=Path, help="keep the data dir here and reuse it when it holds a database")
    args = ap.parse_args()
    if args.data:
        args.data.mkdir(parents=True, exist_ok=True)
    with (tempfile.TemporaryDirectory(prefix="logdx-bench-ui-") if not args.data else _Keep(args.data)) as tmp:
        reuse = args.data is not None and (Path(tmp) / "logdx.db").exists()
        os.environ["LOGDX_DATA_DIR"] = tmp
        settings = Settings(data_dir=Path(tmp), run_worker=False, diagnosis_executor="thread")
        app = create_app(settings)
        with TestClient(app) as client:
            t0 = time.perf_counter()
            info_file = Path(tmp) / "bench-ui.json"
            if reuse:
                info = json.loads(info_file.read_text())
            else:
                info = seed(client, args.jobs, random.Random(args.seed))
                info_file.write_text(json.dumps(info))
            seeded_s = time.perf_counter() - t0
            services = app.state.services
            token = services.db.run(create_token, role=TokenRole.ENGINEER, name="bench-ui")[1]
            form = client.get("/ui/login")
            csrf = form.text.split('name="csrf" value="')[1].split('"')[0]
            assert client.post("/ui/login", data={"token": token, "csrf": csrf, "next": "/ui/"},
                               follow_redirects=False).status_code == 303
            with services.db.transaction() as session:
                items, _ = failures.list_failures(session=session, flt=failures.FailureFilter(), limit=5, offset=0)
                job_id = next(f.job.id for f in items if f.diagnosis is not None)
                fp = next(f.diagnosis.fingerprint for f in items if f.diagnosis is not None)
            pages = [
                ("failures", "/ui/"), ("failures, page 20", "/ui/?offset=950"),
                ("failures, 24 h", "/ui/?range=24h"), ("failures, search", "/ui/?q=user7"),
                ("failures, one group", f"/ui/?group={fp}"), ("failures CSV", "/ui/failures.csv?range=7d"),
                ("groups", "/ui/groups"), ("groups, page 10", "/ui/groups?offset=450"),
                ("groups CSV", "/ui/groups.csv"),
                ("job", f"/ui/jobs/{job_id}"), ("job, charts zoomed", f"/ui/jobs/{job_id}?zoom=0:100"),
                ("raw log, search", f"/ui/jobs/{job_id}/log?q=error"),
                ("raw log, around a line", f"/ui/jobs/{job_id}/log?around=50"),
                ("statistics, 30 d", "/ui/stats"), ("statistics, all", "/ui/stats?range=all"),
                ("statistics CSV", "/ui/stats.csv?range=all"), ("node view", "/ui/hosts/gpu-a-001"),
                ("rules", "/ui/rules"),
            ]
            results = []
            for name, url in pages:
                resp = client.get(url)
                assert resp.status_code == 200, (url, resp.status_code, resp.text[:300])
                times = []
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    resp = client.get(url)
                    times.append((time.perf_counter() - t) * 1000)
                results.append({"page": name, "url": url, "median_ms": round(statistics.median(times), 1),
                                "max_ms": round(max(times), 1), "kb": round(len(resp.content) / 1024, 1)})
    over = [r for r in results if r["median_ms"] > args.limit_ms]
    print(f"{args.jobs:,} jobs ({info['groups']:,} groups, {info['templates']} diagnosed logs), "
          f"seeded in {seeded_s:.0f} s; median of {args.repeat}, limit {args.limit_ms:.0f} ms")
    print(f"{'page':28} {'median ms':>10} {'max ms':>8} {'KB':>8}")
    for r in results:
        print(f"{r['page']:28} {r['median_ms']:>10} {r['max_ms']:>8} {r['kb']:>8}{'  OVER' if r in over else ''}")
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_ui.json").write_text(json.dumps({"jobs": args.jobs, **info, "pages": results}, indent=2))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
