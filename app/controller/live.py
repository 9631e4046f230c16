"""Live watching of logs streamed to the service in chunks, while the job still runs.

A chunked log is a growing part file on disk until it is sealed. The monitor tails every log
still receiving, feeds a LiveWatcher per log (app/controller/watch.py), records each alert in
the job's audit log (`kind="alert"`), and on a stall diagnoses the log so far and asks the
controller to recover (dry-run unless the cluster is enabled): the Hang policy captures the
evidence and restarts the job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from sqlalchemy import func, select

from app.actions.service import finish_action, record_action
from app.controller.watch import Alert, LiveWatcher
from app.core.rules import RuleSet
from app.db.engine import Database
from app.diagnoses import service as diagnoses
from app.jobs.models import Attempt
from app.logs.models import JobLog, LogKind, LogStatus
from app.logs.storage import BlobStore

log = logging.getLogger("logdx.live")


@dataclass
class _Tail:
    watcher: LiveWatcher
    job_id: int
    pos: int = 0
    partial: bytes = b""
    stalls: int = 0
    alerts: list[Alert] = field(default_factory=list)


class LiveMonitor:
    def __init__(self, *, db: Database, store: BlobStore, ruleset: RuleSet, factor: float, floor_s: float,
                 straggler_factor: float, clock: Callable[[], float], startup_s: float | None = None) -> None:
        self.db, self.store, self.ruleset, self.clock = db, store, ruleset, clock
        self.factor, self.floor_s, self.straggler_factor = factor, floor_s, straggler_factor
        self.startup_s = startup_s
        self.tails: dict[int, _Tail] = {}

    def _receiving(self) -> list[tuple[int, int]]:
        """Chunked logs still receiving that are their job's newest log: an attempt that ended
        (its whole log uploaded by the epilog, or a later attempt started) is not watched, even
        when its shipper never sent the final chunk; its silence is not a stall of the job."""
        with self.db.transaction() as session:
            newest = select(func.max(JobLog.id)).group_by(JobLog.job_id)
            rows = session.execute(select(JobLog.id, JobLog.job_id).where(
                JobLog.kind == LogKind.CHUNKED.value, JobLog.status == LogStatus.RECEIVING.value,
                JobLog.id.in_(newest)))
            return [(r[0], r[1]) for r in rows]

    def scan(self) -> list[tuple[int, int, Alert]]:
        """One pass over the logs still receiving: (log id, job id, alert) for each new alert."""
        now = self.clock()
        live = dict(self._receiving())
        for gone in set(self.tails) - set(live):
            del self.tails[gone]
        out = []
        for log_id, job_id in live.items():
            tail = self.tails.get(log_id)
            if tail is None:
                tail = self.tails[log_id] = _Tail(LiveWatcher(self.ruleset, factor=self.factor, floor_s=self.floor_s,
                                                              straggler_factor=self.straggler_factor,
                                                              startup_s=self.startup_s), job_id)
                tail.watcher.last_growth_at = now
            lines = self._read(log_id, tail)
            for alert in tail.watcher.feed(lines, now) + tail.watcher.tick(now):
                tail.alerts.append(alert)
                if alert.kind == "stall":
                    tail.stalls += 1
                self._record(job_id, alert)
                out.append((log_id, job_id, alert))
        return out

    def _read(self, log_id: int, tail: _Tail) -> list[str]:
        path = self.store.part_path(log_id)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return []
        if size <= tail.pos:
            return []
        with path.open("rb") as f:
            f.seek(tail.pos)
            data = f.read(min(size - tail.pos, 64 << 20))
        tail.pos += len(data)
        chunks = (tail.partial + data).split(b"\n")
        tail.partial = chunks.pop()[-65536:]
        return [c.decode("utf-8", "replace") for c in chunks]

    def _record(self, job_id: int, alert: Alert) -> None:
        with self.db.transaction() as session:
            row = record_action(session=session, job_id=job_id, kind="alert", actor="live-watch", dry_run=True,
                                params={"alert": alert.kind, "message": alert.message,
                                        **{k: v for k, v in alert.details.items() if k != "last_line"}})
            finish_action(session=session, action_id=row.id, status="done", result={})


def _attempt_number(*, session, log_id: int) -> int | None:  # noqa: ANN001
    row = session.execute(select(Attempt.number).join(JobLog, JobLog.attempt_id == Attempt.id)
                          .where(JobLog.id == log_id)).first()
    return row[0] if row else None


async def act_on_stall(*, db: Database, worker, controller, log_id: int, job_id: int, stall_no: int) -> None:  # noqa: ANN001
    """Diagnose the stalled log so far (its own attempt, not whichever is newest by now), then
    recover (a stalled log with progress and no error is a Hang)."""
    attempt = await anyio.to_thread.run_sync(lambda: db.run(_attempt_number, log_id=log_id))
    row = await anyio.to_thread.run_sync(lambda: db.run(diagnoses.request_diagnosis, job_id=job_id, attempt=attempt))
    await worker.execute(row.id, mode="async")
    await anyio.to_thread.run_sync(lambda: controller.recover(
        job_id=job_id, actor="live-watch", diagnosis_id=row.id, idempotency_key=f"live:{log_id}:stall:{stall_no}"))


async def run_monitor(monitor: LiveMonitor, *, interval_s: float, worker, get_controller) -> None:  # noqa: ANN001
    """The server's live-watch loop (started when LOGDX_CONTROLLER_LIVE_WATCH is on)."""
    while True:
        try:
            alerts = await anyio.to_thread.run_sync(monitor.scan)
            for log_id, job_id, alert in alerts:
                if alert.kind == "stall":
                    await act_on_stall(db=monitor.db, worker=worker, controller=get_controller(), log_id=log_id,
                                       job_id=job_id, stall_no=monitor.tails[log_id].stalls)
        except Exception:  # noqa: BLE001 - the loop must survive one bad log or a failed recovery
            log.exception("live watch pass failed")
        await anyio.sleep(interval_s)
