"""Re-labeling on the real task engine: procrastinate on PostgreSQL with two `logdx worker`
processes. One is SIGKILLed while it diagnoses a log; the other retries the dead worker's task
once its heartbeat stops, and every log ends up imported and diagnosed exactly once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from sqlalchemy import func, select, text

from app.db.engine import Database
from app.db.migrate import upgrade_to_head
from app.diagnoses.models import DiagnosisRow
from app.jobs.models import Job
from app.logs.storage import BlobStore
from app.relabel import service
from app.relabel.archive import discover
from app.relabel.models import ItemStatus, RelabelItem
from app.relabel.tasks import ProcrastinateRelabelQueue, RelabelWorker
from app.settings import Settings
from tests.relabel.conftest import REPO, SHIPPED_RULES, _gen_log, kill_group, wait_for
from tests.service.conftest import PG_URL, reset_postgres

pytestmark = [pytest.mark.slow, pytest.mark.postgres,
              pytest.mark.skipif(not PG_URL, reason="needs LOGDX_TEST_POSTGRES_URL (.ci/postgres.sh)")]

LOGS = 10


def _start_worker(env: dict[str, str], log_path) -> subprocess.Popen:  # noqa: ANN001
    out = open(log_path, "ab")  # noqa: SIM115
    return subprocess.Popen([sys.executable, "-m", "app.service_cli", "worker"], cwd=REPO, env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def test_two_workers_process_each_log_exactly_once_when_one_is_killed(tmp_path):
    reset_postgres(PG_URL)
    archive = tmp_path / "archive"
    gen = _gen_log()
    for i in range(LOGS):  # big enough that a worker is caught in the middle of one
        gen.generate(archive / f"job-{i:02d}.log", 6.0, seed=100 + i)
    settings = Settings(data_dir=tmp_path / "data", database_url=PG_URL, rules_dir=SHIPPED_RULES,
                        diagnosis_executor="thread", diagnosis_workers=1)
    settings.ensure_dirs()
    db = Database(PG_URL)
    upgrade_to_head(db.engine)
    queue = ProcrastinateRelabelQueue(
        worker=RelabelWorker(db=db, store=BlobStore(settings), settings=settings), db=db, enabled=False,
        concurrency=1)
    asyncio.run(asyncio.wait_for(_open_and_close(queue), 60))  # applies procrastinate's schema

    env = {**os.environ, "PYTHONPATH": str(REPO), "LOGDX_DATABASE_URL": PG_URL,
           "LOGDX_DATA_DIR": str(settings.data_dir), "LOGDX_RULES_DIR": str(SHIPPED_RULES),
           "LOGDX_DIAGNOSIS_EXECUTOR": "thread", "LOGDX_DIAGNOSIS_WORKERS": "1",
           "LOGDX_RELABEL_HEARTBEAT_S": "0.5", "LOGDX_RELABEL_STALLED_AFTER_S": "3"}
    workers = [_start_worker(env, tmp_path / f"worker-{n}.log") for n in range(2)]
    try:
        # each `logdx worker` registers two procrastinate workers (diagnoses, relabel)
        wait_for(lambda: db.run(lambda session: session.scalar(
            text("SELECT count(*) FROM procrastinate_workers"))) >= 4, 90, "both workers to start")
        run = db.run(service.create_archive_run, files=discover(str(archive)), archive=str(archive),
                     cluster="engine", dry_run=False, rules_dir=None, rules_version=None, batch_size=1,
                     created_by="test")
        ranges = db.run(service.open_ranges, run_id=run.id)
        assert len(ranges) == LOGS
        asyncio.run(_submit(queue, run.id, ranges))

        victim, survivor = workers
        mark = f":{victim.pid}"

        def victim_busy() -> int | None:
            """An item the victim is working on, once it has finished another one."""
            def query(session):  # noqa: ANN001, ANN202
                mine = RelabelItem.worker.endswith(mark)
                if not session.scalar(select(func.count(RelabelItem.id)).where(
                        mine, RelabelItem.status == ItemStatus.DONE.value)):
                    return None
                return session.scalar(select(RelabelItem.id).where(mine, RelabelItem.status == ItemStatus.RUNNING.value))
            return db.run(query)

        killed_item = wait_for(victim_busy, 120, "the first worker to be in the middle of a log", every=0.02)
        kill_group(victim)

        def all_finished() -> bool:
            return db.run(lambda session: session.scalar(select(func.count(RelabelItem.id)).where(
                RelabelItem.run_id == run.id, RelabelItem.status.in_(("pending", "running"))))) == 0

        wait_for(all_finished, 180, "the surviving worker to finish the run", every=0.2)
        items = db.run(lambda session: list(session.scalars(
            select(RelabelItem).where(RelabelItem.run_id == run.id).order_by(RelabelItem.id))))
        assert {i.status for i in items} == {ItemStatus.DONE.value}
        killed = next(i for i in items if i.id == killed_item)
        assert killed.runs == 2 and killed.worker.endswith(f":{survivor.pid}")
        assert all(i.runs == 1 for i in items if i.id != killed_item)
        assert {i.worker.rsplit(":", 1)[1] for i in items} == {str(victim.pid), str(survivor.pid)}
        # exactly once: one job, one log and one diagnosis per file
        assert db.run(lambda session: session.scalar(select(func.count(Job.id)))) == LOGS
        per_job = db.run(lambda session: session.execute(
            select(DiagnosisRow.job_id, func.count(DiagnosisRow.id)).group_by(DiagnosisRow.job_id)).all())
        assert len(per_job) == LOGS and {n for _, n in per_job} == {1}
        assert sorted(i.new_diagnosis_id for i in items) == sorted(
            db.run(lambda session: list(session.scalars(select(DiagnosisRow.id)))))
        # the dead worker's task was retried by the engine, not run again by hand
        states = db.run(lambda session: session.execute(text(
            "SELECT status, attempts FROM procrastinate_jobs WHERE queue_name = 'relabel'")).all())
        assert len(states) == LOGS and {s for s, _ in states} == {"succeeded"}
        assert sorted(a for _, a in states)[-1] >= 1
        assert db.run(lambda session: service.get_run(session=session, run_id=run.id).status) == "done"
    finally:
        for proc in workers:
            kill_group(proc)
        db.dispose()


async def _open_and_close(queue: ProcrastinateRelabelQueue) -> None:
    await queue.start()
    await queue.app.close_async()


async def _submit(queue: ProcrastinateRelabelQueue, run_id: int, ranges) -> None:  # noqa: ANN001
    async with queue.app.open_async():
        await queue.submit(run_id, ranges)
