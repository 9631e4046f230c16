"""Service commands for the `logdx` CLI: `logdx serve`, `logdx worker` and
`logdx token create|list|revoke`.
The main CLI mounts them with `register(cli)`; `python -m app.service_cli` runs them alone."""

from __future__ import annotations

import sys

import click
from pydantic import ValidationError

from app.auth.models import TokenRole
from app.settings import Settings

EXIT_BAD_INPUT = 2


def _settings() -> Settings:
    try:
        settings = Settings()
    except ValidationError as exc:
        click.echo(f"logdx: bad LOGDX_* setting: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    settings.ensure_dirs()
    return settings


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
def serve(host: str, port: int, log_level: str) -> None:
    """Run the REST API (settings from LOGDX_* environment variables)."""
    import uvicorn

    from app.api.app import create_app
    from app.api.http_protocol import JsonErrorH11Protocol
    from app.core.rules import RuleError

    settings = _settings()
    try:
        app = create_app(settings)
    except RuleError as exc:
        click.echo(f"logdx: bad rules: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    # one process: the SQLite worker pool and the chunk locks live in it (see docs/SERVICE.md)
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=10,
                proxy_headers=True, log_config=_log_config(log_level), http=JsonErrorH11Protocol)


def _log_config(level: str) -> dict:
    """uvicorn's logging plus logdx's own loggers (start-up recovery, workers, the LLM step),
    which otherwise have no handler and lose everything under WARNING."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["logdx"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    return config


@click.command()
def worker() -> None:
    """Run background diagnoses and batch re-labeling tasks without the HTTP API (PostgreSQL only:
    jobs come from procrastinate)."""
    import asyncio

    from app.api.app import build_services, prepare_database

    settings = _settings()
    if not settings.is_postgres:
        click.echo("logdx: `logdx worker` needs LOGDX_DATABASE_URL=postgresql+psycopg://...; with SQLite "
                   "the server runs its own worker", err=True)
        sys.exit(EXIT_BAD_INPUT)
    import logging.config

    logging.config.dictConfig(_log_config("info"))
    services = build_services(settings.model_copy(update={"run_worker": True}))
    prepare_database(services)

    async def run() -> None:
        await services.queue.start()
        await services.relabel.start()  # batch re-labeling tasks share the worker
        try:
            await asyncio.Event().wait()
        finally:
            await services.relabel.stop()
            await services.queue.stop()
            services.executor.shutdown()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


@click.command()
def migrate() -> None:
    """Upgrade the database to the newest schema and check it (what `serve` does at start-up;
    deploy/entrypoint.sh runs it first, so a failed migration stops the deployment before it serves)."""
    from app.db.engine import Database
    from app.db.migrate import check_database, current_revision, head_revision, upgrade_to_head

    settings = _settings()
    db = Database(settings.effective_database_url)
    try:
        check_database(db.engine)
        before = current_revision(db.engine)
        upgrade_to_head(db.engine)
    except Exception as exc:  # one line saying why (bad URL, unreachable server, corrupt file)
        click.echo(f"logdx: cannot migrate {db.engine.url.render_as_string(hide_password=True)}: "
                   f"{type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    finally:
        db.engine.dispose()
    head = head_revision()
    click.echo(f"migrated the database from {before or 'empty'} to {head}" if before != head else
               f"the database is at the newest revision, {head}", err=True)


@click.group()
def token() -> None:
    """Manage API tokens (stored hashed; shown once)."""


def _database(settings: Settings):  # noqa: ANN202
    from app.db.engine import Database
    from app.db.migrate import upgrade_to_head

    db = Database(settings.effective_database_url)
    upgrade_to_head(db.engine)
    return db


@token.command("create")
@click.option("--role", required=True, type=click.Choice([r.value for r in TokenRole]),
              help="scheduler < engineer < admin")
@click.option("--name", default=None, type=click.STRING,
              help="Who or what uses the token (shown in labels and audit; at most 128 characters).")
@click.option("--cluster", "clusters", multiple=True,
              help="Scope a scheduler token to this cluster's jobs (repeat for several; default: every cluster).")
def token_create(role: str, name: str | None, clusters: tuple[str, ...]) -> None:
    """Print a new API token for ROLE."""
    from app.auth.service import create_token

    if name is not None and not (0 < len(name) <= 128 and name.isprintable()):
        raise click.BadParameter("1 to 128 printable characters", param_hint="--name")
    if clusters and role != TokenRole.SCHEDULER.value:
        raise click.BadParameter("only scheduler tokens take a cluster scope; engineers and admins see every "
                                 "cluster", param_hint="--cluster")
    if any(not (0 < len(c) <= 128 and c.isprintable()) for c in clusters):
        raise click.BadParameter("1 to 128 printable characters", param_hint="--cluster")
    db = _database(_settings())
    row, secret = db.run(create_token, role=TokenRole(role), name=name or f"{role}-token",
                         clusters=list(clusters) or None)
    scope = f", clusters {', '.join(row.clusters)}" if row.clusters else ""
    click.echo(f"created token {row.id} ({row.name}, role {row.role}{scope}); it is shown only once:", err=True)
    click.echo(secret)


@token.command("list")
def token_list() -> None:
    """List tokens (never their secrets)."""
    from app.auth.service import list_tokens

    db = _database(_settings())
    with db.transaction() as session:
        rows = list(list_tokens(session=session))
        if not rows:
            click.echo("no tokens yet; create one with: logdx token create --role scheduler", err=True)
            return
        click.echo("id\trole\tstate\tname\tcreated\tclusters")
        for row in rows:
            state = "revoked" if row.revoked_at else "active"
            clusters = ",".join(row.clusters) if row.clusters else "*"
            click.echo(f"{row.id}\t{row.role}\t{state}\t{row.name}\t{row.created_at:%Y-%m-%d}\t{clusters}")


@token.command("revoke")
@click.argument("token_id", type=int)
def token_revoke(token_id: int) -> None:
    """Revoke token TOKEN_ID."""
    from app.auth.service import revoke_token
    from app.errors import NotFound

    db = _database(_settings())
    try:
        db.run(revoke_token, token_id=token_id)
    except NotFound as exc:
        click.echo(f"logdx: {exc.message}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo(f"revoked token {token_id}", err=True)


@click.command("demo-data")
@click.option("--logs", "logs_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Folder with realworld/*.log and sample_job.log (default: the bundled examples/).")
def demo_data(logs_dir: str | None) -> None:
    """Load the bundled example logs as diagnosed demo jobs (ids `demo-…`), for a populated UI."""
    from pathlib import Path

    from app.core.rules import RuleError
    from app.demo import EXAMPLES, load_demo_data
    from app.diagnoses.executor import build_pipeline
    from app.logs.storage import BlobStore

    settings = _settings()
    root = Path(logs_dir) if logs_dir else EXAMPLES
    if not (root / "realworld").is_dir() and not (root / "sample_job.log").exists():
        click.echo(f"logdx: no example logs under {root} (expected realworld/*.log or sample_job.log)", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        pipeline = build_pipeline(settings)
    except RuleError as exc:
        click.echo(f"logdx: bad rules: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    counts = load_demo_data(db=_database(settings), store=BlobStore(settings), pipeline=pipeline, logs_root=root)
    click.echo(f"loaded {counts['jobs']} demo jobs ({counts['skipped']} already there), "
               f"{counts['proposals']} example rule proposal; open http://127.0.0.1:8000/ui/ after `logdx serve`",
               err=True)


def register(cli: click.Group) -> None:
    cli.add_command(serve)
    cli.add_command(migrate)
    cli.add_command(demo_data)
    cli.add_command(worker)
    cli.add_command(token)


@click.group()
def main() -> None:
    """logdx service commands."""


register(main)

if __name__ == "__main__":
    main()
