"""`logdx relabel` and `logdx rules diff`: batch re-diagnosis from the command line, with the
same services as the API. Exit codes as the rest of the CLI: 0 done (failed logs are reported,
never fatal), 2 bad usage or settings, 130 interrupted (the run resumes with --resume)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from datetime import UTC
from pathlib import Path

import click

from app.relabel.report import DiffReport, Outcome, build_report, outcomes_csv

EXIT_BAD_INPUT = 2
POLL_S = 0.5


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    click.echo(f"logdx: {message}", err=True)
    sys.exit(code)


def print_report(report: DiffReport, *, title: str, max_rows: int = 30) -> None:
    """The diff report as terminal tables (stdout)."""
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False)
    con.print(f"[bold]{title}[/]: {report.logs} logs, {report.done} diagnosed, {report.failed} failed, "
              f"{report.changed} changed, {report.unchanged} unchanged, {report.new} new; "
              f"rules {report.rules_version}")
    moves = sorted(((o, n, c) for o, row in report.transitions.items() for n, c in row.items() if n != o),
                   key=lambda m: (-m[2], m[0], m[1]))
    if moves:
        # the full matrix is in the JSON; a terminal shows its off-diagonal cells
        t = Table("old error type", "new error type", "logs", title="transitions (old -> new)", title_justify="left")
        for o, n, c in moves[:max_rows]:
            t.add_row(o, n, str(c))
        con.print(t)
    kept = Counter({o: row[o] for o, row in report.transitions.items() if row.get(o)})
    if kept:
        con.print("unchanged: " + ", ".join(f"{o} {c}" for o, c in kept.most_common()))
    if report.by_rules_version:
        t = Table("diagnosed before by rules version", "logs", "changed", title_justify="left")
        for v in report.by_rules_version:
            t.add_row(v.rules_version, str(v.logs), str(v.changed))
        con.print(t)
    if report.by_rule:
        t = Table("rule", "lost", "gained", title="root-cause rule of changed logs", title_justify="left")
        for r in report.by_rule:
            t.add_row(r.rule_id, str(r.lost), str(r.gained))
        con.print(t)
    if report.changed_logs:
        t = Table("log", "old", "new", "old rule", "new rule", "link", title=f"changed logs ({report.changed})",
                  title_justify="left")
        for c in report.changed_logs[:max_rows]:
            t.add_row(c.key[-60:], c.old_error_type or "(new)", c.new_error_type or "", c.old_rule_id or "",
                      c.new_rule_id or "", c.links.get("new_diagnosis") or c.links.get("job", ""))
        con.print(t)
        if report.changed > max_rows:
            con.print(f"... and {report.changed - max_rows} more (see --json/--csv)")
    h = report.human
    if h.labelled:
        con.print(f"human labels: {h.labelled} labelled; agree before {h.agree_before}, after {h.agree_after}; "
                  f"{len(h.regressions)} regressions, {len(h.fixed)} fixed")
        for c in h.regressions[:max_rows]:
            con.print(f"  [red]regression[/] {c.key}: label {c.human_error_type}, was {c.old_error_type}, "
                      f"now {c.new_error_type} ({c.new_rule_id})", markup=True)
    for f in report.failed_logs[:max_rows]:
        con.print(f"  [yellow]failed[/] {f.key}: {f.error}", markup=True)


def _write_outputs(report: DiffReport, outcomes: list[Outcome], json_path: str | None, csv_path: str | None) -> None:
    if json_path:
        Path(json_path).write_text(json.dumps(report.model_dump(mode="json", by_alias=True), indent=2) + "\n",
                                   encoding="utf-8")
    if csv_path:
        Path(csv_path).write_text(outcomes_csv(outcomes), encoding="utf-8")


def _settings(rules_dir: str | None, workers: int | None):  # noqa: ANN202
    from pydantic import ValidationError

    from app.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        _fail(f"bad LOGDX_* setting: {exc}")
    update = {}
    if rules_dir:
        update["rules_dir"] = Path(rules_dir).resolve()
    if workers:
        update["diagnosis_workers"] = workers
    settings = settings.model_copy(update=update)
    settings.ensure_dirs()
    return settings


def _create_run(db, settings, *, archive, import_cluster, selection, dry_run, batch_size, rules_version) -> int:  # noqa: ANN001
    from app.errors import AppError
    from app.relabel import service
    from app.relabel.archive import discover

    rules_dir = str(settings.rules_dir) if settings.rules_dir else None
    try:
        if archive:
            files = discover(archive)
            run = db.run(service.create_archive_run, files=files, archive=archive, cluster=import_cluster,
                         dry_run=dry_run, rules_dir=rules_dir, rules_version=rules_version, batch_size=batch_size,
                         created_by="cli")
        else:
            run = db.run(service.create_stored_run, selection=selection, dry_run=dry_run, rules_dir=rules_dir,
                         rules_version=rules_version, batch_size=batch_size, created_by="cli")
    except AppError as exc:
        _fail(exc.message)
    return run.id


async def _drive(*, settings, db, store, run_id: int, workers: int, work: bool, quiet: bool) -> bool:  # noqa: ANN001
    """Queue the run's open ranges and (unless `work` is off) work on them here until the run is
    done, showing progress. Returns whether the run finished."""
    import anyio

    from app.relabel import service
    from app.relabel.progress import ProgressView
    from app.relabel.tasks import LocalRelabelQueue, build_queue

    queue = build_queue(settings=settings, db=db, store=store, run_worker=work, processes=workers,
                        resume_on_start=False)
    await queue.start()
    try:
        ranges = await anyio.to_thread.run_sync(lambda: db.run(service.open_ranges, run_id=run_id))
        await queue.submit(run_id, ranges)
        if not work:
            return False
        run = await anyio.to_thread.run_sync(lambda: db.run(service.get_run, run_id=run_id))
        view = None if quiet else ProgressView(files=run.total_items, total_bytes=run.total_bytes)
        local = queue.join() if isinstance(queue, LocalRelabelQueue) else None
        joiner = asyncio.ensure_future(local) if local is not None else None
        stall_s = max(60.0, 3 * settings.relabel_stalled_after_s)
        last_change, last_done = time.monotonic(), -1
        try:
            while True:
                p = await anyio.to_thread.run_sync(lambda: db.run(service.progress, run_id=run_id))
                if view:
                    view.update(p.done + p.failed, p.bytes_done)
                if p.open == 0:
                    break
                if p.done + p.failed != last_done:
                    last_change, last_done = time.monotonic(), p.done + p.failed
                elif joiner is None and time.monotonic() - last_change > stall_s:
                    # task engine: a task that failed for good (database gone for a while, say)
                    # leaves items open; queue them again (finished items are never redone)
                    await queue.submit(run_id, await anyio.to_thread.run_sync(
                        lambda: db.run(service.open_ranges, run_id=run_id)))
                    last_change = time.monotonic()
                if joiner is not None and joiner.done():
                    joiner.result()  # raises what stopped the local workers
                    if p.open:  # items left open by a crash of this process's pool: run them again
                        await queue.submit(run_id, await anyio.to_thread.run_sync(
                            lambda: db.run(service.open_ranges, run_id=run_id)))
                        joiner = asyncio.ensure_future(queue.join())
                await asyncio.sleep(POLL_S)
            await anyio.to_thread.run_sync(lambda: db.run(service.finish_run_if_complete, run_id=run_id))
        finally:
            if view:
                view.close()
            if joiner is not None and not joiner.done():
                joiner.cancel()
        return True
    finally:
        await queue.stop()


@click.command()
@click.option("--archive", metavar="DIR|GLOB", help="Import and label the logs of a directory or glob (plain, gz, zst).")
@click.option("--cluster", help="Stored jobs of this cluster; with --archive, the cluster name of imported jobs.")
@click.option("--since", type=click.DateTime(), help="Stored jobs that ended at or after (UTC).")
@click.option("--until", type=click.DateTime(), help="Stored jobs that ended before (UTC).")
@click.option("--error-type", help="Stored jobs whose current error type is this.")
@click.option("--diagnosed-by", metavar="RULES_VERSION", help="Stored jobs whose current diagnosis used these rules.")
@click.option("--only-stale", is_flag=True, help="Skip jobs already diagnosed by the current rules version.")
@click.option("--dry-run", is_flag=True, help="Compute the diff report only: no diagnosis, job or log is written.")
@click.option("--rules", "rules_dir", type=click.Path(file_okay=False, exists=True),
              help="Rules directory (default: LOGDX_RULES_DIR, else the shipped rules); on PostgreSQL every "
                   "worker must be able to read it at the same path.")
@click.option("--workers", type=click.IntRange(1, 512), default=None,
              help="Processes diagnosing logs here (default: one per core).")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=16, show_default=True, help="Logs per task.")
@click.option("--resume", "resume_id", type=int, help="Resume run RESUME_ID where it stopped.")
@click.option("--enqueue-only", is_flag=True, help="PostgreSQL: queue the tasks for `logdx worker` processes and exit.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the diff report as JSON here.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write one CSV row per log here.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def relabel(archive, cluster, since, until, error_type, diagnosed_by, only_stale, dry_run, rules_dir, workers,  # noqa: ANN001, PLR0913
            batch_size, resume_id, enqueue_only, json_path, csv_path, quiet) -> None:
    """Re-diagnose stored jobs (or import an archive) with the current rules, prompts and model.

    New diagnoses never replace old ones and human labels are never changed; the diff report
    (old -> new error types, rules, changed jobs, agreement with human labels) is printed at the
    end. Interrupted runs continue with --resume RUN_ID."""
    from pydantic import ValidationError

    from app.core.rules import RuleError
    from app.db.engine import Database
    from app.db.migrate import upgrade_to_head
    from app.diagnoses.executor import build_pipeline
    from app.errors import AppError
    from app.logs.storage import BlobStore
    from app.relabel import service
    from app.relabel.schemas import StoredSelection

    settings = _settings(rules_dir, workers)
    if enqueue_only and not settings.is_postgres:
        _fail("--enqueue-only needs LOGDX_DATABASE_URL=postgresql+psycopg://... (SQLite runs its work here)")
    workers = workers or os.cpu_count() or 1
    db = Database(settings.effective_database_url)
    if settings.migrate_on_startup:
        upgrade_to_head(db.engine)
    store = BlobStore(settings)
    if resume_id is not None:
        try:
            run = db.run(service.get_run, run_id=resume_id)
        except AppError as exc:
            _fail(exc.message)
        if run.rules_dir:
            settings = settings.model_copy(update={"rules_dir": Path(run.rules_dir)})
        run_id = run.id
    else:
        try:
            rules_version = build_pipeline(settings).ruleset.version
        except RuleError as exc:
            _fail(f"bad rules: {exc}")
        try:
            utc = {k: v.replace(tzinfo=UTC) if v else None for k, v in (("since", since), ("until", until))}
            selection = StoredSelection(cluster=cluster, since=utc["since"], until=utc["until"],
                                        error_type=error_type, diagnosed_by=diagnosed_by, only_stale=only_stale)
        except ValidationError as exc:
            err = exc.errors()[0]
            _fail(f"bad filter {'.'.join(map(str, err['loc']))}: {err['msg']}")
        run_id = _create_run(db, settings, archive=archive, import_cluster=cluster or "archive",
                             selection=selection, dry_run=dry_run, batch_size=batch_size,
                             rules_version=rules_version)
    run = db.run(service.get_run, run_id=run_id)
    click.echo(f"re-labeling run {run_id}: {run.total_items} logs, {run.total_bytes / 1e6:.1f} MB"
               f"{' (dry run)' if run.dry_run else ''}; resume with: logdx relabel --resume {run_id}", err=True)
    try:
        finished = asyncio.run(_drive(settings=settings, db=db, store=store, run_id=run_id, workers=workers,
                                      work=not enqueue_only, quiet=quiet))
    except KeyboardInterrupt:
        _fail(f"interrupted; resume with: logdx relabel --resume {run_id}", 130)
    if not finished:
        click.echo(f"queued run {run_id} for `logdx worker` processes; follow it with GET /v1/relabel/{run_id}",
                   err=True)
        return
    with db.transaction() as session:
        report = service.report(session=session, run_id=run_id)
        outcomes = list(service.outcomes(session=session, run_id=run_id)) if csv_path else []
    print_report(report, title=f"re-labeling run {run_id}")
    _write_outputs(report, outcomes, json_path, csv_path)
    db.dispose()


def rules_diff_command(old_dir: str, new_dir: str, logs: str, workers: int | None, json_path: str | None,
                       csv_path: str | None, quiet: bool) -> None:
    """What a rule change does to a set of logs (`logdx rules diff`)."""
    from app.core.rules import RuleError
    from app.errors import AppError
    from app.relabel.archive import discover
    from app.relabel.progress import ProgressView
    from app.relabel.whatif import diff_rules

    try:
        files = discover(logs)
    except AppError as exc:
        _fail(exc.message)
    if not files:
        _fail(f"no log files under {logs}")
    view = None if quiet else ProgressView(files=len(files), total_bytes=sum(f.size for f in files), label="rules diff")
    done = [0, 0]

    def tick(f) -> None:  # noqa: ANN001
        done[0] += 1
        done[1] += f.size
        if view:
            view.update(*done)

    try:
        outcomes, old_v, new_v = diff_rules(old_dir=Path(old_dir), new_dir=Path(new_dir), files=files,
                                            workers=workers or os.cpu_count() or 1, on_result=tick)
    except RuleError as exc:
        _fail(f"bad rules: {exc}")
    finally:
        if view:
            view.close()
    report = build_report(outcomes, rules_version=new_v)
    print_report(report, title=f"rules {old_v} -> {new_v} on {len(files)} logs")
    _write_outputs(report, outcomes, json_path, csv_path)
