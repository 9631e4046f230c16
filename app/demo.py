"""`logdx demo-data`: loads the bundled example logs as jobs, diagnosed through the same
services the API uses, so a new user sees populated pages in one step.

The logs are real (examples/realworld: public issue reports, see SOURCES.tsv) plus the
synthetic examples/sample_job.log; the job metadata around them (cluster, user, hosts, GPUs,
times) is invented, deterministically, and every job's external id starts with `demo-`. The
sample job is loaded three times on overlapping hosts so that a failure group and a
repeat-offender host appear. One example rule proposal is added for the review page."""

from __future__ import annotations

import hashlib
import random
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app import resources
from app.core.pipeline import Pipeline
from app.db.engine import Database
from app.diagnoses import service as diagnoses
from app.diagnoses.executor import run_pipeline
from app.jobs import service as jobs
from app.jobs.schemas import JobCreate
from app.logs import service as logs
from app.logs.ingest import hash_file
from app.logs.storage import BlobStore
from app.rules_review import service as rules_review
from app.rules_review.models import ProposedRule
from app.rules_review.schemas import ProposedRuleCreate

EXAMPLES = resources.data_dir("examples")
CLUSTERS = ["alpha", "beta"]
USERS = ["mchen", "apatel", "jkim", "lrossi", "team-pretrain"]
DEMO_PROPOSAL = ProposedRuleCreate(
    pattern=r'wandb: Network error \(ConnectTimeout\), entering retry loop',
    error_type="ConnectionError",
    evidence=["wandb: Network error (ConnectTimeout), entering retry loop."],
    hint="wandb cannot reach its server at start-up; retry later or set WANDB_MODE=offline.",
    family="proposed")


@dataclass(frozen=True)
class DemoLog:
    name: str
    path: Path
    copies: int = 1


def bundled_logs(root: Path = EXAMPLES) -> list[DemoLog]:
    out = [DemoLog(p.stem, p) for p in sorted((root / "realworld").glob("*.log"))]
    sample = root / "sample_job.log"
    if sample.exists():
        out.append(DemoLog("sample-megatron-ecc", sample, copies=3))
    return out


def _job_for(name: str, copy: int, now: datetime) -> JobCreate:
    rng = random.Random(hashlib.sha256(f"{name}/{copy}".encode()).digest())
    if name.startswith("sample"):  # the repeated failure: one flaky node in every run
        hosts = ["node-07", f"node-{10 + copy:02d}"]
    else:
        hosts = sorted({f"node-{rng.randrange(1, 24):02d}" for _ in range(rng.choice([1, 1, 2, 4]))})
    ended = now - timedelta(days=rng.uniform(0, 13) if copy == 0 else copy * 2.5, hours=rng.uniform(0, 6))
    started = ended - timedelta(hours=rng.uniform(0.5, 30))
    return JobCreate(cluster=rng.choice(CLUSTERS), external_id=f"demo-{name}" + (f"-{copy}" if copy else ""),
                     scheduler="slurm", user=rng.choice(USERS), hosts=hosts, gpu_count=8 * len(hosts),
                     started_at=started, ended_at=ended, state="failed")


def _store(store: BlobStore, path: Path) -> tuple[str, int, str]:
    check = hash_file(path)
    spool = store.new_spool()
    shutil.copyfile(path, spool)
    store.commit_spool(spool, check.sha256)
    return check.sha256, check.size, getattr(check.encoding, "value", None) or "plain"


def load_demo_data(*, db: Database, store: BlobStore, pipeline: Pipeline, logs_root: Path = EXAMPLES,
                   now: datetime | None = None) -> dict[str, int]:
    """Idempotent: jobs already present (by cluster + external id) and diagnosed are skipped."""
    now = now or datetime.now(UTC)
    counts = {"jobs": 0, "skipped": 0, "proposals": 0}
    for demo in bundled_logs(logs_root):
        for copy in range(demo.copies):
            data = _job_for(demo.name, copy, now)
            job_id, done = db.run(_upsert, data=data)
            if done:
                counts["skipped"] += 1
                continue
            sha, size, encoding = _store(store, demo.path)
            diagnosis_id = db.run(_record_log, job_id=job_id, sha=sha, size=size, encoding=encoding)
            output = run_pipeline(pipeline, str(store.blob_path(sha)), None, propose_rules=False)
            if "input_error" in output:
                db.run(diagnoses.fail_diagnosis, diagnosis_id=diagnosis_id, error=output["input_error"])
            else:
                db.run(diagnoses.complete_diagnosis, diagnosis_id=diagnosis_id, output=output)
            counts["jobs"] += 1
    counts["proposals"] = db.run(_propose, ruleset=pipeline.ruleset)
    return counts


def _upsert(*, session, data: JobCreate) -> tuple[int, bool]:  # noqa: ANN001
    job, _created = jobs.upsert_job(session=session, data=data)
    return job.id, job.diagnosis_id is not None


def _record_log(*, session, job_id: int, sha: str, size: int, encoding: str) -> int:  # noqa: ANN001
    job = jobs.get_job(session=session, job_id=job_id)
    logs.record_upload(session=session, job=job, attempt=jobs.get_attempt(session=session, job=job), sha256=sha,
                       size=size, encoding=encoding, error=None, warnings=[])
    return diagnoses.request_diagnosis(session=session, job_id=job_id).id


def _propose(*, session, ruleset) -> int:  # noqa: ANN001
    from sqlalchemy import select

    if session.scalars(select(ProposedRule.id).where(ProposedRule.pattern == DEMO_PROPOSAL.pattern)).first():
        return 0
    rules_review.propose_rule(session=session, data=DEMO_PROPOSAL, proposed_by="demo-data (example proposal)",
                              ruleset=ruleset)
    return 1
